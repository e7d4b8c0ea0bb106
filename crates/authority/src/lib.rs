//! The file system's authority (docs/replication.md, "The authority"): a small state
//! machine replicated with openraft that holds **the map** — every server's state and
//! one version for the whole map — and grants the servers' leases.
//!
//! - [`Map`]: the map, and [`Map::apply`], the pure function that applies a [`Command`].
//! - [`Authority`]: one member (a server named in `[replication] authority`): raft with
//!   its vote, log and snapshot in `<dir>/raft.redb`, the leader's lease checker, and
//!   [`Authority::handle`] for every authority frame the server receives.
//! - [`Renewer`]: every server's side of its lease, member or not.
//! - [`Wire`]: the seam to the server's peer connections, which carry every message.

mod authority;
mod error;
mod lease;
mod map;
mod network;
mod raft;
mod rejoin;
mod renew;
mod store;
mod wire;

#[cfg(test)]
mod tests;

pub use authority::Authority;
pub use error::Error;
pub use lease::CHECK_EVERY;
pub use map::{Applied, Command, Map, ServerEntry, State};
pub use raft::{
    ELECTION_MAX, ELECTION_MIN, HEARTBEAT, KEEP_BEHIND_SNAPSHOT, SNAPSHOT_CHUNK, SNAPSHOT_EVERY,
};
pub use renew::{Renewer, MARGIN};
pub use store::FILE;
pub use wire::{Wire, WireError};

use std::time::Duration;

/// A server's index in the configuration; an authority member is known by its server's.
pub type NodeId = u64;

/// The lease timings (the `[replication]` table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// How long a renewal holds (`L`): a server silent this long is marked `Down`.
    pub lease: Duration,
    /// How long a server stays `Down` before it is `Lost` (its copies rebuilt elsewhere).
    pub rebuild_after: Duration,
    /// The data servers, in configuration order: a lost server's copies go to
    /// those of them not gone ([`Command::Lost`]'s heirs).
    pub data_servers: Vec<NodeId>,
    /// The metadata servers, in configuration order: a lost server's places in
    /// metadata groups go to those of them not gone.
    pub meta_servers: Vec<NodeId>,
    /// How many servers the configuration has: the leader grows a map with fewer
    /// ([`Command::Grow`]) when the ones it lacks are data servers only.
    pub servers: usize,
    /// Every server's failure domain, by index (servers in one domain share the
    /// index of its first server; one without a domain has its own index); empty
    /// when the configuration names no domain: heirs are picked apart from the
    /// other copies' domains.
    pub domains: Vec<NodeId>,
}

impl Params {
    /// Checks the timings can work: a lease longer than twice the margin a server takes off
    /// it (else a granted lease would be over before it is used).
    pub fn check(&self) -> Result<(), Error> {
        if self.lease <= MARGIN * 2 {
            return Err(Error::Params(format!(
                "the lease ({:?}) must be longer than {:?}",
                self.lease,
                MARGIN * 2
            )));
        }
        Ok(())
    }
}
