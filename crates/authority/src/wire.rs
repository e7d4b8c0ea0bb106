//! The seam to the network, and the messages that travel through it.
//!
//! The authority has no sockets of its own: its messages ride the servers' authenticated
//! peer connections (request kind `Authority`, docs/replication.md). The server
//! implements [`Wire`] over them and hands every frame that arrives to
//! [`crate::Authority::handle`]; what `handle` returns is the answer [`Wire::call`]
//! returns at the sender. A frame is the JSON of a [`Request`], an answer the JSON of a
//! [`Reply`].

use crate::map::{Applied, Command, Map};
use crate::raft::TypeConfig;
use crate::{Error, NodeId};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// How an authority member reaches another: the server implements it over its peer connections.
pub trait Wire: Send + Sync + 'static {
    /// Sends `body` to member `to` and returns its answer (the bytes `Authority::handle` produced there), within `deadline`.
    fn call(
        &self,
        to: NodeId,
        body: Vec<u8>,
        deadline: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, WireError>> + Send>>;
}

/// Why a [`Wire::call`] got no answer.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// No connection to the member (it is down, or the network is cut).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// No answer within the deadline.
    #[error("timed out")]
    Timeout,
}

/// A frame to an authority member.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) enum Request {
    /// Raft: the leader's log entries (or heartbeat).
    Append(AppendEntriesRequest<TypeConfig>),
    /// Raft: a candidate asks for a vote.
    Vote(VoteRequest<NodeId>),
    /// Raft: a chunk of a snapshot for a follower too far behind.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A server renews its lease (answered by the leader only).
    Renew {
        /// The server.
        server: NodeId,
        /// Its incarnation.
        incarnation: u64,
        /// The id of its storage directory.
        storage: u64,
    },
    /// A server proposes a command about itself (answered by the leader only).
    Propose(Command),
    /// Asks for the member's newest map.
    GetMap,
    /// A member whose log went with its storage asks the leader to take it back
    /// (`crate::rejoin`; answered by the leader only).
    Rejoin {
        /// The member.
        member: NodeId,
    },
}

/// The answer to a [`Request`].
#[derive(Serialize, Deserialize, Debug)]
pub(crate) enum Reply {
    /// To [`Request::Append`].
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// To [`Request::Vote`].
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// To [`Request::Snapshot`].
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    /// The renewal is committed: the lease is granted. The map as the renewal left it.
    Granted {
        /// The map right after the renewal.
        map: Map,
    },
    /// The renewal is committed but refused (the server is retired or unknown).
    Refused {
        /// The map right after the renewal.
        map: Map,
    },
    /// The proposal is committed; what it did and the map it left.
    Proposed {
        /// What the command did.
        applied: Applied,
        /// The map right after it.
        map: Map,
    },
    /// To [`Request::GetMap`].
    Map(Map),
    /// This member does not lead; `hint` is who does, if it knows.
    NotLeader {
        /// The leader as far as this member knows.
        hint: Option<NodeId>,
    },
    /// The request may not be made (a command only the leader proposes).
    Rejected(String),
    /// To [`Request::Rejoin`]: the member is a learner now, catching up; ask again.
    Learning,
    /// To [`Request::Rejoin`]: the member holds the leader's log and votes again.
    Rejoined,
    /// The member could not answer (shut down, raft failed, a malformed frame, no commit in time).
    Failed(String),
}

impl Request {
    /// The frame's bytes.
    pub(crate) fn encode(&self) -> Result<Vec<u8>, Error> {
        serde_json::to_vec(self).map_err(|e| Error::Decode(format!("encode a request: {e}")))
    }

    /// Reads a frame.
    pub(crate) fn decode(b: &[u8]) -> Result<Request, Error> {
        serde_json::from_slice(b).map_err(|e| Error::Decode(format!("a request: {e}")))
    }
}

impl Reply {
    /// The answer's bytes; an answer that cannot be encoded becomes a `Failed` saying why.
    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|e| {
            let failed = Reply::Failed(format!("cannot encode the answer: {e}"));
            // A `Failed` is a string: it always encodes.
            serde_json::to_vec(&failed).unwrap_or_default()
        })
    }

    /// Reads an answer.
    pub(crate) fn decode(b: &[u8]) -> Result<Reply, Error> {
        serde_json::from_slice(b).map_err(|e| Error::Decode(format!("a reply: {e}")))
    }
}
