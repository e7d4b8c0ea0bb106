//! Namespace and attribute calls on paths and descriptors: stat/lstat/fstat, the lazy
//! `statlite`/`lstatlite`/`fstatlite` of the POSIX extensions paper (Vilayannur et al.,
//! 2008), mkdir, rmdir, unlink, rename, symlink, readlink, truncate, chmod and statfs.
//!
//! A path walk costs one lookup per component, each answered with the object's
//! attributes; a regular file's size (and its exact mtime) costs one more request per
//! data server of the file, which the lite calls skip unless asked.

use libc::{c_char, c_int, c_ulong, mode_t, off_t, size_t, ssize_t};
use pvfs_client::{Attr, SetAttr};

use crate::attrs::{lite, stat, wants_more, wants_size};
use crate::state::{buf_mut, fail, ffi, get_fd, global, out, path, put, CResult, Global, Obj};
use crate::types::{pvfs_stat_lite, pvfs_statfs, PVFS_NAME_MAX};

/// Attributes of a descriptor's object; with `sized`, a file's size from its data
/// servers.
fn fd_attr(fd: c_int, sized: bool) -> CResult<(std::sync::Arc<crate::state::OpenFd>, Attr)> {
    let o = get_fd(fd)?;
    let attr = match &o.obj {
        Obj::File(f) if sized => o.g.run(f.file.stat())?,
        Obj::File(f) => o.g.run(o.g.client().getattr(f.file.handle()))?,
        Obj::Dir(d) if sized => o.g.run(o.g.client().stat_handle(d.handle))?,
        Obj::Dir(d) => o.g.run(o.g.client().getattr(d.handle))?,
    };
    Ok((o, attr))
}

fn path_stat(g: &Global, p: &str, follow: bool) -> CResult<Attr> {
    let c = g.client();
    Ok(if follow {
        g.run(c.stat(p))?
    } else {
        g.run(c.lstat(p))?
    })
}

/// `stat(2)`: attributes of what `path` names (a final symlink followed), with a
/// regular file's size and mtime from its data servers (one request per data server
/// after the lookups). `st_ino` is the pvfs handle, `st_blksize` the stripe size,
/// `st_blocks` the 512-byte blocks the data servers allocate for it (holes take none).
/// Returns 0, or -1 with errno:
/// ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG, EFAULT, EIO/EHOSTDOWN/ETIMEDOUT.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `st` is NULL or a writable `struct stat`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_stat(path: *const c_char, st: *mut libc::stat) -> c_int {
    ffi(-1, || {
        // SAFETY: by contract.
        let (p, st) = (unsafe { self::path(path) }?, out(st)?);
        let g = global()?;
        let v = stat(&g, &path_stat(&g, p, true)?);
        // SAFETY: checked non-NULL; writable by contract.
        unsafe { put(st, v) };
        Ok(0)
    })
}

/// `lstat(2)`: as `pvfs_stat`, but a final symlink is described itself.
///
/// # Safety
/// As `pvfs_stat`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_lstat(path: *const c_char, st: *mut libc::stat) -> c_int {
    ffi(-1, || {
        // SAFETY: by contract.
        let (p, st) = (unsafe { self::path(path) }?, out(st)?);
        let g = global()?;
        let v = stat(&g, &path_stat(&g, p, false)?);
        // SAFETY: checked non-NULL; writable by contract.
        unsafe { put(st, v) };
        Ok(0)
    })
}

/// `fstat(2)` of a pvfs descriptor: one attribute request, plus one per data server
/// for a regular file. Returns 0, or -1 with errno: EBADF, EFAULT, ENOENT/ESTALE (the
/// object was removed), EIO.
///
/// # Safety
/// `st` is NULL or a writable `struct stat`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_fstat(fd: c_int, st: *mut libc::stat) -> c_int {
    ffi(-1, || {
        let st = out(st)?;
        let (o, attr) = fd_attr(fd, true)?;
        let v = stat(&o.g, &attr);
        // SAFETY: checked non-NULL; writable by contract.
        unsafe { put(st, v) };
        Ok(0)
    })
}

/// Fills a stat-lite for a path: `sl.st_litemask` on input says which lazy fields
/// are wanted.
///
/// # Safety
/// As `pvfs_statlite`.
unsafe fn statlite_path(
    path: *const c_char,
    sl: *mut pvfs_stat_lite,
    follow: bool,
) -> CResult<c_int> {
    // SAFETY: by the caller's contract.
    let (p, sl) = (unsafe { self::path(path) }?, out(sl)?);
    // SAFETY: non-NULL, and its mask initialized by the caller's contract.
    let want: c_ulong = unsafe { (*sl).st_litemask };
    let g = global()?;
    let c = g.client();
    let mut attr = match follow {
        true => g.run(c.stat_lite(p))?,
        false => g.run(c.lstat_lite(p))?,
    };
    let sized = wants_more(want, &attr);
    if sized {
        g.run(c.complete(&mut attr))?;
    }
    // SAFETY: checked non-NULL; writable by contract.
    unsafe { put(sl, lite(&g, &attr, want, sized)) };
    Ok(0)
}

/// `statlite` of the POSIX extensions paper (Vilayannur et al., 2008): like
/// `pvfs_stat`, but only the lazy fields asked for in `sl->st_litemask` (`PVFS_SLITE_*`
/// bits) are fetched; on return `st_litemask` holds the bits whose fields are valid.
/// Without `PVFS_SLITE_SIZE` and `PVFS_SLITE_BLOCKS` no data server is contacted (only
/// the lookups of the path are sent); the mtime is then the metadata server's lazy copy
/// (see `PVFS_SLITE_MTIME`). Non-lazy fields (ino, mode, nlink, uid, gid, blksize) are
/// always filled in; a directory's nlink, mtime and ctime are exact when
/// `PVFS_SLITE_MTIME` or `PVFS_SLITE_CTIME` is asked (its other shards' servers are
/// asked then), its owner's shard's only otherwise. Returns 0, or -1 with errno as
/// `pvfs_stat`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `sl` is NULL or a readable and
/// writable `struct pvfs_stat_lite`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_statlite(path: *const c_char, sl: *mut pvfs_stat_lite) -> c_int {
    // SAFETY: the caller's pointers, passed through.
    ffi(-1, || unsafe { statlite_path(path, sl, true) })
}

/// `lstatlite` of the POSIX extensions paper (Vilayannur et al., 2008): `pvfs_statlite`
/// without following a final symlink.
///
/// # Safety
/// As `pvfs_statlite`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_lstatlite(path: *const c_char, sl: *mut pvfs_stat_lite) -> c_int {
    // SAFETY: the caller's pointers, passed through.
    ffi(-1, || unsafe { statlite_path(path, sl, false) })
}

/// `fstatlite` of the POSIX extensions paper (Vilayannur et al., 2008): `pvfs_statlite`
/// of a descriptor. One attribute request to the metadata server, plus one per data
/// server only if the size or blocks are asked for. Returns 0, or -1 with errno as
/// `pvfs_fstat`.
///
/// # Safety
/// `sl` is NULL or a readable and writable `struct pvfs_stat_lite`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_fstatlite(fd: c_int, sl: *mut pvfs_stat_lite) -> c_int {
    ffi(-1, || {
        let sl = out(sl)?;
        // SAFETY: non-NULL, and its mask initialized by the caller's contract.
        let want = unsafe { (*sl).st_litemask };
        let (o, mut attr) = fd_attr(fd, wants_size(want))?;
        let sized = wants_more(want, &attr);
        if sized && attr.is_dir() {
            o.g.run(o.g.client().complete(&mut attr))?;
        }
        // SAFETY: checked non-NULL; writable by contract.
        unsafe { put(sl, lite(&o.g, &attr, want, sized)) };
        Ok(0)
    })
}

/// `mkdir(2)` with `mode` & ~umask; the new directory has the file system's shard
/// count and inherits its parent's default layout. Returns 0, or -1 with errno:
/// EEXIST, ENOENT, ENOTDIR, EACCES, ENAMETOOLONG, EFAULT, EIO.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pvfs_mkdir(path: *const c_char, mode: mode_t) -> c_int {
    ffi(-1, || {
        // SAFETY: by contract.
        let p = unsafe { self::path(path) }?;
        let g = global()?;
        g.run(g.client().with_umask(g.umask).mkdir(p, mode & 0o7777))?;
        Ok(0)
    })
}

/// `rmdir(2)`: removes an empty directory. Returns 0, or -1 with errno: ENOTEMPTY,
/// ENOENT, ENOTDIR, EBUSY (the root), EACCES, EFAULT, EIO.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pvfs_rmdir(path: *const c_char) -> c_int {
    ffi(-1, || {
        // SAFETY: by contract.
        let p = unsafe { self::path(path) }?;
        let g = global()?;
        g.run(g.client().rmdir(p))?;
        Ok(0)
    })
}

/// `unlink(2)`: removes a name of a file, symlink or special file; the object (and a
/// file's datafiles) goes with its last name. Descriptors still open on a file that
/// lost its last name then fail (ENOENT/ESTALE): libpvfs does not keep unlinked files
/// alive. Returns 0, or -1 with errno: ENOENT, EISDIR, ENOTDIR, EACCES, EFAULT, EIO.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pvfs_unlink(path: *const c_char) -> c_int {
    ffi(-1, || {
        // SAFETY: by contract.
        let p = unsafe { self::path(path) }?;
        let g = global()?;
        g.run(g.client().unlink(p))?;
        Ok(0)
    })
}

/// `link(2)`: gives what `oldpath` names (not a directory; a symlink is linked itself)
/// the new name `newpath`, anywhere in the file system. Returns 0, or -1 with errno:
/// EEXIST, ENOENT, ENOTDIR, EPERM (a directory, or a file the caller neither owns nor
/// may read and write), EACCES, EMLINK, EFAULT, EIO.
///
/// # Safety
/// `oldpath` and `newpath` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pvfs_link(oldpath: *const c_char, newpath: *const c_char) -> c_int {
    ffi(-1, || {
        // SAFETY: by contract.
        let (o, n) = unsafe { (path(oldpath)?, path(newpath)?) };
        let g = global()?;
        g.run(g.client().link(o, n))?;
        Ok(0)
    })
}

/// `rename(2)`: moves `from` to `to`, replacing a file by a file or a directory by an
/// empty directory. Returns 0, or -1 with errno: ENOENT, EEXIST/ENOTEMPTY, EISDIR,
/// ENOTDIR, EINVAL (a directory into itself), EBUSY, EFAULT, EIO.
///
/// # Safety
/// `from` and `to` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pvfs_rename(from: *const c_char, to: *const c_char) -> c_int {
    ffi(-1, || {
        // SAFETY: by contract.
        let (f, t) = unsafe { (path(from)?, path(to)?) };
        let g = global()?;
        g.run(g.client().rename(f, t))?;
        Ok(0)
    })
}

/// `symlink(2)`: creates `linkpath` pointing to `target` (stored verbatim; an absolute
/// target is resolved from the pvfs root). Returns 0, or -1 with errno: EEXIST,
/// ENOENT, ENOTDIR, ENAMETOOLONG, EFAULT, EIO.
///
/// # Safety
/// `target` and `linkpath` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pvfs_symlink(target: *const c_char, linkpath: *const c_char) -> c_int {
    ffi(-1, || {
        // SAFETY: by contract.
        let (t, l) = unsafe { (path(target)?, path(linkpath)?) };
        let g = global()?;
        g.run(g.client().symlink(t, l))?;
        Ok(0)
    })
}

/// `readlink(2)`: copies the target of symlink `path` into `buf` (at most `bufsiz`
/// bytes, truncated, no terminating NUL). Returns the bytes copied, or -1 with errno:
/// EINVAL (not a symlink, or `bufsiz` 0), ENOENT, EFAULT, EIO.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `buf` is NULL or writable for `bufsiz`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn pvfs_readlink(
    path: *const c_char,
    buf: *mut c_char,
    bufsiz: size_t,
) -> ssize_t {
    ffi(-1, || {
        if bufsiz == 0 {
            return Err(fail(libc::EINVAL, "zero-sized buffer"));
        }
        // SAFETY: by contract.
        let (p, b) = unsafe { (self::path(path)?, buf_mut(buf.cast(), bufsiz)?) };
        let g = global()?;
        let target = g.run(g.client().readlink(p))?;
        let n = target.len().min(b.len());
        b[..n].copy_from_slice(&target.as_bytes()[..n]);
        Ok(n as ssize_t)
    })
}

/// `truncate(2)`: sets the size of file `path`. Returns 0, or -1 with errno: ENOENT,
/// EISDIR, EINVAL (negative length), EFBIG, EFAULT, EIO.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pvfs_truncate(path: *const c_char, length: off_t) -> c_int {
    ffi(-1, || {
        // SAFETY: by contract.
        let p = unsafe { self::path(path) }?;
        let len = u64::try_from(length).map_err(|_| fail(libc::EINVAL, "negative length"))?;
        let g = global()?;
        g.run(g.client().truncate(p, len))?;
        Ok(0)
    })
}

/// `chmod(2)`: sets the permission bits (07777) of what `path` names. Returns 0, or
/// -1 with errno: EPERM (not the owner), ENOENT, EFAULT, EIO.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pvfs_chmod(path: *const c_char, mode: mode_t) -> c_int {
    ffi(-1, || {
        // SAFETY: by contract.
        let p = unsafe { self::path(path) }?;
        let g = global()?;
        let set = SetAttr {
            mode: Some(mode & 0o7777),
            ..Default::default()
        };
        g.run(g.client().setattr(p, set))?;
        Ok(0)
    })
}

/// Space and objects of the file system, asking every server at once (servers that
/// do not answer within the request timeout are left out of the sums and counted in
/// `f_servers - f_servers_up`). Returns 0, or -1 with errno: EFAULT, or the error of
/// the first server if none answered.
///
/// # Safety
/// `st` is NULL or a writable `struct pvfs_statfs`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_statfs(st: *mut pvfs_statfs) -> c_int {
    ffi(-1, || {
        let st = out(st)?;
        let g = global()?;
        let fs = g.run(g.client().statfs());
        let up = fs.servers.iter().filter(|s| s.stat.is_ok()).count();
        if up == 0 {
            if let Some(Err(e)) = fs.servers.first().map(|s| s.stat.clone()) {
                return Err(e.into());
            }
        }
        let config = g.client().config();
        let v = pvfs_statfs {
            f_fsid: config.fsid,
            f_total_bytes: fs.total_bytes,
            f_free_bytes: fs.free_bytes,
            f_avail_bytes: fs.avail_bytes,
            f_objects: fs.objects,
            f_datafiles: fs.datafiles,
            f_servers: fs.servers.len() as u32,
            f_servers_up: up as u32,
            f_stripe_size: config.defaults.stripe_size,
            f_stripe_count: config.defaults.stripe_count,
            f_namemax: PVFS_NAME_MAX as u32,
        };
        // SAFETY: checked non-NULL; writable by contract.
        unsafe { put(st, v) };
        Ok(0)
    })
}
