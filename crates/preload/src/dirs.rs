//! Directory streams: opendir/fdopendir/readdir(64)/readdir(64)_r/closedir/dirfd/
//! rewinddir/telldir/seekdir, and getdents64 on pvfs directory descriptors.
//!
//! glibc's `opendir` opens and reads with internal calls no hook sees, so a pvfs
//! directory gets a stream of the library's own: a `DIR *` that points to a [`Stream`]
//! (registered, so every stream call can tell its own from glibc's) over a pvfs
//! directory descriptor. The listing is read once per descriptor (all shards, one
//! request per server) and handed out from the description's offset, so a stream and
//! `getdents64` on its `dirfd` agree; "." and ".." come first.

use std::sync::Arc;

use libc::{c_char, c_int, c_long, c_void, dirent, dirent64, size_t, ssize_t, DIR};
use pvfs_client::DirEntry;

use crate::desc::{Desc, Ent, Kind};
use crate::fds::{on_fd, on_open_fd, route};
use crate::globals::{self, new_stream, remove_stream, stream, Stream, FDS, LISTINGS};
use crate::hook::{guarded, pvfs_call, R};
use crate::io::open_pvfs;
use crate::proc::Proc;
use crate::real;

#[no_mangle]
unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    // SAFETY: opendir's argument, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::opendir(path),
            |p| {
                let fd = open_pvfs(&p, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0)?;
                Ok(new_stream(fd))
            },
        )
    }
}

#[no_mangle]
unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    on_fd(
        fd,
        // SAFETY: no memory preconditions.
        || unsafe { real::fdopendir(fd) },
        |d| {
            if d.kind != Kind::Dir {
                return Err(libc::ENOTDIR);
            }
            Ok(new_stream(fd))
        },
    )
}

/// The listing of directory description `d` ("." and ".." first), read from the
/// servers on first use and after a rewind; it becomes the latest listing, whose
/// attributes may answer the stats that follow (`cache.rs`).
fn listing(d: &Desc, pr: &Proc) -> R<Arc<Vec<Ent>>> {
    d.listing(pr, || {
        let changes = LISTINGS.changes();
        let entries = pr.call(pr.client().readdir_at(d.handle))?;
        let mut v = Vec::with_capacity(entries.len() + 2);
        v.push(Ent {
            name: b".".to_vec(),
            ino: d.handle,
            dtype: libc::DT_DIR,
        });
        v.push(Ent {
            name: b"..".to_vec(),
            ino: d.parent,
            dtype: libc::DT_DIR,
        });
        v.extend(entries.into_iter().map(ent));
        LISTINGS.listed(&d.path, d.handle, changes);
        Ok(v)
    })
}

/// A listing's entry for a directory entry of the client.
fn ent(e: DirEntry) -> Ent {
    Ent {
        ino: e.handle,
        dtype: e.kind.d_type(),
        name: e.name.into_bytes(),
    }
}

/// The next entry of description `d`, or `None` at the end.
fn next(d: &Desc) -> R<Option<Ent>> {
    if d.kind != Kind::Dir || d.path_only() {
        return Err(libc::EBADF);
    }
    let pr = globals::proc()?;
    let mut pos = d.pos();
    let list = listing(d, pr)?;
    match list.get(*pos as usize) {
        Some(e) => {
            *pos += 1;
            Ok(Some(e.clone()))
        }
        None => Ok(None),
    }
}

/// Fills a `dirent64` with `e`, whose index in the listing is `idx`.
fn fill(out: &mut dirent64, e: &Ent, idx: u64) {
    out.d_ino = e.ino;
    out.d_off = (idx + 1) as i64;
    out.d_reclen = std::mem::size_of::<dirent64>() as u16;
    out.d_type = e.dtype;
    let n = e.name.len().min(out.d_name.len() - 1);
    for (dst, &src) in out.d_name.iter_mut().zip(&e.name[..n]) {
        *dst = src as c_char;
    }
    out.d_name[n] = 0;
}

/// readdir on pvfs stream `s`: the entry, null at the end (errno untouched).
fn readdir_stream(s: *mut Stream) -> R<*mut dirent64> {
    // SAFETY: s is a registered stream; POSIX does not allow one stream to be used by
    // two threads at once, and closedir (which frees it) is not running.
    let s = unsafe { &mut *s };
    let d = FDS.get(s.fd).ok_or(libc::EBADF)?;
    let idx = *d.pos();
    match next(&d)? {
        Some(e) => {
            fill(&mut s.ent, &e, idx);
            Ok(&mut s.ent)
        }
        None => Ok(std::ptr::null_mut()),
    }
}

const _: () = assert!(std::mem::size_of::<dirent>() == std::mem::size_of::<dirent64>());

#[no_mangle]
unsafe extern "C" fn readdir64(dir: *mut DIR) -> *mut dirent64 {
    guarded(|| match stream(dir) {
        // SAFETY: a glibc stream, passed on.
        None => unsafe { real::readdir64(dir) },
        Some(s) => pvfs_call(|| readdir_stream(s)),
    })
}

#[no_mangle]
unsafe extern "C" fn readdir(dir: *mut DIR) -> *mut dirent {
    guarded(|| match stream(dir) {
        // SAFETY: a glibc stream, passed on.
        None => unsafe { real::readdir(dir) },
        // dirent and dirent64 are one layout on 64-bit Linux.
        Some(s) => pvfs_call(|| readdir_stream(s)).cast(),
    })
}

/// readdir_r on a pvfs stream: copies into `entry`, sets `*result`.
fn readdir_r_stream(s: *mut Stream, entry: *mut dirent64, result: *mut *mut dirent64) -> c_int {
    if entry.is_null() || result.is_null() {
        return libc::EFAULT;
    }
    match pvfs_call(|| readdir_stream(s).map(|p| p as isize)) {
        -1 => crate::hook::errno(),
        0 => {
            // SAFETY: result is a writable pointer slot (checked non-null).
            unsafe { *result = std::ptr::null_mut() };
            0
        }
        p => {
            // SAFETY: p is the stream's entry; entry holds a dirent64 (the caller's
            // contract); result is writable.
            unsafe {
                std::ptr::copy_nonoverlapping(p as *const dirent64, entry, 1);
                *result = entry;
            }
            0
        }
    }
}

#[no_mangle]
unsafe extern "C" fn readdir64_r(
    dir: *mut DIR,
    entry: *mut dirent64,
    result: *mut *mut dirent64,
) -> c_int {
    guarded(|| match stream(dir) {
        // SAFETY: a glibc stream, passed on.
        None => unsafe { real::readdir64_r(dir, entry, result) },
        Some(s) => readdir_r_stream(s, entry, result),
    })
}

#[no_mangle]
unsafe extern "C" fn readdir_r(
    dir: *mut DIR,
    entry: *mut dirent,
    result: *mut *mut dirent,
) -> c_int {
    guarded(|| match stream(dir) {
        // SAFETY: a glibc stream, passed on.
        None => unsafe { real::readdir_r(dir, entry, result) },
        Some(s) => readdir_r_stream(s, entry.cast(), result.cast()),
    })
}

#[no_mangle]
unsafe extern "C" fn closedir(dir: *mut DIR) -> c_int {
    guarded(|| {
        if stream(dir).is_none() {
            // SAFETY: a glibc stream, passed on.
            return unsafe { real::closedir(dir) };
        }
        match remove_stream(dir) {
            // SAFETY: the stream's own descriptor, closed through the close hook.
            Some(b) => unsafe { crate::io::close_hook(b.fd) },
            None => {
                crate::hook::set_errno(libc::EBADF);
                -1
            }
        }
    })
}

#[no_mangle]
unsafe extern "C" fn dirfd(dir: *mut DIR) -> c_int {
    guarded(|| match stream(dir) {
        // SAFETY: a glibc stream, passed on.
        None => unsafe { real::dirfd(dir) },
        // SAFETY: a registered stream.
        Some(s) => unsafe { (*s).fd },
    })
}

#[no_mangle]
unsafe extern "C" fn rewinddir(dir: *mut DIR) {
    guarded(|| match stream(dir) {
        // SAFETY: a glibc stream, passed on.
        None => unsafe { real::rewinddir(dir) },
        Some(s) => {
            // SAFETY: a registered stream.
            if let Some(d) = FDS.get(unsafe { (*s).fd }) {
                *d.pos() = 0;
                d.forget_listing();
            }
        }
    })
}

#[no_mangle]
unsafe extern "C" fn telldir(dir: *mut DIR) -> c_long {
    guarded(|| match stream(dir) {
        // SAFETY: a glibc stream, passed on.
        None => unsafe { real::telldir(dir) },
        // SAFETY: a registered stream.
        Some(s) => match FDS.get(unsafe { (*s).fd }) {
            Some(d) => *d.pos() as c_long,
            None => {
                crate::hook::set_errno(libc::EBADF);
                -1
            }
        },
    })
}

#[no_mangle]
unsafe extern "C" fn seekdir(dir: *mut DIR, pos: c_long) {
    guarded(|| match stream(dir) {
        // SAFETY: a glibc stream, passed on.
        None => unsafe { real::seekdir(dir, pos) },
        Some(s) => {
            // SAFETY: a registered stream.
            if let Some(d) = FDS.get(unsafe { (*s).fd }) {
                *d.pos() = pos.max(0) as u64;
            }
        }
    })
}

/// Bytes of a `linux_dirent64` record for a name of `len` bytes (8-byte aligned).
fn reclen(len: usize) -> usize {
    (19 + len + 1).div_ceil(8) * 8
}

/// getdents64 on a pvfs directory description: as many records as fit. The records
/// are the kernel's `linux_dirent64`, in host byte order by definition.
#[allow(clippy::host_endian_bytes)]
fn getdents_desc(d: &Desc, buf: *mut c_void, n: usize) -> R<ssize_t> {
    if d.kind != Kind::Dir {
        return Err(libc::ENOTDIR);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    let pr = globals::proc()?;
    let mut pos = d.pos();
    let list = listing(d, pr)?;
    // SAFETY: the caller's buffer holds n bytes.
    let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
    let mut used = 0;
    while let Some(e) = list.get(*pos as usize) {
        let len = reclen(e.name.len());
        if used + len > out.len() {
            if used == 0 {
                return Err(libc::EINVAL);
            }
            break;
        }
        let rec = &mut out[used..used + len];
        rec.fill(0);
        rec[0..8].copy_from_slice(&e.ino.to_ne_bytes());
        rec[8..16].copy_from_slice(&(*pos as i64 + 1).to_ne_bytes());
        rec[16..18].copy_from_slice(&(len as u16).to_ne_bytes());
        rec[18] = e.dtype;
        rec[19..19 + e.name.len()].copy_from_slice(&e.name);
        used += len;
        *pos += 1;
    }
    Ok(used as ssize_t)
}

#[no_mangle]
unsafe extern "C" fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: getdents64's arguments, passed on.
        || unsafe { real::getdents64(fd, buf, n) },
        |d| getdents_desc(&d, buf, n),
    )
}
