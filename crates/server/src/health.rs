//! How this server is doing, and the supervisor that heals a failed metadata store.
//!
//! After an I/O error it cannot undo (a full disk when its redo log must checkpoint,
//! EIO), the metadata store fails (`pvfs_storage::StoreHealth::Failed`): every
//! metadata operation fails at once with that error's errno, while data operations go
//! on. [`supervise`] then reopens the store the way a restart opens it (the redo log
//! redone into the database first) with a backoff from [`RETRY_FIRST`] doubling to
//! [`RETRY_MAX`]:
//!
//! - a full disk (ENOSPC, EDQUOT) is waited out however long it lasts: the store heals
//!   once space returns;
//! - a damaged store (corrupt, another format or server) or a read-only file system
//!   (the kernel's answer to I/O errors it gave up on) cannot heal by waiting: the
//!   server gives up at once;
//! - any other error (EIO) is retried for [`GIVE_UP_AFTER`], then the server gives up.
//!
//! Giving up ends [`crate::run`] with that error (the `pvfs server` process exits 1
//! with one line saying why), so `pvfs start` or a service manager can restart it.
//! Meanwhile `Ping` and `StatFs` answer the server's [`Health`] as degraded, with the
//! reason (docs/reliability.md, "A failed metadata store").

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pvfs_proto::message::{Health as WireHealth, HealthState};
use pvfs_proto::Errno;
use pvfs_storage::{MetaStore, StorageError, StoreHealth};
use tokio::sync::watch;

use crate::exec::Exec;
use crate::ratelimit::LogLimit;

/// Pause before the first reopen of a failed store.
pub const RETRY_FIRST: Duration = Duration::from_millis(200);
/// Longest pause between two reopen attempts (the pause doubles up to it).
pub const RETRY_MAX: Duration = Duration::from_secs(5);
/// How long errors other than a full disk are retried before the server gives up.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(60);
/// At most one log line about failed reopen attempts per this interval.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// EDQUOT (Linux): a full quota is a full disk for the store.
const EDQUOT: Errno = Errno(122);

/// The server's health beyond its metadata store's own state: what the supervisor is
/// doing about a failure. One per server ([`crate::ctx::Ctx::health`]).
pub struct Health {
    plan: Mutex<Plan>,
    /// Set once the supervisor gives up: the error the server stops with.
    fatal: watch::Sender<Option<StorageError>>,
}

/// What the supervisor is doing.
#[derive(Default)]
struct Plan {
    /// When the next reopen attempt is due (while retrying).
    next_attempt: Option<Instant>,
    /// Why the last reopen failed when it gave up (the server is stopping).
    gave_up: Option<String>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            plan: Mutex::new(Plan::default()),
            fatal: watch::Sender::new(None),
        }
    }
}

impl Health {
    fn plan(&self) -> std::sync::MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The health answered with `Pong` and `StatFs`: ok, or degraded with the errno
    /// metadata operations get and a one-line reason, e.g. "metadata store failed: No
    /// space left on device; retrying (2 attempts so far, next in 1 s)".
    pub fn report(&self, meta: &MetaStore) -> WireHealth {
        let StoreHealth::Failed(f) = meta.health() else {
            return WireHealth::default();
        };
        let plan = self.plan();
        let what = match (&plan.gave_up, plan.next_attempt) {
            (Some(why), _) => format!("reopening it failed: {why}; giving up, the server stops"),
            (None, next) => {
                let mut s = "retrying".to_string();
                let mut detail = Vec::new();
                if f.attempts > 0 {
                    let n = match f.attempts {
                        1 => "1 attempt so far".to_string(),
                        n => format!("{n} attempts so far"),
                    };
                    detail.push(match &f.last_attempt {
                        Some(e) if e.errno() != f.error.errno() => {
                            format!("{n}, the last: {}", failed_cause(&e.to_failed()))
                        }
                        _ => n,
                    });
                }
                if let Some(at) = next {
                    let secs = at.saturating_duration_since(Instant::now()).as_secs_f64();
                    detail.push(format!("next in {}", seconds(secs)));
                }
                if !detail.is_empty() {
                    s.push_str(&format!(" ({})", detail.join(", ")));
                }
                s
            }
        };
        WireHealth {
            state: HealthState::Degraded,
            errno: f.error.errno().0,
            reason: format!("{}; {what}", f.error),
            since_secs: f.since.elapsed().as_secs(),
        }
    }

    /// Waits until the supervisor gives up; returns the error the server stops with.
    pub async fn fatal(&self) -> StorageError {
        let mut rx = self.fatal.subscribe();
        let fatal = match rx.wait_for(Option::is_some).await {
            Ok(e) => e.clone(),
            // The sender lives as long as `self`: not reached.
            Err(_) => None,
        };
        match fatal {
            Some(e) => e,
            None => std::future::pending().await,
        }
    }

    fn set_next(&self, at: Option<Instant>) {
        self.plan().next_attempt = at;
    }

    fn give_up(&self, why: String, error: StorageError) {
        {
            let mut plan = self.plan();
            plan.next_attempt = None;
            plan.gave_up = Some(why);
        }
        self.fatal.send_replace(Some(error));
    }
}

/// "0.2 s", "3 s".
fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

/// What to do after a reopen attempt failed with `e`, `elapsed` after the first.
enum Verdict {
    Retry,
    /// With what to add to "giving up" (e.g. " after 60 s").
    GiveUp(String),
}

fn verdict(e: &StorageError, elapsed: Duration) -> Verdict {
    let errno = e.errno();
    if errno == Errno::ENOSPC || errno == EDQUOT {
        Verdict::Retry
    } else if e.is_damage() || errno == Errno::EROFS {
        Verdict::GiveUp(String::new())
    } else if elapsed >= GIVE_UP_AFTER {
        Verdict::GiveUp(format!(" after {} s", elapsed.as_secs()))
    } else {
        Verdict::Retry
    }
}

/// Heals the metadata store `meta` each time it fails, reopening it with `exec`,
/// until the server stops or the supervisor gives up (then [`Health::fatal`] of
/// `health` completes and the server stops).
pub async fn supervise(health: &Health, meta: &MetaStore, exec: Exec) {
    while meta.wait_failed().await {
        if let Err((why, error)) = heal(health, meta, exec).await {
            tracing::error!("{error}");
            health.give_up(why, error);
            return;
        }
    }
}

/// Reopens the failed store with backoff until it works (Ok), the store is closed
/// (Ok: the server is stopping), or there is no point (Err: why, and the error to
/// stop with).
async fn heal(health: &Health, meta: &MetaStore, exec: Exec) -> Result<(), (String, StorageError)> {
    let started = Instant::now();
    let limit = LogLimit::new(LOG_EVERY);
    let mut pause = RETRY_FIRST;
    let mut attempt = 0u32;
    tracing::warn!(
        "reopening the failed metadata store: first attempt in {}, then backing off to one every {}",
        seconds(RETRY_FIRST.as_secs_f64()),
        seconds(RETRY_MAX.as_secs_f64())
    );
    loop {
        health.set_next(Some(Instant::now() + pause));
        tokio::time::sleep(pause).await;
        attempt += 1;
        let store = meta.clone();
        let result = match exec.spawn(move || store.reopen()).await {
            Ok(r) => r,
            Err(e) => Err(StorageError::Io(Arc::new(std::io::Error::other(format!(
                "the reopen task failed: {e}"
            ))))),
        };
        match result {
            Ok(()) => {
                health.set_next(None);
                tracing::info!(
                    attempts = attempt,
                    "metadata store reopened after {}: metadata operations work again",
                    seconds(started.elapsed().as_secs_f64())
                );
                return Ok(());
            }
            Err(StorageError::Closed) => {
                health.set_next(None);
                return Ok(());
            }
            Err(e) => match verdict(&e, started.elapsed()) {
                Verdict::Retry => {
                    pause = (pause * 2).min(RETRY_MAX);
                    if let Some(dropped) = limit.allow("reopen") {
                        tracing::warn!(
                            attempt,
                            dropped,
                            "reopening the metadata store failed: {e}; next attempt in {}",
                            seconds(pause.as_secs_f64())
                        );
                    }
                }
                Verdict::GiveUp(why) => {
                    let failed = match meta.health() {
                        StoreHealth::Failed(f) => f.error,
                        _ => e.to_failed(),
                    };
                    let error = StorageError::Failed {
                        errno: e.errno(),
                        cause: format!(
                            "{}; reopening it failed: {}; giving up{why}",
                            failed_cause(&failed),
                            failed_cause(&e.to_failed())
                        ),
                    };
                    return Err((failed_cause(&e.to_failed()), error));
                }
            },
        }
    }
}

/// The cause inside a [`StorageError::Failed`] (its text without "metadata store
/// failed: ").
fn failed_cause(e: &StorageError) -> String {
    match e {
        StorageError::Failed { cause, .. } => cause.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(errno: i32) -> StorageError {
        StorageError::Io(Arc::new(std::io::Error::from_raw_os_error(errno)))
    }

    #[test]
    fn a_full_disk_is_waited_out_damage_is_not_and_io_errors_for_a_while() {
        let retried = |e: &StorageError, after| matches!(verdict(e, after), Verdict::Retry);
        let a_day = Duration::from_secs(86400);
        for full in [os(28), os(EDQUOT.0 as i32)] {
            assert!(retried(&full, a_day), "a full disk is waited out: {full}");
        }
        let damaged = StorageError::Corrupt {
            what: "a bad page".into(),
        };
        for hopeless in [damaged, os(30)] {
            assert!(!retried(&hopeless, Duration::ZERO), "{hopeless}");
        }
        assert!(retried(&os(5), GIVE_UP_AFTER / 2));
        assert!(!retried(&os(5), GIVE_UP_AFTER));
    }
}
