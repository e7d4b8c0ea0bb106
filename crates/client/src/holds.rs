//! Holds: the files this client has open, registered at the metadata server that
//! owns each (`Hold`), so that another client's unlink or rename over it leaves the
//! object, and its data, until this client's last close (`Unhold`), as on one
//! machine (`docs/namespace.md`, "Open files outlive their names").
//!
//! - **Counted here.** Every interface opens through [`Client::hold`] and closes
//!   through [`Client::unhold`]; only the first open of an object sends `Hold` and
//!   only the last close sends `Unhold`.
//! - **Generations.** Each hold and unhold carries a number from a counter of this
//!   client's, so the server ignores an unhold that arrives after the next hold.
//! - **Under the lease.** Holds live under the same lease as locks (`crate::locks`):
//!   while it holds anything on a server the client renews its lease there. A server
//!   that answers with a new lease id forgot them (it restarted): they are sent again.
//! - **Kept a moment after the last close** when the client asks for it
//!   ([`Client::linger_holds`]; the mount does): a file opened again soon after (a
//!   header every compile includes, a file read right after it was written) asks no
//!   server, and the holds that end are sent in one `Unhold` per server. A change of
//!   the object that another client made ([`Client::held_changed`]) ends an idle hold
//!   at once, and this client's own unlink of the file ends it in the unlink's commit
//!   ([`LinkDrop::Release`](pvfs_proto::LinkDrop)), so a file unlinked by anyone is
//!   not kept for it.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use pvfs_proto::{req, Attr, Errno, Handle, Request, Response};

use crate::error::Result;
use crate::pool::unexpected;
use crate::Client;

/// Most holds kept idle after their last close; the oldest beyond end early.
const MAX_IDLE: usize = 16_384;

/// One object this client holds open.
#[derive(Debug)]
pub(crate) struct Open {
    /// Its metadata server.
    pub(crate) server: usize,
    /// Opens of it through this client.
    count: usize,
    /// The server answered a hold of it.
    confirmed: bool,
    /// Since when no open uses it (kept for [`Opens::linger`]).
    idle: Option<Instant>,
    /// Another client changed the object while it was open: the last close lets go
    /// at once.
    changed: bool,
}

impl Open {
    fn new(server: usize, confirmed: bool) -> Open {
        Open {
            server,
            count: 0,
            confirmed,
            idle: None,
            changed: false,
        }
    }
}

/// The objects this client holds open (kept with its locks, under one mutex).
#[derive(Debug, Default)]
pub(crate) struct Opens {
    files: BTreeMap<Handle, Open>,
    next_gen: u64,
    /// How long a hold stays after its last close (zero: it ends at once).
    linger: Duration,
    /// Whether the task that ends idle holds runs.
    reaper: bool,
}

impl Opens {
    fn gen(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }

    /// Whether this client holds something open on `server` (confirmed).
    pub(crate) fn on(&self, server: usize) -> bool {
        self.files
            .values()
            .any(|o| o.server == server && o.confirmed)
    }

    /// The objects held on `server`.
    fn held_on(&self, server: usize) -> Vec<Handle> {
        self.files
            .iter()
            .filter(|(_, o)| o.server == server && o.confirmed)
            .map(|(&h, _)| h)
            .collect()
    }

    /// Idle holds older than the linger, and the oldest beyond [`MAX_IDLE`], taken
    /// out: per server, the handles and their unhold generations.
    fn take_idle(&mut self) -> BTreeMap<usize, (Vec<Handle>, Vec<u64>)> {
        let linger = self.linger;
        let mut idle: Vec<(Instant, Handle)> = self
            .files
            .iter()
            .filter_map(|(&h, o)| o.idle.map(|t| (t, h)))
            .collect();
        idle.sort_unstable();
        let excess = idle.len().saturating_sub(MAX_IDLE);
        let old: Vec<Handle> = idle
            .iter()
            .enumerate()
            .filter(|&(i, (t, _))| i < excess || t.elapsed() >= linger)
            .map(|(_, &(_, h))| h)
            .collect();
        let mut out: BTreeMap<usize, (Vec<Handle>, Vec<u64>)> = BTreeMap::new();
        for h in old {
            if let Some(o) = self.files.remove(&h) {
                let gen = self.gen();
                let e = out.entry(o.server).or_default();
                e.0.push(h);
                e.1.push(gen);
            }
        }
        out
    }

    /// The servers something is held on.
    pub(crate) fn servers(&self) -> Vec<usize> {
        let mut s: Vec<usize> = self.files.values().map(|o| o.server).collect();
        s.sort_unstable();
        s.dedup();
        s
    }
}

impl Client {
    /// Registers one more open of `handle`: the first sends `Hold` to its metadata
    /// server (ESTALE if the object is gone) and returns the file's attributes as
    /// the server answered them (size not filled in); None when this client held
    /// it already. Every successful `hold` needs one [`Client::unhold`].
    pub async fn hold(&self, handle: Handle) -> Result<Option<Attr>> {
        let server = self.owner(handle)?;
        let gen = {
            let mut h = self.lock_state().held();
            let o = h
                .opens
                .files
                .entry(handle)
                .or_insert_with(|| Open::new(server, false));
            o.count += 1;
            o.idle = None;
            if o.confirmed {
                return Ok(None);
            }
            h.opens.gen()
        };
        match self.send_hold(server, handle, gen).await {
            Ok(attr) => Ok(Some(attr)),
            Err(e) => {
                self.forget_open(handle);
                Err(e)
            }
        }
    }

    /// Records that a create answered holds `handle` (the first open of it), with
    /// generation `gen` from [`Client::hold_gen`].
    pub(crate) fn created_held(&self, handle: Handle, server: usize) {
        let mut h = self.lock_state().held();
        let o = h
            .opens
            .files
            .entry(handle)
            .or_insert_with(|| Open::new(server, true));
        o.count += 1;
        o.confirmed = true;
        o.idle = None;
        drop(h);
        self.keep_leases();
    }

    /// A generation for a hold sent with a create.
    pub(crate) fn hold_gen(&self) -> u64 {
        self.lock_state().held().opens.gen()
    }

    async fn send_hold(&self, server: usize, handle: Handle, gen: u64) -> Result<Attr> {
        let request = Request::Hold(req::Hold {
            handle,
            gen,
            proof: self.lock_proof(handle),
        });
        match self.rpc(server, request).await? {
            Response::Held { lease, grace, attr } => {
                {
                    let mut h = self.lock_state().held();
                    // Before this hold counts: a new lease concerns the others.
                    h.observe(server, lease, grace);
                    if let Some(o) = h.opens.files.get_mut(&handle) {
                        o.confirmed = true;
                    }
                }
                self.keep_leases();
                Ok(attr)
            }
            other => Err(unexpected("Hold", &other)),
        }
    }

    /// Registers one more open of `handle` without asking anyone, if this client
    /// holds it already; false otherwise (then [`Client::hold`]).
    pub fn hold_again(&self, handle: Handle) -> bool {
        let mut h = self.lock_state().held();
        match h.opens.files.get_mut(&handle) {
            Some(o) if o.confirmed => {
                o.count += 1;
                o.idle = None;
                true
            }
            _ => false,
        }
    }

    /// Drops one open of `handle` that [`Client::hold`] failed for.
    fn forget_open(&self, handle: Handle) {
        let mut h = self.lock_state().held();
        if let Some(o) = h.opens.files.get_mut(&handle) {
            o.count -= 1;
            if o.count == 0 {
                h.opens.files.remove(&handle);
            }
        }
    }

    /// Ends one open of `handle`. After the last the hold stays idle for the
    /// linger, if one is set and no other client changed the object; otherwise
    /// `Unhold` goes now, and the server deletes the object if no name and no other
    /// client keeps it. Failures are logged (the hold then ends with this client's
    /// lease).
    pub async fn unhold(&self, handle: Handle) {
        if let Some((server, gen)) = self.unhold_idle(handle) {
            self.send_unhold(server, vec![handle], vec![gen]).await;
        }
    }

    /// [`Client::unhold`] without waiting: ends one open of `handle` here, and
    /// returns the `Unhold` the caller must send ([`Client::send_unhold`]), if one
    /// must go now (the server and the generation).
    pub fn unhold_idle(&self, handle: Handle) -> Option<(usize, u64)> {
        let mut h = self.lock_state().held();
        let linger = h.opens.linger;
        // Not held: every hold went with the leases (a clean end).
        let o = h.opens.files.get_mut(&handle)?;
        o.count = o.count.saturating_sub(1);
        if o.count > 0 || o.idle.is_some() {
            return None;
        }
        if !linger.is_zero() && !o.changed && o.confirmed {
            o.idle = Some(Instant::now());
            let start = !std::mem::replace(&mut h.opens.reaper, true);
            drop(h);
            if start {
                self.start_idle_reaper(linger);
            }
            return None;
        }
        let server = o.server;
        h.opens.files.remove(&handle);
        Some((server, h.opens.gen()))
    }

    /// [`Client::unhold`] without the linger: for a file whose last name is gone,
    /// which its server deletes at the last hold.
    pub async fn unhold_now(&self, handle: Handle) {
        if let Some(o) = self.lock_state().held().opens.files.get_mut(&handle) {
            o.changed = true;
        }
        self.unhold(handle).await;
    }

    /// Sends `Unhold` of `handles` (with their generations) to `server`; failures
    /// are logged (the holds then end with this client's lease).
    pub async fn send_unhold(&self, server: usize, handles: Vec<Handle>, gens: Vec<u64>) {
        let n = handles.len();
        let request = Request::Unhold(req::Unhold { handles, gens });
        match self.rpc(server, request).await {
            Ok(Response::Done {}) => {}
            Ok(other) => tracing::warn!("closing files: {}", unexpected("Unhold", &other)),
            Err(e) => tracing::warn!(
                server = self.inner.pool.name(server),
                "closing {n} files: the server keeps them until this client's lease ends: {e}"
            ),
        }
    }

    /// Keeps each hold `linger` after its last close (the mount's choice; zero, the
    /// default, ends it at the close). Needs a multi-threaded tokio runtime.
    pub fn linger_holds(&self, linger: Duration) {
        self.lock_state().held().opens.linger = linger;
    }

    /// Another client changed object `handle`: an idle hold of it ends now (the
    /// change may have been the removal of its last name), an open one at its last
    /// close.
    pub fn held_changed(&self, handle: Handle) {
        let send = {
            let mut h = self.lock_state().held();
            let Some(o) = h.opens.files.get_mut(&handle) else {
                return;
            };
            if o.idle.is_none() {
                o.changed = true;
                return;
            }
            let server = o.server;
            h.opens.files.remove(&handle);
            (server, h.opens.gen())
        };
        let client = self.clone();
        tokio::spawn(async move { client.send_unhold(send.0, vec![handle], vec![send.1]).await });
    }

    /// Takes this client's idle hold of `handle`, if it has one, for a removal of
    /// its name that ends it in its commit (`LinkDrop::Release`).
    pub(crate) fn take_idle_hold(&self, handle: Handle) -> bool {
        let mut h = self.lock_state().held();
        if h.opens.files.get(&handle).is_some_and(|o| o.idle.is_some()) {
            h.opens.files.remove(&handle);
            return true;
        }
        false
    }

    /// Ends the hold of `handle` that [`Client::take_idle_hold`] took, after a
    /// removal that was to end it failed (the server may still have it).
    pub(crate) async fn give_back_idle_hold(&self, handle: Handle) {
        let Ok(server) = self.owner(handle) else {
            return;
        };
        let gen = self.lock_state().held().opens.gen();
        self.send_unhold(server, vec![handle], vec![gen]).await;
    }

    /// Ends idle holds older than the linger, a batch per server, every half linger,
    /// for as long as the client lives.
    fn start_idle_reaper(&self, linger: Duration) {
        let weak = std::sync::Arc::downgrade(&self.inner);
        let creds = self.creds.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(linger / 2).await;
                let Some(inner) = weak.upgrade() else { return };
                let client = Client {
                    inner,
                    creds: creds.clone(),
                    umask: 0,
                };
                let batches = client.lock_state().held().opens.take_idle();
                for (server, (handles, gens)) in batches {
                    client.send_unhold(server, handles, gens).await;
                }
            }
        });
    }

    /// Sends the holds on `server` again (it answered a new lease: it forgot them).
    /// An object gone meanwhile is logged: its descriptors here get ESTALE.
    pub(crate) async fn rehold(&self, server: usize) {
        let todo = {
            let mut h = self.lock_state().held();
            let handles = h.opens.held_on(server);
            handles
                .into_iter()
                .map(|handle| (handle, h.opens.gen()))
                .collect::<Vec<_>>()
        };
        if todo.is_empty() {
            return;
        }
        tracing::info!(
            server = self.inner.pool.name(server),
            files = todo.len(),
            "the server forgot this client's open files: holding them again"
        );
        for (handle, gen) in todo {
            match self.send_hold(server, handle, gen).await {
                Ok(_) => {}
                Err(e) if e.errno == Errno::ESTALE => {
                    tracing::warn!(
                        "open file {handle:#x} is gone: it was deleted while its server was away"
                    );
                }
                Err(e) => tracing::warn!(
                    "cannot hold open file {handle:#x} again (tried at the next renewal): {e}"
                ),
            }
        }
    }

    /// Forgets every hold (the servers drop them when the client releases its
    /// leases, [`Client::release_all_locks`]); the servers they were on.
    pub(crate) fn take_opens(&self) -> Vec<usize> {
        let mut h = self.lock_state().held();
        let servers = h.opens.servers();
        h.opens.files.clear();
        servers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_holds_end_in_one_batch_per_server_after_the_linger() {
        let mut o = Opens {
            linger: Duration::from_secs(1),
            ..Opens::default()
        };
        for (h, server, idle) in [(1, 0, true), (2, 0, true), (3, 1, true), (4, 1, false)] {
            let mut open = Open::new(server, true);
            if idle {
                open.idle = Some(Instant::now());
            } else {
                open.count = 1;
            }
            o.files.insert(h, open);
        }
        assert!(o.take_idle().is_empty(), "too soon");
        tokio::time::advance(Duration::from_millis(1001)).await;
        let batches = o.take_idle();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[&0].0, vec![1, 2]);
        assert_eq!(batches[&1].0, vec![3]);
        let gens: Vec<u64> = batches.values().flat_map(|b| b.1.clone()).collect();
        assert!(
            gens.windows(2).all(|w| w[0] < w[1]),
            "fresh generations: {gens:?}"
        );
        assert_eq!(o.files.len(), 1, "the open one stays");
        assert!(o.on(1) && !o.on(0));
    }
}
