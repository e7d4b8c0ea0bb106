//! Appends that are atomic between clients (`O_APPEND`, `docs/locks.md`, "Appends").
//!
//! The end of a striped file is the largest end among its datafiles, on several data
//! servers; no one server sees every write. So the end is settled by a lock: an
//! appender takes the file's *appender's lock* (a whole-file write lock at the
//! metadata server that owns the file, kept apart from the locks programs take:
//! `LOCK_APPEND`, answered with the file's width), reads the end from the datafiles
//! that may hold bytes, writes there, and lets go once
//! the data servers have the bytes. Appends from any number of clients then follow
//! one another: none overwrites another, none leaves a hole.
//!
//! - **Cost.** Two round trips before the write: the lock, the sizes (one request per
//!   data server, in parallel); the unlock is sent after it, in the background where
//!   the runtime allows (`docs/benchmarks.md`).
//! - **Failures.** The lock lives under the client's lease like any other: a client
//!   that dies mid-append holds up other appenders for one lease at most. A server
//!   that restarts grants none for one lease (its grace period), by which time an
//!   append it had granted before is over.
//! - **Owners.** Each append is its own owner, so the threads and processes of one
//!   client also take turns.

use std::time::Duration;

use pvfs_proto::locks::{LockType, LOCK_APPEND, LOCK_WAIT, TO_EOF};
use pvfs_proto::{req, Handle, Request, Response};
use tokio::time::Instant;

use crate::error::Result;
use crate::file::File;
use crate::io::{self, WrittenStats};
use crate::pool::unexpected;
use crate::Client;

/// Pause between two tries of an unlock the server did not answer.
const UNLOCK_RETRY: Duration = Duration::from_millis(200);

/// An appender's lock this client holds (released by [`Client::append_unlock`]).
struct AppendLock {
    server: usize,
    handle: Handle,
    owner: u64,
    /// The file's width when it was granted.
    width: u32,
}

impl File {
    /// Writes `buf` at the end of the file, after every append of any client that
    /// returned before and before every one that starts after: where it landed and
    /// the bytes written.
    pub async fn append(&self, buf: &[u8]) -> Result<(u64, usize)> {
        let (at, n, _) = self.append_stats(buf).await?;
        Ok((at, n))
    }

    /// [`File::append`], with what the data servers said of the datafiles written.
    /// An empty `buf` writes nothing and takes no lock (at 0).
    pub async fn append_stats(&self, buf: &[u8]) -> Result<(u64, usize, WrittenStats)> {
        if buf.is_empty() {
            return Ok((0, 0, WrittenStats::default()));
        }
        let c = self.client();
        let lock = c.append_lock(self.handle()).await?;
        let written = async {
            let end = self.end(lock.width).await?;
            let (n, stats) = self.write_at_stats(end, buf).await?;
            Ok((end, n, stats))
        }
        .await;
        // Released after the bytes are on the data servers, failed or not; in the
        // background where a runtime runs tasks by itself, as nothing waits for it
        // here (the next append of this client, a new owner, waits at the server).
        if crate::locks::runs_tasks_itself() {
            let c = c.clone();
            tokio::spawn(async move { c.append_unlock(lock).await });
        } else {
            c.append_unlock(lock).await;
        }
        written
    }

    /// Where the file ends, from its first `width` datafiles (the file's width at
    /// its metadata server under the appender's lock: another client may have
    /// widened it since this one looked; past it no datafile holds a byte).
    async fn end(&self, width: u32) -> Result<u64> {
        let c = self.client();
        let layout = self.layout();
        let sized: Vec<usize> = (0..layout.datafiles.len().min(width as usize)).collect();
        let stats = io::datafile_stats(&c.inner.pool, &c.creds, layout, &sized).await?;
        Ok(crate::StripeTotals::of(layout.stripe(), stats.iter()).size)
    }
}

impl Client {
    /// Takes the appender's lock of `handle`, waiting for other appenders.
    async fn append_lock(&self, handle: Handle) -> Result<AppendLock> {
        let server = self.owner(handle)?;
        let owner = self.lock_state().next_append_owner();
        let request = Request::Lock(req::Lock {
            handle,
            owner: self.lock_owner(owner),
            typ: LockType::Write,
            start: 0,
            end: TO_EOF,
            pid: 0,
            flags: LOCK_WAIT | LOCK_APPEND,
            proof: self.lock_proof(handle),
        });
        // Not interruptible: a local file system's append waits for the one before
        // it the same way.
        match self
            .waiting_call(server, request, None, &mut || false)
            .await?
        {
            Response::AppendLocked { lease, width } => {
                let mut h = self.lock_state().held();
                h.observe(server, lease, false);
                *h.appending.entry(server).or_default() += 1;
                drop(h);
                self.keep_leases();
                Ok(AppendLock {
                    server,
                    handle,
                    owner,
                    width,
                })
            }
            other => Err(unexpected("Lock", &other)),
        }
    }

    /// Releases an appender's lock, trying again for up to a lease if the server
    /// does not answer (while this client renews its lease there, a lock it failed
    /// to release would hold up every other appender of the file).
    async fn append_unlock(&self, lock: AppendLock) {
        let request = Request::Unlock(req::Unlock {
            handle: lock.handle,
            owner: self.lock_owner(lock.owner),
            start: 0,
            end: TO_EOF,
            flags: LOCK_APPEND,
        });
        let give_up = Instant::now() + self.config().locks.lease;
        loop {
            match self.rpc(lock.server, request.clone()).await {
                Ok(Response::Done {}) => break,
                Ok(other) => {
                    tracing::warn!("releasing an appender's lock: {}", other.op_name());
                    break;
                }
                Err(e) if Instant::now() + UNLOCK_RETRY < give_up => {
                    tracing::debug!("releasing an appender's lock, again after: {e}");
                    tokio::time::sleep(UNLOCK_RETRY).await;
                }
                Err(e) => {
                    tracing::warn!(
                        "an appender's lock on {:#x} could not be released: {e}",
                        lock.handle
                    );
                    break;
                }
            }
        }
        let mut h = self.lock_state().held();
        if let Some(n) = h.appending.get_mut(&lock.server) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                h.appending.remove(&lock.server);
            }
        }
    }
}
