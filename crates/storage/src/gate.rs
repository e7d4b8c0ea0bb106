//! [`SlowGate`]: whether short calls may run on the thread that asks, closed for a
//! while after one of them was slow.
//!
//! Why: handing a short storage call to another thread and back costs two thread
//! wake-ups, more than many calls themselves; but a call that unexpectedly waits
//! (the kernel throttling writers, a checkpoint syncing a file) must not keep holding
//! request threads. A gate runs calls where they are asked while they stay quick, and
//! sends them back to their dedicated threads for a pause after a slow one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Opens and closes on the duration of the calls it runs.
pub struct SlowGate {
    /// The origin of the times below.
    born: Instant,
    /// A call longer than this closes the gate.
    slow: Duration,
    /// For how long.
    pause: Duration,
    /// Nanoseconds since `born` until which the gate is closed.
    closed_until: AtomicU64,
}

impl SlowGate {
    /// A gate closed for `pause` after a call that took longer than `slow`.
    pub fn new(slow: Duration, pause: Duration) -> SlowGate {
        SlowGate {
            born: Instant::now(),
            slow,
            pause,
            closed_until: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether calls may run on the asking thread now.
    pub fn open(&self) -> bool {
        self.now() >= self.closed_until.load(Ordering::Relaxed)
    }

    /// Runs `call` here, timing it: a slow one closes the gate for the pause.
    pub fn run<R>(&self, call: impl FnOnce() -> R) -> R {
        let start = self.now();
        let out = call();
        let end = self.now();
        let took = end.saturating_sub(start);
        if took > u64::try_from(self.slow.as_nanos()).unwrap_or(u64::MAX) {
            let pause = u64::try_from(self.pause.as_nanos()).unwrap_or(u64::MAX);
            self.closed_until
                .fetch_max(end.saturating_add(pause), Ordering::Relaxed);
            tracing::debug!(
                took_us = took / 1000,
                "a call on the asking thread was slow; using the dedicated threads for {:?}",
                self.pause
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_call_closes_the_gate_for_a_pause() {
        let slow = Duration::from_millis(1);
        let gate = SlowGate::new(slow, Duration::from_secs(1));
        assert!(gate.open());
        assert_eq!(gate.run(|| 7), 7);
        assert!(gate.open(), "a quick call leaves it open");
        gate.run(|| std::thread::sleep(slow * 3));
        assert!(!gate.open(), "a slow call closes it");
        // Reopened once the pause is over (moved back in time rather than waited for).
        gate.closed_until.store(gate.now(), Ordering::Relaxed);
        assert!(gate.open());
    }
}
