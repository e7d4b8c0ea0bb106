//! libpvfs_preload.so: an LD_PRELOAD library that gives unmodified programs pvfs files
//! without a mount: the system-call wrappers of the PVFS paper (Carns et al., 2000,
//! *PVFS: A Parallel File System for Linux Clusters*, §3.4).
//!
//! With `PVFS_CONFIG` naming a configuration file, every POSIX call on a path under
//! `PVFS_PREFIX` (default `/pvfs`) goes to pvfs through [`pvfs_client`]; `/pvfs/a/b` is
//! the pvfs path `/a/b`. Every other path and descriptor goes to the real libc function,
//! found with `dlsym(RTLD_NEXT)` ([`real`]): a hook never calls a hooked function by
//! name, and a thread already inside pvfs work passes every call straight through
//! ([`hook::Busy`]), so hooks cannot recurse.
//!
//! Layers, each using only those above it:
//! - [`hook`]: errno values, the failure convention, the busy mark, running a pvfs
//!   operation for a hook; [`real`]: libc's functions; [`lock`]: a mutex the fork
//!   handlers can hold across `fork`.
//! - [`settings`]: the prefix and configuration, and which paths are pvfs.
//! - The kinds of state: [`proc`], the client of a process generation (a tokio
//!   runtime does not survive `fork`), with the process's credentials; [`desc`], an
//!   open file description (offset, flags, handle) and its placeholder: each open
//!   pvfs file holds a real kernel descriptor (`O_PATH`), so numbering, `close`,
//!   `dup2` and `fork` stay the kernel's; [`table`], the descriptor table; [`cache`],
//!   attributes read with a directory listing, kept a moment for `ls -l`.
//! - [`globals`]: the one instance of each, and everything else the process keeps
//!   (settings, umask, directory streams, the pvfs working directory, files unlinked
//!   while open), with the fork protocol: what a child keeps, and the locks held
//!   across `fork`.
//! - [`locks`]: advisory locks (fcntl, flock, lockf) on the servers, released at
//!   close and exit as the kernel would; [`spill`]: what a program wrote to a
//!   placeholder through calls no hook sees (stdio), moved to pvfs; [`fds`]: routing
//!   every hook's path or descriptor to pvfs or libc, and the end of a description;
//!   [`stat`]: the C structures of `stat` and `statfs`.
//! - [`handoff`]: what a new program image inherits across `exec` (the pvfs working
//!   directory and descriptors, in the environment), the exec hooks, and programs
//!   stored in pvfs run from a memfd copy.
//! - The hooks: [`cwd`] (chdir, getcwd), [`io`], [`meta`], [`dirs`], [`misc`]
//!   (open/read/write/…, stat/mkdir/rename/…, opendir/readdir/getdents,
//!   statfs/xattr/mmap/umask/…). `src/shim.c` holds the variadic hooks and the stdio
//!   (`fopencookie`) streams.
//!
//! Every exported hook catches panics (a panic becomes EIO), and errors become errno
//! values like libc's. What is and is not supported: `docs/preload.md`.

mod cache;
mod client_error;
mod cwd;
mod desc;
mod dirs;
mod fds;
mod globals;
mod handoff;
mod hook;
mod io;
mod lock;
mod locks;
mod meta;
mod misc;
mod proc;
mod real;
mod settings;
mod spill;
mod stat;
mod table;

use std::panic::catch_unwind;

/// Library constructor: reads the settings, takes over what a previous program image
/// handed over across `exec`, and registers the fork and exit handlers before any
/// thread of the program can race them.
extern "C" fn init() {
    let _ = catch_unwind(|| {
        globals::FDS.own();
        globals::settings();
        globals::register_fork_handlers();
        // Registered after the handlers above, so it runs before them: what the
        // program wrote through the kernel reaches pvfs before the child is made.
        // SAFETY: a plain function that catches its own panics.
        unsafe { libc::pthread_atfork(Some(drain_before_fork), None, None) };
        handoff::restore();
        // SAFETY: registers plain functions that catch their own panics; the last
        // registered runs first.
        unsafe {
            libc::atexit(locks::release_at_exit);
            libc::atexit(spill::drain_at_exit);
        }
    });
}

/// Fork prepare handler: moves what the program wrote through the kernel to pvfs,
/// and shares every regular file's offset with the child.
extern "C" fn drain_before_fork() {
    let _ = catch_unwind(|| {
        if !hook::Busy::active() {
            handoff::share_all();
            spill::drain_all();
        }
    });
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
