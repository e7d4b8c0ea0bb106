//! Fencing of a metadata group (`docs/replication.md`, "Failover"): a server
//! answers a group's requests only while it holds a lease and its map names it the
//! group's primary. The authority moves a group only away from a primary that is
//! down (its lease lapsed first), so two servers never answer for one group at once.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::OpResult;
use crate::lease::Lease;

/// Whether the server holding this fence may answer for its metadata group now.
pub struct Fence {
    /// Whether the group has standbys (and the file system an authority): without,
    /// the group has one copy and nothing moves it.
    replicated: bool,
    /// Whether the newest map seen names this server the group's primary (set by
    /// [`run`]).
    leads: AtomicBool,
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
            leads: AtomicBool::new(leads || !replicated),
            name: name.to_string(),
        }
    }

    /// Whether the group has standbys.
    pub fn replicated(&self) -> bool {
        self.replicated
    }

    /// Whether the newest map seen names this server the group's primary.
    pub fn leads(&self) -> bool {
        self.leads.load(Ordering::Acquire)
    }

    /// Records whether the newest map names this server the group's primary.
    pub fn set_leads(&self, leads: bool) {
        self.leads
            .store(leads || !self.replicated, Ordering::Release);
    }

    /// Fails (a map error: the caller asks the map again and goes where it says)
    /// unless this server may answer for the group now: its map names it the
    /// group's primary and its lease holds.
    pub fn check(&self, lease: &Lease) -> OpResult<()> {
        if !self.replicated {
            return Ok(());
        }
        if !self.leads() {
            return Err(crate::chain::map_error(format!(
                "the metadata of {} is not served here under this server's cluster map",
                self.name
            )));
        }
        if !lease.valid() {
            return Err(crate::chain::map_error(format!(
                "no lease: the metadata of {} is not served until the authority renews it",
                self.name
            )));
        }
        Ok(())
    }
}
