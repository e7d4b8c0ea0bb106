//! Path hooks: the stat family and statx, access, readlink, mkdir, unlink, rmdir,
//! rename (all forms), chmod/chown/utimes (path and descriptor forms), truncate,
//! symlink, link, mknod, realpath.
//!
//! A call naming one pvfs path and one local path (rename, link) fails with EXDEV, as
//! between two file systems, so `mv` falls back to copy and remove. Unlinking a file
//! that this process still has open keeps its data until the last descriptor on it
//! closes (the end of a description, `fds.rs`), as POSIX says.

use std::ffi::CStr;

use libc::{c_char, c_int, c_uint, gid_t, mode_t, off64_t, size_t, ssize_t, timespec, uid_t};
use pvfs_client::{Attr, Errno as PErrno, LayoutSpec, ObjKind, RenameMode, SetAttr, Timespec};

use crate::fds::{on_open_fd, resolve, route, route_at, Obj, Target};
use crate::globals::{self, FDS, LISTINGS};
use crate::hook::export;
use crate::hook::{guarded, pvfs_call, set_errno, Failure, R};
use crate::proc::Proc;
use crate::real;
use crate::settings::split;
use crate::stat::{fill_stat, fill_statx};

// ----- stat ------------------------------------------------------------------------

/// Attributes of pvfs path `p` (following a final symlink when `follow`), with size.
fn attr_of(pr: &Proc, p: &str, follow: bool) -> R<Attr> {
    let c = pr.client();
    let mut lookup = LISTINGS.lookup(p);
    if let crate::cache::Lookup::Fill(dir) = lookup {
        let changes = LISTINGS.changes();
        // On failure an empty map is kept: the stats then go to the servers one by one.
        let attrs = match pr.run(c.readdir_plus_at(dir, true)) {
            Ok(entries) => entries
                .into_iter()
                .filter_map(|(e, a)| a.ok().map(|a| (e.name, a)))
                .collect(),
            Err(_) => Default::default(),
        };
        if let Ok((parent, _)) = split(p) {
            LISTINGS.fill(parent, changes, attrs);
        }
        lookup = LISTINGS.lookup(p);
    }
    if let crate::cache::Lookup::Hit(a) = lookup {
        if !follow || a.kind() != ObjKind::Symlink {
            return Ok(a);
        }
    }
    if follow {
        pr.call(c.stat(p))
    } else {
        pr.call(c.lstat(p))
    }
}

/// Attributes of `o`, with size: a path's final symlink is followed when `follow`; a
/// descriptor's object is that object.
pub(crate) fn attr_obj(pr: &Proc, o: &Obj, follow: bool) -> R<Attr> {
    match o {
        Obj::Path(p) => attr_of(pr, p, follow),
        Obj::Fd(d) => pr.call(pr.client().stat_handle(d.handle)),
    }
}

/// stat/lstat/fstat of `o` into `buf`.
pub(crate) fn stat_into(o: &Obj, follow: bool, buf: *mut libc::stat) -> R<c_int> {
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    let pr = globals::proc()?;
    let attr = attr_obj(pr, o, follow)?;
    // SAFETY: the caller passes a writable struct stat.
    fill_stat(pr, &attr, unsafe { &mut *buf });
    Ok(0)
}

unsafe fn stat_hook(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: stat's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::stat(path, buf),
            |p| stat_into(&Obj::Path(p), true, buf),
        )
    }
}

unsafe fn lstat_hook(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: lstat's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::lstat(path, buf),
            |p| stat_into(&Obj::Path(p), false, buf),
        )
    }
}

unsafe fn fstatat_hook(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    // SAFETY: fstatat's arguments, passed on.
    unsafe {
        route_at(
            dirfd,
            path,
            flags,
            |dirfd, path| real::fstatat(dirfd, path, buf, flags),
            |o| stat_into(&o, follow, buf),
        )
    }
}

export!(stat => stat_hook(path: *const c_char, buf: *mut libc::stat) -> c_int);
export!(lstat => lstat_hook(path: *const c_char, buf: *mut libc::stat) -> c_int);
export!(fstatat => fstatat_hook(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int);

#[no_mangle]
unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    // SAFETY: stat and stat64 are one layout on 64-bit Linux.
    unsafe { stat_hook(path, buf.cast()) }
}

#[no_mangle]
unsafe extern "C" fn lstat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    // SAFETY: as stat64.
    unsafe { lstat_hook(path, buf.cast()) }
}

#[no_mangle]
unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: as stat64.
    unsafe { fstatat_hook(dirfd, path, buf.cast(), flags) }
}

unsafe fn xstat_hook(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: __xstat's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::__xstat(ver, path, buf),
            |p| stat_into(&Obj::Path(p), true, buf),
        )
    }
}

unsafe fn lxstat_hook(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: __lxstat's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::__lxstat(ver, path, buf),
            |p| stat_into(&Obj::Path(p), false, buf),
        )
    }
}

unsafe fn fxstatat_hook(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    // SAFETY: __fxstatat's arguments, passed on.
    unsafe {
        route_at(
            dirfd,
            path,
            flags,
            |dirfd, path| real::__fxstatat(ver, dirfd, path, buf, flags),
            |o| stat_into(&o, follow, buf),
        )
    }
}

export!(__xstat, __xstat64 => xstat_hook(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int);
export!(__lxstat, __lxstat64 => lxstat_hook(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int);
export!(__fxstatat, __fxstatat64 => fxstatat_hook(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int);

#[no_mangle]
unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    // SAFETY: statx's arguments, passed on.
    unsafe {
        route_at(
            dirfd,
            path,
            flags,
            |dirfd, path| real::statx(dirfd, path, flags, mask, buf),
            |o| {
                if buf.is_null() {
                    return Err(libc::EFAULT);
                }
                let pr = globals::proc()?;
                let attr = attr_obj(pr, &o, follow)?;
                // SAFETY: the caller passes a writable struct statx.
                fill_statx(pr, &attr, &mut *buf);
                Ok(0)
            },
        )
    }
}

// ----- access, readlink ---------------------------------------------------------------

/// access(2) on `o` (effective ids, as `AT_EACCESS`).
fn access_pvfs(o: &Obj, mode: c_int, follow: bool) -> R<c_int> {
    let pr = globals::proc()?;
    let c = pr.client();
    let attr = match o {
        Obj::Path(p) if follow => pr.call(c.stat_lite(p))?,
        Obj::Path(p) => pr.call(c.lstat_lite(p))?,
        Obj::Fd(d) => pr.call(c.getattr(d.handle))?,
    };
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(libc::EINVAL);
    }
    if mode == libc::F_OK || pr.may(&attr, mode as u32) {
        Ok(0)
    } else {
        Err(libc::EACCES)
    }
}

#[no_mangle]
unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: access's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::access(path, mode),
            |p| access_pvfs(&Obj::Path(p), mode, true),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    // SAFETY: faccessat's arguments, passed on.
    unsafe {
        route_at(
            dirfd,
            path,
            flags,
            |dirfd, path| real::faccessat(dirfd, path, mode, flags),
            |o| access_pvfs(&o, mode, follow),
        )
    }
}

/// readlink of `o` into `buf` (not NUL-terminated, cut at `n`); a descriptor's
/// object that is not a symlink is ENOENT, as for `readlinkat(fd, "", …)`.
fn readlink_pvfs(o: &Obj, buf: *mut c_char, n: size_t) -> R<ssize_t> {
    if n == 0 {
        return Err(libc::EINVAL);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    let pr = globals::proc()?;
    let target = match o {
        Obj::Path(p) => pr.call(pr.client().readlink(p))?,
        Obj::Fd(d) => match pr.call(pr.client().getattr(d.handle))?.detail {
            pvfs_proto::ObjDetail::Symlink { target } => target,
            _ => return Err(libc::ENOENT),
        },
    };
    let k = target.len().min(n);
    // SAFETY: the caller's buffer holds n bytes; k <= n.
    unsafe { std::ptr::copy_nonoverlapping(target.as_ptr(), buf.cast::<u8>(), k) };
    Ok(k as ssize_t)
}

#[no_mangle]
unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: readlink's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::readlink(path, buf, n),
            |p| readlink_pvfs(&Obj::Path(p), buf, n),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> ssize_t {
    // An empty path names the descriptor's own object (no flag needed).
    let flags = if dirfd == libc::AT_FDCWD {
        0
    } else {
        libc::AT_EMPTY_PATH
    };
    // SAFETY: readlinkat's arguments, passed on.
    unsafe {
        route_at(
            dirfd,
            path,
            flags,
            |dirfd, path| real::readlinkat(dirfd, path, buf, n),
            |o| readlink_pvfs(&o, buf, n),
        )
    }
}

// ----- creating and removing ------------------------------------------------------------

/// mkdir of pvfs path `p`.
pub(crate) fn mkdir_pvfs(p: &str, mode: mode_t) -> R<c_int> {
    LISTINGS.changed();
    let pr = globals::proc()?;
    let c = pr.client().with_umask(globals::umask());
    match pr.run(c.mkdir(p, mode & 0o7777)) {
        Ok(_) => Ok(0),
        // mkdir of the root (the prefix itself).
        Err(e) if e.errno == PErrno::EBUSY => Err(libc::EEXIST),
        Err(e) => Err(crate::client_error::client_errno(e)),
    }
}

#[no_mangle]
unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: mkdir's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::mkdir(path, mode),
            |p| mkdir_pvfs(&p, mode),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: mkdirat's arguments, passed on.
    unsafe {
        route(
            dirfd,
            path,
            |dirfd, path| real::mkdirat(dirfd, path, mode),
            |p| mkdir_pvfs(&p, mode),
        )
    }
}

/// unlink of pvfs path `p` (not a directory).
fn unlink_pvfs(p: &str) -> R<c_int> {
    LISTINGS.changed();
    let pr = globals::proc()?;
    let c = pr.client();
    if !FDS.files_open() {
        pr.call(c.unlink(p))
            .map_err(|e| if e == libc::EBUSY { libc::EISDIR } else { e })?;
        return Ok(0);
    }
    let (parent, name) = split(p).map_err(|_| libc::EISDIR)?;
    let dir = pr.call(c.stat_lite(parent))?;
    let attr = pr.call(c.lookup_lite(dir.handle, name))?;
    let keep = attr.kind() == ObjKind::File && FDS.handle_open(attr.handle);
    let gone = pr.call(c.unlink_at(dir.handle, name, keep))?;
    // Kept for this process only when that was its last name (another client's
    // hold keeps it too, for that client to let go of).
    if keep && gone.left == pvfs_client::Remains::Kept {
        globals::keep_unlinked(attr.handle);
    }
    Ok(0)
}

/// rmdir of pvfs path `p`.
fn rmdir_pvfs(p: &str) -> R<c_int> {
    LISTINGS.changed();
    let pr = globals::proc()?;
    pr.call(pr.client().rmdir(p))?;
    Ok(0)
}

#[no_mangle]
unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    // SAFETY: unlink's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::unlink(path),
            |p| unlink_pvfs(&p),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    // SAFETY: rmdir's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::rmdir(path),
            |p| rmdir_pvfs(&p),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: unlinkat's arguments, passed on.
    unsafe {
        route(
            dirfd,
            path,
            |dirfd, path| real::unlinkat(dirfd, path, flags),
            |p| {
                if flags & !libc::AT_REMOVEDIR != 0 {
                    return Err(libc::EINVAL);
                }
                if flags & libc::AT_REMOVEDIR != 0 {
                    rmdir_pvfs(&p)
                } else {
                    unlink_pvfs(&p)
                }
            },
        )
    }
}

/// Routes a call with two paths (the first may name a descriptor's object by an empty
/// path when `flags1` has `AT_EMPTY_PATH`): both pvfs → `pvfs`, both local → `local`
/// (given the descriptors and paths to use), one of each → EXDEV, as between two file
/// systems.
///
/// # Safety
/// Both paths are null or NUL-terminated.
unsafe fn route2<T: Failure>(
    (fd1, p1, flags1): (c_int, *const c_char, c_int),
    (fd2, p2): (c_int, *const c_char),
    local: impl FnOnce(c_int, *const c_char, c_int, *const c_char) -> T,
    pvfs: impl FnOnce(Obj, String) -> R<T>,
) -> T {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (a, b) = unsafe { (resolve(fd1, p1, flags1), resolve(fd2, p2, 0)) };
        let at = libc::AT_FDCWD;
        let obj = |t: Target| match t {
            Target::Pvfs(p) => Some(Obj::Path(p)),
            Target::Fd(d) => Some(Obj::Fd(d)),
            Target::Local | Target::LocalPath(_) => None,
        };
        let local_arg = |t: &Target, fd: c_int, p: *const c_char| match t {
            Target::LocalPath(x) => (at, x.as_ptr()),
            _ => (fd, p),
        };
        match (a, b) {
            (Err(e), _) | (_, Err(e)) => {
                set_errno(e);
                T::failure()
            }
            (
                Ok(a @ (Target::Local | Target::LocalPath(_))),
                Ok(b @ (Target::Local | Target::LocalPath(_))),
            ) => {
                let (f1, q1) = local_arg(&a, fd1, p1);
                let (f2, q2) = local_arg(&b, fd2, p2);
                local(f1, q1, f2, q2)
            }
            (Ok(a), Ok(Target::Pvfs(b))) => match obj(a) {
                Some(a) => pvfs_call(|| pvfs(a, b)),
                None => {
                    set_errno(libc::EXDEV);
                    T::failure()
                }
            },
            _ => {
                set_errno(libc::EXDEV);
                T::failure()
            }
        }
    })
}

/// rename of pvfs path `a` to `b` with renameat2 `flags`.
fn rename_pvfs(a: &str, b: &str, flags: c_uint) -> R<c_int> {
    LISTINGS.changed();
    let pr = globals::proc()?;
    let c = pr.client();
    let mode = match flags {
        0 => return pr.call(c.rename(a, b)).map(|()| 0),
        libc::RENAME_NOREPLACE => RenameMode::NoReplace,
        libc::RENAME_EXCHANGE => RenameMode::Exchange,
        _ => return Err(libc::EINVAL),
    };
    let (pa, na) = split(a)?;
    let (pb, nb) = split(b)?;
    let da = pr.call(c.stat_lite(pa))?;
    let db = pr.call(c.stat_lite(pb))?;
    pr.call(c.rename_at(da.handle, na, db.handle, nb, mode))?;
    Ok(0)
}

#[no_mangle]
unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    let at = libc::AT_FDCWD;
    // SAFETY: rename's arguments, passed on.
    unsafe {
        route2(
            (at, from, 0),
            (at, to),
            |_, from, _, to| real::rename(from, to),
            |a, b| rename_pvfs(&a.into_path()?, &b, 0),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn renameat(
    fromfd: c_int,
    from: *const c_char,
    tofd: c_int,
    to: *const c_char,
) -> c_int {
    // SAFETY: renameat's arguments, passed on.
    unsafe {
        route2(
            (fromfd, from, 0),
            (tofd, to),
            |fromfd, from, tofd, to| real::renameat(fromfd, from, tofd, to),
            |a, b| rename_pvfs(&a.into_path()?, &b, 0),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn renameat2(
    fromfd: c_int,
    from: *const c_char,
    tofd: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: renameat2's arguments, passed on.
    unsafe {
        route2(
            (fromfd, from, 0),
            (tofd, to),
            |fromfd, from, tofd, to| real::renameat2(fromfd, from, tofd, to, flags),
            |a, b| rename_pvfs(&a.into_path()?, &b, flags),
        )
    }
}

/// A C string argument as UTF-8 (pvfs stores UTF-8).
///
/// # Safety
/// `s` is null or NUL-terminated.
unsafe fn utf8<'a>(s: *const c_char) -> R<&'a str> {
    if s.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract.
    std::str::from_utf8(unsafe { CStr::from_ptr(s) }.to_bytes()).map_err(|_| libc::EILSEQ)
}

/// symlink at pvfs path `p` to `target`.
fn symlink_pvfs(target: *const c_char, p: &str) -> R<c_int> {
    LISTINGS.changed();
    // SAFETY: symlink's target argument.
    let target = unsafe { utf8(target)? };
    let pr = globals::proc()?;
    pr.call(pr.client().symlink(target, p))?;
    Ok(0)
}

#[no_mangle]
unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    // SAFETY: symlink's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::symlink(target, path),
            |p| symlink_pvfs(target, &p),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int {
    // SAFETY: symlinkat's arguments, passed on.
    unsafe {
        route(
            dirfd,
            path,
            |dirfd, path| real::symlinkat(target, dirfd, path),
            |p| symlink_pvfs(target, &p),
        )
    }
}

/// Hard link to pvfs path `to` of `from` (a path, its final symlink followed only
/// with `follow`, as linkat's AT_SYMLINK_FOLLOW; or a descriptor's object).
fn link_pvfs(from: Obj, to: &str, follow: bool) -> R<c_int> {
    LISTINGS.changed();
    let pr = globals::proc()?;
    let c = pr.client();
    let handle = match from {
        Obj::Path(p) if !follow => return pr.call(c.link(&p, to)).map(|_| 0),
        Obj::Path(p) => pr.call(c.stat_lite(&p))?.handle,
        Obj::Fd(d) => d.handle,
    };
    let (parent, name) = split(to)?;
    let dir = pr.call(c.stat_lite(parent))?;
    pr.call(c.link_at(handle, dir.handle, name))?;
    Ok(0)
}

#[no_mangle]
unsafe extern "C" fn link(from: *const c_char, to: *const c_char) -> c_int {
    let at = libc::AT_FDCWD;
    // SAFETY: link's arguments, passed on. As Linux, a final symlink is linked itself.
    unsafe {
        route2(
            (at, from, 0),
            (at, to),
            |_, from, _, to| real::link(from, to),
            |a, b| link_pvfs(a, &b, false),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn linkat(
    fromfd: c_int,
    from: *const c_char,
    tofd: c_int,
    to: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: linkat's arguments, passed on.
    unsafe {
        route2(
            (fromfd, from, flags & libc::AT_EMPTY_PATH),
            (tofd, to),
            |fromfd, from, tofd, to| real::linkat(fromfd, from, tofd, to, flags),
            |a, b| {
                if flags & !(libc::AT_EMPTY_PATH | libc::AT_SYMLINK_FOLLOW) != 0 {
                    return Err(libc::EINVAL);
                }
                link_pvfs(a, &b, flags & libc::AT_SYMLINK_FOLLOW != 0)
            },
        )
    }
}

/// mknod at pvfs path `p`: a regular file, or a FIFO, socket or device node (kept
/// as metadata; `dev` in Linux's 32-bit encoding, as a mount would store it).
fn mknod_pvfs(p: &str, mode: mode_t, dev: libc::dev_t) -> R<c_int> {
    LISTINGS.changed();
    let pr = globals::proc()?;
    let perm = mode & 0o7777;
    let c = pr.client().with_umask(globals::umask());
    if let Some(kind) = pvfs_client::NodeKind::from_mode(mode) {
        let rdev = pvfs_client::NodeKind::encode_device(libc::major(dev), libc::minor(dev));
        pr.call(c.mknod(p, kind, perm, rdev))?;
        return Ok(0);
    }
    if mode & libc::S_IFMT != 0 && mode & libc::S_IFMT != libc::S_IFREG {
        return Err(libc::EINVAL);
    }
    pr.call(c.create(p, perm, LayoutSpec::default(), true))?;
    Ok(0)
}

#[no_mangle]
unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    // SAFETY: mknod's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::mknod(path, mode, dev),
            |p| mknod_pvfs(&p, mode, dev),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
) -> c_int {
    // SAFETY: mknodat's arguments, passed on.
    unsafe {
        route(
            dirfd,
            path,
            |dirfd, path| real::mknodat(dirfd, path, mode, dev),
            |p| mknod_pvfs(&p, mode, dev),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: mkfifo's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::mkfifo(path, mode),
            |p| mknod_pvfs(&p, libc::S_IFIFO | (mode & 0o7777), 0),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: mkfifoat's arguments, passed on.
    unsafe {
        route(
            dirfd,
            path,
            |dirfd, path| real::mkfifoat(dirfd, path, mode),
            |p| mknod_pvfs(&p, libc::S_IFIFO | (mode & 0o7777), 0),
        )
    }
}

// ----- attributes ------------------------------------------------------------------------

/// Applies `set` to `o` (for a path, to a final symlink itself when `!follow`). A mode
/// change on a symlink is EOPNOTSUPP, as on Linux.
fn setattr_obj(o: &Obj, set: SetAttr, follow: bool) -> R<c_int> {
    LISTINGS.changed();
    let pr = globals::proc()?;
    let c = pr.client();
    let no_symlink_mode = |attr: &Attr| {
        if attr.kind() == ObjKind::Symlink && set.mode.is_some() {
            Err(libc::EOPNOTSUPP)
        } else {
            Ok(())
        }
    };
    let handle = match o {
        Obj::Path(p) if follow => {
            pr.call(c.setattr(p, set))?;
            return Ok(0);
        }
        Obj::Path(p) => {
            let attr = pr.call(c.lstat_lite(p))?;
            no_symlink_mode(&attr)?;
            attr.handle
        }
        Obj::Fd(d) if d.kind == crate::desc::Kind::Other => {
            no_symlink_mode(&pr.call(c.getattr(d.handle))?)?;
            d.handle
        }
        Obj::Fd(d) => d.handle,
    };
    // The new attributes are not returned: no data server is asked for a size.
    pr.call(c.setattr_lite(handle, set))?;
    Ok(0)
}

fn mode_set(mode: mode_t) -> SetAttr {
    SetAttr {
        mode: Some(mode & 0o7777),
        ..Default::default()
    }
}

fn owner_set(uid: uid_t, gid: gid_t) -> SetAttr {
    SetAttr {
        uid: (uid != uid_t::MAX).then_some(uid),
        gid: (gid != gid_t::MAX).then_some(gid),
        ..Default::default()
    }
}

#[no_mangle]
unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: chmod's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::chmod(path, mode),
            |p| setattr_obj(&Obj::Path(p), mode_set(mode), true),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn lchmod(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: lchmod's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::lchmod(path, mode),
            |p| setattr_obj(&Obj::Path(p), mode_set(mode), false),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    // SAFETY: fchmodat's arguments, passed on.
    unsafe {
        route_at(
            dirfd,
            path,
            flags,
            |dirfd, path| real::fchmodat(dirfd, path, mode, flags),
            |o| setattr_obj(&o, mode_set(mode), follow),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    on_open_fd(
        fd,
        // SAFETY: no memory preconditions.
        || unsafe { real::fchmod(fd, mode) },
        |d| setattr_obj(&Obj::Fd(d), mode_set(mode), false),
    )
}

#[no_mangle]
unsafe extern "C" fn chown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    // SAFETY: chown's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::chown(path, uid, gid),
            |p| setattr_obj(&Obj::Path(p), owner_set(uid, gid), true),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn lchown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    // SAFETY: lchown's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::lchown(path, uid, gid),
            |p| setattr_obj(&Obj::Path(p), owner_set(uid, gid), false),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
    flags: c_int,
) -> c_int {
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    // SAFETY: fchownat's arguments, passed on.
    unsafe {
        route_at(
            dirfd,
            path,
            flags,
            |dirfd, path| real::fchownat(dirfd, path, uid, gid, flags),
            |o| setattr_obj(&o, owner_set(uid, gid), follow),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn fchown(fd: c_int, uid: uid_t, gid: gid_t) -> c_int {
    on_open_fd(
        fd,
        // SAFETY: no memory preconditions.
        || unsafe { real::fchown(fd, uid, gid) },
        |d| setattr_obj(&Obj::Fd(d), owner_set(uid, gid), false),
    )
}

/// The SetAttr for utimensat's `times` (null: both now; UTIME_NOW, UTIME_OMIT).
///
/// # Safety
/// `times` is null or points to two timespecs.
unsafe fn times_set(times: *const timespec) -> R<SetAttr> {
    let now = Timespec::now();
    if times.is_null() {
        return Ok(SetAttr {
            atime: Some(now),
            mtime: Some(now),
            now: true,
            ..Default::default()
        });
    }
    // SAFETY: the caller's contract.
    let t = unsafe { std::slice::from_raw_parts(times, 2) };
    let one = |ts: &timespec| -> R<Option<Timespec>> {
        match ts.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(now)),
            n if (0..1_000_000_000).contains(&n) => Ok(Some(Timespec {
                secs: ts.tv_sec,
                nsecs: n as u32,
            })),
            _ => Err(libc::EINVAL),
        }
    };
    let both_now = t.iter().all(|ts| ts.tv_nsec == libc::UTIME_NOW);
    Ok(SetAttr {
        atime: one(&t[0])?,
        mtime: one(&t[1])?,
        // Both now: allowed to anyone who may write the file, as the kernel allows.
        now: both_now,
        ..Default::default()
    })
}

/// utimes' `timeval[2]` as utimensat's `timespec[2]` (null stays null).
///
/// # Safety
/// `tv` is null or points to two timevals.
unsafe fn tv_times(tv: *const libc::timeval) -> Option<[timespec; 2]> {
    if tv.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    let t = unsafe { std::slice::from_raw_parts(tv, 2) };
    let ts = |v: &libc::timeval| timespec {
        tv_sec: v.tv_sec,
        tv_nsec: v.tv_usec * 1000,
    };
    Some([ts(&t[0]), ts(&t[1])])
}

#[no_mangle]
unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    times: *const timespec,
    flags: c_int,
) -> c_int {
    // A null path (Linux's own form of futimens) names the descriptor itself.
    if path.is_null() {
        // SAFETY: futimens's arguments.
        return unsafe { futimens(dirfd, times) };
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    // SAFETY: utimensat's arguments, passed on.
    unsafe {
        route_at(
            dirfd,
            path,
            flags,
            |dirfd, path| real::utimensat(dirfd, path, times, flags),
            |o| setattr_obj(&o, times_set(times)?, follow),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn futimens(fd: c_int, times: *const timespec) -> c_int {
    on_open_fd(
        fd,
        // SAFETY: futimens's arguments, passed on.
        || unsafe { real::futimens(fd, times) },
        // SAFETY: as above.
        |d| setattr_obj(&Obj::Fd(d), unsafe { times_set(times)? }, false),
    )
}

#[no_mangle]
unsafe extern "C" fn utimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    // SAFETY: utimes's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::utimes(path, tv),
            |p| {
                let t = tv_times(tv);
                let set = times_set(t.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()))?;
                setattr_obj(&Obj::Path(p), set, true)
            },
        )
    }
}

#[no_mangle]
unsafe extern "C" fn lutimes(path: *const c_char, tv: *const libc::timeval) -> c_int {
    // SAFETY: lutimes's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::lutimes(path, tv),
            |p| {
                let t = tv_times(tv);
                let set = times_set(t.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()))?;
                setattr_obj(&Obj::Path(p), set, false)
            },
        )
    }
}

#[no_mangle]
unsafe extern "C" fn futimesat(
    dirfd: c_int,
    path: *const c_char,
    tv: *const libc::timeval,
) -> c_int {
    // A null path names the descriptor itself.
    if path.is_null() {
        // SAFETY: futimes's arguments.
        return unsafe { futimes(dirfd, tv) };
    }
    // SAFETY: futimesat's arguments, passed on.
    unsafe {
        route(
            dirfd,
            path,
            |dirfd, path| real::futimesat(dirfd, path, tv),
            |p| {
                let t = tv_times(tv);
                let set = times_set(t.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()))?;
                setattr_obj(&Obj::Path(p), set, true)
            },
        )
    }
}

#[no_mangle]
unsafe extern "C" fn futimes(fd: c_int, tv: *const libc::timeval) -> c_int {
    on_open_fd(
        fd,
        // SAFETY: futimes's arguments, passed on.
        || unsafe { real::futimes(fd, tv) },
        |d| {
            // SAFETY: the caller passes null or two timevals.
            let t = unsafe { tv_times(tv) };
            // SAFETY: null or two timespecs.
            let set = unsafe { times_set(t.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()))? };
            setattr_obj(&Obj::Fd(d), set, false)
        },
    )
}

#[no_mangle]
unsafe extern "C" fn utime(path: *const c_char, buf: *const libc::utimbuf) -> c_int {
    // SAFETY: utime's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::utime(path, buf),
            |p| {
                let set = if buf.is_null() {
                    times_set(std::ptr::null())?
                } else {
                    let b = &*buf;
                    let t = [
                        timespec {
                            tv_sec: b.actime,
                            tv_nsec: 0,
                        },
                        timespec {
                            tv_sec: b.modtime,
                            tv_nsec: 0,
                        },
                    ];
                    times_set(t.as_ptr())?
                };
                setattr_obj(&Obj::Path(p), set, true)
            },
        )
    }
}

/// truncate of pvfs path `p` (needs write permission).
fn truncate_pvfs(p: &str, len: off64_t) -> R<c_int> {
    LISTINGS.changed();
    if len < 0 {
        return Err(libc::EINVAL);
    }
    let pr = globals::proc()?;
    let f = pr.call(pr.client().open(p))?;
    if !pr.may(f.attr(), libc::W_OK as u32) {
        return Err(libc::EACCES);
    }
    pr.call(f.truncate(len as u64))?;
    Ok(0)
}

unsafe fn truncate_hook(path: *const c_char, len: off64_t) -> c_int {
    // SAFETY: truncate's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::truncate64(path, len),
            |p| truncate_pvfs(&p, len),
        )
    }
}

export!(truncate, truncate64 => truncate_hook(path: *const c_char, len: off64_t) -> c_int);

// ----- realpath -----------------------------------------------------------------------------

/// realpath of pvfs path `p`: the lexically normalized local spelling, once the object
/// is known to exist (symlinks inside pvfs are not resolved; documented).
fn realpath_pvfs(p: &str, out: *mut c_char) -> R<*mut c_char> {
    let pr = globals::proc()?;
    pr.call(pr.client().stat_lite(p))?;
    let local = globals::settings().local_path(p);
    if local.len() >= libc::PATH_MAX as usize {
        return Err(libc::ENAMETOOLONG);
    }
    let buf = if out.is_null() {
        // SAFETY: malloc of a positive size; freed by the caller with free().
        let b = unsafe { libc::malloc(local.len() + 1) }.cast::<c_char>();
        if b.is_null() {
            return Err(libc::ENOMEM);
        }
        b
    } else {
        out
    };
    // SAFETY: buf holds at least local.len() + 1 bytes (PATH_MAX for a caller's).
    unsafe {
        std::ptr::copy_nonoverlapping(local.as_ptr(), buf.cast::<u8>(), local.len());
        *buf.add(local.len()) = 0;
    }
    Ok(buf)
}

#[no_mangle]
unsafe extern "C" fn realpath(path: *const c_char, out: *mut c_char) -> *mut c_char {
    // SAFETY: realpath's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::realpath(path, out),
            |p| realpath_pvfs(&p, out),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: canonicalize_file_name's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::canonicalize_file_name(path),
            |p| realpath_pvfs(&p, std::ptr::null_mut()),
        )
    }
}
