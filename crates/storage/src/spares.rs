//! Emptied datafiles kept for reuse: `<dir>/data/spare/<n>` (docs/storage-format.md).
//!
//! Why: removing a datafile frees its inode and creating one allocates an inode, and on
//! ext4 without a journal the allocation checks every free inode it meets for a recent
//! deletion, up to five minutes back (the kernel's `recently_deleted`, which reads the
//! inode table), and skips those: after many files were removed, each create walks over
//! all of them. On this project's test machine a data server spent about a third of
//! the machine's CPU there while files were created right after others were removed
//! (`docs/benchmarks.md`). A removed datafile is instead renamed into the spare
//! directory ([`Spares::stash`]) and emptied ([`Spares::settle`]), and a new datafile
//! is a spare renamed into place ([`Spares::take`]): no inode is freed or allocated.
//!
//! Invariants: a spare is empty (length 0, no blocks) whenever it can be taken: it is
//! offered only once emptied, and a crash between its rename and its emptying leaves
//! one with contents that [`Spares::open`] empties (unless the file has another name:
//! a rename a crash left in both directories, where only the spare's name goes), and
//! the spare directory is flushed before a datafile's directory is for a taken spare;
//! a spare is never renamed over an existing name (`RENAME_NOREPLACE`); a datafile that
//! anyone may still read or write (an open descriptor handed out) is never made a
//! spare, so its I/O cannot reach another file (the caller checks that). At most
//! [`SPARES_MAX`] are kept; beyond, removed datafiles are unlinked. On a file system
//! without `RENAME_NOREPLACE`, nothing is kept.

use crate::error::StorageError;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Most emptied datafiles a data server keeps for reuse (each is one inode and one
/// directory entry, no data blocks).
pub const SPARES_MAX: usize = 65_536;

/// Name of the spare directory under the data directory.
pub const SPARE_DIR: &str = "spare";

/// The spare datafiles of one data store.
pub(crate) struct Spares {
    dir: PathBuf,
    /// Most spares kept ([`SPARES_MAX`]).
    max: usize,
    state: Mutex<State>,
    /// False once the file system refused `RENAME_NOREPLACE`.
    enabled: AtomicBool,
    /// A spare was taken since the directory was last flushed.
    taken: AtomicBool,
}

/// A removed datafile moved into the spare directory, not emptied yet.
pub(crate) struct Stashed {
    id: u64,
    path: PathBuf,
}

#[derive(Default)]
struct State {
    /// Names (numbers) of the spares there now.
    free: Vec<u64>,
    /// Next unused name.
    next: u64,
}

impl Spares {
    /// Opens (creating if needed) `<root>/spare`: empties spares a crash left with
    /// contents, removes names that are not spares and spares beyond the bound.
    pub(crate) fn open(root: &Path) -> Result<Spares, StorageError> {
        Spares::open_with_max(root, SPARES_MAX)
    }

    /// [`Spares::open`] keeping at most `max`.
    fn open_with_max(root: &Path, max: usize) -> Result<Spares, StorageError> {
        let dir = root.join(SPARE_DIR);
        std::fs::create_dir_all(&dir)?;
        let mut state = State::default();
        for ent in std::fs::read_dir(&dir)? {
            let ent = ent?;
            let path = ent.path();
            let id = std::str::from_utf8(ent.file_name().as_bytes())
                .ok()
                .and_then(|s| s.parse::<u64>().ok());
            // A spare with another name too is a rename a crash left half on disk
            // (both directories' entries): that other name is a datafile, so only
            // this name goes; emptying the file would empty the datafile.
            let keep = match id {
                Some(_) if state.free.len() < max => {
                    let md = std::fs::symlink_metadata(&path)?;
                    md.is_file()
                        && md.nlink() == 1
                        && (md.len() == 0 && md.blocks() == 0 || empty(&path).is_ok())
                }
                _ => false,
            };
            match (keep, id) {
                (true, Some(id)) => {
                    state.free.push(id);
                    state.next = state.next.max(id.saturating_add(1));
                }
                _ => remove_any(&path)?,
            }
        }
        Ok(Spares {
            dir,
            max,
            state: Mutex::new(state),
            enabled: AtomicBool::new(true),
            taken: AtomicBool::new(false),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Number of spares kept now.
    pub(crate) fn len(&self) -> usize {
        self.state().free.len()
    }

    /// Moves the datafile at `path`, which nobody holds open but the caller (its
    /// cached descriptor, if any), out of the way into the spare directory. None when
    /// it was not moved (no room, or the rename failed): the caller unlinks it then.
    /// The spare is not offered before [`Spares::settle`] emptied it.
    pub(crate) fn stash(&self, path: &Path) -> Option<Stashed> {
        if !self.enabled.load(Ordering::Relaxed) {
            return None;
        }
        let id = {
            let mut s = self.state();
            if s.free.len() >= self.max {
                return None;
            }
            s.next += 1;
            s.next - 1
        };
        let to = self.dir.join(id.to_string());
        match rename_noreplace(path, &to) {
            Ok(()) => Some(Stashed { id, path: to }),
            Err(e) => {
                self.refused(&e);
                None
            }
        }
    }

    /// Empties a stashed datafile (through `open`, its descriptor, if there is one)
    /// and offers it for reuse; one that cannot be emptied is removed.
    pub(crate) fn settle(&self, stashed: Stashed, open: Option<&File>) {
        let emptied = match open {
            Some(f) => f.set_len(0),
            None => empty(&stashed.path),
        };
        match emptied {
            Ok(()) => self.state().free.push(stashed.id),
            Err(_) => {
                let _ = std::fs::remove_file(&stashed.path);
            }
        }
    }

    /// Renames a spare to `path` if there is one and nothing is at `path`. True when
    /// `path` now names an empty file that was a spare.
    pub(crate) fn take(&self, path: &Path) -> bool {
        if !self.enabled.load(Ordering::Relaxed) {
            return false;
        }
        loop {
            let Some(id) = self.state().free.pop() else {
                return false;
            };
            match rename_noreplace(&self.dir.join(id.to_string()), path) {
                Ok(()) => {
                    self.taken.store(true, Ordering::Release);
                    return true;
                }
                // Gone behind our back: try the next one.
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => {
                    self.refused(&e);
                    self.state().free.push(id);
                    return false;
                }
            }
        }
    }

    /// Flushes the spare directory if a spare left it since the last flush: called
    /// before a datafile's directory is flushed for its new names, so that a taken
    /// spare's old name is gone from the disk no later than its new one is there.
    pub(crate) fn sync_dir(&self) -> io::Result<()> {
        if self.taken.swap(false, Ordering::AcqRel) {
            let flushed = File::open(&self.dir).and_then(|d| d.sync_all());
            if flushed.is_err() {
                self.taken.store(true, Ordering::Release);
            }
            flushed?;
        }
        Ok(())
    }

    /// Stops keeping spares on a file system that cannot rename without replacing.
    fn refused(&self, e: &io::Error) {
        if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
            self.enabled.store(false, Ordering::Relaxed);
        }
    }
}

/// Truncates the file at `path` to nothing (freeing its blocks).
fn empty(path: &Path) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map(drop)
}

/// Removes whatever is at `path` (a stray directory with its contents too).
fn remove_any(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// `renameat2(from, to, RENAME_NOREPLACE)`: fails with `EEXIST` instead of replacing.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(ErrorKind::InvalidInput))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths that outlive the call; no memory is shared.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn file(path: &Path, bytes: &[u8]) {
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn keeps_at_most_its_bound_and_never_replaces_a_name() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let s = Spares::open_with_max(root, 2).unwrap();
        for name in ["a", "b", "c"] {
            file(&root.join(name), b"contents");
        }
        for name in ["a", "b"] {
            let stashed = s.stash(&root.join(name)).unwrap();
            s.settle(stashed, None);
        }
        // Full: the third stays where it is, for the caller to unlink.
        assert!(s.stash(&root.join("c")).is_none());
        assert!(root.join("c").exists());
        assert_eq!(s.len(), 2);
        // A name that exists is never replaced by a spare.
        assert!(!s.take(&root.join("c")));
        assert_eq!(std::fs::read(root.join("c")).unwrap(), b"contents");
        assert_eq!(s.len(), 2);
        // Taken spares are empty files.
        assert!(s.take(&root.join("x")));
        assert_eq!(std::fs::metadata(root.join("x")).unwrap().len(), 0);
        assert_eq!(s.len(), 1);
        // Reopened with a smaller bound, the spares beyond it go.
        let stashed = s.stash(&root.join("c")).unwrap();
        s.settle(stashed, None);
        assert_eq!(s.len(), 2);
        drop(s);
        let s = Spares::open_with_max(root, 1).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(std::fs::read_dir(root.join(SPARE_DIR)).unwrap().count(), 1);
        assert!(s.take(&root.join("y")));
        assert!(!s.take(&root.join("z")));
    }
}
