//! The remaining hooks: statfs/statvfs, extended attributes, copy_file_range and
//! sendfile, mmap of pvfs files, fadvise/fallocate, advisory locks.
//!
//! - `copy_file_range` touching a pvfs descriptor answers EXDEV, so tools fall back to
//!   read/write; `sendfile` is done with reads and writes through the library.
//! - `mmap` of a pvfs file gives a private snapshot: anonymous memory filled with the
//!   file's bytes. A shared writable mapping is refused (ENODEV): it could never write
//!   back. Changes to the file after the call are not seen through the mapping.
//! - `fallocate` and `posix_fallocate` go to the data servers (allocation, punched
//!   holes, zeroed ranges); `posix_fallocate` falls back to extending the size where
//!   their file systems cannot allocate.
//! - Advisory locks (`flock`, `lockf`) go to the servers (`crate::locks`), as `fcntl`
//!   record locks do.

use libc::{c_char, c_int, c_void, off64_t, size_t, ssize_t};
use pvfs_client::falloc;

use crate::desc::{Desc, Kind};
use crate::fds::{self, on_fd, on_open_fd, route};
use crate::globals::{self, FDS, LISTINGS};
use crate::hook::export;
use crate::hook::{guarded, pvfs_call, set_errno, R};
use crate::io::{read_desc, write_desc};
use crate::real;
use crate::stat::{fill_statfs, fill_statvfs, no_answer};

// ----- statfs ---------------------------------------------------------------------

/// The file system's totals, failing if no server answered.
fn fs_stat() -> R<pvfs_client::FsStat> {
    let pr = globals::proc()?;
    let fs = pr.run(pr.client().statfs());
    match no_answer(&fs) {
        Some(e) => Err(e),
        None => Ok(fs),
    }
}

/// statfs into `buf` (after checking that pvfs path `p` exists, if given).
fn statfs_pvfs(p: Option<&str>, buf: *mut libc::statfs) -> R<c_int> {
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    if let Some(p) = p {
        let pr = globals::proc()?;
        pr.call(pr.client().stat_lite(p))?;
    }
    // SAFETY: the caller passes a writable struct statfs.
    fill_statfs(&fs_stat()?, unsafe { &mut *buf });
    Ok(0)
}

/// statvfs into `buf`.
fn statvfs_pvfs(p: Option<&str>, buf: *mut libc::statvfs) -> R<c_int> {
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    if let Some(p) = p {
        let pr = globals::proc()?;
        pr.call(pr.client().stat_lite(p))?;
    }
    // SAFETY: the caller passes a writable struct statvfs.
    fill_statvfs(&fs_stat()?, unsafe { &mut *buf });
    Ok(0)
}

unsafe fn statfs_hook(path: *const c_char, buf: *mut libc::statfs) -> c_int {
    // SAFETY: statfs's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::statfs(path, buf),
            |p| statfs_pvfs(Some(&p), buf),
        )
    }
}

unsafe fn fstatfs_hook(fd: c_int, buf: *mut libc::statfs) -> c_int {
    on_fd(
        fd,
        // SAFETY: fstatfs's arguments, passed on.
        || unsafe { real::fstatfs(fd, buf) },
        |_| statfs_pvfs(None, buf),
    )
}

unsafe fn statvfs_hook(path: *const c_char, buf: *mut libc::statvfs) -> c_int {
    // SAFETY: statvfs's arguments, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| real::statvfs(path, buf),
            |p| statvfs_pvfs(Some(&p), buf),
        )
    }
}

unsafe fn fstatvfs_hook(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    on_fd(
        fd,
        // SAFETY: fstatvfs's arguments, passed on.
        || unsafe { real::fstatvfs(fd, buf) },
        |_| statvfs_pvfs(None, buf),
    )
}

const _: () = assert!(std::mem::size_of::<libc::statfs>() == std::mem::size_of::<libc::statfs64>());
const _: () =
    assert!(std::mem::size_of::<libc::statvfs>() == std::mem::size_of::<libc::statvfs64>());

export!(statfs, statfs64 => statfs_hook(path: *const c_char, buf: *mut libc::statfs) -> c_int);
export!(fstatfs, fstatfs64 => fstatfs_hook(fd: c_int, buf: *mut libc::statfs) -> c_int);
export!(statvfs, statvfs64 => statvfs_hook(path: *const c_char, buf: *mut libc::statvfs) -> c_int);
export!(fstatvfs, fstatvfs64 => fstatvfs_hook(fd: c_int, buf: *mut libc::statvfs) -> c_int);

// ----- extended attributes -------------------------------------------------------------

/// The handle of pvfs path `p` (following a final symlink when `follow`).
fn handle_of(p: &str, follow: bool) -> R<pvfs_proto::Handle> {
    if let crate::cache::Lookup::Hit(a) = LISTINGS.peek(p) {
        if !follow || a.kind() != pvfs_client::ObjKind::Symlink {
            return Ok(a.handle);
        }
    }
    let pr = globals::proc()?;
    let c = pr.client();
    Ok(if follow {
        pr.call(c.stat_lite(p))?.handle
    } else {
        pr.call(c.lstat(p))?.handle
    })
}

/// An attribute name argument.
///
/// # Safety
/// `name` is null or NUL-terminated.
unsafe fn xname<'a>(name: *const c_char) -> R<&'a str> {
    if name.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract.
    std::str::from_utf8(unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes())
        .map_err(|_| libc::EINVAL)
}

/// Copies `data` to the caller's `(buf, size)` as the xattr calls do: size 0 asks
/// for the length, a short buffer is ERANGE.
fn give(data: &[u8], buf: *mut c_void, size: size_t) -> R<ssize_t> {
    if size == 0 {
        return Ok(data.len() as ssize_t);
    }
    if data.len() > size {
        return Err(libc::ERANGE);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's buffer holds size >= data.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len()) };
    Ok(data.len() as ssize_t)
}

/// Whether `name` is a POSIX ACL's attribute (`system.posix_acl_*`).
fn is_acl(name: &str) -> bool {
    name.starts_with("system.posix_acl_")
}

/// getxattr of a POSIX ACL of `o`, answered from its attributes, which carry its
/// ACLs (and come from the listing cache for a path: `ls -l` asks for every file).
fn get_acl(o: &fds::Obj, follow: bool, name: &str, buf: *mut c_void, size: size_t) -> R<ssize_t> {
    let pr = globals::proc()?;
    let attr = crate::meta::attr_obj(pr, o, follow)?;
    let acl = attr.acl.as_deref();
    let entries = match name {
        pvfs_proto::acl::XATTR_ACCESS => acl.map(|a| &a.access),
        pvfs_proto::acl::XATTR_DEFAULT => acl.map(|a| &a.default),
        _ => return Err(libc::EOPNOTSUPP),
    };
    match entries.filter(|e| !e.is_empty()) {
        Some(e) => give(&pvfs_proto::acl::to_xattr(e), buf, size),
        None => Err(libc::ENODATA),
    }
}

/// getxattr on object `h`.
fn getx(h: pvfs_proto::Handle, name: &str, buf: *mut c_void, size: size_t) -> R<ssize_t> {
    let pr = globals::proc()?;
    let v = pr.call(pr.client().getxattr(h, name))?;
    give(&v, buf, size)
}

/// setxattr on object `h` (a POSIX ACL too, which may change its mode).
fn setx(
    h: pvfs_proto::Handle,
    name: &str,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> R<c_int> {
    LISTINGS.changed();
    if size > 0 && value.is_null() {
        return Err(libc::EFAULT);
    }
    let v: &[u8] = if size == 0 {
        &[]
    } else {
        // SAFETY: the caller's value holds size bytes.
        unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) }
    };
    let pr = globals::proc()?;
    pr.call(pr.client().setxattr(h, name, v, flags as u32))?;
    Ok(0)
}

/// listxattr on object `h`: NUL-separated names.
fn listx(h: pvfs_proto::Handle, buf: *mut c_char, size: size_t) -> R<ssize_t> {
    let pr = globals::proc()?;
    let names = pr.call(pr.client().listxattr(h))?;
    let mut out = Vec::new();
    for n in names {
        out.extend_from_slice(n.as_bytes());
        out.push(0);
    }
    give(&out, buf.cast(), size)
}

/// removexattr on object `h`.
fn removex(h: pvfs_proto::Handle, name: &str) -> R<c_int> {
    LISTINGS.changed();
    let pr = globals::proc()?;
    pr.call(pr.client().removexattr(h, name))?;
    Ok(0)
}

macro_rules! xattr_path_hooks {
    ($get:ident, $set:ident, $list:ident, $remove:ident, $follow:expr) => {
        #[no_mangle]
        unsafe extern "C" fn $get(
            path: *const c_char,
            name: *const c_char,
            value: *mut c_void,
            size: size_t,
        ) -> ssize_t {
            // SAFETY: the hook's arguments, passed on.
            unsafe {
                route(
                    libc::AT_FDCWD,
                    path,
                    |_, path| real::$get(path, name, value, size),
                    |p| {
                        let name = xname(name)?;
                        if is_acl(name) {
                            return get_acl(&fds::Obj::Path(p), $follow, name, value, size);
                        }
                        getx(handle_of(&p, $follow)?, name, value, size)
                    },
                )
            }
        }

        #[no_mangle]
        unsafe extern "C" fn $set(
            path: *const c_char,
            name: *const c_char,
            value: *const c_void,
            size: size_t,
            flags: c_int,
        ) -> c_int {
            // SAFETY: the hook's arguments, passed on.
            unsafe {
                route(
                    libc::AT_FDCWD,
                    path,
                    |_, path| real::$set(path, name, value, size, flags),
                    |p| setx(handle_of(&p, $follow)?, xname(name)?, value, size, flags),
                )
            }
        }

        #[no_mangle]
        unsafe extern "C" fn $list(
            path: *const c_char,
            list: *mut c_char,
            size: size_t,
        ) -> ssize_t {
            // SAFETY: the hook's arguments, passed on.
            unsafe {
                route(
                    libc::AT_FDCWD,
                    path,
                    |_, path| real::$list(path, list, size),
                    |p| listx(handle_of(&p, $follow)?, list, size),
                )
            }
        }

        #[no_mangle]
        unsafe extern "C" fn $remove(path: *const c_char, name: *const c_char) -> c_int {
            // SAFETY: the hook's arguments, passed on.
            unsafe {
                route(
                    libc::AT_FDCWD,
                    path,
                    |_, path| real::$remove(path, name),
                    |p| removex(handle_of(&p, $follow)?, xname(name)?),
                )
            }
        }
    };
}

xattr_path_hooks!(getxattr, setxattr, listxattr, removexattr, true);
xattr_path_hooks!(lgetxattr, lsetxattr, llistxattr, lremovexattr, false);

#[no_mangle]
unsafe extern "C" fn fgetxattr(
    fd: c_int,
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: the hook's arguments, passed on.
        || unsafe { real::fgetxattr(fd, name, value, size) },
        |d| {
            // SAFETY: name is the caller's attribute name.
            let name = unsafe { xname(name)? };
            if is_acl(name) {
                return get_acl(&fds::Obj::Fd(d), false, name, value, size);
            }
            getx(d.handle, name, value, size)
        },
    )
}

#[no_mangle]
unsafe extern "C" fn fsetxattr(
    fd: c_int,
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    on_open_fd(
        fd,
        // SAFETY: the hook's arguments, passed on.
        || unsafe { real::fsetxattr(fd, name, value, size, flags) },
        // SAFETY: name is the caller's attribute name.
        |d| setx(d.handle, unsafe { xname(name)? }, value, size, flags),
    )
}

#[no_mangle]
unsafe extern "C" fn flistxattr(fd: c_int, list: *mut c_char, size: size_t) -> ssize_t {
    on_open_fd(
        fd,
        // SAFETY: the hook's arguments, passed on.
        || unsafe { real::flistxattr(fd, list, size) },
        |d| listx(d.handle, list, size),
    )
}

#[no_mangle]
unsafe extern "C" fn fremovexattr(fd: c_int, name: *const c_char) -> c_int {
    on_open_fd(
        fd,
        // SAFETY: the hook's arguments, passed on.
        || unsafe { real::fremovexattr(fd, name) },
        // SAFETY: name is the caller's attribute name.
        |d| removex(d.handle, unsafe { xname(name)? }),
    )
}

// ----- copying --------------------------------------------------------------------------

#[no_mangle]
unsafe extern "C" fn copy_file_range(
    fdin: c_int,
    offin: *mut off64_t,
    fdout: c_int,
    offout: *mut off64_t,
    n: size_t,
    flags: libc::c_uint,
) -> ssize_t {
    if crate::hook::Busy::active() {
        // SAFETY: the hook's arguments, passed on.
        return unsafe { real::copy_file_range(fdin, offin, fdout, offout, n, flags) };
    }
    guarded(|| {
        if FDS.is_pvfs(fdin) || FDS.is_pvfs(fdout) {
            set_errno(libc::EXDEV);
            return -1;
        }
        // SAFETY: the hook's arguments, passed on.
        unsafe { real::copy_file_range(fdin, offin, fdout, offout, n, flags) }
    })
}

/// Reads from `fd` (pvfs or not) into `buf`, at `*off` (advanced) if given.
fn read_any(fd: c_int, buf: &mut [u8], off: Option<&mut i64>) -> R<usize> {
    let n = match (FDS.get(fd), off) {
        (Some(d), None) => return read_desc(&d, buf),
        (Some(d), Some(off)) => {
            check_file(&d)?;
            let pr = globals::proc()?;
            let f = d.file(pr)?;
            let n = pr.call(f.read_at(*off as u64, buf))?;
            *off += n as i64;
            return Ok(n);
        }
        // SAFETY: buf is a live buffer of its length.
        (None, None) => unsafe { real::read(fd, buf.as_mut_ptr().cast(), buf.len()) },
        (None, Some(off)) => {
            // SAFETY: as above.
            let n = unsafe { real::pread64(fd, buf.as_mut_ptr().cast(), buf.len(), *off) };
            if n > 0 {
                *off += n as i64;
            }
            n
        }
    };
    if n < 0 {
        Err(crate::hook::errno())
    } else {
        Ok(n as usize)
    }
}

fn check_file(d: &Desc) -> R<()> {
    match d.kind {
        Kind::File if d.readable() => Ok(()),
        Kind::Dir => Err(libc::EISDIR),
        _ => Err(libc::EBADF),
    }
}

/// Writes all of `buf` to `fd` (pvfs or not).
fn write_all_any(fd: c_int, buf: &[u8]) -> R<()> {
    let d = FDS.get(fd);
    let mut done = 0;
    while done < buf.len() {
        let n = match &d {
            Some(d) => write_desc(d, &buf[done..])?,
            None => {
                // SAFETY: the rest of buf is live.
                let n = unsafe { real::write(fd, buf[done..].as_ptr().cast(), buf.len() - done) };
                if n < 0 {
                    let e = crate::hook::errno();
                    if e == libc::EINTR {
                        continue;
                    }
                    return Err(e);
                }
                n as usize
            }
        };
        done += n;
    }
    Ok(())
}

/// sendfile with a pvfs end: up to `n` bytes in 1 MiB steps through the library.
fn sendfile_pvfs(out: c_int, inp: c_int, off: *mut off64_t, n: usize) -> R<ssize_t> {
    let mut buf = vec![0u8; n.min(1 << 20)];
    let mut pos = if off.is_null() {
        None
    } else {
        // SAFETY: a non-null offset points to the caller's off_t.
        Some(unsafe { *off })
    };
    let mut done = 0usize;
    while done < n {
        let want = (n - done).min(buf.len());
        let got = read_any(inp, &mut buf[..want], pos.as_mut())?;
        if got == 0 {
            break;
        }
        write_all_any(out, &buf[..got])?;
        done += got;
    }
    if let Some(p) = pos {
        // SAFETY: as above.
        unsafe { *off = p };
    }
    Ok(done as ssize_t)
}

unsafe fn sendfile_hook(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t {
    if crate::hook::Busy::active() {
        // SAFETY: the hook's arguments, passed on.
        return unsafe { real::sendfile64(out, inp, off, n) };
    }
    guarded(|| {
        if FDS.is_pvfs(out) || FDS.is_pvfs(inp) {
            return pvfs_call(|| sendfile_pvfs(out, inp, off, n));
        }
        // SAFETY: the hook's arguments, passed on.
        unsafe { real::sendfile64(out, inp, off, n) }
    })
}

export!(sendfile, sendfile64 => sendfile_hook(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t);

// ----- mmap ------------------------------------------------------------------------------

/// A private snapshot mapping of pvfs file `d`.
fn mmap_desc(
    d: &Desc,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off64_t,
) -> R<*mut c_void> {
    check_file(d)?;
    if flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0 {
        return Err(libc::ENODEV);
    }
    if len == 0 || off < 0 || off % 4096 != 0 {
        return Err(libc::EINVAL);
    }
    let keep =
        libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_NORESERVE | libc::MAP_POPULATE;
    let aflags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | (flags & keep);
    // SAFETY: an anonymous mapping; addr is only a hint unless MAP_FIXED was asked for.
    let p = unsafe { real::mmap64(addr, len, libc::PROT_READ | libc::PROT_WRITE, aflags, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(crate::hook::errno());
    }
    let fill = || -> R<()> {
        let pr = globals::proc()?;
        let f = d.file(pr)?;
        // SAFETY: p is a fresh mapping of len bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
        pr.call(f.read_at(off as u64, buf))?;
        // SAFETY: p..p+len is our mapping.
        if unsafe { libc::mprotect(p, len, prot) } != 0 {
            return Err(crate::hook::errno());
        }
        Ok(())
    };
    match fill() {
        Ok(()) => Ok(p),
        Err(e) => {
            // SAFETY: p..p+len is our mapping, not handed out.
            unsafe { libc::munmap(p, len) };
            Err(e)
        }
    }
}

unsafe fn mmap_hook(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    if fd < 0 || flags & libc::MAP_ANONYMOUS != 0 {
        // SAFETY: the hook's arguments, passed on.
        return unsafe { real::mmap64(addr, len, prot, flags, fd, off) };
    }
    let r = on_open_fd(
        fd,
        // SAFETY: the hook's arguments, passed on.
        || unsafe { real::mmap64(addr, len, prot, flags, fd, off) },
        |d| mmap_desc(&d, addr, len, prot, flags, off),
    );
    // mmap fails with MAP_FAILED, not null.
    if r.is_null() {
        libc::MAP_FAILED
    } else {
        r
    }
}

export!(mmap, mmap64 => mmap_hook(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off64_t) -> *mut c_void);

// ----- advice, space, locks -----------------------------------------------------------

unsafe fn fadvise_hook(fd: c_int, off: off64_t, len: off64_t, advice: c_int) -> c_int {
    if crate::hook::Busy::active() {
        // SAFETY: no memory preconditions.
        return unsafe { real::posix_fadvise64(fd, off, len, advice) };
    }
    guarded(|| {
        if FDS.is_pvfs(fd) {
            0
        } else {
            // SAFETY: no memory preconditions.
            unsafe { real::posix_fadvise64(fd, off, len, advice) }
        }
    })
}

export!(posix_fadvise, posix_fadvise64 => fadvise_hook(fd: c_int, off: off64_t, len: off64_t, advice: c_int) -> c_int);

/// fallocate(2) with `mode` on pvfs file `d`: the data servers allocate (or punch,
/// or zero) the range; errors in the kernel's order (`vfs_fallocate`).
fn fallocate_desc(d: &Desc, mode: c_int, off: i64, len: i64) -> R<()> {
    LISTINGS.changed();
    if off < 0 || len <= 0 {
        return Err(libc::EINVAL);
    }
    let mode = u32::try_from(mode).map_err(|_| libc::EOPNOTSUPP)?;
    let (off, len) = (off as u64, len as u64);
    falloc::check(mode, off, len).map_err(|(e, _)| e.code())?;
    if !d.writable() {
        return Err(libc::EBADF);
    }
    match d.kind {
        Kind::File => {}
        Kind::Dir => return Err(libc::EISDIR),
        Kind::Other => return Err(libc::ENODEV),
    }
    let pr = globals::proc()?;
    let f = d.file(pr)?;
    pr.call(f.fallocate(mode, off, len))
}

/// posix_fallocate(3) on pvfs file `d`: fallocate with mode 0; where the data
/// servers' file systems cannot allocate (EOPNOTSUPP), the file is extended to
/// `off + len` without reserving space, as glibc's emulation ends up doing.
fn posix_fallocate_desc(d: &Desc, off: i64, len: i64) -> R<()> {
    match fallocate_desc(d, 0, off, len) {
        Err(libc::EOPNOTSUPP) => {
            let end = (off as u64).saturating_add(len as u64);
            let pr = globals::proc()?;
            let f = d.file(pr)?;
            if pr.call(f.size())? < end {
                pr.call(f.truncate(end))?;
            }
            Ok(())
        }
        other => other,
    }
}

unsafe fn posix_fallocate_hook(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    if crate::hook::Busy::active() {
        // SAFETY: no memory preconditions.
        return unsafe { real::posix_fallocate64(fd, off, len) };
    }
    guarded(|| match FDS.get(fd) {
        // SAFETY: no memory preconditions.
        None => unsafe { real::posix_fallocate64(fd, off, len) },
        // posix_fallocate returns the error number instead of setting errno.
        Some(d) => match pvfs_call(|| posix_fallocate_desc(&d, off, len).map(|()| 0)) {
            0 => 0,
            _ => crate::hook::errno(),
        },
    })
}

export!(posix_fallocate, posix_fallocate64 => posix_fallocate_hook(fd: c_int, off: off64_t, len: off64_t) -> c_int);

unsafe fn fallocate_hook(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    on_open_fd(
        fd,
        // SAFETY: no memory preconditions.
        || unsafe { real::fallocate64(fd, mode, off, len) },
        |d| fallocate_desc(&d, mode, off, len).map(|()| 0),
    )
}

export!(fallocate, fallocate64 => fallocate_hook(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int);

#[no_mangle]
unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    on_open_fd(
        fd,
        || unsafe { real::flock(fd, op) },
        |d| crate::locks::flock(&d, op),
    )
}

unsafe fn lockf_hook(fd: c_int, cmd: c_int, len: off64_t) -> c_int {
    // SAFETY: no memory preconditions.
    on_open_fd(
        fd,
        || unsafe { real::lockf64(fd, cmd, len) },
        |d| crate::locks::lockf(&d, cmd, len),
    )
}

export!(lockf, lockf64 => lockf_hook(fd: c_int, cmd: c_int, len: off64_t) -> c_int);

/// `umask`: sets the real umask and remembers it.
#[no_mangle]
unsafe extern "C" fn umask(mask: libc::mode_t) -> libc::mode_t {
    // SAFETY: umask has no preconditions.
    let old = unsafe { real::umask(mask) };
    globals::set_umask(mask);
    old
}
