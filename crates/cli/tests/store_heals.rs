//! A metadata server whose store fails on a full disk heals by itself once space
//! returns, and says it is degraded meanwhile (docs/reliability.md, "A failed metadata
//! store"); a store that cannot be reopened (its file system went read-only) makes the
//! server exit with one line saying why, and a restart serves everything acknowledged.
//!
//! s0's storage is a small tmpfs in a private mount namespace of the test's thread (as
//! in `full_disk.rs`: the host's mount table never sees it, and it vanishes with the
//! test, even a killed one). That needs root, as CI has: elsewhere the tests are
//! skipped with the reason (`common::skip`), and under `CI=true` that fails them.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Cluster, Rng, TestClient};
use pvfs_client::{Client, Errno, LayoutSpec};
use pvfs_proto::Handle;

/// `[timeouts] request` of the clusters (before scaling).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Size of each extended attribute written to fill the store's redo log.
const VALUE_LEN: usize = 60 << 10;

/// Remounts the tmpfs on `dir` read-only (`rw == false`) or read-write; `Err` with the
/// OS error (EBUSY while a file on it is open for writing).
fn remount(dir: &Path, rw: bool) -> std::io::Result<()> {
    let target = CString::new(dir.as_os_str().as_bytes()).unwrap();
    let flags = libc::MS_REMOUNT | if rw { 0 } else { libc::MS_RDONLY };
    // SAFETY: a valid path string; changes a mount of this thread's namespace only.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Two metadata-and-data servers, s0's storage on a private tmpfs of `size` (None:
/// skipped, the reason given).
fn cluster_with_small_s0(test: &str, size: &str) -> Option<(Cluster, common::PrivateTmpfs)> {
    let cluster = Cluster::builder()
        .servers(2)
        .request_timeout(&format!(
            "{}ms",
            common::scaled(REQUEST_TIMEOUT).as_millis()
        ))
        .configure();
    let detach = common::small_storage(&cluster, "s0", size, test)?;
    cluster.start_all();
    Some((cluster, detach))
}

/// A name in directory `dir` (of `shards` shards) whose entry (and object) lives on
/// server `server`.
fn name_in(cluster: &Cluster, dir: Handle, shards: u32, server: usize, prefix: &str) -> String {
    let config = cluster.config();
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|n| config.entry_server(dir, shards, n) == server)
        .unwrap()
}

/// A name in the root whose entry (and object) lives on server `server`.
fn name_on(cluster: &Cluster, server: usize, prefix: &str) -> String {
    let config = cluster.config();
    let (root, shards) = (config.root_handle(), config.meta_servers().len() as u32);
    name_in(cluster, root, shards, server, prefix)
}

/// The shard count of directory `attr`.
fn shards_of(attr: &pvfs_proto::Attr) -> u32 {
    match attr.detail {
        pvfs_proto::ObjDetail::Dir { shards, .. } => shards,
        _ => panic!("{:#x} is not a directory", attr.handle),
    }
}

fn value(i: u32) -> Vec<u8> {
    let mut v = Rng::new(u64::from(i)).bytes(VALUE_LEN);
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

/// Sets extended attributes of `handle` (an object on s0) until s0's store fails:
/// returns how many were acknowledged (`user.k0`..) and the error.
async fn fill_store(c: &Client, handle: Handle) -> (u32, pvfs_client::Error) {
    let mut acked = 0u32;
    loop {
        match c
            .setxattr(handle, &format!("user.k{acked}"), &value(acked), 0)
            .await
        {
            Ok(()) => acked += 1,
            Err(e) => return (acked, e),
        }
        assert!(acked < 5000, "the metadata store never ran out of space");
    }
}

/// Every acknowledged attribute is there, byte for byte.
async fn check_acked(c: &Client, handle: Handle, acked: u32) {
    for i in 0..acked {
        let got = c.getxattr(handle, &format!("user.k{i}")).await.unwrap();
        assert!(got == value(i), "acknowledged user.k{i} lost or damaged");
    }
}

/// The entry for server `name` in the JSON of `ping`/`df` (an array, or an object with
/// `servers`) or `status`.
fn server_json<'v>(v: &'v serde_json::Value, name: &str) -> &'v serde_json::Value {
    let list = v.get("servers").unwrap_or(v).as_array().unwrap();
    list.iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {v}"))
}

/// `pvfs CMD --json` reports s0 degraded because of a full disk and s1 ok, and fails.
#[track_caller]
fn assert_reports_degraded(cluster: &Cluster, cmd: &str) {
    let out = cluster.run_cli(&[cmd, "--json"]);
    let v = out.json_any();
    let s0 = server_json(&v, "s0");
    assert_eq!(s0["state"], "degraded", "{cmd}: {v}");
    assert_eq!(s0["ok"], false, "{cmd}: {v}");
    assert_eq!(s0["errno"], "ENOSPC", "{cmd}: {v}");
    let reason = s0["reason"].as_str().unwrap();
    assert!(
        reason.contains("metadata store failed") && reason.contains("No space left on device"),
        "{cmd}: reason {reason:?}"
    );
    assert!(reason.contains("retrying"), "{cmd}: reason {reason:?}");
    assert_eq!(server_json(&v, "s1")["state"], "ok", "{cmd}: {v}");
    let line = out.err_containing("degraded");
    assert!(line.contains("s0"), "{cmd}: {line}");
}

/// `pvfs CMD --json` reports every server ok and succeeds.
fn reports_healthy(cluster: &Cluster, cmd: &str) -> bool {
    let out = cluster.run_cli(&[cmd, "--json"]);
    if !out.status.success() {
        return false;
    }
    let v = out.json();
    ["s0", "s1"]
        .iter()
        .all(|n| server_json(&v, n)["state"] == "ok")
}

#[test]
fn a_full_metadata_store_degrades_then_heals_by_itself() {
    const TEST: &str = "a_full_metadata_store_degrades_then_heals_by_itself";
    let Some((cluster, _tmpfs)) = cluster_with_small_s0(TEST, "48m") else {
        return;
    };
    let pid = cluster.pid("s0");
    let tc = cluster.client();
    let on_s0 = format!("/{}", name_on(&cluster, 0, "meta"));
    let kept = format!("/{}", name_on(&cluster, 0, "kept"));
    let dir = format!("/{}", name_on(&cluster, 1, "dir"));
    let mut rng = Rng::new(0x5eed_4ea1);
    let block = rng.bytes(4 << 20);

    // What is acknowledged before the disk fills. The root belongs to s0, so while s0
    // is degraded the other servers cannot check permissions in it: the rest of the
    // test works in a directory of s1's, by handle.
    let (d, obj) = tc.run(Duration::from_secs(60), async |c| {
        let f = c
            .create(&kept, 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, b"written before the disk filled")
            .await
            .unwrap();
        let obj = c
            .create(&on_s0, 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        (c.mkdir(&dir, 0o755).await.unwrap(), obj.handle())
    });
    assert!(cluster.config().servers[1].handles.contains(d.handle));
    let in_d =
        |server: usize, prefix: &str| name_in(&cluster, d.handle, shards_of(&d), server, prefix);
    let (filler, created) = (in_d(1, "filler"), in_d(1, "during"));

    // s0's disk filled by a file whose entry is on s1 and whose one datafile is on
    // s0; then s0's store filled until a metadata operation fails.
    let (big, filled, acked) = tc.run(Duration::from_secs(300), async |c| {
        let on_s0_only = LayoutSpec {
            stripe_size: None,
            stripe_count: Some(1),
            base: Some(0),
            replicas: None,
        };
        let big = c
            .create_under(&d, &filler, 0o644, on_s0_only, false)
            .await
            .unwrap();
        let mut filled = 0u64;
        let err = loop {
            match big.write_at(filled, &block).await {
                Ok(_) => filled += block.len() as u64,
                Err(e) => break e,
            }
            assert!(filled < 1 << 30, "s0 never filled up");
        };
        assert_eq!(err.errno, Errno::ENOSPC, "{err}");
        let (acked, err) = fill_store(&c, obj).await;
        assert_eq!(err.errno, Errno::ENOSPC, "{err}");
        assert!(
            err.message.contains("metadata store failed"),
            "{}",
            err.message
        );
        (big, filled, acked)
    });
    assert!(acked > 0, "the store failed before taking anything");

    // Degraded, and said so by ping, df and status; never ok. It stays so while the
    // disk is full: reopen attempts fail (and are counted in the reason).
    for cmd in ["ping", "df", "status"] {
        assert_reports_degraded(&cluster, cmd);
    }
    common::poll(
        "a failed reopen attempt",
        common::scaled(Duration::from_secs(30)),
        || {
            let v = cluster.run_cli(&["status", "--json"]).json_any();
            let reason = server_json(&v, "s0")["reason"].as_str()?.to_string();
            reason.contains("so far").then_some(())
        },
    );
    assert_reports_degraded(&cluster, "status");
    let human = cluster.run_cli(&["status"]);
    human.err_containing("1 of 2 servers degraded");
    assert!(
        human
            .stdout
            .lines()
            .any(|l| l.starts_with("s0") && l.contains("degraded") && l.contains("No space")),
        "{}",
        human.stdout
    );
    tc.run(Duration::from_secs(120), async |c| {
        // Metadata operations on s0 fail fast with ENOSPC: a change, a lookup.
        let limit = common::scaled(REQUEST_TIMEOUT);
        let t = Instant::now();
        let e = c.setxattr(obj, "user.more", b"x", 0).await.unwrap_err();
        assert_eq!(e.errno, Errno::ENOSPC, "{e}");
        let e = c.stat(&kept).await.unwrap_err();
        assert_eq!(e.errno, Errno::ENOSPC, "{e}");
        assert!(t.elapsed() < limit, "took {:?}", t.elapsed());
        // Metadata on s1 works, and so do s0's data operations: its datafile reads.
        c.create_under(&d, &created, 0o644, LayoutSpec::default(), false)
            .await
            .unwrap();
        let mut got = vec![0u8; block.len()];
        let at = filled - block.len() as u64;
        assert_eq!(big.read_at(at, &mut got).await.unwrap(), block.len());
        assert!(got == block, "s0's data damaged");
        // Space returns: the filler goes (its entry is on s1, its datafile on s0).
        c.unlink_at(d.handle, &filler, false).await.unwrap();
    });

    // s0 heals by itself: the same process, within a bounded time.
    common::poll(
        "s0 to heal",
        common::scaled(Duration::from_secs(60)),
        || reports_healthy(&cluster, "status").then_some(()),
    );
    assert!(cluster.is_running("s0"), "{}", cluster.log_tail("s0"));
    assert_eq!(cluster.pid("s0"), pid, "s0 was restarted");
    assert!(reports_healthy(&cluster, "ping") && reports_healthy(&cluster, "df"));
    assert!(
        cluster.log("s0").contains("metadata store reopened"),
        "{}",
        cluster.log_tail("s0")
    );
    tc.run(Duration::from_secs(300), async |c| {
        check_acked(&c, obj, acked).await;
        let mut got = vec![0u8; 64];
        let kept = c.open(&kept).await.unwrap();
        let n = kept.read_at(0, &mut got).await.unwrap();
        assert_eq!(&got[..n], b"written before the disk filled");
        c.stat(&format!("{dir}/{created}")).await.unwrap();
        c.setxattr(obj, "user.after", b"healed", 0).await.unwrap();
        assert_eq!(c.getxattr(obj, "user.after").await.unwrap(), b"healed");
        let report = c.fsck(false, Duration::ZERO).await.unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    });
    drop(tc);
    cluster.stop_clean("s0");
    cluster.stop_clean("s1");
}

/// Writes a file of zeros in `dir` until the file system is full.
fn fill_directly(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0u8; 1 << 20];
    loop {
        match f.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", dir.display()),
        }
    }
}

#[test]
fn a_store_that_cannot_be_reopened_exits_and_a_restart_serves_everything() {
    const TEST: &str = "a_store_that_cannot_be_reopened_exits_and_a_restart_serves_everything";
    let Some((cluster, _tmpfs)) = cluster_with_small_s0(TEST, "32m") else {
        return;
    };
    let s0 = cluster.storage("s0");
    let on_s0 = format!("/{}", name_on(&cluster, 0, "meta"));
    let tc = cluster.client();
    let handle = tc.run(Duration::from_secs(60), async |c| {
        // No data on s0: no datafile of it stays open for writing, so its file system
        // can be remounted read-only once the store's files are closed.
        c.mkdir(&on_s0, 0o755).await.unwrap().handle
    });
    fill_directly(&s0);
    let acked = tc.run(Duration::from_secs(300), async |c| {
        let (acked, err) = fill_store(&c, handle).await;
        assert_eq!(err.errno, Errno::ENOSPC, "{err}");
        acked
    });
    assert_reports_degraded(&cluster, "status");
    // The file system goes read-only (as the kernel does after I/O errors it gave up
    // on): the next reopen attempt cannot open the store for writing, and the server
    // gives up. (EBUSY while an attempt has the store's files open: try again.)
    common::poll(
        "s0's tmpfs to be remounted read-only",
        common::scaled(Duration::from_secs(30)),
        || remount(&s0, false).ok(),
    );
    common::poll(
        "s0 to exit",
        common::scaled(Duration::from_secs(60)),
        || (!cluster.is_running("s0")).then_some(()),
    );
    cluster.stop_clean("s1");
    let statuses = cluster.reap_all();
    let (_, status) = statuses.iter().find(|(n, _)| n == "s0").unwrap();
    assert_eq!(status.code(), Some(1), "s0 exited with {status}");
    let log = cluster.log("s0");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("pvfs: server s0: ")
            && last.contains("metadata store failed: No space left on device")
            && last.contains("Read-only file system")
            && last.contains("giving up"),
        "last line of s0's log: {last:?}"
    );
    // An administrator frees space; a restart (a service manager's) redoes the log.
    remount(&s0, true).unwrap();
    std::fs::remove_file(s0.join("filler")).unwrap();
    cluster.start_all();
    let tc = TestClient::new(cluster.config().clone());
    tc.run(Duration::from_secs(300), async |c| {
        check_acked(&c, handle, acked).await;
        c.setxattr(handle, "user.after", b"restarted", 0)
            .await
            .unwrap();
    });
    assert!(reports_healthy(&cluster, "status"));
    drop(tc);
    cluster.stop_clean("s0");
    cluster.stop_clean("s1");
}
