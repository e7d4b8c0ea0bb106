//! What one client may take of a server, so that no client starves the others:
//! connection slots (in total, kept under the open-file limit, and per client
//! address) and a share of the receive-buffer budget (`crate::budget`), at most half
//! of it per address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::budget::{self, Budget, Held, Share, CHUNK};

/// Descriptors kept for everything but client connections (stores, datafiles, peers).
const FD_RESERVE: u64 = 512;

/// Raises this process's open-file limit to its hard limit and returns how many
/// client connections fit under it with [`FD_RESERVE`] to spare, at most `wanted`.
pub fn connection_cap(wanted: u32) -> u32 {
    // SAFETY: an all-zero rlimit is a valid out-parameter for getrlimit.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: lim is a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return wanted;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: raised is a valid rlimit; raising the soft limit to the hard one is
        // always allowed.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    let fit = lim.rlim_cur.saturating_sub(FD_RESERVE).max(1);
    u32::try_from(fit.min(u64::from(wanted))).unwrap_or(wanted)
}

/// The shares of one client address.
pub struct Address {
    conns: Arc<Semaphore>,
    buffers: Share,
}

/// Per-address shares, made when an address first connects and dropped with its
/// last connection.
pub struct AddressLimits {
    per_address: u32,
    buffer_share: u32,
    map: Mutex<HashMap<Option<IpAddr>, Weak<Address>>>,
}

/// A connection admitted: its address's shares and its slot among them.
pub struct Admitted {
    address: Arc<Address>,
    _slot: OwnedSemaphorePermit,
}

impl AddressLimits {
    /// `per_address` connections and half of `buffer_units` per address (at least
    /// one [`CHUNK`]).
    pub fn new(per_address: u32, buffer_units: u32) -> AddressLimits {
        AddressLimits {
            per_address,
            buffer_share: (buffer_units / 2).max(budget::units(CHUNK as u64)),
            map: Mutex::new(HashMap::new()),
        }
    }

    /// A slot for a new connection from `ip` (`None`: a local socket), or `None` when
    /// that address holds all of its slots.
    pub fn admit(&self, ip: Option<IpAddr>) -> Option<Admitted> {
        let address = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(&ip).and_then(Weak::upgrade) {
                Some(a) => a,
                None => {
                    if map.len() >= 4096 {
                        map.retain(|_, w| w.strong_count() > 0);
                    }
                    let a = Arc::new(Address {
                        conns: Arc::new(Semaphore::new(self.per_address as usize)),
                        buffers: Share::new(self.buffer_share),
                    });
                    map.insert(ip, Arc::downgrade(&a));
                    a
                }
            }
        };
        let slot = address.conns.clone().try_acquire_owned().ok()?;
        Some(Admitted {
            address,
            _slot: slot,
        })
    }
}

impl Admitted {
    /// Waits for `units` of the address's share, then of the server's `budget`
    /// ([`Budget::hold`]: `None` after a whole request timeout without progress).
    pub async fn hold(&self, budget: &Arc<Budget>, units: u32) -> Option<Held> {
        budget.hold(&self.address.buffers, units).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::BUDGET_UNIT;
    use std::time::Duration;

    #[tokio::test]
    async fn an_address_has_its_slots_and_half_the_budget() {
        let budget = Budget::new(4 * CHUNK as u64, Duration::from_secs(30));
        let limits = AddressLimits::new(2, budget.units());
        let ip = Some(IpAddr::from([10, 0, 0, 1]));
        let (a, b) = (limits.admit(ip).unwrap(), limits.admit(ip).unwrap());
        assert!(
            limits.admit(ip).is_none(),
            "a third connection of one address"
        );
        let other = limits.admit(Some(IpAddr::from([10, 0, 0, 2]))).unwrap();
        // The address's two connections share half the budget between them.
        let half = budget.units() / 2;
        let held = a.hold(&budget, half).await.unwrap();
        assert_eq!(a.address.buffers.available(), 0);
        assert_eq!(b.address.buffers.available(), 0, "one share per address");
        assert_eq!(other.address.buffers.available(), half as usize);
        assert_eq!(budget.available(), (budget.units() - half) as usize);
        drop(held);
        assert_eq!(budget.available(), budget.units() as usize);
        // Its slots come back with its connections.
        drop(a);
        assert!(limits.admit(ip).is_some());
        // A small budget still gives each address one frame's data.
        let small = AddressLimits::new(1, 2);
        let one = small.admit(None).unwrap();
        assert_eq!(
            one.address.buffers.available() as u64,
            CHUNK as u64 / BUDGET_UNIT
        );
    }
}
