//! pvfs descriptors: real kernel descriptors standing for open pvfs files.
//!
//! Opening a pvfs file reserves a placeholder descriptor: an `O_PATH` descriptor of a
//! fresh, empty memfd named after the file (so `/proc/PID/fd` shows `/memfd:pvfs:/a/b`),
//! or of `/dev/null` where memfd is not available. The kernel thus numbers, inherits,
//! closes and duplicates it like any descriptor; a program that reaches it without the
//! library (after `exec`) gets EBADF from read and write, never silent wrong data. The
//! table maps placeholder number → [`Desc`], the open file description: handle, flags
//! and offset, shared by every `dup` of it as POSIX says.
//!
//! A table entry is checked against the placeholder's identity (device and inode) on
//! every lookup, so a descriptor closed behind the library's back (a raw syscall) and
//! reused for something else is never taken for a pvfs file.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use libc::{c_char, c_int};
use pvfs_client::{DirEntry, File};
use pvfs_proto::Handle;

use crate::hook::{guarded, pvfs_call, set_errno, Busy, Failure, R};
use crate::lock::Locked;
use crate::proc::{self, Proc};
use crate::real;
use crate::settings::{self, Abs};

/// What kind of object a descriptor is open on (whether opened with `O_PATH` or not:
/// see [`Desc::path_only`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular file: read, write, seek.
    File,
    /// A directory: readdir, and the base of `*at` calls.
    Dir,
    /// A symlink, FIFO, socket or device node: only reachable with `O_PATH`.
    Other,
}

/// One directory entry as readdir hands it out.
#[derive(Clone, Debug)]
pub(crate) struct Ent {
    /// The name (no NUL).
    pub(crate) name: Vec<u8>,
    /// The object's handle (`d_ino`).
    pub(crate) ino: u64,
    /// `DT_*`.
    pub(crate) dtype: u8,
}

/// What a description caches per process generation (rebuilt after fork).
struct Cache {
    gen: u64,
    file: Option<Arc<File>>,
    listing: Option<Arc<Vec<Ent>>>,
}

/// An open file description on pvfs.
pub(crate) struct Desc {
    /// What it is open on.
    pub(crate) kind: Kind,
    /// The pvfs path it was opened by (a directory's base for `*at` calls).
    pub(crate) path: String,
    /// The object's handle.
    pub(crate) handle: Handle,
    /// For a directory, its parent's handle (`..` in listings).
    pub(crate) parent: Handle,
    /// `O_RDONLY`, `O_WRONLY` or `O_RDWR`.
    pub(crate) acc: c_int,
    /// Status flags as `F_GETFL` shows them, without the access mode.
    pub(crate) flags: AtomicI32,
    /// The file offset (a directory's: the next entry's index). Held across a whole
    /// read or write, so calls sharing the description see each other's effects in
    /// some order, as Linux's per-file position lock does.
    pub(crate) pos: Locked<u64>,
    cache: Locked<Cache>,
    /// Device and inode of the placeholder, to recognize it.
    ident: (u64, u64),
    /// Unique per description: names its OFD locks and `flock`s.
    pub(crate) id: u64,
}

impl Desc {
    /// A description of `kind` on `path` (object `handle`) with open `flags`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        kind: Kind,
        path: String,
        handle: Handle,
        parent: Handle,
        flags: c_int,
        file: Option<File>,
        ident: (u64, u64),
    ) -> Desc {
        Desc {
            kind,
            path,
            handle,
            parent,
            acc: flags & libc::O_ACCMODE,
            flags: AtomicI32::new(flags & STATUS_FLAGS),
            pos: Locked::new(0),
            cache: Locked::new(Cache {
                gen: proc::generation(),
                file: file.map(Arc::new),
                listing: None,
            }),
            ident,
            id: crate::locks::next_desc_id(),
        }
    }

    /// Whether reads are allowed (never through an `O_PATH` descriptor).
    pub(crate) fn readable(&self) -> bool {
        !self.path_only() && (self.acc == libc::O_RDONLY || self.acc == libc::O_RDWR)
    }

    /// Whether writes are allowed (never through an `O_PATH` descriptor).
    pub(crate) fn writable(&self) -> bool {
        !self.path_only() && (self.acc == libc::O_WRONLY || self.acc == libc::O_RDWR)
    }

    /// Whether it was opened with `O_PATH`: it names an object for `fstat`, `fchdir`,
    /// `fstatfs` and as the directory of `*at` calls, but reads, writes, listings and
    /// `f*` attribute changes fail with EBADF, as the kernel answers.
    pub(crate) fn path_only(&self) -> bool {
        self.status() & libc::O_PATH != 0
    }

    /// Current status flags.
    pub(crate) fn status(&self) -> c_int {
        self.flags.load(Ordering::Relaxed)
    }

    /// The open file for I/O (re-opened by handle in a forked child).
    pub(crate) fn file(&self, p: &Proc) -> R<Arc<File>> {
        let mut c = self.cache.lock();
        if c.gen != p.gen {
            *c = Cache {
                gen: p.gen,
                file: None,
                listing: None,
            };
        }
        if let Some(f) = &c.file {
            return Ok(f.clone());
        }
        let f = Arc::new(p.call(p.client().open_handle(self.handle))?);
        c.file = Some(f.clone());
        Ok(f)
    }

    /// The directory's listing ("." and ".." first), read on first use and after a
    /// rewind.
    pub(crate) fn listing(&self, p: &Proc) -> R<Arc<Vec<Ent>>> {
        let mut c = self.cache.lock();
        if c.gen != p.gen {
            *c = Cache {
                gen: p.gen,
                file: None,
                listing: None,
            };
        }
        if let Some(l) = &c.listing {
            return Ok(l.clone());
        }
        let changes = crate::cache::changes();
        let entries = p.call(p.client().readdir_at(self.handle))?;
        let mut v = Vec::with_capacity(entries.len() + 2);
        v.push(Ent {
            name: b".".to_vec(),
            ino: self.handle,
            dtype: libc::DT_DIR,
        });
        v.push(Ent {
            name: b"..".to_vec(),
            ino: self.parent,
            dtype: libc::DT_DIR,
        });
        v.extend(entries.into_iter().map(ent));
        crate::cache::listed(&self.path, self.handle, changes);
        let l = Arc::new(v);
        c.listing = Some(l.clone());
        Ok(l)
    }

    /// Forgets the listing (rewinddir, lseek to 0): the next read lists again.
    pub(crate) fn forget_listing(&self) {
        self.cache.lock().listing = None;
    }
}

impl Drop for Desc {
    fn drop(&mut self) {
        // The description's last descriptor is gone: its OFD locks and flocks end.
        crate::locks::description_gone(self.handle, self.id);
        if self.kind == Kind::File {
            crate::meta::released(self.handle);
        }
    }
}

fn ent(e: DirEntry) -> Ent {
    Ent {
        ino: e.handle,
        dtype: e.kind.d_type(),
        name: e.name.into_bytes(),
    }
}

/// Status flags a description keeps (what `F_GETFL` reports besides the access mode).
pub(crate) const STATUS_FLAGS: c_int = libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DSYNC
    | libc::O_SYNC
    | libc::O_DIRECT
    | libc::O_NOATIME
    | libc::O_LARGEFILE
    | libc::O_PATH
    | libc::O_DIRECTORY;

/// Flags `F_SETFL` may change.
pub(crate) const SETFL_FLAGS: c_int =
    libc::O_APPEND | libc::O_NONBLOCK | libc::O_DIRECT | libc::O_NOATIME;

// ----- the table ------------------------------------------------------------------

static TABLE: Locked<BTreeMap<c_int, Arc<Desc>>> = Locked::new(BTreeMap::new());
/// Entries in TABLE: lets calls on other descriptors skip the lock while none exist.
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Descriptors below [`BITMAP_FDS`] that are in TABLE, one bit each (kept under the
/// TABLE lock). A descriptor whose bit is clear is answered "not pvfs" without taking
/// the lock, so calls on ordinary descriptors never wait for it, even from a signal
/// handler that interrupted a thread holding it.
static BITS: [AtomicU64; BITMAP_FDS / 64] = [const { AtomicU64::new(0) }; BITMAP_FDS / 64];
/// Descriptors the bitmap covers.
const BITMAP_FDS: usize = 4096;

/// The process the table belongs to (set at load and in every forked child).
static OWNER: AtomicI32 = AtomicI32::new(0);

/// Records the calling process as the table's owner (library load, fork child).
pub(crate) fn own() {
    // SAFETY: getpid has no preconditions.
    OWNER.store(unsafe { libc::getpid() }, Ordering::Release);
}

/// Whether the calling process owns the table. A child made by `vfork` (or
/// `clone(CLONE_VM)`, as `posix_spawn` and Python's subprocess do) shares the parent's
/// memory without running fork handlers; its closes and dup2s before `exec` must not
/// change the parent's table.
fn owner() -> bool {
    // SAFETY: getpid has no preconditions.
    OWNER.load(Ordering::Acquire) == unsafe { libc::getpid() }
}

/// Sets or clears `fd`'s bit (with the TABLE lock held).
fn mark(fd: c_int, on: bool) {
    let fd = fd as usize;
    if fd < BITMAP_FDS {
        let bit = 1u64 << (fd % 64);
        if on {
            BITS[fd / 64].fetch_or(bit, Ordering::Release);
        } else {
            BITS[fd / 64].fetch_and(!bit, Ordering::Release);
        }
    }
}

/// Whether `fd` may be in TABLE (false means certainly not).
fn maybe(fd: c_int) -> bool {
    if fd < 0 || COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    let u = fd as usize;
    u >= BITMAP_FDS || BITS[u / 64].load(Ordering::Acquire) & (1u64 << (u % 64)) != 0
}

/// The description behind pvfs descriptor `fd`, if it is one.
pub(crate) fn get(fd: c_int) -> Option<Arc<Desc>> {
    if !maybe(fd) {
        return None;
    }
    let d = TABLE.lock().get(&fd).cloned()?;
    if identity(fd) == Some(d.ident) {
        return Some(d);
    }
    // Closed behind our back and reused: forget it (if it is still the same entry).
    let mut t = TABLE.lock();
    let stale = if t.get(&fd).is_some_and(|x| Arc::ptr_eq(x, &d)) {
        mark(fd, false);
        t.remove(&fd)
    } else {
        None
    };
    COUNT.store(t.len(), Ordering::Release);
    drop(t);
    drop(stale);
    None
}

/// Whether `fd` is a pvfs descriptor.
pub(crate) fn is_pvfs(fd: c_int) -> bool {
    get(fd).is_some()
}

/// Makes `fd` stand for `desc`, replacing what it stood for (returned, to be dropped
/// outside any lock).
pub(crate) fn insert(fd: c_int, desc: Arc<Desc>) -> Option<Arc<Desc>> {
    if !owner() {
        return None;
    }
    let mut t = TABLE.lock();
    let old = t.insert(fd, desc);
    mark(fd, true);
    COUNT.store(t.len(), Ordering::Release);
    old
}

/// Forgets `fd`; returns what it stood for.
pub(crate) fn remove(fd: c_int) -> Option<Arc<Desc>> {
    if !maybe(fd) || !owner() {
        return None;
    }
    let mut t = TABLE.lock();
    let old = t.remove(&fd);
    mark(fd, false);
    COUNT.store(t.len(), Ordering::Release);
    old
}

/// Forgets every descriptor in `first..=last`; returns them.
pub(crate) fn remove_range(first: c_int, last: c_int) -> Vec<Arc<Desc>> {
    if COUNT.load(Ordering::Acquire) == 0 || first > last || !owner() {
        return Vec::new();
    }
    let mut t = TABLE.lock();
    let fds: Vec<c_int> = t.range(first..=last).map(|(&k, _)| k).collect();
    let out = fds
        .iter()
        .filter_map(|&fd| {
            mark(fd, false);
            t.remove(&fd)
        })
        .collect();
    COUNT.store(t.len(), Ordering::Release);
    out
}

/// The locked table, as [`with_table`] lends it.
pub(crate) struct Table<'a>(&'a mut BTreeMap<c_int, Arc<Desc>>);

impl Table<'_> {
    /// Makes `fd` stand for `desc`; returns what it stood for. (Not in a vfork
    /// child: see [`owner`].)
    pub(crate) fn insert(&mut self, fd: c_int, desc: Arc<Desc>) -> Option<Arc<Desc>> {
        if !owner() {
            return None;
        }
        mark(fd, true);
        self.0.insert(fd, desc)
    }

    /// Forgets `fd`; returns what it stood for. (Not in a vfork child.)
    pub(crate) fn remove(&mut self, fd: c_int) -> Option<Arc<Desc>> {
        if !owner() {
            return None;
        }
        mark(fd, false);
        self.0.remove(&fd)
    }
}

/// Runs `f` with the table locked (dup2/dup3 replace an entry atomically with the
/// kernel's own replacement). What `f` returns is dropped after the lock is released
/// (a description's last drop may take the lock again).
pub(crate) fn with_table<T>(f: impl FnOnce(&mut Table<'_>) -> T) -> T {
    let mut t = TABLE.lock();
    let v = f(&mut Table(&mut t));
    COUNT.store(t.len(), Ordering::Release);
    drop(t);
    v
}

/// Whether any regular file is open (unlink then checks whether it removes one).
pub(crate) fn files_open() -> bool {
    if COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    TABLE.lock().values().any(|d| d.kind == Kind::File)
}

/// Whether any open description is on object `handle` (an unlink then keeps it).
pub(crate) fn handle_open(handle: Handle) -> bool {
    if COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    TABLE.lock().values().any(|d| d.handle == handle)
}

// ----- fork -----------------------------------------------------------------------

/// Takes every global lock (fork prepare handler).
pub(crate) fn lock_all() {
    TABLE.raw_lock();
    crate::dirs::STREAMS.raw_lock();
    crate::meta::PENDING.raw_lock();
    crate::cwd::CWD.raw_lock();
    crate::cache::LATEST.raw_lock();
}

/// Releases what [`lock_all`] took.
pub(crate) fn unlock_all() {
    crate::cache::LATEST.raw_unlock();
    crate::cwd::CWD.raw_unlock();
    crate::meta::PENDING.raw_unlock();
    crate::dirs::STREAMS.raw_unlock();
    TABLE.raw_unlock();
}

/// In a forked child, forces open every per-description lock (their holders, other
/// threads of the parent, do not exist here).
///
/// # Safety
/// Only from the fork child handler, with TABLE held by [`lock_all`].
pub(crate) unsafe fn reset_in_child() {
    // SAFETY: lock_all holds TABLE and the child has a single thread, so this is the
    // only access to the map.
    let table = unsafe { TABLE.held() };
    for d in table.values() {
        d.pos.raw_unlock();
        d.cache.raw_unlock();
    }
}

// ----- placeholders and identity ---------------------------------------------------

/// Device and inode of what `fd` refers to, from the real fstat.
pub(crate) fn identity(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid value; fstat writes into it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a live, writable stat.
    let rc = unsafe { real::fstat(fd, &mut st) };
    (rc == 0).then_some((st.st_dev, st.st_ino))
}

/// A new placeholder descriptor for pvfs path `path` (`O_CLOEXEC` if `cloexec`), with
/// its identity.
pub(crate) fn placeholder(path: &str, cloexec: bool) -> R<(c_int, (u64, u64))> {
    let ce = if cloexec { libc::O_CLOEXEC } else { 0 };
    let fd = memfd_placeholder(path, ce).or_else(|_| {
        // SAFETY: a NUL-terminated literal path.
        let fd =
            unsafe { real::openat(libc::AT_FDCWD, c"/dev/null".as_ptr(), libc::O_PATH | ce, 0) };
        if fd < 0 {
            Err(crate::hook::errno())
        } else {
            Ok(fd)
        }
    })?;
    match identity(fd) {
        Some(id) => Ok((fd, id)),
        None => {
            let e = crate::hook::errno();
            // SAFETY: fd was just opened by us.
            unsafe { real::close(fd) };
            Err(e)
        }
    }
}

fn memfd_placeholder(path: &str, ce: c_int) -> R<c_int> {
    let mut name = format!("pvfs:{path}");
    let mut cut = name.len().min(240);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    name.truncate(cut);
    let name = std::ffi::CString::new(name.replace('\0', "?")).map_err(|_| libc::EINVAL)?;
    // SAFETY: name is NUL-terminated; memfd_create is not hooked.
    let mfd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if mfd < 0 {
        return Err(crate::hook::errno());
    }
    let proc_path =
        std::ffi::CString::new(format!("/proc/self/fd/{mfd}")).map_err(|_| libc::EINVAL)?;
    // SAFETY: proc_path is NUL-terminated.
    let fd = unsafe { real::openat(libc::AT_FDCWD, proc_path.as_ptr(), libc::O_PATH | ce, 0) };
    let e = crate::hook::errno();
    // SAFETY: mfd was just made by us and is not used again.
    unsafe { real::close(mfd) };
    if fd < 0 {
        Err(e)
    } else {
        Ok(fd)
    }
}

// ----- routing ---------------------------------------------------------------------

/// Where a path argument leads.
pub(crate) enum Target {
    /// Not pvfs: call the real function with the arguments as given.
    Local,
    /// Not pvfs, but only as this absolute local path (a relative path that climbed
    /// out of pvfs from a pvfs directory or working directory).
    LocalPath(CString),
    /// This pvfs path.
    Pvfs(String),
    /// The object pvfs descriptor `dirfd` is open on: an empty path with
    /// `AT_EMPTY_PATH` (`fstatat(fd, "", buf, AT_EMPTY_PATH)`).
    Fd(Arc<Desc>),
}

/// What a pvfs `*at` call acts on: a pvfs path, or the object of a pvfs descriptor.
pub(crate) enum Obj {
    /// A pvfs path (a final symlink followed or not, as the call says).
    Path(String),
    /// The object a descriptor is open on (never followed: it is that object).
    Fd(Arc<Desc>),
}

impl Obj {
    /// The path, for calls that act on names only (an empty path naming a
    /// descriptor's object is ENOENT there, as for the kernel).
    pub(crate) fn into_path(self) -> R<String> {
        match self {
            Obj::Path(p) => Ok(p),
            Obj::Fd(_) => Err(libc::ENOENT),
        }
    }
}

/// Where `path`, relative to `dirfd` as in the `*at` calls, leads: absolute paths by
/// the prefix; relative ones by their directory descriptor (opened with or without
/// `O_PATH`), or with `AT_FDCWD` by the working directory (pvfs after a chdir into
/// pvfs, see [`crate::cwd`]). An empty (or null) path is ENOENT, or with
/// `AT_EMPTY_PATH` in `flags` the descriptor's object (or the working directory). A
/// thread inside pvfs work, and an inert library, always get `Local`.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub(crate) unsafe fn resolve(dirfd: c_int, path: *const c_char, flags: c_int) -> R<Target> {
    if Busy::active() {
        return Ok(Target::Local);
    }
    if path.is_null() {
        // A null path with AT_EMPTY_PATH names the descriptor (statx since Linux 6.11).
        return Ok(match get(dirfd) {
            Some(d) if flags & libc::AT_EMPTY_PATH != 0 => Target::Fd(d),
            _ => Target::Local,
        });
    }
    let s = settings::get();
    if !s.active() {
        return Ok(Target::Local);
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if bytes.first() == Some(&b'/') {
        return Ok(match s.route_abs(bytes)? {
            Abs::Local => Target::Local,
            Abs::Pvfs(p) => Target::Pvfs(p),
            Abs::Through(l) => Target::LocalPath(CString::new(l).map_err(|_| libc::EINVAL)?),
        });
    }
    let empty_ok = flags & libc::AT_EMPTY_PATH != 0;
    let base = if dirfd == libc::AT_FDCWD {
        match crate::cwd::current() {
            Some(c) => c,
            None => return from_local_dir(s, dirfd, bytes),
        }
    } else {
        let Some(d) = get(dirfd) else {
            return from_local_dir(s, dirfd, bytes);
        };
        if bytes.is_empty() && empty_ok {
            return Ok(Target::Fd(d));
        }
        if d.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        d.path.clone()
    };
    if bytes.is_empty() {
        return if empty_ok {
            Ok(Target::Pvfs(base))
        } else {
            Err(libc::ENOENT)
        };
    }
    let mut full = s.local_path(&base).into_bytes();
    full.push(b'/');
    full.extend_from_slice(bytes);
    Ok(match s.route_abs(&full)? {
        Abs::Pvfs(p) => Target::Pvfs(p),
        Abs::Through(l) => Target::LocalPath(CString::new(l).map_err(|_| libc::EINVAL)?),
        Abs::Local => Target::Local,
    })
}

/// Where relative path `rel` leads from a local directory (`dirfd`, or the real
/// working directory for `AT_FDCWD`): local, unless it climbs into the prefix, as
/// `openat(fd_of_root, "pvfs", O_PATH|O_DIRECTORY)` does when a program (rsync) walks
/// a destination one component at a time from `/`. The directory's path is asked of
/// the kernel only when `rel` names the prefix's last component, so other relative
/// calls cost nothing more.
fn from_local_dir(s: &settings::Settings, dirfd: c_int, rel: &[u8]) -> R<Target> {
    if rel.is_empty() || !s.may_reach(rel) {
        return Ok(Target::Local);
    }
    let Some(mut full) = local_dir_path(dirfd) else {
        return Ok(Target::Local);
    };
    full.push(b'/');
    full.extend_from_slice(rel);
    Ok(match s.route_abs(&full)? {
        Abs::Pvfs(p) => Target::Pvfs(p),
        Abs::Through(l) => Target::LocalPath(CString::new(l).map_err(|_| libc::EINVAL)?),
        Abs::Local => Target::Local,
    })
}

/// The absolute path of local directory descriptor `dirfd` (the real working
/// directory for `AT_FDCWD`), if the kernel can tell it.
fn local_dir_path(dirfd: c_int) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    let len = if dirfd == libc::AT_FDCWD {
        // SAFETY: buf is writable for its length; getcwd writes a NUL-terminated path.
        let p = unsafe { real::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
        if p.is_null() {
            return None;
        }
        buf.iter().position(|&b| b == 0)?
    } else {
        let link = CString::new(format!("/proc/self/fd/{dirfd}")).ok()?;
        // SAFETY: link is NUL-terminated; buf is writable for its length.
        let n = unsafe { real::readlink(link.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        usize::try_from(n).ok().filter(|&n| n < buf.len())?
    };
    buf.truncate(len);
    // A removed directory ("/a/b (deleted)"), or no path at all, leads nowhere known.
    (buf.first() == Some(&b'/') && !buf.ends_with(b" (deleted)")).then_some(buf)
}

/// Routes a `*at` hook with `AT_*` `flags`: `local` (the real function, given the
/// directory descriptor and path to use) for a local path, `pvfs` (inside
/// [`crate::hook::pvfs_call`]) with the pvfs path or descriptor object otherwise; a routing
/// error sets errno. Every `*at` hook, and every path hook (as `*at` with `AT_FDCWD`),
/// goes through here.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub(crate) unsafe fn route_at<T: Failure>(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    local: impl FnOnce(c_int, *const c_char) -> T,
    pvfs: impl FnOnce(Obj) -> R<T>,
) -> T {
    guarded(|| {
        // SAFETY: the caller's contract.
        match unsafe { resolve(dirfd, path, flags) } {
            Ok(Target::Local) => local(dirfd, path),
            Ok(Target::LocalPath(abs)) => local(libc::AT_FDCWD, abs.as_ptr()),
            Ok(Target::Pvfs(p)) => pvfs_call(|| pvfs(Obj::Path(p))),
            Ok(Target::Fd(d)) => pvfs_call(|| pvfs(Obj::Fd(d))),
            Err(e) => {
                set_errno(e);
                T::failure()
            }
        }
    })
}

/// Routes a hook whose pvfs side needs a path (no `AT_EMPTY_PATH`): as [`route_at`]
/// with no flags.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub(crate) unsafe fn route<T: Failure>(
    dirfd: c_int,
    path: *const c_char,
    local: impl FnOnce(c_int, *const c_char) -> T,
    pvfs: impl FnOnce(String) -> R<T>,
) -> T {
    // SAFETY: the caller's contract.
    unsafe { route_at(dirfd, path, 0, local, |o| pvfs(o.into_path()?)) }
}

/// Routes a descriptor hook that accepts any descriptor, `O_PATH` ones included
/// (`fstat`, `fchdir`, `fstatfs`, `fcntl`, …): `local` for a descriptor that is not
/// pvfs, `pvfs` (inside [`crate::hook::pvfs_call`]) with the description otherwise.
pub(crate) fn on_fd<T: Failure>(
    fd: c_int,
    local: impl FnOnce() -> T,
    pvfs: impl FnOnce(Arc<Desc>) -> R<T>,
) -> T {
    if Busy::active() {
        return local();
    }
    guarded(|| match get(fd) {
        None => local(),
        Some(d) => pvfs_call(|| pvfs(d)),
    })
}

/// Routes a descriptor hook that needs a descriptor opened for I/O (`read`, `write`,
/// `lseek`, `fchmod`, `getdents64`, …): as [`on_fd`], but an `O_PATH` pvfs descriptor
/// fails with EBADF, as the kernel's own check for such descriptors does.
pub(crate) fn on_open_fd<T: Failure>(
    fd: c_int,
    local: impl FnOnce() -> T,
    pvfs: impl FnOnce(Arc<Desc>) -> R<T>,
) -> T {
    on_fd(fd, local, |d| {
        if d.path_only() {
            return Err(libc::EBADF);
        }
        pvfs(d)
    })
}
