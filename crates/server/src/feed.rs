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
//!
//! **Visible when the call returns.** A poll from position `since` says its client
//! dropped what every change before `since` made stale (the mount applies a feed
//! answer before it asks again). So a request that changed something is answered
//! only once every other client following the feed has asked from past its changes
//! ([`ChangeFeed::settle`]): a change is seen everywhere when its call returns. A
//! follower is waited for at most [`FEED_LEASE`] after its last poll arrived; one
//! that did not ask by then is dropped from the followers and told at its next
//! poll that it lost changes (it stopped trusting its caches by then itself:
//! `pvfs_proto::feed`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use pvfs_proto::feed::FEED_LEASE;
use pvfs_proto::{Changed, Handle, Response};
use tokio::time::Instant;

/// Changes kept for clients that have not asked yet (a bound on the feed's memory).
pub const CAPACITY: usize = 1 << 16;

/// Most changes one answer carries (a client behind asks again at once).
pub const MAX_ANSWER: usize = 4096;

/// Most followers a server keeps track of (a bound on their memory): beyond it the
/// one heard from longest ago is dropped.
pub const MAX_FOLLOWERS: usize = 1 << 14;

/// A client following the feed (one whose polls name it).
struct Follower {
    /// It dropped what every change before this position made stale.
    acked: u64,
    /// When its last poll arrived.
    seen: Instant,
    /// Dropped for not asking in time: its next poll is told it lost changes.
    dropped: bool,
}

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
    /// The clients following the feed, by id.
    followers: HashMap<u64, Follower>,
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
    /// Woken when a follower asks (it may have passed a change being settled).
    asked: tokio::sync::Notify,
    /// How long a follower is waited for after its last poll ([`FEED_LEASE`]).
    lease: Duration,
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
                followers: HashMap::new(),
            }),
            wake: tokio::sync::Notify::new(),
            closed: AtomicBool::new(false),
            asked: tokio::sync::Notify::new(),
            lease: FEED_LEASE,
        }
    }

    /// An empty feed whose followers are waited for `lease` (tests).
    pub fn with_lease(lease: Duration) -> ChangeFeed {
        ChangeFeed {
            lease,
            ..ChangeFeed::new()
        }
    }

    /// Records what a request by client `origin` changed. A change equal to the
    /// newest one by the same client, which no client has been handed yet, is not
    /// recorded again (a stream of writes to one file is one change to its readers'
    /// caches).
    /// Returns the position of the newest change (the one a caller settles to), or
    /// None for no change.
    pub fn record(&self, origin: u64, changes: Vec<Changed>) -> Option<u64> {
        if changes.is_empty() {
            return None;
        }
        let newest =
            {
                let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
                for change in changes {
                    let handed = ring.handed;
                    if ring.records.back().is_some_and(|r| {
                        r.seq >= handed && r.origin == origin && r.change == change
                    }) {
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
                ring.next - 1
            };
        self.wake.notify_waiters();
        Some(newest)
    }

    /// Waits until every client following the feed but `origin` has asked from past
    /// position `upto` (it dropped what the changes up to there made stale), or was
    /// dropped for not asking within the lease after its last poll.
    pub async fn settle(&self, origin: u64, upto: u64) {
        loop {
            let asked = self.asked.notified();
            tokio::pin!(asked);
            // Registered before looking, so a poll in between wakes it.
            asked.as_mut().enable();
            let now = Instant::now();
            let next_deadline = {
                let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
                let lease = self.lease;
                let mut earliest: Option<Instant> = None;
                for (id, f) in ring.followers.iter_mut() {
                    if *id == origin || f.dropped || f.acked > upto {
                        continue;
                    }
                    let until = f.seen + lease;
                    if until <= now {
                        tracing::info!(
                            client = format_args!("{id:016x}"),
                            "a mount following the change feed did not ask again within its \
                             lease: dropped (it forgets what it cached)"
                        );
                        f.dropped = true;
                        continue;
                    }
                    earliest = Some(earliest.map_or(until, |e| e.min(until)));
                }
                earliest
            };
            let Some(deadline) = next_deadline else {
                return;
            };
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            tokio::select! {
                () = &mut asked => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Client `origin` closed a connection: it is not waited for until it asks again
    /// (and is then told it lost changes: it cannot have seen any meanwhile).
    pub fn disconnected(&self, origin: u64) {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = ring.followers.get_mut(&origin) {
            f.dropped = true;
        }
        drop(ring);
        self.asked.notify_waiters();
    }

    /// Notes a poll of follower `origin` from `since` (with the feed's epoch): it
    /// dropped what the changes before `since` made stale. Whether it had been
    /// dropped (it must be told it lost changes).
    fn heard(&self, ring: &mut Ring, origin: u64, since: u64) -> bool {
        if origin == 0 {
            return false;
        }
        if ring.followers.len() >= MAX_FOLLOWERS && !ring.followers.contains_key(&origin) {
            let oldest = ring
                .followers
                .iter()
                .min_by_key(|(_, f)| f.seen)
                .map(|(id, _)| *id);
            if let Some(id) = oldest {
                ring.followers.remove(&id);
            }
        }
        let f = ring.followers.entry(origin).or_insert(Follower {
            acked: since,
            seen: Instant::now(),
            dropped: false,
        });
        let was_dropped = f.dropped;
        f.dropped = false;
        f.acked = f.acked.max(since);
        f.seen = Instant::now();
        self.asked.notify_waiters();
        was_dropped
    }

    /// Wakes every waiting poll and settle for good (the server is stopping).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_waiters();
        self.asked.notify_waiters();
    }

    /// The answer to a poll from `epoch`/`since` by client `origin`, if there is
    /// one now: changes by others, or the news that some were lost.
    /// `open`: the poll's connection still reads requests (a poll left running on a
    /// closed one speaks for no follower).
    fn answer_now(&self, epoch: u64, since: u64, origin: u64, open: bool) -> Option<Response> {
        let origin_if_open = if open { origin } else { 0 };
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let first = ring.records.front().map_or(ring.next, |r| r.seq);
        if epoch == 0 || epoch != self.epoch || since > ring.next || since < first {
            // A new subscriber starts now; anyone else from another run, from a
            // position not reached yet, or from one forgotten, lost changes.
            let next = ring.next;
            self.heard(&mut ring, origin_if_open, next);
            return Some(Response::Changes {
                epoch: self.epoch,
                next,
                lost: epoch != 0,
                changes: Vec::new(),
            });
        }
        if self.heard(&mut ring, origin_if_open, since) {
            // Dropped for not asking in time: it may have served what changed since.
            let next = ring.next;
            self.heard(&mut ring, origin_if_open, next);
            return Some(Response::Changes {
                epoch: self.epoch,
                next,
                lost: true,
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
    /// `closed`: set when the poll's connection reads no more requests.
    pub async fn poll(
        &self,
        epoch: u64,
        since: u64,
        origin: u64,
        wait: Duration,
        closed: &AtomicBool,
    ) -> Response {
        let deadline = tokio::time::Instant::now() + wait;
        let mut since = since;
        loop {
            let woken = self.wake.notified();
            tokio::pin!(woken);
            // Registered before looking, so a change recorded in between wakes it.
            woken.as_mut().enable();
            let open = !closed.load(Ordering::Acquire);
            match self.answer_now(epoch, since, origin, open) {
                Some(Response::Changes {
                    epoch: e,
                    next,
                    lost: false,
                    changes,
                }) if e == epoch && changes.is_empty() => since = next,
                Some(answer) => return answer,
                None => {}
            }
            let now_or_never = self.closed.load(Ordering::Acquire) || !open;
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
    use crate::test_rng::Rng;

    fn poll_now(feed: &ChangeFeed, epoch: u64, since: u64, origin: u64) -> Response {
        feed.answer_now(epoch, since, origin, true)
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
        assert!(feed.answer_now(epoch, next, 7, true).is_none());
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
        let waiting = tokio::spawn(async move {
            f.poll(
                epoch,
                next,
                1,
                Duration::from_secs(60),
                &AtomicBool::new(false),
            )
            .await
        });
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
        let answer = feed
            .poll(
                epoch,
                next,
                1,
                Duration::from_millis(30),
                &AtomicBool::new(false),
            )
            .await;
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

    /// Registers follower `origin` where the feed stands now; returns (epoch, next).
    fn follow(feed: &ChangeFeed, origin: u64) -> (u64, u64) {
        let Response::Changes { epoch, next, .. } = poll_now(feed, 0, 0, origin) else {
            panic!("not a Changes answer");
        };
        (epoch, next)
    }

    #[tokio::test]
    async fn a_change_is_settled_once_every_other_follower_asked_past_it() {
        let feed = std::sync::Arc::new(ChangeFeed::with_lease(Duration::from_secs(60)));
        let (epoch, start) = follow(&feed, 1);
        follow(&feed, 2);
        let upto = feed.record(3, vec![object(9)]).expect("recorded");
        // The changer's own mount is not waited for, nor is a client that follows
        // nothing.
        assert!(feed.record(1, vec![]).is_none());
        let f = feed.clone();
        let settling = tokio::spawn(async move { f.settle(3, upto).await });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!settling.is_finished(), "settled before any follower asked");
        // Follower 1 is handed the change and asks again past it; 2 still lags.
        let Response::Changes { next, changes, .. } = poll_now(&feed, epoch, start, 1) else {
            panic!("not a Changes answer");
        };
        assert_eq!(changes, vec![object(9)]);
        poll_now(&feed, epoch, next, 1);
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!settling.is_finished(), "settled while follower 2 lags");
        poll_now(&feed, epoch, next, 2);
        tokio::time::timeout(Duration::from_secs(10), settling)
            .await
            .expect("settled once both asked past the change")
            .expect("settle task");
        // A change by follower 1 waits for 2 only, which is past it at once.
        let upto = feed.record(1, vec![object(10)]).expect("recorded");
        let f = feed.clone();
        let settling = tokio::spawn(async move { f.settle(1, upto).await });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!settling.is_finished());
        poll_now(&feed, epoch, upto + 1, 2);
        tokio::time::timeout(Duration::from_secs(10), settling)
            .await
            .expect("settled")
            .expect("settle task");
    }

    #[tokio::test]
    async fn a_follower_silent_past_its_lease_is_dropped_and_told_it_lost_changes() {
        let lease = Duration::from_millis(200);
        let feed = ChangeFeed::with_lease(lease);
        let (epoch, start) = follow(&feed, 1);
        let upto = feed.record(2, vec![object(9)]).expect("recorded");
        let began = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(10), feed.settle(2, upto))
            .await
            .expect("a silent follower holds a change up for its lease at most");
        assert!(began.elapsed() >= lease / 2, "{:?}", began.elapsed());
        // Dropped: not waited for again...
        let upto = feed.record(2, vec![object(10)]).expect("recorded");
        tokio::time::timeout(Duration::from_millis(50), feed.settle(2, upto))
            .await
            .expect("a dropped follower holds nothing up");
        // ...and told at its next poll that it lost changes, then followed again.
        let Response::Changes { lost, next, .. } = poll_now(&feed, epoch, start, 1) else {
            panic!("not a Changes answer");
        };
        assert!(lost, "a dropped follower must forget what it cached");
        let upto = feed.record(2, vec![object(11)]).expect("recorded");
        assert!(upto >= next);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), feed.settle(2, upto))
                .await
                .is_err(),
            "followed again after its poll"
        );
    }

    #[tokio::test]
    async fn a_follower_whose_connection_closed_holds_nothing_up() {
        let feed = std::sync::Arc::new(ChangeFeed::with_lease(Duration::from_secs(60)));
        let (epoch, start) = follow(&feed, 1);
        // Its poll still runs when the connection closes: that speaks for no one.
        let closed = std::sync::Arc::new(AtomicBool::new(false));
        let (f, c) = (feed.clone(), closed.clone());
        let pending =
            tokio::spawn(async move { f.poll(epoch, start, 1, Duration::from_secs(60), &c).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        closed.store(true, Ordering::Release);
        feed.disconnected(1);
        let upto = feed.record(2, vec![object(9)]).expect("recorded");
        tokio::time::timeout(Duration::from_secs(5), feed.settle(2, upto))
            .await
            .expect("a gone follower holds nothing up");
        tokio::time::timeout(Duration::from_secs(5), pending)
            .await
            .expect("the poll of a closed connection ends")
            .expect("poll task");
    }

    /// Random schedules of changes, polls, closed connections and time: whenever a
    /// change is settled, every follower but its maker either asked past it, or is
    /// told at its next poll that it lost changes (it is never skipped silently); and
    /// a settle always ends (a silent follower is waited for a lease at most).
    #[tokio::test(start_paused = true)]
    async fn random_schedules_never_skip_a_follower_silently() {
        let (mut settled, mut dropped) = (0, 0);
        for seed in 1..=60u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let feed = std::sync::Arc::new(ChangeFeed::with_lease(Duration::from_millis(400)));
            // Each follower's place in the feed (None: it follows nothing).
            let mut at: [Option<(u64, u64)>; 4] = [None; 4];
            for (k, place) in at.iter_mut().enumerate().skip(1) {
                if rng.below(4) != 0 {
                    *place = Some(follow(&feed, k as u64));
                }
            }
            for step in 0..40u64 {
                let origin = rng.below(4);
                let upto = feed.record(origin, vec![object(step)]).expect("recorded");
                let f = feed.clone();
                let settling = tokio::spawn(async move { f.settle(origin, upto).await });
                let mut turns = 0;
                while !settling.is_finished() {
                    turns += 1;
                    assert!(
                        turns < 10_000,
                        "seed {seed} step {step}: the settle never ended"
                    );
                    let k = 1 + rng.below(3) as usize;
                    match rng.below(5) {
                        0 | 1 => {
                            if let Some((epoch, since)) = at[k] {
                                let Response::Changes { epoch, next, .. } =
                                    poll_now(&feed, epoch, since, k as u64)
                                else {
                                    panic!("not a Changes answer");
                                };
                                at[k] = Some((epoch, next));
                            }
                        }
                        2 => feed.disconnected(k as u64),
                        _ => tokio::time::advance(Duration::from_millis(rng.below(150))).await,
                    }
                    tokio::task::yield_now().await;
                }
                settled += 1;
                for (k, place) in at.iter_mut().enumerate().skip(1) {
                    let Some((epoch, since)) = *place else {
                        continue;
                    };
                    if k as u64 == origin || since > upto {
                        continue;
                    }
                    let Response::Changes {
                        epoch, next, lost, ..
                    } = poll_now(&feed, epoch, since, k as u64)
                    else {
                        panic!("not a Changes answer");
                    };
                    assert!(
                        lost,
                        "seed {seed} step {step}: follower {k} at {since} neither asked past \
                         {upto} nor is told it lost changes"
                    );
                    dropped += 1;
                    *place = Some((epoch, next));
                }
            }
        }
        // The schedules did both: settles that followers answered, and followers
        // dropped for silence or a closed connection.
        assert!(
            settled == 60 * 40 && dropped > 50,
            "{settled} settled, {dropped} dropped"
        );
        eprintln!("{settled} settled, {dropped} followers dropped");
    }

    #[test]
    fn origins_come_from_client_names() {
        assert_eq!(origin_of("pvfs@host:12#00000000000000ff"), 255);
        assert_eq!(origin_of("pvfs@host:12"), 0);
        assert_eq!(origin_of("raw"), 0);
    }
}
