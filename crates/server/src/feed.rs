//! The change feed: what this server changed, for the caches of clients.
//!
//! A mount lets the kernel keep names and attributes for long (see `docs/fuse.md`,
//! "Caching"), and stays coherent by asking each server, in a long poll
//! (`Request::Changes`), for the changes other clients caused. Every request that
//! changed something records what its caller's peers must forget (its kind's
//! `Handler::changes`, built with [`object`] and [`entry`]), once, in dispatch,
//! after it succeeded, under the client it was made for (`Caller::origin`: the
//! connection's client, or the one a server's step of a client's request names),
//! whose polls skip it; the feed keeps the last [`CAPACITY`]
//! changes in memory. A client that falls further behind, or asks with the epoch of
//! an earlier run of the server, is told it lost changes and drops what it cached.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use pvfs_proto::{Changed, Handle, Response};

/// Changes kept for clients that have not asked yet (a bound on the feed's memory).
pub const CAPACITY: usize = 1 << 16;

/// Most changes one answer carries (a client behind asks again at once).
pub const MAX_ANSWER: usize = 4096;

/// One recorded change: its position, who caused it (the client instance's id; 0
/// when unknown) and what changed.
struct Record {
    seq: u64,
    origin: u64,
    change: Changed,
}

/// The changes this server made, newest last, at most [`CAPACITY`].
struct Ring {
    /// The position the next change gets (the first is 1).
    next: u64,
    /// Positions below this were handed to a client (a change not yet handed out
    /// may absorb an equal one that follows it).
    handed: u64,
    records: VecDeque<Record>,
}

/// The change feed of one running server.
pub struct ChangeFeed {
    /// This run's epoch (random and never 0: positions restart with the server).
    epoch: u64,
    ring: Mutex<Ring>,
    /// Woken when a change is recorded or the server stops.
    wake: tokio::sync::Notify,
    /// Set when the server stops: waiting polls answer at once.
    closed: AtomicBool,
}

impl Default for ChangeFeed {
    fn default() -> ChangeFeed {
        ChangeFeed::new()
    }
}

impl ChangeFeed {
    /// An empty feed with a new epoch.
    pub fn new() -> ChangeFeed {
        ChangeFeed {
            epoch: crate::random::random_u64().max(1),
            ring: Mutex::new(Ring {
                next: 1,
                handed: 1,
                records: VecDeque::new(),
            }),
            wake: tokio::sync::Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    /// Records what a request by client `origin` changed. A change equal to the
    /// newest one by the same client, which no client has been handed yet, is not
    /// recorded again (a stream of writes to one file is one change to its readers'
    /// caches).
    pub fn record(&self, origin: u64, changes: Vec<Changed>) {
        if changes.is_empty() {
            return;
        }
        {
            let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
            for change in changes {
                let handed = ring.handed;
                if ring
                    .records
                    .back()
                    .is_some_and(|r| r.seq >= handed && r.origin == origin && r.change == change)
                {
                    continue;
                }
                if ring.records.len() == CAPACITY {
                    ring.records.pop_front();
                }
                let seq = ring.next;
                ring.next += 1;
                ring.records.push_back(Record {
                    seq,
                    origin,
                    change,
                });
            }
        }
        self.wake.notify_waiters();
    }

    /// Wakes every waiting poll for good (the server is stopping).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_waiters();
    }

    /// The answer to a poll from `epoch`/`since` by client `origin`, if there is
    /// one now: changes by others, or the news that some were lost.
    fn answer_now(&self, epoch: u64, since: u64, origin: u64) -> Option<Response> {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let first = ring.records.front().map_or(ring.next, |r| r.seq);
        if epoch == 0 || epoch != self.epoch || since > ring.next || since < first {
            // A new subscriber starts now; anyone else from another run, from a
            // position not reached yet, or from one forgotten, lost changes.
            return Some(Response::Changes {
                epoch: self.epoch,
                next: ring.next,
                lost: epoch != 0,
                changes: Vec::new(),
            });
        }
        let skip = usize::try_from(since - first).unwrap_or(usize::MAX);
        let mut changes = Vec::new();
        let mut next = since;
        for r in ring.records.iter().skip(skip) {
            if changes.len() == MAX_ANSWER {
                break;
            }
            next = r.seq + 1;
            if origin == 0 || r.origin != origin {
                changes.push(r.change.clone());
            }
        }
        ring.handed = ring.handed.max(next);
        if changes.is_empty() && next == since {
            return None;
        }
        Some(Response::Changes {
            epoch: self.epoch,
            next,
            lost: false,
            changes,
        })
    }

    /// Answers a poll: at once if there are changes for `origin` after `since`,
    /// otherwise when one comes, the server stops, or `wait` has passed. Changes the
    /// caller made itself move its position on without an answer (it would only
    /// come back to ask again).
    pub async fn poll(&self, epoch: u64, since: u64, origin: u64, wait: Duration) -> Response {
        let deadline = tokio::time::Instant::now() + wait;
        let mut since = since;
        loop {
            let woken = self.wake.notified();
            tokio::pin!(woken);
            // Registered before looking, so a change recorded in between wakes it.
            woken.as_mut().enable();
            match self.answer_now(epoch, since, origin) {
                Some(Response::Changes {
                    epoch: e,
                    next,
                    lost: false,
                    changes,
                }) if e == epoch && changes.is_empty() => since = next,
                Some(answer) => return answer,
                None => {}
            }
            let now_or_never = self.closed.load(Ordering::Acquire);
            if now_or_never || tokio::time::Instant::now() >= deadline {
                return self.position(since);
            }
            tokio::select! {
                () = &mut woken => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// An answer with nothing new: ask again from `since`.
    fn position(&self, since: u64) -> Response {
        Response::Changes {
            epoch: self.epoch,
            next: since,
            lost: false,
            changes: Vec::new(),
        }
    }
}

/// An attribute or content change of `handle`.
pub fn object(handle: Handle) -> Changed {
    Changed {
        handle,
        entry: None,
    }
}

/// A change of entry `name` of `dir` (and so of `dir`'s own times and size).
pub fn entry(dir: Handle, name: &str) -> Changed {
    Changed {
        handle: dir,
        entry: Some((dir, name.to_string())),
    }
}

/// The client instance id a handshake's client name ends with (`…#<16 hex digits>`,
/// as the client library names itself), or 0.
pub fn origin_of(client_name: &str) -> u64 {
    client_name
        .rsplit_once('#')
        .and_then(|(_, id)| u64::from_str_radix(id, 16).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll_now(feed: &ChangeFeed, epoch: u64, since: u64, origin: u64) -> Response {
        feed.answer_now(epoch, since, origin)
            .unwrap_or_else(|| feed.position(since))
    }

    #[test]
    fn a_subscriber_sees_others_changes_once_and_not_its_own() {
        let feed = ChangeFeed::new();
        let Response::Changes {
            epoch, next, lost, ..
        } = poll_now(&feed, 0, 0, 7)
        else {
            panic!("not a Changes answer");
        };
        assert!(!lost);
        assert_eq!(next, 1);
        feed.record(7, vec![object(10)]);
        feed.record(8, vec![entry(1, "a"), object(11)]);
        feed.record(8, vec![object(11)]);
        let Response::Changes {
            next,
            lost,
            changes,
            ..
        } = poll_now(&feed, epoch, 1, 7)
        else {
            panic!("not a Changes answer");
        };
        assert!(!lost);
        assert_eq!(changes, vec![entry(1, "a"), object(11)]);
        assert_eq!(next, 4);
        assert!(feed.answer_now(epoch, next, 7).is_none());
        // Its own change alone still moves the position on.
        feed.record(7, vec![object(12)]);
        let Response::Changes {
            next: after,
            changes,
            ..
        } = poll_now(&feed, epoch, next, 7)
        else {
            panic!("not a Changes answer");
        };
        assert!(changes.is_empty());
        assert_eq!(after, next + 1);
    }

    #[test]
    fn a_repeated_change_is_kept_once_it_was_handed_out() {
        let feed = ChangeFeed::new();
        let Response::Changes { epoch, .. } = poll_now(&feed, 0, 0, 1) else {
            panic!("not a Changes answer");
        };
        feed.record(2, vec![entry(1, "a")]);
        feed.record(2, vec![entry(1, "a")]);
        let Response::Changes { next, changes, .. } = poll_now(&feed, epoch, 1, 1) else {
            panic!("not a Changes answer");
        };
        assert_eq!(
            changes,
            vec![entry(1, "a")],
            "absorbed before anyone saw it"
        );
        // Created, seen, then removed: the same change again must reach the client.
        feed.record(2, vec![entry(1, "a")]);
        let Response::Changes { changes, .. } = poll_now(&feed, epoch, next, 1) else {
            panic!("not a Changes answer");
        };
        assert_eq!(changes, vec![entry(1, "a")]);
    }

    #[test]
    fn another_epoch_or_a_forgotten_position_is_lost() {
        let feed = ChangeFeed::new();
        let Response::Changes { epoch, .. } = poll_now(&feed, 0, 0, 1) else {
            panic!("not a Changes answer");
        };
        let Response::Changes { lost, .. } = poll_now(&feed, epoch ^ 1, 1, 1) else {
            panic!("not a Changes answer");
        };
        assert!(lost);
        for h in 0..(CAPACITY as u64 + 10) {
            feed.record(2, vec![object(h)]);
        }
        let Response::Changes { lost, next, .. } = poll_now(&feed, epoch, 1, 1) else {
            panic!("not a Changes answer");
        };
        assert!(lost);
        assert_eq!(next, CAPACITY as u64 + 11);
        let Response::Changes { changes, .. } = poll_now(&feed, epoch, 20, 1) else {
            panic!("not a Changes answer");
        };
        assert_eq!(changes.len(), MAX_ANSWER);
    }

    #[tokio::test]
    async fn a_waiting_poll_wakes_for_a_change() {
        let feed = std::sync::Arc::new(ChangeFeed::new());
        let Response::Changes { epoch, next, .. } = poll_now(&feed, 0, 0, 1) else {
            panic!("not a Changes answer");
        };
        let f = feed.clone();
        let waiting =
            tokio::spawn(async move { f.poll(epoch, next, 1, Duration::from_secs(60)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        feed.record(2, vec![object(5)]);
        let answer = tokio::time::timeout(Duration::from_secs(10), waiting).await;
        let Ok(Ok(Response::Changes { changes, .. })) = answer else {
            panic!("the poll did not wake: {answer:?}");
        };
        assert_eq!(changes, vec![object(5)]);
    }

    #[tokio::test]
    async fn a_poll_waits_through_its_own_changes() {
        let feed = ChangeFeed::new();
        let Response::Changes { epoch, next, .. } = poll_now(&feed, 0, 0, 1) else {
            panic!("not a Changes answer");
        };
        feed.record(1, vec![object(5), object(6)]);
        let answer = feed.poll(epoch, next, 1, Duration::from_millis(30)).await;
        let Response::Changes {
            next: after,
            changes,
            lost,
            ..
        } = answer
        else {
            panic!("not a Changes answer");
        };
        assert!(changes.is_empty() && !lost);
        assert_eq!(after, next + 2, "its own changes are passed over");
    }

    #[test]
    fn origins_come_from_client_names() {
        assert_eq!(origin_of("pvfs@host:12#00000000000000ff"), 255);
        assert_eq!(origin_of("pvfs@host:12"), 0);
        assert_eq!(origin_of("raw"), 0);
    }
}
