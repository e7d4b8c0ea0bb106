//! [`MetaStore`]: the redb metadata database of one server and its group-commit writer.
//!
//! A durable redb commit costs an fsync (docs/benchmarks.md has the rate a virtual disk allows), so one
//! commit per create would cap a server far below what the disk allows. Mutations are
//! therefore sent to one writer thread, which takes every job already queued (up to
//! [`BATCH_MAX`]), runs them in one write transaction and commits once with durable
//! (immediate) durability before answering them all. "Durable" is what the store's
//! [`SyncPolicy`] makes it: with [`SyncPolicy::EveryCommit`] the commit's redo record is
//! synced before the answer; with [`SyncPolicy::Every`] it is written to the log file
//! (a killed process loses nothing) and synced within the interval, or at once by
//! [`MetaStore::sync`] (a client's fsync). Each job runs against its own
//! write overlay ([`MetaTxn`]), so a job that fails or panics leaves no trace while its
//! neighbours still commit. Reads never wait for the writer: [`MetaStore::read`] opens
//! an MVCC snapshot on the caller's thread.
//!
//! **A mutation alone commits on its caller's thread.** When nothing is queued and the
//! writer is not committing, [`MetaStore::write`] runs the job as a batch of one right
//! where it was called ([`MetaStore::commit_here`]), under the same commit role the
//! writer takes for each batch: the hand-off to the writer thread and back cost two
//! thread wake-ups (a tenth of a create's time through the mount on the 2-vCPU machine
//! of `docs/benchmarks.md`). Not with [`SyncPolicy::EveryCommit`] (each commit waits
//! for a disk sync, which must not hold an async thread), and not for [`INLINE_PAUSE`]
//! after a commit here took longer than [`INLINE_SLOW`] (a checkpoint syncs the
//! database file): the writer thread then takes them all.
//!
//! **Failure and reopening.** After an I/O error (a full disk when the redo log has to
//! checkpoint, EIO) redb refuses every later transaction until the database is opened
//! again. The store then *fails* ([`StoreHealth::Failed`]): the writer answers what is
//! queued and stops, and every read and write fails at once with
//! [`StorageError::Failed`], which carries the errno of the error that failed it.
//! [`MetaStore::reopen`] closes that database and opens the files again exactly as a
//! restart does (the redo log's records are redone first), so nothing acknowledged
//! is lost; the server decides when to call it (`pvfs-server`'s `health` module).

use crate::error::{MetaError, MutationError, StorageError};
use crate::redo::{Disk, LogFlusher, LogShipper, LoggedFile, OsDisk, SyncPolicy, LOG_CAPACITY};
use crate::txn::{self, apply, le_u64, Overlay, Raw, Tab, Tables, DEFS, SB_NEXT};
use crate::MetaTxn;
use pvfs_proto::{Attr, DirEntry, Errno, Handle, ObjKind, ShardStat};
use redb::{Database, Durability, ReadOnlyTable, ReadTransaction, ReadableDatabase};
use redb::{ReadableTableMetadata, WriteTransaction};
use std::cell::OnceCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// Version of the on-disk format written in the superblock. Version 2 added the
/// `shards` table, version 3 the `kept` table; older stores are upgraded when opened.
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format this build opens (and upgrades).
const FORMAT_OLDEST: u32 = 1;
/// Handles at the start of each server's range kept for well-known objects (the root).
pub const RESERVED_HANDLES: u64 = 16;
/// Mutations that may wait for the writer; further `write` calls wait for room.
pub const QUEUE_MAX: usize = 1024;
/// Most mutations committed together in one transaction.
pub const BATCH_MAX: usize = 256;
/// A commit on a caller's thread that took longer than this sends the mutations to the
/// writer thread for [`INLINE_PAUSE`].
pub const INLINE_SLOW: Duration = Duration::from_millis(2);
/// How long mutations go to the writer thread after a slow commit on a caller's thread.
pub const INLINE_PAUSE: Duration = Duration::from_secs(1);
/// redb page cache size of [`MetaStore::open`]; servers pass their `[limits] meta_cache`
/// to [`MetaStore::open_with_cache`].
const CACHE_BYTES: usize = 1 << 20;
/// How long [`MetaStore::reopen`] waits for reads in flight to let go of the failed
/// database (each holds it for one request) before opening the files again.
const READERS_GRACE: Duration = Duration::from_secs(2);

/// Opens the two files of a store: the database (locked against other processes, as
/// [`OsDisk::open_locked`] does) and its redo log. The default opens local files; this
/// is the seam where tests put disks that fail ([`MetaStore::open_on`]).
pub type OpenDisks =
    Arc<dyn Fn(&Path, &Path) -> std::io::Result<(Box<dyn Disk>, Box<dyn Disk>)> + Send + Sync>;

/// Which file system and server a store belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The file system id.
    pub fsid: u64,
    /// The server's name in the configuration.
    pub server: String,
}

/// The superblock of a store, as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// On-disk format version.
    pub format: u32,
    /// The file system id.
    pub fsid: u64,
    /// The owning server's name.
    pub server: String,
    /// The server's handle range, first and last inclusive.
    pub range: (Handle, Handle),
    /// The next handle `alloc_handles` will return; 0 once the range is exhausted.
    pub next_handle: Handle,
}

/// How the store is doing ([`MetaStore::health`]).
#[derive(Clone, Debug)]
pub enum StoreHealth {
    /// Open and working.
    Ok,
    /// Failed; every operation fails with [`StoreFailure::error`] until
    /// [`MetaStore::reopen`] succeeds.
    Failed(StoreFailure),
    /// Closed ([`MetaStore::close`]).
    Closed,
}

/// What a failed store knows of its failure.
#[derive(Clone, Debug)]
pub struct StoreFailure {
    /// What operations get meanwhile: [`StorageError::Failed`], with the errno and the
    /// cause of the error that failed the store.
    pub error: StorageError,
    /// That error as it happened (e.g. redb's I/O error), for logs.
    pub original: StorageError,
    /// When the store failed.
    pub since: Instant,
    /// Reopen attempts that failed since.
    pub attempts: u32,
    /// Why the last of them failed.
    pub last_attempt: Option<StorageError>,
}

/// The metadata store of one server; cheap to clone (shared inside).
#[derive(Clone)]
pub struct MetaStore {
    inner: Arc<Shared>,
}

/// What every clone shares: how to open the files, and the open database if any.
struct Shared {
    dir: PathBuf,
    path: PathBuf,
    id: Identity,
    range: (Handle, Handle),
    cache_bytes: usize,
    disks: OpenDisks,
    sync: SyncPolicy,
    /// Commits and redo-log syncs so far, across generations (for metrics).
    stats: Arc<CommitStats>,
    state: RwLock<State>,
    /// Changes with the state (for [`MetaStore::wait_failed`]).
    status: watch::Sender<Status>,
    /// Serializes reopen attempts.
    reopening: Mutex<()>,
    /// Number of the next generation (one per open of the files).
    next_gen: AtomicU64,
    /// Whether mutations may commit on their caller's thread (closed for a while
    /// after a slow commit there).
    inline: crate::SlowGate,
    /// Every mutation commits on its caller's thread
    /// ([`MetaStore::open_on_callers_thread`]).
    callers_thread: bool,
    /// Ships every commit to the standbys of this store
    /// ([`MetaStore::replicate_with`]).
    replicator: Mutex<Option<Arc<dyn Replicator>>>,
}

/// Ships a metadata store's commits to its standbys (`docs/replication.md`,
/// "Metadata: a primary and standbys"): the server's, over the network.
pub trait Replicator: Send + Sync {
    /// The store's files were opened (again): `log` taps their records and reads
    /// their committed state; every standby needs a new copy.
    fn attach(self: Arc<Self>, log: LogShipper);
    /// Resolves once every standby that must hold it holds record `seq` of the log
    /// last attached (and every record before it): a mutation is answered only then.
    /// It cannot fail: the mutation is committed here whatever the standbys do, and
    /// a caller told otherwise would undo what stays done.
    fn replicated(self: Arc<Self>, seq: u64) -> ReplicatedFuture;
}

/// What [`Replicator::replicated`] returns.
pub type ReplicatedFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

enum State {
    Open(Arc<Gen>),
    /// The failed generation is kept until a reopen (or close) retires it: dropping it
    /// joins its writer and closes its database, which is not done on whatever thread
    /// noticed the failure.
    Failed {
        gen: Option<Arc<Gen>>,
        failure: StoreFailure,
    },
    /// Writes refused; reads still work on a database that was open (not failed).
    Closed {
        gen: Option<Arc<Gen>>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ok,
    Failed,
    Closed,
}

/// One open of the files: the database and its writer thread.
struct Gen {
    id: u64,
    db: Arc<Database>,
    /// Syncs this generation's redo log ([`MetaStore::sync`]).
    flusher: LogFlusher,
    /// Taps and reads it ([`Replicator`]).
    shipper: LogShipper,
    tx: Mutex<Option<mpsc::Sender<Box<dyn Job>>>>,
    /// The commit role: held by the writer for each batch, and by a caller committing
    /// its job itself.
    commit: Arc<Mutex<()>>,
    done: watch::Receiver<bool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read_lock<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(PoisonError::into_inner)
}

fn write_lock<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(PoisonError::into_inner)
}

type WriteTables<'t> = Tables<redb::Table<'t, &'static [u8], &'static [u8]>>;

fn open_write(tx: &WriteTransaction) -> Result<WriteTables<'_>, StorageError> {
    let t = DEFS.iter().map(|d| tx.open_table(*d));
    Ok(Tables(t.collect::<Result<_, _>>()?))
}

fn read_superblock(r: &dyn Raw) -> Result<Option<Superblock>, StorageError> {
    let Some(format) = r.get(Tab::Super, b"format")? else {
        return Ok(None);
    };
    let format = u32::from_le_bytes(
        format
            .as_slice()
            .try_into()
            .map_err(|_| StorageError::corrupt("superblock format"))?,
    );
    if !(FORMAT_OLDEST..=FORMAT_VERSION).contains(&format) {
        return Err(StorageError::Format(format!(
            "unknown format version {format} (this build reads {FORMAT_OLDEST} to {FORMAT_VERSION})"
        )));
    }
    let get = |k: &str| {
        r.get(Tab::Super, k.as_bytes())?
            .ok_or_else(|| StorageError::corrupt(format!("superblock: no {k}")))
    };
    let server = String::from_utf8(get("server")?)
        .map_err(|_| StorageError::corrupt("superblock server name"))?;
    let range = get("range")?;
    if range.len() != 16 {
        return Err(StorageError::corrupt("superblock range"));
    }
    Ok(Some(Superblock {
        format,
        fsid: le_u64(&get("fsid")?, "superblock fsid")?,
        server,
        range: (le_u64(&range[..8], "range")?, le_u64(&range[8..], "range")?),
        next_handle: le_u64(&get("next_handle")?, "superblock next_handle")?,
    }))
}

/// Upgrades a store of format `from` to [`FORMAT_VERSION`] inside the opening
/// transaction. 1 -> 2: every directory's shard here gets its record, counting its
/// subdirectory entries (change time unknown: zero, which leaves the directory's own
/// times as they are). 2 -> 3: every file at zero links (kept while it was open) is
/// recorded in `kept`.
fn upgrade(t: &mut WriteTables<'_>, from: u32) -> Result<(), StorageError> {
    if from < 2 {
        count_subdirs(t)?;
    }
    let mut kept = 0usize;
    let mut after: Option<Handle> = None;
    loop {
        let page = txn::objects_after(t, after, 4096)?;
        let Some(last) = page.last() else { break };
        after = Some(last.handle);
        let table = &mut t.0[txn::Tab::Kept as usize];
        for a in page.iter().filter(|a| a.nlink == 0 && !a.is_dir()) {
            table.insert(&a.handle.to_be_bytes()[..], &[1u8][..])?;
            kept += 1;
        }
    }
    let sb = &mut t.0[txn::Tab::Super as usize];
    sb.insert(&b"format"[..], &FORMAT_VERSION.to_le_bytes()[..])?;
    tracing::info!(
        "metadata store: upgraded from format {from} to {FORMAT_VERSION} ({kept} objects kept at zero links)"
    );
    Ok(())
}

/// Format 1 -> 2: the `shards` records, counted from the entries.
fn count_subdirs(t: &mut WriteTables<'_>) -> Result<(), StorageError> {
    let mut subdirs: std::collections::BTreeMap<Handle, u64> = Default::default();
    let mut after: Option<(Handle, String)> = None;
    loop {
        let page = txn::entries_after(t, after.as_ref().map(|(d, n)| (*d, n.as_str())), 4096)?;
        let Some((d, e)) = page.last() else { break };
        after = Some((*d, e.name.clone()));
        for (dir, e) in &page {
            let n = subdirs.entry(*dir).or_default();
            *n += u64::from(e.kind == ObjKind::Dir);
        }
    }
    let shards = &mut t.0[txn::Tab::Shards as usize];
    for (dir, n) in &subdirs {
        let rec = txn::shard_record(&ShardStat {
            changed: Default::default(),
            subdirs: *n,
        });
        shards.insert(&dir.to_be_bytes()[..], rec.as_slice())?;
    }
    tracing::info!("metadata store: {} directory shards counted", subdirs.len());
    Ok(())
}

/// The local files of a store.
fn os_disks() -> OpenDisks {
    Arc::new(|db: &Path, log: &Path| {
        let db: Box<dyn Disk> = Box::new(OsDisk::open_locked(db)?);
        let log: Box<dyn Disk> = Box::new(OsDisk::open(log)?);
        Ok((db, log))
    })
}

impl MetaStore {
    /// Opens or creates `<dir>/meta.redb` for server `id` with handle range `range`
    /// (first and last, inclusive); refuses a store of another file system, server,
    /// range or format version.
    pub fn open(
        dir: &Path,
        id: &Identity,
        range: (Handle, Handle),
    ) -> Result<MetaStore, StorageError> {
        MetaStore::open_with_cache(dir, id, range, CACHE_BYTES)
    }

    /// [`MetaStore::open`] with a page cache of `cache_bytes` (the server's
    /// `[limits] meta_cache`): what the store adds to the server's memory at most.
    pub fn open_with_cache(
        dir: &Path,
        id: &Identity,
        range: (Handle, Handle),
        cache_bytes: usize,
    ) -> Result<MetaStore, StorageError> {
        MetaStore::open_on(dir, id, range, cache_bytes, os_disks())
    }

    /// [`MetaStore::open_with_cache`], syncing the redo log as `sync` says (the
    /// server's `[defaults] metadata_sync`).
    pub fn open_with_sync(
        dir: &Path,
        id: &Identity,
        range: (Handle, Handle),
        cache_bytes: usize,
        sync: SyncPolicy,
    ) -> Result<MetaStore, StorageError> {
        MetaStore::open_on_with_sync(dir, id, range, cache_bytes, os_disks(), sync)
    }

    /// [`MetaStore::open_with_cache`] on the disks `disks` opens (every time the store
    /// is opened, including by [`MetaStore::reopen`]).
    pub fn open_on(
        dir: &Path,
        id: &Identity,
        range: (Handle, Handle),
        cache_bytes: usize,
        disks: OpenDisks,
    ) -> Result<MetaStore, StorageError> {
        MetaStore::open_on_with_sync(dir, id, range, cache_bytes, disks, SyncPolicy::EveryCommit)
    }

    /// [`MetaStore::open_on`], syncing the redo log as `sync` says.
    pub fn open_on_with_sync(
        dir: &Path,
        id: &Identity,
        range: (Handle, Handle),
        cache_bytes: usize,
        disks: OpenDisks,
        sync: SyncPolicy,
    ) -> Result<MetaStore, StorageError> {
        MetaStore::open_with_options(dir, id, range, cache_bytes, disks, sync, false)
    }

    /// [`MetaStore::open_on_with_sync`] for a store whose every mutation commits on
    /// its caller's thread, alone, whatever the sync policy and however long commits
    /// take (the writer thread stays idle): for a simulation that runs everything on
    /// one thread, where a commit's timing must not decide anything.
    pub fn open_on_callers_thread(
        dir: &Path,
        id: &Identity,
        range: (Handle, Handle),
        disks: OpenDisks,
        sync: SyncPolicy,
    ) -> Result<MetaStore, StorageError> {
        MetaStore::open_with_options(dir, id, range, 1 << 20, disks, sync, true)
    }

    fn open_with_options(
        dir: &Path,
        id: &Identity,
        range: (Handle, Handle),
        cache_bytes: usize,
        disks: OpenDisks,
        sync: SyncPolicy,
        callers_thread: bool,
    ) -> Result<MetaStore, StorageError> {
        let (first, last) = range;
        if first == 0 || first > last {
            return Err(StorageError::Format(format!(
                "invalid handle range {first:#x}..={last:#x}"
            )));
        }
        std::fs::create_dir_all(dir)?;
        let shared = Arc::new(Shared {
            stats: Arc::default(),
            dir: dir.to_path_buf(),
            path: dir.join("meta.redb"),
            id: id.clone(),
            range,
            cache_bytes,
            disks,
            sync,
            state: RwLock::new(State::Closed { gen: None }),
            status: watch::Sender::new(Status::Ok),
            reopening: Mutex::new(()),
            next_gen: AtomicU64::new(1),
            inline: crate::SlowGate::new(INLINE_SLOW, INLINE_PAUSE),
            callers_thread,
            replicator: Mutex::new(None),
        });
        let gen = shared.open_gen()?;
        *write_lock(&shared.state) = State::Open(gen);
        Ok(MetaStore { inner: shared })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// This server's handle range (first, last inclusive).
    pub fn range(&self) -> (Handle, Handle) {
        self.inner.range
    }

    /// A consistent read snapshot; runs on the caller's thread. Tables are opened
    /// as they are first read (a lookup reads one or two of the seven).
    pub fn read(&self) -> Result<ReadView, StorageError> {
        let (db, gen) = match &*read_lock(&self.inner.state) {
            State::Open(g) | State::Closed { gen: Some(g) } => (g.db.clone(), g.id),
            State::Failed { failure, .. } => return Err(failure.error.clone()),
            State::Closed { gen: None } => return Err(StorageError::Closed),
        };
        let watch = Watch {
            shared: Arc::downgrade(&self.inner),
            gen,
        };
        let tx = db.begin_read().map_err(|e| watch.seen(e.into()))?;
        Ok(ReadView {
            t: LazyTables {
                open: Default::default(),
                tx,
            },
            watch,
            _db: db,
        })
    }

    /// Runs `f` in the group-commit writer and returns once its effects are committed:
    /// in the redo log, synced or to be synced as the store's [`SyncPolicy`] says.
    /// If `f` returns `Err` (or panics, reported as EIO) none of its writes happen.
    /// On a failed store it fails at once with [`StorageError::Failed`].
    ///
    /// `f` runs on the writer thread while its batch waits: keep it to reads and writes
    /// of the store. Dropping the returned future does not cancel a queued mutation.
    pub async fn write<R, F>(&self, f: F) -> Result<R, MetaError>
    where
        F: FnOnce(&mut MetaTxn<'_>) -> Result<R, MetaError> + Send + 'static,
        R: Send + 'static,
    {
        self.write_with(f).await
    }

    /// [`MetaStore::write`] for a mutation that ends with an error type of its own
    /// (the server's, which carries its kind through the commit): a storage failure
    /// among its errors still fails the store.
    pub async fn write_with<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: FnOnce(&mut MetaTxn<'_>) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: MutationError,
    {
        let tx = self.inner.sender().map_err(|e| E::from(e.into()))?;
        let (reply, answer) = oneshot::channel();
        let job = Box::new(Pending {
            f: Some(f),
            res: None,
            reply,
        });
        if let Some(job) = self.commit_here(job, &tx) {
            // The writer stops on a failure, answering what it had taken: a job it
            // never took gets the store's state.
            if tx.send(job).await.is_err() {
                return Err(E::from(self.inner.why_not().into()));
            }
        }
        drop(tx);
        let r = match answer.await {
            Ok(r) => r,
            Err(_) => return Err(E::from(self.inner.why_not().into())),
        };
        // An answer, even a refusal, tells of the store's state: it waits until the
        // standbys hold that state.
        self.replicated().await;
        r
    }

    /// Ships every commit of this store to its standbys through `replicator`, from
    /// now on and after every reopen: a mutation is answered once they hold it.
    pub fn replicate_with(&self, replicator: Arc<dyn Replicator>) {
        *lock(&self.inner.replicator) = Some(replicator.clone());
        if let State::Open(g) = &*read_lock(&self.inner.state) {
            replicator.attach(g.shipper.clone());
        }
    }

    /// Resolves once the standbys hold every commit made so far (at once without
    /// standbys): for an answer read from the store that a mutation may have just
    /// written (a retried request's recorded reply).
    pub async fn replicated(&self) {
        let Some(rep) = lock(&self.inner.replicator).clone() else {
            return;
        };
        let seq = match &*read_lock(&self.inner.state) {
            State::Open(g) => g.shipper.last_written(),
            _ => return,
        };
        rep.replicated(seq).await;
    }

    /// Commits `job` alone on this thread, answering it, when nothing waits for the
    /// writer and it is not committing (see the module's documentation); gives the job
    /// back when it must go to the writer.
    fn commit_here(
        &self,
        job: Box<dyn Job>,
        queue: &mpsc::Sender<Box<dyn Job>>,
    ) -> Option<Box<dyn Job>> {
        let always = self.inner.callers_thread;
        if !always
            && (!self.inner.inline.open()
                || matches!(self.inner.sync, SyncPolicy::EveryCommit)
                || queue.capacity() != queue.max_capacity())
        {
            return Some(job);
        }
        let gen = match &*read_lock(&self.inner.state) {
            State::Open(g) => g.clone(),
            _ => return Some(job),
        };
        let role = if always {
            lock(&gen.commit)
        } else {
            match gen.commit.try_lock() {
                Ok(role) => role,
                Err(_) => return Some(job),
            }
        };
        let mut batch = vec![job];
        let last = self.inner.range.1;
        let stats = &self.inner.stats;
        let res = if always {
            commit_batch(&gen.db, &mut batch, last, stats)
        } else {
            self.inner
                .inline
                .run(|| commit_batch(&gen.db, &mut batch, last, stats))
        };
        let watch = Watch {
            shared: Arc::downgrade(&self.inner),
            gen: gen.id,
        };
        // A failure fails the store (state Failed): no job reaches this generation's
        // writer any more, and one that raced into its queue fails there.
        let _ = finish_batch(&mut batch, res, &watch);
        drop(role);
        None
    }

    /// Stops the writer after it has committed everything queued; later writes fail
    /// with [`StorageError::Closed`]. Reads keep working while a clone is alive
    /// (unless the store had failed). A failed store is not reopened any more.
    pub async fn close(&self) {
        let gen = {
            let _reopen = lock(&self.inner.reopening);
            let mut st = write_lock(&self.inner.state);
            let (keep, gen) = match std::mem::replace(&mut *st, State::Closed { gen: None }) {
                State::Open(g) => (Some(g.clone()), Some(g)),
                State::Failed { gen, .. } => (None, gen),
                State::Closed { gen } => (gen, None),
            };
            *st = State::Closed { gen: keep };
            gen
        };
        self.inner.status.send_replace(Status::Closed);
        if let Some(g) = gen {
            lock(&g.tx).take();
            let mut done = g.done.clone();
            // An error means the writer is gone, which is what we wait for.
            let _ = done.wait_for(|d| *d).await;
        }
    }

    /// Closes as [`MetaStore::close`] does, and lets go of the database as well:
    /// reads fail with [`StorageError::Closed`] from then on, and once the reads in
    /// progress end the file may be opened again in this process (a standby that
    /// stopped serving a group's copy and serves it again opens it anew, while
    /// connections opened for the group may still hold this store).
    pub async fn release(&self) {
        self.close().await;
        let gen = {
            let mut st = write_lock(&self.inner.state);
            match std::mem::replace(&mut *st, State::Closed { gen: None }) {
                State::Closed { gen } => gen,
                // Failed meanwhile: kept until a reopen retires it.
                other => {
                    *st = other;
                    None
                }
            }
        };
        // Dropped here, off the lock: the last holder of a generation closes its
        // database.
        drop(gen);
    }

    /// Commits and redo-log syncs of this store so far.
    pub fn commit_stats(&self) -> &CommitStats {
        &self.inner.stats
    }

    /// Makes every commit answered so far stable on disk (syncs the redo log; a no-op
    /// when nothing waits, as always with [`SyncPolicy::EveryCommit`]): what a
    /// client's fsync asks of a metadata server. A sync that fails fails the store (the
    /// records it should have made stable may be lost; a reopen redoes what the log
    /// holds). Blocking (`fdatasync`): call it from a thread that may block.
    pub fn sync(&self) -> Result<(), StorageError> {
        let (flusher, gen) = match &*read_lock(&self.inner.state) {
            State::Open(g) | State::Closed { gen: Some(g) } => (g.flusher.clone(), g.id),
            State::Failed { failure, .. } => return Err(failure.error.clone()),
            State::Closed { gen: None } => return Err(StorageError::Closed),
        };
        flusher.flush().map_err(|e| {
            Watch {
                shared: Arc::downgrade(&self.inner),
                gen,
            }
            .seen(e.into())
        })
    }

    /// How the store is doing.
    pub fn health(&self) -> StoreHealth {
        match &*read_lock(&self.inner.state) {
            State::Open(_) => StoreHealth::Ok,
            State::Failed { failure, .. } => StoreHealth::Failed(failure.clone()),
            State::Closed { .. } => StoreHealth::Closed,
        }
    }

    /// Waits until the store has failed (true) or is closed (false); returns at once
    /// if it is so already.
    pub async fn wait_failed(&self) -> bool {
        let mut rx = self.inner.status.subscribe();
        let failed = match rx.wait_for(|s| *s != Status::Ok).await {
            Ok(s) => *s == Status::Failed,
            Err(_) => false,
        };
        failed
    }

    /// Reopens a failed store: retires the failed database (its writer stopped, reads
    /// in flight given up to two seconds to finish) and opens the files again exactly as
    /// a restart does: the redo log's records are redone into the database file, then
    /// redb opens it (and repairs its allocator state). On success the store works
    /// again; on failure it stays failed, the attempt counted in its
    /// [`StoreFailure`]. A store that works is left alone; a closed one is not
    /// reopened ([`StorageError::Closed`]).
    ///
    /// Blocking (file I/O, proportional to what the log holds): call it from a thread
    /// that may block.
    pub fn reopen(&self) -> Result<(), StorageError> {
        let _one = lock(&self.inner.reopening);
        let old = match &mut *write_lock(&self.inner.state) {
            State::Failed { gen, .. } => gen.take(),
            State::Open(_) => return Ok(()),
            State::Closed { .. } => return Err(StorageError::Closed),
        };
        if let Some(old) = old {
            old.retire();
        }
        let opened = self.inner.open_gen();
        let mut st = write_lock(&self.inner.state);
        match (&mut *st, opened) {
            (State::Failed { .. }, Ok(gen)) => {
                *st = State::Open(gen);
                drop(st);
                self.inner.status.send_replace(Status::Ok);
                Ok(())
            }
            (State::Failed { failure, .. }, Err(e)) => {
                failure.attempts += 1;
                failure.last_attempt = Some(e.clone());
                Err(e)
            }
            (_, Ok(_gen)) => Err(StorageError::Closed),
            (_, Err(e)) => Err(e),
        }
    }
}

/// Commits and redo-log syncs of a store so far (for metrics).
#[derive(Debug, Default)]
pub struct CommitStats {
    /// Write transactions run (each a batch of mutations).
    pub commits: AtomicU64,
    /// Mutations in them.
    pub jobs: AtomicU64,
    /// Syncs of the redo log.
    pub syncs: AtomicU64,
    /// Time those syncs took, in nanoseconds.
    pub sync_nanos: AtomicU64,
}

/// The redo log's disk, its syncs counted and timed into a store's [`CommitStats`].
#[derive(Debug)]
struct TimedDisk {
    inner: Box<dyn Disk>,
    stats: Arc<CommitStats>,
}

impl Disk for TimedDisk {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.inner.write_at(offset, data)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync(&self) -> std::io::Result<()> {
        let started = std::time::Instant::now();
        let r = self.inner.sync();
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        self.stats.sync_nanos.fetch_add(took, Ordering::Relaxed);
        r
    }
}

impl Shared {
    /// Opens the files (redoing the log), checks or writes the superblock, starts a
    /// writer: one generation of the store.
    fn open_gen(self: &Arc<Shared>) -> Result<Arc<Gen>, StorageError> {
        let (db_disk, log_disk) = (self.disks)(&self.path, &self.dir.join("meta.redo"))?;
        let log_disk: Box<dyn Disk> = Box::new(TimedDisk {
            inner: log_disk,
            stats: self.stats.clone(),
        });
        let (file, recovery) = LoggedFile::open_with(db_disk, log_disk, LOG_CAPACITY, self.sync)?;
        let flusher = file.flusher();
        let shipper = file.shipper();
        if recovery.replayed > 0 {
            tracing::info!(
                "metadata store: redid {} commits from the redo log",
                recovery.replayed
            );
        }
        let db = Database::builder()
            .set_cache_size(self.cache_bytes)
            .create_with_backend(file)?;
        let (first, last) = self.range;
        let id = &self.id;
        let tx = db.begin_write()?;
        let created = {
            let mut t = open_write(&tx)?;
            match read_superblock(&t)? {
                Some(sb) if sb.fsid != id.fsid => {
                    return Err(StorageError::WrongFs {
                        found: sb.fsid,
                        expected: id.fsid,
                    })
                }
                Some(sb) if sb.server != id.server => {
                    return Err(StorageError::WrongServer {
                        found: sb.server,
                        expected: id.server.clone(),
                    })
                }
                Some(sb) if sb.range != self.range => {
                    return Err(StorageError::WrongRange {
                        found: sb.range,
                        expected: self.range,
                    })
                }
                Some(sb) if sb.format < FORMAT_VERSION => {
                    upgrade(&mut t, sb.format)?;
                    true
                }
                Some(_) => false,
                None => {
                    if t.0[Tab::Objects as usize].len()? > 0 {
                        return Err(StorageError::corrupt("superblock missing"));
                    }
                    let mut r = first.to_le_bytes().to_vec();
                    r.extend_from_slice(&last.to_le_bytes());
                    let next = txn::next_after(first, RESERVED_HANDLES, last);
                    let sb = &mut t.0[Tab::Super as usize];
                    sb.insert(&b"format"[..], &FORMAT_VERSION.to_le_bytes()[..])?;
                    sb.insert(&b"fsid"[..], &id.fsid.to_le_bytes()[..])?;
                    sb.insert(&b"server"[..], id.server.as_bytes())?;
                    sb.insert(&b"range"[..], r.as_slice())?;
                    sb.insert(SB_NEXT, &next.to_le_bytes()[..])?;
                    true
                }
            }
        };
        if created {
            tx.commit()?;
        } else {
            tx.abort()?;
        }
        // What opening wrote (a new database is created in two syncs, and a file
        // holding only the first is not a database; a repair; the superblock) is
        // stable before the store is used, whatever the sync policy.
        flusher.flush()?;
        // Before any mutation can commit in this generation: every commit is shipped.
        if let Some(rep) = lock(&self.replicator).clone() {
            rep.attach(shipper.clone());
        }
        let db = Arc::new(db);
        let gen = self.next_gen.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        let commit = Arc::new(Mutex::new(()));
        if self.callers_thread {
            // Every mutation commits on its caller's thread: no writer, nothing to
            // wait for at close.
            drop(rx);
            let (_, done) = watch::channel(true);
            return Ok(Arc::new(Gen {
                id: gen,
                db,
                flusher,
                shipper,
                tx: Mutex::new(Some(tx)),
                commit,
                done,
                thread: Mutex::new(None),
            }));
        }
        let (done_tx, done) = watch::channel(false);
        let wdb = db.clone();
        let wcommit = commit.clone();
        let wstats = self.stats.clone();
        let watch = Watch {
            shared: Arc::downgrade(self),
            gen,
        };
        let thread = std::thread::Builder::new()
            .name("pvfs-meta-writer".into())
            .spawn(move || writer(&wdb, rx, last, &done_tx, &watch, (&wcommit, &wstats)))?;
        Ok(Arc::new(Gen {
            id: gen,
            db,
            flusher,
            shipper,
            tx: Mutex::new(Some(tx)),
            commit,
            done,
            thread: Mutex::new(Some(thread)),
        }))
    }

    /// The writer's queue, or why there is none.
    fn sender(&self) -> Result<mpsc::Sender<Box<dyn Job>>, StorageError> {
        match &*read_lock(&self.state) {
            State::Open(g) => lock(&g.tx).clone().ok_or(StorageError::Closed),
            State::Failed { failure, .. } => Err(failure.error.clone()),
            State::Closed { .. } => Err(StorageError::Closed),
        }
    }

    /// Why a write cannot be done now: the failure, or closed.
    fn why_not(&self) -> StorageError {
        match &*read_lock(&self.state) {
            State::Failed { failure, .. } => failure.error.clone(),
            _ => StorageError::Closed,
        }
    }

    /// Marks generation `gen` failed by `e` (unless it is no longer the open one) and
    /// returns what operations get now.
    fn fail(&self, gen: u64, e: &StorageError) -> StorageError {
        let mut st = write_lock(&self.state);
        match &*st {
            State::Open(g) if g.id == gen => {
                let failure = StoreFailure {
                    error: e.to_failed(),
                    original: e.clone(),
                    since: Instant::now(),
                    attempts: 0,
                    last_attempt: None,
                };
                let error = failure.error.clone();
                *st = State::Failed {
                    gen: Some(g.clone()),
                    failure,
                };
                drop(st);
                tracing::error!(
                    "metadata store {}: {e}: every metadata operation fails ({}) until it is reopened",
                    self.path.display(),
                    error.errno().name()
                );
                self.status.send_replace(Status::Failed);
                error
            }
            State::Failed { failure, .. } => failure.error.clone(),
            _ => e.to_failed(),
        }
    }
}

impl Gen {
    /// Stops the writer (it has stopped already if the store failed), waits briefly
    /// for reads in flight, and closes the database, releasing its file lock.
    fn retire(self: Arc<Gen>) {
        lock(&self.tx).take();
        let thread = lock(&self.thread).take();
        if let Some(t) = thread {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        let deadline = Instant::now() + READERS_GRACE;
        while Arc::strong_count(&self.db) > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Dropping the last reference closes the database (what it can still write).
    }
}

impl Drop for Gen {
    fn drop(&mut self) {
        self.tx
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = thread.take() {
            // A job may hold the last clone and be dropped on the writer itself.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// Who to tell when an operation on generation `gen` meets an error that fails the
/// store (the writer, and every read view).
struct Watch {
    shared: Weak<Shared>,
    gen: u64,
}

impl Watch {
    /// Passes `e` on, failing the store first if `e` is an error that fails it; a
    /// failed store's operations all answer its failure.
    fn seen(&self, e: StorageError) -> StorageError {
        if !e.fails_store() {
            return e;
        }
        match self.shared.upgrade() {
            Some(s) => s.fail(self.gen, &e),
            None => e.to_failed(),
        }
    }
}

/// A queued mutation, type-erased for the writer.
trait Job: Send {
    /// Runs the mutation against the batch so far; its overlay if it succeeded.
    fn run(&mut self, base: &dyn Raw, last: Handle) -> Option<Overlay>;
    /// The storage error the mutation met, if it is one that fails the store.
    fn store_failure(&self) -> Option<StorageError>;
    /// Answers the caller once the batch's commit result is known.
    fn answer(self: Box<Self>, commit: &Result<(), StorageError>);
}

struct Pending<F, R, E> {
    f: Option<F>,
    res: Option<Result<R, E>>,
    reply: oneshot::Sender<Result<R, E>>,
}

impl<F, R, E> Job for Pending<F, R, E>
where
    F: FnOnce(&mut MetaTxn<'_>) -> Result<R, E> + Send,
    R: Send,
    E: MutationError,
{
    fn run(&mut self, base: &dyn Raw, last: Handle) -> Option<Overlay> {
        let f = self.f.take()?;
        let mut m = MetaTxn::new(base, last);
        let (res, ov) = match catch_unwind(AssertUnwindSafe(|| f(&mut m))) {
            Ok(Ok(r)) => (Ok(r), Some(m.into_overlay())),
            Ok(Err(e)) => (Err(e), None),
            Err(_) => (
                Err(E::from(MetaError::new(
                    Errno::EIO,
                    "metadata mutation panicked",
                ))),
                None,
            ),
        };
        self.res = Some(res);
        ov
    }

    fn store_failure(&self) -> Option<StorageError> {
        match &self.res {
            Some(Err(e)) => e.storage_failure().filter(|e| e.fails_store()).cloned(),
            _ => None,
        }
    }

    fn answer(self: Box<Self>, commit: &Result<(), StorageError>) {
        let r = match (self.res, commit) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(r)), Ok(())) => Ok(r),
            (_, Err(e)) => Err(E::from(e.clone().into())),
            (None, Ok(())) => Err(E::from(MetaError::new(Errno::EIO, "mutation was not run"))),
        };
        // The caller may have given up waiting; nothing to do then.
        let _ = self.reply.send(r);
    }
}

/// The writer thread: batches queued jobs into one durable commit each. An error that
/// fails the store (an I/O error in a job or in the commit) fails it: the batch and
/// every job still queued are answered with the failure, and the writer stops.
fn writer(
    db: &Database,
    mut rx: mpsc::Receiver<Box<dyn Job>>,
    last: Handle,
    done: &watch::Sender<bool>,
    watch: &Watch,
    (commit, stats): (&Mutex<()>, &CommitStats),
) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(BATCH_MAX);
    while let Some(job) = rx.blocking_recv() {
        batch.push(job);
        while batch.len() < BATCH_MAX {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let failed = {
            let _role = lock(commit);
            let res = commit_batch(db, &mut batch, last, stats);
            finish_batch(&mut batch, res, watch)
        };
        let Some(error) = failed else {
            continue;
        };
        rx.close();
        let failed = Err(error);
        while let Some(job) = rx.blocking_recv() {
            job.answer(&failed);
        }
        break;
    }
    done.send_replace(true);
}

/// Answers a committed (or failed) batch's jobs; returns the error that failed the
/// store, if the batch did (the store is failed then).
fn finish_batch(
    batch: &mut Vec<Box<dyn Job>>,
    res: Result<(), StorageError>,
    watch: &Watch,
) -> Option<StorageError> {
    // The first error that fails the store: a job's (a read that failed) comes
    // before the commit's, which is then only redb's "previous I/O error".
    let job_failure = batch.iter().find_map(|j| j.store_failure());
    let failure = match (&res, job_failure) {
        (_, Some(e)) => Some(e),
        (Err(e), None) if e.fails_store() => Some(e.clone()),
        _ => None,
    };
    let Some(failure) = failure else {
        for job in batch.drain(..) {
            job.answer(&res);
        }
        return None;
    };
    let error = watch.seen(failure);
    // A batch that committed is durable: its jobs get their own results.
    let res = res.map_err(|_| error.clone());
    for job in batch.drain(..) {
        job.answer(&res);
    }
    Some(error)
}

/// Runs a batch in one write transaction and commits it durably. On any storage
/// failure the transaction is dropped (aborted) and every job gets the error.
fn commit_batch(
    db: &Database,
    batch: &mut [Box<dyn Job>],
    last: Handle,
    stats: &CommitStats,
) -> Result<(), StorageError> {
    stats.commits.fetch_add(1, Ordering::Relaxed);
    stats.jobs.fetch_add(batch.len() as u64, Ordering::Relaxed);
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::Immediate)?;
    let mut dirty = false;
    {
        let mut tables = open_write(&tx)?;
        for job in batch.iter_mut() {
            if let Some(ov) = job.run(&tables, last) {
                dirty |= ov.iter().any(|t| !t.is_empty());
                apply(&mut tables, ov)?;
            }
        }
    }
    if dirty {
        tx.commit()?;
    } else {
        tx.abort()?;
    }
    Ok(())
}

/// A consistent read-only snapshot of the store.
pub struct ReadView {
    t: LazyTables,
    /// Fails the store when a read meets an error that fails it.
    watch: Watch,
    /// Keeps the database open while the view lives: its tables are opened lazily,
    /// and redb refuses that once the database is closed (the store dropped).
    /// Declared after the tables, so it is dropped last.
    _db: Arc<Database>,
}

/// The tables of a read transaction, each opened when first read: opening all of
/// them for every snapshot cost more than the lookups most snapshots make.
struct LazyTables {
    /// Declared before the transaction, so the tables are dropped first.
    open: [OnceCell<ReadOnlyTable<&'static [u8], &'static [u8]>>; txn::NTABS],
    tx: ReadTransaction,
}

impl LazyTables {
    fn table(&self, t: Tab) -> Result<&ReadOnlyTable<&'static [u8], &'static [u8]>, StorageError> {
        let cell = &self.open[t as usize];
        if let Some(table) = cell.get() {
            return Ok(table);
        }
        let table = self.tx.open_table(DEFS[t as usize])?;
        Ok(cell.get_or_init(|| table))
    }
}

impl Raw for LazyTables {
    fn get(&self, t: Tab, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Tables::get_in(self.table(t)?, key)
    }

    fn scan(
        &self,
        t: Tab,
        lo: std::ops::Bound<&[u8]>,
        hi: std::ops::Bound<&[u8]>,
        f: &mut txn::Visit<'_>,
    ) -> Result<(), StorageError> {
        Tables::scan_in(self.table(t)?, lo, hi, f)
    }
}

impl ReadView {
    /// `r`, failing the store first if it is an error that fails it.
    fn seen<T>(&self, r: Result<T, StorageError>) -> Result<T, StorageError> {
        r.map_err(|e| self.watch.seen(e))
    }

    /// The attributes of object `h`.
    pub fn get_object(&self, h: Handle) -> Result<Option<Attr>, StorageError> {
        self.seen(txn::get_object(&self.t, h))
    }

    /// The handle and kind that `name` in `dir` names.
    pub fn get_entry(
        &self,
        dir: Handle,
        name: &str,
    ) -> Result<Option<(Handle, ObjKind)>, StorageError> {
        self.seen(txn::get_entry(&self.t, dir, name))
    }

    /// Entries of `dir` with names strictly after `after` (byte order), at most `max`,
    /// and whether more follow.
    pub fn list_entries(
        &self,
        dir: Handle,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<DirEntry>, bool), StorageError> {
        self.seen(txn::list_entries(&self.t, dir, after, max))
    }

    /// Whether `dir` has no entry here.
    pub fn dir_is_empty(&self, dir: Handle) -> Result<bool, StorageError> {
        self.seen(txn::dir_is_empty(&self.t, dir))
    }

    /// Whether `dir`'s shard is sealed.
    pub fn is_sealed(&self, dir: Handle) -> Result<bool, StorageError> {
        self.seen(txn::is_sealed(&self.t, dir))
    }

    /// The reply recorded for mutation (`client`, `seq`), if it was done here.
    pub fn get_reply(&self, client: u64, seq: u64) -> Result<Option<Vec<u8>>, StorageError> {
        self.seen(txn::get_reply(&self.t, client, seq))
    }

    /// What this server's shard of `dir` adds to the directory's attributes.
    pub fn shard_stat(&self, dir: Handle) -> Result<ShardStat, StorageError> {
        self.seen(txn::shard_stat(&self.t, dir))
    }

    /// The value of extended attribute `name` of object `h`.
    pub fn get_xattr(&self, h: Handle, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        self.seen(txn::get_xattr(&self.t, h, name))
    }

    /// The names of the extended attributes of object `h`, sorted.
    pub fn list_xattrs(&self, h: Handle) -> Result<Vec<String>, StorageError> {
        self.seen(txn::list_xattrs(&self.t, h))
    }

    /// Number of objects stored.
    pub fn count_objects(&self) -> Result<u64, StorageError> {
        self.seen(self.t.table(Tab::Objects).and_then(|t| Ok(t.len()?)))
    }

    /// Number of handles in data server `server`'s pool.
    pub fn pool_len(&self, server: u32) -> Result<u64, StorageError> {
        Ok(self.pool_ranges(server)?.iter().map(|r| r.1).sum())
    }

    /// The pool ranges (first handle, count) held for `server`, in handle order.
    pub fn pool_ranges(&self, server: u32) -> Result<Vec<(Handle, u64)>, StorageError> {
        self.seen(txn::pool_ranges(&self.t, server))
    }

    /// Objects with handles strictly after `after`, at most `max` (a page of a full scan).
    pub fn objects_after(
        &self,
        after: Option<Handle>,
        max: usize,
    ) -> Result<Vec<Attr>, StorageError> {
        self.seen(txn::objects_after(&self.t, after, max))
    }

    /// Entries of all directories after `(dir, name)` in key order, at most `max`, as
    /// (directory, entry) (a page of a full scan).
    pub fn entries_after(
        &self,
        after: Option<(Handle, &str)>,
        max: usize,
    ) -> Result<Vec<(Handle, DirEntry)>, StorageError> {
        self.seen(txn::entries_after(&self.t, after, max))
    }

    /// Objects kept at zero links (open somewhere when they lost their last name)
    /// after `after`, at most `max`, in handle order.
    pub fn kept_after(
        &self,
        after: Option<Handle>,
        max: usize,
    ) -> Result<Vec<Handle>, StorageError> {
        self.seen(txn::kept_after(&self.t, after, max))
    }

    /// Every directory whose shard here is sealed (by rmdir; fsck looks for stale ones).
    pub fn seals(&self) -> Result<Vec<Handle>, StorageError> {
        self.seen(txn::seals(&self.t))
    }

    /// The superblock.
    pub fn superblock(&self) -> Result<Superblock, StorageError> {
        self.seen(read_superblock(&self.t))?
            .ok_or_else(|| StorageError::corrupt("superblock missing"))
    }
}
