//! Write-behind (`pvfs mount --write-behind`): a write through the mount is answered
//! once its data is copied into the mount, and goes to the data servers in the
//! background, several writes of a file at a time.
//!
//! Why: by default a write returns only when the data servers have it, so a program
//! writing with one thread has one request in flight, and each one pays the FUSE
//! round trip and the copies on top of the servers' time (`docs/benchmarks.md`). With
//! write-behind the next write's copy overlaps the previous writes' transfer.
//!
//! What it costs, and what stays true:
//! - Other clients see a write once it has reached the servers (microseconds to
//!   milliseconds later), not when `write` returns: close-to-open, as NFS.
//! - A write that fails in the background is reported by a later `write`, `fsync`,
//!   or `close` of the file (through FUSE's flush), once; so is data written after
//!   it, as with a local file system's write-back.
//! - This mount reads its own writes: a read of the file waits for the writes in
//!   flight first, and the size it reports is at least the end of what it wrote
//!   while the file is open here (`Pending::end`; a truncation through the mount
//!   resets it), so no answer from the servers taken while a write was on its way
//!   can make the kernel shrink the file.
//! - Writes that overlap one in flight wait for it, so the servers apply them in
//!   order; at most [`WINDOW`] writes of a file, and a mount-wide bound, are in
//!   flight (the memory of their buffers is bounded so).
//! - `fsync` and `close` wait for the file's writes; so do truncation and the last
//!   release.

use std::sync::{Mutex, MutexGuard};

use fuser::Errno;
use tokio::sync::Notify;

/// Writes of one file in flight at most.
pub(crate) const WINDOW: usize = 8;
/// Writes in flight at most in the whole mount (each holds a buffer of up to one
/// request, 4 MiB by default).
pub(crate) const BUDGET: usize = 32;

/// The background writes of one file.
#[derive(Default)]
pub(crate) struct Pending {
    state: Mutex<State>,
    /// Signalled whenever a write finishes.
    changed: Notify,
}

#[derive(Default)]
struct State {
    /// Writes in flight: id, first byte, end.
    inflight: Vec<(u64, u64, u64)>,
    next_id: u64,
    /// The furthest end of the writes issued since the file was opened here (or
    /// last truncated through the mount).
    end: u64,
    /// The first failure not yet reported.
    error: Option<Errno>,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Waits until a write of `[start, end)` may go: nothing in flight overlaps it
    /// and the file has room in its window. Returns the write's id for
    /// [`Pending::finish`].
    pub(crate) async fn admit(&self, start: u64, end: u64) -> u64 {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.lock();
                let overlaps = st.inflight.iter().any(|&(_, s, e)| s < end && start < e);
                if !overlaps && st.inflight.len() < WINDOW {
                    let id = st.next_id;
                    st.next_id += 1;
                    st.inflight.push((id, start, end));
                    st.end = st.end.max(end);
                    return id;
                }
            }
            notified.await;
        }
    }

    /// Write `id` is over, with `result`.
    pub(crate) fn finish(&self, id: u64, result: Result<(), Errno>) {
        {
            let mut st = self.lock();
            st.inflight.retain(|&(i, _, _)| i != id);
            if let Err(e) = result {
                st.error.get_or_insert(e);
            }
        }
        self.changed.notify_waiters();
    }

    /// Waits until no write of the file is in flight.
    pub(crate) async fn drain(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().inflight.is_empty() {
                return;
            }
            notified.await;
        }
    }

    /// The failure of a background write not reported yet, which is reported now.
    pub(crate) fn take_error(&self) -> Option<Errno> {
        self.lock().error.take()
    }

    /// Whether writes are in flight.
    pub(crate) fn busy(&self) -> bool {
        !self.lock().inflight.is_empty()
    }

    /// The furthest end of the writes issued since the file was opened here or
    /// last truncated through the mount (0: none).
    pub(crate) fn end(&self) -> u64 {
        self.lock().end
    }

    /// The file was truncated (or emptied at open) to `size` through the mount, with
    /// no write in flight.
    pub(crate) fn truncated(&self, size: u64) {
        self.lock().end = size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};

    /// Polls `f` once, right now: whether it is still waiting is then a fact, not a
    /// guess after a sleep.
    fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[tokio::test]
    async fn overlapping_writes_wait_and_the_window_is_bounded() {
        let p = Arc::new(Pending::default());
        let a = p.admit(0, 100).await;
        let b = p.admit(100, 200).await;
        assert_eq!(p.end(), 200);
        // An overlapping write waits for the one it overlaps.
        let waiting = p.admit(50, 60);
        tokio::pin!(waiting);
        assert!(poll_once(waiting.as_mut()).is_pending(), "overlaps write a");
        p.finish(b, Ok(()));
        assert!(
            poll_once(waiting.as_mut()).is_pending(),
            "still overlaps write a"
        );
        p.finish(a, Ok(()));
        let Poll::Ready(c) = poll_once(waiting.as_mut()) else {
            panic!("not admitted once write a finished");
        };
        p.finish(c, Ok(()));
        assert!(!p.busy());
        assert_eq!(p.end(), 200, "what was written stays counted");
        p.truncated(0);
        assert_eq!(p.end(), 0);
        // The window: WINDOW disjoint writes go, the next one waits.
        let ids: Vec<u64> = futures_ids(&p).await;
        let more = p.admit(1 << 40, (1 << 40) + 1);
        tokio::pin!(more);
        assert!(poll_once(more.as_mut()).is_pending(), "the window is full");
        p.finish(ids[0], Ok(()));
        let Poll::Ready(d) = poll_once(more.as_mut()) else {
            panic!("not admitted once the window had room");
        };
        for id in ids.into_iter().skip(1).chain([d]) {
            p.finish(id, Ok(()));
        }
        p.drain().await;
    }

    async fn futures_ids(p: &Pending) -> Vec<u64> {
        let mut ids = Vec::new();
        for k in 0..WINDOW as u64 {
            ids.push(p.admit(k * 10, k * 10 + 10).await);
        }
        ids
    }

    #[tokio::test]
    async fn a_failure_is_reported_once_and_drain_waits() {
        let p = Arc::new(Pending::default());
        let a = p.admit(0, 10).await;
        let b = p.admit(10, 20).await;
        p.finish(a, Err(Errno::ENOSPC));
        let draining = p.drain();
        tokio::pin!(draining);
        assert!(
            poll_once(draining.as_mut()).is_pending(),
            "write b is in flight"
        );
        p.finish(b, Err(Errno::EIO));
        assert!(
            poll_once(draining.as_mut()).is_ready(),
            "drained once write b finished"
        );
        assert_eq!(p.take_error(), Some(Errno::ENOSPC), "the first failure");
        assert_eq!(p.take_error(), None, "reported once");
    }
}
