//! An open file description on pvfs ([`Desc`]) and the kernel descriptor that
//! stands for it.
//!
//! Opening a pvfs file reserves a placeholder descriptor: an `O_PATH` descriptor of a
//! fresh, empty memfd named after the file (so `/proc/PID/fd` shows `/memfd:pvfs:/a/b`),
//! or of `/dev/null` where memfd is not available; for a file open for writing, a
//! write-only `O_APPEND` descriptor of the memfd, which collects what the program
//! writes through calls no hook sees (`spill.rs`). The kernel thus numbers, inherits
//! (across `exec` too: `handoff.rs`), closes and duplicates it like any descriptor; a
//! read that reaches it without the library gets EBADF, never silent wrong data. The
//! descriptor table (`table.rs`) maps placeholder number → [`Desc`], the open file
//! description: handle, flags and offset, shared by every `dup` of it as POSIX says;
//! it recognizes a placeholder by its identity (device and inode).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use libc::c_int;
use pvfs_client::File;
use pvfs_proto::Handle;

use crate::hook::R;
use crate::lock::{Guard, Locked};
use crate::proc::Proc;
use crate::real;

/// What kind of object a descriptor is open on (whether opened with `O_PATH` or not:
/// see [`Desc::path_only`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular file: read, write, seek.
    File,
    /// A directory: readdir, and the base of `*at` calls.
    Dir,
    /// A symlink, FIFO, socket or device node: only reachable with `O_PATH`.
    Other,
}

/// One directory entry as readdir hands it out.
#[derive(Clone, Debug)]
pub(crate) struct Ent {
    /// The name (no NUL).
    pub(crate) name: Vec<u8>,
    /// The object's handle (`d_ino`).
    pub(crate) ino: u64,
    /// `DT_*`.
    pub(crate) dtype: u8,
}

/// What a description caches per process generation (rebuilt after fork).
struct Cache {
    gen: u64,
    file: Option<Arc<File>>,
    listing: Option<Arc<Vec<Ent>>>,
}

/// An open file description on pvfs. Its end, when its last descriptor goes, is in
/// `fds.rs` (`impl Drop`): its OFD locks go, and a file unlinked while open here.
pub(crate) struct Desc {
    /// What it is open on.
    pub(crate) kind: Kind,
    /// The pvfs path it was opened by (a directory's base for `*at` calls).
    pub(crate) path: String,
    /// The object's handle.
    pub(crate) handle: Handle,
    /// For a directory, its parent's handle (`..` in listings).
    pub(crate) parent: Handle,
    /// `O_RDONLY`, `O_WRONLY` or `O_RDWR`.
    pub(crate) acc: c_int,
    /// Status flags as `F_GETFL` shows them, without the access mode.
    pub(crate) flags: AtomicI32,
    /// The file offset (a directory's: the next entry's index). Held across a whole
    /// read or write, so calls sharing the description see each other's effects in
    /// some order, as Linux's per-file position lock does. Reached through
    /// [`Desc::pos`], which keeps it in the memfd once it is shared.
    pos: Locked<u64>,
    /// Whether the offset lives in the memfd's first [`OFFSET_BYTES`] bytes, read and
    /// written through the keeper, so that every process that has the description
    /// (after `fork`, after `exec`) shares it, as POSIX says.
    shared: std::sync::atomic::AtomicBool,
    cache: Locked<Cache>,
    /// Device and inode of the placeholder, to recognize it.
    pub(crate) ident: (u64, u64),
    /// Unique per description: names its OFD locks and `flock`s.
    pub(crate) id: u64,
    /// Its file is held open at its server by this process generation's client
    /// (`pvfs_client::holds`): let go of when the description goes.
    held: std::sync::atomic::AtomicBool,
    /// The library's own descriptor (read-write, close-on-exec, numbered high) of the
    /// memfd behind the placeholder: from the open for a file open for writing (the
    /// memfd collects what the program writes through the kernel, `spill.rs`), from
    /// the first `fork` or `exec` for any regular file (the memfd holds the shared
    /// offset); -1 if none.
    keeper: AtomicI32,
}

impl Desc {
    /// A description of `kind` on `path` (object `handle`) with open `flags`, number
    /// `id`, made in process generation `gen`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        kind: Kind,
        path: String,
        handle: Handle,
        parent: Handle,
        flags: c_int,
        file: Option<File>,
        ident: (u64, u64),
        gen: u64,
        id: u64,
    ) -> Desc {
        Desc {
            kind,
            path,
            handle,
            parent,
            acc: flags & libc::O_ACCMODE,
            flags: AtomicI32::new(flags & STATUS_FLAGS),
            pos: Locked::new(0),
            cache: Locked::new(Cache {
                gen,
                file: file.map(Arc::new),
                listing: None,
            }),
            ident,
            id,
            held: std::sync::atomic::AtomicBool::new(false),
            keeper: AtomicI32::new(-1),
            shared: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The offset, locked for the caller's whole operation: from the memfd when
    /// shared, written back there when the guard goes.
    pub(crate) fn pos(&self) -> Pos<'_> {
        let mut guard = self.pos.lock();
        let keeper = self
            .keeper()
            .filter(|_| self.shared.load(Ordering::Acquire));
        if let Some(k) = keeper {
            let mut b = [0u8; OFFSET_BYTES as usize];
            // SAFETY: b is writable for its length; k is the description's own.
            let n = unsafe { real::pread64(k, b.as_mut_ptr().cast(), b.len(), 0) };
            if n == b.len() as isize {
                *guard = u64::from_le_bytes(b);
            }
        }
        let was = *guard;
        Pos { guard, keeper, was }
    }

    /// Makes the offset shared with every process that has or will have the
    /// description (before `fork` and `exec`): a regular file's description gets a
    /// keeper (from its live descriptor `fd`) if it had none and `may_open` (not in
    /// a `vfork` child, whose descriptors are not its parent's), and its offset moves
    /// into the memfd. Directories keep theirs (a listing's index).
    pub(crate) fn share(&self, fd: c_int, may_open: bool) {
        if self.kind != Kind::File || self.path_only() || self.shared.load(Ordering::Acquire) {
            return;
        }
        let mut guard = self.pos.lock();
        if self.keeper().is_none() {
            if !may_open {
                return;
            }
            let Some(k) = reopen_keeper(fd) else {
                return;
            };
            self.set_keeper(Some(k));
        }
        let Some(k) = self.keeper() else {
            return;
        };
        let b = guard.to_le_bytes();
        // A vfork child may have closed the keeper in its own table (Python's
        // subprocess closes every descriptor it does not pass): it writes through a
        // descriptor of its own, made from `fd`, and closes it.
        let own = if may_open { None } else { reopen_keeper(fd) };
        let w = own.unwrap_or(k);
        // SAFETY: b is readable for its length; w is the description's keeper or a
        // descriptor of its memfd made just now.
        if unsafe { real::pwrite64(w, b.as_ptr().cast(), b.len(), 0) } == b.len() as isize {
            self.shared.store(true, Ordering::Release);
        }
        if let Some(o) = own {
            // SAFETY: made just now, ours.
            unsafe { real::close(o) };
        }
        *guard = u64::from_le_bytes(b);
    }

    /// Takes over a description handed over across `exec` whose keeper holds the
    /// offset.
    pub(crate) fn mark_shared(&self) {
        if self.keeper().is_some() {
            self.shared.store(true, Ordering::Release);
        }
    }

    /// Gives the description the library's own descriptor `fd` of its memfd (taken
    /// over: closed when the description goes).
    pub(crate) fn set_keeper(&self, fd: Option<c_int>) {
        self.keeper.store(fd.unwrap_or(-1), Ordering::Relaxed);
    }

    /// The library's own descriptor of the placeholder's memfd, if it has one.
    pub(crate) fn keeper(&self) -> Option<c_int> {
        let k = self.keeper.load(Ordering::Relaxed);
        (k >= 0).then_some(k)
    }

    /// Takes the keeper descriptor away (to close it).
    pub(crate) fn take_keeper(&self) -> Option<c_int> {
        let k = self.keeper.swap(-1, Ordering::Relaxed);
        (k >= 0).then_some(k)
    }

    /// Records that its file is held open by the current process generation.
    pub(crate) fn mark_held(&self) {
        self.held.store(true, Ordering::Relaxed);
    }

    /// Whether its file is held by the client of process generation `gen` (not a
    /// description a forked child inherited).
    pub(crate) fn held_in(&self, gen: u64) -> bool {
        self.held.load(Ordering::Relaxed) && self.cache.lock().gen == gen
    }

    /// Whether reads are allowed (never through an `O_PATH` descriptor).
    pub(crate) fn readable(&self) -> bool {
        !self.path_only() && (self.acc == libc::O_RDONLY || self.acc == libc::O_RDWR)
    }

    /// Whether writes are allowed (never through an `O_PATH` descriptor).
    pub(crate) fn writable(&self) -> bool {
        !self.path_only() && (self.acc == libc::O_WRONLY || self.acc == libc::O_RDWR)
    }

    /// Whether it was opened with `O_PATH`: it names an object for `fstat`, `fchdir`,
    /// `fstatfs` and as the directory of `*at` calls, but reads, writes, listings and
    /// `f*` attribute changes fail with EBADF, as the kernel answers.
    pub(crate) fn path_only(&self) -> bool {
        self.status() & libc::O_PATH != 0
    }

    /// Current status flags.
    pub(crate) fn status(&self) -> c_int {
        self.flags.load(Ordering::Relaxed)
    }

    /// The description's cache, emptied if it is of another process generation (a
    /// forked child's first use).
    fn cache_for(&self, p: &Proc) -> Guard<'_, Cache> {
        let mut c = self.cache.lock();
        if c.gen != p.gen {
            *c = Cache {
                gen: p.gen,
                file: None,
                listing: None,
            };
        }
        c
    }

    /// The open file for I/O (re-opened by handle in a forked child).
    pub(crate) fn file(&self, p: &Proc) -> R<Arc<File>> {
        let mut c = self.cache_for(p);
        if let Some(f) = &c.file {
            return Ok(f.clone());
        }
        let f = Arc::new(p.call(p.client().open_handle(self.handle))?);
        c.file = Some(f.clone());
        Ok(f)
    }

    /// The directory's listing, made by `read` on first use (in this process
    /// generation) and after a rewind. The description's cache stays locked while
    /// `read` runs, so threads sharing the description read it once.
    pub(crate) fn listing(&self, p: &Proc, read: impl FnOnce() -> R<Vec<Ent>>) -> R<Arc<Vec<Ent>>> {
        let mut c = self.cache_for(p);
        if let Some(l) = &c.listing {
            return Ok(l.clone());
        }
        let l = Arc::new(read()?);
        c.listing = Some(l.clone());
        Ok(l)
    }

    /// Forgets the listing (rewinddir, lseek to 0): the next read lists again.
    pub(crate) fn forget_listing(&self) {
        self.cache.lock().listing = None;
    }

    /// Forces open the description's locks in a forked child, whose other threads
    /// (which may have held them) do not exist there. Only for the fork child
    /// handler, while the child has one thread.
    pub(crate) fn unlock_in_child(&self) {
        self.pos.raw_unlock();
        self.cache.raw_unlock();
    }
}

/// Status flags a description keeps (what `F_GETFL` reports besides the access mode).
pub(crate) const STATUS_FLAGS: c_int = libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DSYNC
    | libc::O_SYNC
    | libc::O_DIRECT
    | libc::O_NOATIME
    | libc::O_LARGEFILE
    | libc::O_PATH
    | libc::O_DIRECTORY;

/// Flags `F_SETFL` may change.
pub(crate) const SETFL_FLAGS: c_int =
    libc::O_APPEND | libc::O_NONBLOCK | libc::O_DIRECT | libc::O_NOATIME;

/// Device and inode of what `fd` refers to, from the real fstat.
pub(crate) fn identity(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid value; fstat writes into it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a live, writable stat.
    let rc = unsafe { real::fstat(fd, &mut st) };
    (rc == 0).then_some((st.st_dev, st.st_ino))
}

/// The offset (little-endian) at the start of a shared description's memfd; what a
/// program writes through the kernel follows it.
pub(crate) const OFFSET_BYTES: u64 = 8;

/// The offset of a description, locked (see [`Desc::pos`]).
pub(crate) struct Pos<'a> {
    guard: Guard<'a, u64>,
    keeper: Option<c_int>,
    was: u64,
}

impl std::ops::Deref for Pos<'_> {
    type Target = u64;
    fn deref(&self) -> &u64 {
        &self.guard
    }
}

impl std::ops::DerefMut for Pos<'_> {
    fn deref_mut(&mut self) -> &mut u64 {
        &mut self.guard
    }
}

impl Drop for Pos<'_> {
    fn drop(&mut self) {
        if let Some(k) = self.keeper.filter(|_| *self.guard != self.was) {
            let b = self.guard.to_le_bytes();
            // SAFETY: b is readable for its length; k is the description's own.
            unsafe { real::pwrite64(k, b.as_ptr().cast(), b.len(), 0) };
        }
    }
}

/// Lowest number of the library's own keeper descriptors (`Desc::keeper`): out of the
/// way of the small numbers programs and shells use.
const KEEPER_MIN: c_int = 200;

/// A placeholder and what stands behind it: the descriptor, its identity, and for a
/// writable one the library's own descriptor of its memfd.
pub(crate) struct Placeholder {
    /// The descriptor the program gets.
    pub(crate) fd: c_int,
    /// Its device and inode.
    pub(crate) ident: (u64, u64),
    /// The keeper (see [`Desc::keeper`]), for a placeholder opened for writing.
    pub(crate) keeper: Option<c_int>,
}

/// A new placeholder descriptor for pvfs path `path` (`O_CLOEXEC` if `cloexec`). An
/// `O_PATH` descriptor of a fresh memfd; with `writable`, a write-only `O_APPEND`
/// descriptor of it instead, so that what a program writes to it with calls no hook
/// sees (glibc's stdio behind `cmd > /pvfs/out`) collects in the memfd, and a keeper
/// descriptor of the library's own to move it to pvfs (`spill.rs`).
pub(crate) fn placeholder(path: &str, cloexec: bool, writable: bool) -> R<Placeholder> {
    let ce = if cloexec { libc::O_CLOEXEC } else { 0 };
    let (fd, keeper) = memfd_placeholder(path, ce, writable).or_else(|_| {
        // SAFETY: a NUL-terminated literal path.
        let fd =
            unsafe { real::openat(libc::AT_FDCWD, c"/dev/null".as_ptr(), libc::O_PATH | ce, 0) };
        if fd < 0 {
            Err(crate::hook::errno())
        } else {
            Ok((fd, None))
        }
    })?;
    match identity(fd) {
        Some(ident) => Ok(Placeholder { fd, ident, keeper }),
        None => {
            let e = crate::hook::errno();
            // SAFETY: fd and keeper were just opened by us.
            unsafe {
                real::close(fd);
                if let Some(k) = keeper {
                    real::close(k);
                }
            }
            Err(e)
        }
    }
}

/// Moves descriptor `fd` (the library's own) to a number at or above [`KEEPER_MIN`],
/// close-on-exec; returns the new number (or `fd` where it cannot move).
pub(crate) fn keep_high(fd: c_int) -> c_int {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own.
    let high = unsafe { real::fcntl(fd, libc::F_DUPFD_CLOEXEC, KEEPER_MIN as usize) };
    if high < 0 {
        return fd;
    }
    // SAFETY: fd is ours and replaced by high.
    unsafe { real::close(fd) };
    high
}

/// A read-write, close-on-exec descriptor of the memfd behind placeholder `fd`,
/// numbered high (the keeper of a description a new program image took over).
pub(crate) fn reopen_keeper(fd: c_int) -> Option<c_int> {
    let p = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).ok()?;
    // SAFETY: p is NUL-terminated.
    let k = unsafe {
        real::openat(
            libc::AT_FDCWD,
            p.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC,
            0,
        )
    };
    (k >= 0).then(|| keep_high(k))
}

fn memfd_placeholder(path: &str, ce: c_int, writable: bool) -> R<(c_int, Option<c_int>)> {
    let mut name = format!("pvfs:{path}");
    let mut cut = name.len().min(240);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    name.truncate(cut);
    let name = std::ffi::CString::new(name.replace('\0', "?")).map_err(|_| libc::EINVAL)?;
    // SAFETY: name is NUL-terminated; memfd_create is not hooked.
    let mfd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if mfd < 0 {
        return Err(crate::hook::errno());
    }
    let proc_path =
        std::ffi::CString::new(format!("/proc/self/fd/{mfd}")).map_err(|_| libc::EINVAL)?;
    let how = if writable {
        libc::O_WRONLY | libc::O_APPEND
    } else {
        libc::O_PATH
    };
    // SAFETY: proc_path is NUL-terminated.
    let fd = unsafe { real::openat(libc::AT_FDCWD, proc_path.as_ptr(), how | ce, 0) };
    let e = crate::hook::errno();
    if fd < 0 || !writable {
        // SAFETY: mfd was just made by us and is not used again.
        unsafe { real::close(mfd) };
    }
    if fd < 0 {
        return Err(e);
    }
    if writable {
        // Room for the offset, once shared; kernel writes append after it.
        let zero = [0u8; OFFSET_BYTES as usize];
        // SAFETY: zero is readable for its length; mfd is ours.
        unsafe { real::pwrite64(mfd, zero.as_ptr().cast(), zero.len(), 0) };
    }
    Ok((fd, writable.then(|| keep_high(mfd))))
}
