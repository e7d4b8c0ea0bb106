//! Capabilities this client was granted (`pvfs_proto::cap`), kept per object and
//! user until they expire: data servers refuse reads, writes and truncates without
//! them, and the steps of removals and renames across servers carry them as tickets.
//!
//! Lookups ask for read rights (and a VISIT capability for the object's owner) with
//! every name they resolve, so opening a file for reading costs no extra request;
//! write rights are asked for when a file is first written (asking earlier would take
//! the set-user-ID bit off files only looked at). Before a capability expires, or
//! when a data server says it did, it is renewed at the object's owner by showing the
//! old one (`GetAttr` with `want` and `proof`).

use pvfs_proto::req;
use std::collections::HashMap;
use std::sync::Mutex;

use pvfs_proto::{rights, Capability, Errno, Handle, Request, Response};

use crate::error::{Error, Result};
use crate::pool::unexpected;
use crate::Client;

/// Most (object, user) pairs remembered; beyond it the expired, then all, go.
const MAX_ENTRIES: usize = 65536;

/// What one user was granted on one object: the object's capability first, then
/// for a file with READ or WRITE one per datafile, in layout order.
#[derive(Clone, Debug)]
pub(crate) struct Granted {
    pub caps: Vec<Capability>,
    /// When to renew: three quarters into the capabilities' life as received.
    renew_at: u64,
}

impl Granted {
    /// Rights granted on the object.
    pub fn rights(&self) -> u32 {
        self.caps.first().map_or(0, |c| c.rights)
    }

    fn expires(&self) -> u64 {
        self.caps.iter().map(|c| c.expires).min().unwrap_or(0)
    }

    /// The capability for datafile `index`, if data rights were granted.
    pub fn datafile(&self, index: usize) -> Option<&Capability> {
        self.caps.get(index + 1)
    }

    /// The capability on the object itself.
    pub fn object(&self) -> Option<&Capability> {
        self.caps.first()
    }

    fn fresh(&self) -> bool {
        now_secs() < self.renew_at
    }

    /// Capabilities just received.
    fn new(caps: Vec<Capability>) -> Granted {
        let now = now_secs();
        let expires = caps.iter().map(|c| c.expires).min().unwrap_or(0);
        Granted {
            caps,
            renew_at: now.saturating_add(expires.saturating_sub(now) / 4 * 3),
        }
    }
}

fn now_secs() -> u64 {
    pvfs_proto::clock::now_secs()
}

/// Granted capabilities by (object, uid), and tickets (REMOVE, MOVE) apart.
#[derive(Default)]
pub(crate) struct CapCache {
    map: Mutex<HashMap<(Handle, u32), Granted>>,
    tickets: Mutex<HashMap<(Handle, u32), Capability>>,
}

impl CapCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Handle, u32), Granted>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, handle: Handle, uid: u32) -> Option<Granted> {
        self.lock().get(&(handle, uid)).cloned()
    }

    /// Remembers `caps` (as an answer laid them out) for `uid`; an answer that grants
    /// no data rights does not replace data capabilities still held.
    fn put(&self, handle: Handle, uid: u32, caps: Vec<Capability>) {
        if caps.is_empty() {
            return;
        }
        let mut m = self.lock();
        if m.len() >= MAX_ENTRIES {
            let now = now_secs();
            m.retain(|_, g| g.expires() > now);
            if m.len() >= MAX_ENTRIES {
                m.clear();
            }
        }
        let new = Granted::new(caps);
        match m.get(&(handle, uid)) {
            Some(old) if old.fresh() && old.caps.len() > new.caps.len() => {}
            _ => {
                m.insert((handle, uid), new);
            }
        }
    }

    fn forget(&self, handle: Handle, uid: u32) {
        self.lock().remove(&(handle, uid));
    }

    fn put_ticket(&self, uid: u32, cap: Capability) {
        let mut t = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
        if t.len() >= MAX_ENTRIES {
            let now = now_secs();
            t.retain(|_, c| c.expires > now);
            if t.len() >= MAX_ENTRIES {
                t.clear();
            }
        }
        t.insert((cap.handle, uid), cap);
    }

    fn ticket(&self, handle: Handle, uid: u32, right: u32) -> Option<Capability> {
        let t = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
        t.get(&(handle, uid)).filter(|c| c.allows(right)).cloned()
    }
}

impl Client {
    /// Remembers the capabilities an answer granted this client's user on `handle`
    /// (a grant with REMOVE or MOVE is also kept as a ticket).
    pub(crate) fn remember_caps(&self, handle: Handle, caps: Vec<Capability>) {
        if let Some(first) = caps.first() {
            if first.rights & (rights::REMOVE | rights::MOVE) != 0 {
                self.inner.caps.put_ticket(self.creds.uid, first.clone());
            }
        }
        self.inner.caps.put(handle, self.creds.uid, caps);
    }

    /// Remembers tickets an answer granted (REMOVE on what is left to delete).
    pub(crate) fn remember_tickets(&self, tickets: &[Capability]) {
        for t in tickets {
            self.inner.caps.put_ticket(self.creds.uid, t.clone());
        }
    }

    /// A ticket held on `handle` granting `right` (for a step of a removal or a
    /// rename), if any.
    pub(crate) fn ticket(&self, handle: Handle, right: u32) -> Option<Capability> {
        self.inner.caps.ticket(handle, self.creds.uid, right)
    }

    /// A VISIT capability on `handle`, for a server to see this client reached it
    /// through a name (a key holder needs none): the one held from a lookup, renewed
    /// at the object's owner if it is old.
    pub(crate) async fn proof(&self, handle: Handle) -> Option<Capability> {
        if self.inner.pool.holds_key() {
            return None;
        }
        let g = self.caps_for(handle, rights::VISIT).await.ok()?;
        g.object().cloned()
    }

    /// Forgets what is held on `handle` (a server said it expired).
    pub(crate) fn forget_caps(&self, handle: Handle) {
        self.inner.caps.forget(handle, self.creds.uid);
    }

    /// Capabilities granting `need` on file `handle`: held ones if fresh, otherwise
    /// asked of its owner (showing what is held as proof). EACCES when the owner does
    /// not grant them.
    pub(crate) async fn caps_for(&self, handle: Handle, need: u32) -> Result<Granted> {
        let held = self.inner.caps.get(handle, self.creds.uid);
        if let Some(g) = &held {
            if g.fresh() && g.rights() & need == need {
                return Ok(g.clone());
            }
        }
        let want = need | held.as_ref().map_or(0, |g| g.rights()) & (rights::READ | rights::WRITE);
        let proof = held.as_ref().and_then(|g| g.object().cloned());
        let owner = self.owner(handle)?;
        let caps = match self
            .rpc(
                owner,
                Request::GetAttr(req::GetAttr {
                    handle,
                    want,
                    proof,
                }),
            )
            .await?
        {
            Response::Attr { caps, .. } => caps,
            other => return Err(unexpected("GetAttr", &other)),
        };
        let g = Granted::new(caps);
        if g.rights() & need != need {
            return Err(Error::new(
                Errno::EACCES,
                format!(
                    "{handle:#x}: permission denied ({} not granted)",
                    rights::describe(need & !g.rights())
                ),
            ));
        }
        self.inner.caps.forget(handle, self.creds.uid);
        self.inner.caps.put(handle, self.creds.uid, g.caps.clone());
        Ok(g)
    }
}
