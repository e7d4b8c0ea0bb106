//! Advisory locks on pvfs descriptors: `fcntl` record locks and OFD locks, `flock`
//! and `lockf`, taken on the metadata server that owns the file through the client
//! library, so they hold against every other client (`docs/locks.md`).
//!
//! The library does what the kernel does for local files: a process's record locks
//! (owned by the process) are released when it closes any descriptor of the file; OFD
//! locks and `flock`s (owned by the open file description, shared by its duplicates)
//! when the description's last descriptor closes; everything still held when the
//! process exits. A process killed before it can do that loses its locks after the
//! lease (`[locks] lease`).

use libc::{c_int, off64_t};
use pvfs_client::locks::{self, DescLocks};
use pvfs_proto::Handle;

use crate::desc::Desc;
use crate::globals;
use crate::hook::R;

/// The owner of this process's POSIX record locks (each process has its own client,
/// so its pid is enough).
fn posix_owner() -> u64 {
    u64::from(std::process::id())
}

/// The owner of the OFD locks and `flock`s of description number `id`.
fn ofd_owner(id: u64) -> u64 {
    1 << 63 | id
}

/// What the client library needs of description `d`.
fn desc(d: &Desc) -> DescLocks {
    DescLocks {
        handle: d.handle,
        posix_owner: posix_owner(),
        ofd_owner: ofd_owner(d.id),
        readable: d.readable(),
        writable: d.writable(),
        pos: *d.pos(),
        pid: std::process::id(),
    }
}

/// `fcntl(fd, cmd, arg)` for a lock command on pvfs description `d`.
pub(crate) fn fcntl_lock(d: &Desc, cmd: c_int, arg: usize) -> R<c_int> {
    let p = arg as *mut libc::flock;
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the lock commands' argument points to a struct flock.
    let mut lk = unsafe { p.read() };
    let pr = globals::proc()?;
    pr.call(locks::fcntl_lock(pr.client(), &desc(d), cmd, &mut lk))?;
    // SAFETY: as above.
    unsafe { p.write(lk) };
    Ok(0)
}

/// `flock(fd, op)` on pvfs description `d`.
pub(crate) fn flock(d: &Desc, op: c_int) -> R<c_int> {
    let pr = globals::proc()?;
    pr.call(locks::flock(pr.client(), &desc(d), op))?;
    Ok(0)
}

/// `lockf(fd, cmd, len)` on pvfs description `d`.
pub(crate) fn lockf(d: &Desc, cmd: c_int, len: off64_t) -> R<c_int> {
    let pr = globals::proc()?;
    pr.call(locks::lockf(pr.client(), &desc(d), cmd, len))?;
    Ok(0)
}

/// A descriptor of `d` was closed: the process's record locks on its file go (as
/// POSIX says for any close). No request unless it holds some.
pub(crate) fn closed(d: &Desc) {
    release(d.handle, posix_owner());
}

/// The last descriptor of description `id` on `handle` went: its OFD locks and
/// `flock`s go.
pub(crate) fn description_gone(handle: Handle, id: u64) {
    release(handle, ofd_owner(id));
}

fn release(handle: Handle, owner: u64) {
    let Some(pr) = globals::current_proc() else {
        return;
    };
    if !pr.client().may_hold_locks(handle, owner) {
        return;
    }
    let _busy = crate::hook::Busy::enter();
    // A failure is not the close's: the server forgets them with the lease.
    let _ = pr.run(pr.client().release_locks(handle, owner));
}

/// At exit (atexit): every lock the process still holds goes now, not after the
/// lease.
pub(crate) extern "C" fn release_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let Some(pr) = globals::current_proc() else {
            return;
        };
        let _busy = crate::hook::Busy::enter();
        // On a thread of its own: exit has already destroyed this thread's
        // thread-locals, the runtime's among them.
        let released = std::thread::Builder::new()
            .name("pvfs-exit".into())
            .spawn(move || pr.run(pr.client().release_all_locks()));
        if let Ok(t) = released {
            let _ = t.join();
        }
    });
}
