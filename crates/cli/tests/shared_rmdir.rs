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

#[test]
fn a_name_added_while_its_directory_is_removed_fails_and_leaves_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let hold = scratch.path().join("hold");
    // One server: the directory's owner holds every shard of it, the case where the
    // rmdir takes the seal away with the directory.
    let cluster = held_cluster(1, &format!("hold-names:{}", hold.display()));
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
        held(&cluster, "a name to add", round + 1);
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
            assert_eq!(
                root_names(&c).await,
                ["f"],
                "round {round}: after the {adds}"
            );
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
    let cluster = held_cluster(
        2,
        &format!(
            "hold-names:{},hold-op:Unlink:{}",
            names.display(),
            unlinks.display()
        ),
    );
    let shards = u64::from(cluster.config().defaults.dir_shards);
    assert!(shards >= 2, "{shards} shards");
    let setup = cluster.client();
    setup.run(Duration::from_secs(30), async |c| {
        c.mkdir("/d", 0o755).await.unwrap();
    });
    let started = |what: &str, n: usize| held(&cluster, what, n);
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
        assert!(root_names(&c).await.is_empty());
    });
    cluster.assert_clean();
}

#[test]
fn a_rename_over_a_directory_being_removed_waits_for_the_removal() {
    let scratch = tempfile::tempdir().unwrap();
    let unlinks = scratch.path().join("unlinks");
    let cluster = held_cluster(2, &format!("hold-op:Unlink:{}", unlinks.display()));
    let setup = cluster.client();
    let moved = setup.run(Duration::from_secs(30), async |c| {
        c.mkdir("/d", 0o755).await.unwrap();
        c.mkdir("/e", 0o755).await.unwrap().handle
    });
    // An rmdir of /d seals it and waits in its Unlink.
    std::fs::write(&unlinks, b"").unwrap();
    let config = cluster.config().clone();
    let rmdir = std::thread::spawn(move || {
        common::TestClient::new(config).run(Duration::from_secs(90), async |c| c.rmdir("/d").await)
    });
    held(&cluster, "Unlink", 1);
    // A rename of /e over /d finds /d sealed: refused busy, it waits.
    let config = cluster.config().clone();
    let rename = std::thread::spawn(move || {
        common::TestClient::new(config).run(Duration::from_secs(90), async |c| {
            let r = c.rename("/e", "/d").await;
            let seals = c.stats().per_op().get("SealDir").copied().unwrap_or(0);
            (r, seals)
        })
    });
    std::thread::sleep(scaled(Duration::from_millis(500)));
    release(&unlinks);
    rmdir.join().unwrap().unwrap();
    let (renamed, seals) = rename.join().unwrap();
    renamed.unwrap();
    assert!(seals > 0, "the rename tried to seal /d");
    // The rename happened after the removal: /d is /e's directory now.
    setup.run(Duration::from_secs(30), async |c| {
        assert_eq!(c.stat("/d").await.unwrap().handle, moved);
        assert_eq!(root_names(&c).await, ["d"]);
    });
    cluster.assert_clean();
}

/// A file system of `servers` servers, each with `PVFS_FAULTS=faults`.
fn held_cluster(servers: usize, faults: &str) -> Cluster {
    Cluster::builder()
        .servers(servers)
        .request_timeout("20s")
        .server_env("PVFS_FAULTS", faults)
        .start()
}

/// Waits until the servers' logs say `n` requests of `what` wait for the test.
fn held(cluster: &Cluster, what: &str, n: usize) {
    poll(
        &format!("{n} {what} to wait in the servers"),
        scaled(Duration::from_secs(20)),
        || (cluster.held_by_fault(what) >= n).then_some(()),
    )
}

/// The names in the root directory.
async fn root_names(c: &pvfs_client::Client) -> Vec<String> {
    let entries = c.readdir("/").await.unwrap();
    entries.into_iter().map(|e| e.name).collect()
}

fn release(hold: &Path) {
    std::fs::remove_file(hold).unwrap();
}
