//! Deleting unlinked files' datafiles in the background, batched per data server.
//!
//! An unlink through a mount answers once its name and object are gone (one
//! metadata commit); the datafiles it leaves are queued here and each data server
//! gets them in batches (one `RemoveDatafiles` naming many), so a burst of unlinks
//! (`rm -rf`) costs each data server a request per batch, not one per file. Only
//! space is at stake: a datafile never deleted (a crash before its batch went) is
//! found by `pvfs fsck`.

use pvfs_proto::req;
use std::sync::Mutex;

use pvfs_proto::{Capability, Creds, Handle, Layout, Request};

use crate::Client;

/// Most datafiles one batch names.
const BATCH: usize = 1024;
/// How long a data server's deletions wait for others to join their batch (unless a
/// whole batch waits). One process unlinking files one after another queues a
/// file's datafiles every few hundred microseconds: sent at once, every unlink cost
/// each data server a request (and a commit) while `rm -rf` ran.
const LINGER: std::time::Duration = std::time::Duration::from_millis(10);

/// What waits to be deleted on one data server.
#[derive(Default)]
struct Queue {
    /// The user the queued deletions act as (one per batch).
    creds: Option<Creds>,
    handles: Vec<Handle>,
    tickets: Vec<Capability>,
    /// A task is sending this server's batches.
    busy: bool,
}

/// The queues of every data server.
pub(crate) struct Reaper {
    queues: Mutex<Vec<Queue>>,
    /// Woken each time a queue empties.
    idle: tokio::sync::Notify,
}

impl Reaper {
    pub(crate) fn new(servers: usize) -> Reaper {
        Reaper {
            queues: Mutex::new((0..servers).map(|_| Queue::default()).collect()),
            idle: tokio::sync::Notify::new(),
        }
    }
}

fn lock(m: &Mutex<Vec<Queue>>) -> std::sync::MutexGuard<'_, Vec<Queue>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Client {
    /// Queues the datafiles of a deleted file for deletion in the background (the
    /// caller's REMOVE `tickets` with them). Needs a tokio runtime.
    pub(crate) fn reap_datafiles(&self, layout: &Layout, tickets: &[Capability]) {
        let mut start = Vec::new();
        {
            let mut queues = lock(&self.inner.reaper.queues);
            // Every copy of every datafile goes, an heir's too.
            let map = self.inner.pool.cached_map();
            let copies = layout.datafiles.iter().flat_map(|df| {
                pvfs_proto::map::holders_of(map.as_deref(), layout.replicas, df)
                    .into_iter()
                    .map(move |s| (s as usize, df.handle))
            });
            for (server, handle) in copies {
                let Some(q) = queues.get_mut(server) else {
                    continue;
                };
                if q.creds.as_ref().is_some_and(|c| *c != self.creds) {
                    // Another user's batch is waiting: this one goes on its own.
                    let client = self.clone();
                    let tickets: Vec<Capability> = tickets
                        .iter()
                        .filter(|t| t.handle == handle)
                        .cloned()
                        .collect();
                    tokio::spawn(async move {
                        client.send_reaped(server, vec![handle], tickets).await;
                    });
                    continue;
                }
                q.creds = Some(self.creds.clone());
                q.handles.push(handle);
                q.tickets
                    .extend(tickets.iter().filter(|t| t.handle == handle).cloned());
                if !q.busy {
                    q.busy = true;
                    start.push(server);
                }
            }
        }
        for server in start {
            let client = self.clone();
            tokio::spawn(async move { client.drain_reaped(server).await });
        }
    }

    /// Sends server `server`'s queued deletions, a batch at a time, until none wait
    /// (each batch after [`LINGER`], unless a whole batch waits).
    async fn drain_reaped(&self, server: usize) {
        loop {
            let full = lock(&self.inner.reaper.queues)
                .get(server)
                .is_some_and(|q| q.handles.len() >= BATCH);
            if !full {
                tokio::time::sleep(LINGER).await;
            }
            let batch = {
                let mut queues = lock(&self.inner.reaper.queues);
                let Some(q) = queues.get_mut(server) else {
                    return;
                };
                if q.handles.is_empty() {
                    q.busy = false;
                    q.creds = None;
                    drop(queues);
                    self.inner.reaper.idle.notify_waiters();
                    return;
                }
                let n = q.handles.len().min(BATCH);
                let handles: Vec<Handle> = q.handles.drain(..n).collect();
                let (tickets, rest): (Vec<Capability>, Vec<Capability>) = q
                    .tickets
                    .drain(..)
                    .partition(|t| handles.contains(&t.handle));
                q.tickets = rest;
                let creds = q.creds.clone().unwrap_or_else(|| self.creds.clone());
                if q.handles.is_empty() {
                    q.creds = None;
                }
                (handles, tickets, creds)
            };
            let (handles, tickets, creds) = batch;
            self.with_creds(creds)
                .send_reaped(server, handles, tickets)
                .await;
        }
    }

    async fn send_reaped(&self, server: usize, handles: Vec<Handle>, tickets: Vec<Capability>) {
        let n = handles.len();
        let req = Request::RemoveDatafiles(req::RemoveDatafiles { handles, tickets });
        if let Err(e) = self.rpc(server, req).await {
            tracing::warn!(
                server = self.inner.pool.name(server),
                "{n} datafiles left behind (fsck removes them): {e}"
            );
        }
    }

    /// Waits until every queued datafile deletion was sent (for a clean end).
    pub async fn reaped(&self) {
        loop {
            let idle = self.inner.reaper.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if lock(&self.inner.reaper.queues).iter().all(|q| !q.busy) {
                return;
            }
            idle.await;
        }
    }
}
