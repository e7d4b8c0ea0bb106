//! libpvfs_preload.so: an LD_PRELOAD library that gives unmodified programs pvfs files
//! without a mount: the system-call wrappers of the PVFS paper (Carns et al., 2000,
//! *PVFS: A Parallel File System for Linux Clusters*, §3.4).
//!
//! With `PVFS_CONFIG` naming a configuration file, every POSIX call on a path under
//! `PVFS_PREFIX` (default `/pvfs`) goes to pvfs through [`pvfs_client`]; `/pvfs/a/b` is
//! the pvfs path `/a/b`. Every other path and descriptor goes to the real libc function,
//! found with `dlsym(RTLD_NEXT)` ([`real`]): a hook never calls a hooked function by
//! name, and a thread already inside pvfs work passes every call straight through
//! ([`Busy`]), so hooks cannot recurse.
//!
//! Layers:
//! - [`settings`]: the prefix and configuration, and path routing (what is pvfs).
//! - [`proc`]: the per-process client and its runtime, rebuilt lazily after `fork`
//!   (a tokio runtime does not survive fork), credentials and umask.
//! - [`fds`]: pvfs descriptors. Each open pvfs file holds a real kernel descriptor (an
//!   `O_PATH` placeholder), so numbering, `close`, `dup2` and `fork` stay the kernel's;
//!   a table maps placeholder → shared open-file state (offset, flags, handle).
//! - [`cache`]: attributes read with a directory listing, kept a moment for `ls -l`.
//! - [`cwd`]: a working directory inside pvfs (chdir, getcwd).
//! - [`locks`]: advisory locks (fcntl, flock, lockf) on the servers, released at
//!   close and exit as the kernel would.
//! - [`io`], [`meta`], [`dirs`], [`misc`]: the hooks (open/read/write/…, stat/mkdir/
//!   rename/…, opendir/readdir/getdents, statfs/xattr/mmap/…). `src/shim.c` holds the
//!   variadic hooks and the stdio (`fopencookie`) streams.
//!
//! Every exported hook catches panics (a panic becomes EIO), and errors become errno
//! values like libc's. What is and is not supported: `docs/preload.md`.

mod cache;
mod cwd;
mod dirs;
mod fds;
mod io;
mod lock;
mod locks;
mod meta;
mod misc;
mod proc;
mod real;
mod settings;
mod stat;

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use libc::c_int;

/// An errno value: the error half of every hook's result.
pub(crate) type Errno = c_int;
/// A hook's result before it is turned into the C convention.
pub(crate) type R<T> = Result<T, Errno>;

/// Sets the calling thread's errno.
pub(crate) fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's errno.
pub(crate) fn errno() -> Errno {
    // SAFETY: as in set_errno.
    unsafe { *libc::__errno_location() }
}

/// The errno of a client error.
pub(crate) fn client_errno(e: pvfs_client::Error) -> Errno {
    match e.errno.0 {
        0 => libc::EIO,
        n => n as Errno,
    }
}

/// What a hook returns on failure, with errno set: -1 or a null pointer.
pub(crate) trait Failure {
    /// The failure value.
    fn failure() -> Self;
}

impl Failure for c_int {
    fn failure() -> Self {
        -1
    }
}

impl Failure for isize {
    fn failure() -> Self {
        -1
    }
}

impl Failure for i64 {
    fn failure() -> Self {
        -1
    }
}

impl Failure for u32 {
    fn failure() -> Self {
        u32::MAX
    }
}

impl Failure for () {
    fn failure() -> Self {}
}

impl<T> Failure for *mut T {
    fn failure() -> Self {
        std::ptr::null_mut()
    }
}

thread_local! {
    /// Set while this thread does pvfs work: hooks it reaches then pass through.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as inside pvfs work for its lifetime.
pub(crate) struct Busy {
    was: bool,
}

impl Busy {
    /// Enters pvfs work.
    pub(crate) fn enter() -> Busy {
        let was = BUSY.with(|b| b.replace(true));
        Busy { was }
    }

    /// Whether the calling thread is inside pvfs work (hooks must pass through).
    pub(crate) fn active() -> bool {
        BUSY.with(|b| b.get())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(self.was));
    }
}

/// Runs a pvfs operation for a hook: marks the thread busy, turns an error into errno
/// and the failure value, and a panic into EIO (a panic never crosses into C).
pub(crate) fn pvfs_call<T: Failure>(f: impl FnOnce() -> R<T>) -> T {
    let _busy = Busy::enter();
    let caller_errno = errno();
    match catch_unwind(AssertUnwindSafe(f)) {
        // Success leaves errno as the program left it (a socket connected on the way
        // sets it; `readdir` callers tell the end of a listing from an error by it).
        Ok(Ok(v)) => {
            set_errno(caller_errno);
            v
        }
        Ok(Err(e)) => {
            set_errno(e);
            T::failure()
        }
        Err(_) => {
            set_errno(libc::EIO);
            T::failure()
        }
    }
}

/// Runs the routing part of a hook (which may touch the descriptor table) without
/// letting a panic escape: a panic there becomes EIO.
pub(crate) fn guarded<T: Failure>(f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            set_errno(libc::EIO);
            T::failure()
        }
    }
}

/// Library constructor: reads the settings and registers the fork handlers before any
/// thread of the program can race them.
extern "C" fn init() {
    let _ = catch_unwind(|| {
        fds::own();
        settings::get();
        proc::register_fork_handlers();
        // SAFETY: registers a plain function that catches its own panics.
        unsafe { libc::atexit(locks::release_at_exit) };
    });
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
