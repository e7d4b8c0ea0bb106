//! The lock table of one metadata server: the byte-range locks (POSIX record locks,
//! OFD locks, `flock`) clients hold on the objects this server owns, the requests
//! waiting for them, and the clients' leases. It lives in memory only
//! (`docs/locks.md`):
//!
//! - **Leases.** Every lock request of a client (one `LockKey::who` and client id)
//!   renews its lease, as does `RenewLease`; a client that stops renewing for
//!   `[locks] lease` loses its locks and waits here ([`LockTable::expire`]). Each
//!   lease has an id, random per lease, answered with every grant, so a client sees
//!   when the server forgot it (a restart, or an expiry while it was cut off).
//! - **Grace.** A server that may have had locks when it stopped (its storage's
//!   [`LockMark`]) starts in a grace period of one lease, in which it grants only
//!   reclaims of locks held before: clients that held locks ask for them again
//!   (the model of NFSv4). Others wait, as for a held lock.
//! - **Waiters.** A blocking request registers a waiter and is answered the moment
//!   its lock can be granted (every release wakes the file's waiters). A waiter is
//!   answered "still waiting" after a bounded time; the client sends the request
//!   again at once and finds its waiter, and its place, kept for a short while. A
//!   lock that frees while the waiter's client is between two sends is reserved for
//!   it (no one else takes it) until it comes back or that while ends.
//! - **Edges.** A POSIX waiter's request tells the deadlock coordinator whom it
//!   waits for (`crate::waitfor`) and records it here (`told`); a change that ends
//!   or redirects waits is answered once those edges are right again
//!   ([`LockTable::edges_settled`]), so no cycle is found through a wait that is over.
//!
//! Everything here is synchronous under one mutex; the handlers do the waiting.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

use pvfs_proto::locks::{self, LockConflict, LockKey, LockType, Segment};
use pvfs_proto::{Errno, Handle};
use pvfs_storage::LockMark;
use tokio::sync::Notify;

use crate::error::{OpError, OpResult};
use crate::exec::Exec;

/// Most locks (segments) one server holds; beyond it requests get ENOLCK.
pub const MAX_SEGMENTS: usize = 1 << 20;
/// Most locks one client holds on one server.
pub const MAX_CLIENT_SEGMENTS: usize = 1 << 16;
/// Most locks on one file (every request scans them).
pub const MAX_FILE_SEGMENTS: usize = 1 << 16;
/// Most waiting requests on one file.
pub const MAX_FILE_WAITERS: usize = 1 << 12;
/// The longest a change that ended waits waits for their edges to be taken back.
pub const SETTLE_BOUND: Duration = Duration::from_millis(500);

/// What a lock is on: an object, and whether it is an appender's lock
/// (`LOCK_APPEND`), which lives apart from the locks programs take: the two never
/// conflict and `TestLock` sees only the programs' locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LockAt {
    /// The object.
    pub handle: Handle,
    /// An appender's lock.
    pub append: bool,
}

impl LockAt {
    /// The locks programs take on `handle`.
    pub fn program(handle: Handle) -> LockAt {
        LockAt {
            handle,
            append: false,
        }
    }

    /// The appenders' lock on `handle`.
    pub fn append(handle: Handle) -> LockAt {
        LockAt {
            handle,
            append: true,
        }
    }
}

/// Where a waiting request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitState {
    /// Blocked by another owner's lock (or reservation).
    Waiting,
    /// Grantable and reserved for it (its client is between two sends, or the grant
    /// waits for the storage's mark).
    Ready,
    /// Granted: the lock is in the table.
    Granted,
    /// Withdrawn (`CancelLock`, a deadlock, its client's lease ended).
    Cancelled,
}

/// What a lock request wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    /// Who asks.
    pub key: LockKey,
    /// Shared or exclusive.
    pub typ: LockType,
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
    /// The process asking (for F_GETLK).
    pub pid: u32,
    /// A POSIX record lock (else OFD or `flock`).
    pub posix: bool,
}

impl Want {
    fn same_request(&self, other: &Want) -> bool {
        self.key == other.key
            && self.typ == other.typ
            && self.start == other.start
            && self.end == other.end
    }

    /// Whether a lock or reservation of `key` on `start ..= end` of `typ` stands in
    /// this request's way.
    fn hindered_by(&self, key: &LockKey, typ: LockType, start: u64, end: u64) -> bool {
        *key != self.key
            && typ.conflicts(self.typ)
            && locks::overlaps((start, end), (self.start, self.end))
    }
}

struct Waiter {
    /// Queue order (increasing), also its id.
    id: u64,
    want: Want,
    /// Requests of the client waiting on it now.
    attached: u32,
    /// With none attached: when it is forgotten.
    detached_until: Option<Instant>,
    state: WaitState,
    notify: Arc<Notify>,
    /// Whom the deadlock coordinator was told this waiter waits for (its edges
    /// there; none: it has none). A granted or withdrawn waiter is kept until they
    /// are taken back.
    told: Vec<LockKey>,
}

#[derive(Default)]
struct FileLocks {
    held: Vec<Segment<LockKey>>,
    waiters: Vec<Waiter>,
}

impl FileLocks {
    fn is_empty(&self) -> bool {
        self.held.is_empty() && self.waiters.is_empty()
    }

    /// The reservations of other owners in `want`'s way, but waiter `skip`'s.
    fn reservations<'a>(
        &'a self,
        want: &'a Want,
        skip: Option<u64>,
    ) -> impl Iterator<Item = &'a Waiter> + 'a {
        self.waiters.iter().filter(move |w| {
            Some(w.id) != skip
                && w.state == WaitState::Ready
                && want.hindered_by(&w.want.key, w.want.typ, w.want.start, w.want.end)
        })
    }

    /// The lock or reservation keeping `want` from being granted.
    fn blocker(&self, want: &Want, skip: Option<u64>) -> Option<LockKey> {
        if let Some(s) = locks::conflict(&self.held, &want.key, want.typ, want.start, want.end) {
            return Some(s.owner);
        }
        self.reservations(want, skip).next().map(|w| w.want.key)
    }

    /// Every owner whose lock or reservation keeps `want` from being granted.
    fn blockers(&self, want: &Want, skip: Option<u64>) -> Vec<LockKey> {
        let mut out: Vec<LockKey> = self
            .held
            .iter()
            .filter(|s| want.hindered_by(&s.owner, s.typ, s.start, s.end))
            .map(|s| s.owner)
            .chain(self.reservations(want, skip).map(|w| w.want.key))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Grants `want` (nothing may block it): the change in the number of locks,
    /// all of them `want`'s owner's.
    fn apply(&mut self, want: &Want) -> isize {
        debug_assert!(
            locks::conflict(&self.held, &want.key, want.typ, want.start, want.end).is_none(),
            "a lock granted over another owner's conflicting lock"
        );
        let before = self.held.len();
        locks::set(
            &mut self.held,
            &want.key,
            Some(want.typ),
            want.start,
            want.end,
            want.pid,
            want.posix,
        );
        debug_assert!(
            self.conflicting_pair().is_none(),
            "two owners hold conflicting locks: {:?}",
            self.conflicting_pair()
        );
        self.held.len() as isize - before as isize
    }

    /// Two locks of different owners that conflict (overlapping, one of them
    /// exclusive), if the table holds any: what must never be.
    fn conflicting_pair(&self) -> Option<(LockKey, LockKey)> {
        self.held.iter().enumerate().find_map(|(i, a)| {
            self.held[i + 1..].iter().find_map(|b| {
                (a.owner != b.owner
                    && a.typ.conflicts(b.typ)
                    && locks::overlaps((a.start, a.end), (b.start, b.end)))
                .then_some((a.owner, b.owner))
            })
        })
    }

    /// Whether waiter `w` told the deadlock coordinator it waits for an owner that
    /// no longer keeps it waiting.
    fn told_too_much(&self, w: &Waiter) -> bool {
        let now = self.blockers(&w.want, Some(w.id));
        w.told.iter().any(|k| !now.contains(k))
    }

    /// Grants, in queue order, the waiting requests nothing blocks any more: at once
    /// for those a request waits on (if `marked`: the storage says locks may be
    /// held), as a reservation for the others, whose requests are woken to take it.
    /// Returns the changes in locks, by owner.
    fn wake(&mut self, marked: bool) -> Vec<(LockKey, isize)> {
        let mut changes = Vec::new();
        for i in 0..self.waiters.len() {
            let (id, want, state, attached) = {
                let w = &self.waiters[i];
                (w.id, w.want, w.state, w.attached)
            };
            if !matches!(state, WaitState::Waiting | WaitState::Ready) {
                continue;
            }
            let free = self.blocker(&want, Some(id)).is_none();
            // A waiter still blocked, but no longer by all it told the deadlock
            // coordinator of, is woken too, to correct its edges there.
            let retell = !free && attached > 0 && self.told_too_much(&self.waiters[i]);
            let grant = free && attached > 0 && marked;
            if grant {
                changes.push((want.key, self.apply(&want)));
            }
            let w = &mut self.waiters[i];
            w.state = match (free, grant) {
                (true, true) => WaitState::Granted,
                (true, false) => WaitState::Ready,
                (false, _) => WaitState::Waiting,
            };
            if (free || retell) && attached > 0 {
                w.notify.notify_waiters();
            }
        }
        changes
    }
}

/// A client's lease.
struct Lease {
    id: u64,
    expires: Instant,
    /// Locks the client holds here.
    segments: usize,
}

#[derive(Default)]
struct State {
    files: BTreeMap<LockAt, FileLocks>,
    /// By (who, client id).
    leases: BTreeMap<(u64, u64), Lease>,
    next_waiter: u64,
    /// Whether the storage's mark says locks may be held (a grant needs it).
    marked: bool,
    /// Locks held here.
    total: usize,
}

impl State {
    /// Counts a change of `delta` locks of `key`'s client.
    fn count(&mut self, key: &LockKey, delta: isize) {
        self.total = self.total.saturating_add_signed(delta);
        if let Some(l) = self.leases.get_mut(&(key.who, key.client)) {
            l.segments = l.segments.saturating_add_signed(delta);
        }
    }

    /// Counts what [`FileLocks::wake`] granted.
    fn count_all(&mut self, changes: Vec<(LockKey, isize)>) {
        for (k, d) in changes {
            self.count(&k, d);
        }
    }

    /// Fails if a new lock of `key` on `handle` would pass a limit.
    fn check_limits(&self, at: LockAt, key: &LockKey) -> OpResult<()> {
        let mine = self
            .leases
            .get(&(key.who, key.client))
            .map_or(0, |l| l.segments);
        let here = self.files.get(&at).map_or(0, |f| f.held.len());
        if self.total >= MAX_SEGMENTS || mine >= MAX_CLIENT_SEGMENTS || here >= MAX_FILE_SEGMENTS {
            return Err(OpError::posix(
                Errno::ENOLCK,
                format!(
                    "lock table full: {} locks on this server (limit {MAX_SEGMENTS}), {mine} of \
                     this client (limit {MAX_CLIENT_SEGMENTS}), {here} on this file (limit \
                     {MAX_FILE_SEGMENTS})",
                    self.total
                ),
            ));
        }
        Ok(())
    }

    /// Wakes the waiters of `handle` after a change, counts what that granted, and
    /// forgets the file if nothing is left of it.
    fn settle(&mut self, at: LockAt) {
        let marked = self.marked;
        let Some(f) = self.files.get_mut(&at) else {
            return;
        };
        let changes = f.wake(marked);
        let empty = f.is_empty();
        self.count_all(changes);
        if empty {
            self.files.remove(&at);
        }
    }
}

/// What [`LockTable::try_lock`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum TryLock {
    /// Granted; the client's lease id.
    Granted(u64),
    /// Another owner's lock (or reservation) is in the way.
    Blocked(LockKey),
    /// Grantable, but the storage must first say that locks may be held
    /// ([`LockTable::ensure_marked`]).
    NeedMark,
}

/// The lock table (see the module's documentation).
pub struct LockTable {
    state: Mutex<State>,
    /// How long a lease lasts without renewal.
    pub lease: Duration,
    /// End of the grace period after start, if there is one.
    grace_until: Option<Instant>,
    /// How long one waiting request is held before "still waiting".
    pub answer_after: Duration,
    /// How long a waiter is kept between two sends of its request.
    pub keep_detached: Duration,
    /// The longest a change that ended waits waits for their edges to be taken
    /// back ([`LockTable::edges_settled`]): they go in a round trip; past this, a
    /// wait that is over may still be counted in a cycle until its request ends.
    settle_bound: Duration,
    /// Source of lease ids (random start; never 0).
    next_lease: AtomicU64,
    /// Serializes writes of the storage's mark.
    pub mark_io: tokio::sync::Mutex<Option<LockMark>>,
    /// Set once the grace period has been seen to end (saves a clock read).
    grace_over: AtomicBool,
    /// Woken when a waiter's edges at the deadlock coordinator change.
    edges_told: Notify,
}

/// Locks a mutex, recovering the data if a holder panicked.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The grace period of a table that starts where locks may have been held: a lock
/// lease (`lease`: every client that held one renews within it) and a lease of the
/// cluster map (`map_lease`: a client whose renewal failed looks the map up again,
/// which may wait that long for a server that does not answer, to find where a group
/// that failed over is served now).
pub fn grace_period(lease: Duration, map_lease: Duration) -> Duration {
    lease + map_lease
}

impl LockTable {
    /// An empty table. `mark`: the storage's mark (None on a server without the
    /// metadata role); when it says locks may have been held, the table starts in a
    /// grace period of `grace` ([`grace_period`]). `request`: the request timeout,
    /// which bounds a waiting request's answer (a third of it) and how long a waiter
    /// is kept between two sends (all of it).
    pub fn new(
        lease: Duration,
        grace: Duration,
        request: Duration,
        mark: Option<LockMark>,
    ) -> LockTable {
        let held_before = mark.as_ref().is_some_and(|m| m.held());
        let grace_until = held_before.then(|| Instant::now() + grace);
        if held_before {
            tracing::info!(
                "clients may have held locks here before this start: only reclaims for {grace:?} (grace period)"
            );
        }
        LockTable {
            state: Mutex::new(State {
                marked: held_before,
                ..State::default()
            }),
            lease,
            grace_until,
            answer_after: (request / 3).max(Duration::from_millis(50)),
            keep_detached: request.max(Duration::from_millis(500)),
            settle_bound: (request / 3).clamp(Duration::from_millis(50), SETTLE_BOUND),
            next_lease: AtomicU64::new(crate::random::random_u64() | 1),
            mark_io: tokio::sync::Mutex::new(mark),
            grace_over: AtomicBool::new(grace_until.is_none()),
            edges_told: Notify::new(),
        }
    }

    /// When the grace period ends, if the server is in it.
    pub fn grace_end(&self) -> Option<Instant> {
        if self.grace_over.load(Ordering::Relaxed) {
            return None;
        }
        match self.grace_until {
            Some(t) if Instant::now() < t => Some(t),
            _ => {
                self.grace_over.store(true, Ordering::Relaxed);
                None
            }
        }
    }

    /// Renews (or starts) the lease of `key`'s client; its id.
    pub fn touch(&self, key: &LockKey) -> u64 {
        let mut st = lock(&self.state);
        self.touch_locked(&mut st, key.who, key.client)
    }

    fn touch_locked(&self, st: &mut State, who: u64, client: u64) -> u64 {
        let expires = Instant::now() + self.lease;
        let lease = st.leases.entry((who, client)).or_insert_with(|| Lease {
            id: self.next_lease.fetch_add(2, Ordering::Relaxed),
            expires,
            segments: 0,
        });
        lease.expires = expires;
        lease.id
    }

    /// Renews (or starts) the lease of client `client` of `who`; its id.
    pub fn touch_client(&self, who: u64, client: u64) -> u64 {
        let mut st = lock(&self.state);
        self.touch_locked(&mut st, who, client)
    }

    /// Renews the lease of client `client` of `who` if the server knows it: its id,
    /// or None.
    pub fn renew(&self, who: u64, client: u64) -> Option<u64> {
        let mut st = lock(&self.state);
        let lease = st.leases.get_mut(&(who, client))?;
        lease.expires = Instant::now() + self.lease;
        Some(lease.id)
    }

    /// Whether the storage's mark says locks may be held (a grant needs it).
    pub fn marked(&self) -> bool {
        lock(&self.state).marked
    }

    /// Records that the mark is set (after it was written durably).
    pub fn set_marked(&self) {
        lock(&self.state).marked = true;
    }

    /// Clears the record of the mark if no lock is held (the caller then writes the
    /// mark clear, holding `mark_io`); whether it did. A grant needs the record set,
    /// checked under the same lock, so none can slip in between.
    pub fn clear_marked_if_empty(&self) -> bool {
        self.clear_marked_if(|| true)
    }

    /// [`LockTable::clear_marked_if_empty`], when `others_empty` also says nothing
    /// else the mark covers is held (the holds of open files): asked under the
    /// table's lock, which [`LockTable::marked`] takes too, so a hold registered
    /// before it is seen and one registered after finds the record clear.
    pub fn clear_marked_if(&self, others_empty: impl Fn() -> bool) -> bool {
        let mut st = lock(&self.state);
        if st.marked && st.total == 0 && others_empty() {
            st.marked = false;
            return true;
        }
        false
    }

    /// Grants `want` at once if nothing stands in the way (and renews the lease).
    pub fn try_lock(&self, at: LockAt, want: &Want) -> OpResult<TryLock> {
        let mut st = lock(&self.state);
        let lease = self.touch_locked(&mut st, want.key.who, want.key.client);
        if let Some(b) = st.files.get(&at).and_then(|f| f.blocker(want, None)) {
            return Ok(TryLock::Blocked(b));
        }
        if !st.marked {
            return Ok(TryLock::NeedMark);
        }
        st.check_limits(at, &want.key)?;
        let delta = st.files.entry(at).or_default().apply(want);
        st.count(&want.key, delta);
        Ok(TryLock::Granted(lease))
    }

    /// Registers a waiting request for `want` (or finds the one sent before, keeping
    /// its place) and returns its id and what to wait on; [`LockTable::poll`] then
    /// grants it when it can be.
    pub fn wait(&self, at: LockAt, want: &Want) -> OpResult<(u64, Arc<Notify>)> {
        let mut st = lock(&self.state);
        self.touch_locked(&mut st, want.key.who, want.key.client);
        let f = st.files.entry(at).or_default();
        if let Some(w) = f
            .waiters
            .iter_mut()
            .find(|w| w.want.same_request(want) && w.state != WaitState::Cancelled)
        {
            w.attached += 1;
            w.detached_until = None;
            w.want.pid = want.pid;
            return Ok((w.id, w.notify.clone()));
        }
        if f.waiters.len() >= MAX_FILE_WAITERS {
            let msg = format!("{MAX_FILE_WAITERS} requests wait for locks on this file already");
            if f.is_empty() {
                st.files.remove(&at);
            }
            return Err(OpError::posix(Errno::ENOLCK, msg));
        }
        st.next_waiter += 1;
        let id = st.next_waiter;
        let notify = Arc::new(Notify::new());
        st.files.entry(at).or_default().waiters.push(Waiter {
            id,
            want: *want,
            attached: 1,
            detached_until: None,
            state: WaitState::Waiting,
            notify: notify.clone(),
            told: Vec::new(),
        });
        Ok((id, notify))
    }

    /// Where waiter `id` stands, granting it first if nothing blocks it any more:
    /// its state, who blocks it (when it waits), and whether the grant waits for the
    /// storage's mark ([`LockTable::ensure_marked`]).
    pub fn poll(&self, at: LockAt, id: u64) -> (WaitState, Vec<LockKey>, bool) {
        let mut st = lock(&self.state);
        let marked = st.marked;
        let Some(f) = st.files.get_mut(&at) else {
            return (WaitState::Cancelled, Vec::new(), false);
        };
        let Some(i) = f.waiters.iter().position(|w| w.id == id) else {
            return (WaitState::Cancelled, Vec::new(), false);
        };
        let (state, want) = (f.waiters[i].state, f.waiters[i].want);
        if !matches!(state, WaitState::Waiting | WaitState::Ready) {
            return (state, Vec::new(), false);
        }
        let blockers = f.blockers(&want, Some(id));
        if !blockers.is_empty() {
            f.waiters[i].state = WaitState::Waiting;
            return (WaitState::Waiting, blockers, false);
        }
        if !marked {
            f.waiters[i].state = WaitState::Ready;
            return (WaitState::Ready, Vec::new(), true);
        }
        let delta = f.apply(&want);
        f.waiters[i].state = WaitState::Granted;
        st.count(&want.key, delta);
        (WaitState::Granted, Vec::new(), false)
    }

    /// A request waiting on `id` stops waiting (answered, or its time is up): the
    /// waiter's state then. A granted or withdrawn waiter is forgotten once no request
    /// waits on it; a waiting one is kept for [`LockTable::keep_detached`].
    pub fn detach(&self, at: LockAt, id: u64) -> WaitState {
        let mut st = lock(&self.state);
        let Some(f) = st.files.get_mut(&at) else {
            return WaitState::Cancelled;
        };
        let Some(i) = f.waiters.iter().position(|w| w.id == id) else {
            return WaitState::Cancelled;
        };
        let w = &mut f.waiters[i];
        w.attached = w.attached.saturating_sub(1);
        let state = w.state;
        if w.attached == 0 {
            match state {
                WaitState::Granted | WaitState::Cancelled if !w.told.is_empty() => {
                    // Forgotten when its request takes its edges back (`told`), or
                    // after a while if that never comes.
                    w.detached_until = Some(Instant::now() + self.keep_detached);
                }
                WaitState::Granted | WaitState::Cancelled => {
                    f.waiters.remove(i);
                    if f.is_empty() {
                        st.files.remove(&at);
                    }
                }
                WaitState::Waiting | WaitState::Ready => {
                    w.detached_until = Some(Instant::now() + self.keep_detached);
                }
            }
        }
        state
    }

    /// Records that the deadlock coordinator was told waiter `id` waits for
    /// `blockers` (none: its edges there are gone), and forgets a granted or
    /// withdrawn waiter that no request waits on once its edges are gone.
    pub fn told(&self, at: LockAt, id: u64, blockers: Vec<LockKey>) {
        {
            let mut st = lock(&self.state);
            let Some(f) = st.files.get_mut(&at) else {
                return;
            };
            let Some(i) = f.waiters.iter().position(|w| w.id == id) else {
                return;
            };
            let w = &mut f.waiters[i];
            w.told = blockers;
            let over = matches!(w.state, WaitState::Granted | WaitState::Cancelled);
            if w.told.is_empty() && w.attached == 0 && over {
                f.waiters.remove(i);
                if f.is_empty() {
                    st.files.remove(&at);
                }
            }
        }
        self.edges_told.notify_waiters();
    }

    /// Whether the deadlock coordinator may hold an edge of a waiter of `handle`
    /// that is over: one that waits for an owner that no longer keeps it waiting
    /// (it was granted, withdrawn, or waits for others now).
    fn stale_edges(&self, at: LockAt) -> bool {
        let st = lock(&self.state);
        let Some(f) = st.files.get(&at) else {
            return false;
        };
        f.waiters
            .iter()
            .any(|w| !w.told.is_empty() && (w.state != WaitState::Waiting || f.told_too_much(w)))
    }

    /// Waits, a bounded time, until the deadlock coordinator holds no edge of a
    /// waiter of `handle` that is over ([`LockTable::told`]). A request that ended
    /// waits (an unlock, a downgrade, a withdrawal) is answered after that, so no
    /// later wait of its owner finds a cycle through a wait that is over: the
    /// waiters' own requests take their edges back (a waiter whose client is
    /// between two sends, when it returns), this only waits for them.
    pub async fn edges_settled(&self, at: LockAt) {
        let deadline = Instant::now() + self.settle_bound;
        loop {
            let told = self.edges_told.notified();
            tokio::pin!(told);
            // Registered before looking, so a change in between wakes it.
            told.as_mut().enable();
            if !self.stale_edges(at) {
                return;
            }
            tokio::select! {
                () = &mut told => {}
                () = tokio::time::sleep_until(deadline) => return,
            }
        }
    }

    /// Withdraws waiter `id` (a deadlock): requests waiting on it see it cancelled.
    pub fn cancel_id(&self, at: LockAt, id: u64) {
        let mut st = lock(&self.state);
        if let Some(f) = st.files.get_mut(&at) {
            if let Some(w) = f
                .waiters
                .iter_mut()
                .find(|w| w.id == id && w.state != WaitState::Granted)
            {
                w.state = WaitState::Cancelled;
                w.notify.notify_waiters();
            }
        }
        st.settle(at);
    }

    /// Withdraws the waiting request of `want` (its type and range): requests
    /// waiting on it are answered EINTR. One already granted stays granted.
    pub fn cancel(&self, at: LockAt, want: &Want) {
        let mut st = lock(&self.state);
        if let Some(f) = st.files.get_mut(&at) {
            for w in f.waiters.iter_mut().filter(|w| {
                w.want.same_request(want)
                    && matches!(w.state, WaitState::Waiting | WaitState::Ready)
            }) {
                w.state = WaitState::Cancelled;
                w.notify.notify_waiters();
            }
            f.waiters
                .retain(|w| !(w.state == WaitState::Cancelled && w.attached == 0));
        }
        st.settle(at);
    }

    /// Releases what `key` holds on `start ..= end` of `handle`, and grants what
    /// waits for it.
    pub fn unlock(&self, at: LockAt, key: &LockKey, start: u64, end: u64) {
        let mut st = lock(&self.state);
        self.touch_locked(&mut st, key.who, key.client);
        let Some(f) = st.files.get_mut(&at) else {
            return;
        };
        let before = f.held.len();
        locks::set(&mut f.held, key, None, start, end, 0, false);
        let delta = f.held.len() as isize - before as isize;
        st.count(key, delta);
        st.settle(at);
    }

    /// The first lock or reservation of another owner keeping `key` from `typ` on
    /// the range.
    pub fn test(
        &self,
        at: LockAt,
        key: &LockKey,
        typ: LockType,
        start: u64,
        end: u64,
    ) -> Option<LockConflict> {
        let st = lock(&self.state);
        let f = st.files.get(&at)?;
        let conflict = |owner: &LockKey, typ, start, end, pid, posix| LockConflict {
            typ,
            start,
            end,
            pid,
            posix,
            same_client: owner.who == key.who && owner.client == key.client,
        };
        if let Some(s) = locks::conflict(&f.held, key, typ, start, end) {
            return Some(conflict(&s.owner, s.typ, s.start, s.end, s.pid, s.posix));
        }
        let want = Want {
            key: *key,
            typ,
            start,
            end,
            pid: 0,
            posix: true,
        };
        let found = f.reservations(&want, None).next().map(|w| {
            let x = &w.want;
            conflict(&x.key, x.typ, x.start, x.end, x.pid, x.posix)
        });
        found
    }

    /// Drops every lock and waiting request of client `client` of `who`, and its
    /// lease.
    pub fn release_client(&self, who: u64, client: u64) {
        let mut st = lock(&self.state);
        Self::drop_client(&mut st, who, client);
        st.leases.remove(&(who, client));
    }

    fn drop_client(st: &mut State, who: u64, client: u64) {
        let mine = |k: &LockKey| k.who == who && k.client == client;
        let marked = st.marked;
        let mut changes = Vec::new();
        let mut dropped = 0;
        st.files.retain(|_, f| {
            let before = (f.held.len(), f.waiters.len());
            f.held.retain(|s| !mine(&s.owner));
            dropped += before.0 - f.held.len();
            for w in f.waiters.iter_mut().filter(|w| mine(&w.want.key)) {
                w.state = WaitState::Cancelled;
                w.notify.notify_waiters();
            }
            f.waiters
                .retain(|w| !(w.state == WaitState::Cancelled && w.attached == 0));
            if (f.held.len(), f.waiters.len()) != before {
                changes.extend(f.wake(marked));
            }
            !f.is_empty()
        });
        st.total = st.total.saturating_sub(dropped);
        if let Some(l) = st.leases.get_mut(&(who, client)) {
            l.segments = 0;
        }
        st.count_all(changes);
    }

    /// Ends leases not renewed in time (dropping their clients' locks) and waiters
    /// not asked for again in time. A client with a request waiting here now is
    /// alive: its lease is renewed instead. Returns the clients whose leases ended.
    pub fn expire(&self) -> Vec<(u64, u64)> {
        let now = Instant::now();
        let mut st = lock(&self.state);
        let waiting: std::collections::BTreeSet<(u64, u64)> = st
            .files
            .values()
            .flat_map(|f| f.waiters.iter())
            .filter(|w| w.attached > 0)
            .map(|w| (w.want.key.who, w.want.key.client))
            .collect();
        let lease = self.lease;
        let ended: Vec<(u64, u64)> = st
            .leases
            .iter_mut()
            .filter_map(|(k, l)| {
                if waiting.contains(k) {
                    l.expires = now + lease;
                }
                (l.expires <= now).then_some(*k)
            })
            .collect();
        for &(who, client) in &ended {
            Self::drop_client(&mut st, who, client);
            st.leases.remove(&(who, client));
        }
        let marked = st.marked;
        let mut changes = Vec::new();
        st.files.retain(|_, f| {
            let before = f.waiters.len();
            f.waiters
                .retain(|w| w.attached > 0 || w.detached_until.is_none_or(|t| t > now));
            if f.waiters.len() != before {
                changes.extend(f.wake(marked));
            }
            !f.is_empty()
        });
        st.count_all(changes);
        ended
    }

    /// Locks held now.
    pub fn held_count(&self) -> usize {
        lock(&self.state).total
    }
}

impl LockTable {
    /// Ends expired leases and forgotten waiters every tenth of a lease, and clears
    /// the storage's mark once no lock is held (so a restart skips the grace period),
    /// writing it with `exec`. Runs until dropped.
    /// `ended` gets the clients whose lease ended; `others_empty` says whether
    /// nothing else the mark covers is held.
    pub async fn expire_loop(
        &self,
        exec: Exec,
        mut ended: impl FnMut(Vec<(u64, u64)>),
        others_empty: impl Fn() -> bool,
    ) {
        let every = (self.lease / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let gone = self.expire();
            for &(who, client) in &gone {
                tracing::info!(
                    who = format_args!("{who:#x}"),
                    client = format_args!("{client:#x}"),
                    "a client's lease ended: its locks and open files are released"
                );
            }
            if !gone.is_empty() {
                ended(gone);
            }
            if self.grace_end().is_none() {
                self.clear_mark(exec, &others_empty).await;
            }
        }
    }

    /// Writes the storage's mark clear (with `exec`) if no lock is held, nor
    /// anything else (`others_empty`).
    async fn clear_mark(&self, exec: Exec, others_empty: &impl Fn() -> bool) {
        let mut io = self.mark_io.lock().await;
        if io.is_none() || !self.clear_marked_if(others_empty) {
            return;
        }
        let Some(mut mark) = io.take() else { return };
        let (mark, result) = match exec
            .spawn(move || {
                let r = mark.set(false);
                (mark, r)
            })
            .await
        {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("clearing the lock mark failed: {e}");
                return;
            }
        };
        if let Err(e) = result {
            tracing::warn!("cannot clear the lock mark (the next start waits a grace period): {e}");
        }
        *io = Some(mark);
    }

    /// Makes sure the storage's mark says locks may be held before a lock is granted
    /// (written durably, with `exec`, the first time after it was clear).
    pub async fn ensure_marked(&self, exec: Exec) -> OpResult<()> {
        if self.marked() {
            return Ok(());
        }
        let mut io = self.mark_io.lock().await;
        if self.marked() {
            return Ok(());
        }
        let Some(mut mark) = io.take() else {
            return Err(OpError::not_here(
                Errno::ENOLCK,
                "this server keeps no locks (not a metadata server)",
            ));
        };
        let (mark, result) = exec
            .run(move || {
                let r = mark.set(true);
                Ok((mark, r))
            })
            .await?;
        *io = Some(mark);
        result.map_err(|e| {
            OpError::of_kind(
                pvfs_proto::ErrorKind::Storage,
                Errno::ENOLCK,
                format!("cannot record that locks are held: {e}"),
            )
        })?;
        self.set_marked();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    const TO: u64 = pvfs_proto::locks::TO_EOF;

    fn key(c: u64) -> LockKey {
        LockKey {
            who: 0,
            client: c,
            owner: 1,
        }
    }

    fn want(c: u64, typ: LockType, start: u64, end: u64) -> Want {
        Want {
            key: key(c),
            typ,
            start,
            end,
            pid: 7,
            posix: true,
        }
    }

    fn table() -> LockTable {
        let t = LockTable::new(
            Duration::from_secs(30),
            Duration::from_secs(30),
            Duration::from_secs(5),
            None,
        );
        t.set_marked();
        t
    }

    #[test]
    fn waiter_granted_on_unlock_and_reserved_while_detached() {
        let t = table();
        let w = want(1, LockType::Write, 0, 9);
        assert!(matches!(
            t.try_lock(LockAt::program(5), &w).unwrap(),
            TryLock::Granted(_)
        ));
        let r = want(2, LockType::Read, 5, 5);
        assert_eq!(
            t.try_lock(LockAt::program(5), &r).unwrap(),
            TryLock::Blocked(key(1))
        );
        let (id, _) = t.wait(LockAt::program(5), &r).unwrap();
        assert_eq!(
            t.poll(LockAt::program(5), id),
            (WaitState::Waiting, vec![key(1)], false)
        );
        // Detached (between two sends), then the holder unlocks: reserved.
        assert_eq!(t.detach(LockAt::program(5), id), WaitState::Waiting);
        t.unlock(LockAt::program(5), &key(1), 0, TO);
        // A third client cannot take the reserved bytes meanwhile.
        let x = want(3, LockType::Write, 0, 100);
        assert_eq!(
            t.try_lock(LockAt::program(5), &x).unwrap(),
            TryLock::Blocked(key(2))
        );
        assert_eq!(
            t.test(LockAt::program(5), &key(3), LockType::Write, 0, 0),
            None
        );
        assert!(t
            .test(LockAt::program(5), &key(3), LockType::Write, 5, 5)
            .is_some());
        // The request comes back: same waiter, granted at once.
        let (id2, _) = t.wait(LockAt::program(5), &r).unwrap();
        assert_eq!(id2, id);
        assert_eq!(t.poll(LockAt::program(5), id).0, WaitState::Granted);
        assert_eq!(t.detach(LockAt::program(5), id), WaitState::Granted);
        assert_eq!(
            t.test(LockAt::program(5), &key(3), LockType::Read, 5, 5),
            None
        );
        let c = t
            .test(LockAt::program(5), &key(3), LockType::Write, 5, 5)
            .unwrap();
        assert_eq!((c.typ, c.start, c.end, c.pid), (LockType::Read, 5, 5, 7));
        assert_eq!(t.held_count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unlock_is_settled_once_the_waits_it_ended_took_their_edges_back() {
        use tokio::time::timeout;
        let t = table();
        let settled = || {
            timeout(
                Duration::from_millis(100),
                t.edges_settled(LockAt::program(5)),
            )
        };
        assert!(matches!(
            t.try_lock(LockAt::program(5), &want(1, LockType::Write, 0, TO))
                .unwrap(),
            TryLock::Granted(_)
        ));
        let (b, c) = (
            want(2, LockType::Write, 0, TO),
            want(3, LockType::Write, 0, TO),
        );
        let (ib, _) = t.wait(LockAt::program(5), &b).unwrap();
        let (ic, nc) = t.wait(LockAt::program(5), &c).unwrap();
        assert_eq!(t.poll(LockAt::program(5), ib).1, vec![key(1)]);
        assert_eq!(t.poll(LockAt::program(5), ic).1, vec![key(1)]);
        t.told(LockAt::program(5), ib, vec![key(1)]);
        t.told(LockAt::program(5), ic, vec![key(1)]);
        assert!(
            settled().await.is_ok(),
            "no wait ended: nothing to wait for"
        );
        let woken = nc.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        // 1 lets go: 2 gets the lock, 3 now waits for 2, not 1.
        t.unlock(LockAt::program(5), &key(1), 0, TO);
        assert!(
            timeout(Duration::from_millis(1), woken).await.is_ok(),
            "a waiter whose blocker changed is woken to correct its edges"
        );
        assert!(settled().await.is_err(), "both edges to 1 still stand");
        // 2's request answers: granted; its edge goes after it stopped waiting.
        assert_eq!(t.detach(LockAt::program(5), ib), WaitState::Granted);
        assert!(settled().await.is_err(), "2's edge stands");
        t.told(LockAt::program(5), ib, Vec::new());
        assert!(settled().await.is_err(), "3's edge to 1 stands");
        t.told(LockAt::program(5), ic, vec![key(2)]);
        assert!(settled().await.is_ok(), "every edge is right again");
        // A stale edge nobody takes back is waited for no longer than the bound.
        t.told(LockAt::program(5), ic, vec![key(1)]);
        let start = Instant::now();
        t.edges_settled(LockAt::program(5)).await;
        assert_eq!(start.elapsed(), SETTLE_BOUND);
    }

    #[test]
    fn cancel_and_client_release_wake_others() {
        let t = table();
        assert!(matches!(
            t.try_lock(LockAt::program(1), &want(1, LockType::Write, 0, TO))
                .unwrap(),
            TryLock::Granted(_)
        ));
        let (a, _) = t
            .wait(LockAt::program(1), &want(2, LockType::Write, 0, 0))
            .unwrap();
        let (b, _) = t
            .wait(LockAt::program(1), &want(3, LockType::Read, 0, 0))
            .unwrap();
        t.cancel(LockAt::program(1), &want(2, LockType::Write, 0, 0));
        assert_eq!(t.poll(LockAt::program(1), a).0, WaitState::Cancelled);
        t.release_client(0, 1);
        assert_eq!(t.poll(LockAt::program(1), b).0, WaitState::Granted);
        assert_eq!(t.detach(LockAt::program(1), a), WaitState::Cancelled);
        assert_eq!(t.detach(LockAt::program(1), b), WaitState::Granted);
        assert_eq!(t.held_count(), 1);
    }

    #[test]
    fn no_grant_without_the_mark_and_no_clear_while_held() {
        let t = LockTable::new(
            Duration::from_secs(30),
            Duration::from_secs(30),
            Duration::from_secs(5),
            None,
        );
        let w = want(1, LockType::Write, 0, 0);
        assert_eq!(
            t.try_lock(LockAt::program(1), &w).unwrap(),
            TryLock::NeedMark
        );
        t.set_marked();
        assert!(matches!(
            t.try_lock(LockAt::program(1), &w).unwrap(),
            TryLock::Granted(_)
        ));
        assert!(!t.clear_marked_if_empty());
        t.unlock(LockAt::program(1), &key(1), 0, TO);
        assert!(t.clear_marked_if_empty());
        // A waiter freed while the mark is clear is reserved, not granted.
        let (id, _) = t.wait(LockAt::program(1), &w).unwrap();
        assert_eq!(
            t.poll(LockAt::program(1), id),
            (WaitState::Ready, vec![], true)
        );
        assert_eq!(t.held_count(), 0);
    }

    #[test]
    fn leases_expire_with_their_locks_unless_a_request_waits() {
        let t = LockTable::new(
            Duration::from_millis(1),
            Duration::from_millis(1),
            Duration::from_secs(5),
            None,
        );
        t.set_marked();
        let TryLock::Granted(id) = t
            .try_lock(LockAt::program(1), &want(1, LockType::Write, 0, 0))
            .unwrap()
        else {
            panic!("not granted")
        };
        assert_eq!(t.renew(0, 1), Some(id));
        let (_, _) = t
            .wait(LockAt::program(1), &want(2, LockType::Write, 0, 0))
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(t.expire(), vec![(0, 1)], "the waiting client stays");
        // ...and gets the lock the other one lost.
        assert_eq!(t.held_count(), 1);
        assert_eq!(t.renew(0, 1), None);
        assert!(t.renew(0, 2).is_some());
        let id2 = t.touch(&key(1));
        assert_ne!(id, id2, "a new lease has a new id");
    }

    /// What the table must keep true after every call: no two locks of different
    /// owners that conflict are held, none is held against another owner's
    /// reservation, and the counts the limits use are the locks held.
    fn check_invariants(t: &LockTable, seed: u64, step: usize) {
        let st = lock(&t.state);
        let at = format!("seed {seed} step {step}");
        let mut total = 0;
        let mut per_client: BTreeMap<(u64, u64), usize> = BTreeMap::new();
        for (handle, f) in &st.files {
            total += f.held.len();
            for (i, a) in f.held.iter().enumerate() {
                *per_client.entry((a.owner.who, a.owner.client)).or_default() += 1;
                for b in &f.held[i + 1..] {
                    let overlap = locks::overlaps((a.start, a.end), (b.start, b.end));
                    assert!(
                        !(overlap && (a.owner != b.owner) && a.typ.conflicts(b.typ)),
                        "{at}: file {handle:?}: conflicting locks held: {a:?} and {b:?}"
                    );
                    assert!(
                        !(overlap && a.owner == b.owner),
                        "{at}: file {handle:?}: one owner's locks overlap: {a:?} and {b:?}"
                    );
                }
                for w in f.waiters.iter().filter(|w| w.state == WaitState::Ready) {
                    assert!(
                        !w.want.hindered_by(&a.owner, a.typ, a.start, a.end),
                        "{at}: file {handle:?}: {a:?} held against the reservation of {:?}",
                        w.want
                    );
                }
            }
        }
        assert_eq!(st.total, total, "{at}: the count of locks held");
        for (k, lease) in &st.leases {
            let held = per_client.get(k).copied().unwrap_or(0);
            assert_eq!(
                lease.segments, held,
                "{at}: the locks counted for client {k:?}"
            );
        }
        for k in per_client.keys() {
            assert!(
                st.leases.contains_key(k),
                "{at}: client {k:?} holds locks without a lease"
            );
        }
    }

    #[test]
    fn appenders_locks_conflict_only_with_each_other() {
        let t = table();
        let whole = |c| want(c, LockType::Write, 0, TO);
        let program = LockAt::program(5);
        let append = LockAt::append(5);
        assert!(matches!(
            t.try_lock(program, &whole(1)).unwrap(),
            TryLock::Granted(_)
        ));
        // Another owner's appender lock on the whole file: granted beside it.
        assert!(matches!(
            t.try_lock(append, &whole(2)).unwrap(),
            TryLock::Granted(_)
        ));
        // F_GETLK sees the program's lock, not the appender's.
        assert_eq!(
            t.test(program, &key(3), LockType::Read, 0, 0)
                .map(|c| c.start),
            Some(0)
        );
        t.unlock(program, &key(1), 0, TO);
        assert_eq!(t.test(program, &key(3), LockType::Write, 0, TO), None);
        // A second appender waits for the first, even of the owner that locked
        // the file for the program.
        assert_eq!(
            t.try_lock(append, &whole(1)).unwrap(),
            TryLock::Blocked(key(2))
        );
        assert!(matches!(
            t.try_lock(program, &whole(3)).unwrap(),
            TryLock::Granted(_)
        ));
        // Unlocking the program's space leaves the appender's lock.
        t.unlock(program, &key(2), 0, TO);
        assert_eq!(
            t.try_lock(append, &whole(1)).unwrap(),
            TryLock::Blocked(key(2))
        );
        t.unlock(append, &key(2), 0, TO);
        assert!(matches!(
            t.try_lock(append, &whole(1)).unwrap(),
            TryLock::Granted(_)
        ));
        assert_eq!(t.held_count(), 2);
    }

    #[test]
    fn random_calls_never_hold_conflicting_locks_and_keep_the_counts() {
        let mut grants = 0;
        let mut refusals = 0;
        for seed in 1..=150u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let t = table();
            // Requests waiting now: (file, waiter id).
            let mut waiting: Vec<(LockAt, u64)> = Vec::new();
            for step in 0..300 {
                // Two files, each with the programs' locks and the appenders'.
                let file = LockAt {
                    handle: 1 + rng.below(2),
                    append: rng.below(3) == 0,
                };
                let client = rng.below(4);
                let start = rng.below(12);
                let end = if rng.below(6) == 0 {
                    TO
                } else {
                    start + rng.below(6)
                };
                let typ = if rng.below(2) == 0 {
                    LockType::Read
                } else {
                    LockType::Write
                };
                let w = want(client, typ, start, end);
                match rng.below(9) {
                    0 | 1 => match t.try_lock(file, &w).unwrap() {
                        TryLock::Granted(_) => grants += 1,
                        TryLock::Blocked(_) => refusals += 1,
                        TryLock::NeedMark => panic!("seed {seed}: the table is marked"),
                    },
                    2 => {
                        let (id, _) = t.wait(file, &w).unwrap();
                        waiting.push((file, id));
                    }
                    3 | 4 if !waiting.is_empty() => {
                        let (f, id) = waiting[rng.below(waiting.len() as u64) as usize];
                        if t.poll(f, id).0 == WaitState::Granted {
                            grants += 1;
                        }
                    }
                    5 if !waiting.is_empty() => {
                        let i = rng.below(waiting.len() as u64) as usize;
                        let (f, id) = waiting.swap_remove(i);
                        t.detach(f, id);
                    }
                    6 => t.unlock(file, &key(client), start, end),
                    7 => t.cancel(file, &w),
                    8 if rng.below(4) == 0 => t.release_client(0, client),
                    _ => {
                        t.test(file, &key(client), typ, start, end);
                    }
                }
                check_invariants(&t, seed, step);
            }
            for (f, id) in waiting.drain(..) {
                t.detach(f, id);
            }
            for client in 0..4 {
                t.release_client(0, client);
            }
            check_invariants(&t, seed, usize::MAX);
            assert_eq!(t.held_count(), 0, "seed {seed}: every client released");
        }
        // The calls contended: a check that saw no grant or no refusal checks nothing.
        assert!(
            grants > 1000 && refusals > 1000,
            "{grants} grants, {refusals} refusals"
        );
    }

    #[tokio::test]
    async fn the_mark_is_written_before_a_grant_and_cleared_only_once_no_lock_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let on_disk = || LockMark::open(dir.path()).unwrap().held();
        let lease = Duration::from_millis(300);
        let t = LockTable::new(
            lease,
            grace_period(lease, lease),
            Duration::from_secs(5),
            Some(LockMark::open(dir.path()).unwrap()),
        );
        assert!(
            t.grace_end().is_none(),
            "no lock was held before: no grace period"
        );
        let w = want(1, LockType::Write, 0, 9);
        assert_eq!(
            t.try_lock(LockAt::program(1), &w).unwrap(),
            TryLock::NeedMark
        );
        t.ensure_marked(Exec::Threads).await.unwrap();
        assert!(on_disk(), "the mark is on disk before the grant");
        assert!(matches!(
            t.try_lock(LockAt::program(1), &w).unwrap(),
            TryLock::Granted(_)
        ));
        // The client stops renewing its lease: the expiry loop ends it, releasing its
        // lock, and then clears the mark; never while the lock is held.
        let watch = async {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                // The mark first: once it reads clear, no lock may be left.
                let marked = on_disk();
                let held = t.held_count();
                if !marked {
                    assert_eq!(held, 0, "the mark was cleared while a lock was held");
                    return;
                }
                assert!(Instant::now() < deadline, "the mark is never cleared");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::select! {
            _ = t.expire_loop(Exec::Threads, |_| {}, || true) => unreachable!("the loop runs until dropped"),
            _ = watch => {}
        }
        assert_eq!(t.renew(0, 1), None, "the lease ended");
        assert!(!t.marked());
        drop(t);
        // A server that stopped with the mark set starts in a grace period.
        LockMark::open(dir.path()).unwrap().set(true).unwrap();
        let t = LockTable::new(
            lease,
            grace_period(lease, lease),
            Duration::from_secs(5),
            Some(LockMark::open(dir.path()).unwrap()),
        );
        assert!(t.grace_end().is_some() && t.marked());
        // Long enough for a client to find a group that failed over: a lock lease
        // and a map lease.
        let left = t.grace_end().unwrap() - Instant::now();
        assert!(left > lease + lease / 2 && left <= 2 * lease, "{left:?}");
    }
}
