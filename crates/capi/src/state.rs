//! The library's process-wide state and the plumbing every C function goes through:
//! the one client (behind a lock, with its runtime), the descriptor table, errno, the
//! last error message, and checked conversions of C pointers.
//!
//! Descriptors are real kernel descriptors (each open file holds an
//! `open("/dev/null")`), so pvfs descriptors never collide with the process's other
//! descriptors and are numbered as the application expects; the table maps each to
//! the pvfs object behind it. Every entry point runs inside [`ffi`], which turns a
//! `Fail` into `errno` + the function's error value and a panic into EIO, so nothing
//! unwinds into C.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use libc::{c_char, c_int, c_void, size_t};
use pvfs_client::blocking::BlockingClient;
use pvfs_client::{Client, File, Partition};
use pvfs_proto::Handle;

use crate::counts::Counts;

/// A failed call: the errno to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fail(pub c_int);

/// Result of the internals of a C function.
pub(crate) type CResult<T> = Result<T, Fail>;

impl From<pvfs_client::Error> for Fail {
    fn from(e: pvfs_client::Error) -> Fail {
        set_message(&e.message);
        Fail(e.errno.code())
    }
}

/// A failure with errno `e` and a message for [`crate::pvfs_last_error`].
pub(crate) fn fail(e: c_int, message: &str) -> Fail {
    set_message(message);
    Fail(e)
}

thread_local! {
    /// The message of this thread's last failure.
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_message(m: &str) {
    let c = CString::new(m.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Pointer to this thread's last error message (valid until its next failure).
pub(crate) fn last_message() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// Runs the body of a C function: `Ok(v)` returns `v` with errno as the caller left
/// it (connecting a socket on the way sets it, and a caller of `readdir` tells the end
/// of a listing from an error by errno); `Err(Fail(e))` sets errno to `e` and returns
/// `failed`; a panic sets EIO and returns `failed`.
pub(crate) fn ffi<T>(failed: T, f: impl FnOnce() -> CResult<T>) -> T {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    let caller_errno = unsafe { *libc::__errno_location() };
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => {
            set_errno(caller_errno);
            v
        }
        Ok(Err(Fail(e))) => {
            set_errno(e);
            failed
        }
        Err(_) => {
            set_message("internal error (panic) in libpvfs");
            set_errno(libc::EIO);
            failed
        }
    }
}

/// Locks a mutex, recovering it if a panic (caught by [`ffi`]) poisoned it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ----- the global client ---------------------------------------------------------------

/// Everything `pvfs_init` sets up.
pub(crate) struct Global {
    /// The client and its runtime.
    pub bc: BlockingClient,
    /// The process's umask when `pvfs_init` ran, applied to creates.
    pub umask: u32,
    /// The configuration file, as given (for repeated `pvfs_init` calls).
    pub config_path: PathBuf,
    /// The process that initialized (a forked child must initialize again).
    pub pid: u32,
    /// Counts as of the last `pvfs_stats_reset`.
    pub baseline: Mutex<Counts>,
}

impl Global {
    /// The async client.
    pub fn client(&self) -> &Client {
        self.bc.client()
    }

    /// Runs an async client operation to completion.
    pub fn run<F: std::future::Future>(&self, f: F) -> F::Output {
        self.bc.block_on(f)
    }
}

/// The initialized library: the state and the number of `pvfs_init` calls not yet
/// matched by `pvfs_finalize`.
pub(crate) struct Initialized {
    pub global: Arc<Global>,
    pub refs: usize,
}

/// The library's state; `None` before `pvfs_init` and after the last `pvfs_finalize`.
pub(crate) static STATE: RwLock<Option<Initialized>> = RwLock::new(None);

/// The current process id.
pub(crate) fn pid() -> u32 {
    std::process::id()
}

/// The initialized state (ENXIO before `pvfs_init`, or in a forked child that has not
/// called it).
pub(crate) fn global() -> CResult<Arc<Global>> {
    let state = STATE.read().unwrap_or_else(|p| p.into_inner());
    match state.as_ref() {
        Some(i) if i.global.pid == pid() => Ok(i.global.clone()),
        _ => Err(fail(
            libc::ENXIO,
            "libpvfs is not initialized in this process (call pvfs_init)",
        )),
    }
}

// ----- descriptors -------------------------------------------------------------------

/// Where a file descriptor reads and writes.
pub(crate) struct Cursor {
    /// Current position (in the partition's bytes when one is set).
    pub pos: u64,
    /// The partition set with `pvfs_set_partition`.
    pub part: Option<Partition>,
}

/// An open regular file.
pub(crate) struct FileFd {
    /// The file (layout included: I/O goes straight to the data servers).
    pub file: File,
    /// Position and partition; held during a read or write so that concurrent calls
    /// on one descriptor are atomic with respect to the position.
    pub cur: Mutex<Cursor>,
    /// Whether anything was written through this descriptor since the last mtime
    /// update (close and fsync then update the metafile's mtime).
    pub wrote: AtomicBool,
    /// The file is held open for this descriptor (`pvfs_client::holds`); let go of
    /// when its last duplicate closes.
    pub held: bool,
}

/// How much of a directory listing is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// Names, handles and kinds.
    Names,
    /// Plus attributes from the metadata servers (phase 1 of readdirplus).
    Attrs,
    /// Plus file sizes from the data servers (phase 2).
    Sizes,
}

/// A directory listing fetched once per descriptor (at its first read or after a
/// rewind) and handed out piece by piece.
pub(crate) struct Listing {
    pub level: Level,
    pub items: Vec<(
        pvfs_client::DirEntry,
        Option<pvfs_client::Result<pvfs_client::Attr>>,
    )>,
}

/// Position in a directory and what was fetched.
pub(crate) struct DirCursor {
    pub listing: Option<Listing>,
    pub pos: usize,
}

/// An open directory.
pub(crate) struct DirFd {
    pub handle: Handle,
    pub cur: Mutex<DirCursor>,
}

/// What a descriptor refers to.
// Each lives once, inside the descriptor's `Arc`: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Obj {
    File(FileFd),
    Dir(DirFd),
}

/// One open pvfs descriptor.
pub(crate) struct OpenFd {
    /// The state it was opened with (its client).
    pub g: Arc<Global>,
    /// Access mode and O_APPEND.
    pub flags: c_int,
    pub obj: Obj,
    /// Unique per descriptor opened: names its OFD locks and `flock`s.
    pub serial: u64,
}

impl Drop for OpenFd {
    /// The last duplicate of the descriptor closed: its file is let go of (deleted
    /// then if another client unlinked it meanwhile). Not in a forked child, whose
    /// parent still holds it.
    fn drop(&mut self) {
        if let Obj::File(f) = &self.obj {
            if f.held && self.g.pid == pid() {
                self.g.run(self.g.client().unhold(f.file.handle()));
            }
        }
    }
}

impl OpenFd {
    /// Whether reading is allowed.
    pub fn readable(&self) -> bool {
        self.flags & libc::O_ACCMODE != libc::O_WRONLY
    }

    /// Whether writing is allowed.
    pub fn writable(&self) -> bool {
        self.flags & libc::O_ACCMODE != libc::O_RDONLY
    }

    /// The regular file behind it (EISDIR for a directory).
    pub fn file(&self) -> CResult<&FileFd> {
        match &self.obj {
            Obj::File(f) => Ok(f),
            Obj::Dir(_) => Err(fail(libc::EISDIR, "descriptor refers to a directory")),
        }
    }

    /// The directory behind it (ENOTDIR for a file).
    pub fn dir(&self) -> CResult<&DirFd> {
        match &self.obj {
            Obj::Dir(d) => Ok(d),
            Obj::File(_) => Err(fail(libc::ENOTDIR, "descriptor is not a directory")),
        }
    }
}

/// The descriptor table.
static FDS: Mutex<Option<HashMap<c_int, Arc<OpenFd>>>> = Mutex::new(None);

/// The open descriptor `fd` (EBADF if it is not a pvfs descriptor of this process).
pub(crate) fn get_fd(fd: c_int) -> CResult<Arc<OpenFd>> {
    let t = lock(&FDS);
    match t.as_ref().and_then(|m| m.get(&fd)) {
        Some(o) if o.g.pid == pid() => Ok(o.clone()),
        _ => Err(fail(libc::EBADF, "not an open pvfs descriptor")),
    }
}

/// A new descriptor's serial, unique in the process: the owner of its OFD locks and
/// `flock`s (`crate::locks`).
fn next_serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Reserves a kernel descriptor for `obj` and enters it in the table.
pub(crate) fn new_fd(g: &Arc<Global>, flags: c_int, obj: Obj) -> CResult<c_int> {
    // SAFETY: a constant NUL-terminated path; open has no other preconditions.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(fail(
            e.raw_os_error().unwrap_or(libc::EMFILE),
            &format!("cannot reserve a descriptor: {e}"),
        ));
    }
    let entry = Arc::new(OpenFd {
        g: g.clone(),
        flags: flags & (libc::O_ACCMODE | libc::O_APPEND),
        obj,
        serial: next_serial(),
    });
    lock(&FDS)
        .get_or_insert_with(HashMap::new)
        .insert(fd, entry);
    Ok(fd)
}

/// Removes `fd` from the table and releases its kernel descriptor; returns what it
/// referred to.
pub(crate) fn remove_fd(fd: c_int) -> CResult<Arc<OpenFd>> {
    let entry = {
        let mut t = lock(&FDS);
        match t.as_mut().and_then(|m| m.remove(&fd)) {
            Some(o) if o.g.pid == pid() => o,
            _ => return Err(fail(libc::EBADF, "not an open pvfs descriptor")),
        }
    };
    // The table entry is gone before the number is released, so a concurrent open
    // that gets the same number cannot see the old entry.
    // SAFETY: `fd` is the kernel descriptor this table reserved.
    unsafe { libc::close(fd) };
    Ok(entry)
}

/// Empties the table (at the last `pvfs_finalize`), closing the kernel descriptors.
pub(crate) fn close_all() -> Vec<Arc<OpenFd>> {
    let old = lock(&FDS).take().unwrap_or_default();
    let mut out = Vec::with_capacity(old.len());
    for (fd, o) in old {
        // SAFETY: a kernel descriptor this table reserved.
        unsafe { libc::close(fd) };
        out.push(o);
    }
    out
}

/// Forgets the table inherited from the parent in a forked child: its entries belong
/// to the parent's client, whose runtime threads do not exist here. They are leaked,
/// not dropped (dropping could touch the parent's runtime state); the kernel
/// descriptors stay open as plain `/dev/null` descriptors.
pub(crate) fn forget_inherited() {
    if let Some(old) = lock(&FDS).take() {
        std::mem::forget(old);
    }
}

// ----- C arguments ---------------------------------------------------------------------

/// A C string argument as UTF-8 (EFAULT for NULL, EINVAL if not UTF-8).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn cstr<'a>(p: *const c_char) -> CResult<&'a str> {
    if p.is_null() {
        return Err(fail(libc::EFAULT, "NULL string argument"));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|_| fail(libc::EINVAL, "path is not valid UTF-8"))
}

/// A path argument: like [`cstr`], and not empty (ENOENT, as the kernel).
///
/// # Safety
/// As [`cstr`].
pub(crate) unsafe fn path<'a>(p: *const c_char) -> CResult<&'a str> {
    // SAFETY: same contract.
    let s = unsafe { cstr(p) }?;
    if s.is_empty() {
        return Err(fail(libc::ENOENT, "empty path"));
    }
    if s.len() > 4096 {
        return Err(fail(libc::ENAMETOOLONG, "path longer than PATH_MAX"));
    }
    Ok(s)
}

/// A caller's buffer of `n` bytes (EFAULT for NULL with `n > 0`, EINVAL past
/// `SSIZE_MAX`).
///
/// # Safety
/// `p` is NULL or valid for reads and writes of `n` bytes, unaliased, for `'a`.
pub(crate) unsafe fn buf_mut<'a>(p: *mut c_void, n: size_t) -> CResult<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(fail(libc::EFAULT, "NULL buffer"));
    }
    if n > isize::MAX as usize {
        return Err(fail(libc::EINVAL, "length above SSIZE_MAX"));
    }
    // SAFETY: non-NULL, and valid for `n` bytes by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, n) })
}

/// A caller's read-only buffer of `n` bytes (as [`buf_mut`]).
///
/// # Safety
/// `p` is NULL or valid for reads of `n` bytes for `'a`.
pub(crate) unsafe fn buf<'a>(p: *const c_void, n: size_t) -> CResult<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(fail(libc::EFAULT, "NULL buffer"));
    }
    if n > isize::MAX as usize {
        return Err(fail(libc::EINVAL, "length above SSIZE_MAX"));
    }
    // SAFETY: non-NULL, and valid for `n` bytes by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, n) })
}

/// A caller's output structure, checked for NULL (EFAULT); the caller writes it with
/// [`put`] (it may be uninitialized memory, so no reference to it is made).
pub(crate) fn out<T>(p: *mut T) -> CResult<*mut T> {
    if p.is_null() {
        return Err(fail(libc::EFAULT, "NULL output argument"));
    }
    Ok(p)
}

/// Writes `v` to a caller's output structure checked by [`out`].
///
/// # Safety
/// `p` is non-NULL and valid for writes of one `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: by the caller's contract; `write` does not read or drop the old value.
    unsafe { p.write(v) }
}

/// A caller's array of `n` elements (EFAULT for NULL with `n > 0`).
///
/// # Safety
/// `p` is NULL or valid for reads of `n` elements for `'a`.
pub(crate) unsafe fn array<'a, T>(p: *const T, n: usize) -> CResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(fail(libc::EFAULT, "NULL array"));
    }
    // SAFETY: non-NULL, and valid for `n` elements by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}
