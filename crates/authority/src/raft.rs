//! openraft's types and configuration for the authority.

use crate::map::{Applied, Command, Map};
use crate::{Error, NodeId};
use serde::{Deserialize, Serialize};
use std::io::Cursor;
use std::time::Duration;

openraft::declare_raft_types!(
    /// openraft's type parameters: commands are [`Command`]s, members are known by their
    /// server index alone (the server's [`crate::Wire`] knows how to reach them).
    pub TypeConfig:
        D = Command,
        R = Response,
        NodeId = NodeId,
        Node = openraft::EmptyNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// What applying one log entry answers its proposer: what it did, and the map right after it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// What the command did (`Unchanged` for raft's own entries).
    pub applied: Applied,
    /// The map as this entry left it.
    pub map: Map,
}

/// How often the leader sends heartbeats.
pub const HEARTBEAT: Duration = Duration::from_millis(100);
/// The shortest time a follower waits without hearing a leader before it stands for election.
///
/// openraft 0.9 also has a follower wait out a leader lease of [`ELECTION_MAX`] before
/// it votes, so a new leader comes `ELECTION_MAX + [ELECTION_MIN, ELECTION_MAX]` after
/// the old one died: 0.6-1.2 s with these values. Live servers renew every quarter
/// lease, so with the default 2 s lease a renewal has at least 1.4 s (2 s, less the
/// quarter lease since the last one and the margin) to reach the new leader: an
/// election does not make live leases lapse, and a dead leader's own server is marked
/// down within 1.2 s + a lease (docs/replication.md, "The 5 s pause").
pub const ELECTION_MIN: Duration = Duration::from_millis(300);
/// The longest such wait (each follower picks one in between at random).
pub const ELECTION_MAX: Duration = Duration::from_millis(600);
/// A snapshot is built after this many log entries since the last one; the log before it is
/// then purged.
pub const SNAPSHOT_EVERY: u64 = 500;
/// Entries kept behind a snapshot: a follower this close behind catches up from the log,
/// not with a whole snapshot.
pub const KEEP_BEHIND_SNAPSHOT: u64 = 50;
/// How long one snapshot transfer (and its install at the follower) may take.
const INSTALL_SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(2);
/// The most snapshot bytes in one `InstallSnapshot` frame: its JSON (bytes as decimal
/// numbers, up to 4 characters each) stays far below the peer protocol's 4 MiB body.
pub const SNAPSHOT_CHUNK: u64 = 128 << 10;

/// The openraft configuration every member runs with.
pub(crate) fn config() -> Result<openraft::Config, Error> {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let (mut min, mut max) = (ms(ELECTION_MIN), ms(ELECTION_MAX));
    // openraft draws a member's election timeout once, at its start, from the
    // thread's own random numbers. A simulation draws it here from its seeded ones
    // (`pvfs_proto::clock`), alike between the bounds, and leaves openraft one value
    // to pick, so that its run follows from its seed (openraft then also takes that
    // value for its leader lease, not the longest one).
    if pvfs_proto::clock::simulated() {
        min += pvfs_proto::clock::random_u64() % (max - min);
        max = min + 1;
    }
    let config = openraft::Config {
        cluster_name: "pvfs-authority".into(),
        heartbeat_interval: ms(HEARTBEAT),
        election_timeout_min: min,
        election_timeout_max: max,
        install_snapshot_timeout: ms(INSTALL_SNAPSHOT_TIMEOUT),
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY),
        max_in_snapshot_log_to_keep: KEEP_BEHIND_SNAPSHOT,
        snapshot_max_chunk_size: SNAPSHOT_CHUNK,
        ..Default::default()
    };
    config
        .validate()
        .map_err(|e| Error::Params(format!("raft configuration: {e}")))
}
