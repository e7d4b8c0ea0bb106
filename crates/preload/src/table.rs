//! The descriptor table: which kernel descriptors stand for pvfs open file
//! descriptions ([`Desc`]), and which description each stands for. The process's one
//! table is `globals::FDS`.
//!
//! Calls on ordinary descriptors must cost next to nothing and never wait, even from
//! a signal handler that interrupted a thread holding the table's lock: a count of
//! entries and a bitmap of the descriptors in the table answer "not pvfs" without
//! the lock. An entry is checked against its placeholder's identity (device and
//! inode) on every lookup, so a descriptor closed behind the library's back (a raw
//! syscall) and reused for something else is never taken for a pvfs file. Only the
//! process that owns the table changes it: a child made by `vfork` shares it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use libc::c_int;
use pvfs_proto::Handle;

use crate::desc::{identity, Desc, Kind};
use crate::lock::Locked;

/// Descriptors the bitmap covers.
const BITMAP_FDS: usize = 4096;

/// A table of pvfs descriptors.
pub(crate) struct DescTable {
    /// Descriptor number → the description it stands for.
    map: Locked<BTreeMap<c_int, Arc<Desc>>>,
    /// Entries in `map`: lets calls on other descriptors skip the lock while none exist.
    count: AtomicUsize,
    /// Descriptors below [`BITMAP_FDS`] that are in `map`, one bit each (kept under
    /// the lock). A descriptor whose bit is clear is answered "not pvfs" without
    /// taking the lock, so calls on ordinary descriptors never wait for it, even from
    /// a signal handler that interrupted a thread holding it.
    bits: [AtomicU64; BITMAP_FDS / 64],
    /// The process the table belongs to (set at load and in every forked child).
    owner: AtomicI32,
}

impl DescTable {
    /// An empty table that no process owns yet.
    pub(crate) const fn new() -> DescTable {
        DescTable {
            map: Locked::new(BTreeMap::new()),
            count: AtomicUsize::new(0),
            bits: [const { AtomicU64::new(0) }; BITMAP_FDS / 64],
            owner: AtomicI32::new(0),
        }
    }

    /// Records the calling process as the table's owner (library load, fork child).
    pub(crate) fn own(&self) {
        // SAFETY: getpid has no preconditions.
        self.owner
            .store(unsafe { libc::getpid() }, Ordering::Release);
    }

    /// Whether the calling process owns the table. A child made by `vfork` (or
    /// `clone(CLONE_VM)`, as `posix_spawn` and Python's subprocess do) shares the
    /// parent's memory without running fork handlers; its closes and dup2s before
    /// `exec` must not change the parent's table.
    fn owner(&self) -> bool {
        // SAFETY: getpid has no preconditions.
        self.owner.load(Ordering::Acquire) == unsafe { libc::getpid() }
    }

    /// Whether the calling process owns the table: false in a child made by `vfork`
    /// or `clone(CLONE_VM)`, which shares the parent's memory but not its
    /// descriptors, and must not make descriptors the parent's descriptions would
    /// then name, nor drive the parent's client.
    pub(crate) fn owned(&self) -> bool {
        self.owner()
    }

    /// Sets or clears `fd`'s bit (with the lock held).
    fn mark(&self, fd: c_int, on: bool) {
        let fd = fd as usize;
        if fd < BITMAP_FDS {
            let bit = 1u64 << (fd % 64);
            if on {
                self.bits[fd / 64].fetch_or(bit, Ordering::Release);
            } else {
                self.bits[fd / 64].fetch_and(!bit, Ordering::Release);
            }
        }
    }

    /// Whether `fd` may be in the table (false means certainly not).
    fn maybe(&self, fd: c_int) -> bool {
        if fd < 0 || self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let u = fd as usize;
        u >= BITMAP_FDS || self.bits[u / 64].load(Ordering::Acquire) & (1u64 << (u % 64)) != 0
    }

    /// The description behind pvfs descriptor `fd`, if it is one.
    pub(crate) fn get(&self, fd: c_int) -> Option<Arc<Desc>> {
        if !self.maybe(fd) {
            return None;
        }
        let d = self.map.lock().get(&fd).cloned()?;
        if identity(fd) == Some(d.ident) {
            return Some(d);
        }
        // Closed behind our back and reused: forget it (if it is still the same entry).
        let mut t = self.map.lock();
        let stale = if t.get(&fd).is_some_and(|x| Arc::ptr_eq(x, &d)) {
            self.mark(fd, false);
            t.remove(&fd)
        } else {
            None
        };
        self.count.store(t.len(), Ordering::Release);
        drop(t);
        drop(stale);
        None
    }

    /// Whether `fd` is a pvfs descriptor.
    pub(crate) fn is_pvfs(&self, fd: c_int) -> bool {
        self.get(fd).is_some()
    }

    /// Makes `fd` stand for `desc`, replacing what it stood for (returned, to be
    /// dropped outside any lock).
    pub(crate) fn insert(&self, fd: c_int, desc: Arc<Desc>) -> Option<Arc<Desc>> {
        if !self.owner() {
            return None;
        }
        let mut t = self.map.lock();
        let old = t.insert(fd, desc);
        self.mark(fd, true);
        self.count.store(t.len(), Ordering::Release);
        old
    }

    /// Forgets `fd`; returns what it stood for.
    pub(crate) fn remove(&self, fd: c_int) -> Option<Arc<Desc>> {
        if !self.maybe(fd) || !self.owner() {
            return None;
        }
        let mut t = self.map.lock();
        let old = t.remove(&fd);
        self.mark(fd, false);
        self.count.store(t.len(), Ordering::Release);
        old
    }

    /// Forgets every descriptor in `first..=last`; returns them.
    pub(crate) fn remove_range(&self, first: c_int, last: c_int) -> Vec<Arc<Desc>> {
        if self.count.load(Ordering::Acquire) == 0 || first > last || !self.owner() {
            return Vec::new();
        }
        let mut t = self.map.lock();
        let fds: Vec<c_int> = t.range(first..=last).map(|(&k, _)| k).collect();
        let out = fds
            .iter()
            .filter_map(|&fd| {
                self.mark(fd, false);
                t.remove(&fd)
            })
            .collect();
        self.count.store(t.len(), Ordering::Release);
        out
    }

    /// Runs `f` with the table locked (dup2/dup3 replace an entry atomically with the
    /// kernel's own replacement). What `f` returns is dropped after the lock is
    /// released (a description's last drop may take the lock again).
    pub(crate) fn with_table<T>(&self, f: impl FnOnce(&mut Table<'_>) -> T) -> T {
        let mut t = self.map.lock();
        let v = f(&mut Table {
            map: &mut t,
            table: self,
        });
        self.count.store(t.len(), Ordering::Release);
        drop(t);
        v
    }

    /// Whether any regular file is open (unlink then checks whether it removes one).
    pub(crate) fn files_open(&self) -> bool {
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.map.lock().values().any(|d| d.kind == Kind::File)
    }

    /// Whether any open description is on object `handle` (an unlink then keeps it).
    pub(crate) fn handle_open(&self, handle: Handle) -> bool {
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.map.lock().values().any(|d| d.handle == handle)
    }

    /// Every entry, descriptor and description, as the table has them (not checked
    /// against the kernel: a descriptor closed behind the library's back is listed).
    pub(crate) fn entries(&self) -> Vec<(c_int, Arc<Desc>)> {
        if self.count.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        self.map
            .lock()
            .iter()
            .map(|(&fd, d)| (fd, d.clone()))
            .collect()
    }

    /// Takes the table's lock without a guard (the fork prepare handler).
    pub(crate) fn lock_for_fork(&self) {
        self.map.raw_lock();
    }

    /// Releases the lock [`DescTable::lock_for_fork`] took (parent and child).
    pub(crate) fn unlock_after_fork(&self) {
        self.map.raw_unlock();
    }

    /// In a forked child, forces open every per-description lock (their holders,
    /// other threads of the parent, do not exist here).
    ///
    /// # Safety
    /// Only from the fork child handler, with the table's lock taken by
    /// [`DescTable::lock_for_fork`].
    pub(crate) unsafe fn reset_in_child(&self) {
        // SAFETY: the caller holds the lock and the child has a single thread, so
        // this is the only access to the map.
        let map = unsafe { self.map.held() };
        for d in map.values() {
            d.unlock_in_child();
        }
    }
}

/// The locked table, as [`DescTable::with_table`] lends it.
pub(crate) struct Table<'a> {
    map: &'a mut BTreeMap<c_int, Arc<Desc>>,
    table: &'a DescTable,
}

impl Table<'_> {
    /// Makes `fd` stand for `desc`; returns what it stood for. (Not in a vfork
    /// child: see [`DescTable::own`].)
    pub(crate) fn insert(&mut self, fd: c_int, desc: Arc<Desc>) -> Option<Arc<Desc>> {
        if !self.table.owner() {
            return None;
        }
        self.table.mark(fd, true);
        self.map.insert(fd, desc)
    }

    /// Forgets `fd`; returns what it stood for. (Not in a vfork child.)
    pub(crate) fn remove(&mut self, fd: c_int) -> Option<Arc<Desc>> {
        if !self.table.owner() {
            return None;
        }
        self.table.mark(fd, false);
        self.map.remove(&fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desc::placeholder;

    /// A placeholder descriptor and a directory description for it.
    fn desc(path: &str, handle: Handle) -> (c_int, Arc<Desc>) {
        let ph = placeholder(path, true, false).expect("a placeholder descriptor");
        let (fd, ident) = (ph.fd, ph.ident);
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        let d = Desc::new(
            Kind::Dir,
            path.into(),
            handle,
            1,
            flags,
            None,
            ident,
            0,
            handle,
        );
        (fd, Arc::new(d))
    }

    fn close(fd: c_int) {
        // SAFETY: a descriptor the test opened.
        unsafe { libc::close(fd) };
    }

    fn same(a: Option<Arc<Desc>>, b: &Arc<Desc>) -> bool {
        a.is_some_and(|a| Arc::ptr_eq(&a, b))
    }

    #[test]
    fn descriptors_stand_for_their_descriptions() {
        let t = DescTable::new();
        let (a, da) = desc("/a", 10);
        let (b, db) = desc("/b", 11);
        assert!(t.get(a).is_none() && !t.handle_open(10));
        assert!(t.insert(a, da.clone()).is_none());
        assert!(
            !t.is_pvfs(a),
            "a process that does not own the table (vfork) changes nothing"
        );
        t.own();
        assert!(t.insert(a, da.clone()).is_none());
        assert!(t.insert(b, db.clone()).is_none());
        assert!(same(t.get(a), &da) && same(t.get(b), &db));
        assert!(t.handle_open(10) && t.handle_open(11) && !t.handle_open(12));
        assert!(!t.files_open(), "directories only");
        assert!(!t.is_pvfs(-1));
        // dup2(a, b), as the hook does it: the kernel's and the table's replacement
        // under the table's lock; b stands for a's description from now on.
        let replaced = t.with_table(|t| {
            // SAFETY: the test's own descriptors.
            assert_eq!(unsafe { libc::syscall(libc::SYS_dup2, a, b) }, i64::from(b));
            t.insert(b, da.clone())
        });
        assert!(same(replaced, &db));
        assert!(same(t.get(b), &da) && !t.handle_open(11));
        assert!(same(t.remove(b), &da));
        assert!(t.get(b).is_none() && same(t.get(a), &da));
        let (c, dc) = desc("/c", 12);
        assert!(t.insert(c, dc).is_none());
        let gone = t.remove_range(a.min(c), a.max(c));
        assert_eq!(gone.len(), 2);
        assert!(t.get(a).is_none() && t.get(c).is_none() && !t.handle_open(12));
        for fd in [a, b, c] {
            close(fd);
        }
    }

    #[test]
    fn a_descriptor_reused_behind_the_tables_back_is_not_pvfs() {
        let t = DescTable::new();
        t.own();
        let (fd, d) = desc("/x", 20);
        assert!(t.insert(fd, d).is_none());
        assert!(t.is_pvfs(fd));
        // The number now names another file (a dup2 the library did not see).
        // SAFETY: a literal path; the descriptors are the test's own.
        let other = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
        assert!(other >= 0);
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::syscall(libc::SYS_dup2, other, fd) },
            i64::from(fd)
        );
        assert!(!t.is_pvfs(fd), "another file now");
        assert!(!t.handle_open(20), "its stale entry is gone");
        close(fd);
        close(other);
    }
}
