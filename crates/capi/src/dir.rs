//! Directories: `opendir`/`readdir`/`closedir` streams and the bulk metadata calls of
//! the POSIX extensions paper (Vilayannur et al., 2008),
//! `getdents_plus`/`getdents_plus_lite` on a directory descriptor.
//!
//! A descriptor fetches its listing once, at its first read (or after a rewind), and
//! hands it out `count` entries per call. The fetch with attributes is the two-phase
//! readdirplus of `pvfs_client` (docs/namespace.md): one ReadDir per shard, one batched
//! ListAttr per metadata server, then — only when the size is wanted — one batched
//! GetSizes per data server; never one request per entry.

use libc::{c_char, c_int, c_uint, c_ulong};
use pvfs_client::{Attr, DirEntry, Error};

use crate::attrs::{dtype, lite, wants_size};
use crate::file::{fd_for, open_target};
use crate::state::{
    fail, ffi, get_fd, global, lock, out, path, remove_fd, CResult, DirCursor, DirFd, Global,
    Level, Listing,
};
use crate::types::{empty_lite, pvfs_dir, pvfs_dirent, pvfs_dirent_plus, PVFS_SLITE_ALL};

/// Makes sure the listing holds at least `level`; a listing fetched at a lower level
/// is fetched again at the higher one (same order, so the position still holds).
fn ensure(g: &Global, d: &DirFd, cur: &mut DirCursor, level: Level) -> CResult<()> {
    if cur.listing.as_ref().is_some_and(|l| l.level >= level) {
        return Ok(());
    }
    let c = g.client();
    let items: Vec<(DirEntry, Option<pvfs_client::Result<Attr>>)> = match level {
        Level::Names => g
            .run(c.readdir_at(d.handle))?
            .into_iter()
            .map(|e| (e, None))
            .collect(),
        Level::Attrs | Level::Sizes => g
            .run(c.readdir_plus_at(d.handle, level == Level::Sizes))?
            .into_iter()
            .map(|(e, a)| (e, Some(a)))
            .collect(),
    };
    cur.listing = Some(Listing { level, items });
    Ok(())
}

/// Copies a name into a `d_name` array, NUL-terminated (names are at most 255 bytes).
fn name_into(dst: &mut [c_char; 256], name: &str) {
    let n = name.len().min(dst.len() - 1);
    for (d, s) in dst.iter_mut().zip(&name.as_bytes()[..n]) {
        *d = *s as c_char;
    }
    dst[n] = 0;
}

/// One `struct pvfs_dirent_plus` for a listed entry.
fn plus_entry(
    g: &Global,
    e: &DirEntry,
    attr: Option<&pvfs_client::Result<Attr>>,
    mask: c_ulong,
    sized: bool,
) -> pvfs_dirent_plus {
    let mut out = pvfs_dirent_plus {
        d_ino: e.handle as libc::ino_t,
        d_type: dtype(e.kind),
        d_name: [0; 256],
        d_errno: 0,
        d_stat: empty_lite(),
    };
    name_into(&mut out.d_name, &e.name);
    match attr {
        Some(Ok(a)) => out.d_stat = lite(g, a, mask, sized),
        Some(Err(Error { errno, .. })) => out.d_errno = errno.code(),
        None => out.d_errno = libc::EIO,
    }
    out
}

fn getdents_impl(
    fd: c_int,
    mask: c_ulong,
    buf: *mut pvfs_dirent_plus,
    count: c_uint,
) -> CResult<c_int> {
    let buf = out(buf)?;
    if count == 0 {
        return Err(fail(libc::EINVAL, "count is 0"));
    }
    let count = count.min(c_int::MAX as c_uint) as usize;
    let o = get_fd(fd)?;
    let d = o.dir()?;
    let mut cur = lock(&d.cur);
    let level = if wants_size(mask) {
        Level::Sizes
    } else {
        Level::Attrs
    };
    ensure(&o.g, d, &mut cur, level)?;
    let pos = cur.pos;
    let Some(listing) = cur.listing.as_ref() else {
        return Err(fail(libc::EIO, "directory listing missing"));
    };
    let sized = listing.level == Level::Sizes;
    let rest = listing.items.get(pos..).unwrap_or(&[]);
    let n = rest.len().min(count);
    for (i, (e, a)) in rest[..n].iter().enumerate() {
        let entry = plus_entry(&o.g, e, a.as_ref(), mask, sized);
        // SAFETY: `buf` is non-NULL and valid for `count > i` entries by the caller's
        // contract; `write` makes no reference to possibly uninitialized memory.
        unsafe { buf.add(i).write(entry) };
    }
    cur.pos = pos + n;
    Ok(n as c_int)
}

/// `getdents_plus` of the POSIX extensions paper (Vilayannur et al., 2008): reads up to
/// `count` entries of the directory open as `fd` into the array `buf`, each with all
/// its attributes (`d_stat.st_litemask` = `PVFS_SLITE_ALL`, sizes included) and a
/// per-entry `d_errno`. The first call (or the first after `pvfs_lseek(fd, 0,
/// SEEK_SET)`) fetches the whole listing with the two-phase algorithm: one ReadDir per
/// directory shard, one ListAttr per metadata server, one GetSizes per data server (1 +
/// 2m message pairs, plus shards, for m servers — not one per entry); later calls
/// continue from the descriptor's position without any request. "." and ".." are not
/// listed. Returns the number of entries stored (0 at the end), or -1 with errno:
/// EBADF, ENOTDIR, EFAULT, EINVAL (`count` 0), EIO/EHOSTDOWN/ETIMEDOUT.
///
/// # Safety
/// `buf` is NULL or writable for `count` `struct pvfs_dirent_plus`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_getdents_plus(
    fd: c_int,
    buf: *mut pvfs_dirent_plus,
    count: c_uint,
) -> c_int {
    ffi(-1, || getdents_impl(fd, PVFS_SLITE_ALL, buf, count))
}

/// `getdents_plus_lite` of the POSIX extensions paper (Vilayannur et al., 2008):
/// `pvfs_getdents_plus` fetching only the lazy attributes in `lite_mask`
/// (`PVFS_SLITE_*`): without `PVFS_SLITE_SIZE` and `PVFS_SLITE_BLOCKS` the data servers
/// are not contacted at all (phase 2 is skipped). Each entry's `d_stat.st_litemask`
/// tells which lazy fields are valid. A listing fetched without sizes is fetched again
/// if a later call on the same descriptor asks for them.
///
/// # Safety
/// As `pvfs_getdents_plus`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_getdents_plus_lite(
    fd: c_int,
    lite_mask: c_ulong,
    buf: *mut pvfs_dirent_plus,
    count: c_uint,
) -> c_int {
    ffi(-1, || getdents_impl(fd, lite_mask, buf, count))
}

/// `opendir(3)`: opens directory `path` as a stream for `pvfs_readdir` (its
/// descriptor is `pvfs_dirfd`). Costs the path's lookups. Returns the stream, or NULL
/// with errno: ENOENT, ENOTDIR, EACCES, EFAULT, EMFILE, EIO.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pvfs_opendir(path: *const c_char) -> *mut pvfs_dir {
    ffi(std::ptr::null_mut(), || {
        // SAFETY: by contract.
        let p = unsafe { self::path(path) }?;
        let g = global()?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        let target = open_target(&g, p, flags, 0, Default::default())?;
        let fd = fd_for(&g, flags, target, false)?;
        let dir = Box::new(pvfs_dir {
            fd,
            ent: pvfs_dirent {
                d_ino: 0,
                d_type: 0,
                d_name: [0; 256],
            },
        });
        Ok(Box::into_raw(dir))
    })
}

/// `readdir(3)`: the next entry of the stream, or NULL at the end (errno unchanged)
/// or on error (errno set: EBADF, EIO/EHOSTDOWN/ETIMEDOUT). The first call fetches
/// the names (one ReadDir per shard); the entry is overwritten by the next call on
/// the same stream. "." and ".." are not listed.
///
/// # Safety
/// `dir` is NULL or a stream from `pvfs_opendir` not yet closed, used by one thread
/// at a time.
#[no_mangle]
pub unsafe extern "C" fn pvfs_readdir(dir: *mut pvfs_dir) -> *mut pvfs_dirent {
    ffi(std::ptr::null_mut(), || {
        // SAFETY: NULL or a live stream by contract.
        let Some(dir) = (unsafe { dir.as_mut() }) else {
            return Err(fail(libc::EBADF, "NULL directory stream"));
        };
        let o = get_fd(dir.fd)?;
        let d = o.dir()?;
        let mut cur = lock(&d.cur);
        ensure(&o.g, d, &mut cur, Level::Names)?;
        let pos = cur.pos;
        let Some((e, _)) = cur.listing.as_ref().and_then(|l| l.items.get(pos)) else {
            return Ok(std::ptr::null_mut());
        };
        dir.ent.d_ino = e.handle as libc::ino_t;
        dir.ent.d_type = dtype(e.kind);
        name_into(&mut dir.ent.d_name, &e.name);
        cur.pos = pos + 1;
        Ok(&mut dir.ent as *mut pvfs_dirent)
    })
}

/// `rewinddir(3)`: back to the first entry; the next read fetches the listing again.
///
/// # Safety
/// As `pvfs_readdir`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_rewinddir(dir: *mut pvfs_dir) {
    // SAFETY: NULL or a live stream by contract.
    if let Some(dir) = unsafe { dir.as_ref() } {
        crate::file::pvfs_lseek(dir.fd, 0, libc::SEEK_SET);
    }
}

/// `dirfd(3)`: the stream's descriptor (usable with `pvfs_getdents_plus`,
/// `pvfs_fstat`, `pvfs_lseek`), or -1 with errno EINVAL for NULL.
///
/// # Safety
/// As `pvfs_readdir`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_dirfd(dir: *mut pvfs_dir) -> c_int {
    ffi(-1, || {
        // SAFETY: NULL or a live stream by contract.
        match unsafe { dir.as_ref() } {
            Some(d) => Ok(d.fd),
            None => Err(fail(libc::EINVAL, "NULL directory stream")),
        }
    })
}

/// `closedir(3)`: closes the stream and its descriptor and frees it. Returns 0, or -1
/// with errno EBADF.
///
/// # Safety
/// `dir` is NULL or a stream from `pvfs_opendir` not yet closed; it must not be used
/// afterwards.
#[no_mangle]
pub unsafe extern "C" fn pvfs_closedir(dir: *mut pvfs_dir) -> c_int {
    ffi(-1, || {
        if dir.is_null() {
            return Err(fail(libc::EBADF, "NULL directory stream"));
        }
        // SAFETY: a stream made by `Box::into_raw` in `pvfs_opendir`, closed once.
        let d = unsafe { Box::from_raw(dir) };
        remove_fd(d.fd)?;
        Ok(0)
    })
}
