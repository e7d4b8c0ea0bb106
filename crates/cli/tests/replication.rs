//! Files with copies (`docs/replication.md`) on four real server processes made by
//! `pvfs genconfig --replicas 2` (three run the authority; one-second lease): each
//! datafile has two copies on distinct servers, identical on disk. With a server
//! killed (`kill -9`), writes, a truncate and reads of the file go on through the
//! other copies, with a pause and no error. Its copies are then stale on its disk
//! (the negative control: the checks below would see a copy that missed writes).
//! Restarted, it catches up with the recorded ranges it missed and is up again; no
//! read meanwhile sees a stale byte; every pair of copies is again identical; and
//! with the other copy's server killed in turn, the file reads back whole from the
//! copies that caught up. A server stopped (`SIGSTOP`) holds writes up only until the
//! map replaced it, and catches up after `SIGCONT`. `pvfs fsck` finds every copy its
//! file's. Through the FUSE mount too, writes, an fsync and reads of an open file go
//! on while a server holding its copies is killed. A write cut short (its tail stopped,
//! its client gone) leaves copies that agree once the tail is back.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use common::{assert_bytes_eq, poll, scaled, state_of, Cluster, Rng, TestClient};
use pvfs_client::LayoutSpec;

/// The file systems' lease.
const LEASE: Duration = Duration::from_secs(1);

/// Four servers, two copies of everything, a one-second lease.
fn cluster() -> Cluster {
    Cluster::builder()
        .servers(4)
        .replicas(2)
        .set("lease", r#""1s""#)
        .start()
}

/// Waits until every server is up in the map.
fn all_up(cluster: &Cluster) {
    poll(
        "every server up in the cluster map",
        scaled(Duration::from_secs(30)),
        || {
            cluster
                .names()
                .iter()
                .all(|n| state_of(cluster, n).as_deref() == Some("up"))
                .then_some(())
        },
    );
}

/// The copies of every datafile of `layout` on disk: (datafile, [(server, bytes)]).
fn copies_on_disk(cluster: &Cluster, layout: &pvfs_proto::Layout) -> Vec<Vec<(u32, Vec<u8>)>> {
    layout
        .datafiles
        .iter()
        .map(|df| {
            df.replicas()
                .map(|s| {
                    let p = cluster.datafile_path(s as usize, df.handle);
                    (s, std::fs::read(&p).unwrap_or_default())
                })
                .collect()
        })
        .collect()
}

/// How many datafiles' copies differ on disk.
fn differing(cluster: &Cluster, layout: &pvfs_proto::Layout) -> usize {
    copies_on_disk(cluster, layout)
        .iter()
        .filter(|c| c.iter().any(|(_, b)| *b != c[0].1))
        .count()
}

#[test]
fn a_file_with_two_copies_goes_on_through_a_dead_server_which_catches_up_when_back() {
    let cluster = cluster();
    all_up(&cluster);
    let tc = TestClient::new(cluster.config().clone());
    let mut rng = Rng::new(30);
    let mut model = rng.bytes(4 << 20);
    let limit = Duration::from_secs(60);

    // Two copies of each of four datafiles, on distinct servers, identical on disk.
    let layout = tc.run(limit, async |c| {
        let f = c
            .create("/f", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, &model).await.unwrap();
        f.fsync().await.unwrap();
        f.layout().clone()
    });
    assert_eq!(layout.replicas, 2);
    assert_eq!(layout.datafiles.len(), 4);
    for df in &layout.datafiles {
        let set: Vec<u32> = df.replicas().collect();
        assert_eq!(set.len(), 2, "{df:?}");
        assert_ne!(set[0], set[1], "{df:?}");
    }
    assert_eq!(differing(&cluster, &layout), 0);
    let on_s3 = layout
        .datafiles
        .iter()
        .filter(|df| df.replicas().any(|s| s == 3))
        .count();
    assert_eq!(on_s3, 2, "s3 holds copies of two datafiles: {layout:?}");

    // s3 dies: writes, a truncate and reads go on through the other copies, the
    // first of them waiting out the failover.
    cluster.kill("s3", libc::SIGKILL);
    let killed = Instant::now();
    let mut slowest = Duration::ZERO;
    tc.run(limit, async |c| {
        let f = c.open("/f").await.unwrap();
        for i in 0..24u64 {
            let len = rng.range(1, 300_000) as usize;
            let off = rng.range(0, model.len() as u64 + 200_000);
            let data = rng.bytes(len);
            let t = Instant::now();
            f.write_at(off, &data)
                .await
                .unwrap_or_else(|e| panic!("write {i}: {e}"));
            slowest = slowest.max(t.elapsed());
            let end = off as usize + len;
            if end > model.len() {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
        }
        let t = Instant::now();
        f.truncate(3 << 20).await.unwrap();
        slowest = slowest.max(t.elapsed());
        model.truncate(3 << 20);
        let tail = rng.bytes(700_000);
        f.write_at(model.len() as u64 + 100_000, &tail)
            .await
            .unwrap();
        model.resize(model.len() + 100_000, 0);
        model.extend_from_slice(&tail);
        f.fsync().await.unwrap();
        let mut back = vec![0u8; model.len()];
        assert_eq!(f.size().await.unwrap(), model.len() as u64);
        f.read_at(0, &mut back).await.unwrap();
        assert_bytes_eq(&back, &model, "read with s3 dead");
    });
    eprintln!(
        "with s3 killed: slowest change {slowest:?}; all done {:?} after the kill",
        killed.elapsed()
    );
    assert!(
        slowest <= scaled(LEASE + Duration::from_secs(10)),
        "a change waited {slowest:?}"
    );
    // The negative control: s3's copies missed those changes.
    assert!(
        differing(&cluster, &layout) >= 1,
        "the copies on s3 do not differ: the checks below would prove nothing"
    );

    // Back: it catches up, then is up; reads meanwhile never see its stale bytes.
    poll("s3 down", scaled(Duration::from_secs(20)), || {
        (state_of(&cluster, "s3").as_deref() == Some("down")).then_some(())
    });
    cluster.restart("s3");
    let back = Instant::now();
    let mut reads = 0;
    while state_of(&cluster, "s3").as_deref() != Some("up") {
        assert!(
            back.elapsed() < scaled(Duration::from_secs(30)),
            "s3 not up again: {}",
            cluster.log_tail("s3")
        );
        tc.run(limit, async |c| {
            let f = c.open("/f").await.unwrap();
            let mut got = vec![0u8; model.len()];
            f.read_at(0, &mut got).await.unwrap();
            assert_bytes_eq(&got, &model, "read while s3 comes back");
        });
        reads += 1;
    }
    assert!(reads >= 1);
    let log = cluster.log("s3");
    let caught = log
        .lines()
        .find(|l| l.contains("caught up with what this server missed"))
        .unwrap_or_default();
    eprintln!(
        "s3 up {:?} after its restart, {reads} reads meanwhile: {caught}",
        back.elapsed()
    );
    assert_eq!(
        differing(&cluster, &layout),
        0,
        "copies differ after the catch-up"
    );
    assert!(
        cluster
            .log("s3")
            .contains("caught up with what this server missed"),
        "{}",
        cluster.log_tail("s3")
    );

    // The copies that caught up serve the file alone: kill every other server
    // holding a copy with s3 that is not needed for the authority's majority.
    // s2 shares a datafile with s3; the authority (s0, s1, s2) keeps two of three.
    cluster.kill("s2", libc::SIGKILL);
    tc.run(limit, async |c| {
        let f = c.open("/f").await.unwrap();
        let mut got = vec![0u8; model.len()];
        f.read_at(0, &mut got).await.unwrap();
        assert_bytes_eq(&got, &model, "read with s2 dead, from s3's copies");
    });
    cluster.restart("s2");
    all_up(&cluster);

    // SIGSTOP looks like death to the others: writes go on without s3 once the map
    // replaced it (the head stops waiting on a copy that left the chain), and it
    // catches up after SIGCONT.
    cluster.kill("s3", libc::SIGSTOP);
    let mut slowest = Duration::ZERO;
    tc.run(limit, async |c| {
        let f = c.open("/f").await.unwrap();
        for i in 0..8u64 {
            let data = rng.bytes(200_000);
            let off = i * 400_000;
            let t = Instant::now();
            f.write_at(off, &data)
                .await
                .unwrap_or_else(|e| panic!("write {i}: {e}"));
            slowest = slowest.max(t.elapsed());
            model[off as usize..off as usize + data.len()].copy_from_slice(&data);
        }
    });
    eprintln!("with s3 stopped: slowest write {slowest:?}");
    cluster.kill("s3", libc::SIGCONT);
    all_up(&cluster);
    assert_eq!(
        differing(&cluster, &layout),
        0,
        "copies differ after SIGCONT"
    );
    tc.run(limit, async |c| {
        let f = c.open("/f").await.unwrap();
        let mut got = vec![0u8; model.len()];
        f.read_at(0, &mut got).await.unwrap();
        assert_bytes_eq(&got, &model, "read after s3 came back from SIGSTOP");
    });

    // fsck counts every copy as its file's: nothing is an orphan, nothing to repair.
    let report = cluster.run_cli(&["fsck", "--json"]).json();
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
    cluster.assert_all_running();
}

#[test]
fn writes_and_reads_through_the_mount_go_on_while_a_server_holding_copies_is_killed() {
    let cluster = cluster();
    all_up(&cluster);
    let m = mount::Mount::start(&cluster, &[]);
    let mut rng = Rng::new(31);
    let mut model = rng.bytes(2 << 20);
    let path = m.join("f");
    std::fs::write(&path, &model).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.sync_all().unwrap();

    // Kill a server holding copies of the file that is neither its metadata server
    // (metadata has one copy) nor the authority's leader.
    let tc = TestClient::new(cluster.config().clone());
    let (layout, handle) = tc.run(Duration::from_secs(60), async |c| {
        let f = c.open("/f").await.unwrap();
        (f.layout().clone(), f.handle())
    });
    assert_eq!(layout.replicas, 2);
    let owner = cluster.config().owner_of(handle).unwrap() as u32;
    let leader = cluster.run_cli(&["status", "--json"]).json_any()["authority_leader"]
        .as_str()
        .map(|n| cluster.index(n) as u32);
    let victim = layout
        .datafiles
        .iter()
        .flat_map(|df| df.replicas())
        .find(|&s| s != owner && Some(s) != leader)
        .unwrap();
    let name = cluster.config().servers[victim as usize].name.clone();
    cluster.kill(&name, libc::SIGKILL);

    // Through the kernel and the mount: every write, fsync and read succeeds.
    let started = Instant::now();
    for i in 0..12u64 {
        let data = rng.bytes(150_000);
        let off = rng.range(0, model.len() as u64 - data.len() as u64);
        f.write_all_at(&data, off)
            .unwrap_or_else(|e| panic!("write {i} with {name} dead: {e}"));
        model[off as usize..off as usize + data.len()].copy_from_slice(&data);
    }
    f.sync_all().unwrap();
    let mut back = vec![0u8; model.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_bytes_eq(&back, &model, "read through the mount");
    eprintln!(
        "through the mount with {name} killed: {:?}",
        started.elapsed()
    );
    assert_bytes_eq(&std::fs::read(&path).unwrap(), &model, "read anew");
    // The negative control: the dead server's copies missed the writes.
    assert!(
        differing(&cluster, &layout) >= 1,
        "the dead copies do not differ"
    );

    cluster.restart(&name);
    all_up(&cluster);
    assert_eq!(
        differing(&cluster, &layout),
        0,
        "copies differ after catch-up"
    );
}

/// A write the head applied and passed on to a tail that was stopped, whose client
/// gave up: no client saw it acknowledged, and the map made without the tail ends it
/// with an error. The head noted the change as unfinished; settling it records the
/// range as missed by the tail, which copies it when back: both copies hold the same
/// bytes, and fsck finds nothing. (Without the note, the tail comes back with the old
/// bytes and the head keeps the new ones: two reads of one byte could differ.)
#[test]
fn a_write_cut_short_leaves_copies_that_agree() {
    let cluster = common::with_copies(4, 2);
    let config = cluster.config().clone();
    let name = |i: u32| config.servers[i as usize].name.clone();
    let tc = TestClient::new(config.clone());
    let (old, new) = (vec![0xaau8; 65536], vec![0xbbu8; 65536]);
    let spec = LayoutSpec {
        stripe_count: Some(1),
        ..LayoutSpec::default()
    };
    let (handle, head, tail) = tc.run(Duration::from_secs(60), async |c| {
        let f = c.create("/cut", 0o644, spec, true).await.unwrap();
        f.write_at(0, &old).await.unwrap();
        f.fsync().await.unwrap();
        let d = &f.layout().datafiles[0];
        let r: Vec<u32> = d.replicas().collect();
        assert_eq!(r.len(), 2, "{r:?}");
        // A new file system: every copy joined at once, so the chain is the
        // layout's order.
        (d.handle, r[0], r[1])
    });
    let on_disk = |s: u32| std::fs::read(cluster.datafile_path(s as usize, handle)).ok();
    assert_eq!(on_disk(head).as_deref(), Some(&old[..]));
    assert_eq!(on_disk(tail).as_deref(), Some(&old[..]));
    // Opened, with its capability to write, before (the file's metadata may be on
    // the tail's server): once the tail stops, the write reaches the head at once,
    // well before the map can leave the tail out.
    let f = tc.run(Duration::from_secs(60), async |c| {
        let f = c.open("/cut").await.unwrap();
        f.write_at(0, &old).await.unwrap();
        f
    });
    cluster.kill(&name(tail), libc::SIGSTOP);
    let pid = cluster.pid(&name(tail));
    poll("the tail stopped", scaled(Duration::from_secs(10)), || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let state = stat.rsplit_once(") ")?.1.chars().next()?;
        (state == 'T').then_some(())
    });
    eprintln!(
        "datafile {handle:#x}: head {} tail {} (stopped, pid {pid})",
        name(head),
        name(tail)
    );
    // The client gives up on the write once the head applied it and waits for the
    // stopped tail: its task is aborted (at the await of the head's answer), so it
    // never sends it again.
    let write = {
        let new = new.clone();
        tc.rt.spawn(async move { f.write_at(0, &new).await })
    };
    poll(
        "the head holding the new bytes",
        scaled(Duration::from_secs(30)),
        || (on_disk(head).as_deref() == Some(&new[..])).then_some(()),
    );
    if write.is_finished() {
        let ended = tc.rt.block_on(write);
        panic!("the write ended while its tail was stopped: {ended:?}");
    }
    write.abort();
    poll(
        "the stopped tail down",
        scaled(Duration::from_secs(30)),
        || (state_of(&cluster, &name(tail)).as_deref() == Some("down")).then_some(()),
    );
    cluster.kill(&name(tail), libc::SIGCONT);
    poll("the tail up again", scaled(Duration::from_secs(30)), || {
        (state_of(&cluster, &name(tail)).as_deref() == Some("up")).then_some(())
    });
    assert_eq!(
        on_disk(tail),
        on_disk(head),
        "the copies differ after the write cut short"
    );
    let fsck = cluster.run_cli(&["fsck", "--json"]);
    assert_eq!(fsck.json_any()["problems"], serde_json::json!([]));
    cluster.assert_all_running();
}
