//! Descriptors of regular files: open/creat (with layout hints), read/write and their
//! positioned and vectored forms, lseek, close, fsync, ftruncate, the partitioned-file
//! interface of the PVFS paper (Carns et al., 2000), and the noncontiguous
//! `readx`/`writex` of the POSIX extensions paper (Vilayannur et al., 2008).
//!
//! Every read or write of a descriptor is one client call, so it costs one request
//! per data server it touches, whatever its size or the number of regions (design
//! §4). A descriptor's position is locked for the whole of a `read`/`write`, so
//! threads sharing a descriptor see atomic position updates; `pread`/`pwrite`/
//! `readx`/`writex` do not use the position and run concurrently.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use libc::{c_int, c_void, iovec, mode_t, off_t, size_t, ssize_t};
use pvfs_client::{Errno, File, LayoutSpec, Partition, Regions, SetAttr, Timespec};
use pvfs_proto::{Extent, Handle};

use crate::state::{
    array, buf, buf_mut, fail, ffi, get_fd, global, lock, new_fd, out, path, put, remove_fd,
    CResult, Cursor, DirCursor, DirFd, FileFd, Global, Obj, OpenFd,
};
use crate::types::{pvfs_layout_hint, pvfs_xtvec};

/// Most memory or file regions one vectored call takes (`readv`/`writev` as Linux's
/// IOV_MAX; `readx`/`writex` far more, since they are made for long lists).
const IOV_MAX: usize = 1024;
/// Most file (and memory) regions of one `readx`/`writex` call.
const XTV_MAX: usize = 1 << 20;

/// What a path opened to.
pub(crate) enum Target {
    File(Box<File>),
    Dir(Handle),
}

/// The layout request of a hint (NULL: all defaults).
fn spec(hint: Option<&pvfs_layout_hint>) -> LayoutSpec {
    match hint {
        None => LayoutSpec::default(),
        Some(h) => LayoutSpec {
            stripe_size: (h.stripe_size > 0).then_some(h.stripe_size),
            stripe_count: (h.stripe_count > 0).then_some(h.stripe_count as u32),
            base: (h.first_server >= 0).then_some(h.first_server as u32),
            replicas: (h.replicas > 0).then_some(h.replicas as u32),
        },
    }
}

/// POSIX permission check of the caller against an object's mode, by the shared rules
/// (`pvfs_proto::access`; the servers check again).
fn check_access(g: &Global, attr: &pvfs_client::Attr, read: bool, write: bool) -> CResult<()> {
    use pvfs_proto::access::{MAY_READ, MAY_WRITE};
    let want = if read { MAY_READ } else { 0 } | if write { MAY_WRITE } else { 0 };
    pvfs_proto::access::check(attr, g.client().creds(), want)
        .map_err(|_| fail(libc::EACCES, "permission denied"))
}

/// Opens (or with O_CREAT creates) what `path` names, as `open(2)` would: the
/// access mode, O_CREAT, O_EXCL, O_TRUNC and O_DIRECTORY are honoured; a directory
/// opens read-only.
pub(crate) fn open_target(
    g: &Global,
    path: &str,
    flags: c_int,
    mode: u32,
    layout: LayoutSpec,
) -> CResult<Target> {
    let acc = flags & libc::O_ACCMODE;
    if acc == libc::O_ACCMODE {
        return Err(fail(libc::EINVAL, "invalid access mode"));
    }
    let writable = acc != libc::O_RDONLY;
    let c = g.client();
    if flags & libc::O_CREAT != 0 {
        if flags & libc::O_DIRECTORY != 0 {
            return Err(fail(libc::EINVAL, "O_CREAT with O_DIRECTORY"));
        }
        // The servers apply the umask, unless a default ACL decides.
        let c = c.with_umask(g.umask);
        match g.run(c.create(path, mode & 0o7777, layout, true)) {
            Ok(f) => return Ok(Target::File(Box::new(f))),
            Err(e) if e.errno == Errno::EEXIST && flags & libc::O_EXCL == 0 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if flags & libc::O_DIRECTORY != 0 {
        // A directory is expected: one walk, straight to its attributes.
        let attr = g.run(c.stat_lite(path))?;
        if attr.kind() != pvfs_client::ObjKind::Dir {
            return Err(fail(libc::ENOTDIR, &format!("{path}: not a directory")));
        }
        if writable {
            return Err(fail(libc::EISDIR, &format!("{path}: is a directory")));
        }
        check_access(g, &attr, true, false)?;
        return Ok(Target::Dir(attr.handle));
    }
    match g.run(c.open(path)) {
        Ok(f) => {
            check_access(g, f.attr(), acc != libc::O_WRONLY, writable)?;
            if writable && flags & libc::O_TRUNC != 0 {
                g.run(f.truncate(0))?;
            }
            Ok(Target::File(Box::new(f)))
        }
        Err(e) if e.errno == Errno::EISDIR => {
            // A directory opened without O_DIRECTORY: walked a second time for its
            // attributes (opendir and getdents users pass O_DIRECTORY and walk once).
            if writable || flags & libc::O_CREAT != 0 {
                return Err(fail(libc::EISDIR, &format!("{path}: is a directory")));
            }
            let attr = g.run(c.stat_lite(path))?;
            if attr.kind() != pvfs_client::ObjKind::Dir {
                return Err(fail(
                    libc::EAGAIN,
                    &format!("{path}: changed while opening"),
                ));
            }
            check_access(g, &attr, true, false)?;
            Ok(Target::Dir(attr.handle))
        }
        Err(e) => Err(e.into()),
    }
}

/// A new descriptor for an open target; `held`: its file is held open
/// (`pvfs_client::Client::hold`), to let go of at its last close.
pub(crate) fn fd_for(g: &Arc<Global>, flags: c_int, target: Target, held: bool) -> CResult<c_int> {
    let obj = match target {
        Target::File(file) => Obj::File(FileFd {
            held,
            file: *file,
            cur: Mutex::new(Cursor { pos: 0, part: None }),
            wrote: Default::default(),
        }),
        Target::Dir(handle) => Obj::Dir(DirFd {
            handle,
            cur: Mutex::new(DirCursor {
                listing: None,
                pos: 0,
            }),
        }),
    };
    new_fd(g, flags, obj)
}

/// # Safety
/// `path_arg` is NULL or a NUL-terminated string.
unsafe fn open_impl(
    path_arg: *const libc::c_char,
    flags: c_int,
    mode: mode_t,
    hint: Option<&pvfs_layout_hint>,
) -> CResult<c_int> {
    // SAFETY: the callers pass their C string argument through.
    let p = unsafe { path(path_arg) }?;
    let g = global()?;
    let target = open_target(&g, p, flags, mode, spec(hint))?;
    // Held while open: another client's unlink or rename over it leaves the file
    // to this descriptor until its last close (`pvfs_client::holds`).
    let held = match &target {
        Target::File(f) => {
            g.run(g.client().hold(f.handle()))?;
            true
        }
        Target::Dir(_) => false,
    };
    fd_for(&g, flags, target, held)
}

/// Opens or creates `path` (an absolute path inside the pvfs file system; a
/// relative path is taken from its root) and returns a new descriptor, as
/// `open(2)`: O_RDONLY/O_WRONLY/O_RDWR are enforced (reading a write-only descriptor
/// is EBADF), O_CREAT (with `mode` & ~umask), O_EXCL, O_TRUNC, O_APPEND and
/// O_DIRECTORY are honoured, other flags are ignored. A directory opens read-only and
/// its descriptor serves `pvfs_getdents_plus`. Costs one lookup per path component
/// (plus one create with O_CREAT); no data server is contacted (except by O_TRUNC).
/// Returns the descriptor, or -1 with errno: ENOENT, EEXIST, EISDIR, ENOTDIR,
/// EACCES, ELOOP, ENAMETOOLONG, EINVAL, EFAULT, EMFILE, ENXIO (not initialized),
/// EHOSTDOWN/ETIMEDOUT/EIO (a server is unreachable).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pvfs_open(path: *const libc::c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: the caller's C string, passed through.
    ffi(-1, || unsafe { open_impl(path, flags, mode, None) })
}

/// `pvfs_open` with layout hints for a file this call creates (ignored when the file
/// exists): stripe size, stripe count and first data server; NULL `hint` or default
/// fields take the parent directory's default layout, else the file system's.
/// Errors as `pvfs_open`, and EINVAL for a layout the servers refuse.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `hint` is NULL or points to a
/// `struct pvfs_layout_hint`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_open_layout(
    path: *const libc::c_char,
    flags: c_int,
    mode: mode_t,
    hint: *const pvfs_layout_hint,
) -> c_int {
    ffi(-1, || {
        // SAFETY: NULL or a valid hint by contract.
        let hint = unsafe { hint.as_ref() };
        // SAFETY: the caller's C string, passed through.
        unsafe { open_impl(path, flags, mode, hint) }
    })
}

/// `creat(2)`: `pvfs_open(path, O_CREAT | O_WRONLY | O_TRUNC, mode)`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pvfs_creat(path: *const libc::c_char, mode: mode_t) -> c_int {
    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    // SAFETY: the caller's C string, passed through.
    ffi(-1, || unsafe { open_impl(path, flags, mode, None) })
}

/// Closes a pvfs descriptor. If it wrote, the file's modification time on the
/// metadata server is brought up to date (one request; its failure is not reported,
/// as PVFS2 flushes timestamps lazily). The process's record locks on the file and
/// the descriptor's OFD locks and flocks are released (a request only if it holds
/// any). Returns 0, or -1 with errno EBADF.
#[no_mangle]
pub extern "C" fn pvfs_close(fd: c_int) -> c_int {
    ffi(-1, || {
        let o = remove_fd(fd)?;
        if let Obj::File(f) = &o.obj {
            if f.wrote.load(Ordering::Relaxed) {
                let _ = flush_mtime(&o.g, f);
            }
        }
        crate::locks::release_at_close(&o.g, &o);
        Ok(0)
    })
}

/// Records the time of the last write as the metafile's mtime.
fn flush_mtime(g: &Global, f: &FileFd) -> CResult<()> {
    let set = SetAttr {
        mtime: Some(Timespec::now()),
        // "Now": any writer may, owner or not (the server takes its own clock).
        now: true,
        ..Default::default()
    };
    f.wrote.store(false, Ordering::Relaxed);
    g.run(g.client().setattr_lite(f.file.handle(), set))?;
    Ok(())
}

/// Bytes of partition `p` before file size `size`.
fn partition_len(p: &Partition, size: u64) -> u64 {
    if size <= p.offset {
        return 0;
    }
    let r = size - p.offset;
    (r / p.stride) * p.gsize + (r % p.stride).min(p.gsize)
}

/// The end of the file (or of its partition): one request per data server plus one
/// attribute request.
fn end_of(g: &Global, f: &FileFd, part: Option<Partition>) -> CResult<u64> {
    let size = g.run(f.file.size())?;
    Ok(match part {
        Some(p) => partition_len(&p, size),
        None => size,
    })
}

fn read_at(
    g: &Global,
    f: &FileFd,
    part: Option<Partition>,
    pos: u64,
    b: &mut [u8],
) -> CResult<usize> {
    if b.is_empty() {
        return Ok(0);
    }
    Ok(match part {
        Some(p) => g.run(f.file.read_partition(&p, pos, b))?,
        None => g.run(f.file.read_at(pos, b))?,
    })
}

fn write_at(g: &Global, f: &FileFd, part: Option<Partition>, pos: u64, b: &[u8]) -> CResult<usize> {
    if b.is_empty() {
        return Ok(0);
    }
    let n = match part {
        Some(p) => g.run(f.file.write_partition(&p, pos, b))?,
        None => g.run(f.file.write_at(pos, b))?,
    };
    f.wrote.store(true, Ordering::Relaxed);
    Ok(n)
}

/// The open file behind `fd`, checked for reading or writing.
fn file_fd(fd: c_int, write: bool) -> CResult<Arc<OpenFd>> {
    let o = get_fd(fd)?;
    if write && !o.writable() {
        return Err(fail(libc::EBADF, "descriptor is not open for writing"));
    }
    if !write && !o.readable() {
        return Err(fail(libc::EBADF, "descriptor is not open for reading"));
    }
    o.file()?;
    Ok(o)
}

/// read/pread into one buffer: at `at`, or at the position (advanced).
fn read_impl(fd: c_int, b: &mut [u8], at: Option<u64>) -> CResult<usize> {
    let o = file_fd(fd, false)?;
    let f = o.file()?;
    match at {
        Some(pos) => {
            let part = lock(&f.cur).part;
            read_at(&o.g, f, part, pos, b)
        }
        None => {
            let mut cur = lock(&f.cur);
            let n = read_at(&o.g, f, cur.part, cur.pos, b)?;
            cur.pos += n as u64;
            Ok(n)
        }
    }
}

/// write/pwrite from one buffer: at `at`, or at the position (advanced; at the end
/// with O_APPEND).
fn write_impl(fd: c_int, b: &[u8], at: Option<u64>) -> CResult<usize> {
    let o = file_fd(fd, true)?;
    let f = o.file()?;
    match at {
        Some(pos) => {
            let part = lock(&f.cur).part;
            write_at(&o.g, f, part, pos, b)
        }
        None => {
            let mut cur = lock(&f.cur);
            if o.flags & libc::O_APPEND != 0 && !b.is_empty() {
                if cur.part.is_none() {
                    // At the end whatever other clients append meanwhile.
                    let (at, n) = o.g.run(f.file.append(b))?;
                    f.wrote.store(true, Ordering::Relaxed);
                    cur.pos = at + n as u64;
                    return Ok(n);
                }
                cur.pos = end_of(&o.g, f, cur.part)?;
            }
            let n = write_at(&o.g, f, cur.part, cur.pos, b)?;
            cur.pos += n as u64;
            Ok(n)
        }
    }
}

fn offset(off: off_t) -> CResult<u64> {
    u64::try_from(off).map_err(|_| fail(libc::EINVAL, "negative offset"))
}

/// Reads up to `n` bytes at the descriptor's position (in its partition, if one is
/// set) and advances it. One request per data server holding some of the bytes.
/// Returns the bytes read (0 at the end of the file; holes read as zeros), or -1 with
/// errno: EBADF (not open for reading), EISDIR, EFAULT, EINVAL, EIO/EHOSTDOWN/
/// ETIMEDOUT.
///
/// # Safety
/// `buf` is NULL or valid for writes of `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn pvfs_read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    ffi(-1, || {
        // SAFETY: NULL or valid for `n` bytes by contract.
        let b = unsafe { buf_mut(buf, n) }?;
        Ok(read_impl(fd, b, None)? as ssize_t)
    })
}

/// Writes `n` bytes at the descriptor's position (at the end of the file with
/// O_APPEND, atomically against other clients' appends; in its partition, if one
/// is set) and advances it. One request per data
/// server receiving some of the bytes. Returns `n`, or -1 with errno: EBADF (not open
/// for writing), EISDIR, EFAULT, EFBIG, ENOSPC, EIO/EHOSTDOWN/ETIMEDOUT.
///
/// # Safety
/// `buf` is NULL or valid for reads of `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn pvfs_write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    ffi(-1, || {
        // SAFETY: NULL or valid for `n` bytes by contract.
        let b = unsafe { self::buf(buf, n) }?;
        Ok(write_impl(fd, b, None)? as ssize_t)
    })
}

/// Reads up to `n` bytes at `offset` (a position in the partition, if one is set)
/// without using or changing the descriptor's position. As `pvfs_read`, and EINVAL
/// for a negative offset.
///
/// # Safety
/// `buf` is NULL or valid for writes of `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn pvfs_pread(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    offset: off_t,
) -> ssize_t {
    ffi(-1, || {
        // SAFETY: NULL or valid for `n` bytes by contract.
        let b = unsafe { buf_mut(buf, n) }?;
        Ok(read_impl(fd, b, Some(self::offset(offset)?))? as ssize_t)
    })
}

/// Writes `n` bytes at `offset` (a position in the partition, if one is set; O_APPEND
/// does not apply) without using or changing the descriptor's position. As
/// `pvfs_write`, and EINVAL for a negative offset.
///
/// # Safety
/// `buf` is NULL or valid for reads of `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn pvfs_pwrite(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    offset: off_t,
) -> ssize_t {
    ffi(-1, || {
        // SAFETY: NULL or valid for `n` bytes by contract.
        let b = unsafe { self::buf(buf, n) }?;
        Ok(write_impl(fd, b, Some(self::offset(offset)?))? as ssize_t)
    })
}

/// The memory regions of an iovec array, checked (EFAULT for NULL bases with a
/// length, EINVAL for too many or a total past SSIZE_MAX).
///
/// # Safety
/// `iov` is NULL or valid for `count` elements, each describing valid memory.
unsafe fn iovecs<'a>(iov: *const iovec, count: usize, max: usize) -> CResult<(&'a [iovec], usize)> {
    if count > max {
        return Err(fail(libc::EINVAL, "too many memory regions"));
    }
    // SAFETY: NULL or valid for `count` elements by contract.
    let v = unsafe { array(iov, count) }?;
    let mut total: usize = 0;
    for e in v {
        if e.iov_len > 0 && e.iov_base.is_null() {
            return Err(fail(libc::EFAULT, "NULL memory region"));
        }
        total = total
            .checked_add(e.iov_len)
            .filter(|t| *t <= isize::MAX as usize)
            .ok_or_else(|| fail(libc::EINVAL, "total length above SSIZE_MAX"))?;
    }
    Ok((v, total))
}

/// Largest staging buffer a thread keeps between vectored calls (larger calls use a
/// buffer of their own). Reusing it matters: fresh memory costs a page fault per 4 KiB
/// on first touch, several times the price of the copy itself (docs/benchmarks.md).
const STAGE_KEEP: usize = 64 << 20;

thread_local! {
    /// This thread's staging buffer for vectored calls with several memory regions.
    static STAGE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on a staging buffer of `len` bytes (contents unspecified).
fn with_stage<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    if len > STAGE_KEEP {
        return f(&mut vec![0u8; len]);
    }
    STAGE.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < len {
            s.resize(len, 0);
        }
        f(&mut s[..len])
    })
}

/// Copies the memory regions into `out` (exactly their total length).
fn gather(v: &[iovec], out: &mut [u8]) {
    let mut at = 0;
    for e in v {
        if e.iov_len > 0 {
            // SAFETY: checked non-NULL by `iovecs`; valid for `iov_len` bytes by the
            // caller's contract; `out` is our own buffer, not aliased.
            let src = unsafe { std::slice::from_raw_parts(e.iov_base as *const u8, e.iov_len) };
            out[at..at + e.iov_len].copy_from_slice(src);
            at += e.iov_len;
        }
    }
}

/// Copies the first `n` bytes of `data` out to the memory regions.
fn scatter(v: &[iovec], data: &[u8]) {
    let mut at = 0;
    for e in v {
        if at >= data.len() {
            break;
        }
        let k = e.iov_len.min(data.len() - at);
        if k > 0 {
            // SAFETY: checked non-NULL by `iovecs`; valid for writes of `iov_len >= k`
            // bytes by the caller's contract; `data` is our own buffer, not aliased.
            unsafe { std::ptr::copy_nonoverlapping(data[at..].as_ptr(), e.iov_base as *mut u8, k) };
        }
        at += k;
    }
}

/// Runs `f` on one buffer standing for the memory regions: the region itself when
/// there is only one (no copy), else a staging buffer scattered afterwards — the
/// first `n` bytes `f` returns, or with `whole` all of them (readx: bytes past the end
/// of the file are zeros in the stream, not absent).
fn with_read_buf(
    v: &[iovec],
    total: usize,
    whole: bool,
    f: impl FnOnce(&mut [u8]) -> CResult<usize>,
) -> CResult<usize> {
    let nonempty: Vec<&iovec> = v.iter().filter(|e| e.iov_len > 0).collect();
    if nonempty.len() == 1 {
        let e = nonempty[0];
        // SAFETY: checked non-NULL by `iovecs`; valid for writes of `iov_len` bytes
        // by the caller's contract.
        let b = unsafe { std::slice::from_raw_parts_mut(e.iov_base as *mut u8, e.iov_len) };
        return f(b);
    }
    with_stage(total, |stage| {
        let n = f(stage)?;
        let keep = if whole { total } else { n.min(total) };
        scatter(v, &stage[..keep]);
        Ok(n)
    })
}

/// Like [`with_read_buf`] for writes: one region is used in place, several gathered.
fn with_write_buf(
    v: &[iovec],
    total: usize,
    f: impl FnOnce(&[u8]) -> CResult<usize>,
) -> CResult<usize> {
    let nonempty: Vec<&iovec> = v.iter().filter(|e| e.iov_len > 0).collect();
    if nonempty.len() == 1 {
        let e = nonempty[0];
        // SAFETY: checked non-NULL by `iovecs`; valid for reads of `iov_len` bytes.
        let b = unsafe { std::slice::from_raw_parts(e.iov_base as *const u8, e.iov_len) };
        return f(b);
    }
    with_stage(total, |stage| {
        gather(v, stage);
        f(stage)
    })
}

/// `readv(2)`: reads into `iovcnt` memory regions (at most 1024) from the contiguous
/// bytes at the descriptor's position, in one call (one request per data server).
/// Returns bytes read, or -1 with errno as `pvfs_read`.
///
/// # Safety
/// `iov` is NULL or valid for `iovcnt` elements describing writable memory.
#[no_mangle]
pub unsafe extern "C" fn pvfs_readv(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    ffi(-1, || {
        let count = usize::try_from(iovcnt).map_err(|_| fail(libc::EINVAL, "negative count"))?;
        // SAFETY: by contract.
        let (v, total) = unsafe { iovecs(iov, count, IOV_MAX) }?;
        Ok(with_read_buf(v, total, false, |b| read_impl(fd, b, None))? as ssize_t)
    })
}

/// `writev(2)`: writes `iovcnt` memory regions (at most 1024) as contiguous bytes at
/// the descriptor's position, in one call. Returns bytes written, or -1 with errno as
/// `pvfs_write`.
///
/// # Safety
/// `iov` is NULL or valid for `iovcnt` elements describing readable memory.
#[no_mangle]
pub unsafe extern "C" fn pvfs_writev(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    ffi(-1, || {
        let count = usize::try_from(iovcnt).map_err(|_| fail(libc::EINVAL, "negative count"))?;
        // SAFETY: by contract.
        let (v, total) = unsafe { iovecs(iov, count, IOV_MAX) }?;
        Ok(with_write_buf(v, total, |b| write_impl(fd, b, None))? as ssize_t)
    })
}

/// `preadv(2)`: `pvfs_readv` at `offset`, position unchanged.
///
/// # Safety
/// As `pvfs_readv`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_preadv(
    fd: c_int,
    iov: *const iovec,
    iovcnt: c_int,
    offset: off_t,
) -> ssize_t {
    ffi(-1, || {
        let count = usize::try_from(iovcnt).map_err(|_| fail(libc::EINVAL, "negative count"))?;
        let at = self::offset(offset)?;
        // SAFETY: by contract.
        let (v, total) = unsafe { iovecs(iov, count, IOV_MAX) }?;
        Ok(with_read_buf(v, total, false, |b| read_impl(fd, b, Some(at)))? as ssize_t)
    })
}

/// `pwritev(2)`: `pvfs_writev` at `offset`, position unchanged.
///
/// # Safety
/// As `pvfs_writev`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_pwritev(
    fd: c_int,
    iov: *const iovec,
    iovcnt: c_int,
    offset: off_t,
) -> ssize_t {
    ffi(-1, || {
        let count = usize::try_from(iovcnt).map_err(|_| fail(libc::EINVAL, "negative count"))?;
        let at = self::offset(offset)?;
        // SAFETY: by contract.
        let (v, total) = unsafe { iovecs(iov, count, IOV_MAX) }?;
        Ok(with_write_buf(v, total, |b| write_impl(fd, b, Some(at)))? as ssize_t)
    })
}

/// The file regions of an xtvec array as a region list (zero-length ones dropped)
/// and their total length.
///
/// # Safety
/// `xtv` is NULL or valid for `count` elements.
unsafe fn xtvecs(xtv: *const pvfs_xtvec, count: usize) -> CResult<(Regions, usize)> {
    if count > XTV_MAX {
        return Err(fail(libc::EINVAL, "too many file regions"));
    }
    // SAFETY: NULL or valid for `count` elements by contract.
    let v = unsafe { array(xtv, count) }?;
    let mut total: usize = 0;
    let mut list = Vec::with_capacity(v.len());
    for x in v {
        let off = u64::try_from(x.xtv_off)
            .map_err(|_| fail(libc::EINVAL, "negative file region offset"))?;
        total = total
            .checked_add(x.xtv_len)
            .filter(|t| *t <= isize::MAX as usize)
            .ok_or_else(|| fail(libc::EINVAL, "total length above SSIZE_MAX"))?;
        if x.xtv_len > 0 {
            list.push(Extent {
                offset: off,
                len: x.xtv_len as u64,
            });
        }
    }
    Ok((Regions::List(list), total))
}

/// Checks and converts the two vectors of a readx/writex call.
///
/// # Safety
/// As `pvfs_readx`.
unsafe fn x_args<'a>(
    iov: *const iovec,
    iov_count: size_t,
    xtv: *const pvfs_xtvec,
    xtv_count: size_t,
) -> CResult<(&'a [iovec], usize, Regions)> {
    // SAFETY: by the caller's contract.
    let (v, total) = unsafe { iovecs(iov, iov_count, XTV_MAX) }?;
    // SAFETY: by the caller's contract.
    let (regions, ftotal) = unsafe { xtvecs(xtv, xtv_count) }?;
    if total != ftotal {
        return Err(fail(
            libc::EINVAL,
            &format!("memory regions hold {total} bytes, file regions {ftotal}"),
        ));
    }
    Ok((v, total, regions))
}

/// `readx` of the POSIX extensions paper (Vilayannur et al., 2008): reads the file
/// regions `xtv` (offsets from the start of the file, in any order, partition and
/// position ignored) into the memory regions `iov`. Counts and individual sizes of the
/// two vectors need not match, only their totals (else EINVAL). The whole list travels
/// in one request per data server holding some of the bytes, whatever the number of
/// regions. Returns the bytes of the regions that lie before the end of the file (the
/// rest read as zeros), or -1 with the first error: EBADF, EISDIR, EINVAL, EFAULT,
/// EIO/EHOSTDOWN/ETIMEDOUT.
///
/// # Safety
/// `iov` is NULL or valid for `iov_count` elements describing writable memory; `xtv`
/// is NULL or valid for `xtv_count` elements.
#[no_mangle]
pub unsafe extern "C" fn pvfs_readx(
    fd: c_int,
    iov: *const iovec,
    iov_count: size_t,
    xtv: *const pvfs_xtvec,
    xtv_count: size_t,
) -> ssize_t {
    ffi(-1, || {
        // SAFETY: by contract.
        let (v, total, regions) = unsafe { x_args(iov, iov_count, xtv, xtv_count) }?;
        let o = file_fd(fd, false)?;
        let f = o.file()?;
        if total == 0 {
            return Ok(0);
        }
        let n = with_read_buf(v, total, true, |b| {
            Ok(o.g.run(f.file.read_regions(&regions, b))? as usize)
        })?;
        Ok(n as ssize_t)
    })
}

/// `writex` of the POSIX extensions paper (Vilayannur et al., 2008): writes the memory
/// regions `iov` to the file regions `xtv` (offsets from the start of the file, in any
/// order, partition, position and O_APPEND ignored); totals must match (else EINVAL).
/// One request per data server receiving some of the bytes, whatever the number of
/// regions. Overlapping regions are written in list order. Returns the bytes written,
/// or -1 with the first error: EBADF, EISDIR, EINVAL, EFAULT, EFBIG, ENOSPC,
/// EIO/EHOSTDOWN/ETIMEDOUT.
///
/// # Safety
/// `iov` is NULL or valid for `iov_count` elements describing readable memory; `xtv`
/// is NULL or valid for `xtv_count` elements.
#[no_mangle]
pub unsafe extern "C" fn pvfs_writex(
    fd: c_int,
    iov: *const iovec,
    iov_count: size_t,
    xtv: *const pvfs_xtvec,
    xtv_count: size_t,
) -> ssize_t {
    ffi(-1, || {
        // SAFETY: by contract.
        let (v, total, regions) = unsafe { x_args(iov, iov_count, xtv, xtv_count) }?;
        let o = file_fd(fd, true)?;
        let f = o.file()?;
        if total == 0 {
            return Ok(0);
        }
        let n = with_write_buf(v, total, |b| {
            let n = o.g.run(f.file.write_regions(&regions, b))?;
            f.wrote.store(true, Ordering::Relaxed);
            Ok(n as usize)
        })?;
        Ok(n as ssize_t)
    })
}

/// `lseek(2)`: SEEK_SET, SEEK_CUR or SEEK_END (the end costs one attribute request
/// and one request per data server). With a partition set, positions count the
/// partition's bytes. On a directory descriptor the position is an entry index
/// (SEEK_SET/SEEK_CUR; seeking to 0 rewinds and refetches the listing). Returns the
/// new position, or -1 with errno: EBADF, EINVAL (bad whence or a negative result),
/// EOVERFLOW.
#[no_mangle]
pub extern "C" fn pvfs_lseek(fd: c_int, offset: off_t, whence: c_int) -> off_t {
    ffi(-1, || {
        let o = get_fd(fd)?;
        let target = |base: u64| -> CResult<u64> {
            let b = i64::try_from(base).map_err(|_| fail(libc::EOVERFLOW, "position"))?;
            let t = b
                .checked_add(offset)
                .ok_or_else(|| fail(libc::EOVERFLOW, "position overflows off_t"))?;
            u64::try_from(t).map_err(|_| fail(libc::EINVAL, "negative position"))
        };
        match &o.obj {
            Obj::File(f) => {
                let mut cur = lock(&f.cur);
                let base = match whence {
                    libc::SEEK_SET => 0,
                    libc::SEEK_CUR => cur.pos,
                    libc::SEEK_END => end_of(&o.g, f, cur.part)?,
                    _ => return Err(fail(libc::EINVAL, "unsupported whence")),
                };
                let pos = target(base)?;
                cur.pos = pos;
                Ok(pos as off_t)
            }
            Obj::Dir(d) => {
                let mut cur = lock(&d.cur);
                let base = match whence {
                    libc::SEEK_SET => 0,
                    libc::SEEK_CUR => cur.pos as u64,
                    _ => return Err(fail(libc::EINVAL, "unsupported whence on a directory")),
                };
                let pos = target(base)?;
                cur.pos = usize::try_from(pos).map_err(|_| fail(libc::EINVAL, "position"))?;
                if pos == 0 && whence == libc::SEEK_SET {
                    cur.listing = None;
                }
                Ok(pos as off_t)
            }
        }
    })
}

/// `fsync(2)`: if this descriptor wrote, records the modification time on the metadata
/// server; then makes every byte written to the file durable on its data servers (one
/// request per data server) and every metadata change acknowledged so far durable on
/// every metadata server (the file's name, its attributes). For a directory, the
/// metadata part. Returns 0, or -1 with errno: EBADF, EIO/EHOSTDOWN/ETIMEDOUT.
#[no_mangle]
pub extern "C" fn pvfs_fsync(fd: c_int) -> c_int {
    ffi(-1, || {
        let o = get_fd(fd)?;
        match &o.obj {
            Obj::File(f) => {
                if f.wrote.load(Ordering::Relaxed) {
                    match flush_mtime(&o.g, f) {
                        Err(e) if e.0 == libc::EPERM || e.0 == libc::EACCES => {}
                        other => other?,
                    }
                }
                o.g.run(f.file.fsync())?;
            }
            Obj::Dir(_) => o.g.run(o.g.client().sync_metadata())?,
        }
        Ok(0)
    })
}

/// `ftruncate(2)`: sets the file's size (the whole file's, even with a partition
/// set), cutting or extending with a hole. Returns 0, or -1 with errno: EBADF, EINVAL
/// (negative length, a directory, or not open for writing), EFBIG, EIO.
#[no_mangle]
pub extern "C" fn pvfs_ftruncate(fd: c_int, length: off_t) -> c_int {
    ffi(-1, || {
        let o = get_fd(fd)?;
        let len = offset(length)?;
        let Obj::File(f) = &o.obj else {
            return Err(fail(libc::EINVAL, "not a regular file"));
        };
        if !o.writable() {
            return Err(fail(libc::EINVAL, "descriptor is not open for writing"));
        }
        o.g.run(f.file.truncate(len))?;
        Ok(0)
    })
}

/// `fallocate(2)`: on the whole file's bytes `offset .. offset + len` (a partition
/// does not apply), `mode` 0 allocates them on the data servers, extending the file
/// when they reach past its end; `FALLOC_FL_KEEP_SIZE` allocates without changing the
/// size; `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE` deallocates them (they read as
/// zeros); `FALLOC_FL_ZERO_RANGE`, with or without `FALLOC_FL_KEEP_SIZE`, zeroes
/// them. One request per data server holding part of the range, in parallel.
/// Returns 0, or -1 with errno: EBADF (not open for writing), EINVAL (negative
/// offset, length not positive), EOPNOTSUPP (another mode, or one the data servers'
/// file systems do not support), EISDIR, EFBIG, ENOSPC, EIO/EHOSTDOWN/ETIMEDOUT.
#[no_mangle]
pub extern "C" fn pvfs_fallocate(fd: c_int, mode: c_int, offset: off_t, len: off_t) -> c_int {
    ffi(-1, || {
        let o = get_fd(fd)?;
        if offset < 0 || len <= 0 {
            return Err(fail(libc::EINVAL, "negative offset or length not positive"));
        }
        let mode = u32::try_from(mode).map_err(|_| fail(libc::EOPNOTSUPP, "unknown mode"))?;
        let (offset, len) = (offset as u64, len as u64);
        pvfs_client::falloc::check(mode, offset, len).map_err(|(e, why)| fail(e.code(), why))?;
        if !o.writable() {
            return Err(fail(libc::EBADF, "descriptor is not open for writing"));
        }
        let Obj::File(f) = &o.obj else {
            return Err(fail(libc::EISDIR, "not a regular file"));
        };
        o.g.run(f.file.fallocate(mode, offset, len))?;
        f.wrote.store(true, Ordering::Relaxed);
        Ok(0)
    })
}

/// The partitioned-file interface of the PVFS paper (Carns et al., 2000): after this
/// call, `pvfs_read`, `pvfs_write`, `pvfs_pread`, `pvfs_pwrite` and `pvfs_lseek` on
/// `fd` see only the partition: blocks of `gsize` bytes, the first at file offset
/// `offset`, one every `stride` bytes, concatenated (position 0 is byte `offset` of the
/// file). One request per data server per call, whatever the number of blocks touched.
/// `gsize` 0 removes the partition. Either way the position is reset to 0. Returns 0,
/// or -1 with errno: EBADF, EISDIR, EINVAL (negative values, or `stride < gsize`).
#[no_mangle]
pub extern "C" fn pvfs_set_partition(
    fd: c_int,
    offset: off_t,
    gsize: off_t,
    stride: off_t,
) -> c_int {
    ffi(-1, || {
        let o = get_fd(fd)?;
        let f = o.file()?;
        let part = if gsize == 0 {
            None
        } else {
            let (off, g, s) = (
                self::offset(offset)?,
                self::offset(gsize)?,
                self::offset(stride)?,
            );
            if s < g {
                return Err(fail(libc::EINVAL, "stride smaller than gsize"));
            }
            Some(Partition {
                offset: off,
                gsize: g,
                stride: s,
            })
        };
        let mut cur = lock(&f.cur);
        cur.part = part;
        cur.pos = 0;
        Ok(0)
    })
}

/// The layout of the open file `fd`: stripe size, stripe count, and the index among
/// the data servers of the server holding the first stripe unit. Sends no request.
/// Returns 0, or -1 with errno: EBADF, EISDIR, EFAULT.
///
/// # Safety
/// `hint` is NULL or points to a writable `struct pvfs_layout_hint`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_get_layout(fd: c_int, hint: *mut pvfs_layout_hint) -> c_int {
    ffi(-1, || {
        let h = out(hint)?;
        let o = get_fd(fd)?;
        let f = o.file()?;
        let layout = f.file.layout();
        let data = o.g.client().config().data_servers();
        let first = layout
            .datafiles
            .first()
            .and_then(|d| data.iter().position(|&s| s == d.server as usize))
            .map_or(-1, |i| i as i32);
        let v = pvfs_layout_hint {
            stripe_size: layout.stripe_size,
            stripe_count: layout.datafiles.len() as i32,
            first_server: first,
            replicas: layout.replicas as i32,
        };
        // SAFETY: checked non-NULL; writable by contract.
        unsafe { put(h, v) };
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_length() {
        let p = Partition {
            offset: 10,
            gsize: 4,
            stride: 10,
        };
        assert_eq!(partition_len(&p, 5), 0);
        assert_eq!(partition_len(&p, 10), 0);
        assert_eq!(partition_len(&p, 12), 2);
        assert_eq!(partition_len(&p, 14), 4);
        assert_eq!(partition_len(&p, 19), 4);
        assert_eq!(partition_len(&p, 21), 5);
        assert_eq!(partition_len(&p, 40), 12);
    }

    #[test]
    fn hints_map_defaults() {
        assert_eq!(spec(None), LayoutSpec::default());
        let h = pvfs_layout_hint {
            stripe_size: 0,
            stripe_count: -1,
            first_server: -1,
            replicas: -1,
        };
        assert_eq!(spec(Some(&h)), LayoutSpec::default());
        let h = pvfs_layout_hint {
            stripe_size: 4096,
            stripe_count: 2,
            first_server: 0,
            replicas: 2,
        };
        assert_eq!(
            spec(Some(&h)),
            LayoutSpec {
                stripe_size: Some(4096),
                stripe_count: Some(2),
                base: Some(0),
                replicas: Some(2),
            }
        );
    }
}
