//! Advisory locks on pvfs descriptors: `fcntl` record locks and OFD locks
//! (`pvfs_fcntl_lock`) and `flock` (`pvfs_flock`), held on the metadata server that
//! owns the file, so every client of the file system honours them: other processes
//! using libpvfs, the preload library, FUSE mounts on any node (`docs/locks.md`).
//!
//! A process's record locks belong to the process (every descriptor of it on the
//! file; one `pvfs_close` of any of them releases them, as POSIX says); OFD locks and
//! `flock`s belong to the descriptor (each `pvfs_open` makes its own) and end with
//! its `pvfs_close`. `pvfs_finalize` releases whatever is still held.

use libc::c_int;
use pvfs_client::locks::{self, DescLocks};
use pvfs_proto::Handle;

use crate::state::{ffi, get_fd, lock, out, pid, CResult, Global, Obj, OpenFd};

/// The owner of this process's POSIX record locks (the client is per process).
fn posix_owner() -> u64 {
    u64::from(pid())
}

/// The owner of the OFD locks and `flock`s of descriptor `o` (never a POSIX owner).
fn ofd_owner(o: &OpenFd) -> u64 {
    1 << 63 | o.serial
}

/// The object behind a descriptor.
fn handle_of(o: &OpenFd) -> Handle {
    match &o.obj {
        Obj::File(f) => f.file.handle(),
        Obj::Dir(d) => d.handle,
    }
}

/// What the client library needs of descriptor `o`.
fn desc(o: &OpenFd) -> DescLocks {
    let pos = match &o.obj {
        Obj::File(f) => lock(&f.cur).pos,
        Obj::Dir(_) => 0,
    };
    DescLocks {
        handle: handle_of(o),
        posix_owner: posix_owner(),
        ofd_owner: ofd_owner(o),
        readable: o.readable(),
        writable: o.writable(),
        pos,
        pid: pid(),
    }
}

/// Releases, as `close` does, this process's record locks on the file of `o` and the
/// OFD locks and `flock`s of `o` (no request when it holds none).
pub(crate) fn release_at_close(g: &Global, o: &OpenFd) {
    let handle = handle_of(o);
    let c = g.client();
    for owner in [posix_owner(), ofd_owner(o)] {
        // A failure is not the close's: the server forgets them with the lease.
        let _ = g.run(c.release_locks(handle, owner));
    }
}

/// A lock call on pvfs descriptor `fd`.
fn on_fd(fd: c_int, call: impl FnOnce(&Global, &DescLocks) -> CResult<()>) -> c_int {
    ffi(-1, || {
        let o = get_fd(fd)?;
        let d = desc(&o);
        call(&o.g, &d).map(|()| 0)
    })
}

/// Takes, tests or releases an advisory byte-range lock on pvfs descriptor `fd`, as
/// `fcntl(fd, cmd, lock)` does on Linux; the lock holds across every client of the
/// file system. `cmd`: F_GETLK, F_SETLK, F_SETLKW (record locks, owned by the
/// process; released when the process closes any pvfs descriptor of the file) or
/// F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW (owned by the descriptor; released by its
/// `pvfs_close`). `lock->l_whence` may be SEEK_SET, SEEK_CUR or SEEK_END (one request
/// per data server for the size). F_SETLKW waits until the lock is granted; a
/// signal whose handler lacks SA_RESTART ends the wait with EINTR (signals are held
/// back on the calling thread meanwhile and delivered when it ends). F_GETLK stores
/// the lock in the way (with `l_pid` its process when another process of this
/// client holds it, 0 for another client's, -1 for an OFD lock or flock), or sets
/// `l_type` to F_UNLCK. Returns 0, or -1 with errno: EBADF (not a pvfs descriptor, or
/// a read lock on a descriptor not open for reading, a write lock on one not open
/// for writing), EINVAL (bad command, type or range; `l_pid` not 0 for F_OFD_*),
/// EFAULT (NULL `lock`), EAGAIN (F_SETLK: another owner's lock is in the way),
/// EDEADLK (F_SETLKW would deadlock, possibly through other clients), EINTR,
/// EACCES (no read, resp. write, permission on the file), ENOLCK (a lock of this
/// owner on the file was lost: its server restarted and it could not be reclaimed,
/// or this client could not renew its lease; reported once), EHOSTDOWN/ETIMEDOUT/EIO.
///
/// # Safety
/// `lock` is NULL or points to a `struct flock`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_fcntl_lock(fd: c_int, cmd: c_int, lock: *mut libc::flock) -> c_int {
    on_fd(fd, |g, d| {
        let p = out(lock)?;
        // SAFETY: non-NULL and a `struct flock` by the caller's contract.
        let mut lk = unsafe { p.read() };
        g.run(locks::fcntl_lock(g.client(), d, cmd, &mut lk))?;
        // SAFETY: as above.
        unsafe { p.write(lk) };
        Ok(())
    })
}

/// `flock(2)` on pvfs descriptor `fd`: LOCK_SH, LOCK_EX or LOCK_UN, with LOCK_NB not
/// to wait. A whole-file lock owned by the descriptor (released by its
/// `pvfs_close`), held across every client of the file system. pvfs keeps it as a
/// byte-range lock over the whole file, so it conflicts with `fcntl` locks on the
/// file (as NFS does; docs/locks.md). Returns 0, or -1 with errno: EBADF, EINVAL,
/// EWOULDBLOCK (LOCK_NB and another owner's lock is in the way), EINTR, EACCES (no
/// read, for LOCK_SH, or write, for LOCK_EX, permission on the file), ENOLCK,
/// EHOSTDOWN/ETIMEDOUT/EIO.
#[no_mangle]
pub extern "C" fn pvfs_flock(fd: c_int, op: c_int) -> c_int {
    on_fd(fd, |g, d| Ok(g.run(locks::flock(g.client(), d, op))?))
}
