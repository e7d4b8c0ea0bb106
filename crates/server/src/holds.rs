//! Which clients hold which objects of this metadata server open, so that a file
//! outlives its last name until the last client that had it open lets go
//! (`docs/namespace.md`, "Open files outlive their names").
//!
//! - **Holds.** A client registers each object it opens (`Hold`) and lets go of it
//!   at its last close (`Unhold`); a create that opens registers it in the commit
//!   that makes the object. Holds are keyed by the client (the lock table's lease
//!   key: proven identity and client id) and live under its lease: a client whose
//!   lease ends, or that ends cleanly, holds nothing. Memory only: after a restart
//!   clients register their holds again when they see their lease is new.
//! - **Generations.** Each hold and unhold carries a number from a counter of the
//!   client's; an unhold older than the hold in place is ignored, so an unhold of a
//!   close and the hold of the next open may arrive in either order.
//! - **Deciding a deletion.** A commit that would delete an object at zero links
//!   asks [`Claims::unheld`]: held, the object is kept instead (recorded in the
//!   store's `kept` table); not held, the handle is *dying* until that commit has
//!   ended, and a hold arriving meanwhile is refused (ESTALE) rather than
//!   registered for an object about to vanish. A hold checks the object exists
//!   only after it is registered, so an object is never deleted under a hold that
//!   was answered.
//! - **After a restart** that may have forgotten holds (the storage's lock mark,
//!   which covers holds too, was set), nothing is deleted for a lease: the kept
//!   objects wait for the sweep that follows, by which time clients have held their
//!   files again.
//!
//! Everything here is synchronous under one mutex.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

use pvfs_proto::{Errno, Handle};

use crate::error::{OpError, OpResult};

/// Most holds this server keeps (all clients together).
pub const MAX_HOLDS: usize = 1 << 22;
/// Most holds of one client.
pub const MAX_CLIENT_HOLDS: usize = 1 << 20;

/// A client, as the lock table keys leases: (proven identity, client id).
pub type ClientKey = (u64, u64);

#[derive(Default)]
struct State {
    /// By object: the clients holding it and the generation of their hold.
    by_handle: BTreeMap<Handle, BTreeMap<ClientKey, u64>>,
    /// By client: how many objects it holds.
    per_client: BTreeMap<ClientKey, usize>,
    /// Objects a commit in progress deletes.
    dying: BTreeMap<Handle, usize>,
    total: usize,
}

impl State {
    fn remove(&mut self, handle: Handle, client: ClientKey) -> bool {
        let Some(holders) = self.by_handle.get_mut(&handle) else {
            return false;
        };
        if holders.remove(&client).is_none() {
            return false;
        }
        self.total -= 1;
        if let Some(n) = self.per_client.get_mut(&client) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&client);
            }
        }
        if holders.is_empty() {
            self.by_handle.remove(&handle);
            return true;
        }
        false
    }

    fn check(&self) {
        debug_assert_eq!(
            self.total,
            self.by_handle.values().map(BTreeMap::len).sum::<usize>(),
            "hold count"
        );
        debug_assert_eq!(self.total, self.per_client.values().sum::<usize>());
    }
}

/// The holds of one metadata server (see the module's documentation).
#[derive(Default)]
pub struct Holds {
    state: Mutex<State>,
    /// Until then no object is deleted: a restart forgot the holds, and clients
    /// register them again within a lease.
    grace_until: Option<Instant>,
}

impl Holds {
    /// The holds of a server that starts now; `grace_until`: the end of the lock
    /// table's grace period (the storage's mark says clients may have held files).
    pub fn new(grace_until: Option<Instant>) -> Holds {
        Holds {
            state: Mutex::default(),
            grace_until,
        }
    }

    /// Whether the grace period after a start is on (nothing is deleted).
    pub fn in_grace(&self) -> bool {
        self.grace_until.is_some_and(|t| Instant::now() < t)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `client`'s hold of `handle` with generation `gen` (a newer one
    /// replaces an older). ESTALE while a commit deletes the object; ENFILE past the
    /// limits. The caller then checks the object exists ([`Holds::unhold`] if not).
    pub fn hold(&self, client: ClientKey, handle: Handle, gen: u64) -> OpResult<()> {
        let mut st = self.state();
        if st.dying.contains_key(&handle) {
            return Err(OpError::posix(
                Errno::ESTALE,
                format!("object {handle:#x} is being deleted"),
            ));
        }
        if let Some(g) = st
            .by_handle
            .get_mut(&handle)
            .and_then(|h| h.get_mut(&client))
        {
            *g = (*g).max(gen);
            return Ok(());
        }
        let mine = st.per_client.get(&client).copied().unwrap_or(0);
        if st.total >= MAX_HOLDS || mine >= MAX_CLIENT_HOLDS {
            return Err(OpError::posix(
                Errno::ENFILE,
                format!(
                    "too many open files: {} held on this server (limit {MAX_HOLDS}), {mine} by \
                     this client (limit {MAX_CLIENT_HOLDS})",
                    st.total
                ),
            ));
        }
        st.by_handle.entry(handle).or_default().insert(client, gen);
        *st.per_client.entry(client).or_default() += 1;
        st.total += 1;
        st.check();
        Ok(())
    }

    /// Ends `client`'s hold of `handle` unless it is newer than `gen`. True when
    /// the object is held by no one now (it may have to go).
    pub fn unhold(&self, client: ClientKey, handle: Handle, gen: u64) -> bool {
        let mut st = self.state();
        let current = st
            .by_handle
            .get(&handle)
            .and_then(|h| h.get(&client))
            .copied();
        match current {
            Some(g) if g <= gen => {
                let free = st.remove(handle, client);
                st.check();
                free
            }
            _ => false,
        }
    }

    /// Ends every hold of `client` (its lease ended, or it ended cleanly): the
    /// objects held by no one now.
    pub fn drop_client(&self, client: ClientKey) -> Vec<Handle> {
        let mut st = self.state();
        if !st.per_client.contains_key(&client) {
            return Vec::new();
        }
        let mine: Vec<Handle> = st
            .by_handle
            .iter()
            .filter(|(_, h)| h.contains_key(&client))
            .map(|(&h, _)| h)
            .collect();
        let free = mine.into_iter().filter(|&h| st.remove(h, client)).collect();
        st.check();
        debug_assert!(!st.per_client.contains_key(&client));
        free
    }

    /// Whether any client holds `handle`.
    pub fn is_held(&self, handle: Handle) -> bool {
        self.state().by_handle.contains_key(&handle)
    }

    /// How many clients hold `handle`.
    pub fn holders(&self, handle: Handle) -> usize {
        self.state().by_handle.get(&handle).map_or(0, BTreeMap::len)
    }

    /// Held objects after `after`, at most `max`, in handle order.
    pub fn held_after(&self, after: Option<Handle>, max: usize) -> Vec<Handle> {
        let st = self.state();
        let lo = match after {
            Some(h) => std::ops::Bound::Excluded(h),
            None => std::ops::Bound::Unbounded,
        };
        st.by_handle
            .range((lo, std::ops::Bound::Unbounded))
            .take(max)
            .map(|(&h, _)| h)
            .collect()
    }

    /// Objects held and how many holds there are (for status).
    pub fn counts(&self) -> (usize, usize) {
        let st = self.state();
        (st.by_handle.len(), st.total)
    }

    /// Marks `handle` dying unless it is held (after ending `releasing`'s hold of
    /// it); whether it was not held.
    fn claim(&self, handle: Handle, releasing: Option<ClientKey>, forced: bool) -> bool {
        let mut st = self.state();
        if let Some(c) = releasing {
            st.remove(handle, c);
            st.check();
        }
        if st.by_handle.contains_key(&handle) || (self.in_grace() && !forced) {
            return false;
        }
        *st.dying.entry(handle).or_default() += 1;
        true
    }

    fn release(&self, handle: Handle) {
        let mut st = self.state();
        if let Some(n) = st.dying.get_mut(&handle) {
            *n -= 1;
            if *n == 0 {
                st.dying.remove(&handle);
            }
        }
    }
}

/// The deletions one commit decides: made before the commit, kept until it has
/// ended (the handler holds it across `commit().await`), so an object a commit
/// deletes cannot gain a hold before the deletion is visible.
pub struct Claims {
    holds: Arc<Holds>,
    claimed: Mutex<Vec<Handle>>,
    /// The client whose own hold a removal with fate `Release` ends.
    releasing: Option<ClientKey>,
    /// Deletes in the grace period after a start too (fsck's repair).
    forced: bool,
}

impl Claims {
    /// Claims for one commit.
    pub fn new(holds: &Arc<Holds>) -> Arc<Claims> {
        Self::releasing(holds, None)
    }

    /// Claims for one commit that ends `client`'s own holds of what it deletes
    /// (a name removal with fate `Release`).
    pub fn releasing(holds: &Arc<Holds>, client: Option<ClientKey>) -> Arc<Claims> {
        Arc::new(Claims {
            holds: holds.clone(),
            claimed: Mutex::new(Vec::new()),
            releasing: client,
            forced: false,
        })
    }

    /// Claims for fsck's repair, which deletes what no client holds even in the
    /// grace period after a start (an administrator's decision: `docs/namespace.md`
    /// says so).
    pub fn forced(holds: &Arc<Holds>) -> Arc<Claims> {
        Arc::new(Claims {
            holds: holds.clone(),
            claimed: Mutex::new(Vec::new()),
            releasing: None,
            forced: true,
        })
    }

    /// Whether the commit may delete `handle` (no client holds it); if so it is
    /// dying until these claims are dropped.
    pub fn unheld(&self, handle: Handle) -> bool {
        if !self.holds.claim(handle, self.releasing, self.forced) {
            return false;
        }
        self.claimed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handle);
        true
    }
}

impl Drop for Claims {
    fn drop(&mut self) {
        let claimed = std::mem::take(self.claimed.get_mut().unwrap_or_else(|p| p.into_inner()));
        for h in claimed {
            self.holds.release(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ClientKey = (1, 10);
    const B: ClientKey = (1, 11);

    #[test]
    fn an_object_is_free_when_its_last_holder_lets_go() {
        let h = Holds::default();
        h.hold(A, 5, 1).unwrap();
        h.hold(B, 5, 1).unwrap();
        assert!(!h.unhold(A, 5, 2));
        assert!(h.is_held(5));
        assert!(h.unhold(B, 5, 2));
        assert!(!h.is_held(5));
        assert_eq!(h.counts(), (0, 0));
    }

    #[test]
    fn an_unhold_older_than_the_hold_is_ignored() {
        let h = Holds::default();
        h.hold(A, 5, 3).unwrap();
        // The unhold of the previous close arrives after the next open's hold.
        assert!(!h.unhold(A, 5, 2));
        assert!(h.is_held(5));
        assert!(h.unhold(A, 5, 4));
    }

    #[test]
    fn a_dying_object_refuses_holds_until_its_commit_ended() {
        let holds = Arc::new(Holds::default());
        holds.hold(A, 7, 1).unwrap();
        let claims = Claims::new(&holds);
        assert!(!claims.unheld(7), "a held object is kept");
        assert!(claims.unheld(8));
        let e = holds.hold(B, 8, 1).unwrap_err();
        assert_eq!(e.errno, Errno::ESTALE);
        drop(claims);
        holds.hold(B, 8, 1).unwrap();
    }

    #[test]
    fn a_removal_that_releases_ends_only_its_clients_hold() {
        let holds = Arc::new(Holds::default());
        holds.hold(A, 7, 1).unwrap();
        holds.hold(A, 8, 1).unwrap();
        holds.hold(B, 8, 1).unwrap();
        let claims = Claims::releasing(&holds, Some(A));
        assert!(claims.unheld(7), "A's own hold does not keep it");
        assert!(!claims.unheld(8), "B's does");
        drop(claims);
        assert_eq!(holds.holders(8), 1);
        assert_eq!(holds.counts(), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_deleted_in_the_grace_after_a_start_but_by_fsck() {
        let lease = std::time::Duration::from_secs(2);
        let holds = Arc::new(Holds::new(Some(Instant::now() + lease)));
        assert!(!Claims::new(&holds).unheld(7), "kept in the grace period");
        assert!(Claims::forced(&holds).unheld(8), "fsck's repair deletes");
        tokio::time::advance(lease).await;
        assert!(Claims::new(&holds).unheld(7), "deleted after it");
    }

    #[test]
    fn a_client_that_goes_frees_what_only_it_held() {
        let h = Holds::default();
        h.hold(A, 1, 1).unwrap();
        h.hold(A, 2, 1).unwrap();
        h.hold(B, 2, 1).unwrap();
        assert_eq!(h.drop_client(A), vec![1]);
        assert_eq!(h.holders(2), 1);
        assert!(h.drop_client(A).is_empty());
    }
}
