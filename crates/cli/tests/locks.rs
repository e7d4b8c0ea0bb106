//! Cluster-wide file locks through two FUSE mounts of one file system (two client
//! processes, as two nodes would have): `tests/locks/lockprog.c` processes on
//! either mount take, test, wait for and release `fcntl` record locks, OFD locks and
//! `flock`s, and the tests check what each sees (`docs/locks.md`):
//!
//! - mutual exclusion, shared and exclusive, EAGAIN/EWOULDBLOCK, F_GETLK's answer
//!   for a remote lock, split/merge/upgrade, `flock` against `fcntl`, release at
//!   close;
//! - a waiter on one mount woken promptly when the holder on the other unlocks;
//! - a file's hard links reach the same locks, also after the locked name is gone;
//! - a killed mount's locks released after the lease;
//! - appends under a lock from both mounts all kept (a granted lock shows the size);
//! - EDEADLK for a cycle of two clients over files on two servers, and never without
//!   one, however many processes hammer locks taken in one order;
//! - a process waiting in F_SETLKW killed, or interrupted by a signal;
//! - a server restarted while a lock is held: the lock is reclaimed;
//! - ROMIO's data sieving writes from two mounts leave the file correct.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "locks/driver.rs"]
mod driver;
#[path = "fuse/mount.rs"]
mod mount;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{scaled, skip, Cluster};
use driver::Proc;
use mount::Mount;

/// The lease the tests configure: short, so a dead client's locks go soon.
const LEASE: &str = "2s";

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

/// A file system with two mounts, as on two nodes.
struct Two {
    c: Cluster,
    ma: Mount,
    mb: Mount,
}

/// [`Two`], or None (the test skipped) where mounting is not possible.
fn two_mounts(test: &str) -> Option<Two> {
    if !can_mount(test) {
        return None;
    }
    let c = cluster();
    let ma = Mount::start(&c, &[]);
    let mb = Mount::start(&c, &[]);
    Some(Two { c, ma, mb })
}

impl Two {
    /// A client on each mount ("A", "B"), each with `file` open read-write in slot
    /// `slot`.
    fn pair(&self, file: &str, slot: u32) -> (Proc, Proc) {
        let mut a = on(&self.ma, "A");
        let mut b = on(&self.mb, "B");
        a.expect(&format!("open {slot} {file} rw"), "ok");
        b.expect(&format!("open {slot} {file} rw"), "ok");
        (a, b)
    }
}

/// A lock client on `m` named `name`, working in the mount's directory.
fn on(m: &Mount, name: &str) -> Proc {
    let mut cmd = Command::new(driver::lockprog());
    cmd.current_dir(m.path());
    Proc::start(name, cmd)
}

#[test]
fn fcntl_ofd_and_flock_exclude_each_other_across_two_mounts() {
    let Some(t) = two_mounts("fcntl_ofd_and_flock_exclude_each_other_across_two_mounts") else {
        return;
    };
    let (mut a, mut b) = t.pair("f", 0);
    let mut a2 = on(&t.ma, "A2");
    a2.expect("open 0 f rw", "ok");

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
    let Some(t) = two_mounts("a_waiter_on_one_mount_is_woken_when_the_other_unlocks") else {
        return;
    };
    let (mut a, mut b) = t.pair("f", 0);
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
    let unlocked = Instant::now();
    a.expect("lk 0 setlk u 0 0", "ok");
    let answer = b.answer();
    let woken = unlocked.elapsed();
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

#[test]
fn a_files_hard_links_reach_the_same_locks() {
    let Some(t) = two_mounts("a_files_hard_links_reach_the_same_locks") else {
        return;
    };
    std::fs::write(t.ma.join("f"), b"x").unwrap();
    std::fs::create_dir(t.ma.join("sub")).unwrap();
    std::fs::hard_link(t.ma.join("f"), t.ma.join("sub/g")).unwrap();
    let mut a = on(&t.ma, "A");
    let mut b = on(&t.mb, "B");
    a.expect("open 0 f rw", "ok");
    b.expect("open 0 sub/g rw", "ok");
    a.expect("lk 0 setlk w 0 0", "ok");
    b.expect("lk 0 setlk r 0 1", "err EAGAIN");
    b.expect("flock 0 ex nb", "err EAGAIN");
    // The locked name goes; the lock stays with the object the other name reaches.
    std::fs::remove_file(t.mb.join("f")).unwrap();
    b.expect("lk 0 setlk w 0 0", "err EAGAIN");
    b.blocks("lk 0 setlkw w 0 0");
    b.woken_by(&mut a, "lk 0 setlk u 0 0", "ok");
    a.expect("lk 0 setlk r 0 1", "err EAGAIN");
    b.expect("lk 0 setlk u 0 0", "ok");
    a.expect("lk 0 setlk w 0 0", "ok");
    a.finish();
    b.finish();
}

#[test]
fn a_killed_mounts_locks_go_after_the_lease() {
    let Some(t) = two_mounts("a_killed_mounts_locks_go_after_the_lease") else {
        return;
    };
    let (a, mut b) = t.pair("f", 0);
    let mut a = a;
    a.expect("lk 0 setlk w 0 0", "ok");
    // Let the holder's lease be renewed at least once.
    std::thread::sleep(Duration::from_millis(800));
    t.ma.signal(libc::SIGKILL);
    let killed = Instant::now();
    b.expect("lk 0 setlk w 0 0", "err EAGAIN");
    b.send("lk 0 setlkw w 0 0");
    let answer = b.answer();
    let waited = killed.elapsed();
    assert_eq!(answer, "ok");
    // Released by the lease's end (2 s after the last renewal, at most 2/3 of it
    // before the kill), not before.
    assert!(
        waited >= Duration::from_millis(1000) && waited < scaled(Duration::from_secs(15)),
        "the lock came free {waited:?} after the holder's mount was killed"
    );
    drop(a);
    b.finish();
}

/// Names of files in the mount's root whose objects live on different metadata
/// servers (handles of server i are in `(i+1) << 40 ..`).
fn files_on_two_servers(m: &Mount) -> (String, String) {
    use std::os::unix::fs::MetadataExt;
    let mut by_server: [Option<String>; 2] = [None, None];
    for i in 0..64 {
        let name = format!("d{i}");
        std::fs::write(m.join(&name), b"x").unwrap();
        let ino = std::fs::metadata(m.join(&name)).unwrap().ino();
        let server = (ino >> 40) as usize;
        if (1..=2).contains(&server) && by_server[server - 1].is_none() {
            by_server[server - 1] = Some(name);
        }
        if let [Some(a), Some(b)] = &by_server {
            return (a.clone(), b.clone());
        }
    }
    panic!("no two files on two servers among 64 names");
}

#[test]
fn a_deadlock_of_two_clients_over_two_servers_is_edeadlk() {
    let Some(t) = two_mounts("a_deadlock_of_two_clients_over_two_servers_is_edeadlk") else {
        return;
    };
    let (f1, f2) = files_on_two_servers(&t.ma);
    let (mut a, mut b) = t.pair(&f1, 1);
    a.expect(&format!("open 2 {f2} rw"), "ok");
    b.expect(&format!("open 2 {f2} rw"), "ok");
    a.expect("lk 1 setlk w 0 0", "ok");
    b.expect("lk 2 setlk w 0 0", "ok");
    // A waits for B's lock on the second server...
    a.blocks("lk 2 setlkw w 0 0");
    // ...and B waiting for A's on the first would close the cycle.
    let asked = Instant::now();
    b.expect("lk 1 setlkw w 0 0", "err EDEADLK");
    assert!(asked.elapsed() < scaled(Duration::from_secs(5)));
    // Not a deadlock once B lets go: A gets it.
    a.woken_by(&mut b, "lk 2 setlk u 0 0", "ok");
    a.expect("lk 1 setlk u 0 0", "ok");
    a.expect("lk 2 setlk u 0 0", "ok");
    a.finish();
    b.finish();
}

/// One case of [`hammer`]: what it is, the mount of each process, the files, and
/// (rounds, `fcntl` or `flock`, how long each lock is held in microseconds).
type Hammering<'a> = (&'a str, Vec<&'a Mount>, Vec<&'a str>, (u32, &'a str, u32));

/// Processes on `mounts` (one each) hammer exclusive whole-file locks on `files`,
/// taken in that order, `rounds` times each: the EDEADLKs each was refused. With
/// the locks always taken in one order, no cycle of waits can form: any is a
/// phantom, a wait that was over counted in a cycle.
fn hammer(
    mounts: &[&Mount],
    files: &[&str],
    (rounds, kind, hold_us): (u32, &str, u32),
) -> Vec<u64> {
    let mut procs: Vec<Proc> = mounts
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut p = on(m, &format!("P{i}"));
            for (slot, f) in files.iter().enumerate() {
                p.expect(&format!("open {slot} {f} rw"), "ok");
            }
            p
        })
        .collect();
    let slots: Vec<String> = (0..files.len()).map(|s| s.to_string()).collect();
    let cmd = format!("hammer {rounds} {kind} {hold_us} {}", slots.join(" "));
    for p in &mut procs {
        p.send(&cmd);
    }
    let counts = procs
        .iter_mut()
        .map(|p| {
            let got = p
                .answer_within(Duration::from_secs(120))
                .unwrap_or_else(|| {
                    panic!("{}: `{cmd}` did not finish", p.name);
                });
            let n = got
                .strip_prefix("ok ")
                .unwrap_or_else(|| panic!("{}: {got}", p.name));
            n.parse().unwrap()
        })
        .collect();
    for p in procs {
        p.finish();
    }
    counts
}

/// EDEADLK only for a real cycle: 2 to 8 processes on one mount and on two, taking
/// one lock (fcntl and flock, held for no time and for a millisecond) or two locks
/// on two servers in one order, many rounds each, are never refused. (Before, an
/// unlock was answered while the coordinator still held the edge of the waiter it
/// had just granted, so the unlocker asking again found a cycle through it.)
#[test]
fn processes_hammering_locks_in_one_order_never_see_edeadlk() {
    let Some(t) = two_mounts("processes_hammering_locks_in_one_order_never_see_edeadlk") else {
        return;
    };
    let (f1, f2) = files_on_two_servers(&t.ma);
    let (a, b) = (&t.ma, &t.mb);
    let cases: [Hammering; 5] = [
        (
            "2 on one mount, fcntl",
            vec![a, a],
            vec![&f1],
            (300, "fcntl", 0),
        ),
        (
            "4 on one mount, flock",
            vec![a, a, a, a],
            vec![&f1],
            (200, "flock", 0),
        ),
        (
            "2 on two mounts, fcntl, 1 ms held",
            vec![a, b],
            vec![&f1],
            (200, "fcntl", 1000),
        ),
        (
            "4 on two mounts, flock",
            vec![a, b, a, b],
            vec![&f1],
            (200, "flock", 0),
        ),
        (
            "8 on two mounts, fcntl, two files on two servers in one order",
            vec![a, b, a, b, a, b, a, b],
            vec![&f1, &f2],
            (60, "fcntl", 0),
        ),
    ];
    let mut rounds = 0;
    for (what, mounts, files, how) in cases {
        let counts = hammer(&mounts, &files, how);
        assert!(
            counts.iter().all(|&n| n == 0),
            "{what}: EDEADLK without a cycle, per process: {counts:?}"
        );
        rounds += how.0 as usize * mounts.len();
    }
    eprintln!("{rounds} rounds of locks, no EDEADLK");
}

/// Appends under a lock: a process on each mount appends records to one file
/// opened with `O_APPEND`, each record under an exclusive lock (`fcntl`, then
/// `flock`): every record is in the file exactly once, and nothing else. (The
/// kernel appends at the size it knows, which another mount's appends made stale:
/// about half the records were once written over.)
#[test]
fn appends_under_a_lock_from_two_mounts_are_all_kept() {
    let Some(t) = two_mounts("appends_under_a_lock_from_two_mounts_are_all_kept") else {
        return;
    };
    const EACH: usize = 300;
    for how in ["fcntl", "flock"] {
        let log = format!("log-{how}");
        std::fs::write(t.ma.join(&log), b"").unwrap();
        let mut a = on(&t.ma, "A");
        let mut b = on(&t.mb, "B");
        a.expect(&format!("open 0 {log} a"), "ok");
        b.expect(&format!("open 0 {log} a"), "ok");
        a.send(&format!("appends 0 {EACH} A {how}"));
        b.send(&format!("appends 0 {EACH} B {how}"));
        for p in [&mut a, &mut b] {
            let got = p.answer_within(Duration::from_secs(120));
            assert_eq!(
                got.as_deref(),
                Some("ok"),
                "{}: appends under {how}",
                p.name
            );
        }
        a.finish();
        b.finish();
        let text = String::from_utf8(std::fs::read(t.mb.join(&log)).unwrap())
            .unwrap_or_else(|e| panic!("{how}: the log is not text (a hole?): {e}"));
        let mut lines: Vec<&str> = text.lines().collect();
        let written = lines.len();
        lines.sort_unstable();
        let mut want: Vec<String> = ["A", "B"]
            .iter()
            .flat_map(|tag| (0..EACH).map(move |i| format!("{tag} {i:06}")))
            .collect();
        want.sort_unstable();
        assert_eq!(
            written,
            2 * EACH,
            "{how}: {written} records in the file, {} appended",
            2 * EACH
        );
        assert!(lines == want, "{how}: the records are not each there once");
    }
}

/// `O_APPEND` between clients, without any lock: two processes on each of two
/// mounts, one on the C library and one on the preload library append records to
/// one file at once, while another process holds a whole-file `fcntl` lock on it. Every record is in the file exactly once, with no hole and
/// nothing else, and the writers' records alternate in the file (the appends
/// raced: a run where each wrote alone would check nothing). Without the
/// appender's lock about half of the records were written over.
#[test]
fn appends_without_locks_from_mounts_and_libraries_are_all_kept() {
    let Some(t) = two_mounts("appends_without_locks_from_mounts_and_libraries_are_all_kept") else {
        return;
    };
    const EACH: usize = 150;
    let prefix = format!("/pvfs-test-{}-appends", std::process::id());
    std::fs::write(t.ma.join("log"), b"").unwrap();
    let mut procs = vec![
        (on(&t.ma, "A1"), "log".to_string()),
        (on(&t.ma, "A2"), "log".to_string()),
        (on(&t.mb, "B1"), "log".to_string()),
        (on(&t.mb, "B2"), "log".to_string()),
        (driver::capi_locker(&t.c, "C"), "/log".to_string()),
        (
            driver::preloaded_locker(&t.c, &prefix, "P"),
            format!("{prefix}/log"),
        ),
    ];
    for (p, path) in &mut procs {
        p.expect(&format!("open 0 {path} a"), "ok");
    }
    // A program's whole-file lock holds up no appender: appenders' locks are kept
    // apart from the programs' (no append would finish otherwise).
    let mut holder = on(&t.mb, "L");
    holder.expect("open 0 log rw", "ok");
    holder.expect("lk 0 setlk w 0 0", "ok");
    for (p, _) in &mut procs {
        let tag = p.name.clone();
        p.send(&format!("appends 0 {EACH} {tag} none"));
    }
    for (p, _) in &mut procs {
        let got = p.answer_within(Duration::from_secs(180));
        assert_eq!(got.as_deref(), Some("ok"), "{}: appends", p.name);
    }
    let tags: Vec<String> = procs.iter().map(|(p, _)| p.name.clone()).collect();
    for (p, _) in procs {
        p.finish();
    }
    // The program's lock was held all along.
    let mut look = on(&t.ma, "Q");
    look.expect("open 0 log rw", "ok");
    look.expect("lk 0 getlk w 0 0", "lock w 0 0 0");
    look.finish();
    holder.finish();
    let bytes = std::fs::read(t.mb.join("log")).unwrap();
    assert!(
        !bytes.contains(&0),
        "a hole in the log at byte {:?}",
        bytes.iter().position(|&b| b == 0)
    );
    let text = String::from_utf8(bytes).expect("the log is text");
    let lines: Vec<&str> = text.lines().collect();
    let mut sorted = lines.clone();
    sorted.sort_unstable();
    let mut want: Vec<String> = tags
        .iter()
        .flat_map(|tag| (0..EACH).map(move |i| format!("{tag} {i:06}")))
        .collect();
    want.sort_unstable();
    assert_eq!(
        lines.len(),
        want.len(),
        "{} records in the file, {} appended",
        lines.len(),
        want.len()
    );
    assert!(sorted == want, "the records are not each there once");
    // Each writer's records are in its own order, and the writers took turns.
    for tag in &tags {
        let mine: Vec<&&str> = lines
            .iter()
            .filter(|l| l.split(' ').next() == Some(tag))
            .collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "{tag}: out of order");
    }
    let turns = lines
        .windows(2)
        .filter(|w| w[0].split(' ').next() != w[1].split(' ').next())
        .count();
    assert!(
        turns >= 50,
        "only {turns} changes of writer: the appends did not race"
    );
    eprintln!("{} records, {turns} changes of writer", lines.len());
}

#[test]
fn a_process_waiting_in_setlkw_can_be_interrupted_and_killed() {
    let Some(t) = two_mounts("a_process_waiting_in_setlkw_can_be_interrupted_and_killed") else {
        return;
    };
    let (mut a, mut b) = t.pair("f", 0);
    a.expect("lk 0 setlk w 0 0", "ok");

    // A handler without SA_RESTART: the wait fails with EINTR.
    b.blocks("lk 0 setlkw w 0 0");
    let sent = Instant::now();
    b.interrupted_by(libc::SIGUSR1);
    let took = sent.elapsed();
    assert!(took < scaled(Duration::from_secs(2)), "{took:?}");

    // With SA_RESTART the call goes on waiting after the handler ran.
    b.send("lk 0 setlkw w 0 0");
    assert_eq!(b.answer_within(Duration::from_millis(500)), None);
    b.signal(libc::SIGUSR2);
    assert_eq!(b.answer_within(Duration::from_millis(700)), None);

    // SIGKILL ends the waiting process (FUSE would wait for the answer forever).
    b.signal(libc::SIGKILL);
    let dead = b.wait_exit(Duration::from_secs(5));
    assert!(dead.is_some(), "the killed waiter did not exit");
    // Its wait was withdrawn: nothing is kept for it once A unlocks.
    let mut c2 = on(&t.mb, "C");
    c2.expect("open 0 f rw", "ok");
    c2.expect("lk 0 setlk w 0 0", "err EAGAIN");
    a.expect("lk 0 setlk u 0 0", "ok");
    c2.expect("lk 0 setlk w 0 0", "ok");
    a.finish();
    c2.finish();
}

#[test]
fn a_restarted_server_gives_locks_back_to_their_holders() {
    let Some(t) = two_mounts("a_restarted_server_gives_locks_back_to_their_holders") else {
        return;
    };
    let c = &t.c;
    let (f1, _) = files_on_two_servers(&t.ma);
    let (mut a, mut b) = t.pair(&f1, 0);
    a.expect("lk 0 setlk w 10 10", "ok");
    // The lock table of the server that owns the file is lost with it...
    c.kill("s0", libc::SIGKILL);
    c.restart("s0");
    // ...and in its grace period A reclaims the lock: B, asking meanwhile, waits
    // out the grace period and then finds A's lock.
    let asked = Instant::now();
    b.expect("lk 0 setlk w 15 1", "err EAGAIN");
    assert!(asked.elapsed() < scaled(Duration::from_secs(15)));
    b.expect("lk 0 getlk w 0 0", "lock w 10 10 0");
    b.expect("lk 0 setlk w 0 10", "ok");
    a.expect("lk 0 setlk u 0 0", "ok");
    b.expect("lk 0 setlk w 15 1", "ok");
    assert!(
        c.log("s0").contains("grace period"),
        "no grace period in the log:\n{}",
        c.log_tail("s0")
    );
    a.finish();
    b.finish();
}

#[test]
fn romio_data_sieving_writes_from_two_mounts_leave_the_file_right() {
    let test = "romio_data_sieving_writes_from_two_mounts_leave_the_file_right";
    for tool in ["mpicc", "mpiexec"] {
        if !common::have_command(tool) {
            skip(
                test,
                &format!("{tool} is not installed (scripts/install-deps installs mpich)"),
            );
            return;
        }
    }
    let Some(Two { c, ma, mb }) = two_mounts(test) else {
        return;
    };
    let local = tempfile::tempdir().unwrap();
    let exe = common::mpicc(local.path(), "sieve");
    let (block, blocks, per_call) = (4096u64, 256u64, 8u64);
    let mut cmd = Command::new("mpiexec");
    cmd.args(["-n", "2"])
        .arg(&exe)
        .arg(format!("ufs:{}", ma.join("sieved").display()))
        .arg(format!("ufs:{}", mb.join("sieved").display()))
        .args([block, blocks, per_call].map(|v| v.to_string()));
    let out = mount::run_for(&mut cmd, Duration::from_secs(180));
    assert!(
        out.status.success(),
        "MPI run failed: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let got = c.client().run(Duration::from_secs(60), async |cl| {
        let f = cl.open("/sieved").await.unwrap();
        let mut buf = vec![0u8; (2 * block * blocks + 1) as usize];
        let n = f.read_at(0, &mut buf).await.unwrap();
        buf.truncate(n);
        buf
    });
    assert_eq!(got.len() as u64, 2 * block * blocks, "file size");
    let mut wrong = 0;
    for (off, &byte) in got.iter().enumerate() {
        let off = off as u64;
        let g = off / block;
        let (rank, b, i) = (g % 2, g / 2, off % block);
        let want = ((rank * 131 + b * 17 + i * 7) & 0xff) as u8;
        if byte != want {
            if wrong == 0 {
                eprintln!("first wrong byte at {off}: rank {rank}'s block {b}");
            }
            wrong += 1;
        }
    }
    assert_eq!(
        wrong, 0,
        "{wrong} bytes lost to unlocked read-modify-writes"
    );
}

/// An async program on a current-thread runtime (no thread of its own runs its
/// tasks) that holds a lock while it awaits, past several leases: its leases are
/// renewed meanwhile, and another client finds the lock taken all along. (Before,
/// such a client renewed nothing and lost its locks after one lease, as a dead
/// client does: the failover storm saw another client granted a lock held through
/// a long operation.)
#[test]
fn a_lock_held_while_a_current_thread_runtime_awaits_outlives_the_lease() {
    use pvfs_client::{LockKind, LockRequest, LockType};
    let c = cluster();
    let lease = Duration::from_secs(2);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = {
        let _g = rt.enter();
        c.new_client()
    };
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let other = {
        let tc = c.client();
        std::thread::spawn(move || {
            let handle = rx.recv().unwrap();
            // Past two leases of holding.
            std::thread::sleep(lease * 5 / 2);
            tc.run(Duration::from_secs(60), async |c| {
                let req = LockRequest {
                    handle,
                    owner: 7,
                    kind: LockKind::Ofd,
                    typ: LockType::Write,
                    start: 0,
                    end: pvfs_proto::locks::TO_EOF,
                    pid: 7,
                    wait: false,
                };
                c.lock(&req, &mut || false).await
            })
        })
    };
    rt.block_on(async {
        let f = client
            .create("/held", 0o644, pvfs_client::LayoutSpec::default(), true)
            .await
            .unwrap();
        let req = LockRequest {
            handle: f.handle(),
            owner: 1,
            kind: LockKind::Ofd,
            typ: LockType::Write,
            start: 0,
            end: pvfs_proto::locks::TO_EOF,
            pid: 1,
            wait: false,
        };
        client.lock(&req, &mut || false).await.unwrap();
        tx.send(f.handle()).unwrap();
        tokio::time::sleep(lease * 3).await;
        client
            .unlock(f.handle(), 1, 0, pvfs_proto::locks::TO_EOF)
            .await
            .unwrap();
    });
    let taken = other.join().unwrap();
    let e = taken.expect_err("another client was granted a lock held all along");
    assert_eq!(e.errno, pvfs_client::Errno::EAGAIN, "{e}");
}
