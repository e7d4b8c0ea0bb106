//! The contents of small files this mount created and wrote itself, so that reading
//! one back takes no data server.
//!
//! Why: a file of a few KiB written through the mount ends in a partial page, which
//! the kernel does not keep, so the first read of it (an `open, read, close` after
//! the writer closed it: a build reading its objects, `git` its objects, a test
//! its output) went to a data server. The mount wrote every byte itself and knows
//! them.
//!
//! Rules (the same as for the kernel's pages in `docs/fuse.md`, "Caching"):
//! - An entry starts empty when the mount creates the file and follows each write
//!   of the mount that succeeds, as long as the file stays contiguous from byte 0 and
//!   at most [`SMALL_FILE_MAX`] bytes; anything else drops it (a gap, a larger file,
//!   a failed write, two writes at once, a truncation, a preallocation).
//! - A write in progress hides the entry; reads then go to the servers.
//! - Another client's change to the file (a change feed) drops it; a feed that lost
//!   changes drops them all; and entries serve reads only while every feed runs.
//! - Memory is bounded (bytes: a 64th of the machine's memory, between 16 MiB and
//!   1 GiB; files: [`SMALL_FILES_MAX`]): past either bound the files kept longest go
//!   first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use pvfs_proto::Handle;

/// Largest file kept.
pub(crate) const SMALL_FILE_MAX: usize = 64 << 10;
/// Files kept at most.
pub(crate) const SMALL_FILES_MAX: usize = 1 << 17;

/// Bytes kept for all files at most: a 64th of the machine's memory (as much as the
/// page cache would hold of these files and more), between 16 MiB and 1 GiB.
fn budget() -> usize {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let total = usize::try_from(pages)
        .unwrap_or(0)
        .saturating_mul(usize::try_from(page).unwrap_or(0));
    budget_for(total)
}

/// The budget on a machine with `memory` bytes.
fn budget_for(memory: usize) -> usize {
    (memory / 64).clamp(16 << 20, 1 << 30)
}

/// One file's contents, from byte 0 to its end.
#[derive(Default)]
struct Entry {
    data: Vec<u8>,
    /// A write of this mount is in flight: the contents are in doubt until it ends.
    writing: bool,
}

#[derive(Default)]
struct Kept {
    files: HashMap<Handle, Entry>,
    /// Handles in the order their files were created (some since dropped): the
    /// oldest go first when a bound is passed.
    order: VecDeque<Handle>,
    bytes: usize,
}

impl Kept {
    fn drop_file(&mut self, handle: Handle) {
        if let Some(e) = self.files.remove(&handle) {
            self.bytes -= e.data.len();
        }
    }

    /// Drops the oldest files until both bounds hold, and forgets handles of files
    /// dropped since (so `order` stays within twice the files kept).
    fn trim(&mut self, budget: usize) {
        while self.bytes > budget || self.files.len() > SMALL_FILES_MAX {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.drop_file(oldest);
        }
        if self.order.len() > 2 * self.files.len() + 1024 {
            let files = &self.files;
            self.order.retain(|h| files.contains_key(h));
        }
    }
}

/// Small files' contents written through this mount (module docs).
pub(crate) struct SmallFiles {
    kept: Mutex<Kept>,
    /// Bytes kept at most.
    budget: usize,
}

impl Default for SmallFiles {
    fn default() -> SmallFiles {
        SmallFiles::with_budget(budget())
    }
}

/// Locks the table, recovering it if a holder panicked.
fn lock(m: &Mutex<Kept>) -> MutexGuard<'_, Kept> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl SmallFiles {
    /// Small files' contents kept up to `budget` bytes.
    pub(crate) fn with_budget(budget: usize) -> SmallFiles {
        SmallFiles {
            kept: Mutex::new(Kept::default()),
            budget,
        }
    }

    /// File `handle` was just created by this mount: it is empty.
    pub(crate) fn created(&self, handle: Handle) {
        let mut k = lock(&self.kept);
        k.drop_file(handle);
        k.files.insert(handle, Entry::default());
        k.order.push_back(handle);
        k.trim(self.budget);
    }

    /// A write to `handle` begins; true if its contents are followed (then
    /// [`SmallFiles::end_write`] must be called). A second write while one is in
    /// flight drops them: the order the servers applied the two in is not known here.
    pub(crate) fn begin_write(&self, handle: Handle) -> bool {
        let mut k = lock(&self.kept);
        match k.files.get_mut(&handle) {
            Some(e) if !e.writing => {
                e.writing = true;
                true
            }
            Some(_) => {
                k.drop_file(handle);
                false
            }
            None => false,
        }
    }

    /// The write [`SmallFiles::begin_write`] allowed ended: `data` at `offset` if it
    /// succeeded whole, None otherwise.
    pub(crate) fn end_write(&self, handle: Handle, written: Option<(u64, &[u8])>) {
        let mut k = lock(&self.kept);
        let Some(e) = k.files.get_mut(&handle) else {
            return;
        };
        assert!(e.writing, "end_write without begin_write");
        e.writing = false;
        let old = e.data.len();
        let fits = written.and_then(|(offset, data)| {
            let start = usize::try_from(offset).ok().filter(|&s| s <= old)?;
            let end = start.checked_add(data.len())?;
            (end <= SMALL_FILE_MAX).then_some((start, end, data))
        });
        let Some((start, end, data)) = fits else {
            k.drop_file(handle);
            return;
        };
        if end > old {
            e.data.resize(end, 0);
        }
        e.data[start..end].copy_from_slice(data);
        let grown = e.data.len() - old;
        k.bytes += grown;
        k.trim(self.budget);
    }

    /// Up to `size` bytes of `handle` from `offset` (fewer at its end), handed to
    /// `f`, if kept and no write is in flight.
    pub(crate) fn read<T>(
        &self,
        handle: Handle,
        offset: u64,
        size: usize,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Option<T> {
        let k = lock(&self.kept);
        let e = k.files.get(&handle).filter(|e| !e.writing)?;
        let len = e.data.len();
        let start = usize::try_from(offset).map_or(len, |o| o.min(len));
        let end = start.saturating_add(size).min(len);
        Some(f(&e.data[start..end]))
    }

    /// Forgets `handle`'s contents (changed in a way not followed, or deleted).
    pub(crate) fn forget(&self, handle: Handle) {
        lock(&self.kept).drop_file(handle);
    }

    /// Forgets everything.
    pub(crate) fn clear(&self) {
        *lock(&self.kept) = Kept::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(s: &SmallFiles, h: Handle, offset: u64, data: &[u8]) -> bool {
        let followed = s.begin_write(h);
        if followed {
            s.end_write(h, Some((offset, data)));
        }
        followed
    }

    #[test]
    fn follows_writes_from_creation() {
        let s = SmallFiles::default();
        assert!(!write(&s, 1, 0, b"x"), "not created here: not followed");
        assert_eq!(s.read(1, 0, 10, <[u8]>::to_vec), None);
        s.created(1);
        assert_eq!(s.read(1, 0, 10, <[u8]>::to_vec).as_deref(), Some(&b""[..]));
        assert!(write(&s, 1, 0, b"hello"));
        assert!(write(&s, 1, 5, b" world"));
        assert!(write(&s, 1, 0, b"J"));
        assert_eq!(
            s.read(1, 0, 4096, <[u8]>::to_vec).as_deref(),
            Some(&b"Jello world"[..])
        );
        assert_eq!(
            s.read(1, 6, 3, <[u8]>::to_vec).as_deref(),
            Some(&b"wor"[..])
        );
        assert_eq!(s.read(1, 100, 3, <[u8]>::to_vec).as_deref(), Some(&b""[..]));
    }

    #[test]
    fn drops_what_it_cannot_follow() {
        let s = SmallFiles::default();
        s.created(1);
        assert!(write(&s, 1, 2, b"gap"));
        assert_eq!(
            s.read(1, 0, 10, <[u8]>::to_vec),
            None,
            "a hole before the data"
        );
        s.created(2);
        assert!(write(&s, 2, 0, &vec![7; SMALL_FILE_MAX]));
        assert!(s.read(2, 0, 1, <[u8]>::to_vec).is_some());
        assert!(write(&s, 2, SMALL_FILE_MAX as u64, b"+"));
        assert_eq!(
            s.read(2, 0, 1, <[u8]>::to_vec),
            None,
            "grew past the largest kept"
        );
        s.created(3);
        assert!(s.begin_write(3));
        assert_eq!(
            s.read(3, 0, 1, <[u8]>::to_vec),
            None,
            "hidden while a write is in flight"
        );
        assert!(!s.begin_write(3), "a second write at once drops it");
        s.end_write(3, Some((0, b"a")));
        assert_eq!(s.read(3, 0, 1, <[u8]>::to_vec), None);
        s.created(4);
        assert!(s.begin_write(4));
        s.end_write(4, None);
        assert_eq!(
            s.read(4, 0, 1, <[u8]>::to_vec),
            None,
            "a failed write drops it"
        );
        s.created(5);
        s.forget(5);
        assert_eq!(s.read(5, 0, 1, <[u8]>::to_vec), None);
    }

    #[test]
    fn memory_stays_bounded_and_the_oldest_go_first() {
        let budget = 4 * SMALL_FILE_MAX;
        let s = SmallFiles::with_budget(budget);
        for h in 0..6 {
            s.created(h);
            assert!(write(&s, h, 0, &vec![1; SMALL_FILE_MAX]));
            assert!(lock(&s.kept).bytes <= budget);
        }
        assert_eq!(s.read(0, 0, 1, <[u8]>::to_vec), None, "the oldest went");
        assert_eq!(s.read(1, 0, 1, <[u8]>::to_vec), None);
        assert!(s.read(5, 0, 1, <[u8]>::to_vec).is_some(), "the newest stay");
        assert!(s.read(2, 0, 1, <[u8]>::to_vec).is_some());
        for h in 10..10 + SMALL_FILES_MAX as Handle + 5 {
            s.created(h);
            s.forget(h - 1);
        }
        let k = lock(&s.kept);
        assert!(k.files.len() <= SMALL_FILES_MAX);
        assert!(
            k.order.len() <= 2 * k.files.len() + 1024,
            "dropped handles are forgotten"
        );
        drop(k);
        s.clear();
        assert_eq!(lock(&s.kept).bytes, 0);
    }

    #[test]
    fn the_budget_follows_the_machine() {
        assert_eq!(budget_for(24 << 30), 384 << 20);
        assert_eq!(budget_for(256 << 20), 16 << 20, "at least 16 MiB");
        assert_eq!(budget_for(0), 16 << 20, "memory unknown");
        assert_eq!(budget_for(1 << 40), 1 << 30, "at most 1 GiB");
    }
}
