//! [`Renewer`]: a server's side of its lease, and its other requests to the authority.
//!
//! Only the raft leader commits renewals, and any member may be asked: a member that
//! does not lead answers `NotLeader` with the leader it knows of, which is asked next.
//! The member that answered last is asked first the next time.

use crate::map::{Applied, Command, Map};
use crate::wire::{Reply, Request, Wire};
use crate::{Error, NodeId, Params};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Taken off every lease at the server: covers the server's clock running slower than the
/// leader's during one lease.
pub const MARGIN: Duration = Duration::from_millis(100);
/// The pause between two rounds through all members when none could answer.
const ROUND_PAUSE: Duration = Duration::from_millis(50);
/// No member is believed to lead.
const NO_GUESS: u64 = u64::MAX;

/// A server's side of its lease: renews through any member, finding the leader.
pub struct Renewer {
    me: NodeId,
    incarnation: u64,
    /// The id of the server's storage directory (0: none sent).
    storage: u64,
    members: Vec<NodeId>,
    wire: Arc<dyn Wire>,
    params: Params,
    /// The member believed to lead ([`NO_GUESS`]: none).
    guess: AtomicU64,
}

impl Renewer {
    /// A renewer for server `me` in incarnation `incarnation`, whose storage
    /// directory has id `storage`, asking `members` (the authority's node ids)
    /// through `wire`.
    pub fn new(
        me: NodeId,
        incarnation: u64,
        storage: u64,
        members: Vec<NodeId>,
        wire: Arc<dyn Wire>,
        params: Params,
    ) -> Renewer {
        debug_assert!(params.check().is_ok(), "{params:?}");
        let guess = members.first().copied().unwrap_or(NO_GUESS);
        Renewer {
            me,
            incarnation,
            storage,
            members,
            wire,
            params,
            guess: AtomicU64::new(guess),
        }
    }

    /// The timings and servers it was made with.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// One renewal: sends Renew to the member believed to lead (following NotLeader hints, trying the others in turn), returns the granted lease's expiry counted from the moment it SENT the request: `sent + lease - MARGIN` (a `tokio::time::Instant`), and the map; Err if refused or no member answered within `lease / 2`.
    pub async fn renew(&self) -> Result<(Instant, Map), Error> {
        // Counted from before the first try: whichever try was granted was sent after
        // this, so the expiry is never later than the leader's (which counts from its
        // commit, later still).
        let sent = Instant::now();
        let budget = self.params.lease / 2;
        let req = Request::Renew {
            server: self.me,
            incarnation: self.incarnation,
            storage: self.storage,
        };
        match self.through_leader(&req, sent + budget).await? {
            Some(Reply::Granted { map }) => {
                let until = sent + self.params.lease.saturating_sub(MARGIN);
                Ok((until, checked(map)?))
            }
            Some(Reply::Refused { .. }) => Err(Error::Refused),
            Some(other) => Err(Error::Decode(format!("a renewal answered {other:?}"))),
            None => Err(Error::NoAnswer(budget)),
        }
    }

    /// Proposes a command for this server (CaughtUp, Drain...) through the leader; the
    /// map right after it (the command may have found its condition false: the map says).
    pub async fn propose(&self, cmd: Command) -> Result<Map, Error> {
        let budget = self.params.lease;
        let req = Request::Propose(cmd);
        match self.through_leader(&req, Instant::now() + budget).await? {
            Some(Reply::Proposed { applied, map }) => {
                debug_assert!(matches!(applied, Applied::Changed | Applied::Unchanged));
                checked(map)
            }
            Some(Reply::Rejected(why)) => Err(Error::Rejected(why)),
            Some(other) => Err(Error::Decode(format!("a proposal answered {other:?}"))),
            None => Err(Error::NoAnswer(budget)),
        }
    }

    /// Asks the leader to take this member back after its log went with its storage
    /// (`crate::rejoin`): `Learning` or `Rejoined`.
    pub(crate) async fn rejoin(&self) -> Result<Reply, Error> {
        let budget = self.params.lease * 4;
        let req = Request::Rejoin { member: self.me };
        match self.through_leader(&req, Instant::now() + budget).await? {
            Some(r @ (Reply::Learning | Reply::Rejoined)) => Ok(r),
            Some(Reply::Rejected(why)) => Err(Error::Rejected(why)),
            Some(other) => Err(Error::Decode(format!("a rejoin answered {other:?}"))),
            None => Err(Error::NoAnswer(budget)),
        }
    }

    /// Asks any member for its newest map.
    pub async fn fetch_map(&self) -> Result<Map, Error> {
        let budget = self.params.lease / 2;
        let deadline = Instant::now() + budget;
        let body = Request::GetMap.encode()?;
        loop {
            for to in self.order() {
                let Some(left) = left_until(deadline) else {
                    return Err(Error::NoAnswer(budget));
                };
                let per_call = left.min(self.per_call());
                if let Ok(bytes) = self.wire.call(to, body.clone(), per_call).await {
                    if let Ok(Reply::Map(map)) = Reply::decode(&bytes) {
                        return checked(map);
                    }
                }
            }
            pause_until(deadline).await;
        }
    }

    /// How long one call may take: a member that does not answer must leave time to ask
    /// the others within the budget.
    fn per_call(&self) -> Duration {
        self.params.lease / 4
    }

    /// The members in the order to ask them: the believed leader first.
    fn order(&self) -> VecDeque<NodeId> {
        let guess = self.guess.load(Ordering::Relaxed);
        let mut order: VecDeque<NodeId> = self
            .members
            .iter()
            .copied()
            .filter(|&m| m != guess)
            .collect();
        if self.members.contains(&guess) {
            order.push_front(guess);
        }
        order
    }

    /// `to` did not answer: if it was believed to lead, the next member is believed to,
    /// so that the next request does not wait for it first.
    fn passed_over(&self, to: NodeId) {
        let at = self.members.iter().position(|&m| m == to);
        let Some(next) = at.map(|i| self.members[(i + 1) % self.members.len()]) else {
            return;
        };
        let _ = self
            .guess
            .compare_exchange(to, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Sends `req` to the leader (found by asking members and following their hints)
    /// until one answers other than `NotLeader` (its answer) or `deadline` passes (`None`).
    async fn through_leader(
        &self,
        req: &Request,
        deadline: Instant,
    ) -> Result<Option<Reply>, Error> {
        let body = req.encode()?;
        loop {
            let mut todo = self.order();
            let mut asked = Vec::new();
            while let Some(to) = todo.pop_front() {
                let Some(left) = left_until(deadline) else {
                    return Ok(None);
                };
                asked.push(to);
                let per_call = left.min(self.per_call());
                let reply = match self.wire.call(to, body.clone(), per_call).await {
                    Ok(bytes) => Reply::decode(&bytes),
                    Err(e) => {
                        tracing::debug!(to, %e, "authority: no answer");
                        self.passed_over(to);
                        continue;
                    }
                };
                match reply {
                    Ok(Reply::NotLeader { hint }) => {
                        // Ask the one it names next, unless it was asked in this round
                        // already (a stale hint would send us in circles).
                        if let Some(h) =
                            hint.filter(|h| !asked.contains(h) && self.members.contains(h))
                        {
                            todo.retain(|&m| m != h);
                            todo.push_front(h);
                            self.guess.store(h, Ordering::Relaxed);
                        }
                    }
                    // The member could not answer now (no commit in time, shutting down).
                    Ok(Reply::Failed(why)) => {
                        tracing::debug!(to, why, "authority: failed");
                        self.passed_over(to);
                    }
                    Ok(other) => {
                        self.guess.store(to, Ordering::Relaxed);
                        return Ok(Some(other));
                    }
                    Err(e) => tracing::debug!(to, %e, "authority: garbled answer"),
                }
            }
            // Nobody leads right now (an election): wait a little and ask around again.
            pause_until(deadline).await;
        }
    }
}

/// The time left until `deadline`, if any.
fn left_until(deadline: Instant) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    (!left.is_zero()).then_some(left)
}

/// Sleeps [`ROUND_PAUSE`], or until `deadline` if that comes first.
async fn pause_until(deadline: Instant) {
    tokio::time::sleep_until(deadline.min(Instant::now() + ROUND_PAUSE)).await;
}

/// A map from the network, checked.
fn checked(map: Map) -> Result<Map, Error> {
    map.check()?;
    Ok(map)
}
