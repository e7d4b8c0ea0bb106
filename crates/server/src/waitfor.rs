//! Deadlock detection for POSIX record locks across servers: the wait-for graph, kept
//! by one coordinating metadata server (the first in the configuration).
//!
//! A server whose POSIX lock request must block tells the coordinator who the waiter
//! waits for (`WaitFor`); the coordinator refuses with EDEADLK if those edges close
//! a cycle (the waiter waits, through others, for itself), as Linux's
//! `posix_locks_deadlock` does on one machine. Locks on one server and on another
//! form one graph, so a cycle spanning two servers is found too. Only waits that
//! block ever reach it. Edges expire unless their server renews them (every time the
//! waiting request is sent again), so a crashed server's edges cannot cause false
//! deadlocks for long; a waiter's server removes them when the wait ends.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

use pvfs_proto::locks::LockKey;
use pvfs_proto::{Errno, Handle};

use crate::error::{OpError, OpResult};

/// Most waiting owners the graph holds (beyond it new waits go unchecked).
pub const MAX_WAITERS: usize = 1 << 16;

struct Edges {
    blockers: Vec<LockKey>,
    expires: Instant,
}

/// Whom one owner waits for, by (server, object) it waits at.
type WaitsOf = BTreeMap<(u32, Handle), Edges>;

/// The wait-for graph (on the coordinating server).
pub struct WaitGraph {
    /// Waiter → whom it waits for, where.
    edges: Mutex<BTreeMap<LockKey, WaitsOf>>,
    ttl: Duration,
}

impl WaitGraph {
    /// An empty graph whose edges live `ttl` unless renewed.
    pub fn new(ttl: Duration) -> WaitGraph {
        WaitGraph {
            edges: Mutex::new(BTreeMap::new()),
            ttl,
        }
    }

    /// Records that `waiter` waits at `server` for `handle` on `blockers` (none:
    /// it stopped waiting there), unless that closes a cycle: EDEADLK.
    pub fn wait_for(
        &self,
        waiter: LockKey,
        blockers: &[LockKey],
        server: u32,
        handle: Handle,
    ) -> OpResult<()> {
        let now = Instant::now();
        let mut g = self.edges.lock().unwrap_or_else(|p| p.into_inner());
        g.retain(|_, m| {
            m.retain(|_, e| e.expires > now);
            !m.is_empty()
        });
        if blockers.is_empty() {
            if let Some(m) = g.get_mut(&waiter) {
                m.remove(&(server, handle));
                if m.is_empty() {
                    g.remove(&waiter);
                }
            }
            return Ok(());
        }
        // Is `waiter` reachable from its blockers?
        let mut seen: BTreeSet<LockKey> = BTreeSet::new();
        let mut stack: Vec<LockKey> = blockers.to_vec();
        while let Some(k) = stack.pop() {
            if k == waiter {
                return Err(OpError::posix(
                    Errno::EDEADLK,
                    "waiting would deadlock: the lock's holder waits, directly or through others, for a lock of this owner",
                ));
            }
            if !seen.insert(k) {
                continue;
            }
            if let Some(m) = g.get(&k) {
                stack.extend(m.values().flat_map(|e| e.blockers.iter().copied()));
            }
        }
        if g.len() >= MAX_WAITERS && !g.contains_key(&waiter) {
            return Ok(());
        }
        g.entry(waiter).or_default().insert(
            (server, handle),
            Edges {
                blockers: blockers.to_vec(),
                expires: now + self.ttl,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(c: u64) -> LockKey {
        LockKey {
            who: 0,
            client: c,
            owner: 1,
        }
    }

    #[test]
    fn a_cycle_across_servers_is_refused_and_edges_go() {
        let g = WaitGraph::new(Duration::from_secs(60));
        g.wait_for(k(1), &[k(2)], 0, 10).unwrap();
        g.wait_for(k(2), &[k(3)], 1, 20).unwrap();
        let e = g.wait_for(k(3), &[k(1)], 1, 30).unwrap_err();
        assert_eq!(e.errno, Errno::EDEADLK);
        // 2 stops waiting: no cycle any more.
        g.wait_for(k(2), &[], 1, 20).unwrap();
        g.wait_for(k(3), &[k(1)], 1, 30).unwrap();
    }

    #[test]
    fn edges_expire() {
        let g = WaitGraph::new(Duration::from_millis(1));
        g.wait_for(k(1), &[k(2)], 0, 10).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        g.wait_for(k(2), &[k(1)], 0, 10).unwrap();
    }
}
