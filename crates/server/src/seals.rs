//! How long this server's directory shards have been sealed (`SealDir`), so that a
//! seal its rmdir could not take back (the client gave up while this server was
//! down) does not refuse new names for good.
//!
//! A sealed shard refuses new entries while an rmdir (or a rename over a directory)
//! runs. That rmdir either removes the directory, whose other shards then stay sealed
//! for ever (a name added there would be lost with it), or unseals every shard. The
//! unseal may never arrive, so a name added to a sealed shard asks the directory's
//! owner (`handlers::sealed::gate`): the directory gone, ENOENT; still there and the
//! seal younger than [`Seals::grace`] (longer than any rmdir may take: it is a few
//! request deadlines), EAGAIN, busy (the rmdir may still finish); still there and
//! the seal older, the seal is abandoned and the commit that adds the name takes it
//! away. Seal times live in memory: a seal found after a
//! restart counts from the restart.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use pvfs_proto::Handle;
use tokio::sync::Notify;
use tokio::time::Instant;

/// When each shard sealed here since this process started was sealed.
pub struct Seals {
    since: Mutex<BTreeMap<Handle, Instant>>,
    /// Seals older than this were abandoned by their rmdir.
    grace: Duration,
    started: Instant,
    /// Woken when a seal is taken away.
    pub changed: Notify,
}

/// Bound on the seals remembered; past it the oldest entries go (their seals then
/// count from this process's start, which only makes them older).
const MAX_REMEMBERED: usize = 65_536;

impl Seals {
    /// Seals that an rmdir sending requests with `request_timeout` leaves behind for
    /// longer than it can run count as abandoned.
    pub fn new(request_timeout: Duration) -> Seals {
        Seals {
            since: Mutex::new(BTreeMap::new()),
            grace: request_timeout * 4,
            started: Instant::now(),
            changed: Notify::new(),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<Handle, Instant>> {
        self.since.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Shard `dir` is being sealed now (noted before the commit, so that a stale
    /// check racing it sees a fresh seal).
    pub fn sealing(&self, dir: Handle) {
        let mut map = self.map();
        if map.len() >= MAX_REMEMBERED && !map.contains_key(&dir) {
            let oldest = map.iter().min_by_key(|(_, t)| **t).map(|(h, _)| *h);
            if let Some(h) = oldest {
                map.remove(&h);
            }
        }
        map.insert(dir, Instant::now());
    }

    /// Shard `dir` was unsealed.
    pub fn unsealed(&self, dir: Handle) {
        self.map().remove(&dir);
        self.changed.notify_waiters();
    }

    /// Whether a seal of `dir` is older than the grace: abandoned by its rmdir.
    pub fn abandoned(&self, dir: Handle) -> bool {
        let since = self.map().get(&dir).copied().unwrap_or(self.started);
        since.elapsed() >= self.grace
    }

    /// How long until a seal of `dir` counts as abandoned.
    pub fn left(&self, dir: Handle) -> Duration {
        let since = self.map().get(&dir).copied().unwrap_or(self.started);
        self.grace.saturating_sub(since.elapsed())
    }
}
