//! Descriptor hooks: open, close, read, write and their positioned and vectored forms,
//! lseek, dup/dup2/dup3/fcntl, fstat, ftruncate, fsync, and the entry points of the C
//! shim (`pvfs_preload_*`).
//!
//! Reads and writes go to [`pvfs_client::File::read_at`]/`write_at` at the
//! description's offset, holding the offset lock for the whole call. `O_APPEND` writes
//! go to [`pvfs_client::File::append`], atomic against every other client's.
//! Nothing is cached: a write is on the servers when it returns.

use std::sync::Arc;

use libc::{c_char, c_int, c_uint, c_ulong, c_void, iovec, off64_t, size_t, ssize_t};
use pvfs_client::{Errno as PErrno, LayoutSpec, ObjKind};
use pvfs_proto::ObjDetail;

use crate::client_error::client_errno;
use crate::desc::{Desc, Kind};
use crate::fds::{self, on_fd, on_open_fd, route};
use crate::globals::{self, FDS, LISTINGS};
use crate::hook::{export, guarded, pvfs_call, set_errno, R};
use crate::real;

/// Largest single transfer, as Linux's MAX_RW_COUNT.
const MAX_RW: usize = 0x7fff_f000;

// ----- open and close --------------------------------------------------------------

/// Opens pvfs path `path` with open(2) `flags` and `mode`; returns the placeholder
/// descriptor. With `O_PATH` only `O_CLOEXEC`, `O_DIRECTORY` and `O_NOFOLLOW` count
/// (as for the kernel): the object is looked up, not opened, and the descriptor
/// serves `fstat`, `fchdir` and as the directory of `*at` calls.
pub(crate) fn open_pvfs(path: &str, flags: c_int, mode: u32) -> R<c_int> {
    let opath = flags & libc::O_PATH != 0;
    let flags = if opath {
        flags & (libc::O_PATH | libc::O_CLOEXEC | libc::O_DIRECTORY | libc::O_NOFOLLOW)
    } else {
        flags
    };
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(libc::EOPNOTSUPP);
    }
    let acc = flags & libc::O_ACCMODE;
    if acc == libc::O_ACCMODE {
        return Err(libc::EINVAL);
    }
    let pr = globals::proc()?;
    let c = pr.client();
    if flags & (libc::O_CREAT | libc::O_TRUNC) != 0 {
        LISTINGS.changed();
    }
    let mut created = None;
    if flags & libc::O_CREAT != 0 {
        if flags & libc::O_DIRECTORY != 0 {
            return Err(libc::EINVAL);
        }
        // The servers apply the umask, unless a default ACL decides.
        let c = c.with_umask(globals::umask());
        match pr.run(c.create(path, mode & 0o7777, LayoutSpec::default(), true)) {
            Ok(f) => created = Some(f),
            Err(e) if e.errno == PErrno::EEXIST && flags & libc::O_EXCL == 0 => {}
            Err(e) if e.errno == PErrno::EBUSY => return Err(libc::EISDIR),
            Err(e) => return Err(client_errno(e)),
        }
    }
    let was_created = created.is_some();
    let looked_up = opath || flags & (libc::O_NOFOLLOW | libc::O_DIRECTORY) != 0;
    let (kind, attr, file) = match created {
        Some(f) => (Kind::File, f.attr().clone(), Some(f)),
        None if looked_up => {
            let attr = if flags & libc::O_NOFOLLOW != 0 {
                pr.call(c.lstat_lite(path))?
            } else {
                pr.call(c.stat_lite(path))?
            };
            match attr.kind() {
                ObjKind::Dir => (Kind::Dir, attr, None),
                _ if flags & libc::O_DIRECTORY != 0 => return Err(libc::ENOTDIR),
                ObjKind::File if opath => (Kind::File, attr, None),
                ObjKind::Symlink | ObjKind::Node(_) if opath => (Kind::Other, attr, None),
                ObjKind::Symlink => return Err(libc::ELOOP),
                // Only a kernel gives a FIFO or device meaning.
                ObjKind::Node(_) => return Err(libc::ENXIO),
                ObjKind::File => {
                    let f = pr.call(c.open_handle(attr.handle))?;
                    (Kind::File, attr, Some(f))
                }
            }
        }
        None => match pr.run(c.open(path)) {
            Ok(f) => (Kind::File, f.attr().clone(), Some(f)),
            Err(e) if e.errno == PErrno::EISDIR => (Kind::Dir, pr.call(c.stat_lite(path))?, None),
            Err(e) => return Err(client_errno(e)),
        },
    };
    match kind {
        // O_PATH needs no permission on the object itself.
        _ if opath => {}
        Kind::Dir if acc != libc::O_RDONLY || flags & libc::O_CREAT != 0 => {
            return Err(libc::EISDIR)
        }
        Kind::Dir if !pr.may(&attr, libc::R_OK as u32) => return Err(libc::EACCES),
        Kind::File if !was_created => {
            let mut want = 0;
            if acc != libc::O_WRONLY {
                want |= libc::R_OK as u32;
            }
            if acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
                want |= libc::W_OK as u32;
            }
            if !pr.may(&attr, want) {
                return Err(libc::EACCES);
            }
        }
        _ => {}
    }
    if kind == Kind::File && flags & libc::O_TRUNC != 0 && !was_created {
        if let Some(f) = &file {
            pr.call(f.truncate(0))?;
        }
    }
    let parent = match attr.detail {
        ObjDetail::Dir { parent, .. } => parent,
        _ => 0,
    };
    // A file is held open at its server, so another client's unlink or rename over
    // it leaves it to this description until its last close (`pvfs_client::holds`).
    let held = kind == Kind::File && !opath;
    if held {
        pr.call(c.hold(attr.handle))?;
    }
    let writable = kind == Kind::File && !opath && acc != libc::O_RDONLY;
    let ph = match crate::desc::placeholder(path, flags & libc::O_CLOEXEC != 0, writable) {
        Ok(v) => v,
        Err(e) => {
            if held {
                pr.run(c.unhold(attr.handle));
            }
            return Err(e);
        }
    };
    let mut status = flags;
    if kind == Kind::Dir {
        status |= libc::O_DIRECTORY;
    }
    let desc = Desc::new(
        kind,
        path.to_string(),
        attr.handle,
        parent,
        status,
        file,
        ph.ident,
        globals::generation(),
        globals::next_desc_id(),
    );
    desc.set_keeper(ph.keeper);
    let fd = ph.fd;
    if held {
        desc.mark_held();
    }
    drop(FDS.insert(fd, Arc::new(desc)));
    Ok(fd)
}

/// open/openat/open64/openat64 (from the C shim, which fetched the mode).
#[no_mangle]
unsafe extern "C" fn pvfs_preload_openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: open's arguments, passed on unchanged.
    unsafe {
        route(
            dirfd,
            path,
            |dirfd, path| real::openat(dirfd, path, flags, mode),
            |p| open_pvfs(&p, flags, mode),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn creat(path: *const c_char, mode: libc::mode_t) -> c_int {
    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    // SAFETY: as open.
    unsafe { pvfs_preload_openat(libc::AT_FDCWD, path, flags, mode) }
}

#[no_mangle]
unsafe extern "C" fn creat64(path: *const c_char, mode: libc::mode_t) -> c_int {
    // SAFETY: as creat.
    unsafe { creat(path, mode) }
}

// ----- temporary files ---------------------------------------------------------------

/// What mkstemp puts in place of the X's.
const TEMP_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
/// Names tried before a template is given up with EEXIST.
const TEMP_TRIES: usize = 1000;

/// The mkstemp family and mkdtemp on a template under the prefix (`sed -i`, `sort -o`
/// and rsync make their temporary files next to the target): glibc fills in and creates
/// the name with internal calls that no hook sees, so the library does both. The six
/// X's before the `suffix` last bytes get random characters, in the caller's template
/// and in pvfs path `p` alike, until `make` does not answer EEXIST.
///
/// # Safety
/// `template` is a writable NUL-terminated string.
unsafe fn temp_name<T>(
    template: *mut c_char,
    suffix: c_int,
    p: &str,
    make: impl Fn(&str) -> R<T>,
) -> R<T> {
    // SAFETY: the caller's contract.
    let len = unsafe { std::ffi::CStr::from_ptr(template) }
        .to_bytes()
        .len();
    let suffix = usize::try_from(suffix).map_err(|_| libc::EINVAL)?;
    let end = len.checked_sub(suffix).ok_or(libc::EINVAL)?;
    let start = end.checked_sub(6).ok_or(libc::EINVAL)?;
    // SAFETY: template holds len bytes before its NUL.
    let t = unsafe { std::slice::from_raw_parts_mut(template.cast::<u8>(), len) };
    let tail = t[start..].to_vec();
    if t[start..end] != *b"XXXXXX"
        || tail.contains(&b'/')
        || !p.ends_with(&*String::from_utf8_lossy(&tail))
    {
        return Err(libc::EINVAL);
    }
    let at = p.len() - tail.len();
    let mut name = p.as_bytes().to_vec();
    for _ in 0..TEMP_TRIES {
        let mut rnd = [0u8; 6];
        // SAFETY: rnd is writable for its length; getrandom is not hooked.
        if unsafe { libc::getrandom(rnd.as_mut_ptr().cast(), rnd.len(), 0) } != 6 {
            return Err(libc::EIO);
        }
        for (i, r) in rnd.iter().enumerate() {
            let c = TEMP_CHARS[*r as usize % TEMP_CHARS.len()];
            t[start + i] = c;
            name[at + i] = c;
        }
        let q = std::str::from_utf8(&name).map_err(|_| libc::EILSEQ)?;
        match make(q) {
            Err(libc::EEXIST) => continue,
            r => return r,
        }
    }
    Err(libc::EEXIST)
}

/// mkostemps and its forms: `local` for a local template, else a new pvfs file open
/// read-write with `flags` (mode 0600).
///
/// # Safety
/// `template` is a writable NUL-terminated string.
unsafe fn mkostemps_hook(
    template: *mut c_char,
    suffix: c_int,
    flags: c_int,
    local: impl FnOnce() -> c_int,
) -> c_int {
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | (flags & !libc::O_ACCMODE);
    // SAFETY: the template is the caller's path (local calls get it unchanged).
    unsafe {
        route(
            libc::AT_FDCWD,
            template,
            |_, _| local(),
            |p| temp_name(template, suffix, &p, |q| open_pvfs(q, flags, 0o600)),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn mkstemp(t: *mut c_char) -> c_int {
    // SAFETY: mkstemp's argument, passed on.
    unsafe { mkostemps_hook(t, 0, 0, || real::mkstemp(t)) }
}

#[no_mangle]
unsafe extern "C" fn mkstemp64(t: *mut c_char) -> c_int {
    // SAFETY: mkstemp64's argument, passed on.
    unsafe { mkostemps_hook(t, 0, 0, || real::mkstemp64(t)) }
}

#[no_mangle]
unsafe extern "C" fn mkostemp(t: *mut c_char, flags: c_int) -> c_int {
    // SAFETY: mkostemp's arguments, passed on.
    unsafe { mkostemps_hook(t, 0, flags, || real::mkostemp(t, flags)) }
}

#[no_mangle]
unsafe extern "C" fn mkostemp64(t: *mut c_char, flags: c_int) -> c_int {
    // SAFETY: mkostemp64's arguments, passed on.
    unsafe { mkostemps_hook(t, 0, flags, || real::mkostemp64(t, flags)) }
}

#[no_mangle]
unsafe extern "C" fn mkstemps(t: *mut c_char, suffix: c_int) -> c_int {
    // SAFETY: mkstemps's arguments, passed on.
    unsafe { mkostemps_hook(t, suffix, 0, || real::mkstemps(t, suffix)) }
}

#[no_mangle]
unsafe extern "C" fn mkstemps64(t: *mut c_char, suffix: c_int) -> c_int {
    // SAFETY: mkstemps64's arguments, passed on.
    unsafe { mkostemps_hook(t, suffix, 0, || real::mkstemps64(t, suffix)) }
}

#[no_mangle]
unsafe extern "C" fn mkostemps(t: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    // SAFETY: mkostemps's arguments, passed on.
    unsafe { mkostemps_hook(t, suffix, flags, || real::mkostemps(t, suffix, flags)) }
}

#[no_mangle]
unsafe extern "C" fn mkostemps64(t: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    // SAFETY: mkostemps64's arguments, passed on.
    unsafe { mkostemps_hook(t, suffix, flags, || real::mkostemps64(t, suffix, flags)) }
}

#[no_mangle]
unsafe extern "C" fn mkdtemp(t: *mut c_char) -> *mut c_char {
    // SAFETY: mkdtemp's argument, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            t,
            |_, _| real::mkdtemp(t),
            |p| {
                temp_name(t, 0, &p, |q| crate::meta::mkdir_pvfs(q, 0o700))?;
                Ok(t)
            },
        )
    }
}

/// close(2): forgets a pvfs descriptor, then closes the kernel descriptor.
///
/// # Safety
/// None beyond close's (no memory is touched).
pub(crate) unsafe fn close_hook(fd: c_int) -> c_int {
    guarded(|| {
        let old = if crate::hook::Busy::active() {
            None
        } else {
            FDS.remove(fd)
        };
        // SAFETY: close has no memory preconditions.
        let rc = unsafe { real::close(fd) };
        if let Some(d) = old {
            let e = crate::hook::errno();
            crate::locks::closed(&d);
            drop(d);
            set_errno(e);
            // The placeholder is gone either way; a pvfs close itself cannot fail.
            return 0;
        }
        rc
    })
}

export!(close => close_hook(fd: c_int) -> c_int);

#[no_mangle]
unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    guarded(|| {
        let gone = if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
            let hi = last.min(i32::MAX as c_uint) as c_int;
            FDS.remove_range(first.min(i32::MAX as c_uint) as c_int, hi)
        } else {
            Vec::new()
        };
        // SAFETY: no memory preconditions.
        let rc = unsafe { real::close_range(first, last, flags) };
        let e = crate::hook::errno();
        gone.iter().for_each(|d| crate::locks::closed(d));
        drop(gone);
        set_errno(e);
        rc
    })
}

#[no_mangle]
unsafe extern "C" fn closefrom(low: c_int) {
    guarded(|| {
        let gone = FDS.remove_range(low.max(0), i32::MAX);
        // SAFETY: no memory preconditions.
        unsafe { real::closefrom(low) };
        gone.iter().for_each(|d| crate::locks::closed(d));
        drop(gone);
    })
}

// ----- read and write --------------------------------------------------------------

/// Checks that `d` is a regular file open for reading (or writing).
fn check_io(d: &Desc, write: bool) -> R<()> {
    match d.kind {
        _ if d.path_only() => Err(libc::EBADF),
        Kind::Dir => Err(if write { libc::EBADF } else { libc::EISDIR }),
        Kind::Other => Err(libc::EBADF),
        Kind::File if write && !d.writable() => Err(libc::EBADF),
        Kind::File if !write && !d.readable() => Err(libc::EBADF),
        Kind::File => Ok(()),
    }
}

/// A caller's buffer as a byte slice (`n` capped at [`MAX_RW`]).
///
/// # Safety
/// `buf` is valid for `n` bytes (as read(2)'s caller promises).
unsafe fn out_buf<'a>(buf: *mut c_void, n: usize) -> R<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract; any byte pattern is a valid u8.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n.min(MAX_RW)) })
}

/// As [`out_buf`] for a buffer that is only read.
///
/// # Safety
/// `buf` is valid for reading `n` bytes.
unsafe fn in_buf<'a>(buf: *const c_void, n: usize) -> R<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n.min(MAX_RW)) })
}

/// read(2) on a pvfs description: at the offset, which advances.
pub(crate) fn read_desc(d: &Desc, buf: &mut [u8]) -> R<usize> {
    check_io(d, false)?;
    if buf.is_empty() {
        return Ok(0);
    }
    let pr = globals::proc()?;
    let f = d.file(pr)?;
    let mut pos = d.pos();
    let got = pr.call(f.read_at(*pos, buf))?;
    *pos += got as u64;
    Ok(got)
}

/// write(2) on a pvfs description: at the offset (or the end with `O_APPEND`).
pub(crate) fn write_desc(d: &Desc, buf: &[u8]) -> R<usize> {
    LISTINGS.changed();
    check_io(d, true)?;
    if buf.is_empty() {
        return Ok(0);
    }
    let pr = globals::proc()?;
    let f = d.file(pr)?;
    let mut pos = d.pos();
    let (at, n) = if d.status() & libc::O_APPEND != 0 {
        pr.call(f.append(buf))?
    } else {
        (*pos, pr.call(f.write_at(*pos, buf))?)
    };
    *pos = at + n as u64;
    Ok(n)
}

/// pread(2) on a pvfs description.
fn pread_desc(d: &Desc, buf: &mut [u8], off: i64) -> R<usize> {
    check_io(d, false)?;
    if off < 0 {
        return Err(libc::EINVAL);
    }
    if buf.is_empty() {
        return Ok(0);
    }
    let pr = globals::proc()?;
    let f = d.file(pr)?;
    pr.call(f.read_at(off as u64, buf))
}

/// pwrite(2) on a pvfs description (with `O_APPEND` it appends, as on Linux).
fn pwrite_desc(d: &Desc, buf: &[u8], off: i64) -> R<usize> {
    LISTINGS.changed();
    check_io(d, true)?;
    if off < 0 {
        return Err(libc::EINVAL);
    }
    if buf.is_empty() {
        return Ok(0);
    }
    let pr = globals::proc()?;
    let f = d.file(pr)?;
    if d.status() & libc::O_APPEND != 0 {
        return Ok(pr.call(f.append(buf))?.1);
    }
    pr.call(f.write_at(off as u64, buf))
}

#[no_mangle]
unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: read's arguments, passed on.
        || unsafe { real::read(fd, buf, n) },
        // SAFETY: the caller promises buf holds n bytes.
        |d| Ok(read_desc(&d, unsafe { out_buf(buf, n)? })? as ssize_t),
    )
}

#[no_mangle]
unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: write's arguments, passed on.
        || unsafe { real::write(fd, buf, n) },
        // SAFETY: the caller promises buf holds n bytes.
        |d| Ok(write_desc(&d, unsafe { in_buf(buf, n)? })? as ssize_t),
    )
}

unsafe fn pread_hook(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: pread's arguments, passed on.
        || unsafe { real::pread64(fd, buf, n, off) },
        // SAFETY: the caller promises buf holds n bytes.
        |d| Ok(pread_desc(&d, unsafe { out_buf(buf, n)? }, off)? as ssize_t),
    )
}

unsafe fn pwrite_hook(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: pwrite's arguments, passed on.
        || unsafe { real::pwrite64(fd, buf, n, off) },
        // SAFETY: the caller promises buf holds n bytes.
        |d| Ok(pwrite_desc(&d, unsafe { in_buf(buf, n)? }, off)? as ssize_t),
    )
}

export!(pread, pread64 => pread_hook(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t);
export!(pwrite, pwrite64 => pwrite_hook(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t);

/// The caller's iovec array.
///
/// # Safety
/// `iov` holds `cnt` iovecs.
unsafe fn iovecs<'a>(iov: *const iovec, cnt: c_int) -> R<&'a [iovec]> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    if cnt == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(iov, cnt as usize) })
}

/// Reads into `iov` with `read(buf)` (one call for the total, then scattered).
fn read_vec(iov: &[iovec], read: impl FnOnce(&mut [u8]) -> R<usize>) -> R<ssize_t> {
    let total: usize = iov.iter().map(|v| v.iov_len).sum::<usize>().min(MAX_RW);
    let mut tmp = vec![0u8; total];
    let n = read(&mut tmp)?;
    let mut done = 0;
    for v in iov {
        if done >= n {
            break;
        }
        let k = v.iov_len.min(n - done);
        // SAFETY: the caller promised iov_base holds iov_len bytes; k <= iov_len.
        unsafe { std::ptr::copy_nonoverlapping(tmp[done..].as_ptr(), v.iov_base.cast(), k) };
        done += k;
    }
    Ok(n as ssize_t)
}

/// Writes `iov` with `write(buf)` (gathered into one buffer, one call).
fn write_vec(iov: &[iovec], write: impl FnOnce(&[u8]) -> R<usize>) -> R<ssize_t> {
    let mut tmp = Vec::with_capacity(iov.iter().map(|v| v.iov_len).sum::<usize>().min(MAX_RW));
    for v in iov {
        // SAFETY: the caller promised iov_base holds iov_len bytes.
        let part = unsafe { in_buf(v.iov_base, v.iov_len)? };
        let room = MAX_RW - tmp.len();
        tmp.extend_from_slice(&part[..part.len().min(room)]);
    }
    Ok(write(&tmp)? as ssize_t)
}

#[no_mangle]
unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: readv's arguments, passed on.
        || unsafe { real::readv(fd, iov, cnt) },
        // SAFETY: the caller promises iov holds cnt entries.
        |d| read_vec(unsafe { iovecs(iov, cnt)? }, |b| read_desc(&d, b)),
    )
}

#[no_mangle]
unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: writev's arguments, passed on.
        || unsafe { real::writev(fd, iov, cnt) },
        // SAFETY: the caller promises iov holds cnt entries.
        |d| write_vec(unsafe { iovecs(iov, cnt)? }, |b| write_desc(&d, b)),
    )
}

unsafe fn preadv_hook(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: preadv's arguments, passed on.
        || unsafe { real::preadv64(fd, iov, cnt, off) },
        // SAFETY: the caller promises iov holds cnt entries.
        |d| read_vec(unsafe { iovecs(iov, cnt)? }, |b| pread_desc(&d, b, off)),
    )
}

unsafe fn pwritev_hook(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: pwritev's arguments, passed on.
        || unsafe { real::pwritev64(fd, iov, cnt, off) },
        // SAFETY: the caller promises iov holds cnt entries.
        |d| write_vec(unsafe { iovecs(iov, cnt)? }, |b| pwrite_desc(&d, b, off)),
    )
}

unsafe fn preadv2_hook(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: preadv2's arguments, passed on.
        || unsafe { real::preadv64v2(fd, iov, cnt, off, flags) },
        |d| {
            // SAFETY: the caller promises iov holds cnt entries.
            let iov = unsafe { iovecs(iov, cnt)? };
            if off == -1 {
                read_vec(iov, |b| read_desc(&d, b))
            } else {
                read_vec(iov, |b| pread_desc(&d, b, off))
            }
        },
    )
}

unsafe fn pwritev2_hook(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: pwritev2's arguments, passed on.
        || unsafe { real::pwritev64v2(fd, iov, cnt, off, flags) },
        |d| {
            // SAFETY: the caller promises iov holds cnt entries.
            let iov = unsafe { iovecs(iov, cnt)? };
            if off == -1 {
                write_vec(iov, |b| write_desc(&d, b))
            } else {
                write_vec(iov, |b| pwrite_desc(&d, b, off))
            }
        },
    )
}

export!(preadv, preadv64 => preadv_hook(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t);
export!(pwritev, pwritev64 => pwritev_hook(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t);
export!(preadv2, preadv64v2 => preadv2_hook(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t);
export!(pwritev2, pwritev64v2 => pwritev2_hook(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t);

// ----- seek --------------------------------------------------------------------------

/// lseek(2) on a pvfs description.
pub(crate) fn seek_desc(d: &Desc, off: i64, whence: c_int) -> R<i64> {
    match d.kind {
        _ if d.path_only() => Err(libc::EBADF),
        Kind::Other => Err(libc::EBADF),
        Kind::Dir => {
            let mut pos = d.pos();
            match whence {
                libc::SEEK_SET if off >= 0 => {
                    if off == 0 {
                        d.forget_listing();
                    }
                    *pos = off as u64;
                    Ok(off)
                }
                libc::SEEK_CUR if off == 0 => Ok(*pos as i64),
                _ => Err(libc::EINVAL),
            }
        }
        Kind::File => {
            let pr = globals::proc()?;
            let mut pos = d.pos();
            let size = || -> R<i64> {
                let f = d.file(pr)?;
                Ok(pr.call(f.size())? as i64)
            };
            let new = match whence {
                libc::SEEK_SET => off,
                libc::SEEK_CUR => (*pos as i64).checked_add(off).ok_or(libc::EOVERFLOW)?,
                libc::SEEK_END => size()?.checked_add(off).ok_or(libc::EOVERFLOW)?,
                libc::SEEK_DATA => {
                    if off < 0 || off >= size()? {
                        return Err(libc::ENXIO);
                    }
                    off
                }
                libc::SEEK_HOLE => {
                    let s = size()?;
                    if off < 0 || off >= s {
                        return Err(libc::ENXIO);
                    }
                    s
                }
                _ => return Err(libc::EINVAL),
            };
            if new < 0 {
                return Err(libc::EINVAL);
            }
            *pos = new as u64;
            Ok(new)
        }
    }
}

unsafe fn lseek_hook(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    on_open_fd(
        fd,
        // SAFETY: no memory preconditions.
        || unsafe { real::lseek64(fd, off, whence) },
        |d| seek_desc(&d, off, whence),
    )
}

export!(lseek, lseek64 => lseek_hook(fd: c_int, off: off64_t, whence: c_int) -> off64_t);

// ----- duplicating ------------------------------------------------------------------

#[no_mangle]
unsafe extern "C" fn dup(fd: c_int) -> c_int {
    on_fd(
        fd,
        // SAFETY: no memory preconditions.
        || unsafe { real::dup(fd) },
        |d| {
            // SAFETY: as above.
            let nfd = unsafe { real::dup(fd) };
            if nfd < 0 {
                return Err(crate::hook::errno());
            }
            drop(FDS.insert(nfd, d));
            Ok(nfd)
        },
    )
}

/// dup2/dup3: the kernel replaces `to` and the table follows under its lock.
fn dup_to(fd: c_int, to: c_int, real_dup: impl FnOnce() -> c_int) -> c_int {
    if crate::hook::Busy::active() {
        return real_dup();
    }
    guarded(|| {
        let from = FDS.get(fd);
        if from.is_none() && !FDS.is_pvfs(to) {
            return real_dup();
        }
        let (rc, e, old) = FDS.with_table(|t| {
            let rc = real_dup();
            let e = crate::hook::errno();
            let old = if rc >= 0 && fd != to {
                match from {
                    Some(d) => t.insert(to, d),
                    None => t.remove(to),
                }
            } else {
                None
            };
            (rc, e, old)
        });
        if let Some(d) = &old {
            // `to` was a pvfs descriptor: replacing it closed it.
            crate::locks::closed(d);
        }
        drop(old);
        set_errno(e);
        rc
    })
}

#[no_mangle]
unsafe extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    dup_to(fd, to, || unsafe { real::dup2(fd, to) })
}

#[no_mangle]
unsafe extern "C" fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    dup_to(fd, to, || unsafe { real::dup3(fd, to, flags) })
}

/// fcntl on a pvfs description. The kernel keeps the descriptor flags (`FD_CLOEXEC`)
/// on the placeholder; the status flags live in the description. Record and OFD
/// locks go to the servers (`crate::locks`).
fn fcntl_desc(d: Arc<Desc>, fd: c_int, cmd: c_int, arg: usize) -> R<c_int> {
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            // SAFETY: the caller's argument, passed on.
            let nfd = unsafe { real::fcntl(fd, cmd, arg) };
            if nfd < 0 {
                return Err(crate::hook::errno());
            }
            drop(FDS.insert(nfd, d));
            Ok(nfd)
        }
        libc::F_GETFL => Ok(d.acc | d.status()),
        libc::F_SETFL => {
            let new = arg as c_int & crate::desc::SETFL_FLAGS;
            let old = d.status();
            d.flags.store(
                (old & !crate::desc::SETFL_FLAGS) | new,
                std::sync::atomic::Ordering::Relaxed,
            );
            Ok(0)
        }
        // Record locks need a descriptor open for I/O, as the kernel's.
        libc::F_GETLK
        | libc::F_OFD_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW
            if d.path_only() =>
        {
            Err(libc::EBADF)
        }
        libc::F_GETLK
        | libc::F_OFD_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => crate::locks::fcntl_lock(&d, cmd, arg),
        // SAFETY: the caller's argument, passed on (descriptor flags and the rest).
        _ => Ok(unsafe { real::fcntl(fd, cmd, arg) }),
    }
}

/// fcntl/fcntl64 (from the C shim, which fetched the optional argument).
#[no_mangle]
unsafe extern "C" fn pvfs_preload_fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    on_fd(
        fd,
        // SAFETY: the caller's argument, passed on.
        || unsafe { real::fcntl(fd, cmd, arg) },
        |d| fcntl_desc(d, fd, cmd, arg),
    )
}

/// FICLONE and FICLONERANGE (reflink): never between pvfs and anything.
const FICLONE: c_ulong = 0x4004_9409;
const FICLONERANGE: c_ulong = 0x4020_940d;

/// ioctl (from the C shim): pvfs descriptors answer ENOTTY (no terminal, no device
/// controls) except close-on-exec requests; a reflink from a pvfs source is EXDEV.
#[no_mangle]
unsafe extern "C" fn pvfs_preload_ioctl(fd: c_int, request: c_ulong, arg: usize) -> c_int {
    if crate::hook::Busy::active() {
        // SAFETY: the caller's argument, passed on.
        return unsafe { real::ioctl(fd, request, arg) };
    }
    guarded(|| {
        let src = match request {
            FICLONE => Some(arg as c_int),
            FICLONERANGE if arg != 0 => {
                // SAFETY: FICLONERANGE's argument points to a struct file_clone_range,
                // whose first field is the source descriptor (s64).
                Some(unsafe { *(arg as *const i64) } as c_int)
            }
            _ => None,
        };
        let pvfs_src = src.is_some_and(|s| FDS.is_pvfs(s));
        if !FDS.is_pvfs(fd) && !pvfs_src {
            // SAFETY: the caller's argument, passed on.
            return unsafe { real::ioctl(fd, request, arg) };
        }
        let e = match request {
            libc::FIOCLEX | libc::FIONCLEX => {
                // SAFETY: as above.
                return unsafe { real::ioctl(fd, request, arg) };
            }
            FICLONE | FICLONERANGE => libc::EXDEV,
            _ => libc::ENOTTY,
        };
        set_errno(e);
        -1
    })
}

// ----- attributes, sync, size ---------------------------------------------------------

/// fstat on a pvfs description (`O_PATH` ones too, as the kernel allows).
fn fstat_desc(d: Arc<Desc>, buf: *mut libc::stat) -> R<c_int> {
    crate::meta::stat_into(&fds::Obj::Fd(d), false, buf)
}

unsafe fn fstat_hook(fd: c_int, buf: *mut libc::stat) -> c_int {
    on_fd(
        fd,
        // SAFETY: fstat's arguments, passed on.
        || unsafe { real::fstat(fd, buf) },
        |d| fstat_desc(d, buf),
    )
}

unsafe fn fstat64_hook(fd: c_int, buf: *mut libc::stat64) -> c_int {
    // SAFETY: stat and stat64 are one layout on 64-bit Linux (checked below).
    unsafe { fstat_hook(fd, buf.cast()) }
}

unsafe fn fxstat_hook(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int {
    on_fd(
        fd,
        // SAFETY: __fxstat's arguments, passed on.
        || unsafe { real::__fxstat(ver, fd, buf) },
        |d| fstat_desc(d, buf),
    )
}

const _: () = assert!(std::mem::size_of::<libc::stat>() == std::mem::size_of::<libc::stat64>());

export!(fstat => fstat_hook(fd: c_int, buf: *mut libc::stat) -> c_int);
export!(fstat64 => fstat64_hook(fd: c_int, buf: *mut libc::stat64) -> c_int);
export!(__fxstat, __fxstat64 => fxstat_hook(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int);

unsafe fn ftruncate_hook(fd: c_int, len: off64_t) -> c_int {
    on_open_fd(
        fd,
        // SAFETY: no memory preconditions.
        || unsafe { real::ftruncate64(fd, len) },
        |d| {
            if d.kind != Kind::File || !d.writable() {
                return Err(libc::EINVAL);
            }
            if len < 0 {
                return Err(libc::EINVAL);
            }
            LISTINGS.changed();
            let pr = globals::proc()?;
            let f = d.file(pr)?;
            pr.call(f.truncate(len as u64))?;
            Ok(0)
        },
    )
}

export!(ftruncate, ftruncate64 => ftruncate_hook(fd: c_int, len: off64_t) -> c_int);

/// fsync/fdatasync on a pvfs description: a file's data, and every metadata change
/// acknowledged so far (a directory: that part alone).
fn sync_desc(d: &Desc) -> R<c_int> {
    match d.kind {
        Kind::File => {
            let pr = globals::proc()?;
            let f = d.file(pr)?;
            pr.call(f.fsync())?;
            Ok(0)
        }
        Kind::Dir => {
            let pr = globals::proc()?;
            pr.call(pr.client().sync_metadata())?;
            Ok(0)
        }
        Kind::Other => Err(libc::EBADF),
    }
}

/// syncfs on pvfs: everything the file system acknowledged made stable.
fn sync_fs() -> R<c_int> {
    let pr = globals::proc()?;
    pr.call(pr.client().syncfs())?;
    Ok(0)
}

#[no_mangle]
unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    on_open_fd(fd, || unsafe { real::fsync(fd) }, |d| sync_desc(&d))
}

#[no_mangle]
unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    on_open_fd(fd, || unsafe { real::fdatasync(fd) }, |d| sync_desc(&d))
}

#[no_mangle]
unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    on_open_fd(fd, || unsafe { real::syncfs(fd) }, |_| sync_fs())
}

/// sync(2): the local file systems, then pvfs if this process has used it (errors
/// are not reported: sync returns nothing).
#[no_mangle]
unsafe extern "C" fn sync() {
    // SAFETY: the sync system call has no arguments and no memory preconditions;
    // calling it directly (not libc's sync) cannot land in this hook again.
    unsafe { libc::syscall(libc::SYS_sync) };
    if globals::started() {
        let _ = sync_fs();
    }
}

#[no_mangle]
unsafe extern "C" fn isatty(fd: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    on_fd(fd, || unsafe { real::isatty(fd) }, |_| Err(libc::ENOTTY)).max(0)
}

// ----- the C shim's stdio entry points -------------------------------------------------

/// open(2) flags for an fopen mode string.
fn fopen_flags(mode: &[u8]) -> R<c_int> {
    let mut it = mode.iter();
    let mut flags = match it.next() {
        Some(b'r') => libc::O_RDONLY,
        Some(b'w') => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        Some(b'a') => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        _ => return Err(libc::EINVAL),
    };
    for &c in it {
        match c {
            b'+' => flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR,
            b'x' => flags |= libc::O_EXCL,
            b'e' => flags |= libc::O_CLOEXEC,
            b',' => break,
            _ => {}
        }
    }
    Ok(flags)
}

/// fopen's routing: 0 = not pvfs, 1 = opened `*fd`, -1 = error (errno set).
#[no_mangle]
unsafe extern "C" fn pvfs_preload_fopen(
    path: *const c_char,
    mode: *const c_char,
    fd: *mut c_int,
) -> c_int {
    // SAFETY: fopen's arguments.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, _| 0,
            |p| {
                if mode.is_null() || fd.is_null() {
                    return Err(libc::EINVAL);
                }
                let flags = fopen_flags(std::ffi::CStr::from_ptr(mode).to_bytes())?;
                *fd = open_pvfs(&p, flags, 0o666)?;
                Ok(1)
            },
        )
    }
}

/// Whether `fd` is a pvfs descriptor (for fdopen).
#[no_mangle]
extern "C" fn pvfs_preload_is_pvfs(fd: c_int) -> c_int {
    if crate::hook::Busy::active() {
        return 0;
    }
    guarded(|| c_int::from(FDS.is_pvfs(fd)))
}

/// Whether `path` is a pvfs path (for freopen).
#[no_mangle]
unsafe extern "C" fn pvfs_preload_is_pvfs_path(path: *const c_char) -> c_int {
    guarded(|| {
        // SAFETY: the caller passes a NUL-terminated path.
        match unsafe { fds::resolve(libc::AT_FDCWD, path, 0) } {
            Ok(fds::Target::Pvfs(_)) => 1,
            _ => 0,
        }
    })
}

/// A cookie stream's read: EBADF if `fd` is no longer pvfs.
#[no_mangle]
unsafe extern "C" fn pvfs_preload_fd_read(fd: c_int, buf: *mut c_char, n: size_t) -> ssize_t {
    pvfs_call(|| {
        let d = FDS.get(fd).ok_or(libc::EBADF)?;
        // SAFETY: stdio passes its buffer with its length.
        Ok(read_desc(&d, unsafe { out_buf(buf.cast(), n)? })? as ssize_t)
    })
}

/// A cookie stream's write.
#[no_mangle]
unsafe extern "C" fn pvfs_preload_fd_write(fd: c_int, buf: *const c_char, n: size_t) -> ssize_t {
    pvfs_call(|| {
        let d = FDS.get(fd).ok_or(libc::EBADF)?;
        // SAFETY: stdio passes its buffer with its length.
        let buf = unsafe { in_buf(buf.cast(), n)? };
        let mut done = 0;
        while done < buf.len() {
            done += write_desc(&d, &buf[done..])?;
        }
        Ok(done as ssize_t)
    })
}

/// A cookie stream's seek.
#[no_mangle]
extern "C" fn pvfs_preload_fd_seek(fd: c_int, off: i64, whence: c_int) -> i64 {
    pvfs_call(|| {
        let d = FDS.get(fd).ok_or(libc::EBADF)?;
        seek_desc(&d, off, whence)
    })
}

/// A cookie stream's close.
#[no_mangle]
extern "C" fn pvfs_preload_fd_close(fd: c_int) -> c_int {
    // SAFETY: close has no memory preconditions.
    unsafe { close_hook(fd) }
}
