//! Fencing of a metadata group (`docs/replication.md`, "Failover"): a server
//! answers a group's requests only while it holds a lease and its map names it the
//! group's primary. The authority moves a group only away from a primary that is
//! down (its lease lapsed first), so two servers never answer for one group at once.
//!
//! A lease renewed after a partition or a pause comes with a map that may have moved
//! the group away: the fence's answer counts only if it was drawn from a map at least
//! as new as the one that came with the lease (`Lease::valid_under`), so a server
//! back on the network never answers from its old map for even one request.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::OpResult;
use crate::lease::Lease;

/// Whether the server holding this fence may answer for its metadata group now.
pub struct Fence {
    /// Whether the group has standbys (and the file system an authority): without,
    /// the group has one copy and nothing moves it.
    replicated: bool,
    /// The version of the newest map seen, shifted left by one, with bit 0 set when
    /// it names this server the group's primary (set by `crate::promote::run`); one
    /// word, so the two are read together.
    seen: AtomicU64,
    /// The group's server's name, for messages.
    name: String,
}

impl Fence {
    /// The fence of metadata group `name`; `replicated`: it has standbys under an
    /// authority. `leads`: whether this server may serve it before the first look
    /// at the map (a group without standbys always may).
    pub fn new(name: &str, replicated: bool, leads: bool) -> Fence {
        Fence {
            replicated,
            seen: AtomicU64::new(u64::from(leads || !replicated)),
            name: name.to_string(),
        }
    }

    /// Whether the group has standbys.
    pub fn replicated(&self) -> bool {
        self.replicated
    }

    /// Whether the newest map seen names this server the group's primary.
    pub fn leads(&self) -> bool {
        self.seen.load(Ordering::Acquire) & 1 == 1
    }

    /// Records whether map `version` names this server the group's primary.
    pub fn set_leads(&self, leads: bool, version: u64) {
        debug_assert!(version < 1 << 63, "map version {version} out of range");
        let leads = leads || !self.replicated;
        self.seen
            .store(version << 1 | u64::from(leads), Ordering::Release);
    }

    /// Whether this server may answer for the group now ([`Fence::check`]).
    pub fn holds(&self, lease: &Lease) -> bool {
        self.check(lease).is_ok()
    }

    /// Fails (a map error: the caller asks the map again and goes where it says)
    /// unless this server may answer for the group now: its map names it the
    /// group's primary and its lease holds.
    pub fn check(&self, lease: &Lease) -> OpResult<()> {
        if !self.replicated {
            return Ok(());
        }
        let seen = self.seen.load(Ordering::Acquire);
        if seen & 1 == 0 {
            return Err(crate::chain::map_error(format!(
                "the metadata of {} is not served here under this server's cluster map",
                self.name
            )));
        }
        if !lease.valid_under(seen >> 1) {
            return Err(crate::chain::map_error(format!(
                "no lease: the metadata of {} is not served until the authority renews it",
                self.name
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_fence_holds_only_under_a_map_as_new_as_the_lease_and_naming_it() {
        let lease = Lease::held_for_test(Duration::from_secs(60), 7);
        let fence = Fence::new("s0", true, false);
        assert!(!fence.holds(&lease), "before any look at the map");
        fence.set_leads(true, 6);
        assert!(
            !fence.holds(&lease),
            "the lease came with map 7: what map 6 said does not count"
        );
        fence.set_leads(true, 7);
        assert!(fence.holds(&lease));
        fence.set_leads(false, 8);
        assert!(!fence.holds(&lease), "map 8 moved the group");
        let lapsed = Lease::held_for_test(Duration::ZERO, 7);
        fence.set_leads(true, 9);
        assert!(!fence.holds(&lapsed), "a lapsed lease");
        // A group without standbys has nothing to fence.
        let alone = Fence::new("s0", false, false);
        assert!(alone.holds(&lapsed));
    }
}
