//! The leader's lease table and the checker that marks silent servers `Down` and `Lost`.
//!
//! Fencing (docs/replication.md, "Leases and fencing") rests on one inequality: the
//! leader proposes `Down` for a server only once `L` has passed since a moment that is
//! *later* than the sending of every renewal the server could still be counting on. A
//! server counts its lease from when it sent the renewal (`sent + L - margin`), so by the
//! time `Down` can commit the server has stopped serving, and nobody takes its place
//! while it still serves.
//!
//! The table keeps, per server, a [`Seen`]: a moment `at` and a log index `index` such
//! that every renewal of that server at a log index `<= index` was sent before `at`. It
//! grows three ways, each keeping that promise:
//! - a renewal this leader committed: `at` = when `client_write` returned (after the
//!   commit, so after the sending), `index` = the renewal's log index;
//! - a renewal the checker finds applied in the map (`renewed`) beyond `index` (committed
//!   by a predecessor, or answered by a `handle` that has not recorded it yet): `at` = now,
//!   which is after the apply, after the commit, after the sending;
//! - the election: a new leader cannot know what its predecessor granted, so every server
//!   gets `at` = the moment this member saw itself lead, `index` = its last log index then
//!   (every entry up to it existed, so was sent, before that moment).
//!
//! - a pause: a leader whose process did not run for a while (`SIGSTOP`, a stalled host)
//!   heard no renewal meanwhile, though servers sent them; like a new leader it counts
//!   every lease again from the moment it runs again (`at` = that moment, which is
//!   later than any sending before it). A heartbeat task beats every [`BEAT_EVERY`];
//!   a beat (or a check) that finds the previous beat older than [`PAUSED_AFTER`]
//!   takes the gap for a pause.
//!
//! `Down` carries `unless_renewed_after: index`: if a renewal beyond `index` is applied
//! before the `Down` (one in flight while the leader decided), the `Down` does nothing.
//!
//! It also names every other server whose lease lapsed by the same count, with its
//! `index` (`lapsed`): such a server served nothing from that moment on unless a
//! renewal of it beyond `index` is granted later, which the map sees. The map keeps
//! that list with the server that went down (`ServerEntry::quiet`), so that a new
//! disk on one of them is known to have lost nothing the other lacks.

use crate::map::{Command, Map, State};
use crate::raft::{TypeConfig, ELECTION_MAX};
use crate::{NodeId, Params};
use openraft::{Raft, ServerState};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

/// How often the leader checks the leases.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);
/// How often the heartbeat task beats while this member runs the checker.
pub const BEAT_EVERY: Duration = Duration::from_millis(50);
/// A gap between beats longer than this is a pause of this process: every lease is
/// counted again from its end. (Only ever later, so a pause detected on a merely busy
/// host postpones a `Down`; it never hastens one.)
pub const PAUSED_AFTER: Duration = Duration::from_millis(250);
/// How long the checker waits for its `Down`s and `Lost`s to commit before it looks again.
const PROPOSE_TIMEOUT: Duration = ELECTION_MAX;

/// What the leader knows of one server's renewals (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    /// Every renewal up to `index` was sent before this moment.
    at: Instant,
    /// The newest renewal's log index the leader accounted for.
    index: u64,
}

impl Seen {
    /// Both promises at once: the later moment covers the larger index too.
    fn merge(&mut self, other: Seen) {
        self.at = self.at.max(other.at);
        self.index = self.index.max(other.index);
    }
}

/// The lease table of one leadership (a term in which this member leads).
#[derive(Default)]
struct Table {
    /// The term it belongs to; `None` while this member does not lead.
    term: Option<u64>,
    /// Per server.
    seen: HashMap<NodeId, Seen>,
    /// When this leader first saw each `Down` server down (or its election).
    down_since: HashMap<NodeId, Instant>,
    /// The last beat of this process ([`Leases::beat`]).
    last_beat: Option<Instant>,
}

/// The leader's lease table, shared by `Authority::handle` (which records renewals) and
/// the checker.
#[derive(Default)]
pub(crate) struct Leases {
    table: Mutex<Table>,
}

impl Leases {
    /// Locks the table; a panic elsewhere cannot leave it inconsistent (each update is one
    /// assignment), so a poisoned lock is taken as is.
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a renewal of `server` committed at log index `index`, answered just now.
    /// Called only after the commit returned: recording later than the commit is safe
    /// (it delays `Down`), recording earlier would not be.
    pub(crate) fn renewed(&self, server: NodeId, index: u64) {
        let now = Instant::now();
        let mut t = self.lock();
        let seen = Seen { at: now, index };
        t.seen
            .entry(server)
            .and_modify(|s| s.merge(seen))
            .or_insert(seen);
    }

    /// This member leads in `term` as of `now`, with `last_index` its last log index: a
    /// new leadership resets the table (everyone renewed at the election).
    fn lead(&self, term: u64, now: Instant, last_index: u64, servers: usize) {
        let mut t = self.lock();
        if t.term == Some(term) {
            return;
        }
        t.term = Some(term);
        let election = Seen {
            at: now,
            index: last_index,
        };
        for server in 0..servers as u64 {
            // `now` is later than any moment recorded before, so the merge sets `at` to
            // it; an index recorded meanwhile (a renewal of this very term) is kept.
            t.seen
                .entry(server)
                .and_modify(|s| s.merge(election))
                .or_insert(election);
        }
        t.down_since.clear();
    }

    /// A beat of this process at `now`: if the previous one is older than
    /// [`PAUSED_AFTER`], the process did not run in between and heard no renewal, so
    /// every lease counts again from `now` (a later moment keeps every promise of the
    /// table). Returns whether it took the gap for a pause.
    fn beat(&self, now: Instant) -> bool {
        let mut t = self.lock();
        let paused = t
            .last_beat
            .is_some_and(|last| now.saturating_duration_since(last) > PAUSED_AFTER);
        t.last_beat = Some(t.last_beat.map_or(now, |last| last.max(now)));
        if paused {
            for seen in t.seen.values_mut() {
                seen.at = seen.at.max(now);
            }
        }
        paused
    }

    /// This member does not lead (any more).
    fn follow(&self) {
        self.lock().term = None;
    }

    /// The commands the leader proposes now, given the map it applied.
    fn decide(&self, map: &Map, now: Instant, params: &Params) -> Vec<Command> {
        let mut t = self.lock();
        let mut cmds = Vec::new();
        if let Some(grow) = grow(map, params) {
            cmds.push(grow);
        }
        // Every server whose leases lapsed, serving or not, with the newest renewal
        // accounted for: a `Down` names the others (`ServerEntry::quiet`).
        let mut lapsed = Vec::new();
        for (i, s) in map.servers.iter().enumerate() {
            let server = i as NodeId;
            let seen = t.seen.entry(server).or_insert(Seen { at: now, index: 0 });
            if s.renewed > seen.index {
                // A renewal applied that nobody recorded yet: it was sent before now.
                seen.merge(Seen {
                    at: now,
                    index: s.renewed,
                });
            }
            if now >= seen.at + params.lease {
                lapsed.push((server, seen.index));
            }
        }
        for (i, s) in map.servers.iter().enumerate() {
            let server = i as NodeId;
            if s.state != State::Down {
                t.down_since.remove(&server);
            }
            let lapsed_at = lapsed.iter().find(|&&(l, _)| l == server).map(|&(_, u)| u);
            if s.state.serving() {
                if let Some(index) = lapsed_at {
                    cmds.push(Command::Down {
                        server,
                        unless_renewed_after: index,
                        lapsed: lapsed
                            .iter()
                            .copied()
                            .filter(|&(l, _)| l != server)
                            .collect(),
                    });
                }
            } else if s.state == State::Down {
                // Counted from when this leader first saw it down: a predecessor's count is
                // unknown, so this one starts over (later, never earlier).
                let since = *t.down_since.entry(server).or_insert(now);
                if now >= since + params.rebuild_after {
                    let heirs_among = |servers: &[NodeId]| -> Vec<NodeId> {
                        servers
                            .iter()
                            .copied()
                            .filter(|&h| {
                                h != server && map.server(h).is_some_and(|e| !e.state.gone())
                            })
                            .collect()
                    };
                    cmds.push(Command::Lost {
                        server,
                        heirs: heirs_among(&params.data_servers),
                        meta_heirs: heirs_among(&params.meta_servers),
                        domains: params.domains.clone(),
                    });
                }
            }
        }
        cmds
    }
}

/// The [`Command::Grow`] to propose when the configuration has servers the map
/// lacks, all of them data servers only: a metadata server added would move the
/// names of every directory whose shards wrap around the metadata servers
/// (`docs/namespace.md`), so the map does not take one (the server's start refuses
/// such a configuration too, with the reason).
fn grow(map: &Map, params: &Params) -> Option<Command> {
    let have = map.servers.len();
    if params.servers <= have {
        return None;
    }
    if params.meta_servers.iter().any(|&m| m as usize >= have) {
        return None;
    }
    Some(Command::Grow {
        servers: params.servers as NodeId,
    })
}

/// Checks the leases every [`CHECK_EVERY`] while this member leads; runs until aborted.
pub(crate) async fn check(
    me: NodeId,
    raft: Raft<TypeConfig>,
    leases: std::sync::Arc<Leases>,
    map: watch::Receiver<Map>,
    params: Params,
) {
    let mut metrics = raft.metrics();
    // The heartbeat, apart from this loop, which also waits for its own proposals (a
    // wait that is no pause). Aborted when the set is dropped with this future.
    let mut beats = tokio::task::JoinSet::new();
    {
        let leases = leases.clone();
        beats.spawn(async move {
            let mut beat = tokio::time::interval(BEAT_EVERY);
            beat.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                beat.tick().await;
                if leases.beat(Instant::now()) {
                    tracing::info!("authority: this process paused; counts every lease again");
                }
            }
        });
    }
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (leading, term, last_index) = {
            let m = metrics.borrow_and_update();
            (
                m.state == ServerState::Leader && m.current_leader == Some(me),
                m.current_term,
                m.last_log_index.unwrap_or(0),
            )
        };
        if !leading {
            leases.follow();
            continue;
        }
        let now = Instant::now();
        // Run before the heartbeat after a pause, this look sees the pause first.
        if leases.beat(now) {
            tracing::info!("authority: this process paused; counts every lease again");
        }
        let current = map.borrow().clone();
        leases.lead(term, now, last_index, current.servers.len());
        let cmds = leases.decide(&current, now, &params);
        if cmds.is_empty() {
            continue;
        }
        // All at once, and waited for: the next look then sees their effect in the map
        // instead of proposing them again. A leader cut off from the others commits
        // nothing; the timeout keeps it looking (and it stops once it learns it lost).
        let mut proposals = tokio::task::JoinSet::new();
        for cmd in cmds {
            let raft = raft.clone();
            proposals.spawn(async move {
                tracing::info!(?cmd, "authority: lease check proposes");
                if let Err(e) = raft.client_write(cmd.clone()).await {
                    tracing::debug!(?cmd, %e, "authority: lease check proposal failed");
                }
            });
        }
        let all = async { while proposals.join_next().await.is_some() {} };
        // Dropping the set on a timeout aborts what is left.
        let _ = tokio::time::timeout(PROPOSE_TIMEOUT, all).await;
    }
}

#[cfg(test)]
mod tests;
