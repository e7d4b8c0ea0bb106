//! Storage in memory whose crash a simulation controls: [`SimDrive`], the disks of a
//! metadata store ([`crate::MetaStore::open_on_callers_thread`] with
//! [`SimDrive::disks`]), and [`MemData`], a data store. Both keep what was synced
//! apart from what was only written; [`SimDrive::crash`] and [`MemData::crash`]
//! keep the synced state and any subset the caller's random numbers pick of what was
//! written since (a power loss), and make every handle from before the crash fail,
//! so a crashed server's leftover tasks cannot touch the new state.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use pvfs_proto::message::DatafileStat;
use pvfs_proto::Handle;

use crate::data::{DataBackend, FsSpace};
use crate::error::StorageError;
use crate::meta::OpenDisks;
use crate::redo::Disk;

/// A source of random numbers for a crash (the simulation's seeded one).
pub type Random<'a> = &'a mut dyn FnMut() -> u64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn dead() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the simulated server crashed")
}

/// One file of a simulated disk: what a power loss keeps for sure, and the writes
/// since, in order.
#[derive(Debug, Default, Clone)]
struct SimFile {
    synced: Vec<u8>,
    current: Vec<u8>,
    /// Changes since the last sync, in order: a write, or a new length (`None` data).
    unsynced: Vec<(u64, Option<Vec<u8>>)>,
}

impl SimFile {
    fn apply(image: &mut Vec<u8>, offset: u64, data: &Option<Vec<u8>>) {
        match data {
            Some(d) => {
                let end = offset as usize + d.len();
                if image.len() < end {
                    image.resize(end, 0);
                }
                image[offset as usize..end].copy_from_slice(d);
            }
            None => image.resize(offset as usize, 0),
        }
    }

    /// The file after a power loss: the synced image and, of the changes since, those
    /// `keep` picks, in their order.
    fn crash(&mut self, rnd: Random<'_>) {
        for (offset, data) in std::mem::take(&mut self.unsynced) {
            if rnd().is_multiple_of(2) {
                SimFile::apply(&mut self.synced, offset, &data);
            }
        }
        self.current = self.synced.clone();
    }
}

#[derive(Debug, Default)]
struct DriveState {
    files: BTreeMap<String, SimFile>,
    /// Bumped by every crash: handles of an older generation fail.
    generation: u64,
}

/// The simulated disk of one server's metadata store: its database file and redo
/// log, kept across crashes and restarts of the server.
#[derive(Clone, Debug, Default)]
pub struct SimDrive(Arc<Mutex<DriveState>>);

/// One open file of a [`SimDrive`].
#[derive(Debug)]
struct DriveFile {
    drive: SimDrive,
    name: String,
    generation: u64,
}

impl DriveFile {
    fn with<R>(&self, f: impl FnOnce(&mut SimFile) -> R) -> io::Result<R> {
        let mut st = lock(&self.drive.0);
        if st.generation != self.generation {
            return Err(dead());
        }
        Ok(f(st.files.entry(self.name.clone()).or_default()))
    }
}

impl Disk for DriveFile {
    fn len(&self) -> io::Result<u64> {
        self.with(|f| f.current.len() as u64)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.with(|f| {
            let end = offset as usize + buf.len();
            if end > f.current.len() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "read past the end of a simulated file",
                ));
            }
            buf.copy_from_slice(&f.current[offset as usize..end]);
            Ok(())
        })?
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.with(|f| {
            let d = Some(data.to_vec());
            SimFile::apply(&mut f.current, offset, &d);
            f.unsynced.push((offset, d));
        })
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(|f| {
            SimFile::apply(&mut f.current, len, &None);
            f.unsynced.push((len, None));
        })
    }
    fn sync(&self) -> io::Result<()> {
        self.with(|f| {
            // The writes since the last sync reach the synced image (a copy of what
            // they wrote, not of the whole file).
            for (offset, data) in std::mem::take(&mut f.unsynced) {
                SimFile::apply(&mut f.synced, offset, &data);
            }
        })
    }
}

impl SimDrive {
    /// An empty drive.
    pub fn new() -> SimDrive {
        SimDrive::default()
    }

    /// What `MetaStore` opens its files with: the database and the log on this drive
    /// (by their file names), in the drive's current generation: after the next crash
    /// or kill, files opened through it fail (a reopen by a crashed server's leftover
    /// tasks cannot reach the state the restarted server uses).
    pub fn disks(&self) -> OpenDisks {
        let drive = self.clone();
        let generation = lock(&drive.0).generation;
        Arc::new(move |db: &std::path::Path, log: &std::path::Path| {
            let file = |p: &std::path::Path| -> Box<dyn Disk> {
                Box::new(DriveFile {
                    drive: drive.clone(),
                    name: p
                        .file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                    generation,
                })
            };
            Ok((file(db), file(log)))
        })
    }

    /// A power loss: every file keeps what was synced and the subset of its later
    /// writes `rnd` picks; every file opened before fails from now on.
    pub fn crash(&self, rnd: Random<'_>) {
        let mut st = lock(&self.0);
        st.generation += 1;
        for f in st.files.values_mut() {
            f.crash(rnd);
        }
    }

    /// A killed process (not a power loss): everything written stays; files opened
    /// before fail from now on.
    pub fn kill(&self) {
        lock(&self.0).generation += 1;
    }

    /// Bytes written and not synced, over all files.
    pub fn unsynced(&self) -> usize {
        lock(&self.0)
            .files
            .values()
            .flat_map(|f| &f.unsynced)
            .map(|(_, d)| d.as_ref().map_or(0, Vec::len))
            .sum()
    }
}

/// One datafile in memory.
#[derive(Debug, Default, Clone)]
struct MemFile {
    current: Vec<u8>,
    mtime: pvfs_proto::Timespec,
    /// Its content at its last sync; None if never synced (a crash loses it).
    synced: Option<Vec<u8>>,
}

#[derive(Debug, Default)]
struct MemState {
    files: BTreeMap<Handle, MemFile>,
    /// Created and not removed, durably (a missing one of these is lost).
    born: BTreeSet<Handle>,
    generation: u64,
    /// Power losses so far (the write verifier is one more).
    power_losses: u64,
}

/// A data store in memory ([`DataBackend`]), with crashes.
#[derive(Clone, Debug, Default)]
pub struct MemData {
    state: Arc<Mutex<MemState>>,
    generation: u64,
}

impl MemData {
    /// An empty store.
    pub fn new() -> MemData {
        MemData::default()
    }

    /// The store as the restarted server sees it after a power loss: each datafile
    /// keeps its synced content, or (as `rnd` picks) what was written since; one
    /// never synced may be gone. The handle this is called on, and its clones, fail
    /// from now on; the returned one serves the new run.
    pub fn crash(&self, rnd: Random<'_>) -> MemData {
        let mut st = lock(&self.state);
        st.generation += 1;
        st.power_losses += 1;
        let mut gone = Vec::new();
        for (h, f) in st.files.iter_mut() {
            if rnd().is_multiple_of(2) {
                continue; // everything written reached the disk
            }
            match &f.synced {
                Some(s) => f.current = s.clone(),
                None => gone.push(*h),
            }
        }
        for h in gone {
            st.files.remove(&h);
        }
        MemData {
            state: self.state.clone(),
            generation: st.generation,
        }
    }

    /// A killed process: everything written stays; this handle fails from now on.
    pub fn kill(&self) -> MemData {
        let mut st = lock(&self.state);
        st.generation += 1;
        MemData {
            state: self.state.clone(),
            generation: st.generation,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut MemState) -> R) -> Result<R, StorageError> {
        let mut st = lock(&self.state);
        if st.generation != self.generation {
            return Err(StorageError::Io(Arc::new(dead())));
        }
        Ok(f(&mut st))
    }

    fn file(st: &mut MemState, h: Handle) -> &mut MemFile {
        st.born.insert(h);
        st.files.entry(h).or_default()
    }
}

impl DataBackend for MemData {
    fn write_at(&self, h: Handle, off: u64, data: &[u8]) -> Result<(), StorageError> {
        self.with(|st| {
            let f = MemData::file(st, h);
            let end = off as usize + data.len();
            if f.current.len() < end {
                f.current.resize(end, 0);
            }
            f.current[off as usize..end].copy_from_slice(data);
            f.mtime = pvfs_proto::Timespec::now();
        })
    }
    fn read_at(&self, h: Handle, off: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        self.with(|st| match st.files.get(&h) {
            None => 0,
            Some(f) => {
                let start = (off as usize).min(f.current.len());
                let n = buf.len().min(f.current.len() - start);
                buf[..n].copy_from_slice(&f.current[start..start + n]);
                n
            }
        })
    }
    fn stat(&self, h: Handle) -> Result<DatafileStat, StorageError> {
        self.with(|st| match st.files.get(&h) {
            None => DatafileStat::default(),
            Some(f) => DatafileStat {
                size: f.current.len() as u64,
                mtime: f.mtime,
                allocated: (f.current.len() as u64).div_ceil(4096) * 4096,
            },
        })
    }
    fn truncate(&self, h: Handle, size: u64) -> Result<(), StorageError> {
        self.with(|st| {
            if size == 0 && !st.files.contains_key(&h) {
                return;
            }
            let f = MemData::file(st, h);
            f.current.resize(size as usize, 0);
            f.mtime = pvfs_proto::Timespec::now();
        })
    }
    fn fallocate(&self, h: Handle, mode: u32, off: u64, len: u64) -> Result<(), StorageError> {
        use pvfs_proto::message::falloc;
        self.with(|st| {
            if !st.files.contains_key(&h) && !falloc::creates(mode) {
                return;
            }
            let f = MemData::file(st, h);
            let end = (off + len) as usize;
            if mode & falloc::PUNCH_HOLE != 0 || mode & falloc::ZERO_RANGE != 0 {
                let stop = end.min(f.current.len());
                if (off as usize) < stop {
                    f.current[off as usize..stop].fill(0);
                }
            }
            if mode & falloc::KEEP_SIZE == 0 && f.current.len() < end {
                f.current.resize(end, 0);
            }
        })
    }
    fn remove(&self, h: Handle) -> Result<(), StorageError> {
        self.with(|st| {
            st.files.remove(&h);
            st.born.remove(&h);
        })
    }
    fn sync(&self, h: Handle) -> Result<(), StorageError> {
        self.with(|st| {
            if let Some(f) = st.files.get_mut(&h) {
                f.synced = Some(f.current.clone());
            }
        })
    }
    fn sync_all(&self) -> Result<(), StorageError> {
        self.with(|st| {
            for f in st.files.values_mut() {
                f.synced = Some(f.current.clone());
            }
        })
    }
    fn count(&self) -> Result<u64, StorageError> {
        self.with(|st| st.files.len() as u64)
    }
    fn list(&self) -> Result<Vec<Handle>, StorageError> {
        self.with(|st| st.files.keys().copied().collect())
    }
    fn lost(&self) -> Result<Vec<Handle>, StorageError> {
        self.with(|st| {
            st.born
                .iter()
                .filter(|h| !st.files.contains_key(h))
                .copied()
                .collect()
        })
    }
    fn statfs(&self) -> Result<FsSpace, StorageError> {
        self.with(|st| {
            let used: u64 = st.files.values().map(|f| f.current.len() as u64).sum();
            let total = 1u64 << 40;
            FsSpace {
                total_bytes: total,
                free_bytes: total - used.min(total),
                avail_bytes: total - used.min(total),
                total_inodes: 1 << 32,
                free_inodes: (1u64 << 32) - st.files.len() as u64,
                fs_id: 0,
            }
        })
    }
    fn create_all(&self, hs: &[Handle]) -> Result<(), StorageError> {
        self.with(|st| {
            for &h in hs {
                let f = MemData::file(st, h);
                if f.synced.is_none() {
                    f.synced = Some(f.current.clone());
                }
            }
        })
    }

    fn verifier(&self) -> u64 {
        lock(&self.state).power_losses + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> impl FnMut() -> u64 {
        let mut n = 0u64;
        move || {
            n += 1;
            n
        }
    }

    #[test]
    fn a_crash_keeps_what_was_synced_and_fails_old_handles() {
        let drive = SimDrive::new();
        let (db, _log) = (drive.disks())(
            std::path::Path::new("meta.redb"),
            std::path::Path::new("meta.log"),
        )
        .unwrap();
        db.write_at(0, b"synced").unwrap();
        db.sync().unwrap();
        db.write_at(0, b"lost!!").unwrap();
        db.write_at(6, b"kept").unwrap();
        assert_eq!(drive.unsynced(), 10);
        // The counter keeps every even pick: the first write is lost, the second kept.
        drive.crash(&mut counter());
        assert!(db.len().is_err(), "a handle from before the crash fails");
        let (db, _) = (drive.disks())(
            std::path::Path::new("meta.redb"),
            std::path::Path::new("meta.log"),
        )
        .unwrap();
        let mut buf = [0u8; 10];
        db.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"syncedkept");
    }

    #[test]
    fn a_synced_truncate_survives_a_power_loss() {
        let data = MemData::new();
        data.write_at(1, 0, b"12345678").unwrap();
        data.sync(1).unwrap();
        data.truncate(1, 69).unwrap();
        data.sync(1).unwrap();
        let after = data.crash(&mut || 1u64);
        assert_eq!(after.stat(1).unwrap().size, 69);
    }

    #[test]
    fn a_datafile_never_synced_may_be_lost_and_is_then_reported() {
        let data = MemData::new();
        data.write_at(1, 0, b"a").unwrap();
        data.write_at(2, 0, b"b").unwrap();
        data.sync(2).unwrap();
        data.write_at(2, 0, b"c").unwrap();
        let mut odd = || 1u64; // every file loses what was not synced
        let after = data.crash(&mut odd);
        assert!(data.count().is_err());
        assert_eq!(after.list().unwrap(), vec![2]);
        assert_eq!(after.lost().unwrap(), vec![1]);
        let mut b = [0u8; 1];
        after.read_at(2, 0, &mut b).unwrap();
        assert_eq!(&b, b"b");
    }
}
