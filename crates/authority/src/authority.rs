//! [`Authority`]: one member of the authority — raft, its store, the lease checker, and
//! the answers to every authority frame the server receives.

use crate::lease::{self, Leases};
use crate::map::{Applied, Command, Map};
use crate::network::Network;
use crate::raft::{self, TypeConfig};
use crate::rejoin::{self, Standing, StandingCell};
use crate::store::{self, LogStore, Machine};
use crate::wire::{Reply, Request, Wire};
use crate::{Error, NodeId, Params};
use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::ClientWriteResponse;
use openraft::Raft;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// How long [`Authority::shutdown`] waits for raft's tasks to let go of the store file.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// One member of the authority. Clones share the member.
#[derive(Clone)]
pub struct Authority {
    inner: Arc<Inner>,
}

struct Inner {
    me: NodeId,
    raft: Raft<TypeConfig>,
    /// The newest map this member applied.
    map: watch::Receiver<Map>,
    leases: Arc<Leases>,
    params: Params,
    /// The lease checker; taken by `shutdown`.
    checker: Mutex<Option<JoinHandle<()>>>,
    /// Completes once the store file is closed (raft's tasks hold it until they end).
    closed: tokio::sync::Mutex<Option<oneshot::Receiver<()>>>,
    /// The authority's members, from the configuration.
    members: BTreeSet<NodeId>,
    /// What part this member takes in raft (`crate::rejoin`).
    standing: Arc<StandingCell>,
    /// The members this one, leading, took back after their logs were lost.
    taken_back: Mutex<BTreeSet<NodeId>>,
    /// The task deciding this member's part, when it started with an empty store.
    rejoin: Mutex<Option<JoinHandle<()>>>,
}

impl Authority {
    /// Starts this member: `members` are the authority's node ids (from the
    /// configuration, the same on every member), `servers` the number of servers in
    /// the map, `disk` the id of the server's storage directory (0: none). A member
    /// with an empty store asks the others what they hold before it takes part
    /// (`crate::rejoin`): the lowest member forms a new authority with `members` as
    /// voters, and a member whose log went with an old disk waits to be taken back.
    pub async fn start(
        me: NodeId,
        members: Vec<NodeId>,
        servers: usize,
        dir: &Path,
        wire: Arc<dyn Wire>,
        params: Params,
        disk: u64,
    ) -> Result<Authority, Error> {
        params.check()?;
        let voters: BTreeSet<NodeId> = members.iter().copied().collect();
        if !voters.contains(&me) {
            return Err(Error::Params(format!(
                "member {me} is not among the authority's members {members:?}"
            )));
        }
        if let Some(m) = voters.iter().find(|&&m| m >= servers as u64) {
            return Err(Error::Params(format!(
                "member {m} is not one of the {servers} servers"
            )));
        }
        let config = Arc::new(raft::config()?);
        let path = dir.join(store::FILE);
        let dir = dir.to_path_buf();
        let open = move || {
            let (db, closed) = store::open(&dir)?;
            let (machine, map, covered) =
                Machine::open(db.clone(), servers).map_err(|what| Error::Store {
                    path: path.display().to_string(),
                    what,
                })?;
            let log = LogStore::new(db, &covered);
            Ok::<_, Error>((log, closed, machine, map))
        };
        // A simulation runs everything on its one thread (`store` says why).
        let (log, closed, machine, map) = if pvfs_proto::clock::simulated() {
            open()?
        } else {
            tokio::task::spawn_blocking(open)
                .await
                .map_err(|e| Error::Store {
                    path: store::FILE.into(),
                    what: e.to_string(),
                })??
        };
        let network = Network {
            me,
            wire: wire.clone(),
        };
        let raft = Raft::new(me, config, network, log, machine)
            .await
            .map_err(|e| Error::Raft(e.to_string()))?;
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| Error::Raft(e.to_string()))?;
        // Only the lowest member forms the cluster, so two members never initialize with
        // different logs; the others start empty and are brought in by its first leader.
        // With others to ask, an empty store first asks them (`crate::rejoin`).
        let alone = voters.len() == 1;
        if !initialized && alone {
            match raft.initialize(voters.clone()).await {
                Ok(()) => tracing::info!(me, ?voters, "authority: initialized"),
                // Someone else's vote or entries arrived meanwhile: formed already.
                Err(RaftError::APIError(e)) => tracing::info!(me, %e, "authority: already formed"),
                Err(e) => return Err(Error::Raft(e.to_string())),
            }
        }
        let leases = Arc::new(Leases::default());
        let checker = tokio::spawn(lease::check(
            me,
            raft.clone(),
            leases.clone(),
            map.clone(),
            params.clone(),
        ));
        let authority = Authority {
            inner: Arc::new(Inner {
                me,
                raft,
                map,
                leases,
                params: params.clone(),
                checker: Mutex::new(Some(checker)),
                closed: tokio::sync::Mutex::new(Some(closed)),
                members: voters.clone(),
                standing: Arc::new(StandingCell::new(if initialized || alone {
                    Standing::Voting
                } else {
                    Standing::Silent
                })),
                taken_back: Mutex::new(BTreeSet::new()),
                rejoin: Mutex::new(None),
            }),
        };
        if authority.standing().get() == Standing::Silent {
            let task = tokio::spawn(rejoin::run(rejoin::Empty {
                me,
                raft: authority.inner.raft.clone(),
                standing: authority.inner.standing.clone(),
                members: voters,
                disk,
                wire,
                params,
            }));
            *authority
                .inner
                .rejoin
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(task);
        }
        Ok(authority)
    }

    /// This member's raft.
    #[cfg(test)]
    pub(crate) fn raft(&self) -> &Raft<TypeConfig> {
        &self.inner.raft
    }

    /// What part this member takes in raft.
    pub(crate) fn standing(&self) -> &StandingCell {
        &self.inner.standing
    }

    /// The members this one took back (`rejoin::Leader::readmit`).
    #[cfg(test)]
    pub(crate) fn taken_back(&self) -> std::sync::MutexGuard<'_, BTreeSet<NodeId>> {
        self.inner
            .taken_back
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers a message another member (or a renewing server, through `Wire`) sent: the server calls this for every incoming authority frame.
    pub async fn handle(&self, body: &[u8]) -> Vec<u8> {
        let reply = match Request::decode(body) {
            Ok(req) => self.answer(req).await,
            Err(e) => Reply::Failed(e.to_string()),
        };
        reply.encode()
    }

    /// This member's answer to `req`.
    async fn answer(&self, req: Request) -> Reply {
        let raft = &self.inner.raft;
        match req {
            // A member that may have forgotten what it voted and acknowledged takes
            // no part; a learner takes entries and grants no vote (`crate::rejoin`).
            Request::Append(_) | Request::Snapshot(_)
                if self.standing().get() == Standing::Silent =>
            {
                Reply::Failed("this member takes no part yet: its log is being restored".into())
            }
            Request::Vote(_) if self.standing().get() != Standing::Voting => {
                Reply::Failed("this member grants no vote yet: its log is being restored".into())
            }
            Request::Append(rpc) => Reply::Append(raft.append_entries(rpc).await),
            Request::Vote(rpc) => Reply::Vote(raft.vote(rpc).await),
            Request::Snapshot(rpc) => Reply::Snapshot(raft.install_snapshot(rpc).await),
            Request::Rejoin { member } => {
                let leader = rejoin::Leader {
                    me: self.inner.me,
                    raft,
                    members: &self.inner.members,
                    taken_back: &self.inner.taken_back,
                    params: self.inner.params.clone(),
                };
                leader.readmit(member).await
            }
            Request::GetMap => Reply::Map(self.map()),
            Request::Renew {
                server,
                incarnation,
                storage,
            } => {
                let cmd = Command::Renew {
                    server,
                    incarnation,
                    storage,
                };
                match self.write(cmd).await {
                    Ok(r) => match r.data.applied {
                        Applied::Granted => {
                            // After the commit returned: the leader's count of this lease
                            // starts no earlier than the commit (lease.rs).
                            self.inner.leases.renewed(server, r.log_id.index);
                            Reply::Granted { map: r.data.map }
                        }
                        _ => Reply::Refused { map: r.data.map },
                    },
                    Err(reply) => reply,
                }
            }
            Request::Propose(cmd) => match cmd {
                // Only the leader's lease table may say a server's lease lapsed: a `Down`
                // from anyone else could take the place of a server that still serves.
                // A renewal has its own request (its lease is recorded).
                Command::Down { .. }
                | Command::Lost { .. }
                | Command::Renew { .. }
                | Command::Grow { .. } => {
                    Reply::Rejected(format!("{cmd:?} is proposed by the authority itself"))
                }
                Command::CaughtUp { .. }
                | Command::Drain { .. }
                | Command::Rebalance { .. }
                | Command::Retire { .. }
                | Command::Evict { .. }
                | Command::Lead { .. }
                | Command::Serve { .. }
                | Command::Yield { .. }
                | Command::Rebuilt { .. } => match self.write(cmd).await {
                    Ok(r) => Reply::Proposed {
                        applied: r.data.applied,
                        map: r.data.map,
                    },
                    Err(reply) => reply,
                },
            },
        }
    }

    /// Commits `cmd` if this member leads; otherwise (or on failure) the reply to send.
    async fn write(&self, cmd: Command) -> Result<ClientWriteResponse<TypeConfig>, Reply> {
        // A leader cut off from the others never commits; an answer after a lease is of
        // no use to anyone (the renewer gave up at half of it).
        let wrote =
            tokio::time::timeout(self.inner.params.lease, self.inner.raft.client_write(cmd));
        match wrote.await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(Reply::NotLeader { hint: f.leader_id })
            }
            Ok(Err(e)) => Err(Reply::Failed(e.to_string())),
            Err(_) => Err(Reply::Failed("not committed in time".into())),
        }
    }

    /// The newest map this member applied.
    pub fn map(&self) -> Map {
        self.inner.map.borrow().clone()
    }

    /// Which member leads, as far as this one knows.
    pub fn leader(&self) -> Option<NodeId> {
        self.inner.raft.metrics().borrow().current_leader
    }

    /// This member's node id.
    pub fn id(&self) -> NodeId {
        self.inner.me
    }

    /// Stops raft (clean shutdown).
    pub async fn shutdown(&self) {
        let rejoin = self
            .inner
            .rejoin
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(r) = rejoin {
            r.abort();
            let _ = r.await;
        }
        let checker = self
            .inner
            .checker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(c) = checker {
            c.abort();
            let _ = c.await;
        }
        if let Err(e) = self.inner.raft.shutdown().await {
            tracing::warn!(%e, "authority: raft did not stop cleanly");
        }
        // raft's state machine worker and replication tasks end after its core and hold
        // the store until then; a start on the same directory right after this returns
        // must find the file closed (redb refuses to open it twice).
        let closed = self.inner.closed.lock().await.take();
        if let Some(closed) = closed {
            if tokio::time::timeout(CLOSE_WAIT, closed).await.is_err() {
                tracing::warn!("authority: the raft store is still open after shutdown");
            }
        }
    }
}
