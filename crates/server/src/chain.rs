//! Chains of copies (`docs/replication.md`, "Data: chains"): where this server stands
//! in a datafile's chain under the cluster map, and the range locks by which the head
//! orders overlapping writes, held until the tail has them, so every copy applies
//! them in one order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pvfs_proto::map::{ClusterMap, Copies};
use pvfs_proto::{Errno, Handle};
use tokio::sync::Notify;

use crate::error::{OpError, OpResult};
use crate::lease::Lease;

/// What a request asks of this server's copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A client's change (write, truncate, fallocate): only the head takes it.
    Head,
    /// A change forwarded along the chain: the member at position `hop`.
    Member,
    /// A read: any copy that is up.
    Reader,
    /// A read by a copy catching up (`crate::catchup`): any member of the chain,
    /// recovering too (the reader chose it knowing what it holds).
    Source,
}

/// This server's place in a datafile's chain.
#[derive(Debug)]
pub struct Place {
    /// The map the decision was made under.
    pub map: ClusterMap,
    /// The chain, in order.
    pub chain: Vec<u32>,
    /// This server's position in it.
    pub pos: usize,
}

impl Place {
    /// The member a change goes to after this one, if any.
    pub fn next(&self) -> Option<u32> {
        self.chain.get(self.pos + 1).copied()
    }
}

/// An error that tells the sender to fetch the map and send again.
pub fn map_error(message: impl Into<String>) -> OpError {
    OpError::map(message)
}

/// Checks that this server (`me`) may act on a copy of datafile `handle` whose
/// copies are `copies` in `role`: it holds a lease, its map is the sender's, and the
/// map puts it where `role` needs it. A datafile with one copy needs none of this.
pub fn place(
    lease: &Lease,
    me: u32,
    handle: Handle,
    copies: &Copies,
    role: Role,
) -> OpResult<Place> {
    debug_assert!(copies.replicated());
    let map = current_map(lease, copies.map)?;
    if !map.holds(handle, &copies.servers, me) {
        return Err(OpError::not_here(
            Errno::ESTALE,
            format!(
                "this server holds no copy of the datafile under cluster map version {} (copies on {:?})",
                map.version, copies.servers
            ),
        ));
    }
    let chain = map.chain(handle, &copies.servers);
    let pos = chain.iter().position(|&s| s == me);
    let ok = match (role, pos) {
        (_, None) => false,
        (Role::Head, Some(_)) => map.head(handle, &copies.servers) == Some(me),
        (Role::Member, Some(p)) => p == copies.hop as usize && p > 0,
        (Role::Reader, Some(_)) => map.readable(handle, &copies.servers).contains(&me),
        (Role::Source, Some(_)) => true,
    };
    let Some(pos) = pos.filter(|_| ok) else {
        return Err(map_error(format!(
            "under cluster map version {} this server is not the copy that takes this ({role:?}; chain {chain:?})",
            map.version
        )));
    };
    Ok(Place { map, chain, pos })
}

/// Checks that this server holds a lease and that its map is the sender's
/// (`version`).
pub fn check_map(lease: &Lease, version: u64) -> OpResult<()> {
    current_map(lease, version).map(drop)
}

/// This server's map, if it holds a lease and the map is the sender's (`version`).
fn current_map(lease: &Lease, version: u64) -> OpResult<ClusterMap> {
    if !lease.valid() {
        return Err(map_error("this server holds no lease now"));
    }
    let map = lease.map()?;
    if map.version != version {
        return Err(map_error(format!(
            "cluster map version {} here, {version} in the request",
            map.version
        )));
    }
    Ok(map)
}

/// Checks that this server (`me`) may answer for its copies under map `version`
/// (sizes): it holds a lease, the map is the sender's, and it is up in it.
pub fn check_readable(lease: &Lease, me: u32, version: u64) -> OpResult<()> {
    let map = current_map(lease, version)?;
    match map.state(me) {
        Some(pvfs_proto::map::ServerState::Up | pvfs_proto::map::ServerState::Draining) => Ok(()),
        state => Err(map_error(format!(
            "this server is {} under cluster map version {}",
            state.map_or("unknown", |s| s.name()),
            map.version
        ))),
    }
}

/// How often a copy waiting on the next one checks whether the map still has it.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Runs `call`, a wait on `next`, the next copy in the chain of datafile `handle`
/// whose copies are on `servers`, giving up with a map error once this server's map no
/// longer has `next` in the chain: a copy that stopped answering (`SIGSTOP`, a cut
/// network) holds a change up only until the authority replaced it, not for the
/// whole request timeout; the sender retries under the new map.
pub async fn watch_next<T>(
    lease: &Lease,
    handle: Handle,
    servers: &[u32],
    next: u32,
    call: impl std::future::Future<Output = OpResult<T>>,
) -> OpResult<T> {
    tokio::pin!(call);
    loop {
        tokio::select! {
            r = &mut call => return r,
            () = tokio::time::sleep(WATCH_EVERY) => {
                if let Ok(map) = lease.map() {
                    if !map.chain(handle, servers).contains(&next) {
                        return Err(map_error(format!(
                            "the next copy (server {next}) left the chain under cluster map version {}",
                            map.version
                        )));
                    }
                }
            }
        }
    }
}

/// One held range of one datafile.
#[derive(Clone, Copy, Debug)]
struct Held {
    start: u64,
    end: u64,
    id: u64,
}

/// The byte ranges of datafiles a head is passing down its chains: a change waits for
/// the changes it overlaps, so overlapping writes reach every copy in one order.
#[derive(Default)]
pub struct RangeLocks {
    held: Mutex<(HashMap<Handle, Vec<Held>>, u64)>,
    freed: Notify,
}

/// A range held until dropped.
pub struct RangeGuard {
    locks: Arc<RangeLocks>,
    handle: Handle,
    id: u64,
}

impl RangeLocks {
    /// Waits until no other change holds bytes of `start .. end` of datafile `handle`
    /// (at most `limit`: EAGAIN after it), then holds them.
    pub async fn lock(
        self: &Arc<Self>,
        handle: Handle,
        start: u64,
        end: u64,
        limit: Duration,
    ) -> OpResult<RangeGuard> {
        debug_assert!(start <= end);
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut g = self.held.lock().unwrap_or_else(|e| e.into_inner());
                let (map, next) = &mut *g;
                let ranges = map.entry(handle).or_default();
                if !ranges
                    .iter()
                    .any(|h| h.start < end.max(start + 1) && start < h.end)
                {
                    *next += 1;
                    let id = *next;
                    ranges.push(Held {
                        start,
                        end: end.max(start + 1),
                        id,
                    });
                    return Ok(RangeGuard {
                        locks: self.clone(),
                        handle,
                        id,
                    });
                }
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(OpError::busy(
                    Errno::EAGAIN,
                    "overlapping writes to this datafile held it past the request timeout",
                ));
            }
        }
    }

    /// How many ranges are held (tests).
    pub fn held(&self) -> usize {
        let g = self.held.lock().unwrap_or_else(|e| e.into_inner());
        g.0.values().map(Vec::len).sum()
    }
}

impl Drop for RangeGuard {
    fn drop(&mut self) {
        let mut g = self.locks.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ranges) = g.0.get_mut(&self.handle) {
            ranges.retain(|h| h.id != self.id);
            if ranges.is_empty() {
                g.0.remove(&self.handle);
            }
        }
        drop(g);
        self.locks.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn overlapping_ranges_wait_and_others_do_not() {
        let locks = Arc::new(RangeLocks::default());
        let limit = Duration::from_secs(5);
        let a = locks.lock(7, 0, 100, limit).await.unwrap();
        // Another datafile, and a range beside it: at once.
        let b = locks.lock(8, 0, 100, limit).await.unwrap();
        let c = locks.lock(7, 100, 200, limit).await.unwrap();
        assert_eq!(locks.held(), 3);
        // Overlapping: waits until `a` goes.
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move { locks.lock(7, 50, 60, limit).await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished());
        drop(a);
        waiter.await.unwrap().unwrap();
        // An empty range still orders against the byte at its start.
        let e = locks.lock(7, 150, 150, Duration::from_millis(100)).await;
        assert!(e.is_err(), "overlaps c");
        drop((b, c));
        assert_eq!(locks.held(), 0);
        let _again = locks.lock(7, 150, 150, limit).await.unwrap();
    }
}
