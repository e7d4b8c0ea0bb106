//! Two clients rename one file at once, each to a name on another metadata server
//! than the old one's (a rename in two steps: the new name, then the old one's
//! removal). One wins; the other fails with ENOENT and leaves nothing behind: no
//! second name of the file, as a rename on one machine never does. And a hard link
//! racing a rename that frees the link's new name and replaces its object ends as
//! on one machine: the name was taken, or the object gone, never the object under
//! the freed name.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{poll, scaled, Cluster, TestClient};
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

/// `link /x /y` while another client renames `/y` over `/x`. The link's new name is
/// on another server than its object, which counts the link first. Held between
/// that count and its new name, the link saw `/y` taken when it began; the rename
/// then frees `/y` and replaces `/x`'s object. On one machine the link fails
/// (EEXIST, or ENOENT once the object has no name), or links the object `/x` names
/// after the rename: never `/x`'s old object under `/y`, which had no name at any
/// moment `/y` was free. (Before the name was looked at first, the link gave it
/// that name.)
#[test]
fn a_link_racing_a_rename_that_frees_its_name_never_names_the_replaced_object() {
    let scratch = tempfile::tempdir().unwrap();
    let hold = scratch.path().join("hold");
    let cluster = Cluster::builder()
        .servers(2)
        .request_timeout("20s")
        .server_env("PVFS_FAULTS", &format!("hold-linked:{}", hold.display()))
        .start();
    let config = cluster.config().clone();
    let setup = cluster.client();
    // /y's entry lives on one server; /x's object is owned by the other.
    let y_server = config.entry_server(config.root_handle(), config.defaults.dir_shards, "y");
    let x = setup.run(Duration::from_secs(60), async |c| {
        let y = c
            .create("/y", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        y.write_at(0, b"the new").await.unwrap();
        for k in 0..64 {
            let path = format!("/x{k}");
            let f = c
                .create(&path, 0o644, LayoutSpec::default(), true)
                .await
                .unwrap();
            if config.owner_of(f.handle()) != Some(y_server) {
                f.write_at(0, b"the old").await.unwrap();
                return path;
            }
            c.unlink(&path).await.unwrap();
        }
        panic!("no file owned away from /y's server in 64 tries");
    });

    std::fs::write(&hold, b"").unwrap();
    let linker = {
        let (config, x) = (config.clone(), x.clone());
        std::thread::spawn(move || {
            TestClient::new(config).run(Duration::from_secs(90), async |c| c.link(&x, "/y").await)
        })
    };
    // The link ends at once (the name is taken), or waits between its count and
    // its name.
    poll(
        "the link to end or wait",
        scaled(Duration::from_secs(20)),
        || {
            let waits = cluster.held_by_fault("a counted link") > 0;
            (linker.is_finished() || waits).then_some(())
        },
    );
    setup.run(Duration::from_secs(60), async |c| {
        c.rename("/y", &x).await.unwrap();
    });
    std::fs::remove_file(&hold).unwrap();
    let linked = linker.join().unwrap();
    setup.run(Duration::from_secs(60), async |c| {
        let mut buf = [0u8; 16];
        let f = c.open(&x).await.unwrap();
        let n = f.read_at(0, &mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"the new", "{x} after the rename");
        match &linked {
            // The link of what `x` names after the rename: /y names it too.
            Ok(attr) => {
                let y = c.stat("/y").await.unwrap();
                assert_eq!(y.handle, attr.handle);
                assert_eq!(
                    y.handle,
                    c.stat(&x).await.unwrap().handle,
                    "/y names {x}'s old object"
                );
            }
            Err(e) => {
                assert!(
                    matches!(e.errno, Errno::EEXIST | Errno::ENOENT),
                    "link: {e}"
                );
                let e = c.stat("/y").await.unwrap_err();
                assert_eq!(e.errno, Errno::ENOENT, "/y after a failed link: {e}");
            }
        }
    });
    cluster.assert_clean();
}
