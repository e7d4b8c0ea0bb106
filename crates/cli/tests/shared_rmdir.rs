//! A directory that clients remove while others add names to it or remove it too:
//! a request that looked the directory up before the rmdir and adds its name after
//! fails with ENOENT and leaves nothing behind, as on one machine, where a process
//! whose directory was removed cannot create anything in it; and of two rmdirs, the
//! one that loses fails with ENOENT without unsealing the directory the other
//! removed. (The rmdir deletes the directory at its owner, and the seal of the
//! owner's own shard goes with it: the name's commit must see that the directory is
//! gone; the other shards stay sealed.)
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::{poll, scaled, Cluster};
use pvfs_client::{Errno, LayoutSpec};

/// The server's log line when a request adding a name starts to wait for the test.
const HELD: &str = "a name to add waits: held by a test's fault";

#[test]
fn a_name_added_while_its_directory_is_removed_fails_and_leaves_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let hold = scratch.path().join("hold");
    // One server: the directory's owner holds every shard of it, the case where the
    // rmdir takes the seal away with the directory.
    let cluster = Cluster::builder()
        .servers(1)
        .request_timeout("20s")
        .server_env("PVFS_FAULTS", &format!("hold-names:{}", hold.display()))
        .start();
    let setup = cluster.client();
    setup.run(Duration::from_secs(30), async |c| {
        let f = c
            .create("/f", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, b"kept").await.unwrap();
    });
    for (round, adds) in ["create", "rename"].into_iter().enumerate() {
        setup.run(Duration::from_secs(30), async |c| {
            c.mkdir("/d", 0o755).await.unwrap();
        });
        std::fs::write(&hold, b"").unwrap();
        let held_before = cluster.log("s0").matches(HELD).count();
        let config = cluster.config().clone();
        let adder = std::thread::spawn(move || {
            let tc = common::TestClient::new(config);
            tc.run(Duration::from_secs(60), async |c| match adds {
                "create" => c
                    .create("/d/x", 0o644, LayoutSpec::default(), true)
                    .await
                    .map(|_| ()),
                _ => c.rename("/f", "/d/x").await,
            })
        });
        poll(
            &format!("the {adds} to wait in the server"),
            scaled(Duration::from_secs(20)),
            || (cluster.log("s0").matches(HELD).count() > held_before).then_some(()),
        );
        // The directory is empty: the rmdir of another client removes it.
        setup.run(Duration::from_secs(30), async |c| {
            c.rmdir("/d").await.unwrap();
        });
        release(&hold);
        let added = adder.join().unwrap();
        assert_eq!(
            added.err().map(|e| e.errno),
            Some(Errno::ENOENT),
            "round {round}: a {adds} into a removed directory"
        );
        setup.run(Duration::from_secs(30), async |c| {
            let names: Vec<String> = c
                .readdir("/")
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect();
            assert_eq!(names, ["f"], "round {round}: after the {adds}");
            let f = c.open("/f").await.unwrap();
            let mut buf = [0u8; 8];
            let n = f.read_at(0, &mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"kept", "round {round}: /f is untouched");
        });
    }
    // Nothing the failed requests began is left: no object without a name, no name
    // in a directory that is gone.
    cluster.assert_clean();
}

#[test]
fn an_rmdir_that_loses_a_race_to_another_fails_and_leaves_the_directory_sealed() {
    let scratch = tempfile::tempdir().unwrap();
    let names = scratch.path().join("names");
    let unlinks = scratch.path().join("unlinks");
    // Two metadata servers: the directory has a shard away from its owner, whose
    // seal stays after the directory is gone.
    let cluster = Cluster::builder()
        .servers(2)
        .request_timeout("20s")
        .server_env(
            "PVFS_FAULTS",
            &format!(
                "hold-names:{},hold-op:Unlink:{}",
                names.display(),
                unlinks.display()
            ),
        )
        .start();
    let shards = u64::from(cluster.config().defaults.dir_shards);
    assert!(shards >= 2, "{shards} shards");
    let setup = cluster.client();
    setup.run(Duration::from_secs(30), async |c| {
        c.mkdir("/d", 0o755).await.unwrap();
    });
    let held = |what: &str| -> usize {
        ["s0", "s1"]
            .iter()
            .map(|s| cluster.log(s).matches(what).count())
            .sum()
    };
    let started = |what: &'static str, n: usize| {
        poll(
            &format!("{n} {what} to wait in the servers"),
            scaled(Duration::from_secs(20)),
            || (held(&format!("{what} waits: held by a test's fault")) >= n).then_some(()),
        )
    };
    // Creates that looked the directory up before it goes, held before they look at
    // its seals: names on every shard.
    std::fs::write(&names, b"").unwrap();
    let config = cluster.config().clone();
    let creates = std::thread::spawn(move || {
        let tc = common::TestClient::new(config);
        tc.run(Duration::from_secs(90), async |c| {
            let all = (0..8).map(|i| {
                let c = c.clone();
                async move {
                    c.create(&format!("/d/x{i}"), 0o644, LayoutSpec::default(), true)
                        .await
                        .map(|_| ())
                }
            });
            futures::future::join_all(all).await
        })
    });
    started("a name to add", 8);
    // The first rmdir seals every shard and waits in its Unlink.
    std::fs::write(&unlinks, b"").unwrap();
    let config = cluster.config().clone();
    let first = std::thread::spawn(move || {
        common::TestClient::new(config).run(Duration::from_secs(90), async |c| c.rmdir("/d").await)
    });
    started("Unlink", 1);
    // The second finds the shards sealed by the first: it waits, sealing nothing.
    let config = cluster.config().clone();
    let second = std::thread::spawn(move || {
        common::TestClient::new(config).run(Duration::from_secs(90), async |c| {
            let r = c.rmdir("/d").await;
            let seals = c.stats().per_op().get("SealDir").copied().unwrap_or(0);
            (r, seals)
        })
    });
    std::thread::sleep(scaled(Duration::from_millis(500)));
    release(&unlinks);
    let first = first.join().unwrap();
    let (second, seals) = second.join().unwrap();
    // Every shard but the owner's is still sealed (the owner's went with the
    // directory): no name gets into the directory that is gone.
    release(&names);
    for (i, r) in creates.join().unwrap().into_iter().enumerate() {
        assert_eq!(
            r.err().map(|e| e.errno),
            Some(Errno::ENOENT),
            "create /d/x{i}"
        );
    }
    assert!(first.is_ok(), "the first rmdir: {first:?}");
    assert_eq!(
        second.err().map(|e| e.errno),
        Some(Errno::ENOENT),
        "the second rmdir, after the first removed the directory"
    );
    assert!(
        seals > shards,
        "the second rmdir tried the seals again ({seals} SealDir for {shards} shards): \
         it found them taken"
    );
    setup.run(Duration::from_secs(30), async |c| {
        assert!(c.readdir("/").await.unwrap().is_empty());
    });
    cluster.assert_clean();
}

fn release(hold: &Path) {
    std::fs::remove_file(hold).unwrap();
}
