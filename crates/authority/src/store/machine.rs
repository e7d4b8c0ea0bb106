//! [`Machine`]: the map as raft's state machine, and its snapshots in the redb database.
//!
//! The state machine lives in memory; what makes it durable is the log plus the stored
//! snapshot: a restarted member starts from the stored snapshot and openraft re-applies
//! the log after it (up to the committed id [`super::LogStore`] kept, or what the next
//! leader commits). So a snapshot is written to disk (durably) before openraft learns of
//! it, and openraft purges only logs a snapshot covers (checked in `LogStore::purge`).

use super::{
    blocking, cover, encode, get_meta, AnyResult, Covered, Db, FIRST_SERVERS, META, SNAPSHOT,
};
use crate::map::{Applied, Map};
use crate::raft::{Response, TypeConfig};
use crate::NodeId;
use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, EmptyNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend,
    RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError, StoredMembership,
};
use redb::{Database, ReadableTable};
use serde::{Deserialize, Serialize};
use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

/// Everything the state machine holds: what a snapshot serializes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub(crate) struct SmState {
    /// The last log entry applied.
    pub last_applied: Option<LogId<NodeId>>,
    /// The last membership applied.
    pub membership: StoredMembership<NodeId, EmptyNode>,
    /// The map.
    pub map: Map,
}

/// A snapshot as stored: openraft's meta and the serialized [`SmState`].
#[derive(Serialize, Deserialize)]
pub(crate) struct Stored {
    /// openraft's description of it.
    pub meta: SnapshotMeta<NodeId, EmptyNode>,
    /// JSON of the [`SmState`].
    pub data: Vec<u8>,
}

/// The map as raft's state machine.
pub(crate) struct Machine {
    db: Db,
    state: SmState,
    /// Every applied map is published here: `Authority::map` and the lease checker read it.
    published: watch::Sender<Map>,
    /// Numbers snapshots built by this process (part of their ids).
    built: Arc<AtomicU64>,
    /// What the stored snapshot covers (purges wait for it).
    covered: Covered,
}

/// Builds one snapshot of the state as it was when the builder was made.
pub(crate) struct Builder {
    db: Db,
    state: SmState,
    seq: u64,
    covered: Covered,
}

/// The servers of the map the log is replayed from: recorded with the store's
/// first start (`servers` then), whatever the configuration says later.
fn first_servers(db: &Db, servers: usize) -> Result<usize, String> {
    let fail = |e: AnyError| format!("read the map's first servers: {e}");
    if let Some(n) = get_meta::<usize>(db, FIRST_SERVERS).map_err(fail)? {
        return Ok(n);
    }
    let value = serde_json::to_vec(&servers).map_err(|e| e.to_string())?;
    super::log::put_meta(db, FIRST_SERVERS, value, true).map_err(fail)?;
    Ok(servers)
}

impl Machine {
    /// Opens the state machine of `db` (blocking): the stored snapshot's state, or a new map
    /// of `servers` servers; the receiver follows every map it applies. The error says what
    /// failed.
    pub(crate) fn open(
        db: Db,
        servers: usize,
    ) -> Result<(Machine, watch::Receiver<Map>, Covered), String> {
        let stored: Option<Stored> =
            get_meta(&db, SNAPSHOT).map_err(|e| format!("read the snapshot: {e}"))?;
        let covered = Arc::new(watch::Sender::new(
            stored.as_ref().and_then(|s| s.meta.last_log_id),
        ));
        let state = match stored {
            Some(s) => {
                let state = decode_state(&s.data)
                    .map_err(|e| format!("snapshot {}: {e}", s.meta.snapshot_id))?;
                if state.map.servers.len() > servers {
                    // The map is what the authority decided; a configuration that names
                    // fewer servers does not change it (one with more grows it:
                    // `Command::Grow`).
                    tracing::warn!(
                        in_map = state.map.servers.len(),
                        configured = servers,
                        "the authority's map has more servers than the configuration"
                    );
                }
                state
            }
            None => SmState {
                last_applied: None,
                membership: StoredMembership::default(),
                map: Map::new(first_servers(&db, servers)?),
            },
        };
        let (published, rx) = watch::channel(state.map.clone());
        let machine = Machine {
            db,
            state,
            published,
            built: Arc::new(AtomicU64::new(0)),
            covered: covered.clone(),
        };
        Ok((machine, rx, covered))
    }

    /// Publishes the current map.
    fn publish(&self) {
        let map = self.state.map.clone();
        self.published.send_if_modified(|old| {
            // Versions only grow: a member never goes back to an older map.
            debug_assert!(
                old.version <= map.version,
                "{} > {}",
                old.version,
                map.version
            );
            if *old == map {
                return false;
            }
            *old = map;
            true
        });
    }
}

/// Reads a serialized [`SmState`] and checks it.
fn decode_state(data: &[u8]) -> Result<SmState, AnyError> {
    let state: SmState = serde_json::from_slice(data).any()?;
    state.map.check().any()?;
    Ok(state)
}

/// Stores `snapshot` durably unless the stored one is newer (a build that raced an
/// install): the stored snapshot only moves forward, and it is what restarts start from.
fn store(db: &Database, snapshot: &Stored) -> Result<(), AnyError> {
    let txn = db.begin_write().any()?;
    {
        let mut meta = txn.open_table(META).any()?;
        let newer = match meta.get(SNAPSHOT).any()? {
            Some(v) => {
                let old: Stored = serde_json::from_slice(v.value()).any()?;
                old.meta.last_log_id > snapshot.meta.last_log_id
            }
            None => false,
        };
        if newer {
            return Ok(());
        }
        meta.insert(SNAPSHOT, encode(snapshot)?.as_slice()).any()?;
    }
    txn.commit().any()
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let last = self.state.last_applied;
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: self.state.membership.clone(),
            snapshot_id: match last {
                Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, self.seq),
                None => format!("none-{}", self.seq),
            },
        };
        let subject = ErrorSubject::Snapshot(Some(meta.signature()));
        let stored = Stored {
            meta: meta.clone(),
            data: encode(&self.state)
                .map_err(|e| super::io(subject.clone(), ErrorVerb::Write, e))?,
        };
        let db = self.db.clone();
        // Durable before openraft hears of it: it may purge the log up to it next.
        let data = blocking(subject, ErrorVerb::Write, move || {
            store(&db, &stored)?;
            Ok(stored.data)
        })
        .await?;
        cover(&self.covered, last);
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for Machine {
    type SnapshotBuilder = Builder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, EmptyNode>), StorageError<NodeId>>
    {
        Ok((self.state.last_applied, self.state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut answers = Vec::new();
        for entry in entries {
            debug_assert!(
                self.state.last_applied < Some(entry.log_id),
                "applied in order"
            );
            self.state.last_applied = Some(entry.log_id);
            let applied = match entry.payload {
                EntryPayload::Blank => Applied::Unchanged,
                EntryPayload::Normal(cmd) => self.state.map.apply(&cmd, entry.log_id.index),
                EntryPayload::Membership(m) => {
                    self.state.membership = StoredMembership::new(Some(entry.log_id), m);
                    Applied::Unchanged
                }
            };
            answers.push(Response {
                applied,
                map: self.state.map.clone(),
            });
        }
        self.publish();
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // A copy of the state now: applies after this do not leak into the snapshot, which
        // must be exactly the state at its `last_log_id`.
        Builder {
            db: self.db.clone(),
            state: self.state.clone(),
            seq: self.built.fetch_add(1, Ordering::Relaxed),
            covered: self.covered.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, EmptyNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let subject = ErrorSubject::Snapshot(Some(meta.signature()));
        let data = snapshot.into_inner();
        let state =
            decode_state(&data).map_err(|e| super::io(subject.clone(), ErrorVerb::Read, e))?;
        if state.last_applied != meta.last_log_id {
            let e = AnyError::error(format!(
                "snapshot data at {:?} described as at {:?}",
                state.last_applied, meta.last_log_id
            ));
            return Err(super::io(subject, ErrorVerb::Read, e));
        }
        // openraft installs only snapshots past what this member applied, so the map can
        // only move forward (the publish below asserts it).
        let stored = Stored {
            meta: meta.clone(),
            data,
        };
        let db = self.db.clone();
        blocking(subject, ErrorVerb::Write, move || store(&db, &stored)).await?;
        cover(&self.covered, meta.last_log_id);
        self.state = state;
        self.publish();
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let db = self.db.clone();
        let stored: Option<Stored> =
            blocking(ErrorSubject::Snapshot(None), ErrorVerb::Read, move || {
                get_meta(&db, SNAPSHOT)
            })
            .await?;
        Ok(stored.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
