//! [`MetaStore`]: the redb metadata database of one server and its group-commit writer.
//!
//! A durable redb commit costs an fsync (docs/benchmarks.md has the rate a virtual disk allows), so one
//! commit per create would cap a server far below what the disk allows. Mutations are
//! therefore sent to one writer thread, which takes every job already queued (up to
//! [`BATCH_MAX`]), runs them in one write transaction and commits once with durable
//! (immediate) durability before answering them all. Each job runs against its own
//! write overlay ([`MetaTxn`]), so a job that fails or panics leaves no trace while its
//! neighbours still commit. Reads never wait for the writer: [`MetaStore::read`] opens
//! an MVCC snapshot on the caller's thread.

use crate::error::{MetaError, StorageError};
use crate::redo::LoggedFile;
use crate::txn::{self, apply, le_u64, Overlay, Raw, Tab, Tables, DEFS, SB_NEXT};
use crate::MetaTxn;
use pvfs_proto::{Attr, DirEntry, Errno, Handle, ObjKind};
use redb::{Database, Durability, ReadOnlyTable, ReadTransaction, ReadableDatabase};
use redb::{ReadableTableMetadata, WriteTransaction};
use std::cell::OnceCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use tokio::sync::{mpsc, oneshot, watch};

/// Version of the on-disk format written in the superblock.
pub const FORMAT_VERSION: u32 = 1;
/// Handles at the start of each server's range kept for well-known objects (the root).
pub const RESERVED_HANDLES: u64 = 16;
/// Mutations that may wait for the writer; further `write` calls wait for room.
pub const QUEUE_MAX: usize = 1024;
/// Most mutations committed together in one transaction.
pub const BATCH_MAX: usize = 256;
/// redb page cache size of [`MetaStore::open`]; servers pass their `[limits] meta_cache`
/// to [`MetaStore::open_with_cache`].
const CACHE_BYTES: usize = 1 << 20;

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

/// The metadata store of one server; cheap to clone (shared inside).
#[derive(Clone)]
pub struct MetaStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Arc<Database>,
    path: PathBuf,
    range: (Handle, Handle),
    tx: Mutex<Option<mpsc::Sender<Box<dyn Job>>>>,
    done: watch::Receiver<bool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
    if format != FORMAT_VERSION {
        return Err(StorageError::Format(format!(
            "unknown format version {format} (this build reads {FORMAT_VERSION})"
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
        let (first, last) = range;
        if first == 0 || first > last {
            return Err(StorageError::Format(format!(
                "invalid handle range {first:#x}..={last:#x}"
            )));
        }
        std::fs::create_dir_all(dir)?;
        let path = dir.join("meta.redb");
        let (file, recovery) = LoggedFile::open_files(&path, &dir.join("meta.redo"))?;
        if recovery.replayed > 0 {
            tracing::info!(
                "metadata store: redid {} commits from the redo log",
                recovery.replayed
            );
        }
        let db = Database::builder()
            .set_cache_size(cache_bytes)
            .create_with_backend(file)?;
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
                Some(sb) if sb.range != range => {
                    return Err(StorageError::WrongRange {
                        found: sb.range,
                        expected: range,
                    })
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
        let db = Arc::new(db);
        let (tx, rx) = mpsc::channel(QUEUE_MAX);
        let (done_tx, done) = watch::channel(false);
        let wdb = db.clone();
        let thread = std::thread::Builder::new()
            .name("pvfs-meta-writer".into())
            .spawn(move || writer(&wdb, rx, last, &done_tx))?;
        Ok(MetaStore {
            inner: Arc::new(Inner {
                db,
                path,
                range,
                tx: Mutex::new(Some(tx)),
                done,
                thread: Mutex::new(Some(thread)),
            }),
        })
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
        Ok(ReadView {
            t: LazyTables {
                open: Default::default(),
                tx: self.inner.db.begin_read()?,
            },
            _db: self.inner.db.clone(),
        })
    }

    /// Runs `f` in the group-commit writer and returns once its effects are durable.
    /// If `f` returns `Err` (or panics, reported as EIO) none of its writes happen.
    ///
    /// `f` runs on the writer thread while its batch waits: keep it to reads and writes
    /// of the store. Dropping the returned future does not cancel a queued mutation.
    pub async fn write<R, F>(&self, f: F) -> Result<R, MetaError>
    where
        F: FnOnce(&mut MetaTxn<'_>) -> Result<R, MetaError> + Send + 'static,
        R: Send + 'static,
    {
        let tx = lock(&self.inner.tx).clone().ok_or(StorageError::Closed)?;
        let (reply, answer) = oneshot::channel();
        let job = Box::new(Pending {
            f: Some(f),
            res: None,
            reply,
        });
        tx.send(job).await.map_err(|_| StorageError::Closed)?;
        drop(tx);
        answer.await.map_err(|_| StorageError::Closed)?
    }

    /// Stops the writer after it has committed everything queued; later writes fail
    /// with [`StorageError::Closed`]. Reads keep working while a clone is alive.
    pub async fn close(&self) {
        lock(&self.inner.tx).take();
        let mut done = self.inner.done.clone();
        // An error means the writer is gone, which is what we wait for.
        let _ = done.wait_for(|d| *d).await;
    }
}

impl Drop for Inner {
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

/// A queued mutation, type-erased for the writer.
trait Job: Send {
    /// Runs the mutation against the batch so far; its overlay if it succeeded.
    fn run(&mut self, base: &dyn Raw, last: Handle) -> Option<Overlay>;
    /// Answers the caller once the batch's commit result is known.
    fn answer(self: Box<Self>, commit: &Result<(), StorageError>);
}

struct Pending<F, R> {
    f: Option<F>,
    res: Option<Result<R, MetaError>>,
    reply: oneshot::Sender<Result<R, MetaError>>,
}

impl<F, R> Job for Pending<F, R>
where
    F: FnOnce(&mut MetaTxn<'_>) -> Result<R, MetaError> + Send,
    R: Send,
{
    fn run(&mut self, base: &dyn Raw, last: Handle) -> Option<Overlay> {
        let f = self.f.take()?;
        let mut m = MetaTxn::new(base, last);
        let (res, ov) = match catch_unwind(AssertUnwindSafe(|| f(&mut m))) {
            Ok(Ok(r)) => (Ok(r), Some(m.into_overlay())),
            Ok(Err(e)) => (Err(e), None),
            Err(_) => (
                Err(MetaError::new(Errno::EIO, "metadata mutation panicked")),
                None,
            ),
        };
        self.res = Some(res);
        ov
    }

    fn answer(self: Box<Self>, commit: &Result<(), StorageError>) {
        let r = match (self.res, commit) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(r)), Ok(())) => Ok(r),
            (_, Err(e)) => Err(e.clone().into()),
            (None, Ok(())) => Err(MetaError::new(Errno::EIO, "mutation was not run")),
        };
        // The caller may have given up waiting; nothing to do then.
        let _ = self.reply.send(r);
    }
}

/// The writer thread: batches queued jobs into one durable commit each.
fn writer(
    db: &Database,
    mut rx: mpsc::Receiver<Box<dyn Job>>,
    last: Handle,
    done: &watch::Sender<bool>,
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
        let res = commit_batch(db, &mut batch, last);
        for job in batch.drain(..) {
            job.answer(&res);
        }
    }
    done.send_replace(true);
}

/// Runs a batch in one write transaction and commits it durably. On any storage
/// failure the transaction is dropped (aborted) and every job gets the error.
fn commit_batch(
    db: &Database,
    batch: &mut [Box<dyn Job>],
    last: Handle,
) -> Result<(), StorageError> {
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
    /// The attributes of object `h`.
    pub fn get_object(&self, h: Handle) -> Result<Option<Attr>, StorageError> {
        txn::get_object(&self.t, h)
    }

    /// The handle and kind that `name` in `dir` names.
    pub fn get_entry(
        &self,
        dir: Handle,
        name: &str,
    ) -> Result<Option<(Handle, ObjKind)>, StorageError> {
        txn::get_entry(&self.t, dir, name)
    }

    /// Entries of `dir` with names strictly after `after` (byte order), at most `max`,
    /// and whether more follow.
    pub fn list_entries(
        &self,
        dir: Handle,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<DirEntry>, bool), StorageError> {
        txn::list_entries(&self.t, dir, after, max)
    }

    /// Whether `dir` has no entry here.
    pub fn dir_is_empty(&self, dir: Handle) -> Result<bool, StorageError> {
        txn::dir_is_empty(&self.t, dir)
    }

    /// Whether `dir`'s shard is sealed.
    pub fn is_sealed(&self, dir: Handle) -> Result<bool, StorageError> {
        txn::is_sealed(&self.t, dir)
    }

    /// The value of extended attribute `name` of object `h`.
    pub fn get_xattr(&self, h: Handle, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        txn::get_xattr(&self.t, h, name)
    }

    /// The names of the extended attributes of object `h`, sorted.
    pub fn list_xattrs(&self, h: Handle) -> Result<Vec<String>, StorageError> {
        txn::list_xattrs(&self.t, h)
    }

    /// Number of objects stored.
    pub fn count_objects(&self) -> Result<u64, StorageError> {
        Ok(self.t.table(Tab::Objects)?.len()?)
    }

    /// Number of handles in data server `server`'s pool.
    pub fn pool_len(&self, server: u32) -> Result<u64, StorageError> {
        Ok(self.pool_ranges(server)?.iter().map(|r| r.1).sum())
    }

    /// The pool ranges (first handle, count) held for `server`, in handle order.
    pub fn pool_ranges(&self, server: u32) -> Result<Vec<(Handle, u64)>, StorageError> {
        txn::pool_ranges(&self.t, server)
    }

    /// Objects with handles strictly after `after`, at most `max` (a page of a full scan).
    pub fn objects_after(
        &self,
        after: Option<Handle>,
        max: usize,
    ) -> Result<Vec<Attr>, StorageError> {
        txn::objects_after(&self.t, after, max)
    }

    /// Entries of all directories after `(dir, name)` in key order, at most `max`, as
    /// (directory, entry) (a page of a full scan).
    pub fn entries_after(
        &self,
        after: Option<(Handle, &str)>,
        max: usize,
    ) -> Result<Vec<(Handle, DirEntry)>, StorageError> {
        txn::entries_after(&self.t, after, max)
    }

    /// Every directory whose shard here is sealed (by rmdir; fsck looks for stale ones).
    pub fn seals(&self) -> Result<Vec<Handle>, StorageError> {
        txn::seals(&self.t)
    }

    /// The superblock.
    pub fn superblock(&self) -> Result<Superblock, StorageError> {
        read_superblock(&self.t)?.ok_or_else(|| StorageError::corrupt("superblock missing"))
    }
}
