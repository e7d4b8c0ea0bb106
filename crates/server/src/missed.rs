//! What copies missed (`docs/replication.md`, "Missed ranges"): while a server that
//! holds a copy of a datafile is out of its chain (down), every member that applies a
//! change to the datafile records the range for it here, so that when it comes back
//! it copies those ranges, and only those, from a copy that has them. Kept in memory
//! and in the file `missed` of the storage directory (rewritten whole, atomically, at
//! the next flush: every [`FLUSH_EVERY`], at a synced write and at an fsync, so a
//! record is as durable as the write it stands for).
//!
//! Also here: the admissions of changes to datafiles with copies, by map version, so
//! that a returning server asks for its records only once no change admitted under an
//! older map (which may still add one) is running.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use pvfs_proto::codec::Reader;
use pvfs_proto::map::{MissedDone, MissedRecord};
use pvfs_proto::{encode, Handle, Wire};
use tokio::sync::Notify;

/// How often recorded ranges are written to disk at most, when some changed.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// The file's first bytes (its format's version).
const MAGIC: &[u8] = b"pvfs missed ranges 1\n";

/// One datafile's record for one absent server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Entry {
    copies: Vec<u32>,
    /// start -> end, apart and not touching.
    ranges: BTreeMap<u64, u64>,
    gen: u64,
}

impl Entry {
    /// The record as the wire and the file carry it.
    fn record(&self, handle: Handle) -> MissedRecord {
        MissedRecord {
            handle,
            copies: self.copies.clone(),
            ranges: self.ranges.iter().flat_map(|(&s, &e)| [s, e]).collect(),
            gen: self.gen,
        }
    }
}

#[derive(Default)]
struct Inner {
    /// (absent server, datafile) -> what it missed.
    records: BTreeMap<(u32, Handle), Entry>,
    next_gen: u64,
    dirty: bool,
}

/// The ranges copies missed, recorded on this server.
pub struct MissedLog {
    path: Option<PathBuf>,
    inner: Mutex<Inner>,
    /// One writer of the file at a time.
    writing: Mutex<()>,
}

impl MissedLog {
    /// The records kept in `dir/missed` (read back when the file exists); `None`:
    /// in memory only (storage without a directory, as the simulator's).
    pub fn open(dir: Option<&Path>) -> Result<MissedLog, String> {
        let path = dir.map(|d| d.join("missed"));
        let mut inner = Inner::default();
        if let Some(p) = &path {
            if let Some(bytes) = read_if_there(p)? {
                inner = decode_file(&bytes)
                    .map_err(|e| format!("{}: not a file of missed ranges: {e}", p.display()))?
            }
        }
        Ok(MissedLog {
            path,
            inner: Mutex::new(inner),
            writing: Mutex::new(()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `absent` (servers holding a copy of datafile `handle`, whose
    /// copies are `copies`, that are out of the chain) miss bytes `start .. end` of it.
    pub fn record(&self, absent: &[u32], handle: Handle, copies: &[u32], start: u64, end: u64) {
        if absent.is_empty() {
            return;
        }
        let end = end.max(start.saturating_add(1));
        let mut g = self.lock();
        for &server in absent {
            g.next_gen += 1;
            let gen = g.next_gen;
            let e = g.records.entry((server, handle)).or_default();
            if e.copies.is_empty() {
                e.copies = copies.to_vec();
            }
            e.gen = gen;
            add_range(&mut e.ranges, start, end);
        }
        g.dirty = true;
    }

    /// Up to `max` records for `server`, and whether there are more.
    pub fn list(&self, server: u32, max: usize) -> (Vec<MissedRecord>, bool) {
        let g = self.lock();
        let mut it = g.records.range((server, 0)..=(server, Handle::MAX));
        let out: Vec<MissedRecord> = it
            .by_ref()
            .take(max)
            .map(|(&(_, handle), e)| e.record(handle))
            .collect();
        (out, it.next().is_some())
    }

    /// Whether `server` is recorded here as missing any byte of datafile `handle` in
    /// `ranges` (`start, end` pairs).
    pub fn misses_any(&self, server: u32, handle: Handle, ranges: &[u64]) -> bool {
        let g = self.lock();
        let Some(e) = g.records.get(&(server, handle)) else {
            return false;
        };
        ranges.chunks_exact(2).any(|pair| {
            let (start, end) = (pair[0], pair[1]);
            e.ranges
                .range(..end)
                .next_back()
                .is_some_and(|(_, &e_end)| e_end > start)
        })
    }

    /// Drops the records of `server` it copied, each only if nothing was added to it
    /// since (its generation is the one copied).
    pub fn done(&self, server: u32, done: &[MissedDone]) {
        let mut g = self.lock();
        let mut dropped = false;
        for d in done {
            if g.records
                .get(&(server, d.handle))
                .is_some_and(|e| e.gen == d.gen)
            {
                g.records.remove(&(server, d.handle));
                dropped = true;
            }
        }
        g.dirty |= dropped;
    }

    /// How many datafiles have a record for `server` (tests).
    #[cfg(test)]
    pub fn count_for(&self, server: u32) -> usize {
        self.lock()
            .records
            .range((server, 0)..=(server, Handle::MAX))
            .count()
    }

    /// [`MissedLog::flush`] as a storage error.
    pub fn flush_or_fail(&self) -> Result<(), pvfs_storage::StorageError> {
        self.flush()
            .map_err(|e| pvfs_storage::StorageError::Io(std::sync::Arc::new(e)))
    }

    /// Writes the records to disk if they changed since the last write (blocking:
    /// a storage thread's work). A failure leaves them marked changed.
    pub fn flush(&self) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let _one = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let bytes = {
            let mut g = self.lock();
            if !g.dirty {
                return Ok(());
            }
            g.dirty = false;
            encode_file(&g)
        };
        let written = write_atomically(path, &bytes);
        if written.is_err() {
            self.lock().dirty = true;
        }
        written
    }
}

/// Adds `start .. end` to `ranges`, merging what it overlaps or touches.
fn add_range(ranges: &mut BTreeMap<u64, u64>, mut start: u64, mut end: u64) {
    // The range starting at or before `start` that reaches it.
    if let Some((&s, &e)) = ranges.range(..=start).next_back() {
        if e >= start {
            start = s;
            end = end.max(e);
            ranges.remove(&s);
        }
    }
    // Ranges starting inside.
    let inside: Vec<(u64, u64)> = ranges.range(start..=end).map(|(&s, &e)| (s, e)).collect();
    for (s, e) in inside {
        end = end.max(e);
        ranges.remove(&s);
    }
    ranges.insert(start, end);
}

fn encode_file(g: &Inner) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    g.next_gen.put(&mut out);
    let servers: Vec<u32> = g.records.keys().map(|&(s, _)| s).collect();
    let records: Vec<MissedRecord> = g
        .records
        .iter()
        .map(|(&(_, handle), e)| e.record(handle))
        .collect();
    out.extend_from_slice(&encode(&servers));
    out.extend_from_slice(&encode(&records));
    out
}

fn decode_file(bytes: &[u8]) -> Result<Inner, String> {
    let body = bytes
        .strip_prefix(MAGIC)
        .ok_or("it does not start with the format's line")?;
    let mut r = Reader::new(body);
    let next_gen = u64::get(&mut r).map_err(|e| e.to_string())?;
    let servers = Vec::<u32>::get(&mut r).map_err(|e| e.to_string())?;
    let records = Vec::<MissedRecord>::get(&mut r).map_err(|e| e.to_string())?;
    if r.remaining() != 0 || servers.len() != records.len() {
        return Err("its lengths do not add up".into());
    }
    let mut inner = Inner {
        next_gen,
        ..Inner::default()
    };
    for (server, rec) in servers.into_iter().zip(records) {
        if rec.ranges.len() % 2 != 0 {
            return Err("a range without its end".into());
        }
        let mut ranges = BTreeMap::new();
        for pair in rec.ranges.chunks_exact(2) {
            add_range(&mut ranges, pair[0], pair[1].max(pair[0]));
        }
        inner.next_gen = inner.next_gen.max(rec.gen);
        inner.records.insert(
            (server, rec.handle),
            Entry {
                copies: rec.copies,
                ranges,
                gen: rec.gen,
            },
        );
    }
    Ok(inner)
}

/// Writes `bytes` to `path` so that a crash leaves the old file or the new one.
/// The bytes of the file at `path`, or `None` when there is none (a message naming
/// it otherwise). Shared with `crate::unfinished`.
pub(crate) fn read_if_there(path: &Path) -> Result<Option<Vec<u8>>, String> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Replaces the file at `path` with `bytes`, durably: a new file synced, renamed over
/// it, the directory synced. Shared with `crate::unfinished`.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("new");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Changes of datafiles with copies that are running, by the map version they were
/// admitted under.
#[derive(Default)]
pub struct Admissions {
    running: Mutex<BTreeMap<u64, usize>>,
    ended: Notify,
}

/// A running change, admitted until dropped.
pub struct Admitted<'a> {
    of: &'a Admissions,
    version: u64,
}

impl Admissions {
    /// Admits a change sent under map `version`.
    pub fn admit(&self, version: u64) -> Admitted<'_> {
        let mut g = self.running.lock().unwrap_or_else(|e| e.into_inner());
        *g.entry(version).or_default() += 1;
        Admitted { of: self, version }
    }

    /// Waits until no change admitted under a version below `version` runs, at
    /// most `limit`; whether none does.
    pub async fn drained_below(&self, version: u64, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            {
                let g = self.running.lock().unwrap_or_else(|e| e.into_inner());
                if g.range(..version).next().is_none() {
                    return true;
                }
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return false;
            }
        }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut g = self.of.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = g.get_mut(&self.version) {
            *n -= 1;
            if *n == 0 {
                g.remove(&self.version);
            }
        }
        drop(g);
        self.of.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_tells_which_ranges_it_touches() {
        let log = MissedLog::open(None).unwrap();
        log.record(&[2], 77, &[0, 2], 100, 200);
        log.record(&[2], 77, &[0, 2], 300, 400);
        assert!(log.misses_any(2, 77, &[150, 160]));
        assert!(log.misses_any(2, 77, &[0, 101]));
        assert!(log.misses_any(2, 77, &[399, 1000]));
        assert!(log.misses_any(2, 77, &[0, 50, 250, 301]));
        assert!(!log.misses_any(2, 77, &[0, 100]), "ends are exclusive");
        assert!(!log.misses_any(2, 77, &[200, 300]));
        assert!(!log.misses_any(2, 77, &[400, u64::MAX]));
        assert!(!log.misses_any(3, 77, &[0, u64::MAX]), "another server");
        assert!(!log.misses_any(2, 78, &[0, u64::MAX]), "another datafile");
    }

    #[test]
    fn ranges_merge_and_records_survive_a_reopen() {
        let mut r = BTreeMap::new();
        add_range(&mut r, 10, 20);
        add_range(&mut r, 30, 40);
        add_range(&mut r, 20, 25); // touches the first
        assert_eq!(
            r.iter().map(|(&s, &e)| (s, e)).collect::<Vec<_>>(),
            [(10, 25), (30, 40)]
        );
        add_range(&mut r, 5, 35); // swallows both
        assert_eq!(
            r.iter().map(|(&s, &e)| (s, e)).collect::<Vec<_>>(),
            [(5, 40)]
        );
        add_range(&mut r, 100, u64::MAX);
        add_range(&mut r, 50, 60);
        assert_eq!(r.len(), 3);

        let dir = tempfile::tempdir().unwrap();
        let log = MissedLog::open(Some(dir.path())).unwrap();
        log.record(&[2], 77, &[0, 2], 0, 4096);
        log.record(&[2, 3], 78, &[1, 2, 3], 8192, u64::MAX);
        log.record(&[], 79, &[0, 1], 0, 1);
        assert_eq!(log.count_for(2), 2);
        assert_eq!(log.count_for(3), 1);
        let (first, more) = log.list(2, 1);
        assert!(more);
        assert_eq!(first[0].handle, 77);
        assert_eq!(first[0].ranges, [0, 4096]);
        log.flush().unwrap();

        let back = MissedLog::open(Some(dir.path())).unwrap();
        let (all, more) = back.list(2, 10);
        assert!(!more);
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].copies, [1, 2, 3]);
        assert_eq!(all[1].ranges, [8192, u64::MAX]);
        // Done with an old generation (something was added since): kept.
        back.record(&[2], 77, &[0, 2], 5000, 6000);
        back.done(
            2,
            &[
                MissedDone {
                    handle: 77,
                    gen: first[0].gen,
                },
                MissedDone {
                    handle: 78,
                    gen: all[1].gen,
                },
            ],
        );
        let (left, _) = back.list(2, 10);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].ranges, [0, 4096, 5000, 6000]);
        assert_eq!(back.count_for(3), 1);
        // A damaged file is refused with its path, not half read.
        std::fs::write(dir.path().join("missed"), b"pvfs missed ranges 1\n\x01").unwrap();
        let e = MissedLog::open(Some(dir.path())).err().unwrap();
        assert!(e.contains("missed"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_for_older_admissions_ends_when_they_end() {
        let a = Admissions::default();
        let old = a.admit(4);
        let _new = a.admit(5);
        assert!(!a.drained_below(5, Duration::from_millis(100)).await);
        assert!(a.drained_below(4, Duration::from_millis(100)).await);
        drop(old);
        assert!(a.drained_below(5, Duration::from_millis(100)).await);
    }
}
