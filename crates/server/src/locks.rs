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
//!   its lock can be granted ([`LockTable::wake`] on every release). A waiter is
//!   answered "still waiting" after a bounded time; the client sends the request
//!   again at once and finds its waiter, and its place, kept for a short while. A
//!   lock that frees while the waiter's client is between two sends is reserved for
//!   it (no one else takes it) until it comes back or that while ends.
//!
//! Everything here is synchronous under one mutex; the handlers do the waiting.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pvfs_proto::locks::{self, LockConflict, LockKey, LockType, Segment};
use pvfs_proto::{Errno, Handle};
use pvfs_storage::LockMark;
use tokio::sync::Notify;

use crate::error::{OpError, OpResult};

/// Most locks (segments) one server holds; beyond it requests get ENOLCK.
pub const MAX_SEGMENTS: usize = 1 << 20;
/// Most locks one client holds on one server.
pub const MAX_CLIENT_SEGMENTS: usize = 1 << 16;
/// Most waiting requests one client has on one server.
pub const MAX_CLIENT_WAITERS: usize = 1 << 12;

/// Where a waiting request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitState {
    /// Blocked by another owner's lock (or the grace period).
    Waiting,
    /// Grantable, reserved for it while its client is between two sends.
    Ready,
    /// Granted: the lock is in the table.
    Granted,
    /// Withdrawn (`CancelLock`, a deadlock, its client's lease ended).
    Cancelled,
}

/// What a waiting request wants.
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

    /// The reservations (of waiters between two sends) of other owners that keep
    /// `want` from being granted, but for waiter `skip`.
    fn reservations<'a>(
        &'a self,
        want: &'a Want,
        skip: Option<u64>,
    ) -> impl Iterator<Item = &'a Waiter> + 'a {
        self.waiters.iter().filter(move |w| {
            Some(w.id) != skip
                && w.state == WaitState::Ready
                && w.want.key != want.key
                && w.want.typ.conflicts(want.typ)
                && locks::overlaps((w.want.start, w.want.end), (want.start, want.end))
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
            .filter(|s| {
                s.owner != want.key
                    && s.typ.conflicts(want.typ)
                    && locks::overlaps((s.start, s.end), (want.start, want.end))
            })
            .map(|s| s.owner)
            .chain(self.reservations(want, skip).map(|w| w.want.key))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn apply(&mut self, want: &Want) {
        locks::set(
            &mut self.held,
            &want.key,
            Some(want.typ),
            want.start,
            want.end,
            want.pid,
            want.posix,
        );
    }
}

/// A client's lease.
struct Lease {
    id: u64,
    expires: Instant,
}

#[derive(Default)]
struct State {
    files: HashMap<Handle, FileLocks>,
    /// By (who, client id).
    leases: HashMap<(u64, u64), Lease>,
    next_waiter: u64,
    /// Whether the storage's mark says locks may be held (set before any grant).
    marked: bool,
}

impl State {
    fn segments(&self) -> usize {
        self.files.values().map(|f| f.held.len()).sum()
    }

    fn client_counts(&self, who: u64, client: u64) -> (usize, usize) {
        let mine = |k: &LockKey| k.who == who && k.client == client;
        self.files.values().fold((0, 0), |(s, w), f| {
            (
                s + f.held.iter().filter(|x| mine(&x.owner)).count(),
                w + f.waiters.iter().filter(|x| mine(&x.want.key)).count(),
            )
        })
    }
}

/// The answer of [`LockTable::try_lock`] when the lock cannot be granted now.
#[derive(Debug, PartialEq, Eq)]
pub struct Blocked(pub LockKey);

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
    /// Source of lease ids (random start; never 0).
    next_lease: AtomicU64,
    /// Serializes writes of the storage's mark.
    pub mark_io: tokio::sync::Mutex<Option<LockMark>>,
    /// Set once the grace period has been seen to end (saves a clock read).
    grace_over: AtomicBool,
}

/// Locks a mutex, recovering the data if a holder panicked.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A random 64-bit number from the kernel (else from the clock and pid).
fn random_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_le_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ u64::from(std::process::id()) << 40).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl LockTable {
    /// An empty table. `mark`: the storage's mark (None on a server without the
    /// metadata role); when it says locks may have been held, the table starts in a
    /// grace period of one lease. `request`: the request timeout, which bounds a
    /// waiting request's answer (a third of it) and how long a waiter is kept
    /// between two sends (all of it).
    pub fn new(lease: Duration, request: Duration, mark: Option<LockMark>) -> LockTable {
        let held_before = mark.as_ref().is_some_and(|m| m.held());
        let grace_until = held_before.then(|| Instant::now() + lease);
        if held_before {
            tracing::info!(
                "clients may have held locks here before this start: only reclaims for {lease:?} (grace period)"
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
            next_lease: AtomicU64::new(random_u64() | 1),
            mark_io: tokio::sync::Mutex::new(mark),
            grace_over: AtomicBool::new(grace_until.is_none()),
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
        });
        lease.expires = expires;
        lease.id
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
    /// mark clear, holding `mark_io`); whether it did.
    pub fn clear_marked_if_empty(&self) -> bool {
        let mut st = lock(&self.state);
        if st.marked && st.files.values().all(|f| f.held.is_empty()) {
            st.marked = false;
            return true;
        }
        false
    }

    fn check_limits(st: &State, key: &LockKey, waiter: bool) -> OpResult<()> {
        let (segs, waits) = st.client_counts(key.who, key.client);
        if segs >= MAX_CLIENT_SEGMENTS || (waiter && waits >= MAX_CLIENT_WAITERS) {
            return Err(OpError::new(
                Errno::ENOLCK,
                format!(
                    "the client holds {segs} locks and {waits} waiting requests here (limits {MAX_CLIENT_SEGMENTS} and {MAX_CLIENT_WAITERS})"
                ),
            ));
        }
        if st.segments() >= MAX_SEGMENTS {
            return Err(OpError::new(
                Errno::ENOLCK,
                format!("this server's lock table is full ({MAX_SEGMENTS} locks)"),
            ));
        }
        Ok(())
    }

    /// Grants `want` at once if nothing stands in the way (and renews the lease):
    /// Ok(lease id), or who blocks it.
    pub fn try_lock(&self, handle: Handle, want: &Want) -> OpResult<Result<u64, Blocked>> {
        let mut st = lock(&self.state);
        let lease = self.touch_locked(&mut st, want.key.who, want.key.client);
        let f = st.files.entry(handle).or_default();
        if let Some(b) = f.blocker(want, None) {
            if f.is_empty() {
                st.files.remove(&handle);
            }
            return Ok(Err(Blocked(b)));
        }
        Self::check_limits(&st, &want.key, false)?;
        st.files.entry(handle).or_default().apply(want);
        Ok(Ok(lease))
    }

    /// Registers a waiting request for `want` (or finds the one it sent before,
    /// keeping its place), grants it if it can be, and returns its id, its state and
    /// what to wait on.
    pub fn wait(&self, handle: Handle, want: &Want) -> OpResult<(u64, WaitState, Arc<Notify>)> {
        let mut st = lock(&self.state);
        self.touch_locked(&mut st, want.key.who, want.key.client);
        let existing = st.files.get(&handle).and_then(|f| {
            f.waiters
                .iter()
                .position(|w| w.want.same_request(want) && w.state != WaitState::Cancelled)
        });
        let id = match existing {
            Some(i) => {
                let f = st.files.get_mut(&handle).ok_or_else(internal)?;
                let w = &mut f.waiters[i];
                w.attached += 1;
                w.detached_until = None;
                w.want.pid = want.pid;
                w.id
            }
            None => {
                Self::check_limits(&st, &want.key, true)?;
                st.next_waiter += 1;
                let id = st.next_waiter;
                st.files.entry(handle).or_default().waiters.push(Waiter {
                    id,
                    want: *want,
                    attached: 1,
                    detached_until: None,
                    state: WaitState::Waiting,
                    notify: Arc::new(Notify::new()),
                });
                id
            }
        };
        let f = st.files.get_mut(&handle).ok_or_else(internal)?;
        let i = f
            .waiters
            .iter()
            .position(|w| w.id == id)
            .ok_or_else(internal)?;
        let w = &f.waiters[i];
        let (state, want, notify) = (w.state, w.want, w.notify.clone());
        if matches!(state, WaitState::Waiting | WaitState::Ready)
            && f.blocker(&want, Some(id)).is_none()
        {
            f.apply(&want);
            f.waiters[i].state = WaitState::Granted;
            return Ok((id, WaitState::Granted, notify));
        }
        Ok((id, state, notify))
    }

    /// Where waiter `id` stands, and who blocks it (when it waits).
    pub fn waiter(&self, handle: Handle, id: u64) -> (WaitState, Vec<LockKey>) {
        let st = lock(&self.state);
        let Some(f) = st.files.get(&handle) else {
            return (WaitState::Cancelled, Vec::new());
        };
        match f.waiters.iter().find(|w| w.id == id) {
            None => (WaitState::Cancelled, Vec::new()),
            Some(w) if w.state == WaitState::Waiting || w.state == WaitState::Ready => {
                (w.state, f.blockers(&w.want, Some(id)))
            }
            Some(w) => (w.state, Vec::new()),
        }
    }

    /// A request waiting on `id` stops waiting (answered, or its time is up): the
    /// waiter's state then. A granted or withdrawn waiter is forgotten once no request
    /// waits on it; a waiting one is kept for [`LockTable::keep_detached`].
    pub fn detach(&self, handle: Handle, id: u64) -> WaitState {
        let mut st = lock(&self.state);
        let Some(f) = st.files.get_mut(&handle) else {
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
                WaitState::Granted | WaitState::Cancelled => {
                    f.waiters.remove(i);
                    if f.is_empty() {
                        st.files.remove(&handle);
                    }
                }
                WaitState::Waiting | WaitState::Ready => {
                    w.detached_until = Some(Instant::now() + self.keep_detached);
                }
            }
        }
        state
    }

    /// Withdraws waiter `id` (a deadlock): requests waiting on it see it cancelled.
    pub fn cancel_id(&self, handle: Handle, id: u64) {
        let mut st = lock(&self.state);
        if let Some(f) = st.files.get_mut(&handle) {
            if let Some(w) = f
                .waiters
                .iter_mut()
                .find(|w| w.id == id && w.state != WaitState::Granted)
            {
                w.state = WaitState::Cancelled;
                w.notify.notify_waiters();
            }
            Self::wake_file(f);
        }
    }

    /// Withdraws the waiting request of `want` (its type and range): requests
    /// waiting on it are answered EINTR. One already granted stays granted.
    pub fn cancel(&self, handle: Handle, want: &Want) {
        let mut st = lock(&self.state);
        if let Some(f) = st.files.get_mut(&handle) {
            for w in f.waiters.iter_mut().filter(|w| {
                w.want.same_request(want)
                    && matches!(w.state, WaitState::Waiting | WaitState::Ready)
            }) {
                w.state = WaitState::Cancelled;
                w.notify.notify_waiters();
            }
            f.waiters
                .retain(|w| !(w.state == WaitState::Cancelled && w.attached == 0));
            Self::wake_file(f);
            if f.is_empty() {
                st.files.remove(&handle);
            }
        }
    }

    /// Releases what `key` holds on `start ..= end` of `handle`, and grants what
    /// waits for it.
    pub fn unlock(&self, handle: Handle, key: &LockKey, start: u64, end: u64) {
        let mut st = lock(&self.state);
        self.touch_locked(&mut st, key.who, key.client);
        if let Some(f) = st.files.get_mut(&handle) {
            locks::set(&mut f.held, key, None, start, end, 0, false);
            Self::wake_file(f);
            if f.is_empty() {
                st.files.remove(&handle);
            }
        }
    }

    /// The first lock or reservation of another owner keeping `key` from `typ` on
    /// the range.
    pub fn test(
        &self,
        handle: Handle,
        key: &LockKey,
        typ: LockType,
        start: u64,
        end: u64,
    ) -> Option<LockConflict> {
        let st = lock(&self.state);
        let f = st.files.get(&handle)?;
        if let Some(s) = locks::conflict(&f.held, key, typ, start, end) {
            return Some(LockConflict {
                typ: s.typ,
                start: s.start,
                end: s.end,
                pid: s.pid,
                posix: s.posix,
                same_client: s.owner.who == key.who && s.owner.client == key.client,
            });
        }
        let want = Want {
            key: *key,
            typ,
            start,
            end,
            pid: 0,
            posix: true,
        };
        let found = f.reservations(&want, None).next().map(|w| LockConflict {
            typ: w.want.typ,
            start: w.want.start,
            end: w.want.end,
            pid: w.want.pid,
            posix: w.want.posix,
            same_client: w.want.key.who == key.who && w.want.key.client == key.client,
        });
        found
    }

    /// Drops every lock and waiting request of client `client` of `who`, and its
    /// lease.
    pub fn release_client(&self, who: u64, client: u64) {
        let mut st = lock(&self.state);
        st.leases.remove(&(who, client));
        Self::drop_client(&mut st, who, client);
    }

    fn drop_client(st: &mut State, who: u64, client: u64) {
        let mine = |k: &LockKey| k.who == who && k.client == client;
        st.files.retain(|_, f| {
            let before = (f.held.len(), f.waiters.len());
            f.held.retain(|s| !mine(&s.owner));
            for w in f.waiters.iter_mut().filter(|w| mine(&w.want.key)) {
                w.state = WaitState::Cancelled;
                w.notify.notify_waiters();
            }
            f.waiters
                .retain(|w| !(w.state == WaitState::Cancelled && w.attached == 0));
            if (f.held.len(), f.waiters.len()) != before {
                Self::wake_file(f);
            }
            !f.is_empty()
        });
    }

    /// Ends leases not renewed in time (dropping their clients' locks) and waiters
    /// not asked for again in time. Returns the clients whose leases ended.
    pub fn expire(&self) -> Vec<(u64, u64)> {
        let now = Instant::now();
        let mut st = lock(&self.state);
        let ended: Vec<(u64, u64)> = st
            .leases
            .iter()
            .filter(|(_, l)| l.expires <= now)
            .map(|(k, _)| *k)
            .collect();
        for &(who, client) in &ended {
            st.leases.remove(&(who, client));
            Self::drop_client(&mut st, who, client);
        }
        st.files.retain(|_, f| {
            let before = f.waiters.len();
            f.waiters
                .retain(|w| w.attached > 0 || w.detached_until.is_none_or(|t| t > now));
            if f.waiters.len() != before {
                Self::wake_file(f);
            }
            !f.is_empty()
        });
        ended
    }

    /// Grants, in queue order, the waiting requests that nothing blocks any more:
    /// at once for those a request waits on, as a reservation for those between two
    /// sends.
    fn wake_file(f: &mut FileLocks) {
        for i in 0..f.waiters.len() {
            let (id, want, state, attached) = {
                let w = &f.waiters[i];
                (w.id, w.want, w.state, w.attached)
            };
            if !matches!(state, WaitState::Waiting | WaitState::Ready) {
                continue;
            }
            let free = f.blocker(&want, Some(id)).is_none();
            if free && attached > 0 {
                f.apply(&want);
            }
            let w = &mut f.waiters[i];
            w.state = match (free, attached > 0) {
                (true, true) => {
                    w.notify.notify_waiters();
                    WaitState::Granted
                }
                (true, false) => WaitState::Ready,
                (false, _) => WaitState::Waiting,
            };
        }
    }

    /// Locks held now (for the status of tests and logs).
    pub fn held_count(&self) -> usize {
        lock(&self.state).segments()
    }
}

fn internal() -> OpError {
    OpError::new(Errno::EIO, "lock table inconsistent (a bug)")
}

/// Ends expired leases and forgotten waiters every tenth of a lease, and clears the
/// storage's mark once no lock is held (so a restart skips the grace period).
pub async fn expire_loop(ctx: Arc<crate::ctx::Ctx>) {
    let every = (ctx.locks.lease / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (who, client) in ctx.locks.expire() {
            tracing::info!(
                who = format_args!("{who:#x}"),
                client = format_args!("{client:#x}"),
                "a client's lock lease ended: its locks are released"
            );
        }
        if ctx.locks.grace_end().is_none() {
            clear_mark(&ctx).await;
        }
    }
}

/// Writes the storage's mark clear if no lock is held.
async fn clear_mark(ctx: &Arc<crate::ctx::Ctx>) {
    let mut io = ctx.locks.mark_io.lock().await;
    if io.is_none() || !ctx.locks.clear_marked_if_empty() {
        return;
    }
    let Some(mut mark) = io.take() else { return };
    let (mark, result) = match tokio::task::spawn_blocking(move || {
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
/// (written durably the first time after it was clear).
pub async fn ensure_marked(ctx: &Arc<crate::ctx::Ctx>) -> OpResult<()> {
    if ctx.locks.marked() {
        return Ok(());
    }
    let mut io = ctx.locks.mark_io.lock().await;
    if ctx.locks.marked() {
        return Ok(());
    }
    let Some(mut mark) = io.take() else {
        return Err(OpError::new(
            Errno::ENOLCK,
            "this server keeps no locks (not a metadata server)",
        ));
    };
    let (mark, result) = ctx
        .blocking(move || {
            let r = mark.set(true);
            Ok((mark, r))
        })
        .await?;
    *io = Some(mark);
    result.map_err(|e| {
        OpError::new(
            Errno::ENOLCK,
            format!("cannot record that locks are held: {e}"),
        )
    })?;
    ctx.locks.set_marked();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        LockTable::new(Duration::from_secs(30), Duration::from_secs(5), None)
    }

    #[test]
    fn waiter_granted_on_unlock_and_reserved_while_detached() {
        let t = table();
        let w = want(1, LockType::Write, 0, 9);
        assert!(t.try_lock(5, &w).unwrap().is_ok());
        let r = want(2, LockType::Read, 5, 5);
        assert_eq!(t.try_lock(5, &r).unwrap(), Err(Blocked(key(1))));
        let (id, state, _) = t.wait(5, &r).unwrap();
        assert_eq!(state, WaitState::Waiting);
        assert_eq!(t.waiter(5, id).1, vec![key(1)]);
        // Detached (between two sends), then the holder unlocks: reserved.
        assert_eq!(t.detach(5, id), WaitState::Waiting);
        t.unlock(5, &key(1), 0, TO);
        assert_eq!(t.waiter(5, id).0, WaitState::Ready);
        // A third client cannot take the reserved bytes meanwhile.
        let x = want(3, LockType::Write, 0, 100);
        assert_eq!(t.try_lock(5, &x).unwrap(), Err(Blocked(key(2))));
        assert_eq!(t.test(5, &key(3), LockType::Write, 0, 0), None);
        assert!(t.test(5, &key(3), LockType::Write, 5, 5).is_some());
        // The request comes back: granted at once, same place.
        let (id2, state, _) = t.wait(5, &r).unwrap();
        assert_eq!((id2, state), (id, WaitState::Granted));
        assert_eq!(t.detach(5, id), WaitState::Granted);
        assert_eq!(t.test(5, &key(3), LockType::Read, 5, 5), None);
        let c = t.test(5, &key(3), LockType::Write, 5, 5).unwrap();
        assert_eq!((c.typ, c.start, c.end, c.pid), (LockType::Read, 5, 5, 7));
    }

    const TO: u64 = pvfs_proto::locks::TO_EOF;

    #[test]
    fn cancel_and_client_release_wake_others() {
        let t = table();
        assert!(t
            .try_lock(1, &want(1, LockType::Write, 0, TO))
            .unwrap()
            .is_ok());
        let (a, _, _) = t.wait(1, &want(2, LockType::Write, 0, 0)).unwrap();
        let (b, _, _) = t.wait(1, &want(3, LockType::Read, 0, 0)).unwrap();
        t.cancel(1, &want(2, LockType::Write, 0, 0));
        assert_eq!(t.waiter(1, a).0, WaitState::Cancelled);
        t.release_client(0, 1);
        assert_eq!(t.waiter(1, b).0, WaitState::Granted);
        assert_eq!(t.detach(1, a), WaitState::Cancelled);
        assert_eq!(t.detach(1, b), WaitState::Granted);
        assert_eq!(t.held_count(), 1);
    }

    #[test]
    fn leases_expire_with_their_locks() {
        let t = LockTable::new(Duration::from_millis(1), Duration::from_secs(5), None);
        let id = t
            .try_lock(1, &want(1, LockType::Write, 0, 0))
            .unwrap()
            .unwrap();
        assert_eq!(t.renew(0, 1), Some(id));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(t.expire(), vec![(0, 1)]);
        assert_eq!(t.held_count(), 0);
        assert_eq!(t.renew(0, 1), None);
        let id2 = t.touch(&key(1));
        assert_ne!(id, id2, "a new lease has a new id");
    }
}
