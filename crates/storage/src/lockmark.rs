//! `<storage>/locks`: whether clients may hold locks on this server, kept across a
//! restart. The lock table itself lives in memory only; after a restart clients
//! reclaim what they held during a grace period, in which nobody else gets a lock.
//! That wait is needed only if locks may have been held when the server stopped, so
//! the server marks the file (durably) before it grants a lock while it is clear,
//! and clears it (lazily) when its table is empty. A server that starts with the
//! mark clear, or without the file (a new file system, a version without locks),
//! skips the grace period. Format: `docs/storage-format.md`.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::StorageError;

/// The file's name in the storage directory.
pub const LOCK_MARK_FILE: &str = "locks";

/// The first line of the file (format version 1).
const HEADER: &str = "pvfs locks 1";

/// The mark: its file, and what it says now.
pub struct LockMark {
    path: PathBuf,
    dir: PathBuf,
    held: bool,
}

impl LockMark {
    /// Reads the mark in storage directory `dir`: whether locks may have been held
    /// when the server stopped (`held()`). A missing file is clear; a file this
    /// version does not understand counts as held (a grace period too many costs a
    /// wait, one too few could hand out a lock someone still holds).
    pub fn open(dir: &Path) -> Result<LockMark, StorageError> {
        let path = dir.join(LOCK_MARK_FILE);
        let held = match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut lines = text.lines();
                !(lines.next() == Some(HEADER) && lines.next() == Some("clear"))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(StorageError::Io(Arc::new(e))),
        };
        Ok(LockMark {
            path,
            dir: dir.to_path_buf(),
            held,
        })
    }

    /// Whether the mark says locks may be held.
    pub fn held(&self) -> bool {
        self.held
    }

    /// Sets the mark to `held`: durably (written, synced, renamed into place, the
    /// directory synced) when setting it, since a lock must never be granted while a
    /// crash could forget that it was; without syncing when clearing it.
    pub fn set(&mut self, held: bool) -> Result<(), StorageError> {
        if self.held == held {
            return Ok(());
        }
        let io = |e| StorageError::Io(Arc::new(e));
        let tmp = self.dir.join(format!("{LOCK_MARK_FILE}.tmp"));
        let mut f = File::create(&tmp).map_err(io)?;
        let state = if held { "held" } else { "clear" };
        f.write_all(format!("{HEADER}\n{state}\n").as_bytes())
            .map_err(io)?;
        if held {
            f.sync_all().map_err(io)?;
        }
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        if held {
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(io)?;
        }
        self.held = held;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_is_clear_set_survives_unknown_is_held() {
        let d = tempfile::tempdir().unwrap();
        let mut m = LockMark::open(d.path()).unwrap();
        assert!(!m.held());
        m.set(true).unwrap();
        assert!(LockMark::open(d.path()).unwrap().held());
        m.set(false).unwrap();
        assert!(!LockMark::open(d.path()).unwrap().held());
        std::fs::write(d.path().join(LOCK_MARK_FILE), "pvfs locks 9\nclear\n").unwrap();
        assert!(LockMark::open(d.path()).unwrap().held());
    }
}
