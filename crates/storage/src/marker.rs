//! The empty files that say where a metadata group lives after a failover
//! (`docs/storage-format.md`, "Standby copies"): `superseded` in a server's storage
//! directory (its own store no longer holds its group) and `primary` in a group's
//! copy (the copy became the group's store). Each is written, or removed, with its
//! directory synced before the caller acts on it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::StorageError;

/// One of the failover markers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupMarker {
    /// In a server's storage directory: another server took its group over.
    Superseded,
    /// In a group's copy (`groups/<name>/`): the copy is the group's store.
    Primary,
}

impl GroupMarker {
    /// The marker's file in `dir`.
    fn path(self, dir: &Path) -> PathBuf {
        dir.join(match self {
            GroupMarker::Superseded => "superseded",
            GroupMarker::Primary => "primary",
        })
    }

    /// Whether the marker is set in `dir`.
    pub fn is_set(self, dir: &Path) -> bool {
        self.path(dir).exists()
    }

    /// Sets the marker in `dir` (made if missing), durably.
    pub fn set(self, dir: &Path) -> Result<(), StorageError> {
        let io = |e| StorageError::Io(Arc::new(e));
        std::fs::create_dir_all(dir).map_err(io)?;
        File::create(self.path(dir))
            .and_then(|f| f.sync_all())
            .map_err(io)?;
        sync_dir(dir)
    }

    /// Clears the marker in `dir`, durably (nothing to do if it is not set).
    pub fn clear(self, dir: &Path) -> Result<(), StorageError> {
        match std::fs::remove_file(self.path(dir)) {
            Ok(()) => sync_dir(dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StorageError::Io(Arc::new(e))),
        }
    }
}

fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::Io(Arc::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_clear_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        let group = d.path().join("groups").join("s0");
        for m in [GroupMarker::Superseded, GroupMarker::Primary] {
            assert!(!m.is_set(&group));
            m.set(&group).unwrap();
            assert!(m.is_set(&group));
            m.clear(&group).unwrap();
            assert!(!m.is_set(&group));
            m.clear(&group).unwrap();
        }
    }
}
