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

use std::time::Duration;

use pvfs_storage::SlowGate;

/// Bytes a storage call may move on an async thread at most.
pub const INLINE_MAX: usize = 64 << 10;
/// An inline call taking longer than this closes the inline path for [`PAUSE`].
pub const SLOW: Duration = Duration::from_millis(1);
/// How long the inline path stays closed after a slow call.
pub const PAUSE: Duration = Duration::from_secs(1);

/// Whether small storage calls may run inline now, and the timing that decides it
/// (none: never closed, for a simulation, whose runs must not depend on how long a
/// call took).
pub struct InlineIo(Option<SlowGate>);

impl Default for InlineIo {
    fn default() -> InlineIo {
        InlineIo(Some(SlowGate::new(SLOW, PAUSE)))
    }
}

impl InlineIo {
    /// The inline path of a server whose blocking work runs as `exec` says: with
    /// [`crate::exec::Exec::Inline`] (a simulation), never closed by a slow call.
    pub fn for_exec(exec: crate::exec::Exec) -> InlineIo {
        match exec {
            crate::exec::Exec::Threads => InlineIo::default(),
            crate::exec::Exec::Inline => InlineIo(None),
        }
    }

    /// Whether a call moving `bytes` may run inline now.
    pub fn allows(&self, bytes: usize) -> bool {
        bytes <= INLINE_MAX && self.0.as_ref().is_none_or(SlowGate::open)
    }

    /// Runs `call` here, timing it: a slow one closes the inline path for a while.
    pub fn run<R>(&self, call: impl FnOnce() -> R) -> R {
        match &self.0 {
            Some(gate) => gate.run(call),
            None => call(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_call_closes_the_inline_path_and_large_calls_never_run_inline() {
        let io = InlineIo::default();
        assert!(io.allows(INLINE_MAX));
        assert!(!io.allows(INLINE_MAX + 1), "too large to run inline");
        assert_eq!(io.run(|| 7), 7);
        assert!(io.allows(4096), "a quick call leaves it open");
        io.run(|| std::thread::sleep(SLOW * 3));
        assert!(!io.allows(4096), "a slow call closes it");
    }
}
