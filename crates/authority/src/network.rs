//! openraft's network over the server's [`Wire`]: each raft RPC is one [`Request`] frame.

use crate::raft::TypeConfig;
use crate::wire::{Reply, Request, Wire, WireError};
use crate::NodeId;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{EmptyNode, RPCTypes};
use std::sync::Arc;

/// Makes a [`Peer`] for every member raft talks to.
pub(crate) struct Network {
    /// This member.
    pub me: NodeId,
    /// The server's connections.
    pub wire: Arc<dyn Wire>,
}

/// Raft's client to one other member.
pub(crate) struct Peer {
    me: NodeId,
    to: NodeId,
    wire: Arc<dyn Wire>,
}

/// An RPC's error as openraft wants it.
type RpcError<E> = RPCError<NodeId, EmptyNode, E>;

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, _node: &EmptyNode) -> Peer {
        // No connection is made here: the server's peer connections exist already (and
        // are re-made by the server); each call goes through them.
        Peer {
            me: self.me,
            to: target,
            wire: self.wire.clone(),
        }
    }
}

impl Peer {
    /// Sends `req` and reads the answer, within `option`'s time.
    async fn call<E: std::error::Error>(
        &self,
        req: Request,
        option: &RPCOption,
        action: RPCTypes,
    ) -> Result<Reply, RpcError<E>> {
        let body = req
            .encode()
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let ttl = option.hard_ttl();
        let answer = self
            .wire
            .call(self.to, body, ttl)
            .await
            .map_err(|e| match e {
                // Unreachable makes openraft back off before it tries this member again;
                // a timeout or a garbled answer makes it retry at once.
                WireError::Unreachable(_) => RPCError::Unreachable(Unreachable::new(&e)),
                WireError::Timeout => RPCError::Timeout(Timeout {
                    action,
                    id: self.me,
                    target: self.to,
                    timeout: ttl,
                }),
            })?;
        match Reply::decode(&answer).map_err(|e| RPCError::Network(NetworkError::new(&e)))? {
            // A member that takes no part now (its log went with its storage, and it
            // is not back yet: `crate::rejoin`) is as good as unreachable: back off.
            Reply::Failed(why) => {
                let e = std::io::Error::other(format!("member {} failed: {why}", self.to));
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
            reply => Ok(reply),
        }
    }

    /// The error for an answer of the wrong kind.
    fn unexpected<E: std::error::Error>(&self, reply: Reply) -> RpcError<E> {
        let e = std::io::Error::other(format!("member {} answered {reply:?}", self.to));
        RPCError::Network(NetworkError::new(&e))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcError<RaftError<NodeId>>> {
        match self
            .call(Request::Append(rpc), &option, RPCTypes::AppendEntries)
            .await?
        {
            Reply::Append(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e))),
            other => Err(self.unexpected(other)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcError<RaftError<NodeId, InstallSnapshotError>>>
    {
        match self
            .call(Request::Snapshot(rpc), &option, RPCTypes::InstallSnapshot)
            .await?
        {
            Reply::Snapshot(r) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
            }
            other => Err(self.unexpected(other)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcError<RaftError<NodeId>>> {
        match self
            .call(Request::Vote(rpc), &option, RPCTypes::Vote)
            .await?
        {
            Reply::Vote(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e))),
            other => Err(self.unexpected(other)),
        }
    }
}
