//! [`LogStore`]: raft's vote and log in the redb database (openraft's `RaftLogStorage`).
//!
//! openraft calls these methods one at a time from its core task and waits for each, so
//! writes are serialized as it requires (a vote and an append never overtake each
//! other); readers ([`LogStore`] clones handed to replication tasks) read committed redb
//! snapshots beside them.

use super::{blocking, encode, get_meta, AnyResult, Covered, Db, Stored};
use super::{COMMITTED, LOG, META, PURGED, SNAPSHOT, VOTE};
use crate::raft::TypeConfig;
use crate::NodeId;
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    AnyError, Entry, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogReader,
    StorageError, Vote,
};
use redb::{Database, Durability, ReadableDatabase, ReadableTable};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::time::Duration;
use tokio::sync::watch;

/// How long a purge waits for the snapshot that covers it to be stored (it is being
/// installed meanwhile, see the module comment of `store`).
const PURGE_WAIT: Duration = Duration::from_secs(30);

/// Raft's vote and log, in the authority's database.
#[derive(Clone)]
pub(crate) struct LogStore {
    db: Db,
    /// What the stored snapshot covers.
    covered: watch::Receiver<Option<LogId<NodeId>>>,
}

impl LogStore {
    /// The log store of `db`; `covered` follows what the stored snapshot covers.
    pub(crate) fn new(db: Db, covered: &Covered) -> LogStore {
        LogStore {
            db,
            covered: covered.subscribe(),
        }
    }
}

/// Entries in `range`, in order.
fn read_range(
    db: &Database,
    range: (Bound<u64>, Bound<u64>),
) -> Result<Vec<Entry<TypeConfig>>, AnyError> {
    let txn = db.begin_read().any()?;
    let table = txn.open_table(LOG).any()?;
    let mut entries = Vec::new();
    for item in table.range::<u64>(range).any()? {
        let (_, v) = item.any()?;
        entries.push(serde_json::from_slice(v.value()).any()?);
    }
    Ok(entries)
}

/// Writes `key` = `value` to `META` in one commit, durable unless `durable` is false.
pub(super) fn put_meta(
    db: &Database,
    key: &str,
    value: Vec<u8>,
    durable: bool,
) -> Result<(), AnyError> {
    let mut txn = db.begin_write().any()?;
    if !durable {
        txn.set_durability(Durability::None).any()?;
    }
    txn.open_table(META)
        .any()?
        .insert(key, value.as_slice())
        .any()?;
    txn.commit().any()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let db = self.db.clone();
        let range = (range.start_bound().cloned(), range.end_bound().cloned());
        blocking(ErrorSubject::Logs, ErrorVerb::Read, move || {
            read_range(&db, range)
        })
        .await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let db = self.db.clone();
        blocking(ErrorSubject::Logs, ErrorVerb::Read, move || {
            let purged: Option<LogId<NodeId>> = get_meta(&db, PURGED)?;
            let txn = db.begin_read().any()?;
            let table = txn.open_table(LOG).any()?;
            let last = match table.last().any()? {
                Some((_, v)) => {
                    let e: Entry<TypeConfig> = serde_json::from_slice(v.value()).any()?;
                    Some(e.log_id)
                }
                None => purged,
            };
            Ok(LogState {
                last_purged_log_id: purged,
                last_log_id: last,
            })
        })
        .await
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let db = self.db.clone();
        let vote = *vote;
        blocking(ErrorSubject::Vote, ErrorVerb::Write, move || {
            // Durable: a member that voted must not vote again in that term after a crash.
            put_meta(&db, VOTE, encode(&vote)?, true)
        })
        .await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        let db = self.db.clone();
        blocking(ErrorSubject::Vote, ErrorVerb::Read, move || {
            get_meta(&db, VOTE)
        })
        .await
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        let db = self.db.clone();
        blocking(ErrorSubject::Store, ErrorVerb::Write, move || {
            // Not synced: it only lets a restarted member re-apply its committed log at
            // once instead of after the next leader's first commit. Losing the newest value
            // loses nothing (raft recommits), and a value never runs ahead of the log it
            // names, which was synced before it could be committed.
            put_meta(&db, COMMITTED, encode(&committed)?, false)
        })
        .await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        let db = self.db.clone();
        blocking(ErrorSubject::Store, ErrorVerb::Read, move || {
            Ok(get_meta::<Option<LogId<NodeId>>>(&db, COMMITTED)?.flatten())
        })
        .await
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let db = self.db.clone();
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        blocking(ErrorSubject::Logs, ErrorVerb::Write, move || {
            let txn = db.begin_write().any()?;
            {
                let mut table = txn.open_table(LOG).any()?;
                for e in &entries {
                    table.insert(e.log_id.index, encode(e)?.as_slice()).any()?;
                }
            }
            // A durable commit: openraft counts this member's vote for these entries once
            // the callback says they are on disk.
            txn.commit().any()
        })
        .await?;
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let db = self.db.clone();
        blocking(ErrorSubject::Log(log_id), ErrorVerb::Delete, move || {
            let txn = db.begin_write().any()?;
            txn.open_table(LOG)
                .any()?
                .retain_in(log_id.index.., |_, _| false)
                .any()?;
            txn.commit().any()
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        // The state machine is rebuilt from the stored snapshot on restart: purging past it
        // would lose committed entries. A follower's install may still be storing it.
        let wait = self.covered.wait_for(|c| *c >= Some(log_id));
        if !matches!(tokio::time::timeout(PURGE_WAIT, wait).await, Ok(Ok(_))) {
            let e = AnyError::error(format!(
                "refusing to purge up to {log_id}: no stored snapshot covers it after {PURGE_WAIT:?}"
            ));
            return Err(super::io(ErrorSubject::Log(log_id), ErrorVerb::Delete, e));
        }
        let db = self.db.clone();
        blocking(ErrorSubject::Log(log_id), ErrorVerb::Delete, move || {
            // Checked again against the file itself: the cost is one read.
            let snapshot: Option<Stored> = get_meta(&db, SNAPSHOT)?;
            let covered = snapshot.and_then(|s| s.meta.last_log_id).map(|l| l.index);
            if covered < Some(log_id.index) {
                return Err(AnyError::error(format!(
                    "refusing to purge up to {log_id}: the stored snapshot covers only up to {covered:?}"
                )));
            }
            let txn = db.begin_write().any()?;
            {
                let mut meta = txn.open_table(META).any()?;
                let before: Option<LogId<NodeId>> = match meta.get(PURGED).any()? {
                    Some(v) => Some(serde_json::from_slice(v.value()).any()?),
                    None => None,
                };
                debug_assert!(before <= Some(log_id), "purges only move forward");
                meta.insert(PURGED, encode(&log_id)?.as_slice()).any()?;
            }
            txn.open_table(LOG)
                .any()?
                .retain_in(..=log_id.index, |_, _| false)
                .any()?;
            txn.commit().any()
        })
        .await
    }
}
