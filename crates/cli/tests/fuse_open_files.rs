//! Open files outlive their names across clients, as on one machine: a file open
//! through mount A stays readable and writable through its descriptor after mount B
//! unlinks it or renames another file over it; its space is freed at A's last
//! close, or when A is gone (killed: its lease ends), and never before; `pvfs fsck`
//! counts such files as open, not as orphans; a metadata server restarted meanwhile
//! learns the holds again and deletes nothing that is held.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;
#[path = "fuse/replace.rs"]
mod replace;

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::time::Duration;

use common::{poll, scaled, Cluster};
use mount::Mount;

/// The lease of these clusters: a killed mount's holds end this long after it.
const LEASE: &str = "\"2s\"";

/// Bytes that cover every server's stripe units (so each datafile exists on disk).
fn contents(seed: u8) -> Vec<u8> {
    (0..1_200_000u32).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// The attributes of `path` on the file system.
fn stat(cluster: &Cluster, path: &str) -> pvfs_client::Attr {
    cluster.client().run(Duration::from_secs(30), async |c| {
        c.stat(path).await.unwrap()
    })
}

/// Where the datafiles of `path` (on the file system) are kept on the servers' disks.
fn datafiles(cluster: &Cluster, path: &str) -> Vec<PathBuf> {
    let attr = stat(cluster, path);
    let pvfs_proto::ObjDetail::File { layout } = attr.detail else {
        panic!("{path} is not a file");
    };
    let paths: Vec<PathBuf> = layout.datafiles[..layout.width as usize]
        .iter()
        .map(|d| cluster.datafile_path(d.server as usize, d.handle))
        .collect();
    assert!(paths.len() >= 2, "the file should span servers: {paths:?}");
    for p in &paths {
        assert!(p.exists(), "datafile {p:?} should be on disk");
    }
    paths
}

fn all_gone(paths: &[PathBuf]) -> bool {
    paths.iter().all(|p| !p.exists())
}

fn fsck_json(cluster: &Cluster) -> serde_json::Value {
    cluster.run_cli(&["fsck", "--json"]).json()
}

#[test]
fn a_file_open_on_one_mount_outlives_an_unlink_and_a_rename_over_on_another() {
    let cluster = Cluster::builder().set("lease", LEASE).start();
    let a = Mount::start(&cluster, &[]);
    let b = Mount::start(&cluster, &[]);
    let data = contents(0);

    // Control: a file open nowhere is deleted, datafiles and all, soon after B's
    // unlink (so the checks below can see a deletion).
    std::fs::write(a.join("control"), &data).unwrap();
    let control = datafiles(&cluster, "/control");
    std::fs::remove_file(b.join("control")).unwrap();
    poll(
        "the control file's datafiles to go",
        scaled(Duration::from_secs(10)),
        || all_gone(&control).then_some(()),
    );

    // Unlinked through B while open through A.
    std::fs::write(a.join("f"), &data).unwrap();
    let f_data = datafiles(&cluster, "/f");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(a.join("f"))
        .unwrap();
    std::fs::remove_file(b.join("f")).unwrap();
    assert!(!b.join("f").exists());
    std::thread::sleep(Duration::from_millis(300));
    let mut got = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut got).unwrap();
    assert!(
        got == data,
        "A read {} bytes of the unlinked file, not its contents",
        got.len()
    );
    f.write_all_at(b"written after the unlink", 1000).unwrap();
    let mut back = [0u8; 24];
    f.read_exact_at(&mut back, 1000).unwrap();
    assert_eq!(&back, b"written after the unlink");
    // (A learns of B's unlink through its server's change feed.)
    let t0 = std::time::Instant::now();
    while f.metadata().unwrap().nlink() != 0 && t0.elapsed() < scaled(Duration::from_secs(5)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(f.metadata().unwrap().nlink(), 0, "fstat shows no name left");
    assert!(
        !all_gone(&f_data),
        "the datafiles stay while A has the file open"
    );

    // fsck sees a file open without a name: not a problem.
    let report = fsck_json(&cluster);
    assert_eq!(report["open_unlinked"], 1, "{report}");
    assert_eq!(report["unrepaired"], 0, "{report}");

    // A name replaced through B while open through A: A keeps the old file.
    let old = contents(1);
    std::fs::write(a.join("g"), &old).unwrap();
    let g_data = datafiles(&cluster, "/g");
    let g = std::fs::File::open(a.join("g")).unwrap();
    std::fs::write(b.join("g.new"), b"the new version").unwrap();
    std::fs::rename(b.join("g.new"), b.join("g")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut got = vec![0u8; old.len()];
    g.read_exact_at(&mut got, 0).unwrap();
    assert!(got == old, "A's descriptor lost the replaced file");
    assert_eq!(std::fs::read(a.join("g")).unwrap(), b"the new version");
    assert_eq!(fsck_json(&cluster)["open_unlinked"], 2);

    // The last close frees each.
    drop(f);
    poll(
        "f's datafiles to go at its last close",
        scaled(Duration::from_secs(10)),
        || all_gone(&f_data).then_some(()),
    );
    assert!(!all_gone(&g_data), "g is still open");
    drop(g);
    poll(
        "g's datafiles to go at its last close",
        scaled(Duration::from_secs(10)),
        || all_gone(&g_data).then_some(()),
    );
    let report = fsck_json(&cluster);
    assert_eq!(report["open_unlinked"], 0, "{report}");
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
}

#[test]
fn a_killed_mounts_open_files_are_freed_when_its_lease_ends() {
    let cluster = Cluster::builder().set("lease", LEASE).start();
    let mut a = Mount::start(&cluster, &[]);
    let b = Mount::start(&cluster, &[]);
    let data = contents(2);
    std::fs::write(a.join("held"), &data).unwrap();
    let held = datafiles(&cluster, "/held");
    let f = std::fs::File::open(a.join("held")).unwrap();
    std::fs::remove_file(b.join("held")).unwrap();
    // Longer than a lease: A renews it, so the file stays.
    std::thread::sleep(scaled(Duration::from_secs(3)));
    assert!(!all_gone(&held), "deleted while A had it open");
    let mut got = vec![0u8; data.len()];
    f.read_exact_at(&mut got, 0).unwrap();
    assert!(got == data);

    // A dies without closing: its lease ends, and the file goes with it.
    a.signal(libc::SIGKILL);
    a.wait_exit(Duration::from_secs(30));
    drop(f);
    poll(
        "the killed mount's file to go after its lease",
        scaled(Duration::from_secs(20)),
        || all_gone(&held).then_some(()),
    );
    let report = fsck_json(&cluster);
    assert_eq!(report["open_unlinked"], 0, "{report}");
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
}

#[test]
fn a_restarted_metadata_server_deletes_nothing_held_open() {
    let cluster = Cluster::builder().set("lease", LEASE).start();
    let a = Mount::start(&cluster, &[]);
    let b = Mount::start(&cluster, &[]);
    let data = contents(3);
    std::fs::write(a.join("kept"), &data).unwrap();
    let handle = stat(&cluster, "/kept").handle;
    let kept = datafiles(&cluster, "/kept");
    let f = std::fs::File::open(a.join("kept")).unwrap();
    std::fs::remove_file(b.join("kept")).unwrap();
    // A second file on the same server, unlinked only after the restart.
    let late_data = contents(4);
    let late_path = (0..64)
        .map(|i| format!("late{i}"))
        .find(|n| {
            std::fs::write(a.join(n), &late_data).unwrap();
            let h = stat(&cluster, &format!("/{n}")).handle;
            cluster.config().owner_of(h) == cluster.config().owner_of(handle)
        })
        .expect("a file on the same metadata server");
    let late_files = datafiles(&cluster, &format!("/{late_path}"));
    let late = std::fs::File::open(a.join(&late_path)).unwrap();

    // The server that owns the objects forgets every hold; A holds them again when
    // it sees its new lease. Until then (a grace of one lease) the server deletes
    // nothing, so B's unlink right after the restart keeps the file A has open; and
    // the sweep a lease after the start leaves both alone.
    let owner = cluster.config().owner_of(handle).unwrap();
    let name = cluster.names()[owner].clone();
    cluster.kill(&name, libc::SIGKILL);
    cluster.restart(&name);
    // (B saw the server refuse connections while it was down: for half a second
    // after that its calls to it fail at once, EIO through the mount.)
    poll(
        "B's unlink right after the restart",
        scaled(Duration::from_secs(10)),
        || std::fs::remove_file(b.join(&late_path)).ok(),
    );
    std::thread::sleep(scaled(Duration::from_secs(5)));
    assert!(!all_gone(&kept), "deleted while A had it open");
    assert!(
        !all_gone(&late_files),
        "unlinked after the restart and deleted while A had it open"
    );
    let mut got = vec![0u8; data.len()];
    f.read_exact_at(&mut got, 0).unwrap();
    assert!(got == data, "A's descriptor lost the file over the restart");
    let mut got = vec![0u8; late_data.len()];
    late.read_exact_at(&mut got, 0).unwrap();
    assert!(
        got == late_data,
        "A's descriptor lost the file unlinked after the restart"
    );
    assert_eq!(fsck_json(&cluster)["open_unlinked"], 2);

    drop(f);
    drop(late);
    poll(
        "the files to go at their last close after the restart",
        scaled(Duration::from_secs(10)),
        || (all_gone(&kept) && all_gone(&late_files)).then_some(()),
    );
    assert!(
        a.log_text().contains("holding them again"),
        "A never held its files again:\n{}",
        a.log_text()
    );
}

/// Replace-by-rename through mount B while readers on mount A open and read the
/// file: each open finds the old version or the new one, whole.
#[test]
fn a_file_renamed_over_on_another_mount_is_never_missing_to_readers() {
    const OPENS: usize = 10_000;
    let cluster = Cluster::start();
    let a = Mount::start(&cluster, &[]);
    let b = Mount::start(&cluster, &[]);
    let (renames, seen) = replace::replace_while_reading(b.path(), a.path(), "cfg", OPENS);
    eprintln!(
        "{} opens on A during {renames} replacements on B: {seen:?}",
        2 * OPENS
    );
    replace::assert_all_whole(OPENS, renames, &seen);
}
