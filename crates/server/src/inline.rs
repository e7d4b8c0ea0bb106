//! Small storage calls made on the async thread that received the request.
//!
//! Why: storage calls block, so they normally run on tokio's blocking threads; the
//! hand-off there and back costs two thread wake-ups, about 20 µs of a 4 KiB write's
//! 105 µs through the mount on the 2-vCPU machine of `docs/benchmarks.md`, more than
//! the call itself (a copy into or out of the page cache).
//!
//! What runs inline: a write of at most [`INLINE_MAX`] bytes into a datafile already
//! open (nothing to open or create), the `fstat` after it, and a read of at most
//! [`INLINE_MAX`] bytes whose every byte is in the page cache (`RWF_NOWAIT`: a read
//! never waits for the disk on an async thread). Everything else, and every call of a
//! backend that offers no inline path (the fault-injection wrapper of the tests),
//! goes to the blocking threads as before.
//!
//! What can still block: a buffered write waits when the kernel throttles writers
//! (dirty pages over its limits) or for the file's lock held by a large write. A call
//! that took longer than [`SLOW`] closes the inline path for [`PAUSE`]: a server
//! under write pressure goes back to the blocking threads and keeps its async threads
//! for everything else, so at most one such wait per async thread per pause.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Bytes a storage call may move on an async thread at most.
pub const INLINE_MAX: usize = 64 << 10;
/// An inline call taking longer than this closes the inline path for [`PAUSE`].
pub const SLOW: Duration = Duration::from_millis(1);
/// How long the inline path stays closed after a slow call.
pub const PAUSE: Duration = Duration::from_secs(1);

/// Whether small storage calls may run inline now, and the timing that decides it.
pub struct InlineIo {
    /// The origin of the times below.
    born: Instant,
    /// Nanoseconds since `born` until which calls go to the blocking threads.
    closed_until: AtomicU64,
}

impl Default for InlineIo {
    fn default() -> InlineIo {
        InlineIo {
            born: Instant::now(),
            closed_until: AtomicU64::new(0),
        }
    }
}

impl InlineIo {
    fn now(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether a call moving `bytes` may run inline now.
    pub fn allows(&self, bytes: usize) -> bool {
        bytes <= INLINE_MAX && self.now() >= self.closed_until.load(Ordering::Relaxed)
    }

    /// Runs `call` here, timing it: a slow one closes the inline path for a while.
    pub fn run<R>(&self, call: impl FnOnce() -> R) -> R {
        let start = self.now();
        let out = call();
        let end = self.now();
        if end.saturating_sub(start) > SLOW.as_nanos() as u64 {
            let until = end.saturating_add(PAUSE.as_nanos() as u64);
            self.closed_until.fetch_max(until, Ordering::Relaxed);
            tracing::debug!(
                took_us = end.saturating_sub(start) / 1000,
                "a storage call on an async thread was slow; using blocking threads for {PAUSE:?}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_call_closes_the_inline_path_for_a_pause() {
        let io = InlineIo::default();
        assert!(io.allows(INLINE_MAX));
        assert!(!io.allows(INLINE_MAX + 1), "too large to run inline");
        assert_eq!(io.run(|| 7), 7);
        assert!(io.allows(4096), "a quick call leaves it open");
        io.run(|| std::thread::sleep(SLOW * 3));
        assert!(!io.allows(4096), "a slow call closes it");
        // Reopened once the pause is over (moved back in time rather than waited for).
        io.closed_until.store(io.now(), Ordering::Relaxed);
        assert!(io.allows(4096));
    }
}
