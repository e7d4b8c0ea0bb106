//! Races between two clients played out in a fixed order in the simulator: one
//! client on a slow link starts an operation, the other does its whole operation
//! between two of the first one's steps, and the outcome must be one that the two
//! operations in some order give on one machine.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use pvfs_client::{Client, Errno, LayoutSpec};
use pvfs_sim::cluster::Cluster;
use pvfs_sim::net::{Latency, SimNet};
use pvfs_sim::rng::Rng;

/// Each way of a message to or from the slow client: far above the fast client's
/// whole operation, well below the request timeout of the simulator's clients.
const SLOW: Duration = Duration::from_millis(500);

/// Servers of the scene's file system.
const SERVERS: usize = 4;

/// Client `slow` renames `from` onto `to`, and client `fast` renames the same `from`
/// onto the same `to` between the slow one's lookup of `from` and its lookup of
/// `to` (which then names the object the slow one found under `from`). On one
/// machine one rename moves the file and the other finds no `from` (ENOENT); the
/// slow one must not answer that nothing was to be done because both names name
/// one object: they never did at once. Returns the two answers (slow, fast).
fn same_rename_twice(
    seed: u64,
    from: &'static str,
    to: &'static str,
) -> (Option<Errno>, Option<Errno>) {
    let answers = pvfs_sim::block_on(seed, async move {
        let rng = Rng::new(seed);
        let latency = Latency {
            min: Duration::from_micros(100),
            max: Duration::from_micros(100),
            stall_chance: 0.0,
            stall_max: Duration::ZERO,
        };
        let net = SimNet::new(rng.clone(), Rng::new(seed ^ 1), latency);
        let mut cluster = Cluster::start(SERVERS, net.clone(), rng, false, 1)
            .await
            .unwrap();
        let slow = Client::over(cluster.config.clone(), net.node("slow"));
        let fast = Client::over(cluster.config.clone(), net.node("fast"));
        let create = async |path| {
            let file = fast.create(path, 0o644, LayoutSpec::default(), true);
            file.await.unwrap().stat().await.unwrap().handle
        };
        let (moved, replaced) = (create(from).await, create(to).await);
        // Both clients know the root and have their connections to every server
        // that holds the names and the objects: no step below makes one.
        for c in [&slow, &fast] {
            for p in [from, to] {
                c.stat(p).await.unwrap();
            }
        }
        net.slow("slow", SLOW);
        let started = tokio::time::Instant::now();
        let racer = slow.clone();
        let slow_rename = tokio::spawn(async move { racer.rename(from, to).await });
        // The slow client's lookup of `from` reaches its server after SLOW, its
        // answer comes back after 2 SLOW (and an attribute fetch at the object's
        // owner takes 2 SLOW more); its lookup of `to` reaches its server 3 SLOW
        // after the start at the earliest. The fast rename runs in between.
        tokio::time::sleep(SLOW * 3 / 2).await;
        let fast_answer = fast.rename(from, to).await;
        assert!(
            started.elapsed() < SLOW * 3,
            "the fast rename took {:?}: it did not run between the slow one's lookups",
            started.elapsed()
        );
        assert!(!slow_rename.is_finished(), "the slow rename ended first");
        let slow_answer = slow_rename.await.unwrap();
        // Whatever the answers, the file system ends as one machine's would: the
        // moved object under `to`, nothing under `from`.
        assert_eq!(fast.stat(to).await.unwrap().handle, moved, "{to}");
        assert_ne!(moved, replaced);
        assert_eq!(
            fast.stat(from)
                .await
                .map(|a| a.handle)
                .err()
                .map(|e| e.errno),
            Some(Errno::ENOENT),
            "{from} still names something"
        );
        cluster.stop().await;
        let errno = |r: pvfs_client::Result<()>| r.err().map(|e| e.errno);
        (errno(slow_answer), errno(fast_answer))
    });
    answers.unwrap()
}

#[test]
fn a_rename_overtaken_by_the_same_rename_finds_no_source() {
    // Pairs of names whose entries are on one metadata server, and on two.
    for (k, (from, to)) in [("/a", "/b"), ("/c", "/d"), ("/e", "/f"), ("/g", "/h")]
        .into_iter()
        .enumerate()
    {
        let (slow, fast) = same_rename_twice(0x5a4e + k as u64, from, to);
        assert_eq!(
            (slow, fast),
            (Some(Errno::ENOENT), None),
            "rename {from} {to} twice at once: the slow one failed with {slow:?}, the fast \
             one with {fast:?}; on one machine the second finds no {from}"
        );
    }
}
