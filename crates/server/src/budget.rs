//! The receive-buffer budget (`[limits] buffers`): every byte of a frame's body and
//! data is counted, in [`BUDGET_UNIT`]s, before it is read or allocated, and released
//! once used, so the memory clients can make a server hold is bounded whatever they
//! send. One client address may hold at most its [`Share`] of it (`crate::limits`
//! gives each address one), so no client starves the others.
//!
//! A frame waits for its units as long as the server makes progress: a wait gives up
//! only after a whole request timeout in which no held units were released.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Granularity of the receive-buffer budget.
pub const BUDGET_UNIT: u64 = 4 << 10;

/// Size of the buffers bulk data moves in (one frame's data); a client address's
/// share of the budget is never smaller, so each can always move a frame.
pub const CHUNK: usize = 4 << 20;

/// The budget units `bytes` take.
pub fn units(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(BUDGET_UNIT)).unwrap_or(u32::MAX)
}

/// The server's receive-buffer budget, and how often held units were released.
pub struct Budget {
    total: Arc<Semaphore>,
    units: u32,
    /// Count of releases: a frame waiting for units keeps waiting while it moves.
    released: AtomicU64,
    /// How long a wait lasts without any release before it gives up.
    patience: Duration,
}

/// A part of the [`Budget`] one holder (a client address) may hold at once.
pub struct Share {
    units: Arc<Semaphore>,
    size: u32,
}

impl Share {
    /// A share of `size` units.
    pub fn new(size: u32) -> Share {
        Share {
            units: Arc::new(Semaphore::new(size as usize)),
            size,
        }
    }

    /// Units of the share not held now.
    pub fn available(&self) -> usize {
        self.units.available_permits()
    }
}

/// Units held for one frame, of its holder's share and of the server's budget,
/// released (and counted as progress) when dropped.
pub struct Held {
    _share: OwnedSemaphorePermit,
    _total: OwnedSemaphorePermit,
    budget: Arc<Budget>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.released.fetch_add(1, Ordering::Release);
    }
}

impl Budget {
    /// A budget of `bytes` (at least one unit) whose waits give up after `patience`
    /// without any release (the request timeout).
    pub fn new(bytes: u64, patience: Duration) -> Arc<Budget> {
        let units = u32::try_from((bytes / BUDGET_UNIT).max(1)).unwrap_or(u32::MAX);
        Arc::new(Budget {
            total: Arc::new(Semaphore::new(units as usize)),
            units,
            released: AtomicU64::new(0),
            patience,
        })
    }

    /// The size of the budget, in units.
    pub fn units(&self) -> u32 {
        self.units
    }

    /// Units of the budget not held now.
    pub fn available(&self) -> usize {
        self.total.available_permits()
    }

    /// How many holds were released so far.
    pub fn releases(&self) -> u64 {
        self.released.load(Ordering::Acquire)
    }

    /// Waits for `units` of `share`, then of the budget. A frame larger than the
    /// share or the budget takes all of it (asking more would wait forever). Waiting
    /// goes on while some hold is released (the server makes progress); a whole
    /// [`Budget::new`] patience without one gives up (`None`).
    pub async fn hold(self: &Arc<Self>, share: &Share, units: u32) -> Option<Held> {
        let of_share = self
            .wait(share.units.clone(), units.min(share.size))
            .await?;
        let of_total = self.wait(self.total.clone(), units.min(self.units)).await?;
        Some(Held {
            _share: of_share,
            _total: of_total,
            budget: self.clone(),
        })
    }

    async fn wait(&self, sem: Arc<Semaphore>, units: u32) -> Option<OwnedSemaphorePermit> {
        let acquire = sem.acquire_many_owned(units);
        tokio::pin!(acquire);
        loop {
            let released = self.releases();
            match tokio::time::timeout(self.patience, &mut acquire).await {
                Ok(Ok(permit)) => return Some(permit),
                Ok(Err(_)) => return None,
                Err(_) if self.releases() != released => continue,
                Err(_) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn holds_are_counted_against_the_share_and_the_budget_until_dropped() {
        let budget = Budget::new(10 * BUDGET_UNIT, Duration::from_secs(30));
        assert_eq!((budget.units(), budget.available()), (10, 10));
        let (a, b) = (Share::new(6), Share::new(6));
        let a1 = budget.hold(&a, 4).await.unwrap();
        let b1 = budget.hold(&b, 5).await.unwrap();
        assert_eq!(
            (a.available(), b.available(), budget.available()),
            (2, 1, 1)
        );
        assert_eq!(budget.releases(), 0);
        drop(a1);
        assert_eq!((a.available(), budget.available()), (6, 5));
        assert_eq!(budget.releases(), 1);
        drop(b1);
        assert_eq!((b.available(), budget.available()), (6, 10));
        assert_eq!(budget.releases(), 2);
        // A frame larger than its share takes the whole share, and its own size of
        // the budget.
        let a2 = budget.hold(&a, 8).await.unwrap();
        assert_eq!((a.available(), budget.available()), (0, 2));
        drop(a2);
        assert_eq!((a.available(), budget.available()), (6, 10));
        assert_eq!(budget.releases(), 3);
        // One larger than the whole budget takes the whole budget.
        let big = Share::new(100);
        let all = budget.hold(&big, 50).await.unwrap();
        assert_eq!((big.available(), budget.available()), (50, 0));
        drop(all);
        assert_eq!(budget.available(), 10);
        assert_eq!(units(0), 0);
        assert_eq!(units(1), 1);
        assert_eq!(units(BUDGET_UNIT + 1), 2);
    }

    #[tokio::test]
    async fn a_wait_gives_up_only_after_a_patience_without_releases() {
        let patience = Duration::from_secs(1);
        let budget = Budget::new(8 * BUDGET_UNIT, patience);
        let (mine, other) = (Share::new(4), Share::new(4));
        // My share is full: my next frame waits for it.
        let first = budget.hold(&mine, 4).await.unwrap();
        // Nothing is released: the wait ends, empty, after the patience.
        let start = Instant::now();
        assert!(budget.hold(&mine, 1).await.is_none());
        assert!(start.elapsed() >= patience);
        // Another address keeps holding and releasing (the server makes progress)
        // for three patiences: my wait goes on, and succeeds once my first frame is
        // released.
        let busy = async {
            let start = Instant::now();
            while start.elapsed() < patience * 3 {
                let held = budget.hold(&other, 1).await;
                assert!(held.is_some(), "the other address has room");
                tokio::time::sleep(patience / 20).await;
            }
            drop(first);
        };
        let wait = async {
            let start = Instant::now();
            let held = budget.hold(&mine, 1).await;
            (held.is_some(), start.elapsed())
        };
        let ((), (got, waited)) = tokio::join!(busy, wait);
        assert!(got, "the wait went on while the server made progress");
        assert!(waited >= patience * 2, "it waited {waited:?}");
    }
}
