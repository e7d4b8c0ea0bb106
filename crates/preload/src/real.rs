//! The real libc functions behind the hooks, found with `dlsym(RTLD_NEXT, name)` once
//! and cached. Hooks reach libc only through these: calling a hooked function by name
//! from inside the library would land in the hook again.
//!
//! Each wrapper has exactly the C prototype of the libc function of the same name. If
//! libc lacks the function (an old glibc), the wrapper fails with ENOSYS.

#![allow(clippy::too_many_arguments)]

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{
    c_char, c_int, c_long, c_uint, c_ulong, c_void, dirent, dirent64, gid_t, iovec, mode_t,
    off64_t, off_t, size_t, ssize_t, timespec, timeval, uid_t, DIR,
};

/// The address of libc's `name` (NUL-terminated), looked up once into `slot`; 0 if
/// there is none.
fn lookup(slot: &AtomicUsize, name: &'static str) -> usize {
    let p = slot.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    // SAFETY: name is NUL-terminated (every caller passes a literal ending in "\0");
    // dlsym with RTLD_NEXT has no other precondition.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    slot.store(p, Ordering::Release);
    p
}

macro_rules! real {
    ($( fn $name:ident($($a:ident: $t:ty),* $(,)?) -> $ret:ty; )*) => {$(
        #[doc = concat!("libc's `", stringify!($name), "`.")]
        pub(crate) unsafe fn $name($($a: $t),*) -> $ret {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = lookup(&SLOT, concat!(stringify!($name), "\0"));
            if p == 0 {
                crate::hook::set_errno(libc::ENOSYS);
                return <$ret as crate::hook::Failure>::failure();
            }
            // SAFETY: p is the address of libc's function of this name, whose C
            // prototype is the one this wrapper declares.
            let f: unsafe extern "C" fn($($t),*) -> $ret = unsafe { std::mem::transmute(p) };
            // SAFETY: the caller upholds the C function's contract.
            unsafe { f($($a),*) }
        }
    )*};
}

real! {
    fn close(fd: c_int) -> c_int;
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
    fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t;
    fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t;
    fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t;
    fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t;
    fn preadv64v2(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t;
    fn pwritev64v2(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t;
    fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t;
    fn dup(fd: c_int) -> c_int;
    fn dup2(fd: c_int, to: c_int) -> c_int;
    fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int;
    fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int;
    fn ftruncate64(fd: c_int, len: off64_t) -> c_int;
    fn fsync(fd: c_int) -> c_int;
    fn fdatasync(fd: c_int) -> c_int;
    fn syncfs(fd: c_int) -> c_int;
    fn fchmod(fd: c_int, mode: mode_t) -> c_int;
    fn fchown(fd: c_int, uid: uid_t, gid: gid_t) -> c_int;
    fn futimens(fd: c_int, times: *const timespec) -> c_int;
    fn futimes(fd: c_int, tv: *const timeval) -> c_int;
    fn isatty(fd: c_int) -> c_int;
    fn copy_file_range(fdin: c_int, offin: *mut off64_t, fdout: c_int, offout: *mut off64_t, n: size_t, flags: c_uint) -> ssize_t;
    fn sendfile64(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t;
    fn posix_fadvise64(fd: c_int, off: off64_t, len: off64_t, advice: c_int) -> c_int;
    fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int;
    fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int;
    fn flock(fd: c_int, op: c_int) -> c_int;
    fn lockf64(fd: c_int, cmd: c_int, len: off64_t) -> c_int;
    fn mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off64_t) -> *mut c_void;
    fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int;
    fn closefrom(low: c_int) -> ();
    fn fstatfs(fd: c_int, buf: *mut libc::statfs) -> c_int;
    fn fstatvfs(fd: c_int, buf: *mut libc::statvfs) -> c_int;
    fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn fgetxattr(fd: c_int, name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t;
    fn fsetxattr(fd: c_int, name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int;
    fn flistxattr(fd: c_int, list: *mut c_char, size: size_t) -> ssize_t;
    fn fremovexattr(fd: c_int, name: *const c_char) -> c_int;

    fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int;
    fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int;
    fn fstatat(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int;
    fn statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, buf: *mut libc::statx) -> c_int;
    fn __xstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int;
    fn __lxstat(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int;
    fn __fxstat(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int;
    fn __fxstatat(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int;
    fn access(path: *const c_char, mode: c_int) -> c_int;
    fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int;
    fn readlink(path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t;
    fn readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t;
    fn unlink(path: *const c_char) -> c_int;
    fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int;
    fn rmdir(path: *const c_char) -> c_int;
    fn mkdir(path: *const c_char, mode: mode_t) -> c_int;
    fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int;
    fn rename(from: *const c_char, to: *const c_char) -> c_int;
    fn renameat(fromfd: c_int, from: *const c_char, tofd: c_int, to: *const c_char) -> c_int;
    fn renameat2(fromfd: c_int, from: *const c_char, tofd: c_int, to: *const c_char, flags: c_uint) -> c_int;
    fn chmod(path: *const c_char, mode: mode_t) -> c_int;
    fn lchmod(path: *const c_char, mode: mode_t) -> c_int;
    fn fchmodat(dirfd: c_int, path: *const c_char, mode: mode_t, flags: c_int) -> c_int;
    fn chown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int;
    fn lchown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int;
    fn fchownat(dirfd: c_int, path: *const c_char, uid: uid_t, gid: gid_t, flags: c_int) -> c_int;
    fn truncate64(path: *const c_char, len: off64_t) -> c_int;
    fn utimensat(dirfd: c_int, path: *const c_char, times: *const timespec, flags: c_int) -> c_int;
    fn utimes(path: *const c_char, tv: *const timeval) -> c_int;
    fn lutimes(path: *const c_char, tv: *const timeval) -> c_int;
    fn futimesat(dirfd: c_int, path: *const c_char, tv: *const timeval) -> c_int;
    fn utime(path: *const c_char, times: *const libc::utimbuf) -> c_int;
    fn symlink(target: *const c_char, path: *const c_char) -> c_int;
    fn symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int;
    fn link(from: *const c_char, to: *const c_char) -> c_int;
    fn linkat(fromfd: c_int, from: *const c_char, tofd: c_int, to: *const c_char, flags: c_int) -> c_int;
    fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int;
    fn mknodat(dirfd: c_int, path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int;
    fn mkfifo(path: *const c_char, mode: mode_t) -> c_int;
    fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int;
    fn statfs(path: *const c_char, buf: *mut libc::statfs) -> c_int;
    fn statvfs(path: *const c_char, buf: *mut libc::statvfs) -> c_int;
    fn opendir(path: *const c_char) -> *mut DIR;
    fn fdopendir(fd: c_int) -> *mut DIR;
    fn readdir(dir: *mut DIR) -> *mut dirent;
    fn readdir64(dir: *mut DIR) -> *mut dirent64;
    fn readdir_r(dir: *mut DIR, entry: *mut dirent, result: *mut *mut dirent) -> c_int;
    fn readdir64_r(dir: *mut DIR, entry: *mut dirent64, result: *mut *mut dirent64) -> c_int;
    fn closedir(dir: *mut DIR) -> c_int;
    fn dirfd(dir: *mut DIR) -> c_int;
    fn rewinddir(dir: *mut DIR) -> ();
    fn telldir(dir: *mut DIR) -> c_long;
    fn seekdir(dir: *mut DIR, pos: c_long) -> ();
    fn realpath(path: *const c_char, out: *mut c_char) -> *mut c_char;
    fn canonicalize_file_name(path: *const c_char) -> *mut c_char;
    fn getxattr(path: *const c_char, name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t;
    fn lgetxattr(path: *const c_char, name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t;
    fn setxattr(path: *const c_char, name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int;
    fn lsetxattr(path: *const c_char, name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int;
    fn listxattr(path: *const c_char, list: *mut c_char, size: size_t) -> ssize_t;
    fn llistxattr(path: *const c_char, list: *mut c_char, size: size_t) -> ssize_t;
    fn removexattr(path: *const c_char, name: *const c_char) -> c_int;
    fn lremovexattr(path: *const c_char, name: *const c_char) -> c_int;
    fn umask(mask: mode_t) -> mode_t;
    fn mkstemp(template: *mut c_char) -> c_int;
    fn mkstemp64(template: *mut c_char) -> c_int;
    fn mkostemp(template: *mut c_char, flags: c_int) -> c_int;
    fn mkostemp64(template: *mut c_char, flags: c_int) -> c_int;
    fn mkstemps(template: *mut c_char, suffix: c_int) -> c_int;
    fn mkstemps64(template: *mut c_char, suffix: c_int) -> c_int;
    fn mkostemps(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int;
    fn mkostemps64(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int;
    fn mkdtemp(template: *mut c_char) -> *mut c_char;
    fn chdir(path: *const c_char) -> c_int;
    fn fchdir(fd: c_int) -> c_int;
    fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char;
    fn get_current_dir_name() -> *mut c_char;
    fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn execveat(dirfd: c_int, path: *const c_char, argv: *const *const c_char, envp: *const *const c_char, flags: c_int) -> c_int;
    fn posix_spawn(pid: *mut libc::pid_t, path: *const c_char, actions: *const c_void, attr: *const c_void, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn posix_spawnp(pid: *mut libc::pid_t, file: *const c_char, actions: *const c_void, attr: *const c_void, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
}

/// libc's `openat` (variadic: the mode is passed as the one optional argument).
pub(crate) unsafe fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = lookup(&SLOT, "openat\0");
    if p == 0 {
        crate::hook::set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: p is libc's `int openat(int, const char *, int, ...)`.
    let f: unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int =
        unsafe { std::mem::transmute(p) };
    // SAFETY: the caller upholds openat's contract; a mode is always passed, which
    // openat reads only when the flags ask for one.
    unsafe { f(dirfd, path, flags, mode) }
}

/// libc's `fcntl` with its optional argument (an int or a pointer, one register).
pub(crate) unsafe fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = lookup(&SLOT, "fcntl\0");
    if p == 0 {
        crate::hook::set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: p is libc's `int fcntl(int, int, ...)`.
    let f: unsafe extern "C" fn(c_int, c_int, ...) -> c_int = unsafe { std::mem::transmute(p) };
    // SAFETY: the caller passes the argument it was given for this command.
    unsafe { f(fd, cmd, arg) }
}

/// libc's `ioctl` with its optional argument.
pub(crate) unsafe fn ioctl(fd: c_int, request: c_ulong, arg: usize) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = lookup(&SLOT, "ioctl\0");
    if p == 0 {
        crate::hook::set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: p is libc's `int ioctl(int, unsigned long, ...)`.
    let f: unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int = unsafe { std::mem::transmute(p) };
    // SAFETY: the caller passes the argument it was given for this request.
    unsafe { f(fd, request, arg) }
}

/// `off_t` and `off64_t` are one type on the 64-bit targets this library builds for.
const _: () = assert!(std::mem::size_of::<off_t>() == std::mem::size_of::<off64_t>());
