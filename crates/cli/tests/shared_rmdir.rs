//! A name added to a directory that another client removes at the same moment: the
//! request that looked the directory up before the rmdir and adds the name after it
//! fails with ENOENT and leaves nothing behind, as on one machine, where a process
//! whose directory was removed cannot create anything in it. (The rmdir deletes the
//! directory at its owner, and the seal of the owner's own shard goes with it: the
//! name's commit must see that the directory is gone.)
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

fn release(hold: &Path) {
    std::fs::remove_file(hold).unwrap();
}
