//! At most once: a mutation that must not happen twice ([`Effect::Once`]) is answered
//! from a record when it is retried.
//!
//! A client attaches a [`RetryKey`] to every such mutation. Its handler makes its
//! change through [`Once::commit`], which records the answer in the same commit as the
//! change; a retry with the same key (after a lost answer, a broken connection, or a
//! server restart) finds the record and gets the same answer, the change not made
//! again. A retry that arrives while the first attempt is still running waits for it
//! ([`Retries`]), so the two never race. Records are kept for [`keep`] (a dozen times
//! longer than a client retries), so the table holds a few minutes of mutations: it
//! and the server's memory stay bounded under a sustained load.
//!
//! A mutation also commits nothing after its deadline: one request timeout after it
//! arrived (when its client has given that attempt up). A call that failed without
//! an answer has made its change, if ever, by then — plus the time its request was
//! on its way — so what the client sees after that is final.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pvfs_proto::{decode, encode, Effect, Errno, Response, RetryKey, Timespec};
use pvfs_storage::{MetaStore, MetaTxn, StorageError};
use tokio::sync::Notify;

use crate::error::{OpError, OpResult};

/// Shortest time a recorded reply is kept.
pub const KEEP_AT_LEAST: Duration = Duration::from_secs(120);
/// How often old replies are forgotten.
const EXPIRE_EVERY: Duration = Duration::from_secs(30);
/// Most replies forgotten per commit (bounds one expiry commit).
const EXPIRE_BATCH: usize = 10_000;

/// How long a recorded reply is kept: a client retries a mutation only until its
/// request deadline (and waits at most one more for the last attempt), so 24 request
/// timeouts, and at least [`KEEP_AT_LEAST`], is far beyond any retry.
pub fn keep(config: &pvfs_config::Config) -> Duration {
    KEEP_AT_LEAST.max(config.timeouts.request.saturating_mul(24))
}

/// One request's at-most-once wrapper: its retry key, and whether its handler made
/// its change through it.
pub struct Once {
    effect: Effect,
    key: Option<RetryKey>,
    deadline: tokio::time::Instant,
    used: Arc<AtomicBool>,
}

/// Tells dispatch whether a request's handler went through its [`Once`].
pub struct Used(Arc<AtomicBool>);

impl Used {
    /// Whether [`Once::commit`] or [`Once::recorded`] ran.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl Once {
    /// The wrapper of a request of `effect` carrying `key`, which commits nothing
    /// after `deadline`.
    pub fn new(
        effect: Effect,
        key: Option<RetryKey>,
        deadline: tokio::time::Instant,
    ) -> (Once, Used) {
        let used = Arc::new(AtomicBool::new(false));
        (
            Once {
                effect,
                key,
                deadline,
                used: used.clone(),
            },
            Used(used),
        )
    }

    /// The request's retry key, derived for a step this server asks of another on
    /// its behalf: the same for every retry of the request, so the other server
    /// answers a repeated step from its own record.
    pub fn peer_key(&self) -> Option<RetryKey> {
        self.key.map(|k| RetryKey {
            client: k.client ^ 0x9e37_79b9_7f4a_7c15,
            seq: k.seq,
        })
    }

    /// Runs `f` as one commit whose answer is recorded with the change; a retry of a
    /// request that was done finds the record and gets the answer without running
    /// `f`. An error is not recorded (nothing changed).
    pub async fn commit<F>(&self, meta: &MetaStore, f: F) -> OpResult<Response>
    where
        F: FnOnce(&mut MetaTxn<'_>) -> OpResult<Response> + Send + 'static,
    {
        debug_assert_eq!(
            self.effect,
            Effect::Once,
            "only a mutation that must happen once records its answer"
        );
        self.used.store(true, Ordering::Release);
        let key = self.key;
        if tokio::time::Instant::now() >= self.deadline {
            // Its client has given this attempt up: a change now would surprise a
            // client that looked and saw it not made. (A retry, a new attempt with
            // its own deadline, finds no record and does it.)
            return Err(OpError::of_kind(
                pvfs_proto::ErrorKind::Unreachable,
                Errno::ETIMEDOUT,
                "the request's deadline passed before its change could be made: nothing changed",
            ));
        }
        meta.write_with(move |t| {
            if let Some(done) = replayed(t, key)? {
                return Ok(done);
            }
            let answer = f(t)?;
            if let Some(k) = key {
                t.put_reply(k.client, k.seq, &encode(&answer), Timespec::now().secs);
            }
            Ok(answer)
        })
        .await
    }

    /// The recorded answer of this request, if it was done here, from a snapshot:
    /// for a handler whose first step is elsewhere and must not be repeated once the
    /// request was done (it still makes its change through [`Once::commit`]).
    pub fn recorded(&self, meta: &MetaStore) -> OpResult<Option<Response>> {
        self.used.store(true, Ordering::Release);
        let Some(k) = self.key else {
            return Ok(None);
        };
        match meta.read()?.get_reply(k.client, k.seq)? {
            None => Ok(None),
            Some(bytes) => Ok(Some(decode_reply(k, &bytes)?)),
        }
    }
}

/// The reply of the mutation `key` names, if it was already done here.
fn replayed(t: &MetaTxn<'_>, key: Option<RetryKey>) -> OpResult<Option<Response>> {
    let Some(k) = key else {
        return Ok(None);
    };
    match t.get_reply(k.client, k.seq)? {
        None => Ok(None),
        Some(bytes) => Ok(Some(decode_reply(k, &bytes)?)),
    }
}

/// A recorded reply's bytes as the reply.
fn decode_reply(k: RetryKey, bytes: &[u8]) -> Result<Response, StorageError> {
    decode(bytes).map_err(|e| StorageError::Corrupt {
        what: format!("recorded reply {:#x}/{}: {e}", k.client, k.seq),
    })
}

/// The retry keys of the mutations being done now: a retry that arrives while the
/// first attempt runs (its answer was lost, or its connection broke, before it was
/// done) waits for it. At most one entry per request in flight.
#[derive(Default)]
pub struct Retries {
    running: Mutex<HashMap<RetryKey, Arc<Notify>>>,
}

/// Marks a retry key as being done until dropped.
pub struct Running<'a> {
    retries: &'a Retries,
    key: RetryKey,
    done: Arc<Notify>,
}

impl Retries {
    /// Waits (at most `wait`) until no other request with `key` runs, then marks it
    /// as running. EAGAIN (busy) if the other attempt is still running after `wait`.
    pub async fn enter(&self, key: RetryKey, wait: Duration) -> OpResult<Running<'_>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let other = {
                let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
                match running.get(&key) {
                    Some(done) => done.clone(),
                    None => {
                        let done = Arc::new(Notify::new());
                        running.insert(key, done.clone());
                        return Ok(Running {
                            retries: self,
                            key,
                            done,
                        });
                    }
                }
            };
            let finished = other.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            // It may have finished between the look and the registration.
            if !self.is_running(key, &other) {
                continue;
            }
            if tokio::time::timeout_at(deadline, finished).await.is_err() {
                return Err(OpError::busy(
                    Errno::EAGAIN,
                    "an earlier attempt of this request is still running",
                ));
            }
        }
    }

    /// Whether `key` is marked running by the attempt that holds `done`.
    fn is_running(&self, key: RetryKey, done: &Arc<Notify>) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.get(&key).is_some_and(|d| Arc::ptr_eq(d, done))
    }

    /// Retry keys being done now.
    pub fn len(&self) -> usize {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut running = self
            .retries
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if running
            .get(&self.key)
            .is_some_and(|d| Arc::ptr_eq(d, &self.done))
        {
            running.remove(&self.key);
        }
        drop(running);
        self.done.notify_waiters();
    }
}

/// Forgets replies older than `keep`, every [`EXPIRE_EVERY`], until the server stops.
pub async fn expire_loop(meta: MetaStore, keep: Duration) {
    let mut tick = tokio::time::interval(EXPIRE_EVERY);
    let keep = keep.as_secs().min(i64::MAX as u64) as i64;
    loop {
        tick.tick().await;
        let before = Timespec::now().secs.saturating_sub(keep);
        loop {
            match meta
                .write(move |t| t.expire_replies(before, EXPIRE_BATCH))
                .await
            {
                Ok(n) if n == EXPIRE_BATCH => continue,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!("expiring recorded replies failed: {e}");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_retry_waits_for_the_attempt_that_runs() {
        let retries = Arc::new(Retries::default());
        let key = RetryKey { client: 1, seq: 2 };
        let first = retries.enter(key, Duration::from_secs(5)).await.unwrap();
        // Another key does not wait.
        let other = retries
            .enter(RetryKey { client: 1, seq: 3 }, Duration::from_millis(1))
            .await
            .unwrap();
        drop(other);
        // The same key waits, and gives up busy after its wait.
        let err = retries
            .enter(key, Duration::from_millis(20))
            .await
            .err()
            .unwrap();
        assert_eq!(err.kind, pvfs_proto::ErrorKind::Busy);
        let r = retries.clone();
        let waiting = tokio::spawn(async move {
            let _second = r.enter(key, Duration::from_secs(30)).await.unwrap();
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "the retry runs only after the first"
        );
        drop(first);
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(retries.is_empty());
    }
}
