//! Changes this copy applied whose end it did not see (`docs/replication.md`, "Data:
//! chains", "A change cut short"): a copy that passes a change on down its chain
//! applies it first, and until the rest of the chain answers, the change may end on
//! some copies and not on others. If the answer never comes (a copy after it or the
//! sender failed, the map changed, this server was killed), this copy may hold bytes
//! no other copy holds, of a change no client saw acknowledged. Each such range is
//! kept here and settled later (`crate::catchup::settle`): this copy takes the
//! bytes of the last readable copy of its chain (or, being that copy, keeps its own
//! and records them as missed by the copies out of the chain), so that every copy
//! shows one outcome.
//!
//! A range is noted in the file `unfinished` of the storage directory (appended with
//! a plain write before the change is applied, so a `kill -9` right after the apply
//! cannot lose the note) and forgotten in memory when the answer came. The file is
//! rewritten with what is still open every [`crate::missed::FLUSH_EVERY`] once it
//! grew (and made at the first note: a file system without copies has none); at
//! start every range it names counts as cut short (a range whose end was
//! seen just before the stop is settled for nothing: the copies agree).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pvfs_proto::Handle;

/// The file's first bytes (its format's version).
const MAGIC: &[u8; 16] = b"pvfs unfinished1";
/// Bytes per record: id, handle, start, end (u64 each), the number of copies (u32)
/// and up to three copies (u32 each), little-endian.
const RECORD: usize = 8 * 4 + 4 + 4 * MAX_COPIES;
/// Most copies a datafile has.
const MAX_COPIES: usize = 3;
/// Records appended past the open ones before the file is rewritten.
const SLACK: u64 = 256;

/// One change cut short, or still running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// The datafile.
    pub handle: Handle,
    /// Its copies (servers), in layout order.
    pub copies: Vec<u32>,
    /// The local bytes the change may have altered (`end` may be `u64::MAX`: to the
    /// end of the datafile).
    pub start: u64,
    /// See `start`.
    pub end: u64,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// Running changes.
    running: BTreeMap<u64, Range>,
    /// Changes cut short, to settle.
    cut: BTreeMap<u64, Range>,
    /// The file, opened for appending.
    file: Option<std::fs::File>,
    /// Records in the file now.
    in_file: u64,
}

/// The changes this copy applied whose end it has not seen.
pub struct Unfinished {
    path: Option<PathBuf>,
    inner: Mutex<Inner>,
    /// One settling at a time.
    pub settling: tokio::sync::Mutex<()>,
}

/// A running change: forgotten by [`Ticket::finished`], cut short when dropped
/// without it.
pub struct Ticket {
    of: Arc<Unfinished>,
    id: u64,
}

impl Ticket {
    /// The rest of the chain has the change.
    pub fn finished(self) {
        // Dropped next, a ticket no longer running is not cut short.
        self.of.lock().running.remove(&self.id);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut g = self.of.lock();
        if let Some(r) = g.running.remove(&self.id) {
            g.cut.insert(self.id, r);
        }
    }
}

impl Unfinished {
    /// The ranges noted in `dir/unfinished` (each counts as cut short); `None`: in
    /// memory only (storage without a directory, as the simulator's).
    pub fn open(dir: Option<&Path>) -> Result<Unfinished, String> {
        let path = dir.map(|d| d.join("unfinished"));
        let mut inner = Inner::default();
        if let Some(p) = &path {
            if let Some(bytes) = crate::missed::read_if_there(p)? {
                let found = decode(&bytes).map_err(|e| {
                    format!("{}: not a file of unfinished changes: {e}", p.display())
                })?;
                for (id, r) in found {
                    inner.next = inner.next.max(id);
                    inner.cut.insert(id, r);
                }
            }
        }
        let log = Unfinished {
            path,
            inner: Mutex::new(inner),
            settling: tokio::sync::Mutex::new(()),
        };
        // The file is opened at the first change noted (a file system without copies
        // never writes one, nor keeps one open).
        if log.any_cut() {
            log.rewrite()
                .map_err(|e| format!("cannot write the file of unfinished changes: {e}"))?;
        }
        Ok(log)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes a change of bytes `start .. end` of datafile `handle` (copies on
    /// `copies`) about to be applied here and passed on (blocking: a plain write).
    pub fn begin(
        self: &Arc<Self>,
        handle: Handle,
        copies: &[u32],
        start: u64,
        end: u64,
    ) -> std::io::Result<Ticket> {
        debug_assert!(copies.len() <= MAX_COPIES && start <= end);
        let range = Range {
            handle,
            copies: copies.iter().copied().take(MAX_COPIES).collect(),
            start,
            end,
        };
        let mut g = self.lock();
        g.next += 1;
        let id = g.next;
        if g.file.is_none() {
            if let Some(path) = &self.path {
                Self::rewrite_locked(path, &mut g)?;
            }
        }
        if let Some(f) = g.file.as_mut() {
            f.write_all(&encode(id, &range))?;
            g.in_file += 1;
        }
        g.running.insert(id, range);
        Ok(Ticket {
            of: self.clone(),
            id,
        })
    }

    /// The changes cut short, by id.
    pub fn cut(&self) -> Vec<(u64, Range)> {
        self.lock()
            .cut
            .iter()
            .map(|(&id, r)| (id, r.clone()))
            .collect()
    }

    /// Whether a change is cut short and not settled.
    pub fn any_cut(&self) -> bool {
        !self.lock().cut.is_empty()
    }

    /// The change `id` is settled: every copy shows one outcome.
    pub fn settled(&self, id: u64) {
        self.lock().cut.remove(&id);
    }

    /// Rewrites the file with the changes running or cut short once it holds many
    /// more (blocking).
    pub fn compact(&self) -> std::io::Result<()> {
        let due = {
            let g = self.lock();
            g.file.is_some() && g.in_file > (g.running.len() + g.cut.len()) as u64 + SLACK
        };
        if due {
            self.rewrite()?;
        }
        Ok(())
    }

    /// Writes the file anew with what is open, and appends to it from then on.
    fn rewrite(&self) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        // Under the lock, so no note is appended to the old file meanwhile.
        let mut g = self.lock();
        Self::rewrite_locked(path, &mut g)
    }

    /// [`Unfinished::rewrite`] with the lock held (`g`).
    fn rewrite_locked(path: &Path, g: &mut Inner) -> std::io::Result<()> {
        let mut bytes = MAGIC.to_vec();
        let open: Vec<(u64, Range)> = g
            .running
            .iter()
            .chain(g.cut.iter())
            .map(|(&id, r)| (id, r.clone()))
            .collect();
        for (id, r) in &open {
            bytes.extend_from_slice(&encode(*id, r));
        }
        crate::missed::write_atomically(path, &bytes)?;
        g.file = Some(std::fs::OpenOptions::new().append(true).open(path)?);
        g.in_file = open.len() as u64;
        Ok(())
    }
}

fn encode(id: u64, r: &Range) -> [u8; RECORD] {
    let mut b = [0u8; RECORD];
    b[0..8].copy_from_slice(&id.to_le_bytes());
    b[8..16].copy_from_slice(&r.handle.to_le_bytes());
    b[16..24].copy_from_slice(&r.start.to_le_bytes());
    b[24..32].copy_from_slice(&r.end.to_le_bytes());
    b[32..36].copy_from_slice(&(r.copies.len() as u32).to_le_bytes());
    for (i, c) in r.copies.iter().enumerate() {
        b[36 + 4 * i..40 + 4 * i].copy_from_slice(&c.to_le_bytes());
    }
    b
}

fn decode(bytes: &[u8]) -> Result<Vec<(u64, Range)>, String> {
    let rest = bytes.strip_prefix(MAGIC.as_slice()).ok_or("no header")?;
    let u64_at = |b: &[u8], at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(a)
    };
    let u32_at = |b: &[u8], at: usize| {
        let mut a = [0u8; 4];
        a.copy_from_slice(&b[at..at + 4]);
        u32::from_le_bytes(a)
    };
    let mut out = Vec::new();
    // A record cut off by a crash in its write is no note: its change was not
    // applied (the note is written whole before the change).
    for b in rest.chunks_exact(RECORD) {
        let n = u32_at(b, 32) as usize;
        if n > MAX_COPIES {
            return Err(format!("a record names {n} copies"));
        }
        let (start, end) = (u64_at(b, 16), u64_at(b, 24));
        if start > end {
            return Err(format!("a record's range {start}..{end} is backwards"));
        }
        out.push((
            u64_at(b, 0),
            Range {
                handle: u64_at(b, 8),
                copies: (0..n).map(|i| u32_at(b, 36 + 4 * i)).collect(),
                start,
                end,
            },
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_cut_short_is_kept_and_one_that_ended_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(Unfinished::open(Some(dir.path())).unwrap());
        let ended = log.begin(7, &[0, 1], 0, 100).unwrap();
        let cut = log.begin(8, &[1, 2, 3], 50, u64::MAX).unwrap();
        let running = log.begin(9, &[2, 0], 10, 20).unwrap();
        ended.finished();
        drop(cut);
        // Tickets that ended or were cut short hold nothing (the log's file stays
        // open only while something holds it).
        assert_eq!(
            Arc::strong_count(&log),
            2,
            "the running ticket and this test"
        );
        let now = log.cut();
        assert_eq!(now.len(), 1);
        assert_eq!(now[0].1.handle, 8);
        assert!(log.any_cut());
        // A restart (the process killed): the running change counts as cut short
        // too, the one that ended may (settling it changes nothing).
        std::mem::forget(running);
        let back = Unfinished::open(Some(dir.path())).unwrap();
        let handles: Vec<Handle> = back.cut().iter().map(|(_, r)| r.handle).collect();
        assert!(handles.contains(&8) && handles.contains(&9), "{handles:?}");
        for (id, _) in back.cut() {
            back.settled(id);
        }
        assert!(!back.any_cut());
        // Settled before a stop: not there after it once the file was rewritten.
        back.rewrite().unwrap();
        let again = Unfinished::open(Some(dir.path())).unwrap();
        assert!(!again.any_cut());
    }

    #[test]
    fn a_damaged_file_is_refused_and_a_torn_last_record_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("unfinished"), b"not this").unwrap();
        assert!(Unfinished::open(Some(dir.path())).is_err());
        let mut bytes = MAGIC.to_vec();
        let r = Range {
            handle: 5,
            copies: vec![0, 1],
            start: 1,
            end: 2,
        };
        bytes.extend_from_slice(&encode(3, &r));
        bytes.extend_from_slice(&encode(4, &r)[..10]);
        std::fs::write(dir.path().join("unfinished"), &bytes).unwrap();
        let log = Unfinished::open(Some(dir.path())).unwrap();
        assert_eq!(log.cut(), vec![(3, r)]);
    }

    #[test]
    fn the_file_is_rewritten_once_it_grew() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(Unfinished::open(Some(dir.path())).unwrap());
        for i in 0..SLACK + 10 {
            log.begin(i, &[0, 1], 0, 1).unwrap().finished();
        }
        let before = std::fs::metadata(dir.path().join("unfinished"))
            .unwrap()
            .len();
        log.compact().unwrap();
        let after = std::fs::metadata(dir.path().join("unfinished"))
            .unwrap()
            .len();
        assert!(
            before > after && after == MAGIC.len() as u64,
            "{before} {after}"
        );
    }
}
