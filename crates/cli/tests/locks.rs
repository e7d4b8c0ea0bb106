//! Cluster-wide file locks through two FUSE mounts of one file system (two client
//! processes, as two nodes would have): `tests/locks/lockprog.c` processes on
//! either mount take, test, wait for and release `fcntl` record locks, OFD locks and
//! `flock`s, and the tests check what each sees (`docs/locks.md`):
//!
//! - mutual exclusion, shared and exclusive, EAGAIN/EWOULDBLOCK, F_GETLK's answer
//!   for a remote lock, split/merge/upgrade, `flock` against `fcntl`, release at
//!   close;
//! - a waiter on one mount woken promptly when the holder on the other unlocks;
//! - a killed mount's locks released after the lease;
//! - EDEADLK for a cycle of two clients over files on two servers;
//! - a process waiting in F_SETLKW killed, or interrupted by a signal;
//! - a server restarted while a lock is held: the lock is reclaimed;
//! - ROMIO's data sieving writes from two mounts leave the file correct.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "locks/driver.rs"]
mod driver;
#[path = "fuse/mount.rs"]
mod mount;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{profile_dir, scaled, skip, Cluster};
use driver::Proc;
use mount::Mount;

/// The lease the tests configure: short, so a dead client's locks go soon.
const LEASE: &str = "2s";

fn lockprog() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = profile_dir().join("lock-tests");
        std::fs::create_dir_all(&dir).unwrap();
        driver::compile(&dir, "lockprog", &[])
    })
}

/// Whether this machine can run the mount tests (root and /dev/fuse); says why not.
fn can_mount(test: &str) -> bool {
    if !common::is_root() {
        skip(test, "mounting needs root");
        return false;
    }
    true
}

/// A 2-server file system (both metadata and data) with the short lease.
fn cluster() -> Cluster {
    Cluster::builder()
        .servers(2)
        .set("lease", &format!("\"{LEASE}\""))
        .start()
}

/// A lock client on `m` named `name`, working in the mount's directory.
fn on(m: &Mount, name: &str) -> Proc {
    let mut cmd = Command::new(lockprog());
    cmd.current_dir(m.path());
    Proc::start(name, cmd)
}

#[test]
fn fcntl_ofd_and_flock_exclude_each_other_across_two_mounts() {
    if !can_mount("fcntl_ofd_and_flock_exclude_each_other_across_two_mounts") {
        return;
    }
    let c = cluster();
    let ma = Mount::start(&c, &[]);
    let mb = Mount::start(&c, &[]);
    let mut a = on(&ma, "A");
    let mut a2 = on(&ma, "A2");
    let mut b = on(&mb, "B");
    a.expect("open 0 f rw", "ok");
    a2.expect("open 0 f rw", "ok");
    b.expect("open 0 f rw", "ok");

    // Exclusive against everything, shared with shared.
    a.expect("lk 0 setlk w 0 100", "ok");
    b.expect("lk 0 setlk w 50 10", "err EAGAIN");
    b.expect("lk 0 setlk r 99 1", "err EAGAIN");
    b.expect("lk 0 setlk w 100 10", "ok");
    // F_GETLK names the lock in the way: another client's process has no pid here.
    b.expect("lk 0 getlk w 0 0", "lock w 0 100 0");
    // Another process of the same mount sees the holder's pid.
    a.send("pid");
    let pid = a.answer();
    let pid = pid.strip_prefix("pid ").unwrap();
    a2.expect("lk 0 getlk r 10 1", &format!("lock w 0 100 {pid}"));
    b.expect("lk 0 setlk u 0 0", "ok");

    // Unlocking part of a lock splits it; upgrade and downgrade.
    a.expect("lk 0 setlk u 40 20", "ok");
    b.expect("lk 0 setlk w 40 20", "ok");
    b.expect("lk 0 setlk w 39 1", "err EAGAIN");
    b.expect("lk 0 setlk w 60 1", "err EAGAIN");
    b.expect("lk 0 setlk u 0 0", "ok");
    a.expect("lk 0 setlk r 0 100", "ok");
    b.expect("lk 0 setlk r 0 10", "ok");
    b.expect("lk 0 getlk w 0 0", "lock r 0 100 0");
    a.expect("lk 0 setlk w 0 10", "err EAGAIN");
    b.expect("lk 0 setlk u 0 0", "ok");
    a.expect("lk 0 setlk w 0 10", "ok");
    b.expect("lk 0 setlk r 5 1", "err EAGAIN");

    // Any close of the file by the holder releases its POSIX locks.
    a.expect("open 1 f r", "ok");
    a.expect("close 1", "ok");
    b.expect("lk 0 setlk w 0 0", "ok");
    a.expect("lk 0 getlk w 0 0", "lock w 0 0 0");
    b.expect("close 0", "ok");
    a.expect("lk 0 getlk w 0 0", "unlocked");

    // flock: exclusive and shared, EWOULDBLOCK (EAGAIN's other name on Linux),
    // released at the last close; it is a whole-file lock, so it conflicts with fcntl
    // locks (docs/locks.md).
    b.expect("open 0 f rw", "ok");
    a.expect("flock 0 ex", "ok");
    b.expect("flock 0 ex nb", "err EAGAIN");
    b.expect("flock 0 sh nb", "err EAGAIN");
    b.expect("lk 0 setlk r 7 1", "err EAGAIN");
    a.expect("flock 0 sh", "ok");
    b.expect("flock 0 sh nb", "ok");
    a.expect("flock 0 ex nb", "err EAGAIN");
    b.expect("flock 0 un", "ok");
    a.expect("flock 0 ex nb", "ok");
    // The last close: the kernel sends the mount the file's release just after
    // close returns (in the background), and the flock goes with it.
    a.expect("close 0", "ok");
    b.expect_soon("flock 0 ex nb", "ok");
    b.expect("flock 0 un", "ok");

    // OFD locks: per open file, not per process.
    a.expect("open 0 f rw", "ok");
    a.expect("open 1 f rw", "ok");
    a.expect("lk 0 ofd-setlk w 0 10", "ok");
    a.expect("lk 1 ofd-setlk w 5 1", "err EAGAIN");
    // (F_OFD_GETLK reports -1 as the pid: the kernel says so for OFD requests.)
    b.expect("lk 0 ofd-getlk r 0 1", "lock w 0 10 -1");
    a.expect("close 1", "ok");
    b.expect("lk 0 ofd-setlk r 0 1", "err EAGAIN");
    a.expect("close 0", "ok");
    b.expect_soon("lk 0 ofd-setlk r 0 1", "ok");

    for p in [a, a2, b] {
        p.finish();
    }
}

#[test]
fn a_waiter_on_one_mount_is_woken_when_the_other_unlocks() {
    if !can_mount("a_waiter_on_one_mount_is_woken_when_the_other_unlocks") {
        return;
    }
    let c = cluster();
    let ma = Mount::start(&c, &[]);
    let mb = Mount::start(&c, &[]);
    let mut a = on(&ma, "A");
    let mut b = on(&mb, "B");
    a.expect("open 0 f rw", "ok");
    b.expect("open 0 f rw", "ok");
    a.expect("lk 0 setlk w 0 0", "ok");
    a.expect("pwrite 0 0 before", "ok");
    b.send("lk 0 setlkw w 0 0");
    // Longer than the server's bounded wait (a third of the request timeout, 5 s):
    // the request is answered "still waiting" and sent again in between.
    assert_eq!(
        b.answer_within(Duration::from_secs(3)),
        None,
        "B got the lock"
    );
    a.expect("pwrite 0 0 after!", "ok");
    let t = Instant::now();
    a.expect("lk 0 setlk u 0 0", "ok");
    let answer = b.answer();
    let woken = t.elapsed();
    assert_eq!(answer, "ok");
    // Woken by the unlock, not by a poll (the request would be re-sent only every
    // 1.7 s); generous for a loaded machine.
    assert!(
        woken < scaled(Duration::from_millis(700)),
        "woken {woken:?} after the unlock"
    );
    // Coherence: what A wrote under the lock is what B reads under it.
    b.expect("pread 0 0 6", "data after!");
    a.finish();
    b.finish();
}
