//! The id of a storage directory (`docs/storage-format.md`, "Disk id"): a random
//! number written once, when the directory is first used, and read at every start
//! after. A server sends it with its lease renewals, so the authority tells a
//! restart (the same id) from a replaced disk (a new one) and has the new disk
//! refilled before it serves (`docs/replication.md`, "Self-healing").

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use crate::error::StorageError;

/// The file that holds the id, in the storage directory.
pub const DISK_ID_FILE: &str = "disk-id";

/// The id of storage directory `dir`: the one written there, or `new` (never 0),
/// written durably now when there is none (a new or replaced directory, or one from
/// a version without ids, which then counts as new once).
pub fn disk_id(dir: &Path, new: u64) -> Result<u64, StorageError> {
    assert_ne!(new, 0, "0 means no id");
    let io = |e| StorageError::Io(Arc::new(e));
    let path = dir.join(DISK_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            return u64::from_str_radix(text.trim(), 16)
                .ok()
                .filter(|&id| id != 0)
                .ok_or_else(|| {
                    StorageError::corrupt(format!(
                        "{} holds {text:?}, not a disk id (16 hex digits)",
                        path.display()
                    ))
                })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    std::fs::create_dir_all(dir).map_err(io)?;
    // Written whole under another name, then renamed: a crash leaves the old state
    // (no id) or the whole new one.
    let tmp = dir.join(format!("{DISK_ID_FILE}.tmp"));
    let mut f = File::create(&tmp).map_err(io)?;
    f.write_all(format!("{new:016x}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_once_then_read_back_and_refused_when_garbled() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("s0");
        assert_eq!(disk_id(&dir, 0xabc).unwrap(), 0xabc, "a new directory");
        assert_eq!(disk_id(&dir, 0xdef).unwrap(), 0xabc, "the same directory");
        assert!(!dir.join("disk-id.tmp").exists());
        // A replaced disk: a new id.
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(disk_id(&dir, 0xdef).unwrap(), 0xdef);
        std::fs::write(dir.join(DISK_ID_FILE), "not hex\n").unwrap();
        let e = disk_id(&dir, 0x1).unwrap_err().to_string();
        assert!(e.contains("not a disk id"), "{e}");
    }
}
