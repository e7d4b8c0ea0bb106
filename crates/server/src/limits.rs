//! What one client may take of a server, so that no client starves the others:
//! connection slots (in total, kept under the open-file limit, and per client
//! address) and the receive-buffer budget (`[limits] buffers`, of which one address
//! may hold at most half). Every byte of a frame's body and data is counted
//! before it is read or allocated, and released once used.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::ctx::Ctx;

/// Granularity of the receive-buffer budget.
pub const BUDGET_UNIT: u64 = 4 << 10;
/// Descriptors kept for everything but client connections (stores, datafiles, peers).
const FD_RESERVE: u64 = 512;

/// The budget units `bytes` take.
pub fn units(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(BUDGET_UNIT)).unwrap_or(u32::MAX)
}

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
    buffers: Arc<Semaphore>,
    buffer_share: u32,
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
    /// `per_address` connections and half of `buffer_units` per address.
    pub fn new(per_address: u32, buffer_units: u32) -> AddressLimits {
        AddressLimits {
            per_address,
            buffer_share: (buffer_units / 2).max(units(crate::ctx::CHUNK as u64)),
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
                        buffers: Arc::new(Semaphore::new(self.buffer_share as usize)),
                        buffer_share: self.buffer_share,
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

/// Receive buffers held for one frame: the address's share and the server's budget,
/// released (and counted as progress) when dropped.
pub struct Held {
    _address: OwnedSemaphorePermit,
    _global: OwnedSemaphorePermit,
    ctx: Arc<Ctx>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.ctx.budget_released.fetch_add(1, Ordering::Release);
    }
}

impl Admitted {
    /// Waits for `units` of the address's share, then of the server's budget. Waiting
    /// is fine while the server makes progress (some budget is being released); only
    /// a whole request timeout without any release gives up (`None`).
    pub async fn hold(&self, ctx: &Arc<Ctx>, units: u32) -> Option<Held> {
        // A frame larger than a whole share takes the whole share (asking more would
        // wait forever).
        let share = units.min(self.address.buffer_share);
        let address = wait(ctx, self.address.buffers.clone(), share).await?;
        let total = units.min(u32::try_from(ctx.buffer_units).unwrap_or(u32::MAX));
        let global = wait(ctx, ctx.buffers.clone(), total).await?;
        Some(Held {
            _address: address,
            _global: global,
            ctx: ctx.clone(),
        })
    }
}

async fn wait(ctx: &Arc<Ctx>, sem: Arc<Semaphore>, units: u32) -> Option<OwnedSemaphorePermit> {
    let acquire = sem.acquire_many_owned(units);
    tokio::pin!(acquire);
    loop {
        let released = ctx.budget_released.load(Ordering::Acquire);
        match tokio::time::timeout(ctx.config.timeouts.request, &mut acquire).await {
            Ok(Ok(permit)) => return Some(permit),
            Ok(Err(_)) => return None,
            Err(_) if ctx.budget_released.load(Ordering::Acquire) != released => continue,
            Err(_) => return None,
        }
    }
}
