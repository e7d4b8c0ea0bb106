//! The authority's durable state: raft's vote, log and snapshot in one redb database.
//!
//! One file, `<dir>/raft.redb`, with two tables: `log` (index → entry) and `meta` (the
//! vote, the committed and last purged log ids, the snapshot). Every write raft waits
//! for (a vote, appended entries, a snapshot, a truncation or purge) is a durable redb
//! commit, fsynced before it returns; only the committed log id, which openraft treats
//! as a hint, is written without a sync (the next durable commit carries it).
//!
//! A follower installing a leader's snapshot is told by openraft to purge the log the
//! snapshot covers right after the install is handed to the state machine's task, not
//! after it finished (openraft 0.9.25, `install_full_snapshot`): a crash in between would
//! leave neither the entries nor the snapshot. So a purge waits until the stored snapshot
//! covers it ([`Covered`]), and refuses if it never does.
//!
//! redb commits block the thread on the disk, so every access runs on tokio's blocking
//! pool: the raft core and the runtime's other tasks never wait behind an fsync. In a
//! simulation (`pvfs_proto::clock::simulated`) it runs on the caller's thread: another
//! thread would make the order of events, and so the run, differ from its seed's.

mod log;
mod machine;

pub(crate) use log::LogStore;
pub(crate) use machine::{Machine, Stored};

use crate::{Error, NodeId};
use openraft::{AnyError, ErrorSubject, ErrorVerb, LogId, StorageError, StorageIOError};
use redb::{Database, ReadableDatabase, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::{oneshot, watch};

/// Raft log entries by index (JSON of `openraft::Entry`).
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// Single values by name (JSON), the names below.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// The last vote this member cast or accepted.
const VOTE: &str = "vote";
/// The last committed log id this member knows of (a hint, see the module comment).
const COMMITTED: &str = "committed";
/// The last log id purged from `LOG` (entries up to it are in the snapshot).
const PURGED: &str = "purged";
/// The current snapshot: its meta and the serialized state machine.
const SNAPSHOT: &str = "snapshot";
/// How many servers the map had when this member's store was made: the map every
/// replay of the log starts from (a configuration read later may have more, and a
/// log replayed from another start would make another map).
const FIRST_SERVERS: &str = "first_servers";
/// The file in a member's directory.
pub const FILE: &str = "raft.redb";

/// The last log id the stored snapshot covers: set by the state machine once a snapshot
/// is durable, waited for by purges.
pub(crate) type Covered = Arc<watch::Sender<Option<LogId<NodeId>>>>;

/// Raises `covered` to `to` (it never goes back).
pub(crate) fn cover(covered: &Covered, to: Option<LogId<NodeId>>) {
    covered.send_if_modified(|c| {
        let raise = to > *c;
        if raise {
            *c = to;
        }
        raise
    });
}

/// The open database, shared by the log store, its readers and the state machine.
pub(crate) type Db = Arc<Store>;

/// The database, and a signal that it is closed.
pub(crate) struct Store {
    db: Database,
    /// Dropped after `db` (fields drop in order): its receiver then knows the file is
    /// closed and unlocked. Closing can take a while (redb syncs what is not synced yet),
    /// and a start on the same directory must wait for it.
    _closed: oneshot::Sender<()>,
}

impl Deref for Store {
    type Target = Database;

    fn deref(&self) -> &Database {
        &self.db
    }
}

/// Opens (creating if needed) `<dir>/raft.redb` with both tables; the receiver completes
/// once the last handle to it is dropped and the file is closed.
pub(crate) fn open(dir: &Path) -> Result<(Db, oneshot::Receiver<()>), Error> {
    let path = dir.join(FILE);
    let fail = |what: String| Error::Store {
        path: path.display().to_string(),
        what,
    };
    std::fs::create_dir_all(dir).map_err(|e| fail(format!("create the directory: {e}")))?;
    let db = Database::create(&path).map_err(|e| fail(e.to_string()))?;
    let create = || -> Result<(), redb::Error> {
        let txn = db.begin_write()?;
        txn.open_table(LOG)?;
        txn.open_table(META)?;
        txn.commit()?;
        Ok(())
    };
    create().map_err(|e| fail(e.to_string()))?;
    let (tx, rx) = oneshot::channel();
    Ok((Arc::new(Store { db, _closed: tx }), rx))
}

/// Reads `key` from `META`, decoded.
fn get_meta<T: DeserializeOwned>(db: &Database, key: &str) -> Result<Option<T>, AnyError> {
    let txn = db.begin_read().any()?;
    let table = txn.open_table(META).any()?;
    let Some(v) = table.get(key).any()? else {
        return Ok(None);
    };
    Ok(Some(serde_json::from_slice(v.value()).any()?))
}

/// JSON of what raft asks to store; its types always serialize (no non-string map keys
/// serde_json would refuse), but a failure is a storage error, never a panic.
fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, AnyError> {
    serde_json::to_vec(value).any()
}

/// Turns any error into the one openraft carries.
trait AnyResult<T> {
    /// The result with its error as an [`AnyError`].
    fn any(self) -> Result<T, AnyError>;
}

impl<T, E: std::error::Error + 'static> AnyResult<T> for Result<T, E> {
    fn any(self) -> Result<T, AnyError> {
        self.map_err(|e| any(&e))
    }
}

/// An error as openraft carries it.
fn any<E: std::error::Error + 'static>(e: &E) -> AnyError {
    AnyError::new(e)
}

/// A storage error about `subject` while doing `verb`.
fn io(subject: ErrorSubject<NodeId>, verb: ErrorVerb, e: AnyError) -> StorageError<NodeId> {
    StorageIOError::new(subject, verb, e).into()
}

/// Runs the blocking `f` on tokio's blocking pool (in a simulation, here).
async fn blocking<T, F>(
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    f: F,
) -> Result<T, StorageError<NodeId>>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, AnyError> + Send + 'static,
{
    if pvfs_proto::clock::simulated() {
        return f().map_err(|e| io(subject, verb, e));
    }
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(io(subject, verb, e)),
        Err(e) => Err(io(subject, verb, any(&e))),
    }
}
