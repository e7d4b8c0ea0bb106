//! A redo log under the metadata database (`meta.redo`, next to `meta.redb`).
//!
//! Why: a durable redb commit ends in `fdatasync` of the database file, which flushes
//! the ten or so pages the commit touched, scattered over the file; on a virtual disk that
//! costs several times what one contiguous write of the same bytes does, and a file
//! create waits for it (docs/benchmarks.md: where a create's time goes). Writing the
//! same bytes as one contiguous record to a small log and syncing that is cheaper. So [`LoggedFile`], the storage backend redb
//! runs on, writes the database file as before but without syncing it, and makes a
//! commit durable by appending everything written since the previous sync to the log.
//! Now and then (when the log is full, and at a clean close) the database file itself
//! is synced and the log starts over: a checkpoint.
//!
//! When the log is synced is the [`SyncPolicy`]: every commit before redb's sync
//! returns (nothing acknowledged is lost even to a power loss), or later, by a
//! background thread at least every interval and whenever [`LogFlusher::flush`] is
//! called (a client's fsync): the record is then written to the log file (in the
//! kernel, so a killed process loses nothing) before redb's sync returns, and a power
//! loss takes at most the records written since the last completed sync. Either way a
//! record's changes reach the database file only once the record is synced, so the
//! file never holds a change the log could lose: redb, which believes each commit
//! durable, reuses pages freed by the previous one, and those writes must not reach
//! the file before the commits they build on are stable.
//!
//! Recovery, when the store is opened: the records after the last checkpoint are
//! written into the database file again, in order (physical redo: idempotent), the
//! file is synced and the log starts over; only then does redb open the file. redb
//! sees exactly the state after the last acknowledged commit, plus possibly pages of
//! a later, unacknowledged commit in space that was free then, which its
//! copy-on-write commits tolerate by design (as after a crash without the log).
//!
//! Format (little-endian), invariants and what is assumed of the disk:
//! `docs/storage-format.md`, "Redo log".

use std::collections::VecDeque;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes at the start of the log reserved for its header.
pub const HEADER_LEN: u64 = 4096;
/// Log size after which the next commit checkpoints first (the log then starts over).
pub const LOG_CAPACITY: u64 = 16 << 20;
/// Log format version (2: writes are logged without their runs of zeros; a version 1
/// log is still recovered).
pub const LOG_VERSION: u32 = 2;

const HEADER_MAGIC: &[u8; 8] = b"pvfsredo";
const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"RDO1");
/// Record header: magic u32, seq u64, body length u32, crc32c u32.
const RECORD_HEAD: usize = 20;
const OP_WRITE: u8 = 1;
const OP_SET_LEN: u8 = 2;
const OP_WRITE_RUNS: u8 = 3;
/// Zero words (8 bytes each) in a row that a logged write leaves out; shorter runs
/// cost less kept than described (8 bytes per run).
const MIN_ZERO_WORDS: usize = 4;

/// Positioned I/O on one file: the seam where tests put a disk that forgets what was
/// not synced when it "crashes".
#[allow(clippy::len_without_is_empty)]
pub trait Disk: Send + Sync + fmt::Debug + 'static {
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Reads exactly `buf.len()` bytes at `offset` (an error past the end).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes all of `data` at `offset`, extending the file if needed.
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Sets the length; new bytes read as zeros.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Returns once everything written before is stable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
}

/// A [`Disk`] that is a local file.
#[derive(Debug)]
pub struct OsDisk(File);

impl OsDisk {
    /// Opens (creating if missing) the file at `path` for reading and writing.
    pub fn open(path: &Path) -> io::Result<OsDisk> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        Ok(OsDisk(f))
    }

    /// [`OsDisk::open`], holding an exclusive lock on the file (`flock`) for as long
    /// as it is open: a second process opening the same store fails at once.
    pub fn open_locked(path: &Path) -> io::Result<OsDisk> {
        use std::os::fd::AsRawFd;
        let disk = OsDisk::open(path)?;
        // SAFETY: flock on a descriptor we own; no memory is involved.
        let rc = unsafe { libc::flock(disk.0.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("{} is open in another process", path.display()),
                ));
            }
            return Err(e);
        }
        Ok(disk)
    }
}

impl Disk for OsDisk {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_all_at(data, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }
}

/// Any disk, chosen at run time (`MetaStore::open_on` takes disks this way).
impl Disk for Box<dyn Disk> {
    fn len(&self) -> io::Result<u64> {
        (**self).len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        (**self).write_at(offset, data)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        (**self).set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        (**self).sync()
    }
}

/// When the log is synced (and so what a power loss may take).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Every record is synced before redb's sync returns: a commit is on disk before
    /// it is answered.
    EveryCommit,
    /// Records are written before redb's sync returns and synced by a background
    /// thread at most this long after each was written (plus the sync's own time), and by
    /// [`LogFlusher::flush`].
    Every(Duration),
    /// Records are written before redb's sync returns and synced only by
    /// [`LogFlusher::flush`], a checkpoint or a close (tests drive the syncs).
    OnFlush,
}

/// One change to the database file.
#[derive(Debug, PartialEq, Eq)]
enum Op {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

/// The log's state.
#[derive(Debug)]
struct Log {
    /// Changes redb made since its last sync, in order: in memory only, so the
    /// database file never holds a byte that is not in the log or synced there.
    pending: Vec<Op>,
    /// Records written to the log but not synced yet, in order, with their sequence
    /// numbers and when they were written: their changes reach the database file
    /// only once they are synced.
    logged: VecDeque<(u64, Instant, Vec<Op>)>,
    /// Changes in the log (synced) but not yet in the database file (writing them
    /// there failed; retried at the next sync), in order.
    unapplied: Vec<Op>,
    /// The database's length as redb sees it (with the changes above).
    len: u64,
    /// Its length as of the last record written to the log.
    synced_len: u64,
    /// Where the next record goes.
    tail: u64,
    /// The next record's sequence number.
    next_seq: u64,
    /// Why a background sync of the log failed: every later commit and flush fails
    /// with it (the records it should have made stable may be lost), until the store
    /// is opened again.
    sync_failed: Option<(io::ErrorKind, Option<i32>, String)>,
    /// Set when the file is closed or dropped: the background syncer stops.
    closing: bool,
    /// Who receives each record as it is written (a metadata primary's standbys).
    tap: TapSlot,
}

/// Receives every record a log writes, in order, as it is written (under the log's
/// lock, so it must be quick): how a metadata primary ships its commits to its
/// standbys (`docs/replication.md`, "Metadata: a primary and standbys").
pub trait RecordTap: Send + Sync {
    /// Record `seq`, in its log encoding (`docs/storage-format.md`, "Redo log").
    fn written(&self, seq: u64, record: Arc<[u8]>);
}

/// The tap of a log, if any: held weakly, since the receiver holds the log (a
/// primary's shipping keeps it to copy the store): a strong tap would keep both,
/// and the disk files, alive once every owner dropped them.
#[derive(Default)]
struct TapSlot(Option<std::sync::Weak<dyn RecordTap>>);

impl fmt::Debug for TapSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "tapped"
        } else {
            "untapped"
        })
    }
}

impl Log {
    /// The changes of the records written so far that the database file does not
    /// have yet, in order.
    fn committed(&self) -> impl Iterator<Item = &Op> {
        self.unapplied
            .iter()
            .chain(self.logged.iter().flat_map(|(_, _, ops)| ops.iter()))
    }

    /// The changes the database file does not have yet, in order (a commit under
    /// way's last).
    fn overlay(&self) -> impl Iterator<Item = &Op> {
        self.committed().chain(self.pending.iter())
    }
}

/// redb's storage backend: the database file, made durable through the redo log.
#[derive(Debug)]
pub struct LoggedFile<D: Disk = OsDisk> {
    core: Arc<Core<D>>,
    /// The background syncer of [`SyncPolicy::Every`].
    syncer: Option<JoinHandle<()>>,
}

/// What the backend and its flushers share.
#[derive(Debug)]
struct Core<D: Disk> {
    db: D,
    log_disk: D,
    capacity: u64,
    policy: SyncPolicy,
    log: Mutex<Log>,
    /// Signalled when the first unsynced record is written, and at close.
    written: Condvar,
}

/// Syncs the log of one [`LoggedFile`] on demand (a client's fsync): every commit
/// acknowledged before the call is on disk when it returns. Cheap to clone.
#[derive(Clone)]
pub struct LogFlusher(Arc<dyn Flush>);

impl fmt::Debug for LogFlusher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LogFlusher")
    }
}

impl LogFlusher {
    /// Syncs every record written so far (a no-op when none waits); fails if the
    /// sync fails, or if an earlier background sync did.
    pub fn flush(&self) -> io::Result<()> {
        self.0.flush()
    }
}

/// The flush of a [`Core`], whatever its disk type.
trait Flush: Send + Sync {
    fn flush(&self) -> io::Result<()>;
}

impl<D: Disk> Flush for Core<D> {
    fn flush(&self) -> io::Result<()> {
        Core::flush(self)
    }
}

/// What [`LoggedFile::open`] found in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Records written into the database file again.
    pub replayed: u64,
}

fn corrupt(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("redo log: {what}"))
}

/// The header block of a log whose first record is `base_seq`, written when the
/// database file was `db_len` bytes long (and synced).
fn header(base_seq: u64, db_len: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN as usize);
    h.extend_from_slice(HEADER_MAGIC);
    h.extend_from_slice(&LOG_VERSION.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&base_seq.to_le_bytes());
    h.extend_from_slice(&db_len.to_le_bytes());
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h.resize(HEADER_LEN as usize, 0);
    h
}

/// The base sequence number and database length in a header block; None if it is
/// not a valid header.
fn parse_header(h: &[u8]) -> io::Result<Option<(u64, u64)>> {
    if h.len() < 36 || &h[..8] != HEADER_MAGIC {
        return Ok(None);
    }
    let crc = u32::from_le_bytes([h[32], h[33], h[34], h[35]]);
    if crc32c::crc32c(&h[..32]) != crc {
        return Ok(None);
    }
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if !(1..=LOG_VERSION).contains(&version) {
        return Err(corrupt(&format!(
            "version {version}, this build knows {LOG_VERSION}"
        )));
    }
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&h[at..at + 8]);
        u64::from_le_bytes(w)
    };
    Ok(Some((word(16), word(24))))
}

/// Encodes `ops` as record `seq`. A write goes in as runs (zeros left out, then
/// bytes): redb's pages are mostly zeros (84% of the bytes logged while creating
/// files), and the log's cost is its bytes: writing them, syncing them, and
/// checkpointing once the log is full.
fn record(seq: u64, ops: &[Op]) -> Vec<u8> {
    let mut r = Vec::with_capacity(RECORD_HEAD + 4096);
    r.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend_from_slice(&[0u8; 8]); // body length and checksum, below
    for op in ops {
        match op {
            Op::Write { offset, data } => {
                let runs = zero_runs(data);
                r.push(OP_WRITE_RUNS);
                r.extend_from_slice(&offset.to_le_bytes());
                r.extend_from_slice(&(data.len() as u32).to_le_bytes());
                r.extend_from_slice(&(runs.len() as u32).to_le_bytes());
                for (zeros, bytes) in runs {
                    r.extend_from_slice(&(zeros as u32).to_le_bytes());
                    r.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                    r.extend_from_slice(&data[bytes]);
                }
            }
            Op::SetLen(len) => {
                r.push(OP_SET_LEN);
                r.extend_from_slice(&len.to_le_bytes());
            }
        }
    }
    let body_len = u32::try_from(r.len() - RECORD_HEAD).unwrap_or(u32::MAX);
    r[12..16].copy_from_slice(&body_len.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&r[4..16]), &r[RECORD_HEAD..]);
    r[16..20].copy_from_slice(&crc.to_le_bytes());
    r
}

/// Splits `data` into runs that cover it in order: each is a number of zero bytes,
/// then a range of bytes up to the next run of at least [`MIN_ZERO_WORDS`] zero
/// words (or the end). Looked at a word at a time.
fn zero_runs(data: &[u8]) -> Vec<(usize, std::ops::Range<usize>)> {
    let words = data.len() / 8;
    let zero = |w: usize| data[w * 8..w * 8 + 8] == [0u8; 8];
    let mut out = Vec::new();
    let mut w = 0;
    loop {
        let first = w;
        while w < words && zero(w) {
            w += 1;
        }
        let start = w;
        while w < words {
            if zero(w) {
                let mut k = w;
                while k < words && zero(k) {
                    k += 1;
                }
                if k - w >= MIN_ZERO_WORDS || k == words {
                    break;
                }
                w = k;
            } else {
                w += 1;
            }
        }
        let end = if w == words { data.len() } else { w * 8 };
        out.push(((start - first) * 8, start * 8..end));
        if end == data.len() {
            return out;
        }
    }
}

/// The sequence number the record at `at` claims, if it starts like a record.
fn peek_seq<D: Disk>(log: &D, at: u64, end: u64) -> io::Result<Option<u64>> {
    if at + RECORD_HEAD as u64 > end {
        return Ok(None);
    }
    let mut head = [0u8; RECORD_HEAD];
    log.read_at(at, &mut head)?;
    if head[..4] != RECORD_MAGIC.to_le_bytes() {
        return Ok(None);
    }
    let mut s = [0u8; 8];
    s.copy_from_slice(&head[4..12]);
    Ok(Some(u64::from_le_bytes(s)))
}

/// Reads the record at `at` if it is a whole, valid record with sequence number
/// `seq`: its operations and length. None marks the end of the log.
fn read_record<D: Disk>(
    log: &D,
    at: u64,
    end: u64,
    seq: u64,
) -> io::Result<Option<(Vec<Op>, u64)>> {
    if peek_seq(log, at, end)? != Some(seq) {
        return Ok(None);
    }
    let mut head = [0u8; RECORD_HEAD];
    log.read_at(at, &mut head)?;
    let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let body_len = u64::from(word(12));
    if at + RECORD_HEAD as u64 + body_len > end {
        return Ok(None);
    }
    let mut body = vec![0u8; body_len as usize];
    log.read_at(at + RECORD_HEAD as u64, &mut body)?;
    if crc32c::crc32c_append(crc32c::crc32c(&head[4..16]), &body) != word(16) {
        return Ok(None);
    }
    // A record whose checksum holds was written whole by this code: a body that does
    // not parse is damage, not a torn write.
    Ok(Some((parse_body(&body)?, RECORD_HEAD as u64 + body_len)))
}

/// The sequence number and whole length of the shipped record `records` starts
/// with (`RecordTap`), if its head holds and it is all there.
pub(crate) fn shipped_head(records: &[u8]) -> io::Result<(u64, usize)> {
    let head = records
        .get(..RECORD_HEAD)
        .ok_or_else(|| corrupt("shipped record shorter than its head"))?;
    let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    if word(0) != RECORD_MAGIC {
        return Err(corrupt("shipped record without its magic"));
    }
    let len = RECORD_HEAD + word(12) as usize;
    if records.len() < len {
        return Err(corrupt("shipped record cut short"));
    }
    let mut s = [0u8; 8];
    s.copy_from_slice(&head[4..12]);
    Ok((u64::from_le_bytes(s), len))
}

/// A record shipped whole (`RecordTap`): its sequence number and operations, if its
/// head and checksum hold and its body parses.
fn parse_shipped(record: &[u8]) -> io::Result<(u64, Vec<Op>)> {
    let (seq, len) = shipped_head(record)?;
    if len != record.len() {
        return Err(corrupt("shipped record of the wrong length"));
    }
    let (head, body) = record.split_at(RECORD_HEAD);
    let crc = u32::from_le_bytes([head[16], head[17], head[18], head[19]]);
    if crc32c::crc32c_append(crc32c::crc32c(&head[4..16]), body) != crc {
        return Err(corrupt("shipped record whose checksum fails"));
    }
    Ok((seq, parse_body(body)?))
}

/// The operations of a record's body (`docs/storage-format.md`, "Redo log").
fn parse_body(body: &[u8]) -> io::Result<Vec<Op>> {
    let mut ops = Vec::new();
    let mut p = 0usize;
    let take = |p: &mut usize, n: usize| -> io::Result<&[u8]> {
        let s = body
            .get(*p..*p + n)
            .ok_or_else(|| corrupt("record body cut short"))?;
        *p += n;
        Ok(s)
    };
    let u64_at = |b: &[u8]| {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        u64::from_le_bytes(a)
    };
    let u32_at = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    while p < body.len() {
        let tag = take(&mut p, 1)?[0];
        match tag {
            OP_WRITE => {
                let offset = u64_at(take(&mut p, 8)?);
                let len = u32_at(take(&mut p, 4)?) as usize;
                let data = take(&mut p, len)?.to_vec();
                ops.push(Op::Write { offset, data });
            }
            OP_WRITE_RUNS => {
                let offset = u64_at(take(&mut p, 8)?);
                let len = u32_at(take(&mut p, 4)?) as usize;
                let count = u32_at(take(&mut p, 4)?);
                // Reserved no further than the record's bytes reach: a damaged length
                // must not allocate before the runs are checked against it.
                let mut data = Vec::with_capacity(len.min(body.len() - p));
                for _ in 0..count {
                    let zeros = u32_at(take(&mut p, 4)?) as usize;
                    let n = u32_at(take(&mut p, 4)?) as usize;
                    if data.len() + zeros + n > len {
                        return Err(corrupt("a write's runs pass its length"));
                    }
                    data.resize(data.len() + zeros, 0);
                    data.extend_from_slice(take(&mut p, n)?);
                }
                if data.len() != len {
                    return Err(corrupt("a write's runs fall short of its length"));
                }
                ops.push(Op::Write { offset, data });
            }
            OP_SET_LEN => ops.push(Op::SetLen(u64_at(take(&mut p, 8)?))),
            other => return Err(corrupt(&format!("unknown operation {other}"))),
        }
    }
    Ok(ops)
}

/// Writes `ops` into the database file, in order. A write whose bytes a later write
/// of the same range replaces is skipped: commits rewrite the same pages (the
/// header, the roots of the tables they touch), and a flush applies every commit of
/// its interval at once. Skipping it changes nothing: a length change in between can
/// only cut or zero bytes the later write sets again.
fn apply<D: Disk>(db: &D, ops: &[Op]) -> io::Result<()> {
    let mut last = std::collections::HashMap::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        if let Op::Write { offset, data } = op {
            last.insert((*offset, data.len()), i);
        }
    }
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Write { offset, data } => {
                if last.get(&(*offset, data.len())) == Some(&i) {
                    db.write_at(*offset, data)?;
                }
            }
            Op::SetLen(len) => db.set_len(*len)?,
        }
    }
    Ok(())
}

impl LoggedFile<OsDisk> {
    /// Opens the database file `db` with its redo log `log` (both created if
    /// missing), redoing what the log holds.
    pub fn open_files(db: &Path, log: &Path) -> io::Result<(LoggedFile<OsDisk>, Recovery)> {
        LoggedFile::open(OsDisk::open_locked(db)?, OsDisk::open(log)?, LOG_CAPACITY)
    }
}

impl<D: Disk> LoggedFile<D> {
    /// Opens a database on `db` with its redo log on `log`, checkpointing when the log
    /// reaches `capacity` bytes: redoes every valid record after the last checkpoint,
    /// syncs the database and starts the log over.
    pub fn open(db: D, log: D, capacity: u64) -> io::Result<(LoggedFile<D>, Recovery)> {
        LoggedFile::open_with(db, log, capacity, SyncPolicy::EveryCommit)
    }

    /// [`LoggedFile::open`], syncing the log as `policy` says.
    pub fn open_with(
        db: D,
        log: D,
        capacity: u64,
        policy: SyncPolicy,
    ) -> io::Result<(LoggedFile<D>, Recovery)> {
        assert!(capacity > HEADER_LEN, "a log holds its header and records");
        let end = log.len()?;
        let mut base = None;
        if end >= HEADER_LEN {
            let mut h = vec![0u8; HEADER_LEN as usize];
            log.read_at(0, &mut h)?;
            base = parse_header(&h)?;
        }
        // No valid header: a new log, or one whose header was being rewritten (at a
        // checkpoint or after a recovery). That happens only once the database file
        // is synced and before any record follows the new header, so the file holds
        // every acknowledged commit and nothing is redone. (Redoing the old records
        // would be wrong: the commit that filled the log is in the file, not in them,
        // and may have reused pages they write.)
        // The log is emptied first: numbering starts again at 1, and no old record
        // may follow the new ones with a number they expect. It is then filled with
        // zeros to its capacity, so records overwrite written blocks: syncing an
        // append that grows the file costs the file system a journal commit too.
        let Some((base, mut db_len)) = base else {
            log.set_len(0)?;
            let zeros = vec![0u8; 1 << 20];
            let mut at = HEADER_LEN;
            while at < capacity {
                let n = (capacity - at).min(zeros.len() as u64) as usize;
                log.write_at(at, &zeros[..n])?;
                at += n as u64;
            }
            log.write_at(0, &header(1, db.len()?))?;
            log.sync()?;
            return Ok((
                LoggedFile::new(db, log, capacity, policy, 1)?,
                Recovery { replayed: 0 },
            ));
        };
        let mut seq = base;
        let mut at = HEADER_LEN;
        while let Some((ops, len)) = read_record(&log, at, end, seq)? {
            apply(&db, &ops)?;
            if let Some(Op::SetLen(l)) = ops.last() {
                db_len = *l;
            }
            at += len;
            seq += 1;
        }
        let replayed = seq - base;
        // Records end with the file's length: give the file that length, in case
        // the last changes to it did not all reach the disk.
        let resized = db.len()? != db_len;
        if resized {
            db.set_len(db_len)?;
        }
        if replayed > 0 || resized {
            db.sync()?;
        }
        // Records after the last one redone may still lie in the log with later
        // numbers (unsynced ones that landed after one that did not): the new records
        // start past any number the log can hold, so none of them is ever taken for
        // a successor.
        let seq = seq + capacity / RECORD_HEAD as u64 + 1;
        log.write_at(0, &header(seq, db_len))?;
        log.sync()?;
        Ok((
            LoggedFile::new(db, log, capacity, policy, seq)?,
            Recovery { replayed },
        ))
    }

    fn new(
        db: D,
        log_disk: D,
        capacity: u64,
        policy: SyncPolicy,
        next_seq: u64,
    ) -> io::Result<LoggedFile<D>> {
        let len = db.len()?;
        let core = Arc::new(Core {
            db,
            log_disk,
            capacity,
            policy,
            log: Mutex::new(Log {
                pending: Vec::new(),
                logged: VecDeque::new(),
                unapplied: Vec::new(),
                len,
                synced_len: len,
                tail: HEADER_LEN,
                next_seq,
                sync_failed: None,
                closing: false,
                tap: TapSlot::default(),
            }),
            written: Condvar::new(),
        });
        let syncer = match policy {
            SyncPolicy::Every(interval) => {
                let c = core.clone();
                Some(
                    std::thread::Builder::new()
                        .name("pvfs-meta-sync".into())
                        .spawn(move || c.sync_in_background(interval))?,
                )
            }
            SyncPolicy::EveryCommit | SyncPolicy::OnFlush => None,
        };
        Ok(LoggedFile { core, syncer })
    }

    /// A handle that syncs this log on demand, usable while the database owns the
    /// file (and harmless after: a closed log has nothing to sync).
    pub fn flusher(&self) -> LogFlusher {
        LogFlusher(self.core.clone())
    }

    /// A handle that taps this log's records and reads its committed state, usable
    /// while the database owns the file: a metadata primary's shipping to standbys.
    pub fn shipper(&self) -> LogShipper {
        LogShipper(self.core.clone())
    }

    /// Applies a record another log wrote (a primary's, shipped to this standby) as
    /// a commit of this file: logged here under this log's own numbering, durable
    /// as this log's policy says, written into the file once synced. Returns the
    /// record's sequence number in the log that wrote it. Only for a file no
    /// database has open (a standby's copy).
    pub fn replay_shipped(&self, record: &[u8]) -> io::Result<u64> {
        use redb::StorageBackend;
        let (seq, ops) = parse_shipped(record)?;
        {
            let mut log = self.core.lock();
            if !log.pending.is_empty() {
                return Err(io::Error::other(
                    "a shipped record cannot join changes of a database",
                ));
            }
            for op in ops {
                match op {
                    Op::Write { offset, data } => {
                        log.len = log.len.max(offset + data.len() as u64);
                        log.pending.push(Op::Write { offset, data });
                    }
                    Op::SetLen(l) => {
                        log.len = l;
                        log.pending.push(Op::SetLen(l));
                    }
                }
            }
        }
        self.sync_data()?;
        Ok(seq)
    }
}

/// Taps the records of one [`LoggedFile`] and reads its committed state (what the
/// records written so far make of the file): how a metadata primary gives a standby
/// a copy of its store and then its commits. Cheap to clone.
#[derive(Clone)]
pub struct LogShipper(Arc<dyn Ship>);

impl fmt::Debug for LogShipper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LogShipper")
    }
}

impl LogShipper {
    /// Sets (or, with None, removes) the receiver of every record written from now
    /// on, held weakly (it receives records while its owners keep it); returns the
    /// sequence number of the next record, the first it receives.
    pub fn tap(&self, tap: Option<Arc<dyn RecordTap>>) -> u64 {
        self.0.tap(tap)
    }

    /// The sequence number of the last record written (0: none yet).
    pub fn last_written(&self) -> u64 {
        self.0.last_written()
    }

    /// The file's length as of the last record written.
    pub fn committed_len(&self) -> u64 {
        self.0.committed_len()
    }

    /// Reads the file as the records written so far make it (without the changes of
    /// a commit under way), zeros past its end. Bytes read at different times come
    /// from different commits: a copy made of several reads is whole once the
    /// records written from the first read on are replayed over it (each record
    /// holds whole pages, so replaying is idempotent).
    pub fn read_committed(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.0.read_committed(offset, out)
    }
}

/// What a [`LogShipper`] does, whatever the disk type.
trait Ship: Send + Sync {
    fn tap(&self, tap: Option<Arc<dyn RecordTap>>) -> u64;
    fn last_written(&self) -> u64;
    fn committed_len(&self) -> u64;
    fn read_committed(&self, offset: u64, out: &mut [u8]) -> io::Result<()>;
}

impl<D: Disk> Ship for Core<D> {
    fn tap(&self, tap: Option<Arc<dyn RecordTap>>) -> u64 {
        let mut log = self.lock();
        log.tap = TapSlot(tap.as_ref().map(Arc::downgrade));
        log.next_seq
    }

    fn last_written(&self) -> u64 {
        self.lock().next_seq.saturating_sub(1)
    }

    fn committed_len(&self) -> u64 {
        self.lock().synced_len
    }

    fn read_committed(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let log = self.lock();
        self.read_over(log.committed(), offset, out)?;
        // Past the committed length: zeros, whatever a commit under way wrote there.
        let cut = log.synced_len.saturating_sub(offset).min(out.len() as u64) as usize;
        out[cut..].fill(0);
        Ok(())
    }
}

impl<D: Disk> Drop for LoggedFile<D> {
    fn drop(&mut self) {
        self.core.lock().closing = true;
        self.core.written.notify_all();
        if let Some(t) = self.syncer.take() {
            let _ = t.join();
        }
    }
}

impl<D: Disk> Core<D> {
    fn lock(&self) -> MutexGuard<'_, Log> {
        match self.log.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Reads `out.len()` bytes at `offset` of the database file with `overlay`, the
    /// changes it lacks, applied in order; zeros past the file's end.
    fn read_over<'o>(
        &self,
        overlay: impl Iterator<Item = &'o Op>,
        offset: u64,
        out: &mut [u8],
    ) -> io::Result<()> {
        let end = offset + out.len() as u64;
        let file_len = self.db.len()?;
        let from_file = file_len.saturating_sub(offset).min(out.len() as u64) as usize;
        if from_file > 0 {
            self.db.read_at(offset, &mut out[..from_file])?;
        }
        out[from_file..].fill(0);
        for op in overlay {
            match op {
                Op::Write { offset: at, data } => {
                    let lo = offset.max(*at);
                    let hi = end.min(at + data.len() as u64);
                    if lo < hi {
                        out[(lo - offset) as usize..(hi - offset) as usize]
                            .copy_from_slice(&data[(lo - at) as usize..(hi - at) as usize]);
                    }
                }
                Op::SetLen(l) => {
                    if *l < end {
                        let cut = l.saturating_sub(offset) as usize;
                        out[cut..].fill(0);
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes the changes in the log but not in the database file there. Left in
    /// place (still seen by reads) if that fails.
    fn apply_unapplied(&self, log: &mut Log) -> io::Result<()> {
        if log.unapplied.is_empty() {
            return Ok(());
        }
        apply(&self.db, &log.unapplied)?;
        log.unapplied.clear();
        Ok(())
    }

    /// Syncs the database file, which then holds everything logged so far, and starts
    /// the log over, its next record numbered `next_seq`. The new header is stable
    /// before any record is written over the old ones, so a crash at any point leaves
    /// either the old records, all intact, or the new header. Pending changes stay
    /// pending: the database file never gets a change before the log has it.
    fn checkpoint(&self, log: &mut Log, next_seq: u64) -> io::Result<()> {
        if !log.logged.is_empty() {
            self.log_disk.sync()?;
            Self::synced(log, u64::MAX);
        }
        self.apply_unapplied(log)?;
        self.db.sync()?;
        self.log_disk
            .write_at(0, &header(next_seq, log.synced_len))?;
        self.log_disk.sync()?;
        log.tail = HEADER_LEN;
        log.next_seq = next_seq;
        Ok(())
    }

    /// Records up to `through` are synced: their changes may go to the database file.
    fn synced(log: &mut Log, through: u64) {
        while log
            .logged
            .front()
            .is_some_and(|(seq, _, _)| *seq <= through)
        {
            if let Some((_, _, ops)) = log.logged.pop_front() {
                log.unapplied.extend(ops);
            }
        }
    }

    /// The error a failed background sync left, if any.
    fn check_sync_failed(log: &Log) -> io::Result<()> {
        match &log.sync_failed {
            None => Ok(()),
            Some((kind, code, msg)) => Err(match code {
                Some(c) => io::Error::from_raw_os_error(*c),
                None => io::Error::new(*kind, format!("redo log sync failed earlier: {msg}")),
            }),
        }
    }

    /// Syncs every record written so far, then writes their changes into the
    /// database file (without syncing it). The sync runs without the lock, so commits
    /// go on meanwhile; what they write waits for the next flush.
    fn flush(&self) -> io::Result<()> {
        let through = {
            let log = self.lock();
            Self::check_sync_failed(&log)?;
            match log.logged.back() {
                Some((seq, _, _)) => *seq,
                None => return Ok(()),
            }
        };
        let r = self.log_disk.sync();
        let mut log = self.lock();
        if let Err(e) = r {
            if log.sync_failed.is_none() {
                log.sync_failed = Some((e.kind(), e.raw_os_error(), e.to_string()));
            }
            return Err(e);
        }
        Self::synced(&mut log, through);
        // Should this fail, reads keep seeing the changes and the next sync retries.
        let _ = self.apply_unapplied(&mut log);
        Ok(())
    }

    /// The background syncer of [`SyncPolicy::Every`]: once a record is written
    /// unsynced, waits until `interval` after it was written (more records join
    /// meanwhile) and syncs them all. So every record is synced at most `interval`
    /// after it was written, plus the time the sync takes.
    fn sync_in_background(&self, interval: Duration) {
        loop {
            let mut log = self.lock();
            while log.logged.is_empty() && !log.closing {
                log = self
                    .written
                    .wait(log)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            let Some(&(_, oldest, _)) = log.logged.front() else {
                // Empty after the wait above only when closing.
                return;
            };
            let deadline = oldest + interval;
            while !log.closing {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                log = self
                    .written
                    .wait_timeout(log, deadline - now)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
            if log.closing {
                return;
            }
            let failed = log.sync_failed.is_some();
            drop(log);
            if failed {
                // Every commit fails now; nothing more to sync until a reopen.
                return;
            }
            if let Err(e) = self.flush() {
                tracing::error!("metadata redo log: background sync failed: {e}");
                return;
            }
        }
    }
}

impl<D: Disk> redb::StorageBackend for LoggedFile<D> {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.core.lock().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let log = self.core.lock();
        if offset + out.len() as u64 > log.len {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        self.core.read_over(log.overlay(), offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut log = self.core.lock();
        log.pending.push(Op::SetLen(len));
        log.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let core = &*self.core;
        let mut log = core.lock();
        Core::<D>::check_sync_failed(&log)?;
        if log.pending.is_empty() {
            return Ok(());
        }
        let seq = log.next_seq;
        // Every record ends with the file's length: recovery gives the file exactly
        // the length the last acknowledged commit left.
        let len = log.len;
        log.pending.push(Op::SetLen(len));
        let rec = record(seq, &log.pending);
        if log.tail > HEADER_LEN && log.tail + rec.len() as u64 > core.capacity {
            // The log is full: start it over. (A record larger than the whole log
            // still goes in, alone; the next commit starts the log over.)
            if let Err(e) = core.checkpoint(&mut log, seq) {
                log.pending.pop();
                return Err(e);
            }
        }
        let every_commit = core.policy == SyncPolicy::EveryCommit;
        if let Err(e) = core.log_disk.write_at(log.tail, &rec).and_then(|()| {
            if every_commit {
                core.log_disk.sync()
            } else {
                Ok(())
            }
        }) {
            log.pending.pop();
            return Err(e);
        }
        log.tail += rec.len() as u64;
        log.next_seq = seq + 1;
        log.synced_len = len;
        if let Some(tap) = log.tap.0.as_ref().and_then(std::sync::Weak::upgrade) {
            tap.written(seq, rec.into());
        }
        let done = std::mem::take(&mut log.pending);
        if !every_commit {
            // In the log file (a killed process loses nothing); the next flush makes
            // it stable and only then gives the database file its changes.
            log.logged.push_back((seq, Instant::now(), done));
            // Only the first unsynced record starts the syncer's wait; the records
            // after it join that wait without waking anyone.
            let first = log.logged.len() == 1;
            drop(log);
            if first {
                core.written.notify_all();
            }
            return Ok(());
        }
        // Durable now. The database file gets the changes without a sync; should
        // that fail, reads keep seeing them and the next sync tries again.
        log.unapplied.extend(done);
        let _ = core.apply_unapplied(&mut log);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut log = self.core.lock();
        log.pending.push(Op::Write {
            offset,
            data: data.to_vec(),
        });
        log.len = log.len.max(offset + data.len() as u64);
        Ok(())
    }

    fn close(&self) -> Result<(), io::Error> {
        // A clean close checkpoints, so the next open has nothing to redo. What is
        // pending was never synced by redb: it is dropped.
        let mut log = self.core.lock();
        log.pending.clear();
        log.len = log.synced_len;
        Core::<D>::check_sync_failed(&log)?;
        let next = log.next_seq;
        self.core.checkpoint(&mut log, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file in memory.
    #[derive(Debug, Default)]
    struct MemDisk(Mutex<Vec<u8>>);

    impl Disk for MemDisk {
        fn len(&self) -> io::Result<u64> {
            Ok(self.0.lock().map_or(0, |b| b.len() as u64))
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            let b = self.0.lock().map_err(|_| io::Error::other("poisoned"))?;
            let at = offset as usize;
            let src = b
                .get(at..at + buf.len())
                .ok_or(io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(src);
            Ok(())
        }
        fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
            let mut b = self.0.lock().map_err(|_| io::Error::other("poisoned"))?;
            let end = offset as usize + data.len();
            if b.len() < end {
                b.resize(end, 0);
            }
            b[offset as usize..end].copy_from_slice(data);
            Ok(())
        }
        fn set_len(&self, len: u64) -> io::Result<()> {
            let mut b = self.0.lock().map_err(|_| io::Error::other("poisoned"))?;
            b.resize(len as usize, 0);
            Ok(())
        }
        fn sync(&self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A replayable stream of numbers: `next(n)` is below `n` (0 for `n` = 0).
    fn seeded(mut seed: u64) -> impl FnMut(u64) -> u64 {
        move |n| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n.max(1)
        }
    }

    /// Skipping writes a later write of the same range replaces leaves the file as
    /// writing every operation in order does, whatever the length changes between.
    #[test]
    fn apply_skips_only_what_changes_nothing() {
        let mut next = seeded(0x5eed);
        for _ in 0..500 {
            let mut ops = Vec::new();
            for _ in 0..1 + next(30) {
                if next(5) == 0 {
                    ops.push(Op::SetLen(next(6) * 512));
                } else {
                    // Few distinct ranges, so writes of the same range repeat.
                    let offset = next(4) * 512;
                    let len = 256 * (1 + next(3)) as usize;
                    let fill = next(256) as u8;
                    ops.push(Op::Write {
                        offset,
                        data: vec![fill; len],
                    });
                }
            }
            let (skipping, every) = (MemDisk::default(), MemDisk::default());
            apply(&skipping, &ops).unwrap();
            for op in &ops {
                match op {
                    Op::Write { offset, data } => every.write_at(*offset, data).unwrap(),
                    Op::SetLen(len) => every.set_len(*len).unwrap(),
                }
            }
            assert_eq!(
                *skipping.0.lock().unwrap(),
                *every.0.lock().unwrap(),
                "{ops:?}"
            );
        }
    }

    /// Bytes with runs of zeros of every length, some not word-aligned.
    fn sample(next: &mut impl FnMut(u64) -> u64) -> Vec<u8> {
        let mut data = Vec::new();
        let len = next(9000) as usize;
        while data.len() < len {
            let run = 1 + next(80) as usize;
            if next(2) == 0 {
                data.resize(data.len() + run, 0);
            } else {
                data.extend((0..run).map(|_| 1 + next(255) as u8));
            }
        }
        data.truncate(len);
        data
    }

    /// Logged writes without their zeros come back byte for byte, through a record
    /// written to a log and read again; runs of zeros are left out.
    #[test]
    fn writes_are_logged_without_their_zeros_and_read_back_whole() {
        let mut next = seeded(0x2e705);
        let mut fixed = vec![vec![], vec![0; 7], vec![5; 7], vec![0; 4096], vec![9; 4096]];
        let mut page = vec![0u8; 4096];
        page[..100].fill(3);
        page[4090] = 1;
        fixed.push(page.clone());
        let samples: Vec<Vec<u8>> = (0..300).map(|_| sample(&mut next)).collect();
        for data in fixed.into_iter().chain(samples) {
            let runs = zero_runs(&data);
            let mut back = Vec::new();
            for (zeros, bytes) in &runs {
                back.resize(back.len() + zeros, 0);
                back.extend_from_slice(&data[bytes.clone()]);
            }
            assert_eq!(back, data);
            let ops = vec![
                Op::Write {
                    offset: next(1 << 20),
                    data: data.clone(),
                },
                Op::SetLen(next(1 << 30)),
            ];
            let r = record(7, &ops);
            let log = MemDisk::default();
            log.write_at(0, &r).unwrap();
            let (read, len) = read_record(&log, 0, r.len() as u64, 7).unwrap().unwrap();
            assert_eq!((read, len), (ops, r.len() as u64));
        }
        // A page mostly of zeros is logged in a fraction of its size.
        let r = record(
            1,
            &[Op::Write {
                offset: 0,
                data: page,
            }],
        );
        assert!(r.len() < 200, "{}", r.len());
    }

    /// A log written before writes left out their zeros (version 1, whole writes) is
    /// still read.
    #[test]
    fn a_version_1_log_is_still_read() {
        let mut h = header(5, 4096);
        h[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32c::crc32c(&h[..32]);
        h[32..36].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(parse_header(&h).unwrap(), Some((5, 4096)));
        let data = vec![0x11u8; 300];
        let mut body = vec![OP_WRITE];
        body.extend_from_slice(&8192u64.to_le_bytes());
        body.extend_from_slice(&300u32.to_le_bytes());
        body.extend_from_slice(&data);
        body.push(OP_SET_LEN);
        body.extend_from_slice(&9000u64.to_le_bytes());
        let mut r = RECORD_MAGIC.to_le_bytes().to_vec();
        r.extend_from_slice(&5u64.to_le_bytes());
        r.extend_from_slice(&(body.len() as u32).to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&r[4..16]), &body);
        r.extend_from_slice(&crc.to_le_bytes());
        r.extend_from_slice(&body);
        let log = MemDisk::default();
        log.write_at(0, &r).unwrap();
        let (ops, _) = read_record(&log, 0, r.len() as u64, 5).unwrap().unwrap();
        assert_eq!(
            ops,
            vec![Op::Write { offset: 8192, data }, Op::SetLen(9000)]
        );
        // A version this build does not know is refused, not misread.
        h[8..12].copy_from_slice(&(LOG_VERSION + 1).to_le_bytes());
        let crc = crc32c::crc32c(&h[..32]);
        h[32..36].copy_from_slice(&crc.to_le_bytes());
        assert!(parse_header(&h).is_err());
    }
}
