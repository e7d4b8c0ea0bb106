//! The per-process pvfs client: one [`BlockingClient`] (a small tokio runtime and the
//! connections) shared by every thread, made on first use.
//!
//! A tokio runtime does not survive `fork`: the child has none of its threads, and its
//! connections are the parent's sockets. So every fork starts a new *generation*
//! (bumped by the `pthread_atfork` child handler); the first pvfs call in the child
//! makes a new client, and descriptors re-open their files by handle
//! ([`crate::desc::Desc::file`]). The parent's client is leaked in the child, never
//! dropped: dropping it would join threads that do not exist there.
//!
//! The fork handlers also hold the library's global locks across `fork` so the child
//! gets them in a consistent, unlocked state.

use std::future::Future;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use pvfs_client::blocking::BlockingClient;
use pvfs_client::Attr;

use crate::hook::{client_errno, R};
use crate::lock::Locked;
use crate::settings::{self, warn};

/// The client of one process generation.
pub(crate) struct Proc {
    /// The generation this client belongs to.
    pub(crate) gen: u64,
    /// The client and its runtime.
    pub(crate) client: BlockingClient,
    /// Effective uid and gid and supplementary groups (for open's permission check).
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

/// The current generation: bumped in every forked child.
static GEN: AtomicU64 = AtomicU64::new(0);
/// The current generation's client (leaked; null until first use).
static PROC: AtomicPtr<Proc> = AtomicPtr::new(std::ptr::null_mut());
/// Serializes making the client.
static PROC_INIT: Locked<()> = Locked::new(());
/// The umask, tracked by the `umask` hook; `u32::MAX` until first read.
static UMASK: AtomicU32 = AtomicU32::new(u32::MAX);

/// The current generation.
pub(crate) fn generation() -> u64 {
    GEN.load(Ordering::Acquire)
}

/// The client of the current generation if one was made (never makes one).
pub(crate) fn current() -> Option<&'static Proc> {
    let p = PROC.load(Ordering::Acquire);
    // SAFETY: PROC only ever holds pointers from Box::leak, never freed.
    unsafe { p.as_ref() }.filter(|p| p.gen == generation())
}

/// Whether the client of the current generation has been made (a pvfs path was used).
pub(crate) fn started() -> bool {
    let p = PROC.load(Ordering::Acquire);
    // SAFETY: PROC only ever holds pointers from Box::leak, never freed.
    unsafe { p.as_ref() }.is_some_and(|p| p.gen == generation())
}

/// The client of the current generation, made on first use. Fails with EIO (and one
/// line on stderr) if the configuration cannot be loaded.
pub(crate) fn get() -> R<&'static Proc> {
    let gen = generation();
    let p = PROC.load(Ordering::Acquire);
    // SAFETY: PROC only ever holds pointers from Box::leak, never freed.
    if let Some(p) = unsafe { p.as_ref() } {
        if p.gen == gen {
            return Ok(p);
        }
    }
    let _g = PROC_INIT.lock();
    let p = PROC.load(Ordering::Acquire);
    // SAFETY: as above.
    if let Some(p) = unsafe { p.as_ref() } {
        if p.gen == gen {
            return Ok(p);
        }
    }
    let made: &'static Proc = Box::leak(Box::new(make(gen)?));
    PROC.store(made as *const Proc as *mut Proc, Ordering::Release);
    Ok(made)
}

fn make(gen: u64) -> R<Proc> {
    static WARNED: AtomicU32 = AtomicU32::new(0);
    let s = settings::get();
    let Some(path) = s.config.as_ref() else {
        return Err(libc::ENOSYS);
    };
    let config = match pvfs_config::Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            if WARNED.swap(1, Ordering::Relaxed) == 0 {
                warn(&format!("cannot load PVFS_CONFIG {}: {e}", path.display()));
            }
            return Err(libc::EIO);
        }
    };
    let threads = std::env::var("PVFS_PRELOAD_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0)
        .min(64);
    let client = BlockingClient::new(config, threads).map_err(|e| {
        warn(&format!("cannot start the pvfs client runtime: {e}"));
        libc::EIO
    })?;
    let creds = client.client().creds().clone();
    Ok(Proc {
        gen,
        uid: creds.uid,
        gid: creds.gid,
        groups: groups(),
        client,
    })
}

/// The calling process's supplementary groups.
fn groups() -> Vec<u32> {
    // SAFETY: getgroups(0, NULL) only returns the count.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut v = vec![0 as libc::gid_t; n as usize];
    // SAFETY: v has room for n entries.
    let got = unsafe { libc::getgroups(n, v.as_mut_ptr()) };
    v.truncate(got.max(0) as usize);
    v
}

impl Proc {
    /// Runs a client future to completion on this process's runtime. From a thread
    /// that is itself inside a tokio runtime (a tokio program doing blocking file I/O)
    /// the future runs on a helper thread, since a runtime cannot be entered twice.
    pub(crate) fn run<F: Future + Send>(&self, f: F) -> F::Output
    where
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.client.block_on(f);
        }
        std::thread::scope(|s| {
            let h = s.spawn(|| self.client.block_on(f));
            match h.join() {
                Ok(v) => v,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }

    /// Runs a client call and maps its error to an errno.
    pub(crate) fn call<T: Send, F>(&self, f: F) -> R<T>
    where
        F: Future<Output = pvfs_client::Result<T>> + Send,
    {
        self.run(f).map_err(client_errno)
    }

    /// The async client.
    pub(crate) fn client(&self) -> &pvfs_client::Client {
        self.client.client()
    }

    /// Whether the caller may access `attr` for `want` (a mask of `R_OK`, `W_OK`,
    /// `X_OK`), by the shared POSIX rules (`pvfs_proto::access`).
    pub(crate) fn may(&self, attr: &Attr, want: u32) -> bool {
        let creds = pvfs_proto::Creds {
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
        };
        pvfs_proto::access::allows(attr, &creds, want)
    }
}

/// The process umask (read once from /proc/self/status, then tracked by the `umask`
/// hook).
pub(crate) fn current_umask() -> u32 {
    let m = UMASK.load(Ordering::Relaxed);
    if m != u32::MAX {
        return m;
    }
    let m = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022);
    UMASK.store(m, Ordering::Relaxed);
    m
}

/// `umask`: sets the real umask and remembers it.
#[no_mangle]
unsafe extern "C" fn umask(mask: libc::mode_t) -> libc::mode_t {
    // SAFETY: umask has no preconditions.
    let old = unsafe { crate::real::umask(mask) };
    UMASK.store(mask & 0o777, Ordering::Relaxed);
    old
}

/// Fork prepare handler: takes every global lock, so the child gets them unlocked
/// and consistent.
extern "C" fn before_fork() {
    PROC_INIT.raw_lock();
    crate::fds::lock_all();
}

/// Fork parent handler: releases what [`before_fork`] took.
extern "C" fn after_fork_parent() {
    crate::fds::unlock_all();
    PROC_INIT.raw_unlock();
}

/// Fork child handler: starts a new generation and releases the locks.
extern "C" fn after_fork_child() {
    GEN.fetch_add(1, Ordering::AcqRel);
    crate::fds::own();
    // SAFETY: the child is single-threaded here, and every global lock was taken by
    // before_fork, so nothing else holds them.
    unsafe { crate::fds::reset_in_child() };
    crate::fds::unlock_all();
    PROC_INIT.raw_unlock();
}

/// Registers the fork handlers (once, from the library constructor).
pub(crate) fn register_fork_handlers() {
    static DONE: AtomicU32 = AtomicU32::new(0);
    if DONE.swap(1, Ordering::AcqRel) != 0 {
        return;
    }
    // SAFETY: the handlers are plain functions that only take and release the
    // library's own locks.
    let rc = unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        )
    };
    if rc != 0 {
        warn("pthread_atfork failed; pvfs may not work in forked children");
    }
}
