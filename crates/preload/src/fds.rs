//! pvfs descriptors: the table of kernel descriptors that stand for open pvfs file
//! descriptions ([`Desc`], `desc.rs`), and the routing of every hook's path or
//! descriptor to pvfs or to libc.
//!
//! A table entry is checked against the placeholder's identity (device and inode) on
//! every lookup, so a descriptor closed behind the library's back (a raw syscall) and
//! reused for something else is never taken for a pvfs file.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use libc::{c_char, c_int};
use pvfs_proto::Handle;

use crate::desc::{identity, Desc, Kind};
use crate::hook::{guarded, pvfs_call, set_errno, Busy, Failure, R};
use crate::lock::Locked;
use crate::real;
use crate::settings::{self, Abs};

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
        d.unlock_in_child();
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
