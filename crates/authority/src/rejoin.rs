//! A member whose log went with its storage (`docs/replication.md`, "A new disk on a
//! member of the authority"). Raft counts on every member remembering what it voted
//! and what entries it acknowledged; a member that forgot could vote twice in a term
//! or make a committed entry a minority's. So a member that starts with an empty store
//! first asks the others what they hold:
//!
//! - a majority of members (itself among them) with empty maps: the file system is
//!   new, and the lowest member forms the authority;
//! - another member's map that has seen the server renew with another storage
//!   directory than this one: the log went with the old disk. The member takes no
//!   part (it answers no raft message) and asks the leader to take it back; the
//!   leader makes it a learner, a change the other members commit without it, and
//!   once its log reaches the leader's, makes it a voter again;
//! - otherwise (the authority formed while this member was not there yet): it joins.
//!
//! Until a member votes again, it grants no vote, so the authority goes on with the
//! others' majority and never counts a vote or an entry the member forgot.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::RaftError;
use openraft::Raft;

use crate::map::Map;
use crate::raft::TypeConfig;
use crate::renew::Renewer;
use crate::wire::{Reply, Request, Wire};
use crate::{NodeId, Params};

/// How often an undecided member asks the others again.
const ASK_EVERY: Duration = Duration::from_millis(200);

/// What part a member takes in raft.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Standing {
    /// Every part: it remembers what it voted and acknowledged.
    Voting = 0,
    /// None: its store is empty, and it does not know yet whether it forgot anything
    /// (or knows it did, and the leader has not made it a learner yet).
    Silent = 1,
    /// A learner taking the leader's log: it takes entries, and grants no vote.
    Learning = 2,
}

/// A member's standing, shared by its answers and the task that changes it.
#[derive(Debug)]
pub(crate) struct StandingCell(AtomicU8);

impl StandingCell {
    pub(crate) fn new(s: Standing) -> StandingCell {
        StandingCell(AtomicU8::new(s as u8))
    }

    pub(crate) fn get(&self) -> Standing {
        match self.0.load(Ordering::Acquire) {
            0 => Standing::Voting,
            2 => Standing::Learning,
            _ => Standing::Silent,
        }
    }

    pub(crate) fn set(&self, s: Standing) {
        self.0.store(s as u8, Ordering::Release);
    }
}

/// Whether a member's map holds anything: a version past the first, or a server seen.
fn formed(map: &Map) -> bool {
    map.version > 0 || map.servers.iter().any(|s| s.incarnation != 0)
}

/// What a member that started with an empty store decides its part with.
pub(crate) struct Empty {
    /// This member.
    pub me: NodeId,
    /// Its raft.
    pub raft: Raft<TypeConfig>,
    /// Its part, which its answers follow.
    pub standing: Arc<StandingCell>,
    /// The authority's members.
    pub members: BTreeSet<NodeId>,
    /// The id of its storage directory.
    pub disk: u64,
    /// How to reach the others.
    pub wire: Arc<dyn Wire>,
    /// The lease and rebuild times.
    pub params: Params,
}

/// Decides the part of a member that started with an empty store, and, when its log
/// went with an old disk, asks the leader until it votes again.
pub(crate) async fn run(e: Empty) {
    let Some(forgot) = decide(&e).await else {
        return;
    };
    let (me, standing) = (e.me, &e.standing);
    tracing::warn!(
        me,
        renewed_with_disk = forgot,
        "authority: this member's log went with its storage; it takes no part until the \
         leader takes it back"
    );
    let members = e.members.iter().copied().collect();
    let renewer = Renewer::new(me, 0, 0, members, e.wire.clone(), e.params.clone());
    loop {
        match renewer.rejoin().await {
            Ok(Reply::Learning) => {
                if standing.get() != Standing::Learning {
                    tracing::info!(me, "authority: a learner, taking the leader's log");
                }
                standing.set(Standing::Learning);
            }
            Ok(Reply::Rejoined) => {
                standing.set(Standing::Voting);
                tracing::info!(me, "authority: holds the leader's log, votes again");
                return;
            }
            Ok(other) => tracing::debug!(me, ?other, "authority: rejoin answered"),
            Err(err) => tracing::debug!(me, %err, "authority: rejoin not answered"),
        }
        tokio::time::sleep(e.params.lease / 2).await;
    }
}

/// Asks the other members until it knows: None when this member may vote (the
/// lowest forms a new authority first), else the id of the disk the server renewed
/// with before this one.
async fn decide(e: &Empty) -> Option<u64> {
    let me = e.me;
    let Ok(body) = Request::GetMap.encode() else {
        return None;
    };
    loop {
        let mut empty = 1; // this member's own
        for &m in e.members.iter().filter(|&&m| m != me) {
            let Ok(bytes) = e.wire.call(m, body.clone(), e.params.lease / 4).await else {
                continue;
            };
            let Ok(Reply::Map(map)) = Reply::decode(&bytes) else {
                continue;
            };
            if !formed(&map) {
                empty += 1;
                continue;
            }
            let before = map.server(me).map_or(0, |s| s.storage);
            if before != 0 && before != e.disk {
                return Some(before);
            }
            // Formed while this member was away from the start: nothing forgotten.
            e.standing.set(Standing::Voting);
            return None;
        }
        if empty * 2 > e.members.len() {
            if e.members.first() == Some(&me) {
                match e.raft.initialize(e.members.clone()).await {
                    Ok(()) => tracing::info!(me, members = ?e.members, "authority: initialized"),
                    Err(RaftError::APIError(err)) => {
                        tracing::info!(me, %err, "authority: already formed")
                    }
                    Err(err) => tracing::error!(me, %err, "authority: cannot initialize"),
                }
            }
            e.standing.set(Standing::Voting);
            return None;
        }
        tokio::time::sleep(ASK_EVERY).await;
    }
}

/// What a leader takes a member back with.
pub(crate) struct Leader<'a> {
    /// The leading member.
    pub me: NodeId,
    /// Its raft.
    pub raft: &'a Raft<TypeConfig>,
    /// The authority's members.
    pub members: &'a BTreeSet<NodeId>,
    /// The members this one took back.
    pub taken_back: &'a std::sync::Mutex<BTreeSet<NodeId>>,
    /// The lease and rebuild times.
    pub params: Params,
}

impl Leader<'_> {
    fn taken_back(&self) -> std::sync::MutexGuard<'_, BTreeSet<NodeId>> {
        self.taken_back
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The leader's answer to member `member`'s `Rejoin`: a voter is made a learner
    /// (committed by the others; this member remembers it took `member` back, so a
    /// repeated ask after that is answered again); a learner whose log reached the
    /// leader's is made a voter again.
    pub(crate) async fn readmit(&self, member: NodeId) -> Reply {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.current_leader != Some(self.me) {
            return Reply::NotLeader {
                hint: metrics.current_leader,
            };
        }
        if !self.members.contains(&member) || member == self.me {
            return Reply::Rejected(format!("{member} is not another member"));
        }
        let voters: BTreeSet<NodeId> = metrics.membership_config.membership().voter_ids().collect();
        let patience = self.params.lease * 4;
        if voters.contains(&member) {
            if self.taken_back().contains(&member) {
                return Reply::Rejoined;
            }
            let without: BTreeSet<NodeId> =
                voters.iter().copied().filter(|&v| v != member).collect();
            return match tokio::time::timeout(patience, self.raft.change_membership(without, true))
                .await
            {
                Ok(Ok(_)) => {
                    tracing::info!(
                        member,
                        "authority: a member whose log was lost is a learner"
                    );
                    Reply::Learning
                }
                Ok(Err(err)) => Reply::Failed(err.to_string()),
                Err(_) => Reply::Failed("the change of members was not committed in time".into()),
            };
        }
        let matched = metrics
            .replication
            .as_ref()
            .and_then(|r| r.get(&member).copied().flatten())
            .map(|l| l.index);
        if matched.is_none() || matched < metrics.last_log_index {
            return Reply::Learning;
        }
        match tokio::time::timeout(
            patience,
            self.raft.change_membership(self.members.clone(), true),
        )
        .await
        {
            Ok(Ok(_)) => {
                self.taken_back().insert(member);
                tracing::info!(member, "authority: a member holds the log again and votes");
                Reply::Rejoined
            }
            Ok(Err(err)) => Reply::Failed(err.to_string()),
            Err(_) => Reply::Failed("the change of members was not committed in time".into()),
        }
    }
}
