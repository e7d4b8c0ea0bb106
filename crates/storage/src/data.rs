//! The data store: one local file per datafile handle (docs/storage-format.md).
//!
//! [`DataBackend`] is the blocking I/O interface the server calls from
//! `spawn_blocking`; [`FileData`] implements it with files at
//! `<dir>/data/<hh>/<handle as 16 hex digits>` (hh = the handle's low byte in hex, so no
//! directory grows beyond 1/256 of the files). A bounded LRU of open files keeps a
//! stream of requests from paying an `open` each; the positioned reads and writes run
//! outside the cache lock.
//!
//! Durability: `sync` flushes the file's data, and also its directory when a file was
//! created there since that directory was last flushed, so a synced datafile survives
//! a crash together with its name.
//!
//! Every creation and removal of a datafile is recorded in the born log
//! ([`crate::born`]), made durable before any directory holding a new name is
//! flushed: a synced datafile is always in it, so a datafile missing from the disk is
//! either a hole (never created) or lost (created, not removed: [`DataBackend::lost`]).

use crate::born::{BornLog, Event};
use crate::error::StorageError;
use crate::spares::Spares;
use crate::sums::SUM_SUFFIX;
use pvfs_proto::message::DatafileStat;
use pvfs_proto::{Handle, Timespec};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::SystemTime;

/// How many open datafiles [`FileData`] keeps cached.
pub const FD_CACHE_SIZE: usize = 512;

/// Space of the file system holding a storage directory (statvfs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsSpace {
    /// Total bytes.
    pub total_bytes: u64,
    /// Free bytes (including those reserved for root).
    pub free_bytes: u64,
    /// Bytes available to unprivileged users.
    pub avail_bytes: u64,
    /// Total inodes.
    pub total_inodes: u64,
    /// Free inodes.
    pub free_inodes: u64,
    /// Identifies the file system on this running kernel (boot id, device, file
    /// system id hashed; 0 when unknown), so that space shared by several servers
    /// is counted once.
    pub fs_id: u64,
}

/// A datafile's size, modification time and allocated bytes from its metadata.
fn stat_of(md: &std::fs::Metadata) -> DatafileStat {
    DatafileStat {
        size: md.size(),
        mtime: Timespec {
            secs: md.mtime(),
            nsecs: u32::try_from(md.mtime_nsec()).unwrap_or(0),
        },
        allocated: md.blocks().saturating_mul(512),
    }
}

/// Blocking access to the datafiles of one server; the seam for fault injection.
pub trait DataBackend: Send + Sync + 'static {
    /// Writes `data` at `off`, creating the datafile on first write.
    fn write_at(&self, h: Handle, off: u64, data: &[u8]) -> Result<(), StorageError>;
    /// Reads into `buf` from `off`; short at end of file, 0 if the datafile does not exist.
    fn read_at(&self, h: Handle, off: u64, buf: &mut [u8]) -> Result<usize, StorageError>;
    /// Size and modification time; zeros if the datafile does not exist.
    fn stat(&self, h: Handle) -> Result<DatafileStat, StorageError>;
    /// Sets the size, creating the datafile if missing (and `size > 0`).
    fn truncate(&self, h: Handle, size: u64) -> Result<(), StorageError>;
    /// fallocate(2) of the local bytes `off .. off + len` with `mode`
    /// (`pvfs_proto::message::falloc`), creating the datafile if missing when the
    /// mode allocates. A mode the local file system does not support fails with
    /// EOPNOTSUPP, a full one with ENOSPC.
    fn fallocate(&self, h: Handle, mode: u32, off: u64, len: u64) -> Result<(), StorageError>;
    /// Removes the datafile; a missing one is not an error.
    fn remove(&self, h: Handle) -> Result<(), StorageError>;
    /// Makes the datafile's contents durable (no-op if it does not exist).
    fn sync(&self, h: Handle) -> Result<(), StorageError>;
    /// Makes every datafile's contents and names durable (a client's `syncfs`).
    fn sync_all(&self) -> Result<(), StorageError>;
    /// Number of datafiles present.
    fn count(&self) -> Result<u64, StorageError>;
    /// Handles of every datafile present (for fsck).
    fn list(&self) -> Result<Vec<Handle>, StorageError>;
    /// Handles of the datafiles this store created and did not remove that are not
    /// on disk: lost ones (fsck), sorted. A missing datafile not listed here was never
    /// created (a hole).
    fn lost(&self) -> Result<Vec<Handle>, StorageError>;
    /// Space of the file system under the storage directory.
    fn statfs(&self) -> Result<FsSpace, StorageError>;
    /// A number that changes when, and only when, writes this store acknowledged
    /// but did not sync may have been lost since (a power loss: the machine booted
    /// again; never 0). A client compares the one its writes got with the one its
    /// fsync finds (the write verifier of NFS's unstable writes).
    fn verifier(&self) -> u64;
    /// Creates the (empty) datafiles that do not exist yet, durably (fsck's repair of a
    /// lost datafile).
    fn create_all(&self, hs: &[Handle]) -> Result<(), StorageError>;

    /// The open datafile, for zero-copy sends (`sendfile`); None when it does not
    /// exist or the backend has no file to offer (callers then use `read_at`).
    fn file_for_send(&self, _h: Handle) -> Result<Option<Arc<File>>, StorageError> {
        Ok(None)
    }

    /// Writes `data`, run after run (`(local offset, length)` pairs covering it in
    /// order), only if the datafile is open already (nothing to open or create
    /// first), and answers its [`DataBackend::stat`] after: a small write the server
    /// then makes on the thread that received it. None when it is not open (nothing
    /// written): the caller uses [`DataBackend::write_at`] from a blocking thread.
    fn write_runs_if_open(
        &self,
        _h: Handle,
        _runs: &[(u64, u64)],
        _data: &[u8],
    ) -> Option<Result<DatafileStat, StorageError>> {
        None
    }

    /// [`DataBackend::stat`] only if the datafile is open already (one `fstat`);
    /// None when it is not.
    fn stat_if_open(&self, _h: Handle) -> Option<Result<DatafileStat, StorageError>> {
        None
    }

    /// Fills `buf`, run after run (`(local offset, length)` pairs covering it in
    /// order), only if the datafile is open and every byte asked for is in the page
    /// cache (`preadv2` with `RWF_NOWAIT`: no wait for the disk); None otherwise (not
    /// open, not all cached, or fewer bytes than the runs ask), and the caller reads
    /// from a blocking thread.
    fn read_runs_if_cached(
        &self,
        _h: Handle,
        _runs: &[(u64, u64)],
        _buf: &mut [u8],
    ) -> Option<Result<(), StorageError>> {
        None
    }

    /// Checks the blocks holding `runs` (`(local offset, length)` pairs) of datafile
    /// `h` against their sums before they are sent with `sendfile` from
    /// [`DataBackend::file_for_send`]'s file: a `BadSum` error for a block that
    /// does not match.
    fn check_runs(&self, _h: Handle, _runs: &[(u64, u64)]) -> Result<(), StorageError> {
        Ok(())
    }

    /// Sums block of datafile `h` holding byte `off` again from its bytes as they
    /// are (they are taken as right: a block written before a power loss whose sum
    /// did not reach the disk).
    fn resum(&self, _h: Handle, _off: u64) -> Result<(), StorageError> {
        Ok(())
    }

    /// Whether the checksums have not been checked since the machine booted again
    /// (a block that does not match may be a power loss's, not damage).
    fn sums_unsure(&self) -> bool {
        false
    }

    /// Records that every checksum was checked in this boot (a whole scrub).
    fn trust_sums(&self) -> Result<(), StorageError> {
        Ok(())
    }

    /// Writes the concatenation of `bufs` at `off` (a locally contiguous run gathered
    /// from several buffers).
    fn write_vectored_at(&self, h: Handle, off: u64, bufs: &[&[u8]]) -> Result<(), StorageError> {
        let mut off = off;
        for b in bufs {
            self.write_at(h, off, b)?;
            off += b.len() as u64;
        }
        Ok(())
    }
}

/// A number naming one file system on this running kernel: FNV-1a of the kernel's
/// boot id (random per boot, shared by every process and container on that kernel),
/// the device number and statvfs's file system id. 0 when the boot id cannot be read
/// (then nobody's space is taken for anybody else's).
fn fs_id(dev: u64, fsid: u64) -> u64 {
    let Ok(mut bytes) = std::fs::read("/proc/sys/kernel/random/boot_id") else {
        return 0;
    };
    bytes.extend_from_slice(&dev.to_le_bytes());
    bytes.extend_from_slice(&fsid.to_le_bytes());
    pvfs_proto::fnv1a64(&bytes).max(1)
}

/// Handles of the datafiles under the data directory `root`, sorted; names that are
/// not of the form this store writes are not datafiles.
fn list_under(root: &Path) -> Result<Vec<Handle>, StorageError> {
    let mut out = Vec::new();
    for hh in 0..256u64 {
        let dir = match std::fs::read_dir(root.join(format!("{hh:02x}"))) {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        for ent in dir {
            let name = ent?.file_name();
            let parsed = std::str::from_utf8(name.as_bytes())
                .ok()
                .filter(|s| s.len() == 16)
                .and_then(|s| u64::from_str_radix(s, 16).ok());
            if let Some(h) = parsed.filter(|&h| bucket(h) as u64 == hh) {
                out.push(h);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The directory bucket of a datafile: the low 8 bits of its handle (256 directories,
/// none holding more than 1/256 of the datafiles).
fn bucket(h: Handle) -> usize {
    (h & 0xff) as usize
}

/// An LRU of open files: handle -> (file, last use), and last use -> handle.
#[derive(Default)]
struct FdCache {
    map: HashMap<Handle, (Arc<File>, u64)>,
    order: BTreeMap<u64, Handle>,
    tick: u64,
    /// Files evicted while someone still used them, so a removal can tell that the
    /// datafile is still open somewhere (pruned of dead ones as it grows).
    lent: HashMap<Handle, Weak<File>>,
}

impl FdCache {
    fn get(&mut self, h: Handle) -> Option<Arc<File>> {
        let (f, used) = self.map.get_mut(&h)?;
        self.order.remove(used);
        self.tick += 1;
        *used = self.tick;
        self.order.insert(self.tick, h);
        Some(f.clone())
    }

    fn insert(&mut self, h: Handle, f: Arc<File>) {
        self.tick += 1;
        if let Some((_, old)) = self.map.insert(h, (f, self.tick)) {
            self.order.remove(&old);
        }
        self.order.insert(self.tick, h);
        while self.map.len() > FD_CACHE_SIZE {
            let Some((_, old)) = self.order.pop_first() else {
                break;
            };
            if let Some((f, _)) = self.map.remove(&old) {
                if Arc::strong_count(&f) > 1 {
                    if self.lent.len() >= FD_CACHE_SIZE {
                        self.lent.retain(|_, w| w.strong_count() > 0);
                    }
                    self.lent.insert(old, Arc::downgrade(&f));
                }
            }
        }
    }

    fn remove(&mut self, h: Handle) -> Option<Arc<File>> {
        let (f, used) = self.map.remove(&h)?;
        self.order.remove(&used);
        Some(f)
    }

    /// Drops `h` from the cache; its descriptor if it was cached, and whether anyone
    /// else may still use an open descriptor of it (one handed out by [`FileData::file`]).
    fn take(&mut self, h: Handle) -> (Option<Arc<File>>, bool) {
        let cached = self.remove(h);
        let lent = self.lent.remove(&h).is_some_and(|w| w.strong_count() > 0);
        let shared = cached.as_ref().is_some_and(|f| Arc::strong_count(f) > 1);
        (cached, lent || shared)
    }
}

/// The real data backend: one file per datafile handle under `<dir>/data`.
pub struct FileData {
    root: PathBuf,
    cache: Mutex<FdCache>,
    /// Subdirectories where a file was created since they were last fsynced.
    dirty_dirs: [AtomicBool; 256],
    /// Which datafiles were ever created and removed.
    born: BornLog,
    /// Emptied datafiles kept for reuse (no inode freed or allocated per file).
    spares: Spares,
    /// How many datafiles there are: counted once at open, then kept with every
    /// create and removal, so a `statfs` reads no directory.
    datafiles: AtomicU64,
    /// The write verifier ([`DataBackend::verifier`]): the kernel's boot id (a
    /// process restart keeps what the page cache holds; a power loss means a boot)
    /// and the storage's device, hashed.
    verifier: u64,
    /// Open sidecars of checksums (`crate::sums`), as `cache` holds datafiles.
    sum_cache: Mutex<FdCache>,
    /// Locks taken by every change of a datafile (and by a read that found a block
    /// not holding, to read it again), hashed by handle: sidecar and bytes change
    /// together.
    locks: Box<[Mutex<()>]>,
    /// The sums have not been checked since the machine booted again (a power loss
    /// may have kept a block's bytes and lost its sum, or the reverse).
    unsure: AtomicBool,
}

/// How many locks [`FileData`] hashes datafiles over.
const LOCKS: usize = 64;

/// The store's record of its checksums, `data/sums`: magic, block size (u32 LE),
/// 4 zero bytes, and the write verifier (u64 LE) of the boot in which they were
/// last known to hold.
pub const SUMS_FILE: &str = "sums";
const SUMS_MAGIC: &[u8; 16] = b"pvfs sums v1\0\0\0\0";
const SUMS_LEN: usize = 32;

/// Reads `data/sums` under `root` (writing it when missing): whether the sums
/// were last known to hold in a boot other than `verifier`'s.
fn open_sums(root: &Path, verifier: u64) -> Result<bool, StorageError> {
    let path = root.join(SUMS_FILE);
    match std::fs::read(&path) {
        Ok(b) => {
            if b.len() != SUMS_LEN
                || &b[..16] != SUMS_MAGIC
                || b[16..20] != (crate::sums::SUM_BLOCK as u32).to_le_bytes()
            {
                return Err(StorageError::Format(format!(
                    "{}: not a record of checksums this version keeps",
                    path.display()
                )));
            }
            let mut v = [0u8; 8];
            v.copy_from_slice(&b[24..32]);
            Ok(u64::from_le_bytes(v) != verifier)
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            write_sums(root, verifier)?;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes `data/sums` under `root` with `verifier`, atomically and durably.
fn write_sums(root: &Path, verifier: u64) -> Result<(), StorageError> {
    let mut b = Vec::with_capacity(SUMS_LEN);
    b.extend_from_slice(SUMS_MAGIC);
    b.extend_from_slice(&(crate::sums::SUM_BLOCK as u32).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&verifier.to_le_bytes());
    let tmp = root.join(format!("{SUMS_FILE}.tmp"));
    let mut f = File::create(&tmp)?;
    std::io::Write::write_all(&mut f, &b)?;
    f.sync_all()?;
    std::fs::rename(&tmp, root.join(SUMS_FILE))?;
    File::open(root)?.sync_all()?;
    Ok(())
}

impl FileData {
    /// Opens (creating if needed) the data store under `dir`, and its born log.
    pub fn open(dir: &Path) -> Result<FileData, StorageError> {
        let root = dir.join("data");
        for hh in 0..256 {
            std::fs::create_dir_all(root.join(format!("{hh:02x}")))?;
        }
        let present = list_under(&root)?;
        let born = BornLog::open(&root, &present)?;
        let spares = Spares::open(&root)?;
        let dev = std::fs::metadata(&root)?.dev();
        // Without a boot id (no /proc), a number of this start: a restart then fails
        // the fsyncs of writes made before it, which is safe.
        let verifier = match fs_id(dev, 0) {
            0 => pvfs_proto::clock::random_u64() | 1,
            v => v,
        };
        let unsure = open_sums(&root, verifier)?;
        if unsure {
            tracing::warn!(
                "the machine booted again since the checksums of {} were last checked: \
                 a block whose sum does not match may have lost its sum or its bytes in a \
                 power loss; run `pvfs scrub`",
                root.display()
            );
        }
        Ok(FileData {
            root,
            cache: Mutex::default(),
            dirty_dirs: std::array::from_fn(|_| AtomicBool::new(false)),
            born,
            spares,
            datafiles: AtomicU64::new(present.len() as u64),
            verifier,
            sum_cache: Mutex::default(),
            locks: (0..LOCKS).map(|_| Mutex::new(())).collect(),
            unsure: AtomicBool::new(unsure),
        })
    }

    /// A datafile went (under the descriptor cache's lock, as every removal).
    fn one_less(&self) {
        let _ = self
            .datafiles
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
    }

    /// How many emptied datafiles are kept for reuse now.
    pub fn spare_count(&self) -> usize {
        self.spares.len()
    }

    fn dir_of(&self, h: Handle) -> PathBuf {
        self.root.join(format!("{:02x}", bucket(h)))
    }

    fn path(&self, h: Handle) -> PathBuf {
        self.dir_of(h).join(format!("{h:016x}"))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, FdCache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sum_cache(&self) -> std::sync::MutexGuard<'_, FdCache> {
        self.sum_cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn sum_path(&self, h: Handle) -> PathBuf {
        self.dir_of(h).join(format!("{h:016x}{SUM_SUFFIX}"))
    }

    /// The lock every change of datafile `h` holds.
    fn lock(&self, h: Handle) -> std::sync::MutexGuard<'_, ()> {
        let i = (pvfs_proto::fnv1a64(&h.to_le_bytes()) % LOCKS as u64) as usize;
        self.locks[i].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`FileData::lock`] if nobody holds it now.
    fn try_lock(&self, h: Handle) -> Option<std::sync::MutexGuard<'_, ()>> {
        let i = (pvfs_proto::fnv1a64(&h.to_le_bytes()) % LOCKS as u64) as usize;
        match self.locks[i].try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The sidecar of datafile `h`'s checksums, from the cache or opened (and then
    /// trimmed to the datafile's blocks); None when the datafile has none (written
    /// by a store that kept no sums, or not there).
    fn sum_file(&self, h: Handle) -> Result<Option<Arc<File>>, StorageError> {
        let mut cache = self.sum_cache();
        if let Some(s) = cache.get(h) {
            return Ok(Some(s));
        }
        let s = match OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.sum_path(h))
        {
            Ok(s) => s,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let size = match std::fs::metadata(self.path(h)) {
            Ok(md) => md.len(),
            // A sidecar left by a removal cut short: no datafile to check.
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        crate::sums::trim(&s, size)?;
        let s = Arc::new(s);
        cache.insert(h, s.clone());
        Ok(Some(s))
    }

    /// The open datafile `h`, created (after an empty sidecar for its sums) if it
    /// does not exist. Called holding its lock.
    fn file_with_sums(&self, h: Handle) -> Result<Arc<File>, StorageError> {
        if let Some(f) = self.file(h, false)? {
            return Ok(f);
        }
        let s = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(self.sum_path(h))?;
        self.sum_cache().insert(h, Arc::new(s));
        self.must_file(h)
    }

    /// Reads from datafile `f` (`h`) at `off` into `buf`, checking every block
    /// against its sums when it has them; None when `nowait` and not all of it is
    /// in the page cache.
    fn read_checked(
        &self,
        h: Handle,
        f: &File,
        off: u64,
        buf: &mut [u8],
        nowait: bool,
    ) -> Result<Option<usize>, StorageError> {
        let s = if nowait {
            // Whether an uncached datafile has a sidecar takes an open to tell.
            let Some(s) = self.sum_cache().get(h) else {
                return Ok(None);
            };
            Some(s)
        } else {
            self.sum_file(h)?
        };
        let Some(s) = s else {
            return Ok(crate::sums::pread_full(f, buf, off, nowait)?);
        };
        match crate::sums::read_checked(f, &s, off, buf, nowait)? {
            None => Ok(None),
            Some(Ok(n)) => Ok(Some(n)),
            // Read again holding the lock: a change may have been between its sum
            // and its bytes (or half copied) when read.
            Some(Err(_)) if nowait => Ok(None),
            Some(Err(_)) => {
                let _held = self.lock(h);
                match crate::sums::read_checked(f, &s, off, buf, false)? {
                    Some(Ok(n)) => Ok(Some(n)),
                    Some(Err(at)) => Err(StorageError::BadSum {
                        handle: h,
                        offset: at,
                        unsure: self.unsure.load(Ordering::Acquire),
                    }),
                    None => Ok(None),
                }
            }
        }
    }

    /// Writes the concatenation of `bufs` at `off` of datafile `h` (created if
    /// missing), its sums first. Takes the datafile's lock.
    fn write_checked(&self, h: Handle, off: u64, bufs: &[&[u8]]) -> Result<(), StorageError> {
        let _held = self.lock(h);
        let f = self.file_with_sums(h)?;
        write_summed(&f, self.sum_file(h)?.as_deref(), off, bufs)
    }

    /// The open datafile, from the cache or opened read-write (created 0600 if `create`);
    /// None if it does not exist and `create` is false. Opens under the cache lock, so a
    /// concurrent `remove` cannot leave a stale descriptor in the cache.
    fn file(&self, h: Handle, create: bool) -> Result<Option<Arc<File>>, StorageError> {
        let mut cache = self.cache();
        if let Some(f) = cache.get(h) {
            return Ok(Some(f));
        }
        let path = self.path(h);
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).mode(0o600);
        let f = match opts.open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound && create => {
                let f = if self.spares.take(&path) {
                    // A spare's times are those of its emptying: give it a creation's.
                    let reused = opts.open(&path).and_then(|f| {
                        f.set_times(std::fs::FileTimes::new().set_modified(SystemTime::now()))?;
                        Ok(f)
                    });
                    match reused {
                        Ok(f) => f,
                        Err(e) => {
                            let _ = std::fs::remove_file(&path);
                            return Err(e.into());
                        }
                    }
                } else {
                    opts.create(true).open(&path)?
                };
                // Recorded before its directory can be flushed for it (`sync`); a
                // datafile that cannot be recorded is not kept.
                if let Err(e) = self.born.append(Event::Created, h) {
                    let _ = std::fs::remove_file(&path);
                    return Err(e);
                }
                self.datafiles.fetch_add(1, Ordering::Relaxed);
                self.dirty_dirs[bucket(h)].store(true, Ordering::Release);
                f
            }
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let f = Arc::new(f);
        cache.insert(h, f.clone());
        Ok(Some(f))
    }

    fn must_file(&self, h: Handle) -> Result<Arc<File>, StorageError> {
        self.file(h, true)?
            .ok_or_else(|| std::io::Error::from(ErrorKind::NotFound).into())
    }

    /// Removes datafile `h` (kept as a spare when it can be).
    fn remove_datafile(
        &self,
        h: Handle,
        held: std::sync::MutexGuard<'_, ()>,
    ) -> Result<(), StorageError> {
        let mut cache = self.cache();

        let (cached, in_use) = cache.take(h);
        let path = self.path(h);
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
        // Recorded first: a datafile the log says exists is never one that was
        // removed on purpose (a crash in between leaves a file the next open records
        // again).
        self.born.append(Event::Removed, h)?;
        // Kept as a spare unless a descriptor handed out may still read or write it:
        // then that I/O must not reach whatever file the spare becomes. Moved under
        // the cache lock (nobody can open the name meanwhile), emptied after it (a
        // large file's blocks take a while to free).
        let stashed = if in_use {
            None
        } else {
            self.spares.stash(&path)
        };
        let Some(stashed) = stashed else {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != ErrorKind::NotFound => Err(e.into()),
                Err(_) => Ok(()),
                Ok(()) => {
                    self.one_less();
                    Ok(())
                }
            };
        };
        self.one_less();
        drop(cache);
        // The name is gone: emptying the spare needs no lock of the datafile.
        drop(held);
        self.spares.settle(stashed, cached.as_deref());
        Ok(())
    }

    /// Makes datafile `h` durable, with its name.
    fn sync_datafile(&self, h: Handle) -> Result<(), StorageError> {
        let Some(f) = self.file(h, false)? else {
            return Ok(());
        };
        f.sync_data()?;
        // Cleared before the flush: a create racing with it marks the directory again.
        // The born log first: every name the flush makes durable is recorded there.
        // A failed flush marks the directory again, for the next sync to retry.
        if self.dirty_dirs[bucket(h)].swap(false, Ordering::AcqRel) {
            let flushed = self.born.sync().and_then(|()| {
                self.spares.sync_dir()?;
                Ok(File::open(self.dir_of(h))?.sync_all()?)
            });
            if let Err(e) = flushed {
                self.dirty_dirs[bucket(h)].store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// Writes the concatenation of `bufs` at `off` of datafile `f`, the entries of its
/// sidecar `sums` (when it has one) first; called holding the datafile's lock.
fn write_summed(
    f: &File,
    sums: Option<&File>,
    off: u64,
    bufs: &[&[u8]],
) -> Result<(), StorageError> {
    if let Some(s) = sums.filter(|_| bufs.iter().any(|b| !b.is_empty())) {
        let (first, entries) = crate::sums::sums_of_write(f, s, off, bufs)?;
        crate::sums::write_entries(s, first, &entries)?;
    }
    pwritev_all(f, off, bufs)
}

/// Writes the concatenation of `bufs` at `off` of `f` with `pwritev`, looping on
/// short writes.
fn pwritev_all(f: &File, off: u64, bufs: &[&[u8]]) -> Result<(), StorageError> {
    const IOV_MAX: usize = 1024;
    let (mut idx, mut skip, mut done) = (0usize, 0usize, 0u64);
    loop {
        // Skip exhausted (and empty) buffers.
        while idx < bufs.len() && skip == bufs[idx].len() {
            idx += 1;
            skip = 0;
        }
        if idx == bufs.len() {
            return Ok(());
        }
        let iov: Vec<libc::iovec> = bufs[idx..]
            .iter()
            .take(IOV_MAX)
            .enumerate()
            .map(|(i, b)| {
                let b = if i == 0 { &b[skip..] } else { b };
                libc::iovec {
                    iov_base: b.as_ptr() as *mut libc::c_void,
                    iov_len: b.len(),
                }
            })
            .collect();
        let pos = off
            .checked_add(done)
            .and_then(|p| libc::off_t::try_from(p).ok())
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: every iovec points into a live slice of `bufs` for its length, and
        // the descriptor stays open while `f` is held.
        let n = unsafe { libc::pwritev(f.as_raw_fd(), iov.as_ptr(), iov.len() as i32, pos) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        if n == 0 {
            return Err(std::io::Error::from(ErrorKind::WriteZero).into());
        }
        let mut n = n as usize;
        done += n as u64;
        while n > 0 {
            let left = bufs[idx].len() - skip;
            if n >= left {
                n -= left;
                idx += 1;
                skip = 0;
            } else {
                skip += n;
                n = 0;
            }
        }
    }
}

impl DataBackend for FileData {
    fn write_at(&self, h: Handle, off: u64, data: &[u8]) -> Result<(), StorageError> {
        self.write_checked(h, off, &[data])
    }

    fn file_for_send(&self, h: Handle) -> Result<Option<Arc<File>>, StorageError> {
        self.file(h, false)
    }

    fn check_runs(&self, h: Handle, runs: &[(u64, u64)]) -> Result<(), StorageError> {
        let Some(s) = self.sum_file(h)? else {
            return Ok(());
        };
        let Some(f) = self.file(h, false)? else {
            return Ok(());
        };
        // Held while the bytes are mapped: no change is half made, and no truncate
        // cuts the file under the mapping.
        let _held = self.lock(h);
        let size = f.metadata()?.len();
        for &(off, len) in runs {
            if let Some(at) = crate::sums::check_mapped(&f, &s, off, len, size)? {
                return Err(StorageError::BadSum {
                    handle: h,
                    offset: at,
                    unsure: self.unsure.load(Ordering::Acquire),
                });
            }
        }
        Ok(())
    }

    fn write_runs_if_open(
        &self,
        h: Handle,
        runs: &[(u64, u64)],
        data: &[u8],
    ) -> Option<Result<DatafileStat, StorageError>> {
        let f = self.cache().get(h)?;
        // Taken by another change now, or sums not open: from a blocking thread.
        let _held = self.try_lock(h)?;
        let sums = self.sum_cache().get(h)?;
        let mut at = 0usize;
        let written = runs.iter().try_for_each(|&(off, len)| {
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            let piece = data
                .get(at..at.saturating_add(len))
                .ok_or_else(|| std::io::Error::from(ErrorKind::InvalidInput))?;
            at += len;
            write_summed(&f, Some(&sums), off, &[piece])
        });
        Some(written.and_then(|()| Ok(stat_of(&f.metadata()?))))
    }

    fn stat_if_open(&self, h: Handle) -> Option<Result<DatafileStat, StorageError>> {
        let f = self.cache().get(h)?;
        Some(
            f.metadata()
                .map(|md| stat_of(&md))
                .map_err(StorageError::from),
        )
    }

    fn read_runs_if_cached(
        &self,
        h: Handle,
        runs: &[(u64, u64)],
        buf: &mut [u8],
    ) -> Option<Result<(), StorageError>> {
        let f = self.cache().get(h)?;
        let mut at = 0usize;
        for &(off, len) in runs {
            let len = usize::try_from(len).ok()?;
            let dst = buf.get_mut(at..at.checked_add(len)?)?;
            at += len;
            match self.read_checked(h, &f, off, dst, true) {
                Err(e) => return Some(Err(e)),
                // Not all in the page cache, or a block to read again holding
                // its lock.
                Ok(None) => return None,
                // A short read: the datafile shrank.
                Ok(Some(n)) if n != dst.len() => return None,
                Ok(Some(_)) => {}
            }
        }
        Some(Ok(()))
    }

    fn create_all(&self, hs: &[Handle]) -> Result<(), StorageError> {
        let mut dirs: Vec<usize> = Vec::new();
        for &h in hs {
            let _held = self.lock(h);
            let path = self.path(h);
            let made = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path);
            match made {
                Ok(_) => {
                    if let Err(e) = self.born.append(Event::Created, h) {
                        let _ = std::fs::remove_file(&path);
                        return Err(e);
                    }
                    // Empty: its sums (none) from now on. A crash before this
                    // leaves it unchecked.
                    self.sum_cache().remove(h);
                    File::create(self.sum_path(h))?;
                    self.datafiles.fetch_add(1, Ordering::Relaxed);
                    // A descriptor cached for this handle names a file that was lost
                    // (deleted behind our back); later I/O must see the new one.
                    self.cache().remove(h);
                    if !dirs.contains(&bucket(h)) {
                        dirs.push(bucket(h));
                    }
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e.into()),
            }
        }
        // The names must survive a crash before anyone is told the handles exist, and
        // their records before them.
        self.born.sync()?;
        for b in dirs {
            File::open(self.root.join(format!("{b:02x}")))?.sync_all()?;
        }
        Ok(())
    }

    fn read_at(&self, h: Handle, off: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        let Some(f) = self.file(h, false)? else {
            return Ok(0);
        };
        Ok(self.read_checked(h, &f, off, buf, false)?.unwrap_or(0))
    }

    fn stat(&self, h: Handle) -> Result<DatafileStat, StorageError> {
        let cached = self.cache().get(h);
        let md = match cached {
            Some(f) => f.metadata(),
            None => std::fs::metadata(self.path(h)),
        };
        match md {
            Ok(md) => Ok(stat_of(&md)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(DatafileStat::default()),
            Err(e) => Err(e.into()),
        }
    }

    fn truncate(&self, h: Handle, size: u64) -> Result<(), StorageError> {
        let _held = self.lock(h);
        let f = match self.file(h, false)? {
            Some(f) => f,
            None if size > 0 => self.file_with_sums(h)?,
            None => return Ok(()),
        };
        let Some(s) = self.sum_file(h)? else {
            return Ok(f.set_len(size)?);
        };
        // The last block's sum first, the bytes after, then the entries past the
        // end (a crash before the last leaves them to the next open's trim).
        if size < f.metadata()?.len() {
            if let Some((b, e)) = crate::sums::sum_of_cut(&f, &s, size)? {
                crate::sums::write_entries(&s, b, &[e])?;
            }
        }
        f.set_len(size)?;
        crate::sums::trim(&s, size)?;
        Ok(())
    }

    fn fallocate(&self, h: Handle, mode: u32, off: u64, len: u64) -> Result<(), StorageError> {
        use pvfs_proto::message::falloc;
        // Only the modes pvfs offers reach the disk (never a collapse or insert).
        falloc::check(mode, off, len)
            .map_err(|(e, _)| std::io::Error::from_raw_os_error(e.code()))?;
        let create = falloc::creates(mode);
        let _held = self.lock(h);
        let f = match self.file(h, false)? {
            Some(f) => f,
            None if create => self.file_with_sums(h)?,
            // Nothing stored: the range reads as zeros already.
            None => return Ok(()),
        };
        if mode & (falloc::PUNCH_HOLE | falloc::ZERO_RANGE) != 0 {
            if let Some(s) = self.sum_file(h)? {
                let size = f.metadata()?.len();
                crate::sums::zero_sums(&f, &s, off, len, size)?;
            }
        }
        let too_big = || std::io::Error::from_raw_os_error(libc::EFBIG);
        let off = libc::off_t::try_from(off).map_err(|_| too_big())?;
        let len = libc::off_t::try_from(len).map_err(|_| too_big())?;
        let mode = libc::c_int::try_from(mode)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EOPNOTSUPP))?;
        loop {
            // SAFETY: a plain system call on a descriptor held open by `f`.
            if unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) } == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                return Err(e.into());
            }
        }
    }

    fn remove(&self, h: Handle) -> Result<(), StorageError> {
        let held = self.lock(h);
        // The sidecar first, the datafile after, under its lock (a write of the
        // handle after it makes a new sidecar before a new datafile): a crash
        // between leaves a datafile without sums, read unchecked, whose removal is
        // done again.
        self.sum_cache().remove(h);
        match std::fs::remove_file(self.sum_path(h)) {
            Err(e) if e.kind() != ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        self.remove_datafile(h, held)
    }

    fn sync(&self, h: Handle) -> Result<(), StorageError> {
        if let Some(s) = self.sum_file(h)? {
            s.sync_data()?;
        }
        self.sync_datafile(h)
    }

    fn resum(&self, h: Handle, off: u64) -> Result<(), StorageError> {
        let _held = self.lock(h);
        let (Some(f), Some(s)) = (self.file(h, false)?, self.sum_file(h)?) else {
            return Ok(());
        };
        let b = off / crate::sums::SUM_BLOCK;
        let e = crate::sums::sum_again(&f, &s, b)?;
        crate::sums::write_entries(&s, b, &[e])?;
        Ok(())
    }

    fn sums_unsure(&self) -> bool {
        self.unsure.load(Ordering::Acquire)
    }

    fn trust_sums(&self) -> Result<(), StorageError> {
        if self.unsure.load(Ordering::Acquire) {
            write_sums(&self.root, self.verifier)?;
            self.unsure.store(false, Ordering::Release);
            tracing::info!(
                "checksums of {} checked since the reboot",
                self.root.display()
            );
        }
        Ok(())
    }

    fn count(&self) -> Result<u64, StorageError> {
        Ok(self.datafiles.load(Ordering::Relaxed))
    }

    fn sync_all(&self) -> Result<(), StorageError> {
        use std::os::fd::AsRawFd;
        // The born log first, so that every name the file system sync makes durable
        // is recorded there (as in `sync`).
        self.born.sync()?;
        let root = File::open(&self.root)?;
        // SAFETY: syncfs on a descriptor we own; no memory is involved.
        if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }

    fn list(&self) -> Result<Vec<Handle>, StorageError> {
        list_under(&self.root)
    }

    fn lost(&self) -> Result<Vec<Handle>, StorageError> {
        // Present first, then the log: a datafile created in between is in the log
        // and not in `present`, and is found on disk below; one removed in between
        // has its removal in the log already.
        let present: HashSet<Handle> = self.list()?.into_iter().collect();
        let (live, read_to) = self.born.live()?;
        let gone: Vec<Handle> = live
            .into_iter()
            .filter(|h| !present.contains(h))
            .filter(|&h| matches!(std::fs::symlink_metadata(self.path(h)), Err(e) if e.kind() == ErrorKind::NotFound))
            .collect();
        // Removals are recorded before the file goes: one that happened after the
        // read of the log (and made the file missing) is in its tail now.
        let removed = self.born.removed_since(read_to)?;
        let mut lost: Vec<Handle> = gone.into_iter().filter(|h| !removed.contains(h)).collect();
        lost.sort_unstable();
        Ok(lost)
    }

    fn statfs(&self) -> Result<FsSpace, StorageError> {
        let path = std::ffi::CString::new(self.root.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(ErrorKind::InvalidInput))?;
        // SAFETY: statvfs is plain old data; zeroes are a valid value to be overwritten.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `path` is NUL-terminated and `s` is a valid out-pointer.
        if unsafe { libc::statvfs(path.as_ptr(), &mut s) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let unit = s.f_frsize as u64;
        let dev = std::fs::metadata(&self.root)?.dev();
        Ok(FsSpace {
            total_bytes: s.f_blocks as u64 * unit,
            free_bytes: s.f_bfree as u64 * unit,
            avail_bytes: s.f_bavail as u64 * unit,
            total_inodes: s.f_files as u64,
            free_inodes: s.f_ffree as u64,
            fs_id: fs_id(dev, s.f_fsid as u64),
        })
    }

    fn write_vectored_at(&self, h: Handle, off: u64, bufs: &[&[u8]]) -> Result<(), StorageError> {
        self.write_checked(h, off, bufs)
    }

    fn verifier(&self) -> u64 {
        self.verifier
    }
}
