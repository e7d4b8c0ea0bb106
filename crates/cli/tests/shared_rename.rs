//! Two clients rename one file at once, each to a name on another metadata server
//! than the old one's (a rename in two steps: the new name, then the old one's
//! removal). One wins; the other fails with ENOENT and leaves nothing behind: no
//! second name of the file, as a rename on one machine never does.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{Cluster, TestClient};
use pvfs_client::{Errno, LayoutSpec};

/// Iterations: each races the two renames once.
const ROUNDS: usize = 60;

#[test]
fn a_rename_that_loses_a_race_across_servers_leaves_no_second_name() {
    let cluster = Cluster::start();
    let config = cluster.config().clone();
    let setup = cluster.client();
    let shards = config.defaults.dir_shards;
    // The names of each round: the old one in /s, the two new ones in /a and /b,
    // each new one on another server than the old one.
    let names = setup.run(Duration::from_secs(60), async |c| {
        for d in ["/s", "/a", "/b"] {
            c.mkdir(d, 0o755).await.unwrap();
        }
        let dir = async |p: &str| c.stat(p).await.unwrap().handle;
        let (s, a, b) = (dir("/s").await, dir("/a").await, dir("/b").await);
        let on = |d, n: &str| config.entry_server(d, shards, n);
        let mut names = Vec::new();
        for k in 0..ROUNDS {
            let src = format!("f{k}");
            let apart = |d, stem: &str| {
                (0..64)
                    .map(|j| format!("{stem}{k}.{j}"))
                    .find(|n| on(d, n) != on(s, &src))
                    .unwrap()
            };
            let (x, y) = (apart(a, "x"), apart(b, "y"));
            c.create(&format!("/s/{src}"), 0o644, LayoutSpec::default(), true)
                .await
                .unwrap();
            names.push((format!("/s/{src}"), format!("/a/{x}"), format!("/b/{y}")));
        }
        names
    });

    let start = Arc::new(Barrier::new(2));
    let racer = |to: usize| {
        let (names, start, config) = (names.clone(), start.clone(), config.clone());
        std::thread::spawn(move || {
            let tc = TestClient::new(config);
            tc.run(Duration::from_secs(300), async |c| {
                let mut won = Vec::new();
                for (src, x, y) in &names {
                    start.wait();
                    let dst = if to == 0 { x } else { y };
                    // No panic here: the other thread would wait at the barrier.
                    won.push(match c.rename(src, dst).await {
                        Ok(()) => Ok(true),
                        Err(e) if e.errno == Errno::ENOENT => Ok(false),
                        Err(e) => Err(format!("rename {src} -> {dst}: {e}")),
                    });
                }
                won
            })
        })
    };
    let (a, b) = (racer(0), racer(1));
    let outcomes = |t: std::thread::JoinHandle<Vec<Result<bool, String>>>| -> Vec<bool> {
        t.join().unwrap().into_iter().map(|r| r.unwrap()).collect()
    };
    let (a, b) = (outcomes(a), outcomes(b));

    setup.run(Duration::from_secs(120), async |c| {
        for (i, (_, x, y)) in names.iter().enumerate() {
            assert!(
                a[i] != b[i],
                "round {i}: both or neither renamed ({}, {})",
                a[i],
                b[i]
            );
            let (won, lost) = if a[i] { (x, y) } else { (y, x) };
            let attr = c.stat(won).await.unwrap();
            assert_eq!(attr.nlink, 1, "round {i}: {won} has {} links", attr.nlink);
            let e = c.stat(lost).await.unwrap_err();
            assert_eq!(e.errno, Errno::ENOENT, "round {i}: {lost} is there: {e}");
        }
    });
    cluster.assert_clean();
}
