//! Tables, record encodings, and [`MetaTxn`], the view one mutation has of the store.
//!
//! Every table maps raw bytes to raw bytes, so the disk format is exactly the byte
//! layout written down in `docs/storage-format.md` and one generic write overlay serves
//! every table. A [`MetaTxn`] buffers its writes in that overlay (an ordered map per
//! table); its reads consult the overlay first, then the batch's write transaction,
//! which already holds the effects of the earlier mutations of the batch. The writer
//! applies the overlay only if the mutation returns `Ok`, which makes each mutation
//! atomic inside a shared group commit.

use crate::error::{MetaError, StorageError};
use pvfs_proto::{decode, encode, Attr, DirEntry, Errno, Handle, ObjKind, ShardStat, Timespec};
use redb::{ReadableTable, TableDefinition};
use std::collections::BTreeMap;
use std::ops::Bound;

/// The tables of the store; the discriminant indexes [`DEFS`] and overlays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tab {
    Super = 0,
    Objects = 1,
    Entries = 2,
    Seals = 3,
    Pool = 4,
    Xattrs = 5,
    Replies = 6,
    Shards = 7,
    Kept = 8,
}

/// Number of tables.
pub(crate) const NTABS: usize = 9;

/// The redb definitions, in [`Tab`] order.
pub(crate) const DEFS: [TableDefinition<&[u8], &[u8]>; NTABS] = [
    TableDefinition::new("superblock"),
    TableDefinition::new("objects"),
    TableDefinition::new("entries"),
    TableDefinition::new("seals"),
    TableDefinition::new("pool"),
    TableDefinition::new("xattrs"),
    TableDefinition::new("replies"),
    TableDefinition::new("shards"),
    TableDefinition::new("kept"),
];

/// Version byte in front of object and entry records.
const RECORD_V1: u8 = 1;
/// Version byte of object records since attributes carry ACLs (a trailing optional
/// field): version 1 records decode as without one.
const OBJECT_V2: u8 = 2;
/// Superblock key of the next unallocated handle.
pub(crate) const SB_NEXT: &[u8] = b"next_handle";

/// A visitor over (key, value) pairs in key order; returns `false` to stop.
pub(crate) type Visit<'f> = dyn FnMut(&[u8], &[u8]) -> Result<bool, StorageError> + 'f;

/// Byte-level read access to the tables: a redb transaction, or a transaction seen
/// through a mutation's overlay.
pub(crate) trait Raw {
    /// The value of `key` in table `t`.
    fn get(&self, t: Tab, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError>;
    /// Visits the keys of `t` within the bounds, in order, until `f` returns false.
    fn scan(
        &self,
        t: Tab,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut Visit<'_>,
    ) -> Result<(), StorageError>;
}

/// The open tables of one redb transaction (read-only or write), one per [`Tab`].
pub(crate) struct Tables<T>(pub(crate) Vec<T>);

impl<T: ReadableTable<&'static [u8], &'static [u8]>> Raw for Tables<T> {
    fn get(&self, t: Tab, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Tables::get_in(&self.0[t as usize], key)
    }

    fn scan(
        &self,
        t: Tab,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut Visit<'_>,
    ) -> Result<(), StorageError> {
        Tables::scan_in(&self.0[t as usize], lo, hi, f)
    }
}

impl Tables<()> {
    /// [`Raw::get`] on one open table.
    pub(crate) fn get_in<T: ReadableTable<&'static [u8], &'static [u8]>>(
        table: &T,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(table.get(key)?.map(|v| v.value().to_vec()))
    }

    /// [`Raw::scan`] on one open table.
    pub(crate) fn scan_in<T: ReadableTable<&'static [u8], &'static [u8]>>(
        table: &T,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut Visit<'_>,
    ) -> Result<(), StorageError> {
        if is_empty_range(lo, hi) {
            return Ok(());
        }
        for item in table.range::<&[u8]>((lo, hi))? {
            let (k, v) = item?;
            if !f(k.value(), v.value())? {
                break;
            }
        }
        Ok(())
    }
}

/// Whether the bounds select nothing (BTreeMap::range panics on some of these).
fn is_empty_range(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
        _ => false,
    }
}

/// The buffered writes of one mutation: per table, key -> new value (None = deleted).
pub(crate) type Overlay = [BTreeMap<Vec<u8>, Option<Vec<u8>>>; NTABS];

/// Writes an overlay into a write transaction's tables.
pub(crate) fn apply(
    tables: &mut Tables<redb::Table<'_, &'static [u8], &'static [u8]>>,
    ov: Overlay,
) -> Result<(), StorageError> {
    for (table, writes) in tables.0.iter_mut().zip(ov) {
        for (k, v) in writes {
            match v {
                Some(v) => table.insert(k.as_slice(), v.as_slice())?,
                None => table.remove(k.as_slice())?,
            };
        }
    }
    Ok(())
}

// ---- keys and records ----

/// Key of an object: its handle, big-endian.
pub(crate) fn object_key(h: Handle) -> [u8; 8] {
    h.to_be_bytes()
}

/// Key of a directory entry: the directory handle big-endian, then the name bytes.
pub(crate) fn entry_key(dir: Handle, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&dir.to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

/// Key of a recorded reply: client id big-endian, then sequence big-endian.
pub(crate) fn reply_key(client: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&client.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// Key of a pool range: data-server index big-endian, first handle big-endian.
pub(crate) fn pool_key(server: u32, first: Handle) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&server.to_be_bytes());
    k[4..].copy_from_slice(&first.to_be_bytes());
    k
}

/// The smallest key above every key starting with `prefix` (None: no such key).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The next free handle after taking `n` from `next` in a range ending at `last`
/// (inclusive); 0 when none is left, which also covers a range ending at `u64::MAX`.
pub(crate) fn next_after(next: Handle, n: u64, last: Handle) -> Handle {
    next.checked_add(n).filter(|x| *x <= last).unwrap_or(0)
}

/// Reads a fixed-size big-endian integer key.
fn be_u64(k: &[u8], what: &str) -> Result<u64, StorageError> {
    let b: [u8; 8] = k
        .try_into()
        .map_err(|_| StorageError::corrupt(format!("{what} key of {} bytes", k.len())))?;
    Ok(u64::from_be_bytes(b))
}

/// Reads a little-endian u64 value.
pub(crate) fn le_u64(v: &[u8], what: &str) -> Result<u64, StorageError> {
    let b: [u8; 8] = v
        .try_into()
        .map_err(|_| StorageError::corrupt(format!("{what}: {} bytes, want 8", v.len())))?;
    Ok(u64::from_le_bytes(b))
}

/// The record of an object: version byte, then the wire encoding of its attributes.
fn object_record(a: &Attr) -> Vec<u8> {
    let mut v = vec![OBJECT_V2];
    v.extend_from_slice(&encode(a));
    v
}

fn decode_object(h: Handle, v: &[u8]) -> Result<Attr, StorageError> {
    let bad = |why: String| StorageError::corrupt(format!("object {h:#x}: {why}"));
    let body = match v.split_first() {
        Some((&OBJECT_V2, body)) => std::borrow::Cow::Borrowed(body),
        // Written before ACLs: the attributes without the trailing field, which
        // decodes as "none" (an absent option is one zero byte).
        Some((&RECORD_V1, body)) => {
            let mut b = body.to_vec();
            b.push(0);
            std::borrow::Cow::Owned(b)
        }
        Some((ver, _)) => return Err(bad(format!("unknown record version {ver}"))),
        None => return Err(bad("empty record".into())),
    };
    let a: Attr = decode(&body).map_err(|e| bad(e.to_string()))?;
    if a.handle != h {
        return Err(bad(format!("record names handle {:#x}", a.handle)));
    }
    Ok(a)
}

/// The record of an entry: version byte, handle little-endian, kind byte.
fn entry_record(h: Handle, kind: ObjKind) -> Vec<u8> {
    let mut v = vec![RECORD_V1];
    v.extend_from_slice(&h.to_le_bytes());
    v.extend_from_slice(&encode(&kind));
    v
}

fn decode_entry(key: &[u8], v: &[u8]) -> Result<(Handle, ObjKind), StorageError> {
    let bad = |why: String| {
        StorageError::corrupt(format!("entry {}: {why}", String::from_utf8_lossy(key)))
    };
    if v.len() != 10 || v[0] != RECORD_V1 {
        return Err(bad(format!(
            "record of {} bytes, version {:?}",
            v.len(),
            v.first()
        )));
    }
    let h = le_u64(&v[1..9], "entry handle")?;
    let kind = decode::<ObjKind>(&v[9..]).map_err(|e| bad(e.to_string()))?;
    Ok((h, kind))
}

/// The record of a directory's shard here: version byte, then the change time (i64
/// seconds ++ u32 nanoseconds) and the subdirectory count (u64), little-endian.
pub(crate) fn shard_record(s: &ShardStat) -> Vec<u8> {
    let mut v = Vec::with_capacity(21);
    v.push(RECORD_V1);
    v.extend_from_slice(&s.changed.secs.to_le_bytes());
    v.extend_from_slice(&s.changed.nsecs.to_le_bytes());
    v.extend_from_slice(&s.subdirs.to_le_bytes());
    v
}

fn decode_shard(dir: Handle, v: &[u8]) -> Result<ShardStat, StorageError> {
    if v.len() != 21 || v[0] != RECORD_V1 {
        return Err(StorageError::corrupt(format!(
            "shard record of {dir:#x}: {} bytes, version {:?}",
            v.len(),
            v.first()
        )));
    }
    let secs = le_u64(&v[1..9], "shard change time")? as i64;
    let nsecs = u32::from_le_bytes([v[9], v[10], v[11], v[12]]);
    if nsecs >= 1_000_000_000 {
        return Err(StorageError::corrupt(format!(
            "shard record of {dir:#x}: {nsecs} nanoseconds"
        )));
    }
    Ok(ShardStat {
        changed: Timespec { secs, nsecs },
        subdirs: le_u64(&v[13..21], "shard subdirectories")?,
    })
}

/// Splits an entry key into its directory and name.
fn split_entry_key(k: &[u8]) -> Result<(Handle, String), StorageError> {
    if k.len() < 8 {
        return Err(StorageError::corrupt(format!(
            "entry key of {} bytes",
            k.len()
        )));
    }
    let dir = be_u64(&k[..8], "entry")?;
    let name = String::from_utf8(k[8..].to_vec())
        .map_err(|_| StorageError::corrupt(format!("entry name in {dir:#x} is not UTF-8")))?;
    Ok((dir, name))
}

// ---- typed reads shared by ReadView and MetaTxn ----

pub(crate) fn get_object(r: &dyn Raw, h: Handle) -> Result<Option<Attr>, StorageError> {
    r.get(Tab::Objects, &object_key(h))?
        .map(|v| decode_object(h, &v))
        .transpose()
}

pub(crate) fn get_entry(
    r: &dyn Raw,
    dir: Handle,
    name: &str,
) -> Result<Option<(Handle, ObjKind)>, StorageError> {
    let k = entry_key(dir, name);
    r.get(Tab::Entries, &k)?
        .map(|v| decode_entry(&k, &v))
        .transpose()
}

/// Entries of `dir` with names strictly after `after`, at most `max`, and whether more follow.
pub(crate) fn list_entries(
    r: &dyn Raw,
    dir: Handle,
    after: Option<&str>,
    max: usize,
) -> Result<(Vec<DirEntry>, bool), StorageError> {
    let start = entry_key(dir, after.unwrap_or(""));
    let lo = match after {
        Some(_) => Bound::Excluded(start.as_slice()),
        None => Bound::Included(start.as_slice()),
    };
    let end = prefix_end(&dir.to_be_bytes());
    let hi = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    let (mut out, mut more) = (Vec::new(), false);
    r.scan(Tab::Entries, lo, hi, &mut |k, v| {
        if out.len() == max {
            more = true;
            return Ok(false);
        }
        let (_, name) = split_entry_key(k)?;
        let (handle, kind) = decode_entry(k, v)?;
        out.push(DirEntry { name, handle, kind });
        Ok(true)
    })?;
    Ok((out, more))
}

/// What this server's shard of `dir` adds to the directory's attributes (zeros when
/// it has no record: no entry was ever added here).
pub(crate) fn shard_stat(r: &dyn Raw, dir: Handle) -> Result<ShardStat, StorageError> {
    match r.get(Tab::Shards, &object_key(dir))? {
        Some(v) => decode_shard(dir, &v),
        None => Ok(ShardStat::default()),
    }
}

pub(crate) fn dir_is_empty(r: &dyn Raw, dir: Handle) -> Result<bool, StorageError> {
    Ok(!list_entries(r, dir, None, 0)?.1)
}

pub(crate) fn is_sealed(r: &dyn Raw, dir: Handle) -> Result<bool, StorageError> {
    Ok(r.get(Tab::Seals, &object_key(dir))?.is_some())
}

/// The value of extended attribute `name` of object `h`.
pub(crate) fn get_xattr(
    r: &dyn Raw,
    h: Handle,
    name: &str,
) -> Result<Option<Vec<u8>>, StorageError> {
    match r.get(Tab::Xattrs, &entry_key(h, name))? {
        None => Ok(None),
        Some(v) => match v.split_first() {
            Some((&RECORD_V1, value)) => Ok(Some(value.to_vec())),
            _ => Err(StorageError::corrupt(format!("xattr {name:?} of {h:#x}"))),
        },
    }
}

/// The names of the extended attributes of object `h`, sorted.
pub(crate) fn list_xattrs(r: &dyn Raw, h: Handle) -> Result<Vec<String>, StorageError> {
    let lo = h.to_be_bytes();
    let end = prefix_end(&lo);
    let hi = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    let mut out = Vec::new();
    r.scan(Tab::Xattrs, Bound::Included(&lo), hi, &mut |k, _| {
        out.push(split_entry_key(k)?.1);
        Ok(true)
    })?;
    Ok(out)
}

/// The pool ranges (first, count) held for data server `server`, in handle order.
pub(crate) fn pool_ranges(r: &dyn Raw, server: u32) -> Result<Vec<(Handle, u64)>, StorageError> {
    let (lo, hi) = (pool_key(server, 0), prefix_end(&server.to_be_bytes()));
    let hi = hi.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    let mut out = Vec::new();
    r.scan(Tab::Pool, Bound::Included(&lo), hi, &mut |k, v| {
        let first = k
            .get(4..)
            .ok_or_else(|| StorageError::corrupt("pool key"))
            .and_then(|b| be_u64(b, "pool"))?;
        let count = le_u64(v, "pool count")?;
        if first.checked_add(count).is_none() {
            return Err(StorageError::corrupt(format!(
                "pool range {first:#x}+{count}"
            )));
        }
        out.push((first, count));
        Ok(true)
    })?;
    Ok(out)
}

/// Objects with handles strictly after `after`, at most `max`, in handle order.
pub(crate) fn objects_after(
    r: &dyn Raw,
    after: Option<Handle>,
    max: usize,
) -> Result<Vec<Attr>, StorageError> {
    page_after(r, Tab::Objects, after, max, &mut |k, v| {
        decode_object(be_u64(k, "object")?, v)
    })
}

/// Makes one item of a page from a row's key and value.
type Row<'f, T> = dyn FnMut(&[u8], &[u8]) -> Result<T, StorageError> + 'f;

/// Rows of table `t`, keyed by handle, strictly after `after`, at most `max`, in
/// handle order, each made by `row` from its key and value.
fn page_after<T>(
    r: &dyn Raw,
    t: Tab,
    after: Option<Handle>,
    max: usize,
    row: &mut Row<'_, T>,
) -> Result<Vec<T>, StorageError> {
    let start = object_key(after.unwrap_or(0));
    let lo = match after {
        Some(_) => Bound::Excluded(&start[..]),
        None => Bound::Included(&start[..]),
    };
    let mut out = Vec::new();
    r.scan(t, lo, Bound::Unbounded, &mut |k, v| {
        if out.len() == max {
            return Ok(false);
        }
        out.push(row(k, v)?);
        Ok(true)
    })?;
    Ok(out)
}

/// Objects kept at zero links (open somewhere when they lost their last name)
/// after `after`, at most `max`, in handle order.
pub(crate) fn kept_after(
    r: &dyn Raw,
    after: Option<Handle>,
    max: usize,
) -> Result<Vec<Handle>, StorageError> {
    page_after(r, Tab::Kept, after, max, &mut |k, _| be_u64(k, "kept"))
}

/// Every sealed directory shard on this server.
pub(crate) fn seals(r: &dyn Raw) -> Result<Vec<Handle>, StorageError> {
    let mut out = Vec::new();
    r.scan(
        Tab::Seals,
        Bound::Unbounded,
        Bound::Unbounded,
        &mut |k, _| {
            out.push(be_u64(k, "seal")?);
            Ok(true)
        },
    )?;
    Ok(out)
}

/// The reply recorded for mutation (`client`, `seq`), if it was done here.
pub(crate) fn get_reply(
    r: &dyn Raw,
    client: u64,
    seq: u64,
) -> Result<Option<Vec<u8>>, StorageError> {
    match r.get(Tab::Replies, &reply_key(client, seq))? {
        None => Ok(None),
        Some(v) if v.len() >= 9 && v[0] == RECORD_V1 => Ok(Some(v[9..].to_vec())),
        Some(_) => Err(StorageError::corrupt(format!(
            "reply record {client:#x}/{seq}"
        ))),
    }
}

/// Entries of every directory after (dir, name), at most `max`, in key order.
pub(crate) fn entries_after(
    r: &dyn Raw,
    after: Option<(Handle, &str)>,
    max: usize,
) -> Result<Vec<(Handle, DirEntry)>, StorageError> {
    let start = after.map(|(d, n)| entry_key(d, n));
    let lo = start.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    let mut out = Vec::new();
    r.scan(Tab::Entries, lo, Bound::Unbounded, &mut |k, v| {
        if out.len() == max {
            return Ok(false);
        }
        let (dir, name) = split_entry_key(k)?;
        let (handle, kind) = decode_entry(k, v)?;
        out.push((dir, DirEntry { name, handle, kind }));
        Ok(true)
    })?;
    Ok(out)
}

// ---- MetaTxn ----

/// One metadata mutation inside a group commit.
///
/// Reads see this mutation's own earlier writes and those of the mutations committed
/// before it in the same batch. Writes are buffered and reach the database only if the
/// closure that received this `MetaTxn` returns `Ok`.
pub struct MetaTxn<'a> {
    base: &'a dyn Raw,
    ov: Overlay,
    last_handle: Handle,
}

impl Raw for MetaTxn<'_> {
    fn get(&self, t: Tab, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        match self.ov[t as usize].get(key) {
            Some(v) => Ok(v.clone()),
            None => self.base.get(t, key),
        }
    }

    /// Merges the overlay and the transaction in key order; the overlay wins on ties.
    fn scan(
        &self,
        t: Tab,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut Visit<'_>,
    ) -> Result<(), StorageError> {
        if is_empty_range(lo, hi) {
            return Ok(());
        }
        let mut ov = self.ov[t as usize].range::<[u8], _>((lo, hi)).peekable();
        let mut stopped = false;
        self.base.scan(t, lo, hi, &mut |k, v| {
            // Overlay keys before k first, then k itself (overlay value if any).
            while let Some((ok, ovv)) = ov.next_if(|(ok, _)| ok.as_slice() <= k) {
                let same = ok.as_slice() == k;
                if let Some(ovv) = ovv {
                    if !f(ok, ovv)? {
                        stopped = true;
                        return Ok(false);
                    }
                }
                if same {
                    return Ok(true);
                }
            }
            let go = f(k, v)?;
            stopped = !go;
            Ok(go)
        })?;
        if !stopped {
            for (k, v) in ov {
                if let Some(v) = v {
                    if !f(k, v)? {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

impl<'a> MetaTxn<'a> {
    pub(crate) fn new(base: &'a dyn Raw, last_handle: Handle) -> MetaTxn<'a> {
        MetaTxn {
            base,
            ov: Default::default(),
            last_handle,
        }
    }

    pub(crate) fn into_overlay(self) -> Overlay {
        self.ov
    }

    fn put(&mut self, t: Tab, k: &[u8], v: Option<Vec<u8>>) {
        self.ov[t as usize].insert(k.to_vec(), v);
    }

    /// The attributes of object `h`.
    pub fn get_object(&self, h: Handle) -> Result<Option<Attr>, MetaError> {
        Ok(get_object(self, h)?)
    }

    /// Stores (creates or replaces) the attributes of object `a.handle`.
    pub fn put_object(&mut self, a: &Attr) {
        self.put(Tab::Objects, &object_key(a.handle), Some(object_record(a)));
    }

    /// Deletes object `h` (no-op if absent), and its record as kept.
    pub fn delete_object(&mut self, h: Handle) {
        self.put(Tab::Objects, &object_key(h), None);
        self.put(Tab::Kept, &object_key(h), None);
    }

    /// Records object `h` as kept at zero links (a file still open when it lost its
    /// last name), or forgets that.
    pub fn set_kept(&mut self, h: Handle, kept: bool) {
        self.put(Tab::Kept, &object_key(h), kept.then(|| vec![1]));
    }

    /// Objects kept at zero links after `after`, at most `max`.
    pub fn kept_after(&self, after: Option<Handle>, max: usize) -> Result<Vec<Handle>, MetaError> {
        Ok(kept_after(self, after, max)?)
    }

    /// The handle and kind that `name` in `dir` names.
    pub fn get_entry(
        &self,
        dir: Handle,
        name: &str,
    ) -> Result<Option<(Handle, ObjKind)>, MetaError> {
        Ok(get_entry(self, dir, name)?)
    }

    /// Creates or replaces the entry `name` in `dir`, at time `now`: the shard's
    /// record (change time, subdirectory count) changes in the same commit.
    pub fn put_entry(
        &mut self,
        dir: Handle,
        name: &str,
        handle: Handle,
        kind: ObjKind,
        now: Timespec,
    ) -> Result<(), MetaError> {
        let old = self.get_entry(dir, name)?;
        let gone = old.is_some_and(|(_, k)| k == ObjKind::Dir);
        self.shard_changed(dir, now, gone, kind == ObjKind::Dir)?;
        self.put(
            Tab::Entries,
            &entry_key(dir, name),
            Some(entry_record(handle, kind)),
        );
        Ok(())
    }

    /// Deletes the entry `name` in `dir` at time `now`, and returns what it named
    /// (no-op, None, if absent).
    pub fn delete_entry(
        &mut self,
        dir: Handle,
        name: &str,
        now: Timespec,
    ) -> Result<Option<(Handle, ObjKind)>, MetaError> {
        let old = self.get_entry(dir, name)?;
        if let Some((_, kind)) = old {
            self.shard_changed(dir, now, kind == ObjKind::Dir, false)?;
            self.put(Tab::Entries, &entry_key(dir, name), None);
        }
        Ok(old)
    }

    /// Records an entry change in this server's shard of `dir`: a directory entry
    /// removed (`lost_dir`) and/or added (`new_dir`).
    fn shard_changed(
        &mut self,
        dir: Handle,
        now: Timespec,
        lost_dir: bool,
        new_dir: bool,
    ) -> Result<(), MetaError> {
        let mut s = shard_stat(self, dir)?;
        s.changed = now;
        s.subdirs =
            (s.subdirs.saturating_add(u64::from(new_dir))).saturating_sub(u64::from(lost_dir));
        self.put(Tab::Shards, &object_key(dir), Some(shard_record(&s)));
        Ok(())
    }

    /// What this server's shard of `dir` adds to the directory's attributes.
    pub fn shard_stat(&self, dir: Handle) -> Result<ShardStat, MetaError> {
        Ok(shard_stat(self, dir)?)
    }

    /// Forgets this server's record of `dir`'s shard (when the directory goes).
    pub fn delete_shard(&mut self, dir: Handle) {
        self.put(Tab::Shards, &object_key(dir), None);
    }

    /// Entries of `dir` strictly after `after`, at most `max`, and whether more follow.
    pub fn list_entries(
        &self,
        dir: Handle,
        after: Option<&str>,
        max: usize,
    ) -> Result<(Vec<DirEntry>, bool), MetaError> {
        Ok(list_entries(self, dir, after, max)?)
    }

    /// Whether `dir` has no entry (in this server's shard).
    pub fn dir_is_empty(&self, dir: Handle) -> Result<bool, MetaError> {
        Ok(dir_is_empty(self, dir)?)
    }

    /// Whether `dir`'s shard is sealed against new entries (by an rmdir in progress).
    pub fn is_sealed(&self, dir: Handle) -> Result<bool, MetaError> {
        Ok(is_sealed(self, dir)?)
    }

    /// The value of extended attribute `name` of object `h`.
    pub fn get_xattr(&self, h: Handle, name: &str) -> Result<Option<Vec<u8>>, MetaError> {
        Ok(get_xattr(self, h, name)?)
    }

    /// Sets extended attribute `name` of object `h`.
    pub fn set_xattr(&mut self, h: Handle, name: &str, value: &[u8]) {
        let mut v = Vec::with_capacity(1 + value.len());
        v.push(RECORD_V1);
        v.extend_from_slice(value);
        self.put(Tab::Xattrs, &entry_key(h, name), Some(v));
    }

    /// Removes extended attribute `name` of object `h` (no-op if absent).
    pub fn remove_xattr(&mut self, h: Handle, name: &str) {
        self.put(Tab::Xattrs, &entry_key(h, name), None);
    }

    /// The names of the extended attributes of object `h`, sorted.
    pub fn list_xattrs(&self, h: Handle) -> Result<Vec<String>, MetaError> {
        Ok(list_xattrs(self, h)?)
    }

    /// Removes every extended attribute of object `h` (when the object goes).
    pub fn clear_xattrs(&mut self, h: Handle) -> Result<(), MetaError> {
        for name in list_xattrs(self, h)? {
            self.remove_xattr(h, &name);
        }
        Ok(())
    }

    /// The reply recorded for mutation (`client`, `seq`), if it was done here.
    pub fn get_reply(&self, client: u64, seq: u64) -> Result<Option<Vec<u8>>, MetaError> {
        Ok(get_reply(self, client, seq)?)
    }

    /// Records the reply of mutation (`client`, `seq`) at time `now` (unix seconds), in
    /// the same commit as the mutation.
    pub fn put_reply(&mut self, client: u64, seq: u64, reply: &[u8], now: i64) {
        let mut v = Vec::with_capacity(9 + reply.len());
        v.push(RECORD_V1);
        v.extend_from_slice(&now.to_le_bytes());
        v.extend_from_slice(reply);
        self.put(Tab::Replies, &reply_key(client, seq), Some(v));
    }

    /// Forgets at most `max` replies recorded before `before` (unix seconds); returns
    /// how many it forgot.
    pub fn expire_replies(&mut self, before: i64, max: usize) -> Result<usize, MetaError> {
        let mut old = Vec::new();
        self.scan(
            Tab::Replies,
            Bound::Unbounded,
            Bound::Unbounded,
            &mut |k, v| {
                if old.len() == max {
                    return Ok(false);
                }
                let at = v
                    .get(1..9)
                    .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                    .unwrap_or(i64::MIN);
                if at < before {
                    old.push(k.to_vec());
                }
                Ok(true)
            },
        )?;
        for k in &old {
            self.put(Tab::Replies, k, None);
        }
        Ok(old.len())
    }

    /// Seals or unseals `dir`'s shard.
    pub fn set_sealed(&mut self, dir: Handle, sealed: bool) {
        self.put(Tab::Seals, &object_key(dir), sealed.then(|| vec![1]));
    }

    /// The handle [`MetaTxn::alloc_handles`] would return first (0: the range is
    /// exhausted).
    pub fn next_handle(&self) -> Result<Handle, MetaError> {
        let raw = self
            .get(Tab::Super, SB_NEXT)?
            .ok_or_else(|| StorageError::corrupt("superblock: no next_handle"))?;
        Ok(le_u64(&raw, "superblock next_handle")?)
    }

    /// Allocates `n` consecutive new handles from this server's range and returns the
    /// first; ENOSPC when the range is exhausted. Handles are never reused.
    pub fn alloc_handles(&mut self, n: u64) -> Result<Handle, MetaError> {
        if n == 0 {
            return Err(MetaError::new(Errno::EINVAL, "allocating zero handles"));
        }
        let raw = self
            .get(Tab::Super, SB_NEXT)?
            .ok_or_else(|| StorageError::corrupt("superblock: no next_handle"))?;
        let next = le_u64(&raw, "superblock next_handle")?;
        // next == 0 means exhausted; otherwise 1 <= next <= last, so d + 1 cannot overflow.
        let avail = match next {
            0 => 0,
            _ => self.last_handle.checked_sub(next).map_or(0, |d| d + 1),
        };
        if n > avail {
            return Err(MetaError::new(
                Errno::ENOSPC,
                format!("handle range exhausted: {n} wanted, {avail} left"),
            ));
        }
        let after = next_after(next, n, self.last_handle);
        self.put(Tab::Super, SB_NEXT, Some(after.to_le_bytes().to_vec()));
        Ok(next)
    }

    /// Adds `count` pre-created datafile handles from `first` on to data server `server`'s pool.
    pub fn pool_add(&mut self, server: u32, first: Handle, count: u64) {
        if count > 0 {
            self.put(
                Tab::Pool,
                &pool_key(server, first),
                Some(count.to_le_bytes().to_vec()),
            );
        }
    }

    /// Takes up to `n` handles from `server`'s pool, lowest first (fewer if it has fewer).
    pub fn pool_take(&mut self, server: u32, n: u64) -> Result<Vec<Handle>, MetaError> {
        let mut out = Vec::new();
        for (first, count) in pool_ranges(self, server)? {
            let want = n - out.len() as u64;
            if want == 0 {
                break;
            }
            let k = want.min(count);
            out.extend(first..first + k);
            self.put(Tab::Pool, &pool_key(server, first), None);
            if k < count {
                self.pool_add(server, first + k, count - k);
            }
        }
        Ok(out)
    }

    /// Number of handles in `server`'s pool.
    pub fn pool_len(&self, server: u32) -> Result<u64, MetaError> {
        Ok(pool_ranges(self, server)?.iter().map(|r| r.1).sum())
    }
}
