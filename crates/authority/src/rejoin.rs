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

use crate::authority::Authority;
use crate::map::Map;
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

    fn set(&self, s: Standing) {
        self.0.store(s as u8, Ordering::Release);
    }
}

/// Whether a member's map holds anything: a version past the first, or a server seen.
fn formed(map: &Map) -> bool {
    map.version > 0 || map.servers.iter().any(|s| s.incarnation != 0)
}

/// Decides the part of member `me`, started with an empty store on the storage
/// directory with id `disk`, and, when its log went with an old disk, asks the
/// leader until it votes again.
pub(crate) async fn run(
    authority: Authority,
    members: BTreeSet<NodeId>,
    disk: u64,
    wire: Arc<dyn Wire>,
    params: Params,
) {
    let me = authority.id();
    let Some(forgot) = decide(&authority, &members, disk, &wire, params).await else {
        return;
    };
    tracing::warn!(
        me,
        renewed_with_disk = forgot,
        "authority: this member's log went with its storage; it takes no part until the \
         leader takes it back"
    );
    let renewer = Renewer::new(me, 0, 0, members.iter().copied().collect(), wire, params);
    loop {
        match renewer.rejoin().await {
            Ok(Reply::Learning) => {
                if authority.standing().get() != Standing::Learning {
                    tracing::info!(me, "authority: a learner, taking the leader's log");
                }
                authority.standing().set(Standing::Learning);
            }
            Ok(Reply::Rejoined) => {
                authority.standing().set(Standing::Voting);
                tracing::info!(me, "authority: holds the leader's log, votes again");
                return;
            }
            Ok(other) => tracing::debug!(me, ?other, "authority: rejoin answered"),
            Err(e) => tracing::debug!(me, %e, "authority: rejoin not answered"),
        }
        tokio::time::sleep(params.lease / 2).await;
    }
}

/// Asks the other members until it knows: None when this member may vote (the
/// lowest forms a new authority first), else the id of the disk the server renewed
/// with before this one.
async fn decide(
    authority: &Authority,
    members: &BTreeSet<NodeId>,
    disk: u64,
    wire: &Arc<dyn Wire>,
    params: Params,
) -> Option<u64> {
    let me = authority.id();
    let Ok(body) = Request::GetMap.encode() else {
        return None;
    };
    loop {
        let mut empty = 1; // this member's own
        for &m in members.iter().filter(|&&m| m != me) {
            let Ok(bytes) = wire.call(m, body.clone(), params.lease / 4).await else {
                continue;
            };
            let Ok(Reply::Map(map)) = Reply::decode(&bytes) else {
                continue;
            };
            if !formed(&map) {
                empty += 1;
                continue;
            }
            let before = map.server(me).map_or(0, |e| e.storage);
            if before != 0 && before != disk {
                return Some(before);
            }
            // Formed while this member was away from the start: nothing forgotten.
            authority.standing().set(Standing::Voting);
            return None;
        }
        if empty * 2 > members.len() {
            if members.first() == Some(&me) {
                match authority.raft().initialize(members.clone()).await {
                    Ok(()) => tracing::info!(me, ?members, "authority: initialized"),
                    Err(RaftError::APIError(e)) => {
                        tracing::info!(me, %e, "authority: already formed")
                    }
                    Err(e) => tracing::error!(me, %e, "authority: cannot initialize"),
                }
            }
            authority.standing().set(Standing::Voting);
            return None;
        }
        tokio::time::sleep(ASK_EVERY).await;
    }
}

impl Authority {
    /// The leader's answer to member `member`'s `Rejoin`: a voter is made a learner
    /// (committed by the others; this member remembers it took `member` back, so a
    /// repeated ask after that is answered again); a learner whose log reached the
    /// leader's is made a voter again.
    pub(crate) async fn readmit(&self, member: NodeId) -> Reply {
        let raft = self.raft();
        let metrics = raft.metrics().borrow().clone();
        if metrics.current_leader != Some(self.id()) {
            return Reply::NotLeader {
                hint: metrics.current_leader,
            };
        }
        let members = self.members();
        if !members.contains(&member) || member == self.id() {
            return Reply::Rejected(format!("{member} is not another member"));
        }
        let voters: BTreeSet<NodeId> = metrics.membership_config.membership().voter_ids().collect();
        let taken_back = self.taken_back().contains(&member);
        let patience = self.params().lease * 4;
        if voters.contains(&member) {
            if taken_back {
                return Reply::Rejoined;
            }
            let without: BTreeSet<NodeId> =
                voters.iter().copied().filter(|&v| v != member).collect();
            return match tokio::time::timeout(patience, raft.change_membership(without, true)).await
            {
                Ok(Ok(_)) => {
                    tracing::info!(
                        member,
                        "authority: a member whose log was lost is a learner"
                    );
                    Reply::Learning
                }
                Ok(Err(e)) => Reply::Failed(e.to_string()),
                Err(_) => Reply::Failed("the change of members was not committed in time".into()),
            };
        }
        let matched = metrics
            .replication
            .as_ref()
            .and_then(|r| r.get(&member).copied().flatten())
            .map(|l| l.index);
        let last = metrics.last_log_index;
        if matched.is_none() || matched < last {
            return Reply::Learning;
        }
        match tokio::time::timeout(patience, raft.change_membership(members, true)).await {
            Ok(Ok(_)) => {
                self.taken_back().insert(member);
                tracing::info!(member, "authority: a member holds the log again and votes");
                Reply::Rejoined
            }
            Ok(Err(e)) => Reply::Failed(e.to_string()),
            Err(_) => Reply::Failed("the change of members was not committed in time".into()),
        }
    }
}
