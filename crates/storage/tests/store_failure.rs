//! A metadata store that meets an I/O error it cannot undo fails (every operation then
//! fails at once with the real errno) and works again after `MetaStore::reopen`, with
//! everything it acknowledged. The disks are local files behind a wrapper that refuses
//! to grow a file (a full disk: ENOSPC) or to sync (EIO) while told to. A store whose
//! log is synced later than its commits fails when that sync fails.
#![allow(clippy::unwrap_used)]

use pvfs_proto::{Errno, Handle};
use pvfs_storage::redo::{Disk, OsDisk};
use pvfs_storage::{Identity, MetaStore, OpenDisks, StorageError, StoreHealth, SyncPolicy};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RANGE: (Handle, Handle) = (1 << 32, (2 << 32) - 1);
/// The object whose extended attributes the tests write.
const OBJ: Handle = (1 << 32) + 100;

fn id() -> Identity {
    Identity {
        fsid: 7,
        server: "s1".into(),
    }
}

/// What the disks refuse now.
#[derive(Default)]
struct Faults {
    /// Growing a file: ENOSPC (writes inside a file's length still work, as on a
    /// full file system that had allocated them).
    full: AtomicBool,
    /// Every sync: EIO.
    sync_fails: AtomicBool,
    /// The names of the threads that wrote (who committed).
    writers: std::sync::Mutex<std::collections::HashSet<String>>,
}

#[derive(Debug)]
struct FaultyDisk {
    inner: OsDisk,
    faults: Arc<Faults>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Faults")
    }
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

impl Disk for FaultyDisk {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let me = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        self.faults
            .writers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(me);
        if self.faults.full.load(Ordering::SeqCst)
            && offset + data.len() as u64 > self.inner.len()?
        {
            return Err(enospc());
        }
        self.inner.write_at(offset, data)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        if self.faults.full.load(Ordering::SeqCst) && len > self.inner.len()? {
            return Err(enospc());
        }
        self.inner.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        if self.faults.sync_fails.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.sync()
    }
}

fn open(dir: &Path, faults: &Arc<Faults>) -> MetaStore {
    open_syncing(dir, faults, SyncPolicy::EveryCommit)
}

fn open_syncing(dir: &Path, faults: &Arc<Faults>, sync: SyncPolicy) -> MetaStore {
    let f = faults.clone();
    let disks: OpenDisks = Arc::new(move |db: &Path, log: &Path| {
        let db: Box<dyn Disk> = Box::new(FaultyDisk {
            inner: OsDisk::open_locked(db)?,
            faults: f.clone(),
        });
        let log: Box<dyn Disk> = Box::new(FaultyDisk {
            inner: OsDisk::open(log)?,
            faults: f.clone(),
        });
        Ok((db, log))
    });
    MetaStore::open_on_with_sync(dir, &id(), RANGE, 1 << 20, disks, sync).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn value(i: u32) -> Vec<u8> {
    let mut v = vec![(i % 251) as u8; 60 << 10];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

/// A store whose log is synced on request only (`SyncPolicy::OnFlush`), with
/// attributes `0..n` set.
async fn deferred_store(dir: &Path, faults: &Arc<Faults>, n: u32) -> MetaStore {
    let s = open_syncing(dir, faults, SyncPolicy::OnFlush);
    // Who wrote while opening does not count.
    faults.writers.lock().unwrap().clear();
    for i in 0..n {
        set(&s, i).await.unwrap();
    }
    s
}

async fn set(s: &MetaStore, i: u32) -> Result<(), pvfs_storage::MetaError> {
    s.write(move |t| {
        t.set_xattr(OBJ, &format!("user.k{i}"), &value(i));
        Ok(())
    })
    .await
}

/// Sets attributes `from..` until the store refuses one: how many are set in all,
/// and the refusal.
async fn set_until_refused(s: &MetaStore, from: u32) -> (u32, pvfs_storage::MetaError) {
    let mut acked = from;
    loop {
        match set(s, acked).await {
            Ok(()) => acked += 1,
            Err(e) => return (acked, e),
        }
        assert!(acked < 2000, "the store never ran out of space");
    }
}

/// Every attribute in `0..n` is there with its value.
fn check_all(s: &MetaStore, n: u32) {
    let r = s.read().unwrap();
    for i in 0..n {
        let got = r.get_xattr(OBJ, &format!("user.k{i}")).unwrap();
        assert!(got == Some(value(i)), "acknowledged user.k{i} lost");
    }
}

fn failure(s: &MetaStore) -> pvfs_storage::StoreFailure {
    match s.health() {
        StoreHealth::Failed(f) => f,
        other => panic!("store not failed: {other:?}"),
    }
}

#[test]
fn a_full_disk_fails_the_store_and_a_reopen_heals_it() {
    let d = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    rt().block_on(async {
        let s = open(d.path(), &faults);
        for i in 0..10 {
            set(&s, i).await.unwrap();
        }
        // The disk fills: commits go on through the redo log (written in place) until
        // it must checkpoint into the database file, which cannot grow.
        faults.full.store(true, Ordering::SeqCst);
        let (acked, err) = set_until_refused(&s, 10).await;
        assert_eq!(err.errno(), Errno::ENOSPC, "{err}");
        assert!(
            acked > 10,
            "the redo log took no commit once the disk was full"
        );
        assert!(err.to_string().contains("metadata store failed"), "{err}");
        let f = failure(&s);
        assert_eq!(f.error.errno(), Errno::ENOSPC);
        assert_eq!(f.attempts, 0);
        // Failed: reads and writes fail at once with the real errno.
        let t = Instant::now();
        let e = set(&s, 99_999).await.unwrap_err();
        assert_eq!(e.errno(), Errno::ENOSPC);
        let e = s.read().err().unwrap();
        assert!(matches!(e, StorageError::Failed { .. }), "{e}");
        assert_eq!(e.errno(), Errno::ENOSPC);
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!(s.wait_failed().await);
        // Still full: the reopen redoes the log into the database file and fails.
        let e = s.reopen().unwrap_err();
        assert_eq!(e.errno(), Errno::ENOSPC, "{e}");
        let f = failure(&s);
        assert_eq!(f.attempts, 1);
        assert_eq!(f.last_attempt.unwrap().errno(), Errno::ENOSPC);
        // Space returns: the reopen heals it, with every acknowledged change.
        faults.full.store(false, Ordering::SeqCst);
        s.reopen().unwrap();
        assert!(matches!(s.health(), StoreHealth::Ok));
        check_all(&s, acked);
        set(&s, acked).await.unwrap();
        check_all(&s, acked + 1);
        s.close().await;
        assert!(!s.wait_failed().await);
    });
    // And a restart finds the same.
    let s = open(d.path(), &faults);
    let r = s.read().unwrap();
    assert!(r.get_xattr(OBJ, "user.k10").unwrap().is_some());
}

#[test]
fn an_io_error_in_a_commit_fails_the_store_until_reopened() {
    let d = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    rt().block_on(async {
        let s = open(d.path(), &faults);
        for i in 0..5 {
            set(&s, i).await.unwrap();
        }
        faults.sync_fails.store(true, Ordering::SeqCst);
        let e = set(&s, 5).await.unwrap_err();
        assert_eq!(e.errno(), Errno::EIO, "{e}");
        assert_eq!(failure(&s).error.errno(), Errno::EIO);
        // Queued and later writes are answered at once, never left waiting.
        let many = (6..50).map(|i| {
            let s = s.clone();
            tokio::spawn(async move { set(&s, i).await })
        });
        for h in many {
            let r = tokio::time::timeout(Duration::from_secs(5), h).await;
            assert_eq!(r.unwrap().unwrap().unwrap_err().errno(), Errno::EIO);
        }
        let e = s.reopen().unwrap_err();
        assert_eq!(e.errno(), Errno::EIO, "{e}");
        faults.sync_fails.store(false, Ordering::SeqCst);
        s.reopen().unwrap();
        check_all(&s, 5);
        set(&s, 100).await.unwrap();
        // Reopening a store that works changes nothing.
        s.reopen().unwrap();
        check_all(&s, 5);
    });
}

#[test]
fn a_failed_sync_of_a_deferred_log_fails_the_store_until_reopened() {
    let d = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    rt().block_on(async {
        let s = deferred_store(d.path(), &faults, 5).await;
        s.sync().unwrap();
        // Acknowledged, written to the log, not synced: the sync that should make them
        // stable fails, and so does the store.
        for i in 5..8 {
            set(&s, i).await.unwrap();
        }
        faults.sync_fails.store(true, Ordering::SeqCst);
        let e = s.sync().unwrap_err();
        assert_eq!(e.errno(), Errno::EIO, "{e}");
        assert_eq!(failure(&s).error.errno(), Errno::EIO);
        assert_eq!(set(&s, 9).await.unwrap_err().errno(), Errno::EIO);
        faults.sync_fails.store(false, Ordering::SeqCst);
        s.reopen().unwrap();
        // The process did not die: the log file still holds every acknowledged commit.
        check_all(&s, 8);
        set(&s, 100).await.unwrap();
        s.sync().unwrap();
    });
}

/// With the log synced later than each commit, a mutation alone commits on its
/// caller's thread (the writer takes the rest): many at once all land, and a full
/// disk fails the store and a reopen heals it as with the writer.
#[test]
fn commits_on_the_callers_thread_land_and_fail_the_store_alike() {
    let d = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::default());
    rt().block_on(async {
        let s = deferred_store(d.path(), &faults, 10).await;
        // One at a time, the test's own thread committed them (the log's writes are
        // made by whoever commits).
        let me = std::thread::current().name().unwrap().to_string();
        let writers = faults.writers.lock().unwrap().clone();
        assert!(writers.contains(&me), "not committed here: {writers:?}");
        // Many at once: some commit where they are called, the others queue.
        let all: Vec<_> = (10..60)
            .map(|i| {
                let s = s.clone();
                tokio::spawn(async move { set(&s, i).await })
            })
            .collect();
        for t in all {
            t.await.unwrap().unwrap();
        }
        check_all(&s, 60);
        faults.full.store(true, Ordering::SeqCst);
        let (acked, err) = set_until_refused(&s, 60).await;
        assert_eq!(err.errno(), Errno::ENOSPC, "{err}");
        assert_eq!(failure(&s).error.errno(), Errno::ENOSPC);
        assert_eq!(set(&s, 99_999).await.unwrap_err().errno(), Errno::ENOSPC);
        faults.full.store(false, Ordering::SeqCst);
        s.reopen().unwrap();
        check_all(&s, acked);
        set(&s, acked).await.unwrap();
        s.sync().unwrap();
        check_all(&s, acked + 1);
    });
}
