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
//! - Memory is bounded by [`SMALL_FILES_BYTES`] and [`SMALL_FILES_MAX`]: reaching
//!   either starts the cache over.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use pvfs_proto::Handle;

/// Largest file kept.
pub(crate) const SMALL_FILE_MAX: usize = 64 << 10;
/// Bytes kept for all files at most.
pub(crate) const SMALL_FILES_BYTES: usize = 64 << 20;
/// Files kept at most.
pub(crate) const SMALL_FILES_MAX: usize = 1 << 16;

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
    bytes: usize,
}

impl Kept {
    fn drop_file(&mut self, handle: Handle) {
        if let Some(e) = self.files.remove(&handle) {
            self.bytes -= e.data.len();
        }
    }
}

/// Small files' contents written through this mount (module docs).
#[derive(Default)]
pub(crate) struct SmallFiles {
    kept: Mutex<Kept>,
}

/// Locks the table, recovering it if a holder panicked.
fn lock(m: &Mutex<Kept>) -> MutexGuard<'_, Kept> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl SmallFiles {
    /// File `handle` was just created by this mount: it is empty.
    pub(crate) fn created(&self, handle: Handle) {
        let mut k = lock(&self.kept);
        if k.files.len() >= SMALL_FILES_MAX {
            *k = Kept::default();
        }
        k.drop_file(handle);
        k.files.insert(handle, Entry::default());
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
        if k.bytes > SMALL_FILES_BYTES {
            *k = Kept::default();
        }
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
    fn memory_stays_bounded() {
        let s = SmallFiles::default();
        let files = SMALL_FILES_BYTES / SMALL_FILE_MAX + 1;
        for h in 0..files as Handle {
            s.created(h);
            assert!(write(&s, h, 0, &vec![1; SMALL_FILE_MAX]));
        }
        assert!(lock(&s.kept).bytes <= SMALL_FILES_BYTES);
        for h in 0..SMALL_FILES_MAX as Handle + 1 {
            s.created(h);
        }
        assert!(lock(&s.kept).files.len() <= SMALL_FILES_MAX);
        s.clear();
        assert_eq!(lock(&s.kept).bytes, 0);
    }
}
