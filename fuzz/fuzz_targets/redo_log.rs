//! Recovery of the metadata store's redo log (`pvfs_storage::redo`), which a server
//! reads from its disk when it starts: a log header (valid, or any bytes), records
//! of writes and length changes as the log writes them (format:
//! `docs/storage-format.md`), under a right or wrong checksum and sequence number,
//! some damaged (a byte changed or the body cut, with the checksum made right
//! again, as only a corruption the checksum misses could), and any bytes after them,
//! over a database file of any bytes. Opening must give an error or a store, never a
//! panic or an allocation a damaged length asks for (the disk here refuses writes past
//! 1 MiB, as a full one would). With a valid header it redoes at least the
//! undamaged records in sequence before the first other one, and the database then
//! holds exactly what writing their operations in order gives.
#![no_main]

use std::io;
use std::sync::{Arc, Mutex};

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use pvfs_storage::redo::{Disk, LoggedFile};

/// Bytes the in-memory disks hold at most.
const DISK_MAX: u64 = 1 << 20;
/// The log's capacity (a checkpoint when it fills).
const CAPACITY: u64 = 64 << 10;
/// The log's header block.
const HEADER_LEN: usize = 4096;
const OP_WRITE: u8 = 1;
const OP_SET_LEN: u8 = 2;
const OP_WRITE_RUNS: u8 = 3;

/// A disk in memory (clones share the bytes).
#[derive(Clone, Debug, Default)]
struct MemDisk(Arc<Mutex<Vec<u8>>>);

impl MemDisk {
    fn bytes(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn full() -> io::Error {
    io::Error::new(io::ErrorKind::StorageFull, "the fuzzer's disk is full")
}

impl Disk for MemDisk {
    fn len(&self) -> io::Result<u64> {
        Ok(self.bytes().len() as u64)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let b = self.bytes();
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| b.get(start..end))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let end = offset.checked_add(data.len() as u64).ok_or_else(full)?;
        if end > DISK_MAX {
            return Err(full());
        }
        let mut b = self.bytes();
        if b.len() < end as usize {
            b.resize(end as usize, 0);
        }
        b[offset as usize..end as usize].copy_from_slice(data);
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        if len > DISK_MAX {
            return Err(full());
        }
        self.bytes().resize(len as usize, 0);
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

#[derive(Arbitrary, Debug)]
enum Header {
    /// A header with its checksum right (versions 1 and 2 are known).
    Valid {
        version: u8,
        base_seq: u8,
        db_len: u16,
    },
    /// Any bytes.
    Raw(Vec<u8>),
    /// The log is empty.
    Absent,
}

/// One operation of a record, at offsets and lengths a small database has.
#[derive(Arbitrary, Debug)]
enum Op {
    /// Bytes written whole (log version 1).
    Write {
        offset: u16,
        data: Vec<u8>,
    },
    /// Bytes written as runs of zeros, then bytes (log version 2).
    WriteRuns {
        offset: u16,
        runs: Vec<(u8, Vec<u8>)>,
    },
    SetLen(u16),
}

#[derive(Arbitrary, Debug)]
enum Damage {
    /// A body byte xored (index modulo the length).
    Flip { at: u16, xor: u8 },
    /// The body cut to this length.
    Cut(u16),
}

#[derive(Arbitrary, Debug)]
struct Record {
    ops: Vec<Op>,
    /// Added to the sequence number the record should have.
    seq_off: u8,
    /// The checksum is right.
    sealed: bool,
    /// Damage the checksum does not see (made right again after it).
    damage: Option<Damage>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    db: Vec<u8>,
    header: Header,
    records: Vec<Record>,
    tail: Vec<u8>,
}

fn header(version: u32, base_seq: u64, db_len: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(b"pvfsredo");
    h.extend_from_slice(&version.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&base_seq.to_le_bytes());
    h.extend_from_slice(&db_len.to_le_bytes());
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h.resize(HEADER_LEN, 0);
    h
}

/// What one operation does: bytes written at an offset, or (None) the file's length.
type Effect = (u64, Option<Vec<u8>>);

/// The body of a record holding `ops`, and what each does.
fn body(ops: &[Op]) -> (Vec<u8>, Vec<Effect>) {
    let mut b = Vec::new();
    let mut effect = Vec::new();
    for op in ops {
        match op {
            Op::Write { offset, data } => {
                b.push(OP_WRITE);
                b.extend_from_slice(&u64::from(*offset).to_le_bytes());
                b.extend_from_slice(&(data.len() as u32).to_le_bytes());
                b.extend_from_slice(data);
                effect.push((u64::from(*offset), Some(data.clone())));
            }
            Op::WriteRuns { offset, runs } => {
                let mut data = Vec::new();
                for (zeros, bytes) in runs {
                    data.resize(data.len() + usize::from(*zeros), 0);
                    data.extend_from_slice(bytes);
                }
                b.push(OP_WRITE_RUNS);
                b.extend_from_slice(&u64::from(*offset).to_le_bytes());
                b.extend_from_slice(&(data.len() as u32).to_le_bytes());
                b.extend_from_slice(&(runs.len() as u32).to_le_bytes());
                for (zeros, bytes) in runs {
                    b.extend_from_slice(&u32::from(*zeros).to_le_bytes());
                    b.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                    b.extend_from_slice(bytes);
                }
                effect.push((u64::from(*offset), Some(data)));
            }
            Op::SetLen(len) => {
                b.push(OP_SET_LEN);
                b.extend_from_slice(&u64::from(*len).to_le_bytes());
                effect.push((u64::from(*len), None));
            }
        }
    }
    (b, effect)
}

fn record(seq: u64, body: &[u8], sealed: bool) -> Vec<u8> {
    let mut r = Vec::with_capacity(20 + body.len());
    r.extend_from_slice(b"RDO1");
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend_from_slice(&(body.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&r[4..16]), body);
    r.extend_from_slice(&(if sealed { crc } else { !crc }).to_le_bytes());
    r.extend_from_slice(body);
    r
}

fuzz_target!(|input: Input| {
    let mut log = Vec::new();
    let mut base = 1;
    // With a valid header of a known version: the database length it records.
    let mut known = None;
    match &input.header {
        Header::Valid {
            version,
            base_seq,
            db_len,
        } => {
            let version = u32::from(*version % 4);
            base = u64::from(*base_seq);
            log = header(version, base, u64::from(*db_len));
            if (1..=2).contains(&version) {
                known = Some(u64::from(*db_len));
            }
        }
        Header::Raw(b) => log = b.clone(),
        Header::Absent => {}
    }
    if !log.is_empty() {
        log.resize(log.len().max(HEADER_LEN), 0);
    }
    // The effects of the records redone for sure: sealed, undamaged, in sequence.
    let mut redone = Vec::new();
    let mut in_sequence = true;
    for (i, r) in input.records.iter().enumerate() {
        let seq = base
            .wrapping_add(i as u64)
            .wrapping_add(u64::from(r.seq_off));
        let (mut b, effect) = body(&r.ops);
        let mut damaged = false;
        match r.damage {
            Some(Damage::Flip { at, xor }) if !b.is_empty() => {
                let at = usize::from(at) % b.len();
                b[at] ^= xor;
                damaged = xor != 0;
            }
            Some(Damage::Cut(n)) if usize::from(n) < b.len() => {
                b.truncate(usize::from(n));
                damaged = true;
            }
            _ => {}
        }
        in_sequence &= r.seq_off == 0 && r.sealed && !damaged;
        if in_sequence {
            redone.push(effect);
        }
        log.extend_from_slice(&record(seq, &b, r.sealed));
    }
    log.extend_from_slice(&input.tail);
    let db = MemDisk(Arc::new(Mutex::new(input.db.clone())));
    let opened = LoggedFile::open(db.clone(), MemDisk(Arc::new(Mutex::new(log))), CAPACITY);
    let Some(db_len) = known else {
        return;
    };
    let Ok((file, recovery)) = opened else {
        // A damaged record that no longer parses, or a write past the disk's end.
        return;
    };
    assert!(
        recovery.replayed >= redone.len() as u64,
        "{} records redone, {} were there to redo",
        recovery.replayed,
        redone.len()
    );
    if recovery.replayed == redone.len() as u64 {
        // What writing the records' operations in order gives.
        let mut want = input.db.clone();
        let mut len = db_len;
        for effect in &redone {
            for (at, data) in effect {
                match data {
                    Some(d) => {
                        let end = *at as usize + d.len();
                        if want.len() < end {
                            want.resize(end, 0);
                        }
                        want[*at as usize..end].copy_from_slice(d);
                    }
                    None => want.resize(*at as usize, 0),
                }
            }
            if let Some((l, None)) = effect.last() {
                len = *l;
            }
        }
        want.resize(len as usize, 0);
        assert!(
            *db.bytes() == want,
            "the database after redoing differs from its records"
        );
    }
    drop(file);
});
