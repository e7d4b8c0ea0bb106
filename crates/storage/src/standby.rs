//! A standby's copy of another server's metadata store: a whole copy of the
//! primary's database file, then every record the primary's redo log writes, replayed
//! as commits of its own redo log (`docs/replication.md`, "Metadata: a primary and
//! standbys"; the formats in `docs/storage-format.md`).
//!
//! Files, in the group's directory (`<storage>/groups/<primary's name>/`):
//! `meta.redb` and `meta.redo`, exactly what the primary's store would be after a
//! crash, so a promoted standby opens them as a `MetaStore`; `meta.redb.copy` while a
//! copy comes in (renamed over `meta.redb` once whole and synced, so a crash
//! mid-copy leaves the previous copy, never half of one).

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::redo::{LoggedFile, OsDisk, SyncPolicy, LOG_CAPACITY};

/// Why a standby refused what its primary sent.
#[derive(Debug, thiserror::Error)]
pub enum StandbyError {
    /// It follows no copy of this primary's log (another generation, a record past
    /// the next it expects, a chunk outside a copy): the primary sends a new copy.
    #[error("the standby needs a new copy: {0}")]
    NeedCopy(String),
    /// The records start past the next one it expects: a batch sent after one
    /// that has not arrived yet (the primary sends several before their answers).
    /// Ask again once the copy has moved on.
    #[error("records from {first} came before {next}")]
    Ahead {
        /// The first record of the batch.
        first: u64,
        /// The next record the copy expects.
        next: u64,
    },
    /// Its disk failed.
    #[error("standby copy: {0}")]
    Io(#[from] io::Error),
}

/// The copy one standby keeps of one primary's metadata store.
pub struct StandbyStore {
    dir: PathBuf,
    sync: SyncPolicy,
    state: Mutex<State>,
}

/// What the copy is doing.
#[derive(Default)]
struct State {
    /// The primary's log generation this copy belongs to (0: none).
    epoch: u64,
    /// A copy coming in: the file and its length.
    copying: Option<(std::fs::File, u64)>,
    /// A whole copy following the primary's records, and the number of the next
    /// record it expects.
    following: Option<(LoggedFile<OsDisk>, u64)>,
    /// Closed: the copy is not a standby's any more (it is being opened as the
    /// group's store); everything sent to it is refused.
    closed: bool,
}

impl StandbyStore {
    /// The copy in `dir` (made if missing); it follows nothing until a primary sends
    /// a copy. Replayed records are made durable as `sync` says (the server's
    /// `[defaults] metadata_sync`, as its own store's).
    pub fn open(dir: &Path, sync: SyncPolicy) -> io::Result<StandbyStore> {
        std::fs::create_dir_all(dir)?;
        Ok(StandbyStore {
            dir: dir.to_path_buf(),
            sync,
            state: Mutex::new(State::default()),
        })
    }

    /// The directory of the copy.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a new copy of the primary's database file of generation `epoch`,
    /// `len` bytes long; what the copy followed before is dropped.
    pub fn begin(&self, epoch: u64, len: u64) -> Result<(), StandbyError> {
        let mut st = self.lock();
        if st.closed {
            return Err(StandbyError::NeedCopy("the copy is closed".into()));
        }
        st.following = None;
        st.epoch = epoch;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.dir.join("meta.redb.copy"))?;
        file.set_len(len)?;
        st.copying = Some((file, len));
        Ok(())
    }

    /// Writes `data` at `offset` of the copy coming in.
    pub fn chunk(&self, epoch: u64, offset: u64, data: &[u8]) -> Result<(), StandbyError> {
        let st = self.lock();
        let Some((file, len)) = st.copying.as_ref().filter(|_| st.epoch == epoch) else {
            return Err(StandbyError::NeedCopy(
                "no copy of this generation under way".into(),
            ));
        };
        if offset + data.len() as u64 > *len {
            return Err(StandbyError::NeedCopy(format!(
                "a chunk at {offset} of {} bytes passes the copy's {len}",
                data.len()
            )));
        }
        file.write_all_at(data, offset)?;
        Ok(())
    }

    /// Ends the copy coming in: synced, it replaces the previous one, with a new log;
    /// record `next` of the primary's log is the first to follow.
    pub fn end(&self, epoch: u64, next: u64) -> Result<(), StandbyError> {
        let mut st = self.lock();
        if st.epoch != epoch {
            return Err(StandbyError::NeedCopy(
                "a copy of another generation".into(),
            ));
        }
        let Some((file, _)) = st.copying.take() else {
            return Err(StandbyError::NeedCopy("no copy under way".into()));
        };
        file.sync_all()?;
        drop(file);
        let db = self.dir.join("meta.redb");
        let log = self.dir.join("meta.redo");
        // The old log describes the old file: it goes first, so a crash after the
        // rename never redoes it over the new one.
        match std::fs::remove_file(&log) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        std::fs::rename(self.dir.join("meta.redb.copy"), &db)?;
        std::fs::File::open(&self.dir)?.sync_all()?;
        let (file, _) = LoggedFile::open_with(
            OsDisk::open_locked(&db)?,
            OsDisk::open(&log)?,
            LOG_CAPACITY,
            self.sync,
        )?;
        st.following = Some((file, next));
        Ok(())
    }

    /// Replays `records` (shipped records back to back, in order) of generation
    /// `epoch`: one the copy already has is skipped, the next one applied; a batch
    /// that starts past the next one is refused as ahead (an earlier batch is on its
    /// way), a gap inside a batch as needing a copy. Returns the number of the last
    /// record the copy holds.
    pub fn records(&self, epoch: u64, mut records: &[u8]) -> Result<u64, StandbyError> {
        let mut st = self.lock();
        if st.epoch != epoch {
            return Err(StandbyError::NeedCopy(format!(
                "records of generation {epoch:#x}, following {:#x}",
                st.epoch
            )));
        }
        let Some((file, next)) = st.following.as_mut() else {
            return Err(StandbyError::NeedCopy("no whole copy to replay on".into()));
        };
        let mut first = true;
        while !records.is_empty() {
            let (seq, len) = crate::redo::shipped_head(records)?;
            let (one, rest) = records.split_at(len);
            records = rest;
            if seq < *next {
                first = false;
                continue;
            }
            if seq > *next && first {
                return Err(StandbyError::Ahead {
                    first: seq,
                    next: *next,
                });
            }
            first = false;
            if seq > *next {
                return Err(StandbyError::NeedCopy(format!(
                    "record {seq} came, {} expected",
                    *next
                )));
            }
            file.replay_shipped(one)?;
            *next += 1;
        }
        Ok(next.saturating_sub(1))
    }

    /// The number of the last record of generation `epoch` the copy holds, if it
    /// follows that generation.
    pub fn holds(&self, epoch: u64) -> Option<u64> {
        let st = self.lock();
        match &st.following {
            Some((_, next)) if st.epoch == epoch => Some(next.saturating_sub(1)),
            _ => None,
        }
    }

    /// Whether the copy is whole and follows a primary's records.
    pub fn following(&self) -> bool {
        self.lock().following.is_some()
    }

    /// Stops following the primary's records until a new copy comes (the standby's
    /// server was away: records may have gone by without it). The copy stays as it
    /// is, checkpointed.
    pub fn unfollow(&self) -> io::Result<()> {
        let mut st = self.lock();
        st.copying = None;
        st.epoch = 0;
        if let Some((file, _)) = st.following.take() {
            use redb::StorageBackend;
            file.close()?;
        }
        Ok(())
    }

    /// Stops following: the copy's log is checkpointed into its file, which then
    /// opens as a metadata store by itself.
    pub fn close(&self) -> io::Result<()> {
        use redb::StorageBackend;
        let mut st = self.lock();
        st.copying = None;
        st.epoch = 0;
        st.closed = true;
        if let Some((file, _)) = st.following.take() {
            file.close()?;
        }
        Ok(())
    }
}
