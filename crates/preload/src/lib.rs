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
mod desc;
mod dirs;
mod fds;
mod hook;
mod io;
mod lock;
mod locks;
mod meta;
mod misc;
mod proc;
mod real;
mod settings;
mod stat;

use std::panic::catch_unwind;

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
