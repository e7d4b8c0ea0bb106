//! The library's process-wide state, all of it in this one place, and how it crosses
//! `fork`.
//!
//! What the library keeps for the whole process:
//! - the settings (`PVFS_CONFIG`, `PVFS_PREFIX`), read at load ([`settings`]);
//! - the client of the current *generation* ([`proc`]), made on first use, and the
//!   generation itself ([`generation`]);
//! - the umask, as the `umask` hook tracks it ([`umask`]);
//! - the descriptor table ([`FDS`], `table.rs`) and the numbering of open file
//!   descriptions ([`next_desc_id`]; the numbers name OFD locks);
//! - the library's directory streams ([`stream`]);
//! - the files unlinked while open here ([`keep_unlinked`]);
//! - the working directory inside pvfs ([`cwd`]);
//! - the attributes of the latest directory listed ([`LISTINGS`], `cache.rs`).
//!
//! Across `exec`, the pvfs working directory and descriptors are handed to the new
//! image in its environment (`handoff.rs`); nothing else is.
//!
//! Nothing else outlives a call, but for `real.rs`'s addresses of libc's functions
//! (found once, as valid in a child as in its parent), each thread's busy mark
//! (`hook.rs`, per thread) and a few once-only latches (a warning given, the fork
//! handlers registered).
//!
//! **Fork.** A tokio runtime does not survive `fork`: the child has none of its
//! threads, and its connections are the parent's sockets. So every fork starts a new
//! generation (bumped by the `pthread_atfork` child handler); the first pvfs call in
//! the child makes a new client, and descriptions re-open their files by handle
//! (`Desc::file`). The parent's client is leaked in the child, never dropped:
//! dropping it would join threads that do not exist there. The child keeps
//! everything else above: its pvfs descriptors with their descriptions (flags and
//! directory positions now its own; a regular file's offset shared with the parent
//! through its memfd, `spill.rs`, a prepare handler of its own), directory streams, the pvfs working directory, the files
//! unlinked while open, the cached listing. So that none of it is caught half
//! changed, the prepare handler takes every lock here (in one order), and the parent
//! and child handlers release them; the child also forces open each description's
//! own locks, whose holders (other threads of the parent) it does not have.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use libc::{c_int, dirent64, DIR};
use pvfs_proto::Handle;

use crate::cache::ListingCache;
use crate::hook::R;
use crate::lock::Locked;
use crate::proc::{self, Proc};
use crate::settings::{self, warn, Settings};
use crate::table::DescTable;

// ----- settings --------------------------------------------------------------------

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// The settings, read from the environment on first use (the library constructor).
pub(crate) fn settings() -> &'static Settings {
    SETTINGS.get_or_init(settings::read_env)
}

// ----- the client ------------------------------------------------------------------

/// The current generation: bumped in every forked child.
static GEN: AtomicU64 = AtomicU64::new(0);
/// The current generation's client (leaked; null until first use).
static PROC: AtomicPtr<Proc> = AtomicPtr::new(std::ptr::null_mut());
/// Serializes making the client.
static PROC_INIT: Locked<()> = Locked::new(());

/// The current generation.
pub(crate) fn generation() -> u64 {
    GEN.load(Ordering::Acquire)
}

/// The client of the current generation if one was made (never makes one).
pub(crate) fn current_proc() -> Option<&'static Proc> {
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
pub(crate) fn proc() -> R<&'static Proc> {
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
    let made: &'static Proc = Box::leak(Box::new(proc::make(gen, settings())?));
    PROC.store(made as *const Proc as *mut Proc, Ordering::Release);
    Ok(made)
}

/// The umask, tracked by the `umask` hook; `u32::MAX` until first read.
static UMASK: AtomicU32 = AtomicU32::new(u32::MAX);

/// The process umask (read once from /proc/self/status, then tracked by the `umask`
/// hook).
pub(crate) fn umask() -> u32 {
    let m = UMASK.load(Ordering::Relaxed);
    if m != u32::MAX {
        return m;
    }
    let m = pvfs_client::blocking::process_umask();
    UMASK.store(m, Ordering::Relaxed);
    m
}

/// Records the umask the process just set.
pub(crate) fn set_umask(mask: u32) {
    UMASK.store(mask & 0o777, Ordering::Relaxed);
}

// ----- descriptors -----------------------------------------------------------------

/// The process's pvfs descriptors.
pub(crate) static FDS: DescTable = DescTable::new();

/// The number of the next open file description.
static NEXT_DESC: AtomicU64 = AtomicU64::new(1);

/// A new description's number (names its OFD locks).
pub(crate) fn next_desc_id() -> u64 {
    NEXT_DESC.fetch_add(1, Ordering::Relaxed)
}

// ----- directory streams -----------------------------------------------------------

/// A pvfs directory stream: what a `DIR *` of the library points to (`dirs.rs`).
pub(crate) struct Stream {
    /// Its directory descriptor.
    pub(crate) fd: c_int,
    /// The entry readdir returned last (valid until the next call, as POSIX says).
    pub(crate) ent: dirent64,
}

/// Every open pvfs stream, by address.
static STREAMS: Locked<BTreeMap<usize, Box<Stream>>> = Locked::new(BTreeMap::new());
/// Streams in STREAMS (lets glibc's streams skip the lock while there are none).
static NSTREAMS: AtomicUsize = AtomicUsize::new(0);

/// The pvfs stream `dir` points to, if it is one.
pub(crate) fn stream(dir: *mut DIR) -> Option<*mut Stream> {
    if dir.is_null() || NSTREAMS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut s = STREAMS.lock();
    s.get_mut(&(dir as usize)).map(|b| &mut **b as *mut Stream)
}

/// A new stream over pvfs directory descriptor `fd`.
pub(crate) fn new_stream(fd: c_int) -> *mut DIR {
    // SAFETY: an all-zero dirent64 is a valid value.
    let mut b = Box::new(Stream {
        fd,
        ent: unsafe { std::mem::zeroed() },
    });
    let p = &mut *b as *mut Stream;
    let mut s = STREAMS.lock();
    s.insert(p as usize, b);
    NSTREAMS.store(s.len(), Ordering::Release);
    p.cast()
}

/// Forgets stream `dir` (closedir); returns it.
pub(crate) fn remove_stream(dir: *mut DIR) -> Option<Box<Stream>> {
    let mut s = STREAMS.lock();
    let b = s.remove(&(dir as usize));
    NSTREAMS.store(s.len(), Ordering::Release);
    b
}

// ----- files unlinked while open ---------------------------------------------------

/// Files unlinked while open here: removed when their last descriptor closes.
static PENDING: Locked<Vec<Handle>> = Locked::new(Vec::new());

/// Records that file `handle`, unlinked while open here, goes at its last close.
pub(crate) fn keep_unlinked(handle: Handle) {
    PENDING.lock().push(handle);
}

/// Whether file `handle` was unlinked while open here; forgets it.
pub(crate) fn take_unlinked(handle: Handle) -> bool {
    let mut p = PENDING.lock();
    match p.iter().position(|&h| h == handle) {
        Some(i) => {
            p.swap_remove(i);
            true
        }
        None => false,
    }
}

// ----- the working directory -------------------------------------------------------

/// The pvfs working directory (a pvfs path), if the process is in one.
static CWD: Locked<Option<String>> = Locked::new(None);
/// Whether CWD is set (lets every relative path skip the lock otherwise).
static IN_PVFS: AtomicBool = AtomicBool::new(false);

/// The pvfs working directory, if any.
pub(crate) fn cwd() -> Option<String> {
    if !IN_PVFS.load(Ordering::Acquire) {
        return None;
    }
    CWD.lock().clone()
}

/// Sets the pvfs working directory (`None`: the process's is a local one).
pub(crate) fn set_cwd(p: Option<String>) {
    let mut c = CWD.lock();
    IN_PVFS.store(p.is_some(), Ordering::Release);
    *c = p;
}

// ----- the latest listing ----------------------------------------------------------

/// The attributes that came with the latest directory listed.
pub(crate) static LISTINGS: ListingCache = ListingCache::new();

// ----- fork ------------------------------------------------------------------------

/// Fork prepare handler: takes every lock here, so the child gets them unlocked and
/// consistent.
extern "C" fn before_fork() {
    PROC_INIT.raw_lock();
    FDS.lock_for_fork();
    STREAMS.raw_lock();
    PENDING.raw_lock();
    CWD.raw_lock();
    LISTINGS.lock_for_fork();
}

/// Releases the locks [`before_fork`] took but the client's (parent and child).
fn unlock_after_fork() {
    LISTINGS.unlock_after_fork();
    CWD.raw_unlock();
    PENDING.raw_unlock();
    STREAMS.raw_unlock();
    FDS.unlock_after_fork();
}

/// Fork parent handler: releases what [`before_fork`] took.
extern "C" fn after_fork_parent() {
    unlock_after_fork();
    PROC_INIT.raw_unlock();
}

/// Fork child handler: starts a new generation, owns the descriptor table, forces
/// open the descriptions' locks and releases the others.
extern "C" fn after_fork_child() {
    GEN.fetch_add(1, Ordering::AcqRel);
    FDS.own();
    // SAFETY: the child is single-threaded here, and every lock here was taken by
    // before_fork, so nothing else holds them.
    unsafe { FDS.reset_in_child() };
    unlock_after_fork();
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
