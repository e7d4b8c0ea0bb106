//! Metadata with two copies (`docs/replication.md`, "Metadata: a primary and
//! standbys") on four real server processes made by `pvfs genconfig --replicas 2`:
//! every metadata server ships its store to its standby, a whole copy and then every
//! commit, and answers a change only once the standby holds it: while the standby is
//! stopped (`SIGSTOP`), a change waits until the map calls it down, and the standby
//! gets a new copy when it is back, as it does when killed and restarted. With every process killed (`kill -9`) right after
//! the last answer, each standby's copy opens as a store holding every acknowledged
//! name and attribute of its primary.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{four_with_two_copies, poll, scaled, state_of, Cluster, TestClient};
use pvfs_proto::{Attr, SetAttr, Timespec};
use pvfs_storage::{Identity, MetaStore};

/// Waits until `standby` is up in the map and `primary` has given it `copies` whole
/// copies in all (its log tells).
fn up_with_copies(cluster: &Cluster, standby: &str, primary: &str, copies: usize) {
    let (index, group) = (cluster.index(standby), cluster.index(primary));
    poll(
        &format!("{standby} up with copy {copies} of {primary}'s metadata"),
        scaled(Duration::from_secs(30)),
        || {
            let made = cluster
                .log(primary)
                .matches(&format!(
                    "metadata standby has a whole copy group={group} standby={index}"
                ))
                .count();
            (state_of(cluster, standby).as_deref() == Some("up") && made >= copies).then_some(())
        },
    );
}

#[test]
fn every_acknowledged_change_is_on_the_standby_when_every_server_dies() {
    let cluster = four_with_two_copies();
    let config = cluster.config().clone();
    let metas = config.meta_servers();
    assert_eq!(metas.len(), 4);
    let tc = TestClient::new(config.clone());
    let root = config.root_handle();
    let shards = metas.len() as u32;

    // s0's standby stops answering (`SIGSTOP`): a change on s0 waits for it until
    // the map calls it down, then is answered without it, with no error.
    let (primary, standby) = (&config.servers[0].name, &config.servers[1].name);
    assert_eq!(config.meta_group(0), vec![0, 1]);
    let on_s0 = (0..)
        .map(|i| format!("w{i}"))
        .find(|n| config.entry_server(root, shards, n) == 0)
        .unwrap();
    cluster.kill(standby, libc::SIGSTOP);
    let waited = tc.run(Duration::from_secs(60), async |c| {
        let t = std::time::Instant::now();
        c.mkdir(&format!("/{}", on_s0), 0o755).await.unwrap();
        t.elapsed()
    });
    assert!(
        waited >= Duration::from_millis(500),
        "a change on {primary} was answered in {waited:?}, while its standby was stopped"
    );
    assert_eq!(state_of(&cluster, standby).as_deref(), Some("down"));
    // Back, it gets a new copy, and is up once it has it.
    cluster.kill(standby, libc::SIGCONT);
    up_with_copies(&cluster, standby, primary, 2);
    // Killed and restarted, it has lost its place in the records (they live in its
    // memory): it gets a third copy.
    cluster.kill(standby, libc::SIGKILL);
    cluster.restart(standby);
    up_with_copies(&cluster, standby, primary, 3);

    let made: Vec<(String, Attr)> = tc.run(Duration::from_secs(120), async |c| {
        let mut made = Vec::new();
        // Made while the standby was stopped: on its new copy.
        made.push((on_s0.clone(), c.stat(&format!("/{}", on_s0)).await.unwrap()));
        for i in 0..120u32 {
            let name = format!("n{i}");
            let path = format!("/{name}");
            let a = if i % 3 == 0 {
                c.mkdir(&path, 0o750).await.unwrap()
            } else {
                c.symlink("somewhere", &path).await.unwrap()
            };
            made.push((name, a));
        }
        // Changed attributes, and renames: two changes on two servers each.
        for (k, (name, a)) in made.iter_mut().enumerate().filter(|(k, _)| k % 4 == 0) {
            let set = SetAttr {
                mtime: Some(Timespec {
                    secs: 1_000_000 + k as i64,
                    nsecs: 7,
                }),
                ..SetAttr::default()
            };
            *a = c.setattr_handle(a.handle, set).await.unwrap();
            let new = format!("r{k}");
            c.rename(&format!("/{name}"), &format!("/{new}"))
                .await
                .unwrap();
            // A renamed object may move to the new name's server, with a new handle.
            *a = c.lstat(&format!("/{new}")).await.unwrap();
            assert_eq!(a.mtime.secs, 1_000_000 + k as i64, "{name} -> {new}");
            *name = new;
        }
        made
    });
    // Every process dies at once after the last answer: nothing gets to finish.
    for n in cluster.names() {
        cluster.kill(&n, libc::SIGKILL);
    }

    let mut checked = (0usize, 0usize);
    for &g in &metas {
        let group = config.meta_group(g);
        assert_eq!(group.len(), 2, "{group:?}");
        assert_eq!(group[0] as usize, g);
        let primary = &config.servers[g];
        let standby = &config.servers[group[1] as usize];
        let dir = cluster
            .storage(&standby.name)
            .join("groups")
            .join(&primary.name);
        let id = Identity {
            fsid: config.fsid,
            server: primary.name.clone(),
        };
        let copy = MetaStore::open(&dir, &id, (primary.handles.first, primary.handles.last))
            .unwrap_or_else(|e| panic!("{}'s copy on {}: {e}", primary.name, standby.name));
        let view = copy.read().unwrap();
        for (name, a) in &made {
            if config.owner_of(a.handle) == Some(g) {
                let got = view.get_object(a.handle).unwrap().unwrap_or_else(|| {
                    panic!(
                        "{name} ({:#x}) missing on {}'s standby",
                        a.handle, primary.name
                    )
                });
                assert_eq!(
                    (got.mode, got.mtime, got.kind()),
                    (a.mode, a.mtime, a.kind()),
                    "{name}"
                );
                checked.0 += 1;
            }
            if config.entry_server(root, shards, name) == g {
                let (h, _) = view.get_entry(root, name).unwrap().unwrap_or_else(|| {
                    panic!("entry {name} missing on {}'s standby", primary.name)
                });
                assert_eq!(h, a.handle, "{name}");
                checked.1 += 1;
            }
        }
    }
    // Every object and every entry was found on exactly one group's standby.
    assert_eq!(checked, (made.len(), made.len()));
}
