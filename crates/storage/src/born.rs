//! The born log: which datafiles this data server ever created, and which of them it
//! removed (docs/storage-format.md, "The born log").
//!
//! Datafiles are created on their first write, so a missing datafile is normally a
//! hole: no byte of its file ever landed on it. The log is what tells that apart from a
//! lost one: a datafile the log says was created and not removed, but which is not on
//! disk, is lost (`FileData::lost`, what `pvfs fsck` asks).
//!
//! The file is `<storage>/data/born`: a 32-byte header, then 16-byte records, each
//! checksummed, appended with `pwrite` at the known end (never synced on the write
//! path). `BornLog::sync` makes every record appended so far durable; the data store
//! calls it before it flushes a directory holding new datafile names, so a datafile
//! whose name is durable has its record durable too. At open a torn tail is cut off,
//! records of datafiles present on disk but missing from the log are added (their
//! record was lost in a crash that kept the name), and a log whose records are mostly
//! dead is rewritten with the live ones.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use pvfs_proto::Handle;

use crate::error::StorageError;

/// The log's file name under the data directory.
pub const BORN_FILE: &str = "born";
/// Version of the log's format, in its header.
pub const BORN_VERSION: u32 = 1;
/// Bytes of the header.
const HEADER: u64 = 32;
/// Bytes of one record.
const RECORD: u64 = 16;
const MAGIC: &[u8; 8] = b"pvfsborn";
/// Record kind: the datafile was created.
const CREATED: u8 = 1;
/// Record kind: the datafile was removed.
const REMOVED: u8 = 2;
/// A log with at least this many records, more than half of them dead (removed
/// datafiles and their creations), is rewritten at open.
const COMPACT_MIN: u64 = 4096;

/// What an event did to a datafile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// First created (or created again by a repair).
    Created,
    /// Removed.
    Removed,
}

/// The open log.
pub(crate) struct BornLog {
    path: std::path::PathBuf,
    state: Mutex<State>,
}

struct State {
    /// Opened for writing by the first record appended (a store that never creates
    /// a datafile, such as a metadata server's, keeps no file open for writing).
    file: Option<Arc<File>>,
    /// Where the next record goes (the end of the valid records).
    len: u64,
    /// Records appended since the log was opened (a sync covers a prefix of them).
    appended: u64,
    /// How many of those are known durable.
    synced: u64,
}

/// The header: magic, version, record size, 12 reserved zero bytes, CRC32C of the 28
/// bytes before it.
fn header() -> [u8; HEADER as usize] {
    let mut h = [0u8; HEADER as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&BORN_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(RECORD as u32).to_le_bytes());
    let crc = crc32c::crc32c(&h[..28]);
    h[28..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// One record: kind, 3 zero bytes, the handle (u64 LE), CRC32C of the 12 bytes
/// before it.
fn record(event: Event, h: Handle) -> [u8; RECORD as usize] {
    let mut r = [0u8; RECORD as usize];
    r[0] = match event {
        Event::Created => CREATED,
        Event::Removed => REMOVED,
    };
    r[4..12].copy_from_slice(&h.to_le_bytes());
    let crc = crc32c::crc32c(&r[..12]);
    r[12..].copy_from_slice(&crc.to_le_bytes());
    r
}

/// Decodes one record; None if it does not check (torn, never written, damaged).
fn parse(r: &[u8]) -> Option<(Event, Handle)> {
    let word = |at: usize| u32::from_le_bytes([r[at], r[at + 1], r[at + 2], r[at + 3]]);
    if r.len() != RECORD as usize || r[1..4] != [0, 0, 0] || crc32c::crc32c(&r[..12]) != word(12) {
        return None;
    }
    let mut h = [0u8; 8];
    h.copy_from_slice(&r[4..12]);
    let event = match r[0] {
        CREATED => Event::Created,
        REMOVED => Event::Removed,
        _ => return None,
    };
    Some((event, u64::from_le_bytes(h)))
}

/// What a read of the log's records found.
#[derive(Default)]
struct Scan {
    /// Datafiles created and not removed since.
    live: HashSet<Handle>,
    /// Valid records.
    records: u64,
    /// Records that did not check before the last valid one (damage, not a torn tail).
    damaged: u64,
    /// End of the last valid record.
    end: u64,
}

/// Applies the records in `bytes` (whole records from a record boundary) to `scan`;
/// `base` is the file offset of `bytes`.
fn apply(scan: &mut Scan, bytes: &[u8], base: u64) {
    let mut bad_run = 0;
    for (i, r) in bytes.chunks(RECORD as usize).enumerate() {
        match parse(r) {
            Some((event, h)) => {
                match event {
                    Event::Created => scan.live.insert(h),
                    Event::Removed => scan.live.remove(&h),
                };
                scan.records += 1;
                scan.damaged += bad_run;
                bad_run = 0;
                scan.end = base + (i as u64 + 1) * RECORD;
            }
            None => bad_run += 1,
        }
    }
}

impl BornLog {
    /// Opens the log of the data directory `dir` (creating it), cuts a torn tail,
    /// records the datafiles `present` that it lacks, and rewrites it when mostly dead.
    pub(crate) fn open(dir: &Path, present: &[Handle]) -> Result<BornLog, StorageError> {
        let path = dir.join(BORN_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        let mut scan = Scan::default();
        if let Some(b) = &bytes {
            if b.len() >= 12 && &b[..8] == MAGIC {
                let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
                if version != BORN_VERSION {
                    return Err(StorageError::Format(format!(
                        "{}: born log version {version}, this build reads {BORN_VERSION}",
                        path.display()
                    )));
                }
            }
            if b.len() < HEADER as usize || b[..HEADER as usize] != header() {
                // Damaged (the log is only ever replaced whole by a rename): what
                // checks of it is kept, the rest rebuilt from the disk.
                tracing::warn!(
                    "{}: the born log's header does not check; rebuilding it",
                    path.display()
                );
                scan.damaged += 1;
            }
            if b.len() as u64 > HEADER {
                let whole = (b.len() as u64 - HEADER) / RECORD * RECORD;
                apply(
                    &mut scan,
                    &b[HEADER as usize..(HEADER + whole) as usize],
                    HEADER,
                );
            }
        }
        let missing: Vec<Handle> = present
            .iter()
            .copied()
            .filter(|h| !scan.live.contains(h))
            .collect();
        let dead = scan.records - scan.live.len() as u64;
        let rewrite = bytes.is_none()
            || scan.damaged > 0
            || (scan.records >= COMPACT_MIN && dead > scan.records / 2);
        if scan.damaged > 0 {
            tracing::warn!(
                "{}: {} damaged records skipped; rewriting the log",
                path.display(),
                scan.damaged
            );
        }
        if !missing.is_empty() && bytes.is_some() {
            tracing::info!(
                "{}: {} datafiles present but not recorded (a crash, or a store older than the log): recorded now",
                path.display(),
                missing.len()
            );
        }
        let len = if rewrite {
            let mut live: Vec<Handle> = scan.live.iter().copied().chain(missing).collect();
            live.sort_unstable();
            Self::rewrite(dir, &path, &live)?
        } else {
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            // A torn tail is cut, so that new records follow valid ones.
            if file.metadata()?.len() != scan.end.max(HEADER) {
                file.set_len(scan.end.max(HEADER))?;
            }
            let mut len = scan.end.max(HEADER);
            let added = missing.len() as u64;
            let buf: Vec<u8> = missing
                .iter()
                .flat_map(|&h| record(Event::Created, h))
                .collect();
            if !buf.is_empty() {
                file.write_all_at(&buf, len)?;
                file.sync_data()?;
                len += added * RECORD;
            }
            len
        };
        Ok(BornLog {
            path,
            state: Mutex::new(State {
                file: None,
                len,
                appended: 0,
                synced: 0,
            }),
        })
    }

    /// Writes a fresh log holding a creation record for each of `live` next to the
    /// log, syncs it and renames it over the log (then syncs the directory), so a
    /// crash leaves the old log or the new one, never a mix.
    fn rewrite(dir: &Path, path: &Path, live: &[Handle]) -> Result<u64, StorageError> {
        let tmp = dir.join(format!("{BORN_FILE}.new"));
        let mut buf = Vec::with_capacity(HEADER as usize + live.len() * RECORD as usize);
        buf.extend_from_slice(&header());
        for &h in live {
            buf.extend_from_slice(&record(Event::Created, h));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all_at(&buf, 0)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()?;
        Ok(buf.len() as u64)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends one record (not synced). On failure (a full disk) the log is cut back
    /// to where it was, so no partial record stays between valid ones.
    pub(crate) fn append(&self, event: Event, h: Handle) -> Result<(), StorageError> {
        let mut st = self.state();
        let file = match &st.file {
            Some(f) => f.clone(),
            None => {
                let f = Arc::new(OpenOptions::new().read(true).write(true).open(&self.path)?);
                st.file = Some(f.clone());
                f
            }
        };
        let r = record(event, h);
        if let Err(e) = file.write_all_at(&r, st.len) {
            let _ = file.set_len(st.len);
            return Err(e.into());
        }
        st.len += RECORD;
        st.appended += 1;
        Ok(())
    }

    /// Makes every record appended before the call durable (one `fdatasync`, none if
    /// nothing new was appended). Appends are not held up while it runs.
    pub(crate) fn sync(&self) -> Result<(), StorageError> {
        let (file, upto) = {
            let st = self.state();
            match &st.file {
                Some(f) if st.synced < st.appended => (f.clone(), st.appended),
                _ => return Ok(()),
            }
        };
        file.sync_data()?;
        let mut st = self.state();
        st.synced = st.synced.max(upto);
        Ok(())
    }

    /// The datafiles created and not removed, as the log says now; `from` is where
    /// its records were read up to (for [`BornLog::removed_since`]).
    pub(crate) fn live(&self) -> Result<(HashSet<Handle>, u64), StorageError> {
        let (buf, len) = self.read_from(HEADER)?;
        let mut scan = Scan::default();
        apply(&mut scan, &buf, HEADER);
        Ok((scan.live, len))
    }

    /// The records from offset `from` to the end as it is now, and that end.
    fn read_from(&self, from: u64) -> Result<(Vec<u8>, u64), StorageError> {
        let len = self.state().len;
        let mut buf = vec![0u8; len.saturating_sub(from) as usize];
        File::open(&self.path)?.read_exact_at(&mut buf, from)?;
        Ok((buf, len))
    }

    /// Handles with a removal record appended at or after offset `from`.
    pub(crate) fn removed_since(&self, from: u64) -> Result<HashSet<Handle>, StorageError> {
        let (buf, _) = self.read_from(from)?;
        Ok(buf
            .chunks(RECORD as usize)
            .filter_map(parse)
            .filter(|(e, _)| *e == Event::Removed)
            .map(|(_, h)| h)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_seen() {
        let r = record(Event::Removed, 0x0123_4567_89ab_cdef);
        assert_eq!(parse(&r), Some((Event::Removed, 0x0123_4567_89ab_cdef)));
        for i in 0..RECORD as usize {
            let mut bad = r;
            bad[i] ^= 0x40;
            assert_eq!(parse(&bad), None, "a flipped bit in byte {i}");
        }
        assert_eq!(parse(&[0u8; RECORD as usize]), None, "zeros");
    }
}
