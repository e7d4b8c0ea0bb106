//! The namespace and the data survive restarts: a clean stop
//! (SIGTERM) and a crash (SIGKILL) of every server in turn, of all servers at once,
//! and a `pvfs stop` / `pvfs start` round trip. After each, the whole tree (kinds,
//! handles, modes, layouts, sizes, link targets) and every file's bytes are checked
//! against what was built, through a client that lived across the restart and through
//! fresh ones. Metadata servers that sync their redo log rarely lose nothing to a
//! SIGKILL either (each change is written to the log before it is answered), and a
//! client's fsync and syncfs ask every server that holds metadata to sync.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{assert_bytes_eq, Cluster, Rng, TestClient};
use pvfs_client::{Client, LayoutSpec, SetAttr};
use pvfs_proto::ObjDetail;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// Longest a client call may take here (`TestClient::run` scales it).
fn call() -> Duration {
    Duration::from_secs(60)
}

/// What the tree looks like: one entry per path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir {
        handle: u64,
        mode: u32,
        default_layout: Option<LayoutSpec>,
    },
    File {
        handle: u64,
        mode: u32,
        size: u64,
        stripe_size: u64,
        datafiles: Vec<(u32, u64)>,
    },
    Symlink {
        handle: u64,
        target: String,
    },
    Special {
        handle: u64,
        mode: u32,
        kind: pvfs_proto::NodeKind,
        rdev: u64,
    },
}

/// The whole tree, walked with readdir_plus from the root.
async fn snapshot(client: &Client) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut dirs = vec!["/".to_string()];
    while let Some(dir) = dirs.pop() {
        let entries = client
            .readdir_plus(&dir, true)
            .await
            .unwrap_or_else(|e| panic!("readdir_plus {dir}: {e}"));
        let plain = client.readdir(&dir).await.unwrap();
        assert_eq!(
            plain.len(),
            entries.len(),
            "{dir}: readdir and readdir_plus disagree"
        );
        for (entry, attr) in entries {
            let attr = attr.unwrap_or_else(|e| panic!("{dir}/{}: {e}", entry.name));
            assert_eq!(
                entry.handle, attr.handle,
                "{dir}/{}: entry and attributes disagree",
                entry.name
            );
            let path = format!("{}/{}", dir.trim_end_matches('/'), entry.name);
            let node = match attr.detail {
                ObjDetail::Dir { default_layout, .. } => {
                    dirs.push(path.clone());
                    Node::Dir {
                        handle: attr.handle,
                        mode: attr.mode,
                        default_layout,
                    }
                }
                ObjDetail::File { layout } => Node::File {
                    handle: attr.handle,
                    mode: attr.mode,
                    size: attr.size,
                    stripe_size: layout.stripe_size,
                    datafiles: layout
                        .datafiles
                        .iter()
                        .map(|d| (d.server, d.handle))
                        .collect(),
                },
                ObjDetail::Symlink { target } => Node::Symlink {
                    handle: attr.handle,
                    target,
                },
                ObjDetail::Node { kind, rdev } => Node::Special {
                    handle: attr.handle,
                    mode: attr.mode,
                    kind,
                    rdev,
                },
            };
            out.insert(path, node);
        }
    }
    out
}

/// What must survive: the tree and every file's bytes.
struct Expected {
    tree: BTreeMap<String, Node>,
    files: BTreeMap<String, Vec<u8>>,
}

/// Writes `data` to a new file at `path` (with `spec`) and makes it durable.
async fn put(client: &Client, path: &str, spec: LayoutSpec, data: &[u8]) {
    let f = client
        .create(path, 0o644, spec, true)
        .await
        .unwrap_or_else(|e| panic!("create {path}: {e}"));
    if !data.is_empty() {
        assert_eq!(f.write_at(0, data).await.unwrap(), data.len());
    }
    f.fsync().await.unwrap();
}

/// Builds a namespace with directories, files with data (several layouts, a sparse
/// one, an empty one, a truncated one), symlinks, a renamed directory tree, a renamed
/// file, a directory default layout, a changed mode and a directory of 200 entries.
fn build(tc: &TestClient, rng: &mut Rng) -> Expected {
    let mut files = BTreeMap::new();
    let f1 = rng.bytes((MIB + 7) as usize);
    let f2 = rng.bytes((3 * MIB + 1) as usize);
    let inherit = rng.bytes((200 * KIB) as usize);
    let x = rng.bytes(5000);
    let y = rng.bytes((64 * KIB + 1) as usize);
    let sparse_tail = rng.bytes(100);
    let trunc = rng.bytes((2 * MIB) as usize);
    tc.run(call() * 4, async |c| {
        c.mkdir_all("/a/b/c", 0o755).await.unwrap();
        c.mkdir("/docs", 0o750).await.unwrap();
        c.set_dir_layout(
            "/docs",
            Some(LayoutSpec {
                stripe_size: Some(16 * KIB),
                stripe_count: Some(2),
                base: None,
                replicas: None,
            }),
        )
        .await
        .unwrap();
        put(&c, "/a/tmpname", LayoutSpec::default(), &f1).await;
        c.rename("/a/tmpname", "/a/f1").await.unwrap();
        c.setattr(
            "/a/f1",
            SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let odd = LayoutSpec {
            stripe_size: Some(4608),
            stripe_count: Some(3),
            base: None,
            replicas: None,
        };
        put(&c, "/a/b/f2", odd, &f2).await;
        put(&c, "/docs/inherit", LayoutSpec::default(), &inherit).await;
        put(&c, "/docs/empty", LayoutSpec::default(), &[]).await;
        let sparse = c
            .create("/sparse", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        sparse.write_at(10 * MIB, &sparse_tail).await.unwrap();
        sparse.fsync().await.unwrap();
        put(&c, "/trunc", LayoutSpec::default(), &trunc).await;
        c.truncate("/trunc", MIB + 3).await.unwrap();
        c.symlink("/a/b/f2", "/link").await.unwrap();
        c.symlink("/nowhere/at/all", "/dangling").await.unwrap();
        c.mknod("/a/fifo", pvfs_proto::NodeKind::Fifo, 0o640, 0)
            .await
            .unwrap();
        c.mknod("/a/null", pvfs_proto::NodeKind::CharDev, 0o666, 0x103)
            .await
            .unwrap();
        c.mkdir_all("/old/sub", 0o755).await.unwrap();
        put(&c, "/old/x", LayoutSpec::default(), &x).await;
        put(&c, "/old/sub/y", LayoutSpec::default(), &y).await;
        c.rename("/old", "/a/b/c/renamed").await.unwrap();
        c.mkdir("/many", 0o755).await.unwrap();
        let all: Vec<u32> = (0..200).collect();
        for chunk in all.chunks(50) {
            let creates = chunk.iter().map(|&i| {
                let c = c.clone();
                async move {
                    c.create(
                        &format!("/many/n{i:03}"),
                        0o644,
                        LayoutSpec::default(),
                        true,
                    )
                    .await
                    .map(|_| ())
                }
            });
            for r in futures_join(creates).await {
                r.unwrap();
            }
        }
    });
    files.insert("/a/f1".to_string(), f1);
    files.insert("/a/b/f2".to_string(), f2.clone());
    files.insert("/link".to_string(), f2);
    files.insert("/docs/inherit".to_string(), inherit);
    files.insert("/docs/empty".to_string(), Vec::new());
    let mut sparse = vec![0u8; (10 * MIB) as usize];
    sparse.extend_from_slice(&sparse_tail);
    files.insert("/sparse".to_string(), sparse);
    files.insert("/trunc".to_string(), trunc[..(MIB + 3) as usize].to_vec());
    files.insert("/a/b/c/renamed/x".to_string(), x);
    files.insert("/a/b/c/renamed/sub/y".to_string(), y);
    for i in 0..200 {
        files.insert(format!("/many/n{i:03}"), Vec::new());
    }

    let tree = tc.run(call(), async |c| snapshot(&c).await);
    // The tree is what was built.
    let names: Vec<&str> = tree
        .keys()
        .map(|s| s.as_str())
        .filter(|p| !p.starts_with("/many/"))
        .collect();
    assert_eq!(
        names,
        [
            "/a",
            "/a/b",
            "/a/b/c",
            "/a/b/c/renamed",
            "/a/b/c/renamed/sub",
            "/a/b/c/renamed/sub/y",
            "/a/b/c/renamed/x",
            "/a/b/f2",
            "/a/f1",
            "/a/fifo",
            "/a/null",
            "/dangling",
            "/docs",
            "/docs/empty",
            "/docs/inherit",
            "/link",
            "/many",
            "/sparse",
            "/trunc",
        ]
    );
    assert_eq!(tree.keys().filter(|p| p.starts_with("/many/")).count(), 200);
    match &tree["/a/f1"] {
        Node::File { mode, size, .. } => assert_eq!((*mode, *size), (0o600, MIB + 7)),
        other => panic!("/a/f1 is {other:?}"),
    }
    match &tree["/docs/inherit"] {
        Node::File {
            stripe_size,
            datafiles,
            ..
        } => {
            assert_eq!(
                (*stripe_size, datafiles.len()),
                (16 * KIB, 2),
                "/docs/inherit did not inherit /docs's layout"
            )
        }
        other => panic!("/docs/inherit is {other:?}"),
    }
    match &tree["/a/b/f2"] {
        Node::File {
            stripe_size,
            datafiles,
            ..
        } => assert_eq!((*stripe_size, datafiles.len()), (4608, 3)),
        other => panic!("/a/b/f2 is {other:?}"),
    }
    assert_eq!(
        tree["/link"],
        Node::Symlink {
            handle: match &tree["/link"] {
                Node::Symlink { handle, .. } => *handle,
                _ => 0,
            },
            target: "/a/b/f2".into()
        }
    );
    Expected { tree, files }
}

/// Joins futures without another dependency.
async fn futures_join<F>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

/// Checks the tree and every file's bytes through `tc`'s client.
fn verify(tc: &TestClient, exp: &Expected, when: &str) {
    tc.run(call() * 2, async |c| {
        let tree = snapshot(&c).await;
        if tree != exp.tree {
            for (p, n) in &exp.tree {
                match tree.get(p) {
                    None => panic!("{when}: {p} is gone"),
                    Some(m) if m != n => panic!("{when}: {p} changed: was {n:?}, now {m:?}"),
                    _ => {}
                }
            }
            let extra: Vec<_> = tree.keys().filter(|p| !exp.tree.contains_key(*p)).collect();
            panic!("{when}: unexpected entries {extra:?}");
        }
        for (path, want) in &exp.files {
            let f = c
                .open(path)
                .await
                .unwrap_or_else(|e| panic!("{when}: open {path}: {e}"));
            assert_eq!(
                f.size().await.unwrap(),
                want.len() as u64,
                "{when}: size of {path}"
            );
            let mut buf = vec![0u8; want.len() + 100];
            let n = f
                .read_at(0, &mut buf)
                .await
                .unwrap_or_else(|e| panic!("{when}: read {path}: {e}"));
            assert_eq!(n, want.len(), "{when}: read of {path}");
            assert_bytes_eq(&buf[..n], want, &format!("{when}: {path}"));
        }
        assert_eq!(c.readlink("/link").await.unwrap(), "/a/b/f2");
        assert_eq!(c.readlink("/dangling").await.unwrap(), "/nowhere/at/all");
    });
}

/// Adds a file written (and fsynced) after a restart to what must survive.
fn add_file(tc: &TestClient, exp: &mut Expected, rng: &mut Rng, path: &str) {
    let len = rng.range(1, 300 * KIB);
    let data = rng.bytes(len as usize);
    tc.run(call(), async |c| {
        put(&c, path, LayoutSpec::default(), &data).await
    });
    exp.files.insert(path.to_string(), data);
    exp.tree = tc.run(call(), async |c| snapshot(&c).await);
}

#[test]
fn namespace_and_data_survive_sigterm_and_sigkill_of_every_server() {
    let cluster = Cluster::start();
    let mut rng = Rng::new(0x5eed_0003);
    // One client lives through every restart (it must reconnect); others are fresh.
    let long_lived = cluster.client();
    let mut exp = build(&long_lived, &mut rng);
    verify(&long_lived, &exp, "before any restart");

    for name in cluster.names() {
        cluster.stop_clean(&name);
        cluster.restart(&name);
        verify(
            &long_lived,
            &exp,
            &format!("after SIGTERM and restart of {name} (long-lived client)"),
        );
        add_file(
            &long_lived,
            &mut exp,
            &mut rng,
            &format!("/after-term-{name}"),
        );
    }
    verify(
        &cluster.client(),
        &exp,
        "after SIGTERM of every server (fresh client)",
    );

    for name in cluster.names() {
        let st = cluster.kill(&name, libc::SIGKILL).unwrap();
        assert_eq!(common::signal_of(&st), Some(libc::SIGKILL));
        cluster.restart(&name);
        verify(
            &long_lived,
            &exp,
            &format!("after SIGKILL and restart of {name} (long-lived client)"),
        );
        add_file(
            &long_lived,
            &mut exp,
            &mut rng,
            &format!("/after-kill-{name}"),
        );
    }
    verify(
        &cluster.client(),
        &exp,
        "after SIGKILL of every server (fresh client)",
    );

    // Every server at once.
    for name in cluster.names() {
        cluster.kill(&name, libc::SIGKILL);
    }
    cluster.start_all();
    verify(
        &cluster.client(),
        &exp,
        "after SIGKILL of all servers at once (fresh client)",
    );
    verify(
        &long_lived,
        &exp,
        "after SIGKILL of all servers at once (long-lived client)",
    );
    cluster.assert_all_running();
}

#[test]
fn acknowledged_changes_survive_sigkill_when_the_log_is_synced_rarely() {
    // Synced every 10 s at most: when every server is killed right after the changes,
    // the last of them were only written to the log (in the kernel), never synced.
    let cluster = Cluster::builder().set("metadata_sync", "\"10s\"").start();
    let mut rng = Rng::new(0x5eed_0004);
    let tc = cluster.client();
    let mut exp = build(&tc, &mut rng);
    add_file(&tc, &mut exp, &mut rng, "/last-before-the-kill");
    for name in cluster.names() {
        let st = cluster.kill(&name, libc::SIGKILL).unwrap();
        assert_eq!(common::signal_of(&st), Some(libc::SIGKILL));
    }
    cluster.start_all();
    verify(
        &cluster.client(),
        &exp,
        "after SIGKILL of all servers right after the changes (log synced every 10 s)",
    );
    cluster.assert_all_running();
}

#[test]
fn fsync_and_syncfs_sync_every_server_holding_metadata() {
    let cluster = Cluster::builder().servers(4).meta_servers(2).start();
    let tc = cluster.client();
    let (meta, all) = (2u64, 4u64);
    tc.run(call(), async |c| {
        let sent = |c: &Client, op: &str| c.stats().per_op().get(op).copied().unwrap_or(0);
        c.mkdir("/d", 0o755).await.unwrap();
        let f = c
            .create("/d/f", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, &[7u8; 300_000]).await.unwrap();
        let data = f.layout().datafiles.len() as u64;
        let (syncs, fsyncs) = (sent(&c, "Sync"), sent(&c, "Fsync"));
        f.fsync().await.unwrap();
        assert_eq!(sent(&c, "Fsync") - fsyncs, data, "one Fsync per datafile");
        assert_eq!(
            sent(&c, "Sync") - syncs,
            meta,
            "an fsync syncs every metadata server (the name may live on any)"
        );
        let syncs = sent(&c, "Sync");
        c.sync_metadata().await.unwrap();
        assert_eq!(sent(&c, "Sync") - syncs, meta);
        let syncs = sent(&c, "Sync");
        c.syncfs().await.unwrap();
        assert_eq!(sent(&c, "Sync") - syncs, all, "syncfs syncs every server");
    });
    // What was synced is there after a crash of every server.
    for name in cluster.names() {
        cluster.kill(&name, libc::SIGKILL);
    }
    cluster.start_all();
    cluster.client().run(call(), async |c| {
        assert_eq!(c.stat("/d/f").await.unwrap().size, 300_000);
    });

    // Where every commit is synced before it is answered, an fsync has no metadata
    // server to ask.
    let cluster = Cluster::builder()
        .set("metadata_sync", "\"commit\"")
        .start();
    cluster.client().run(call(), async |c| {
        let f = c
            .create("/f", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, b"x").await.unwrap();
        f.fsync().await.unwrap();
        assert_eq!(
            c.stats().per_op().get("Sync"),
            None,
            "no Sync with \"commit\""
        );
    });
}

#[test]
fn pvfs_stop_and_pvfs_start_round_trip() {
    let cluster = Cluster::start();
    let mut rng = Rng::new(0x5eed_0004);
    let tc = cluster.client();
    let exp = build(&tc, &mut rng);

    // `pvfs stop` stops the servers cleanly (SIGTERM) and removes their pid files.
    let out = cluster.run_cli(&["stop"]);
    out.ok();
    for (name, st) in cluster.reap_all() {
        assert!(st.success(), "{name} exited with {st} after `pvfs stop`");
    }
    for name in cluster.names() {
        assert!(
            !cluster.storage(&name).join("server.pid").exists(),
            "{name}: pid file left after a clean stop"
        );
    }
    let down = cluster.run_cli(&["ping"]);
    down.err_line();
    assert!(
        down.elapsed < common::scaled(Duration::from_secs(5)),
        "ping of stopped servers took {:?}",
        down.elapsed
    );

    // `pvfs start` brings them back in the background; everything is there.
    cluster.run_cli(&["start"]).ok();
    assert_eq!(
        cluster.background_pids().len(),
        4,
        "`pvfs start` should leave 4 servers running"
    );
    verify(
        &cluster.client(),
        &exp,
        "after pvfs stop + pvfs start (fresh client)",
    );
    verify(
        &tc,
        &exp,
        "after pvfs stop + pvfs start (long-lived client)",
    );
    cluster.run_cli(&["ping"]).ok();

    // Stop again: nothing left running.
    let out = cluster.run_cli(&["stop"]);
    out.ok();
    assert!(
        out.stdout.contains("stopped"),
        "`pvfs stop` output: {}",
        out.stdout
    );
    assert!(
        cluster.background_pids().is_empty(),
        "servers still running after `pvfs stop`"
    );
    // A second stop has nothing to do and says so.
    let again = cluster.run_cli(&["stop"]);
    again.ok();
    assert!(
        again.stdout.contains("not running"),
        "second `pvfs stop`: {}",
        again.stdout
    );
}
