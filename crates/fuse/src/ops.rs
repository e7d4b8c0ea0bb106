//! The file system operations, as async functions on the mount's shared state. Each
//! returns what the FUSE reply needs or an errno; `fs.rs` runs them as tasks.
//!
//! Whose credentials: namespace and attribute changes act as the calling process
//! (servers record the owner and enforce chmod/chown/utimes rules). Data I/O,
//! truncation and bookkeeping act as the mount itself, because the kernel has
//! already checked the caller's access (`default_permissions`) and POSIX lets a
//! writer do what the servers reserve for owners: set times to "now", clear
//! set-user-ID on write, truncate. Those few cases are retried as the mount only
//! when the request can only have come from such a kernel-approved path.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fuser::{Errno, FileAttr, FileType, FopenFlags, INodeNo, RenameFlags, TimeOrNow};
use pvfs_client::{Attr, Client, LayoutSpec, NodeKind, ObjKind, Remains, RenameMode, SetAttr};
use pvfs_proto::{Creds, Handle};
use pvfs_transport::{BufPool, PooledBuf};

use crate::attr::{self, file_attr, ino_of, may_access, placeholder, timespec};
use crate::creds::CredCache;
use crate::errors::{errno, OpResult};
use crate::options::MountOptions;
use crate::readahead::{self, Begun, Budget, ReadAhead, ReadData, Wait, SKEW};
use crate::state::{Disposal, OpenFile, Tables};
use crate::writebehind;
use crate::xattr::{self, LAYOUT_XATTR};

/// Preferred I/O size reported by `statfs`.
pub(crate) const STATFS_BSIZE: u32 = 1 << 20;
/// Directory entries whose attributes one readdirplus step fetches at once.
const ATTR_CHUNK: usize = 2048;
/// Most entries one plain readdir step prepares (the kernel takes what fits).
const NAMES_PER_STEP: usize = 4096;
/// Largest read served in one request (the kernel never asks for more).
const MAX_READ: u32 = 16 << 20;
/// Read-ahead chunks fetched ahead of one reader (each one `--max-request`): two
/// keep one reader as fast as with more, which only take CPU from other readers
/// (`docs/benchmarks.md`).
const READ_AHEAD_WINDOW: usize = 2;
/// Read-ahead chunks the whole mount holds at most (with 4 MiB requests, 128 MiB).
const READ_AHEAD_BUDGET: usize = 32;

const S_IFMT: u32 = libc::S_IFMT;
const S_IFREG: u32 = libc::S_IFREG;
const S_ISUID: u32 = libc::S_ISUID;
const S_ISGID: u32 = libc::S_ISGID;
const S_IXGRP: u32 = libc::S_IXGRP;

/// Whether the kernel should serve an open of a file of mode `mode` and `size`
/// bytes with `flags` without its page cache (direct I/O; reads then get the
/// mount's read-ahead). `direct_mmap`: the kernel can map such files shared
/// (`FUSE_DIRECT_IO_ALLOW_MMAP`, Linux 6.6); without it only write-only opens,
/// which cannot be mapped for reading, may go direct.
///
/// - `--direct-io`: always.
/// - Opened for writing: direct. Writes reach the servers before they return either
///   way (write-through), so filling cache pages on the way is pure cost (fresh
///   pages and one more copy of every byte); the kernel drops what other opens had
///   cached of the range written. Set-user-ID and set-group-ID files stay cached:
///   there the kernel clears those bits before a write.
/// - Opened read-only: the page cache for files up to `page_cache_max` bytes (small
///   files, read in small pieces by compilers and scripts, gain from the kernel's
///   read-ahead and cache), direct for larger ones (streams, which the page cache
///   slows down).
pub(crate) fn serves_direct(
    opts: &MountOptions,
    direct_mmap: bool,
    flags: i32,
    mode: u32,
    size: u64,
) -> bool {
    if opts.direct_io {
        return true;
    }
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => !privileged(mode),
        libc::O_RDONLY => direct_mmap && size > opts.page_cache_max,
        _ => direct_mmap && !privileged(mode),
    }
}

/// Whether `mode` has bits a write by someone else than root must clear: set-user-ID,
/// and set-group-ID together with group execute (as Linux's `should_remove_suid`).
pub(crate) fn privileged(mode: u32) -> bool {
    mode & S_ISUID != 0 || mode & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP
}

/// What `setattr` asks for.
pub(crate) struct SetReq {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub fh: Option<u64>,
}

/// One entry of a directory listing step.
pub(crate) struct DirItem {
    pub ino: INodeNo,
    /// Offset of the entry after this one.
    pub next: u64,
    pub kind: FileType,
    pub name: String,
    /// For readdirplus: attributes and how long the kernel may keep them.
    pub attr: Option<(FileAttr, Duration)>,
}

/// How [`Inner::read_begin`] left a read.
pub(crate) enum ReadStart {
    /// Answered (or failed) at once.
    Done(OpResult<ReadData>),
    /// To finish with [`Inner::read_finish`] (these are its arguments).
    Wait(Arc<OpenFile>, Option<Wait>, u64, usize),
}

/// Totals for `statfs`.
pub(crate) struct FsTotals {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
}

/// Block size `statfs` counts in.
pub(crate) const STATFS_FRSIZE: u64 = 4096;

/// The mount's shared state.
pub(crate) struct Inner {
    /// The client, acting as the mount's own user.
    pub client: Client,
    /// The root directory's handle (inode 1).
    pub root: Handle,
    pub opts: MountOptions,
    pub tables: Arc<Tables>,
    pub creds: CredCache,
    bufs: BufPool,
    /// Read-ahead chunks the mount may still fetch.
    budget: Budget,
    /// Background writes the mount may still start (`--write-behind`).
    write_budget: Arc<tokio::sync::Semaphore>,
    /// The kernel maps files it serves without the page cache (set at init).
    pub direct_mmap: AtomicBool,
    /// Deletions of unlinked objects running in the background (a bound on them).
    removals: Arc<tokio::sync::Semaphore>,
    /// Sends the kernel invalidations (set once the session exists): a granted lock
    /// drops the file's cached pages (`locks.rs`).
    pub notifier: std::sync::OnceLock<fuser::Notifier>,
    /// Servers whose change feed this mount follows now (`feed.rs`): with all of
    /// them, the kernel may cache for `cache_timeout`.
    pub feeds_live: std::sync::atomic::AtomicUsize,
}

/// Most deletions of unlinked objects running in the background at once; an unlink
/// beyond that waits (backpressure on `rm -rf`).
const REMOVALS: u32 = 256;

impl Inner {
    pub(crate) fn new(client: Client, opts: MountOptions) -> Inner {
        Inner {
            root: client.root(),
            client,
            // Room for a largest request at the read skew. Huge pages: read-ahead
            // fills these whole and the FUSE device copies answers out of them
            // (write-behind data and direct reads, which fill them in part, take
            // at most a huge page more each, within the same budgets).
            bufs: BufPool::with_huge_pages(opts.max_request as usize + 4096, 16),
            budget: Budget::new(READ_AHEAD_BUDGET),
            write_budget: Arc::new(tokio::sync::Semaphore::new(writebehind::BUDGET)),
            direct_mmap: AtomicBool::new(false),
            opts,
            tables: Arc::new(Tables::new()),
            creds: CredCache::default(),
            removals: Arc::new(tokio::sync::Semaphore::new(REMOVALS as usize)),
            notifier: std::sync::OnceLock::new(),
            feeds_live: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The number of servers in the file system.
    pub(crate) fn servers(&self) -> usize {
        self.client.config().servers.len()
    }

    /// Whether every server's changes reach this mount (`feed.rs`).
    pub(crate) fn coherent(&self) -> bool {
        self.opts.cache_timeout > Duration::ZERO
            && self.feeds_live.load(Ordering::Acquire) == self.servers()
    }

    /// How long the kernel may keep attributes answered now.
    pub(crate) fn attr_ttl(&self) -> Duration {
        if self.coherent() {
            self.opts.cache_timeout.max(self.opts.attr_timeout)
        } else {
            self.opts.attr_timeout
        }
    }

    /// How long the kernel may keep names answered now.
    pub(crate) fn entry_ttl(&self) -> Duration {
        if self.coherent() {
            self.opts.cache_timeout.max(self.opts.entry_timeout)
        } else {
            self.opts.entry_timeout
        }
    }

    /// The handle behind inode `ino`.
    pub(crate) fn handle(&self, ino: INodeNo) -> Handle {
        attr::handle_of(self.root, ino)
    }

    /// The kernel's view of `attr`.
    fn fattr(&self, attr: &Attr) -> FileAttr {
        let file = attr.kind() == ObjKind::File;
        if file {
            self.tables.note_size(attr.handle, attr.size);
        }
        let orphan = file && self.tables.is_orphan(attr.handle);
        let mut fa = file_attr(self.root, attr, orphan);
        if file {
            // What this mount wrote counts, arrived or not (`--write-behind`).
            if let Some(p) = self.tables.any_pending(attr.handle) {
                if p.end() > fa.size {
                    // The bytes on their way past the end will take space too.
                    fa.blocks += (p.end() - fa.size).div_ceil(512);
                    fa.size = p.end();
                }
            }
        }
        fa
    }

    /// The client acting as the caller.
    fn caller(&self, creds: &Creds) -> Client {
        self.client.with_creds(creds.clone())
    }

    /// Attributes of directory `dir`, from the recent cache or its servers (with its
    /// shards' times and link count, as `getattr` answers from the same cache).
    async fn dir_attr(&self, dir: Handle) -> OpResult<Attr> {
        if let Some(a) = self.tables.dir_attr(dir, self.attr_ttl()) {
            return Ok(a);
        }
        let attr = self.client.stat_handle(dir).await.map_err(errno)?;
        if attr.kind() != ObjKind::Dir {
            return Err(Errno::ENOTDIR);
        }
        self.tables.note_dir(&attr);
        Ok(attr)
    }

    /// Credentials and mode for a new object in `parent`: a set-group-ID directory
    /// gives its group to what is created in it, and its bit to new directories.
    fn inherit(creds: &Creds, parent: &Attr, mode: u32, is_dir: bool) -> (Creds, u32) {
        if parent.mode & S_ISGID == 0 {
            return (creds.clone(), mode);
        }
        let mut c = creds.clone();
        c.gid = parent.gid;
        (c, if is_dir { mode | S_ISGID } else { mode })
    }

    /// Deletes an object that lost its last name, unless it is open here. The
    /// deletion (object and datafiles) runs in the background: the name is already
    /// gone, durably, when the unlink is answered.
    async fn dispose(&self, handle: Handle) {
        if self.tables.unlinked(handle) != Disposal::RemoveNow {
            return;
        }
        let Ok(permit) = self.removals.clone().acquire_owned().await else {
            return;
        };
        let client = self.client.clone();
        let tables = self.tables.clone();
        tokio::spawn(async move {
            if let Err(e) = client.remove_object(handle).await {
                tracing::warn!("object {handle:#x} left behind (fsck removes it): {e}");
            }
            tables.removed(handle);
            tables.forget_layout(handle);
            drop(permit);
        });
    }

    /// Deletes the datafiles (and object) an unlink left, in the background: the
    /// name is gone already, so `unlink` need not wait for a second round of commits
    /// on the data servers. Bounded by the removals in flight (backpressure).
    async fn delete_later(&self, leftovers: pvfs_client::Leftovers) {
        let Ok(permit) = self.removals.clone().acquire_owned().await else {
            return;
        };
        let client = self.client.clone();
        tokio::spawn(async move {
            if let Err(e) = client.delete_leftovers(leftovers).await {
                tracing::warn!("an unlinked file's data left behind (fsck removes it): {e}");
            }
            drop(permit);
        });
    }

    /// Waits (up to `limit`) for background deletions, then deletes the objects of
    /// files unlinked while open that are still open (when the mount ends).
    pub(crate) async fn finish(&self, limit: Duration) {
        // Locks still held (files open on a detached mount) go with the mount.
        let _ = tokio::time::timeout(limit, self.client.release_all_locks()).await;
        let _ = tokio::time::timeout(limit, self.removals.acquire_many(REMOVALS)).await;
        let _ = tokio::time::timeout(limit, self.client.reaped()).await;
        let _ = tokio::time::timeout(limit, self.remove_orphans()).await;
    }

    async fn remove_orphans(&self) {
        for h in self.tables.orphans() {
            if let Err(e) = self.client.remove_object(h).await {
                tracing::warn!("unlinked open file {h:#x} left behind: {e}");
            }
        }
    }

    // ----- names and attributes ----------------------------------------------

    pub(crate) async fn lookup(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
    ) -> OpResult<FileAttr> {
        let name = lookup_name(name)?;
        let caller = self.caller(&creds);
        // A file seen before (the kernel asking again after its cache expired): ask
        // for the entry and the file's size at once.
        let known = self
            .tables
            .name(parent, name)
            .and_then(|h| self.tables.layout(h).map(|l| (h, l)));
        let attr = match known {
            Some((h, layout)) => caller.lookup_expecting(parent, name, h, &layout).await,
            None => caller.lookup(parent, name).await,
        }
        .map_err(errno)?;
        self.tables.note(&attr);
        self.tables
            .note_name(parent, name, attr.handle, attr.kind());
        Ok(self.fattr(&attr))
    }

    /// Whether `name` is surely not in `parent`, as this mount knows every name there
    /// (a name a lookup would refuse is left to it, for its error).
    pub(crate) fn surely_absent(&self, parent: Handle, name: &OsStr) -> bool {
        lookup_name(name).is_ok_and(|n| self.coherent() && self.tables.surely_absent(parent, n))
    }

    /// Attributes of a run of a listing's entries, as the kernel takes them: those
    /// this mount holds current ([`Inner::getattr_now`]'s sources) from memory, the
    /// others from their servers in one batch (kept for the lookups and stats that
    /// follow a listing).
    async fn entry_fattrs(
        &self,
        entries: &[pvfs_client::DirEntry],
    ) -> Vec<pvfs_client::Result<FileAttr>> {
        let handles: Vec<Handle> = entries.iter().map(|e| e.handle).collect();
        let held =
            self.tables
                .held_fattrs(self.root, &handles, self.attr_ttl(), self.file_attrs_held());
        let missing: Vec<pvfs_client::DirEntry> = entries
            .iter()
            .zip(&held)
            .filter(|(_, h)| h.is_none())
            .map(|(e, _)| e.clone())
            .collect();
        let fetched = if missing.is_empty() {
            Vec::new()
        } else {
            self.client.entry_attrs(missing, true).await
        };
        for a in fetched.iter().filter_map(|(_, r)| r.as_ref().ok()) {
            self.tables.note(a);
        }
        let mut fetched = fetched.into_iter().map(|(_, r)| r.map(|a| self.fattr(&a)));
        held.into_iter()
            .map(|h| match h {
                Some(fa) => Ok(fa),
                None => fetched.next().unwrap_or_else(|| {
                    Err(pvfs_client::Error::new(
                        pvfs_client::Errno::EIO,
                        "an entry's attributes did not come",
                    ))
                }),
            })
            .collect()
    }

    /// The attributes of `handle` this mount holds current, if any: a directory's
    /// seen within the attribute time, a file's whose every datafile it knows
    /// (while the change feeds run).
    fn attr_now(&self, handle: Handle) -> Option<Attr> {
        if let Some(dir) = self.tables.dir_attr(handle, self.attr_ttl()) {
            return Some(dir);
        }
        if !self.file_attrs_held() {
            return None;
        }
        self.tables.known_file_attr(handle)
    }

    /// How the kernel may keep a listing of directory `dir` opened now. Only a
    /// directory this mount knows completely (it made it, and every change in it
    /// since was its own), while the change feeds run, is kept (`FOPEN_CACHE_DIR`,
    /// across opens): the kernel made a name for each of its entries as this mount
    /// created them, so a kept listing, which carries no attributes, sends no
    /// lookups after it; the kernel drops it at its own changes of the directory,
    /// and the feeds at another client's. Any other listing is read afresh, with
    /// the attributes, so an `ls -l` after an `ls` of a directory made elsewhere
    /// does not look every name up alone (docs/fuse.md, "Caching").
    pub(crate) fn dir_open_flags(&self, dir: Handle) -> FopenFlags {
        if self.coherent() && self.tables.knows_entries(dir) {
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    /// Whether the files' attributes this mount keeps are current: while every change
    /// feed runs, and not with `--write-behind` (bytes on their way change sizes).
    fn file_attrs_held(&self) -> bool {
        !self.opts.write_behind && self.coherent()
    }

    /// The value of ACL attribute `name` of `handle` from the attributes this mount
    /// holds current (they carry the ACLs), without waiting; None for another name
    /// or attributes not held.
    pub(crate) fn acl_xattr_now(&self, handle: Handle, name: &str) -> Option<OpResult<Vec<u8>>> {
        if name != pvfs_proto::acl::XATTR_ACCESS && name != pvfs_proto::acl::XATTR_DEFAULT {
            return None;
        }
        self.tables
            .with_held_attr(handle, self.attr_ttl(), self.file_attrs_held(), |attr| {
                let entries = pvfs_proto::acl::named(attr.acl.as_deref(), name);
                if entries.is_empty() {
                    Err(Errno::ENODATA)
                } else {
                    Ok(pvfs_proto::acl::to_xattr(entries))
                }
            })
    }

    /// A directory's attributes from the recent cache, without waiting (on a FUSE
    /// thread); None when the servers must be asked ([`Inner::getattr`]).
    pub(crate) fn getattr_now(&self, handle: Handle) -> Option<FileAttr> {
        self.attr_now(handle).map(|a| self.fattr(&a))
    }

    pub(crate) async fn getattr(&self, handle: Handle) -> OpResult<FileAttr> {
        // The kernel asks again for a directory's attributes after every create or
        // remove in it (to check permissions): what was seen within the attribute
        // timeout answers, with the changes this mount made patched in
        // (`Tables::dir_changed`), as the kernel's own cache would.
        if let Some(dir) = self.tables.dir_attr(handle, self.attr_ttl()) {
            return Ok(self.fattr(&dir));
        }
        let attr = self.stat(handle).await?;
        Ok(self.fattr(&attr))
    }

    /// Current attributes with a file's size and mtime: one round trip when the
    /// file's layout is known (metadata and data servers asked at once).
    async fn stat(&self, handle: Handle) -> OpResult<Attr> {
        let attr = match self.tables.layout(handle) {
            Some(layout) => self.client.stat_file(handle, &layout).await,
            None => self.client.stat_handle(handle).await,
        }
        .map_err(errno)?;
        self.tables.note(&attr);
        Ok(attr)
    }

    pub(crate) async fn setattr(
        &self,
        creds: Creds,
        handle: Handle,
        req: SetReq,
    ) -> OpResult<FileAttr> {
        if req.size.is_some() {
            // The datafiles change: what is known of them goes. Other changes are
            // the metafile's alone: its new attributes are noted below, and with
            // the datafiles' stats kept a `stat` after `chmod` or `utimes` (as
            // `rsync` and `tar` do for every file) needs no server.
            self.tables.forget_file_attr(handle);
        }
        if let Some(size) = req.size {
            // Writes still on their way go first.
            if let Some(p) = self.tables.any_pending(handle) {
                p.drain().await;
            }
            let open = req
                .fh
                .and_then(|fh| self.tables.file(fh))
                .filter(|of| of.handle == handle);
            let file = match open {
                Some(of) => of.file.clone(),
                None => self.client.open_handle(handle).await.map_err(errno)?,
            };
            // The kernel checked write access; the truncate also stamps the mtime.
            let truncated = file.truncate(size).await;
            self.tables.note_write(handle);
            truncated.map_err(errno)?;
            if let Some(p) = self.tables.any_pending(handle) {
                p.truncated(size);
            }
        }
        let mut set = SetAttr {
            mode: req.mode.map(|m| m & 0o7777),
            uid: req.uid,
            gid: req.gid,
            atime: req.atime.map(timespec),
            mtime: req.mtime.map(timespec),
            // Explicit times: a "now" change the kernel approved for a writer who is
            // not the owner is retried below on the kernel's word.
            now: false,
        };
        let times_now = matches!(req.atime, None | Some(TimeOrNow::Now))
            && matches!(req.mtime, None | Some(TimeOrNow::Now));
        if req.size.is_some() && times_now {
            // "now" times that come with a truncate are the truncate's own.
            set.atime = None;
            set.mtime = None;
        }
        if set == SetAttr::default() {
            return self.getattr(handle).await;
        }
        let current = match self.attr_now(handle) {
            Some(held) => held,
            None => self.stat(handle).await?,
        };
        if set.mtime.is_none() && current.kind() == ObjKind::File {
            // Changing the metafile makes its mtime the one that counts (see the
            // client's merge_data_mtime): carry the current one over.
            set.mtime = Some(current.mtime);
        }
        // A file whose datafiles this mount knows (it wrote them, and the change
        // feeds say nobody else did) needs no data server for the size the answer
        // carries: one round trip instead of two (`tar` and `rsync` set the mode,
        // owner and times of every file they write).
        let lite = current.kind() == ObjKind::File
            && !self.opts.write_behind
            && self.coherent()
            && self.tables.known_file_attr(handle).is_some();
        let set_with = async |c: pvfs_client::Client, set: SetAttr| {
            if lite {
                c.setattr_lite(handle, set).await
            } else {
                c.setattr_handle(handle, set).await
            }
        };
        let attr = match set_with(self.caller(&creds), set.clone()).await {
            Ok(a) => a,
            Err(e)
                if e.errno == pvfs_client::Errno::EPERM
                    && creds.uid != 0
                    && kernel_approved(&req, &current, &creds) =>
            {
                set_with(self.client.clone(), set).await.map_err(errno)?
            }
            Err(e) => return Err(errno(e)),
        };
        self.tables.note(&attr);
        let attr = match (lite, self.tables.known_file_attr(handle)) {
            (false, _) => attr,
            (true, Some(known)) => known,
            // The datafiles' stats went meanwhile (another client wrote): asked.
            (true, None) => {
                let mut attr = attr;
                self.client.complete(&mut attr).await.map_err(errno)?;
                self.tables.note(&attr);
                attr
            }
        };
        self.tables.set_privileged(handle, privileged(attr.mode));
        Ok(self.fattr(&attr))
    }

    pub(crate) async fn readlink(&self, handle: Handle) -> OpResult<Vec<u8>> {
        let attr = self.client.getattr(handle).await.map_err(errno)?;
        match attr.detail {
            pvfs_proto::ObjDetail::Symlink { target } => Ok(target.into_bytes()),
            _ => Err(Errno::EINVAL),
        }
    }

    // ----- creating ----------------------------------------------------------

    pub(crate) async fn mknod(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
        (mode, umask): (u32, u32),
        rdev: u32,
    ) -> OpResult<FileAttr> {
        let name = new_name(name)?;
        let pattr = self.dir_attr(parent).await?;
        if let Some(kind) = NodeKind::from_mode(mode) {
            // FIFOs, sockets and device nodes: metadata only (the kernel checked
            // CAP_MKNOD for devices; the server checks again).
            let (c, mode) = Self::inherit(&creds, &pattr, mode & 0o7777, false);
            let attr = self
                .caller(&c)
                .with_umask(umask)
                .mknod_under(&pattr, name, kind, mode, u64::from(rdev))
                .await
                .map_err(|e| self.failed_in(parent, e))?;
            self.tables
                .name_made(parent, name, attr.handle, attr.kind());
            self.tables
                .note_name(parent, name, attr.handle, attr.kind());
            self.tables.dir_changed(parent, attr.ctime, 0);
            return Ok(self.fattr(&attr));
        }
        if mode & S_IFMT != S_IFREG && mode & S_IFMT != 0 {
            return Err(Errno::EINVAL);
        }
        let (c, mode) = Self::inherit(&creds, &pattr, mode & 0o7777, false);
        let file = self
            .caller(&c)
            .with_umask(umask)
            .create_under(&pattr, name, mode, LayoutSpec::default())
            .await
            .map_err(|e| self.failed_in(parent, e))?;
        self.tables.note(file.attr());
        self.tables.fresh_datafiles(file.attr());
        self.tables
            .name_made(parent, name, file.handle(), ObjKind::File);
        self.tables
            .note_name(parent, name, file.handle(), ObjKind::File);
        self.tables.dir_changed(parent, file.attr().ctime, 0);
        Ok(self.fattr(file.attr()))
    }

    pub(crate) async fn mkdir(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
        (mode, umask): (u32, u32),
    ) -> OpResult<FileAttr> {
        let name = new_name(name)?;
        let pattr = self.dir_attr(parent).await?;
        let (c, mode) = Self::inherit(&creds, &pattr, mode & 0o7777, true);
        let attr = self
            .caller(&c)
            .with_umask(umask)
            .mkdir_under(&pattr, name, mode)
            .await
            .map_err(|e| self.failed_in(parent, e))?;
        self.tables.note_dir(&attr);
        self.tables.dir_changed(parent, attr.ctime, 1);
        self.tables
            .name_made(parent, name, attr.handle, ObjKind::Dir);
        if self.coherent() {
            self.tables.dir_made(attr.handle);
        }
        Ok(self.fattr(&attr))
    }

    pub(crate) async fn symlink(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
        target: &Path,
    ) -> OpResult<FileAttr> {
        let name = new_name(name)?;
        let target = target.to_str().ok_or(Errno::EILSEQ)?;
        if target.len() >= pvfs_proto::types::PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let pattr = self.dir_attr(parent).await?;
        let (c, _) = Self::inherit(&creds, &pattr, 0, false);
        let attr = self
            .caller(&c)
            .symlink_at(parent, name, target)
            .await
            .map_err(|e| self.failed_in(parent, e))?;
        self.tables
            .name_made(parent, name, attr.handle, ObjKind::Symlink);
        self.tables
            .note_name(parent, name, attr.handle, ObjKind::Symlink);
        self.tables.dir_changed(parent, attr.ctime, 0);
        Ok(self.fattr(&attr))
    }

    pub(crate) async fn create(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
        (mode, umask): (u32, u32),
        flags: i32,
    ) -> OpResult<(FileAttr, u64, FopenFlags)> {
        let name = new_name(name)?;
        let pattr = self.dir_attr(parent).await?;
        let (c, mode) = Self::inherit(&creds, &pattr, mode & 0o7777, false);
        match self
            .caller(&c)
            .with_umask(umask)
            .create_under(&pattr, name, mode, LayoutSpec::default())
            .await
        {
            Ok(file) => {
                let handle = file.handle();
                self.tables.note(file.attr());
                self.tables.fresh_datafiles(file.attr());
                self.tables.name_made(parent, name, handle, ObjKind::File);
                self.tables.note_name(parent, name, handle, ObjKind::File);
                self.tables.dir_changed(parent, file.attr().ctime, 0);
                let fattr = self.fattr(file.attr());
                // Data I/O acts as the mount (see the module documentation).
                let file = self
                    .client
                    .file_from_attr(file.attr().clone())
                    .map_err(errno)?;
                if !self.tables.begin_open(handle) {
                    return Err(Errno::ENOENT);
                }
                let (fh, how) = self.add_open(handle, file, flags);
                Ok((fattr, fh, how))
            }
            Err(e) if e.errno == pvfs_client::Errno::EEXIST && flags & libc::O_EXCL == 0 => {
                // Someone created it since the kernel looked: open it as open(2) would.
                self.tables.dir_unknown(parent);
                let attr = self
                    .caller(&creds)
                    .lookup(parent, name)
                    .await
                    .map_err(errno)?;
                match attr.kind() {
                    ObjKind::Dir => return Err(Errno::EISDIR),
                    ObjKind::Symlink | ObjKind::Node(_) => return Err(Errno::EEXIST),
                    ObjKind::File => {}
                }
                let mut want = match flags & libc::O_ACCMODE {
                    libc::O_RDONLY => attr::MAY_READ,
                    libc::O_WRONLY => attr::MAY_WRITE,
                    _ => attr::MAY_READ | attr::MAY_WRITE,
                };
                if flags & libc::O_TRUNC != 0 {
                    want |= attr::MAY_WRITE;
                }
                if !may_access(&attr, &creds, want) {
                    return Err(Errno::EACCES);
                }
                let (fh, how) = self.open(attr.handle, flags).await?;
                match self.getattr(attr.handle).await {
                    Ok(fattr) => Ok((fattr, fh, how)),
                    Err(e) => {
                        self.release(fh).await;
                        Err(e)
                    }
                }
            }
            Err(e) => Err(self.failed_in(parent, e)),
        }
    }

    // ----- removing and renaming ---------------------------------------------

    pub(crate) async fn unlink(&self, creds: Creds, parent: Handle, name: &OsStr) -> OpResult<()> {
        let name = lookup_name(name)?;
        let caller = self.caller(&creds);
        // The usual case, a file not open here whose object the name still means:
        // entry and object go in one commit.
        if let Some(h) = self.tables.name(parent, name) {
            if self.tables.try_begin_remove(h) {
                let done = caller.unlink_at_expect(parent, name, h).await;
                self.tables.removed(h);
                match done {
                    Ok((gone, leftovers)) => {
                        self.tables.forget_name(parent, name);
                        self.tables.dir_changed(parent, gone.changed, 0);
                        self.tables.name_gone(parent, name);
                        if matches!(gone.left, Remains::Deleted(_)) {
                            self.tables.forget_layout(h);
                        } else {
                            // Another link is left: its count and ctime changed.
                            self.tables.forget_file_attr(h);
                        }
                        self.delete_later(leftovers).await;
                        return Ok(());
                    }
                    // The name means another object now: the general way.
                    Err(e) if e.errno == pvfs_client::Errno::ESTALE => {}
                    Err(e) => {
                        self.tables.forget_name(parent, name);
                        return Err(self.failed_in(parent, e));
                    }
                }
            }
        }
        // Otherwise remove the name; an object left without a name is kept, and
        // deleted unless open.
        let gone = caller
            .unlink_at(parent, name, true)
            .await
            .map_err(|e| self.failed_in(parent, e))?;
        self.tables.name_gone(parent, name);
        self.tables.forget_name(parent, name);
        self.tables.dir_changed(parent, gone.changed, 0);
        self.tables.forget_file_attr(gone.entry.handle);
        if gone.left == Remains::Kept {
            self.dispose(gone.entry.handle).await;
        }
        Ok(())
    }

    pub(crate) async fn rmdir(&self, creds: Creds, parent: Handle, name: &OsStr) -> OpResult<()> {
        let name = lookup_name(name)?;
        let done = self.caller(&creds).rmdir_at(parent, name).await;
        // Its time and link count changed (or may have): asked again when needed.
        self.tables.forget_dir(parent);
        done.map_err(|e| self.failed_in(parent, e))?;
        self.tables.name_gone(parent, name);
        Ok(())
    }

    pub(crate) async fn link(
        &self,
        creds: Creds,
        handle: Handle,
        newparent: Handle,
        newname: &OsStr,
    ) -> OpResult<FileAttr> {
        let name = new_name(newname)?;
        let (attr, changed) = self
            .caller(&creds)
            .link_at(handle, newparent, name)
            .await
            .map_err(|e| self.failed_in(newparent, e))?;
        self.tables
            .name_made(newparent, name, attr.handle, attr.kind());
        self.tables.note(&attr);
        self.tables
            .note_name(newparent, name, attr.handle, attr.kind());
        self.tables.dir_changed(newparent, changed, 0);
        Ok(self.fattr(&attr))
    }

    pub(crate) async fn rename(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
        newparent: Handle,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> OpResult<()> {
        let mode = if flags.is_empty() {
            RenameMode::Replace
        } else if flags == RenameFlags::RENAME_NOREPLACE {
            RenameMode::NoReplace
        } else if flags == RenameFlags::RENAME_EXCHANGE {
            RenameMode::Exchange
        } else {
            // RENAME_WHITEOUT (overlay file systems) and combinations.
            return Err(Errno::EINVAL);
        };
        let name = lookup_name(name)?;
        let newname = new_name(newname)?;
        // A file the rename replaces loses a link: what is held of it goes. (The
        // servers leave a moved object's attributes as they are.)
        if mode == RenameMode::Replace {
            if let Some(h) = self.tables.name(newparent, newname) {
                self.tables.forget_file_attr(h);
            }
        }
        let renamed = self
            .caller(&creds)
            .rename_at_keep(parent, name, newparent, newname, mode)
            .await;
        // Times and link counts of both directories changed (or may have).
        self.tables.forget_dir(parent);
        self.tables.forget_dir(newparent);
        let replaced = renamed.map_err(|e| {
            self.tables.dir_unknown(parent);
            self.failed_in(newparent, e)
        })?;
        self.tables.name_moved(
            (parent, name),
            (newparent, newname),
            mode == RenameMode::Exchange,
        );
        self.tables.rename_name(
            (parent, name),
            (newparent, newname),
            mode == RenameMode::Exchange,
        );
        if let Some((old, left)) = replaced {
            if old.kind == ObjKind::Dir {
                self.tables.forget_dir(old.handle);
            }
            if left == Remains::Kept {
                self.dispose(old.handle).await;
            }
        }
        Ok(())
    }

    // ----- open files --------------------------------------------------------

    /// Opens `handle` (the kernel checked access); returns a new file handle and
    /// the file's mode bits.
    /// Opens file `handle` (registered by the caller): a new file handle, and how
    /// the kernel is to serve it.
    fn add_open(&self, handle: Handle, file: pvfs_client::File, flags: i32) -> (u64, FopenFlags) {
        let attr = file.attr();
        // Opening asks for no size: the one the kernel was told last (it looked
        // the file up just before) tells a stream from a small file.
        let size = self.tables.size(handle).unwrap_or(attr.size);
        let direct_mmap = self.direct_mmap.load(Ordering::Relaxed);
        if !serves_direct(&self.opts, direct_mmap, flags, attr.mode, size) {
            let fh = self.tables.add_file(OpenFile {
                handle,
                file,
                stream: None,
            });
            // While other clients' changes reach the mount, the pages the kernel
            // holds are current: the feeds drop those another client changed.
            let keep = if self.coherent() {
                FopenFlags::FOPEN_KEEP_CACHE
            } else {
                FopenFlags::empty()
            };
            return (fh, keep);
        }
        let stream = (flags & libc::O_ACCMODE != libc::O_WRONLY).then(|| {
            ReadAhead::new(
                self.opts.max_request,
                READ_AHEAD_WINDOW,
                size,
                self.tables.writes(handle),
            )
        });
        let fh = self.tables.add_file(OpenFile {
            handle,
            file,
            stream,
        });
        (fh, FopenFlags::FOPEN_DIRECT_IO)
    }

    pub(crate) async fn open(&self, handle: Handle, flags: i32) -> OpResult<(u64, FopenFlags)> {
        if !self.tables.begin_open(handle) {
            return Err(Errno::ENOENT);
        }
        let opened = async {
            let file = self.client.open_handle(handle).await?;
            if flags & libc::O_TRUNC != 0 {
                if let Some(p) = self.tables.any_pending(handle) {
                    p.drain().await;
                }
                self.tables.forget_file_attr(handle);
                file.truncate(0).await?;
                self.tables.note_write(handle);
                self.tables.note_size(handle, 0);
                if let Some(p) = self.tables.any_pending(handle) {
                    p.truncated(0);
                }
            }
            Ok::<_, pvfs_client::Error>(file)
        }
        .await;
        match opened {
            Ok(file) => Ok(self.opened(handle, file, flags)),
            Err(e) => {
                if self.tables.end_open(handle) {
                    self.remove_orphan(handle).await;
                }
                Err(errno(e))
            }
        }
    }

    /// The errno of a namespace change in `dir` that failed: `dir`'s names are no
    /// longer known completely here (the failure may mean another client changed
    /// them, or left a step half done).
    fn failed_in(&self, dir: Handle, e: pvfs_client::Error) -> Errno {
        self.tables.dir_unknown(dir);
        errno(e)
    }

    /// Opens `handle` without waiting (on a FUSE thread) when no server need be
    /// asked: while the change feeds run, the file's attributes kept are current.
    /// None when it must go the general way ([`Inner::open`]).
    pub(crate) fn open_now(
        &self,
        handle: Handle,
        flags: i32,
    ) -> Option<OpResult<(u64, FopenFlags)>> {
        if flags & libc::O_TRUNC != 0 || !self.coherent() {
            return None;
        }
        let attr = self.tables.file_attr(handle)?;
        let file = self.client.file_from_attr(attr).ok()?;
        if !self.tables.begin_open(handle) {
            return Some(Err(Errno::ENOENT));
        }
        Some(Ok(self.opened(handle, file, flags)))
    }

    /// Registers a file just opened: a new file handle, and how the kernel serves it.
    fn opened(&self, handle: Handle, file: pvfs_client::File, flags: i32) -> (u64, FopenFlags) {
        self.tables.note(file.attr());
        self.tables
            .set_privileged(handle, privileged(file.attr().mode));
        self.add_open(handle, file, flags)
    }

    /// Releases file handle `fh` without waiting (on a FUSE thread) when that takes no
    /// server: no background writes, no locks taken through it or by `owner`, not a
    /// file unlinked while open. None when it must go the general way
    /// ([`Inner::release`]); otherwise the handle of an object an unlink that came
    /// in between left for this close to delete ([`Inner::remove_orphan`]).
    pub(crate) fn release_now(&self, fh: u64, owner: Option<u64>) -> Option<Option<Handle>> {
        if self.opts.write_behind || self.tables.has_lock_owners(fh) {
            return None;
        }
        let handle = self.tables.file(fh)?.handle;
        if self.tables.is_orphan(handle)
            || owner.is_some_and(|o| self.client.may_hold_locks(handle, o))
        {
            return None;
        }
        let of = self.tables.remove_file(fh)?;
        Some(self.tables.end_open(of.handle).then_some(of.handle))
    }

    /// Deletes an object whose last name went while it was open, at its last close.
    pub(crate) async fn remove_orphan(&self, handle: Handle) {
        if let Err(e) = self.client.remove_object(handle).await {
            tracing::warn!("unlinked file {handle:#x} left behind (fsck removes it): {e}");
        }
        self.tables.forget_layout(handle);
    }

    /// Begins a read without waiting (on a FUSE thread): data already fetched
    /// ahead answers at once, anything else goes on in [`Inner::read_finish`];
    /// read-ahead fetches start on `rt`.
    pub(crate) fn read_begin(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        rt: &tokio::runtime::Handle,
    ) -> ReadStart {
        let Some(of) = self.tables.file(fh) else {
            return ReadStart::Done(Err(Errno::EBADF));
        };
        let size = size.min(MAX_READ) as usize;
        if self.tables.busy_pending(of.handle).is_some() {
            // Writes of this mount still on their way: the read waits for them.
            return ReadStart::Wait(of, None, offset, size);
        }
        let Some(stream) = &of.stream else {
            // A small file this mount wrote: its contents are here.
            if self.coherent() {
                let kept = self.tables.small.read(of.handle, offset, size, |data| {
                    let mut buf = self.bufs.get(SKEW + data.len());
                    buf[SKEW..].copy_from_slice(data);
                    ReadData::Owned(buf, SKEW..SKEW + data.len())
                });
                if let Some(data) = kept {
                    return ReadStart::Done(Ok(data));
                }
            }
            return ReadStart::Wait(of, None, offset, size);
        };
        let writes = self.tables.writes(of.handle);
        match stream.begin(&of.file, &self.bufs, &self.budget, rt, writes, offset, size) {
            Begun::Ready(data) => ReadStart::Done(Ok(data)),
            Begun::Wait(w) => ReadStart::Wait(of.clone(), Some(w), offset, size),
        }
    }

    /// Finishes a read [`Inner::read_begin`] could not answer at once.
    pub(crate) async fn read_finish(
        &self,
        of: Arc<OpenFile>,
        wait: Option<Wait>,
        offset: u64,
        size: usize,
    ) -> OpResult<ReadData> {
        if let Some(p) = self.tables.busy_pending(of.handle) {
            p.drain().await;
        }
        match (&of.stream, wait) {
            (Some(stream), Some(w)) => stream.finish(w, &of.file, &self.bufs).await,
            _ => {
                // The kernel asks for whole pages: a read reaching past the size it
                // was told (current while the feeds run) stops there, so the data
                // servers beyond are not asked whether the file goes on.
                let size = match self.tables.size(of.handle) {
                    Some(known) if self.coherent() && offset < known => {
                        size.min(usize::try_from(known - offset).unwrap_or(usize::MAX))
                    }
                    _ => size,
                };
                readahead::direct(&of.file, &self.bufs, offset, size).await
            }
        }
    }

    /// Writes for a process of user `uid`: to the servers before it answers, or with
    /// `--write-behind` in the background (`writebehind.rs`).
    pub(crate) async fn write(
        self: &Arc<Self>,
        fh: u64,
        offset: u64,
        data: PooledBuf,
        uid: u32,
    ) -> OpResult<u32> {
        let of = self.tables.file(fh).ok_or(Errno::EBADF)?;
        if !self.opts.write_behind {
            return self.write_through(&of, offset, &data, uid).await;
        }
        let n = u32::try_from(data.len()).map_err(|_| Errno::EIO)?;
        let pending = self.tables.pending(of.handle);
        if let Some(e) = pending.take_error() {
            return Err(e);
        }
        let end = offset.saturating_add(data.len() as u64);
        let id = pending.admit(offset, end).await;
        let Ok(permit) = self.write_budget.clone().acquire_owned().await else {
            pending.finish(id, Err(Errno::EIO));
            return Err(Errno::EIO);
        };
        self.tables.grow_size(of.handle, end);
        let inner = self.clone();
        tokio::spawn(async move {
            let written = inner.write_through(&of, offset, &data, uid).await;
            pending.finish(id, written.map(|_| ()));
            drop(permit);
        });
        Ok(n)
    }

    /// A write-through write straight from the request's buffer (no copy): the
    /// caller waits on the FUSE thread.
    pub(crate) async fn write_now(
        &self,
        fh: u64,
        offset: u64,
        data: &[u8],
        uid: u32,
    ) -> OpResult<u32> {
        let of = self.tables.file(fh).ok_or(Errno::EBADF)?;
        self.write_through(&of, offset, data, uid).await
    }

    /// A write that returns once the data servers have the data.
    async fn write_through(
        &self,
        of: &OpenFile,
        offset: u64,
        data: &[u8],
        uid: u32,
    ) -> OpResult<u32> {
        let followed = self.tables.small.begin_write(of.handle);
        let written = of.file.write_at_stats(offset, data).await;
        // Counted once the write is over, so read-ahead fetched before or during it
        // is not used after it (even if it failed part way).
        self.tables.note_write(of.handle);
        if followed {
            let whole = matches!(&written, Ok((n, _)) if *n == data.len());
            self.tables
                .small
                .end_write(of.handle, whole.then_some((offset, data)));
        }
        let (n, stats) = match written {
            Ok(w) => w,
            Err(e) => {
                self.tables.forget_file_attr(of.handle);
                return Err(errno(e));
            }
        };
        self.tables.note_datafile_stats(of.handle, &stats);
        self.tables
            .grow_size(of.handle, offset.saturating_add(n as u64));
        if uid != 0 && self.tables.take_privileged(of.handle) {
            // A write the kernel did not see coming (direct I/O): clear set-user-ID
            // and set-group-ID here, as POSIX wants.
            self.kill_privileges(of.handle).await;
        }
        u32::try_from(n).map_err(|_| Errno::EIO)
    }

    /// Clears set-user-ID and set-group-ID of `handle` (as the mount).
    async fn kill_privileges(&self, handle: Handle) {
        let cleared = async {
            let attr = self.stat(handle).await?;
            if !privileged(attr.mode) {
                return Ok(());
            }
            let mut mode = attr.mode & !S_ISUID;
            if mode & S_IXGRP != 0 {
                mode &= !S_ISGID;
            }
            let set = SetAttr {
                mode: Some(mode & 0o7777),
                mtime: Some(attr.mtime),
                ..SetAttr::default()
            };
            let attr = self
                .client
                .setattr_handle(handle, set)
                .await
                .map_err(errno)?;
            self.tables.note(&attr);
            Ok::<_, Errno>(())
        };
        if let Err(e) = cleared.await {
            // What is held of the file may be stale now.
            self.tables.forget_file_attr(handle);
            tracing::warn!("clearing set-user-ID of {handle:#x} after a write: {e:?}");
        }
    }

    /// A buffer for a write's data (copied out of the FUSE thread's buffer).
    pub(crate) fn write_buf(&self, data: &[u8]) -> PooledBuf {
        let mut buf = self.bufs.get(data.len());
        buf.copy_from_slice(data);
        buf
    }

    pub(crate) async fn fsync(&self, fh: u64) -> OpResult<()> {
        let of = self.tables.file(fh).ok_or(Errno::EBADF)?;
        self.settle(of.handle).await?;
        of.file.fsync().await.map_err(errno)
    }

    /// fsync of a directory: every metadata change acknowledged so far made stable.
    pub(crate) async fn fsyncdir(&self) -> OpResult<()> {
        self.client.sync_metadata().await.map_err(errno)
    }

    /// fallocate(2) on open file `fh` (the kernel checked it is open for writing and
    /// that the mode is one FUSE passes on; it drops its cached pages of a punched or
    /// zeroed range itself). Background writes go first, so a punch or zero is not
    /// overtaken by older data.
    pub(crate) async fn fallocate(
        &self,
        fh: u64,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> OpResult<()> {
        let of = self.tables.file(fh).ok_or(Errno::EBADF)?;
        let mode = u32::try_from(mode).map_err(|_| Errno::EOPNOTSUPP)?;
        if let Some(p) = self.tables.any_pending(of.handle) {
            p.drain().await;
        }
        self.tables.forget_file_attr(of.handle);
        let done = of.file.fallocate(mode, offset, len).await;
        // Punched and zeroed bytes change: read-ahead fetched before must not be used.
        self.tables.note_write(of.handle);
        done.map_err(errno)?;
        if mode & pvfs_client::falloc::KEEP_SIZE == 0 {
            self.tables.grow_size(of.handle, offset.saturating_add(len));
        }
        Ok(())
    }

    /// Waits for the background writes of `handle` (`--write-behind`) and reports a
    /// failure among them not reported yet.
    pub(crate) async fn settle(&self, handle: Handle) -> OpResult<()> {
        if !self.opts.write_behind {
            return Ok(());
        }
        let pending = self.tables.pending(handle);
        pending.drain().await;
        pending.take_error().map_or(Ok(()), Err)
    }

    /// A `close` of an open file (FUSE's flush): with `--write-behind` the file's
    /// background writes end here; the closing process's locks on it are released
    /// (POSIX: any close of the file by a process ends its locks).
    pub(crate) async fn flush(&self, fh: u64, ino: INodeNo, owner: u64) -> OpResult<()> {
        let of = self.tables.file(fh).ok_or(Errno::EBADF)?;
        self.settle(of.handle).await?;
        self.release_owner(ino, owner).await
    }

    pub(crate) async fn release(&self, fh: u64) {
        if let Some(of) = self.tables.file(fh) {
            if let Err(e) = self.settle(of.handle).await {
                tracing::warn!(
                    "a write of {:#x} failed after it was answered: {e:?}",
                    of.handle
                );
            }
        }
        if let Some(of) = self.tables.remove_file(fh) {
            if self.tables.end_open(of.handle) {
                self.remove_orphan(of.handle).await;
            }
        }
    }

    // ----- directories -------------------------------------------------------

    /// One step of a directory listing from `offset` (0: start, re-reading the
    /// directory; 1 and 2 are "." and ".."). With `plus`, entries carry attributes.
    pub(crate) async fn readdir(&self, fh: u64, offset: u64, plus: bool) -> OpResult<Vec<DirItem>> {
        let stream = self.tables.dir(fh).ok_or(Errno::EBADF)?;
        let mut st = stream.lock().await;
        let entries = match (&st.entries, offset) {
            (Some(e), o) if o > 0 => e.clone(),
            _ => {
                // A directory whose every entry this mount knows (it made it, and
                // every change in it since was its own) is listed without a server.
                let known = match self.coherent() {
                    true => self.tables.known_entries(st.handle),
                    false => None,
                };
                let list = match known {
                    Some(list) => list,
                    None => {
                        let list = self.client.readdir_at(st.handle).await.map_err(errno)?;
                        for e in &list {
                            self.tables.note_name(st.handle, &e.name, e.handle, e.kind);
                        }
                        list
                    }
                };
                let list = Arc::new(list);
                st.entries = Some(list.clone());
                st.attrs = None;
                list
            }
        };
        let dir = st.handle;
        let dir_ino = ino_of(self.root, dir);
        let parent_ino = self
            .tables
            .dir_attr(dir, Duration::MAX)
            .and_then(|a| match a.detail {
                pvfs_proto::ObjDetail::Dir { parent, .. } => Some(ino_of(self.root, parent)),
                _ => None,
            })
            .unwrap_or(dir_ino);
        let mut out = Vec::new();
        let mut k = offset;
        let dot = |name: &str, ino: INodeNo, next: u64| DirItem {
            ino,
            next,
            kind: FileType::Directory,
            name: name.to_string(),
            attr: plus.then(|| {
                let mut a = placeholder(
                    self.root,
                    &pvfs_client::DirEntry {
                        name: String::new(),
                        handle: dir,
                        kind: ObjKind::Dir,
                    },
                );
                a.ino = ino;
                (a, Duration::ZERO)
            }),
        };
        if k == 0 {
            out.push(dot(".", dir_ino, 1));
            k = 1;
        }
        if k == 1 {
            out.push(dot("..", parent_ino, 2));
            k = 2;
        }
        let start = usize::try_from(k - 2).unwrap_or(usize::MAX);
        if start >= entries.len() {
            return Ok(out);
        }
        if !plus {
            let end = entries.len().min(start + NAMES_PER_STEP);
            for (i, e) in entries[start..end].iter().enumerate() {
                out.push(DirItem {
                    ino: ino_of(self.root, e.handle),
                    next: (start + i) as u64 + 3,
                    kind: attr::file_type(e.kind),
                    name: e.name.clone(),
                    attr: None,
                });
            }
            return Ok(out);
        }
        let ttl = self.attr_ttl().min(self.entry_ttl());
        let mut start = start;
        let dots = out.len();
        // Attributes come a run of entries at a time; runs whose entries all
        // vanished meanwhile are skipped so an empty step still means the end.
        while out.len() == dots && start < entries.len() {
            let have =
                matches!(&st.attrs, Some((first, v)) if *first <= start && start < first + v.len());
            if !have {
                let end = entries.len().min(start + ATTR_CHUNK);
                st.attrs = Some((start, self.entry_fattrs(&entries[start..end]).await));
            }
            let Some((first, attrs)) = &st.attrs else {
                break;
            };
            for (j, r) in attrs.iter().enumerate().skip(start - first) {
                let i = first + j;
                let Some(e) = entries.get(i) else { break };
                let attr = match r {
                    Ok(fa) => (*fa, ttl),
                    // Removed since the listing was read: leave it out.
                    Err(err) if err.errno == pvfs_client::Errno::ENOENT => continue,
                    // Its server is down: list the name, let a stat find the error.
                    Err(_) => (placeholder(self.root, e), Duration::ZERO),
                };
                out.push(DirItem {
                    ino: ino_of(self.root, e.handle),
                    next: i as u64 + 3,
                    kind: attr::file_type(e.kind),
                    name: e.name.clone(),
                    attr: Some(attr),
                });
            }
            start = first + attrs.len();
        }
        Ok(out)
    }

    pub(crate) async fn statfs(&self) -> OpResult<FsTotals> {
        let fs = self.client.statfs().await;
        if fs.servers.iter().all(|s| s.stat.is_err()) {
            // Nobody answered; with some servers up, df shows what they hold.
            return Err(fs
                .servers
                .iter()
                .find_map(|s| s.stat.clone().err())
                .map_or(Errno::EIO, errno));
        }
        // Free handles: what the metadata servers' handle ranges leave, capped so
        // tools that multiply do not overflow.
        let capacity: u64 = self
            .client
            .config()
            .meta_servers()
            .iter()
            .map(|&i| {
                let r = self.client.config().servers[i].handles;
                r.last.saturating_sub(r.first)
            })
            .fold(0u64, u64::saturating_add)
            .min(1 << 48);
        let used = fs.objects.saturating_add(fs.datafiles);
        Ok(FsTotals {
            blocks: fs.total_bytes / STATFS_FRSIZE,
            bfree: fs.free_bytes / STATFS_FRSIZE,
            bavail: fs.avail_bytes / STATFS_FRSIZE,
            files: capacity.max(used),
            ffree: capacity.saturating_sub(used),
        })
    }

    // ----- extended attributes -----------------------------------------------

    pub(crate) async fn getxattr(
        &self,
        creds: Creds,
        handle: Handle,
        name: &OsStr,
    ) -> OpResult<Vec<u8>> {
        let name = name.to_str().ok_or(Errno::ENODATA)?;
        if name == LAYOUT_XATTR {
            let attr = self.client.getattr(handle).await.map_err(errno)?;
            return match &attr.detail {
                pvfs_proto::ObjDetail::File { layout } => {
                    Ok(xattr::format_file_layout(layout, self.client.config()).into_bytes())
                }
                pvfs_proto::ObjDetail::Dir {
                    default_layout: Some(spec),
                    ..
                } => Ok(xattr::format_spec(spec).into_bytes()),
                _ => Err(Errno::ENODATA),
            };
        }
        if !xattr::passed_on(name) {
            return Err(Errno::EOPNOTSUPP);
        }
        self.caller(&creds)
            .getxattr(handle, name)
            .await
            .map_err(errno)
    }

    pub(crate) async fn listxattr(&self, creds: Creds, handle: Handle) -> OpResult<Vec<u8>> {
        let names = self.caller(&creds).listxattr(handle).await.map_err(errno)?;
        let mut out = Vec::new();
        for n in names {
            out.extend_from_slice(n.as_bytes());
            out.push(0);
        }
        Ok(out)
    }

    pub(crate) async fn setxattr(
        &self,
        creds: Creds,
        handle: Handle,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> OpResult<()> {
        let name = name.to_str().ok_or(Errno::EOPNOTSUPP)?;
        if name == LAYOUT_XATTR {
            let spec = xattr::parse_spec(value).map_err(|why| {
                tracing::debug!("{LAYOUT_XATTR}: {why}");
                Errno::EINVAL
            })?;
            return self.set_layout(creds, handle, spec).await;
        }
        if !xattr::passed_on(name) {
            return Err(Errno::EOPNOTSUPP);
        }
        let flags = u32::try_from(flags).map_err(|_| Errno::EINVAL)?;
        let keep = self.mtime_to_keep(handle).await?;
        self.caller(&creds)
            .setxattr(handle, name, value, flags)
            .await
            .map_err(errno)?;
        self.restore_mtime(handle, keep).await;
        // An ACL may change the mode: asked again when needed.
        self.tables.forget_dir(handle);
        self.tables.forget_file_attr(handle);
        Ok(())
    }

    pub(crate) async fn removexattr(
        &self,
        creds: Creds,
        handle: Handle,
        name: &OsStr,
    ) -> OpResult<()> {
        let name = name.to_str().ok_or(Errno::ENODATA)?;
        if name == LAYOUT_XATTR {
            return self.set_layout(creds, handle, None).await;
        }
        if !xattr::passed_on(name) {
            return Err(Errno::EOPNOTSUPP);
        }
        let keep = self.mtime_to_keep(handle).await?;
        self.caller(&creds)
            .removexattr(handle, name)
            .await
            .map_err(errno)?;
        self.restore_mtime(handle, keep).await;
        self.tables.forget_dir(handle);
        self.tables.forget_file_attr(handle);
        Ok(())
    }

    /// Sets (or with `None` clears) a directory's default layout. A file's layout
    /// is fixed at create: setting the one it has is accepted, any other is EPERM.
    async fn set_layout(
        &self,
        creds: Creds,
        handle: Handle,
        spec: Option<LayoutSpec>,
    ) -> OpResult<()> {
        let attr = self.client.getattr(handle).await.map_err(errno)?;
        match &attr.detail {
            pvfs_proto::ObjDetail::Dir { .. } => {
                let attr = self
                    .caller(&creds)
                    .set_dir_layout_at(handle, spec)
                    .await
                    .map_err(errno)?;
                self.tables.note_dir(&attr);
                Ok(())
            }
            pvfs_proto::ObjDetail::File { layout } => {
                let same = spec.is_some_and(|s| {
                    s.stripe_size.is_none_or(|v| v == layout.stripe_size)
                        && s.stripe_count
                            .is_none_or(|c| c as usize == layout.datafiles.len())
                });
                if same {
                    Ok(())
                } else {
                    Err(Errno::EPERM)
                }
            }
            pvfs_proto::ObjDetail::Symlink { .. } | pvfs_proto::ObjDetail::Node { .. } => {
                Err(Errno::EPERM)
            }
        }
    }

    /// A regular file's current mtime, when an attribute change is about to make
    /// the metafile's mtime the one that counts.
    async fn mtime_to_keep(&self, handle: Handle) -> OpResult<Option<pvfs_client::Timespec>> {
        let attr = self.stat(handle).await?;
        Ok((attr.kind() == ObjKind::File).then_some(attr.mtime))
    }

    /// Puts back a file's mtime after an extended attribute change (bookkeeping,
    /// done as the mount).
    async fn restore_mtime(&self, handle: Handle, keep: Option<pvfs_client::Timespec>) {
        if let Some(mtime) = keep {
            let set = SetAttr {
                mtime: Some(mtime),
                ..SetAttr::default()
            };
            if let Err(e) = self.client.setattr_lite(handle, set).await {
                tracing::debug!("keeping the mtime of {handle:#x}: {e}");
            }
        }
    }
}

/// Whether a setattr the servers refused (EPERM) is one the kernel lets a
/// non-owner make: times set to "now" by a writer (the kernel checked write
/// access), or set-user-ID/set-group-ID cleared because someone wrote to the file.
fn kernel_approved(req: &SetReq, current: &Attr, creds: &Creds) -> bool {
    if req.uid.is_some() || req.gid.is_some() || current.uid == creds.uid {
        return false;
    }
    let now = |t: &Option<TimeOrNow>| matches!(t, None | Some(TimeOrNow::Now));
    let touch = (req.atime.is_some() || req.mtime.is_some()) && now(&req.atime) && now(&req.mtime);
    let kill_priv = req.mode.is_some_and(|m| {
        let (old, new) = (current.mode & 0o7777, m & 0o7777);
        // Only bits removed, and only set-user-ID and set-group-ID among them.
        old != new && new & !old == 0 && (old & !new) & !(S_ISUID | S_ISGID) == 0
    });
    match (
        req.mode.is_some(),
        req.atime.is_some() || req.mtime.is_some(),
    ) {
        (false, true) => touch,
        (true, false) => kill_priv,
        _ => false,
    }
}

/// A name to look up or remove (a name that is not UTF-8 cannot exist).
fn lookup_name(name: &OsStr) -> OpResult<&str> {
    if name.len() > pvfs_proto::types::NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    name.to_str().ok_or(Errno::ENOENT)
}

/// A name for a new entry (pvfs names are UTF-8).
fn new_name(name: &OsStr) -> OpResult<&str> {
    if name.len() > pvfs_proto::types::NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    name.to_str().ok_or(Errno::EILSEQ)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvfs_proto::layout::{Datafile, Layout};
    use pvfs_proto::{ObjDetail, Timespec};

    #[test]
    fn which_opens_bypass_the_page_cache() {
        let opts = MountOptions::default();
        let big = opts.page_cache_max + 1;
        let small = opts.page_cache_max;
        let direct = |mmap, flags, mode, size| serves_direct(&opts, mmap, flags, mode, size);
        assert!(direct(true, libc::O_RDONLY, 0o644, big), "a stream");
        assert!(!direct(true, libc::O_RDONLY, 0o644, small), "a small file");
        assert!(direct(true, libc::O_WRONLY, 0o644, 0));
        assert!(direct(true, libc::O_RDWR | libc::O_CREAT, 0o644, 0));
        assert!(
            !direct(true, libc::O_WRONLY, 0o4755, 0),
            "the kernel clears set-user-ID"
        );
        assert!(!direct(true, libc::O_RDWR, 0o2775, big), "and set-group-ID");
        // Without shared maps of direct files, only write-only opens go direct.
        assert!(!direct(false, libc::O_RDONLY, 0o644, big));
        assert!(!direct(false, libc::O_RDWR, 0o644, big));
        assert!(direct(false, libc::O_WRONLY, 0o644, big));
        let all = MountOptions {
            direct_io: true,
            ..MountOptions::default()
        };
        assert!(
            serves_direct(&all, false, libc::O_RDONLY, 0o4755, 0),
            "--direct-io"
        );
    }

    fn file(mode: u32, uid: u32) -> Attr {
        Attr {
            handle: 5,
            mode,
            uid,
            gid: uid,
            nlink: 1,
            size: 0,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            detail: ObjDetail::File {
                layout: Layout {
                    stripe_size: 65536,
                    replicas: 1,
                    datafiles: vec![Datafile {
                        server: 0,
                        handle: 9,
                    }],
                    width: 1,
                },
            },
            blocks: 0,
            acl: None,
        }
    }

    fn req() -> SetReq {
        SetReq {
            mode: None,
            uid: None,
            gid: None,
            size: None,
            atime: None,
            mtime: None,
            fh: None,
        }
    }

    #[test]
    fn which_refusals_the_kernel_approved() {
        let writer = Creds {
            uid: 1000,
            gid: 1000,
            groups: vec![],
        };
        let cur = file(0o6775, 0);
        // Clearing set-user-ID and set-group-ID after a write.
        let r = SetReq {
            mode: Some(0o0775),
            ..req()
        };
        assert!(kernel_approved(&r, &cur, &writer));
        let r = SetReq {
            mode: Some(0o2775),
            ..req()
        };
        assert!(kernel_approved(&r, &cur, &writer));
        // Anything else about the mode is a chmod the servers rightly refused.
        let r = SetReq {
            mode: Some(0o0777),
            ..req()
        };
        assert!(!kernel_approved(&r, &cur, &writer));
        let r = SetReq {
            mode: Some(0o6775),
            ..req()
        };
        assert!(!kernel_approved(&r, &cur, &writer));
        // utimes(NULL) by a writer, but not explicit times.
        let r = SetReq {
            atime: Some(TimeOrNow::Now),
            mtime: Some(TimeOrNow::Now),
            ..req()
        };
        assert!(kernel_approved(&r, &cur, &writer));
        let r = SetReq {
            mtime: Some(TimeOrNow::SpecificTime(std::time::UNIX_EPOCH)),
            ..req()
        };
        assert!(!kernel_approved(&r, &cur, &writer));
        // Never a chown.
        let r = SetReq {
            uid: Some(1000),
            ..req()
        };
        assert!(!kernel_approved(&r, &cur, &writer));
    }

    #[test]
    fn names() {
        assert_eq!(lookup_name(OsStr::new("a")), Ok("a"));
        let long = "x".repeat(256);
        assert_eq!(lookup_name(OsStr::new(&long)), Err(Errno::ENAMETOOLONG));
        assert_eq!(new_name(OsStr::new(&long)), Err(Errno::ENAMETOOLONG));
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(new_name(OsStr::from_bytes(b"\xff")), Err(Errno::EILSEQ));
        assert_eq!(lookup_name(OsStr::from_bytes(b"\xff")), Err(Errno::ENOENT));
    }
}
