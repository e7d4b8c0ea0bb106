//! Cluster-wide byte-range locks (`docs/locks.md`): POSIX record locks, OFD locks and
//! `flock`, held by the metadata server that owns the file's object, for every
//! interface (the mount, the C library, the preload library).
//!
//! - **Owners.** A lock belongs to an owner the interface names (a process for POSIX
//!   record locks, an open file description for OFD locks and `flock`); the server
//!   keys it by this client's id and the connection's proven identity.
//! - **What this client holds** is recorded here with the same range arithmetic as
//!   the server's table (`pvfs_proto::locks`), so it can reclaim its locks after a
//!   server restart and release an owner's locks at close without asking anyone
//!   when it holds none.
//! - **Leases.** While it holds locks on a server the client renews its lease there
//!   three times per lease (a task, or a thread for a runtime driven by its callers).
//!   A server that forgot the lease (it restarted) and is in its grace period gets
//!   every lock back (reclaim); a lock that cannot be reclaimed, or whose lease ended
//!   while the client was cut off, is *lost*: the owner's next lock operation on that
//!   file fails once with ENOLCK.
//! - **Waiting.** A blocking request is answered the moment the lock is granted, or
//!   "still waiting" after a bounded time, and sent again at once (the server keeps
//!   its place). Between answers the caller's `interrupted` check runs every
//!   [`POLL`]: when it says so the wait is withdrawn at the server and the call fails
//!   with EINTR (unless the lock was granted meanwhile).

use pvfs_proto::req;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;
use tokio::time::Instant;

use pvfs_proto::locks::{
    self as range, LockConflict, LockOwner, LockType, Segment, LOCK_POSIX, LOCK_RECLAIM, LOCK_WAIT,
    TO_EOF,
};
use pvfs_proto::{encode, Creds, Errno, ErrorKind, Handle, Request, RequestBody, Response, Scope};

use crate::error::{Error, Result};
use crate::pool::unexpected;
use crate::{Client, Inner};

/// How often a waiting lock request checks whether its caller was interrupted.
pub const POLL: Duration = Duration::from_millis(50);
/// Pause before a lock request is sent again after its server could not be reached.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What kind of lock: it decides who owns it and whether its waits are checked for
/// deadlocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    /// A POSIX record lock (`F_SETLK`, `lockf`): owned by a process; a wait that
    /// would deadlock fails with EDEADLK.
    Posix,
    /// An OFD lock (`F_OFD_SETLK`) or a `flock` (a whole-file lock): owned by an
    /// open file description; waits are not checked (as on Linux).
    Ofd,
}

/// One lock request of an owner.
#[derive(Clone, Copy, Debug)]
pub struct LockRequest {
    /// The file's (or directory's) handle.
    pub handle: Handle,
    /// The owner, named by the interface (unique within this client).
    pub owner: u64,
    /// POSIX or OFD/flock.
    pub kind: LockKind,
    /// Shared or exclusive.
    pub typ: LockType,
    /// First byte.
    pub start: u64,
    /// Last byte, inclusive ([`TO_EOF`]: to the end of the file).
    pub end: u64,
    /// The process asking (shown by F_GETLK to other processes of this client).
    pub pid: u32,
    /// Wait until it can be granted (F_SETLKW) instead of failing with EAGAIN.
    pub wait: bool,
}

/// What the client records of one owner's locks on one file, to reclaim them.
#[derive(Clone)]
struct OwnerInfo {
    creds: Creds,
    kind: LockKind,
}

/// The locks this client holds on one server.
#[derive(Default)]
pub(crate) struct ServerLocks {
    /// The id of our lease there (0: none known yet).
    lease: u64,
    /// By file: every owner's locks.
    files: BTreeMap<Handle, Vec<Segment<u64>>>,
    /// The server forgot our lease and is in its grace period: reclaim.
    reclaim: bool,
    /// The lease our holds there are under (0: none known).
    open_lease: u64,
    /// The server forgot our holds: send them again (`crate::holds`).
    rehold: bool,
}

#[derive(Default)]
pub(crate) struct Held {
    pub(crate) servers: BTreeMap<usize, ServerLocks>,
    /// Per (file, owner): how to reclaim (credentials, kind).
    owners: BTreeMap<(Handle, u64), OwnerInfo>,
    /// Owners that sent a lock request for a file (their locks are released at close
    /// even if no answer reached us).
    touched: BTreeSet<(Handle, u64)>,
    /// Owners whose locks on a file were lost (reported once).
    lost: BTreeSet<(Handle, u64)>,
    /// Whether the lease keeper runs.
    keeper: bool,
    /// The files this client holds open (`crate::holds`).
    pub(crate) opens: crate::holds::Opens,
    /// Appenders' locks held now, by server (`crate::append`): they keep the lease.
    pub(crate) appending: BTreeMap<usize, usize>,
}

impl Held {
    /// Whether this client needs its lease on `server`: it holds locks or open
    /// files there.
    fn holds_on(&self, server: usize) -> bool {
        self.locks_on(server) || self.opens.on(server)
    }

    fn locks_on(&self, server: usize) -> bool {
        self.appending.contains_key(&server)
            || self
                .servers
                .get(&server)
                .is_some_and(|s| s.files.values().any(|v| !v.is_empty()))
    }

    /// Takes in a lease id for the holds on `server`: a new one (or none) while
    /// holding files there means the server forgot them.
    fn observe_opens(&mut self, server: usize, lease: u64) {
        let holding = self.opens.on(server);
        let s = self.servers.entry(server).or_default();
        if lease == 0 {
            s.rehold |= holding;
        } else if s.open_lease != lease {
            s.rehold |= holding && s.open_lease != 0;
            s.open_lease = lease;
        }
    }

    /// Every lock recorded on `server` is lost.
    fn lose_server(&mut self, server: usize) {
        let Some(s) = self.servers.get_mut(&server) else {
            return;
        };
        let files = std::mem::take(&mut s.files);
        s.reclaim = false;
        for (handle, segs) in files {
            for seg in segs {
                tracing::warn!(
                    "lock on {handle:#x} ({}..={}) lost: the server forgot it",
                    seg.start,
                    seg.end
                );
                self.lost.insert((handle, seg.owner));
                self.owners.remove(&(handle, seg.owner));
            }
        }
    }

    /// Takes in a lease id a server answered: a new one while we hold locks under
    /// another means the server forgot them: reclaimed in its grace period, else
    /// lost.
    pub(crate) fn observe(&mut self, server: usize, lease: u64, grace: bool) {
        self.observe_opens(server, lease);
        let holds = self.locks_on(server);
        let s = self.servers.entry(server).or_default();
        if s.lease == lease && lease != 0 {
            return;
        }
        if !holds {
            s.lease = lease;
            s.reclaim = false;
            return;
        }
        if grace {
            s.reclaim = true;
        } else {
            self.lose_server(server);
            if let Some(s) = self.servers.get_mut(&server) {
                s.lease = lease;
            }
        }
    }

    fn record(&mut self, server: usize, req: &LockRequest, typ: Option<LockType>, creds: &Creds) {
        let s = self.servers.entry(server).or_default();
        let segs = s.files.entry(req.handle).or_default();
        range::set(
            segs,
            &req.owner,
            typ,
            req.start,
            req.end,
            req.pid,
            req.kind == LockKind::Posix,
        );
        if segs.is_empty() {
            s.files.remove(&req.handle);
        }
        let still = s
            .files
            .get(&req.handle)
            .is_some_and(|v| range::held_by(v, &req.owner).next().is_some());
        if still {
            self.owners.insert(
                (req.handle, req.owner),
                OwnerInfo {
                    creds: creds.clone(),
                    kind: req.kind,
                },
            );
        } else {
            self.owners.remove(&(req.handle, req.owner));
        }
    }
}

/// The lock state of one client.
#[derive(Default)]
pub(crate) struct LockState {
    held: Mutex<Held>,
    /// Serializes reclaims (one server at a time is enough).
    reclaiming: tokio::sync::Mutex<()>,
    /// For a runtime driven only by its callers: the runtime the lease thread drives.
    runner: OnceLock<Weak<tokio::runtime::Runtime>>,
    /// Source of the owners of appenders' locks (one per append).
    append_owners: std::sync::atomic::AtomicU64,
    /// Whether a look at the cluster map that a failed renewal asked for runs.
    refreshing: std::sync::atomic::AtomicBool,
}

impl LockState {
    pub(crate) fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new owner for an appender's lock.
    pub(crate) fn next_append_owner(&self) -> u64 {
        self.append_owners
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Tells the lock state which runtime to drive when renewing leases from a
    /// thread of its own (a current-thread runtime runs nothing by itself).
    pub(crate) fn set_runner(&self, rt: Weak<tokio::runtime::Runtime>) {
        let _ = self.runner.set(rt);
    }
}

/// A range of `struct flock` (`l_whence`, `l_start`, `l_len`) made absolute: `pos` is
/// the descriptor's offset (SEEK_CUR), `size` the file's size (SEEK_END, asked only
/// then). `l_len` 0 reaches to the end of the file, a negative one covers the bytes
/// before `l_start` (POSIX). EINVAL for a range before 0 or a bad `whence`.
pub fn flock_range(
    whence: i32,
    start: i64,
    len: i64,
    pos: u64,
    size: impl FnOnce() -> Result<u64>,
) -> Result<(u64, u64)> {
    let base: i128 = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => i128::from(pos),
        libc::SEEK_END => i128::from(size()?),
        _ => return Err(Error::new(Errno::EINVAL, format!("bad l_whence {whence}"))),
    };
    let first = base + i128::from(start);
    let (lo, hi) = match len {
        0 => (first, i128::from(TO_EOF)),
        l if l > 0 => (first, first + i128::from(l) - 1),
        l => (first + i128::from(l), first - 1),
    };
    if lo < 0 || hi < lo {
        return Err(Error::new(
            Errno::EINVAL,
            format!("lock range starts before the file ({lo})"),
        ));
    }
    let hi = if hi >= i128::from(i64::MAX) {
        TO_EOF
    } else {
        hi as u64
    };
    Ok((lo as u64, hi))
}

/// `l_start` and `l_len` of a `struct flock` for the range `start ..= end`.
pub fn flock_start_len(start: u64, end: u64) -> (i64, i64) {
    let s = i64::try_from(start).unwrap_or(i64::MAX);
    if end == TO_EOF || end >= i64::MAX as u64 {
        return (s, 0);
    }
    (s, i64::try_from(end - start + 1).unwrap_or(0))
}

/// The process id F_GETLK reports for `c`: its process if another process of this
/// client holds it, -1 for an OFD lock or `flock` (as Linux), and 0 for another
/// client's POSIX lock (its process lives on another machine: no process here
/// holds it, as Linux's NFS client reports).
pub fn conflict_pid(c: &LockConflict) -> i32 {
    if !c.posix {
        -1
    } else if c.same_client {
        i32::try_from(c.pid).unwrap_or(0)
    } else {
        0
    }
}

/// Watches the calling thread for signals while it waits for a lock, for libraries
/// called by C programs (the C and preload libraries): [`SignalWatch::block`] holds
/// back the signals the thread would take and [`SignalWatch::interrupted`] checks
/// (with `sigpending`, a local call) whether one arrived. A signal whose handler was
/// installed with `SA_RESTART` runs at once and the wait goes on (fcntl's F_SETLKW
/// and `flock` restart after such handlers); any other makes the wait fail with
/// EINTR, its handler running once the mask is restored (when the watch is dropped).
pub struct SignalWatch {
    old: libc::sigset_t,
}

impl SignalWatch {
    /// Blocks every signal on this thread until the watch is dropped.
    pub fn block() -> SignalWatch {
        // SAFETY: sigset_t is plain data; the calls get valid pointers.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            SignalWatch { old }
        }
    }

    /// Whether a signal the thread did not block before arrived and calls for EINTR.
    /// Signals whose handlers restart calls are delivered here and do not count.
    pub fn interrupted(&mut self) -> bool {
        // SAFETY: as above.
        unsafe {
            let mut pending: libc::sigset_t = std::mem::zeroed();
            if libc::sigpending(&mut pending) != 0 {
                return false;
            }
            let mut restart_only = true;
            let mut any = false;
            for sig in 1..libc::SIGRTMAX() {
                if libc::sigismember(&pending, sig) != 1 || libc::sigismember(&self.old, sig) == 1 {
                    continue;
                }
                let mut act: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut act) != 0 {
                    continue;
                }
                if act.sa_sigaction == libc::SIG_IGN {
                    continue;
                }
                any = true;
                if act.sa_sigaction == libc::SIG_DFL || act.sa_flags & libc::SA_RESTART == 0 {
                    restart_only = false;
                }
            }
            if !any {
                return false;
            }
            if restart_only {
                // Let the handlers run now, then hold signals back again.
                let mut cur: libc::sigset_t = std::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, &mut cur);
                libc::pthread_sigmask(libc::SIG_SETMASK, &cur, std::ptr::null_mut());
                return false;
            }
            true
        }
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `block`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

/// What a C interface (the C and preload libraries) knows of a descriptor for its
/// lock calls ([`fcntl_lock`], [`flock`], [`lockf`]).
#[derive(Clone, Copy, Debug)]
pub struct DescLocks {
    /// The object open.
    pub handle: Handle,
    /// The owner of the process's POSIX record locks.
    pub posix_owner: u64,
    /// The owner of the open file description's OFD locks and `flock`.
    pub ofd_owner: u64,
    /// Open for reading (a read lock needs it: EBADF).
    pub readable: bool,
    /// Open for writing (a write lock needs it: EBADF).
    pub writable: bool,
    /// The descriptor's offset (SEEK_CUR, `lockf`).
    pub pos: u64,
    /// The calling process.
    pub pid: u32,
}

/// `fcntl(fd, cmd, lk)` for the lock commands (F_GETLK, F_SETLK, F_SETLKW and their
/// F_OFD_ forms) on a pvfs descriptor, as Linux answers them: EBADF for a lock the
/// descriptor's mode does not allow, EINVAL for a bad type, range or an OFD request
/// with `l_pid` set, EAGAIN, EDEADLK, EINTR (a signal whose handler does not restart
/// calls arrived while waiting), ENOLCK (a lock of this owner was lost). F_GETLK
/// fills `lk` with the lock in the way or sets `l_type` to F_UNLCK.
pub async fn fcntl_lock(
    client: &Client,
    d: &DescLocks,
    cmd: i32,
    lk: &mut libc::flock,
) -> Result<()> {
    let (kind, wait, test) = match cmd {
        libc::F_GETLK => (LockKind::Posix, false, true),
        libc::F_SETLK => (LockKind::Posix, false, false),
        libc::F_SETLKW => (LockKind::Posix, true, false),
        libc::F_OFD_GETLK => (LockKind::Ofd, false, true),
        libc::F_OFD_SETLK => (LockKind::Ofd, false, false),
        libc::F_OFD_SETLKW => (LockKind::Ofd, true, false),
        _ => {
            return Err(Error::new(
                Errno::EINVAL,
                format!("not a lock command: {cmd}"),
            ))
        }
    };
    if kind == LockKind::Ofd && lk.l_pid != 0 {
        return Err(Error::new(
            Errno::EINVAL,
            "an OFD lock request with l_pid set",
        ));
    }
    let owner = match kind {
        LockKind::Posix => d.posix_owner,
        LockKind::Ofd => d.ofd_owner,
    };
    let typ = match i32::from(lk.l_type) {
        libc::F_RDLCK => Some(LockType::Read),
        libc::F_WRLCK => Some(LockType::Write),
        libc::F_UNLCK if !test => None,
        t => return Err(Error::new(Errno::EINVAL, format!("bad lock type {t}"))),
    };
    let whence = i32::from(lk.l_whence);
    // SEEK_END: the size is asked of the servers.
    let size = if whence == libc::SEEK_END {
        Some(client.open_handle(d.handle).await?.size().await?)
    } else {
        None
    };
    let (start, end) = flock_range(whence, lk.l_start, lk.l_len, d.pos, || {
        size.ok_or_else(|| Error::new(Errno::EINVAL, "no size"))
    })?;
    if test {
        let typ = typ.ok_or_else(|| Error::new(Errno::EINVAL, "F_GETLK of F_UNLCK"))?;
        match client.test_lock(d.handle, owner, typ, start, end).await? {
            None => lk.l_type = libc::F_UNLCK as libc::c_short,
            Some(c) => {
                let (s, l) = flock_start_len(c.start, c.end);
                lk.l_type = c.typ.to_fcntl() as libc::c_short;
                lk.l_whence = libc::SEEK_SET as libc::c_short;
                lk.l_start = s;
                lk.l_len = l;
                lk.l_pid = conflict_pid(&c);
            }
        }
        return Ok(());
    }
    set_lock(client, d, kind, owner, typ, (start, end), wait).await
}

/// Takes (`typ`) or releases (None) a lock of `owner` for a C interface, waiting
/// with the calling thread's signals watched ([`SignalWatch`]).
async fn set_lock(
    client: &Client,
    d: &DescLocks,
    kind: LockKind,
    owner: u64,
    typ: Option<LockType>,
    (start, end): (u64, u64),
    wait: bool,
) -> Result<()> {
    let Some(typ) = typ else {
        return client.unlock(d.handle, owner, start, end).await;
    };
    let allowed = match typ {
        LockType::Read => d.readable,
        LockType::Write => d.writable,
    };
    if !allowed {
        return Err(Error::new(
            Errno::EBADF,
            "the descriptor is not open for the access this lock needs",
        ));
    }
    let req = LockRequest {
        handle: d.handle,
        owner,
        kind,
        typ,
        start,
        end,
        pid: d.pid,
        wait,
    };
    if !wait {
        return client.lock(&req, &mut || false).await;
    }
    let mut watch = SignalWatch::block();
    client.lock(&req, &mut || watch.interrupted()).await
}

/// `flock(fd, op)` on a pvfs descriptor: a whole-file lock of the open file
/// description (LOCK_SH, LOCK_EX, LOCK_UN, with LOCK_NB not to wait: EWOULDBLOCK).
/// pvfs keeps it as a byte-range lock over the whole file, so it conflicts with
/// `fcntl` locks on the file (as on NFS; `docs/locks.md`).
pub async fn flock(client: &Client, d: &DescLocks, op: i32) -> Result<()> {
    let wait = op & libc::LOCK_NB == 0;
    let typ = match op & !libc::LOCK_NB {
        libc::LOCK_SH => Some(LockType::Read),
        libc::LOCK_EX => Some(LockType::Write),
        libc::LOCK_UN => None,
        _ => {
            return Err(Error::new(
                Errno::EINVAL,
                format!("bad flock operation {op}"),
            ))
        }
    };
    // flock needs no access mode (the servers still check the caller's permission).
    let d = DescLocks {
        readable: true,
        writable: true,
        ..*d
    };
    set_lock(
        client,
        &d,
        LockKind::Ofd,
        d.ofd_owner,
        typ,
        (0, TO_EOF),
        wait,
    )
    .await
}

/// `lockf(fd, cmd, len)` on a pvfs descriptor: a POSIX write lock of `len` bytes
/// from the offset (0: to the end of the file, negative: before it), as glibc makes
/// it of `fcntl`: F_LOCK waits, F_TLOCK does not (EAGAIN), F_ULOCK unlocks, F_TEST
/// fails with EACCES if another process holds a lock there.
pub async fn lockf(client: &Client, d: &DescLocks, cmd: i32, len: i64) -> Result<()> {
    let (start, end) = flock_range(libc::SEEK_CUR, 0, len, d.pos, || Ok(0))?;
    let owner = d.posix_owner;
    match cmd {
        libc::F_TEST => match client
            .test_lock(d.handle, owner, LockType::Write, start, end)
            .await?
        {
            None => Ok(()),
            Some(_) => Err(Error::new(Errno::EACCES, "locked by another process")),
        },
        libc::F_LOCK | libc::F_TLOCK => {
            let wait = cmd == libc::F_LOCK;
            let range = (start, end);
            set_lock(
                client,
                d,
                LockKind::Posix,
                owner,
                Some(LockType::Write),
                range,
                wait,
            )
            .await
        }
        libc::F_ULOCK => client.unlock(d.handle, owner, start, end).await,
        _ => Err(Error::new(
            Errno::EINVAL,
            format!("bad lockf command {cmd}"),
        )),
    }
}

/// Whether the current runtime runs spawned tasks on threads of its own (a
/// multi-thread runtime), rather than only while its callers drive it.
pub(crate) fn runs_tasks_itself() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

fn lease_period(client: &Client) -> Duration {
    (client.config().locks.lease / 3).max(Duration::from_millis(100))
}

impl Client {
    pub(crate) fn lock_state(&self) -> &LockState {
        &self.inner.locks
    }

    pub(crate) fn lock_owner(&self, owner: u64) -> LockOwner {
        LockOwner {
            client: self.inner.pool.client_id(),
            owner,
        }
    }

    /// A capability on the object to show the server (any, even expired: it proves
    /// the object was looked up; a fresh one with the right also counts when the mode
    /// no longer allows it).
    pub(crate) fn lock_proof(&self, handle: Handle) -> Option<pvfs_proto::Capability> {
        self.inner
            .caps
            .get(handle, self.creds.uid)
            .and_then(|g| g.object().cloned())
    }

    /// Reports a lost lock of `owner` on `handle` once (ENOLCK).
    fn take_lost(&self, handle: Handle, owner: u64) -> Result<()> {
        if self.lock_state().held().lost.remove(&(handle, owner)) {
            return Err(Error::new(
                Errno::ENOLCK,
                format!(
                    "a lock on {handle:#x} was lost (its server restarted and it could not be \
                     reclaimed, or this client could not renew its lease)"
                ),
            ));
        }
        Ok(())
    }

    /// The server that keeps the locks of `handle`, after checking the range and
    /// reporting a lost lock of `owner` there (ENOLCK, once).
    fn lock_server(&self, handle: Handle, owner: u64, start: u64, end: u64) -> Result<usize> {
        if start > end {
            return Err(Error::new(
                Errno::EINVAL,
                "lock range ends before it starts",
            ));
        }
        let server = self.owner(handle)?;
        self.take_lost(handle, owner)?;
        Ok(server)
    }

    /// Takes, upgrades or downgrades a lock (F_SETLK, F_SETLKW, `flock`). Without
    /// `wait`, EAGAIN if another owner's lock is in the way. With it, waits until
    /// granted; `interrupted` is checked every [`POLL`] meanwhile and ends the wait
    /// with EINTR when it says so. EDEADLK when a POSIX wait would deadlock; ENOLCK
    /// once after a lock of this owner on this file was lost.
    pub async fn lock(
        &self,
        req: &LockRequest,
        interrupted: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<()> {
        let server = self.lock_server(req.handle, req.owner, req.start, req.end)?;
        self.lock_state()
            .held()
            .touched
            .insert((req.handle, req.owner));
        self.reclaim_if_needed(server).await;
        let flags = if req.wait { LOCK_WAIT } else { 0 }
            | if req.kind == LockKind::Posix {
                LOCK_POSIX
            } else {
                0
            };
        let request = Request::Lock(req::Lock {
            handle: req.handle,
            owner: self.lock_owner(req.owner),
            typ: req.typ,
            start: req.start,
            end: req.end,
            pid: req.pid,
            flags,
            proof: self.lock_proof(req.handle),
        });
        let cancel = Request::CancelLock(req::CancelLock {
            handle: req.handle,
            owner: self.lock_owner(req.owner),
            typ: req.typ,
            start: req.start,
            end: req.end,
        });
        match self
            .waiting_call(server, request, Some(cancel), interrupted)
            .await?
        {
            Response::Locked { lease } => {
                let mut h = self.lock_state().held();
                h.observe(server, lease, false);
                h.record(server, req, Some(req.typ), &self.creds);
                drop(h);
                self.keep_leases();
                Ok(())
            }
            other => Err(unexpected("Lock", &other)),
        }
    }

    /// Sends a lock request and sends it again while the server answers "still
    /// waiting" (reclaiming first if the server restarted meanwhile). With `cancel`,
    /// `interrupted` is checked every [`POLL`] and a wait it interrupts is withdrawn.
    /// A server that cannot be reached is asked again until a request timeout passes
    /// without an answer.
    pub(crate) async fn waiting_call(
        &self,
        server: usize,
        request: Request,
        cancel: Option<Request>,
        interrupted: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<Response> {
        let op = request.op_name();
        let body = encode(&RequestBody {
            creds: self.creds.clone(),
            request,
            retry: None,
            origin: 0,
        });
        let timeout = self.config().timeouts.request;
        let mut answered = Instant::now();
        // With copies, a lock's metadata group may fail over meanwhile (its primary
        // dead, stopped or cut off: refused, or silent past the request timeout): its
        // requests keep trying as long as any other request does.
        let mut failover = crate::copies::FailoverWait::new(&self.inner.pool);
        let mut cancelled = false;
        loop {
            let answer = self.one_call(
                server,
                op,
                &body,
                cancel.as_ref(),
                &mut cancelled,
                interrupted,
            );
            match answer.await {
                Ok(Response::LockWaiting { lease, grace }) => {
                    answered = Instant::now();
                    failover = crate::copies::FailoverWait::new(&self.inner.pool);
                    self.lock_state().held().observe(server, lease, grace);
                    if cancelled {
                        if let Some(c) = &cancel {
                            // The wait may have been registered after the first cancel.
                            let _ = self.rpc(server, c.clone()).await;
                        }
                        return Err(interrupted_error());
                    }
                    self.reclaim_if_needed(server).await;
                }
                Err(e) if e.errno == Errno::EINTR && cancelled => return Err(interrupted_error()),
                Err(e)
                    if ((matches!(
                        e.errno,
                        Errno::EIO | Errno::EHOSTDOWN | Errno::ECONNRESET | Errno::ECONNREFUSED
                    ) || e.kind == ErrorKind::Map)
                        && answered.elapsed() + RETRY_PAUSE < timeout)
                        || (self.inner.pool.groups_move
                            && (crate::copies::worth_another_copy(&e)
                                || e.errno == Errno::ETIMEDOUT)
                            && failover.room()) =>
                {
                    tracing::debug!(
                        server = self.inner.pool.name(server),
                        op,
                        "again after: {e}"
                    );
                    tokio::time::sleep(RETRY_PAUSE).await;
                    if self.inner.pool.groups_move {
                        // The lock's metadata group may have moved: route by a new map.
                        if let Ok(map) = self.inner.pool.cluster_map(&self.creds, Some(0)).await {
                            failover.saw(map.version);
                        }
                    }
                }
                other => return other,
            }
        }
    }

    /// One send of a lock request and its answer, checking `interrupted` meanwhile.
    async fn one_call(
        &self,
        server: usize,
        op: &'static str,
        body: &[u8],
        cancel: Option<&Request>,
        cancelled: &mut bool,
        interrupted: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<Response> {
        let pool = &self.inner.pool;
        let mut call = pool
            .start_in(Scope::Group, server, op, body, &[], true)
            .await?;
        let timeout = self.config().timeouts.request;
        let recv = call.recv_within(timeout);
        tokio::pin!(recv);
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                frame = &mut recv => {
                    let frame = frame.map_err(|e| Error::transport(pool.name(server), e))?;
                    return pool.response(server, &frame);
                }
                _ = tick.tick(), if cancel.is_some() && !*cancelled => {
                    if interrupted() {
                        *cancelled = true;
                        if let Some(c) = cancel {
                            let _ = self.rpc(server, c.clone()).await;
                        }
                    }
                }
            }
        }
    }

    /// Releases what `owner` holds on `start ..= end` of `handle` (F_UNLCK). Waits
    /// for no one. ENOLCK once after a lock of this owner on this file was lost.
    pub async fn unlock(&self, handle: Handle, owner: u64, start: u64, end: u64) -> Result<()> {
        let server = self.lock_server(handle, owner, start, end)?;
        self.send_unlock(server, handle, owner, start, end).await
    }

    async fn send_unlock(
        &self,
        server: usize,
        handle: Handle,
        owner: u64,
        start: u64,
        end: u64,
    ) -> Result<()> {
        let request = Request::Unlock(req::Unlock {
            handle,
            owner: self.lock_owner(owner),
            start,
            end,
            flags: 0,
        });
        let answer = self.rpc(server, request).await;
        // Recorded as released whatever the answer: a server that did not get it
        // forgets the lock with our lease if it never comes back.
        let req = LockRequest {
            handle,
            owner,
            kind: LockKind::Posix,
            typ: LockType::Read,
            start,
            end,
            pid: 0,
            wait: false,
        };
        let mut h = self.lock_state().held();
        h.record(server, &req, None, &self.creds);
        if start == 0 && end == TO_EOF {
            h.touched.remove(&(handle, owner));
        }
        drop(h);
        match answer? {
            Response::Done {} => Ok(()),
            other => Err(unexpected("Unlock", &other)),
        }
    }

    /// The first lock of another owner that keeps `owner` from taking `typ` on
    /// `start ..= end` of `handle` (F_GETLK), or None.
    pub async fn test_lock(
        &self,
        handle: Handle,
        owner: u64,
        typ: LockType,
        start: u64,
        end: u64,
    ) -> Result<Option<LockConflict>> {
        let server = self.lock_server(handle, owner, start, end)?;
        let request = Request::TestLock(req::TestLock {
            handle,
            owner: self.lock_owner(owner),
            typ,
            start,
            end,
            proof: self.lock_proof(handle),
        });
        match self
            .waiting_call(server, request, None, &mut || false)
            .await?
        {
            Response::LockTest { conflict } => Ok(conflict),
            other => Err(unexpected("TestLock", &other)),
        }
    }

    /// Whether `owner` may hold locks on `handle` (it asked for one and has not
    /// released the whole file since): a close then has locks to release.
    pub fn may_hold_locks(&self, handle: Handle, owner: u64) -> bool {
        let h = self.lock_state().held();
        h.touched.contains(&(handle, owner))
    }

    /// Whether `owner` holds a lock on `handle` that overlaps `start ..= end`, as far
    /// as this client knows.
    pub fn holds_lock(&self, handle: Handle, owner: u64, start: u64, end: u64) -> bool {
        let Ok(server) = self.owner(handle) else {
            return false;
        };
        let h = self.lock_state().held();
        h.servers
            .get(&server)
            .and_then(|s| s.files.get(&handle))
            .is_some_and(|segs| {
                range::held_by(segs, &owner)
                    .any(|s| range::overlaps((s.start, s.end), (start, end)))
            })
    }

    /// Releases every lock of `owner` on `handle` (a close): one request if it may
    /// hold any, none otherwise. A lost lock is forgotten silently here.
    pub async fn release_locks(&self, handle: Handle, owner: u64) -> Result<()> {
        let server = self.owner(handle)?;
        self.lock_state().held().lost.remove(&(handle, owner));
        if !self.may_hold_locks(handle, owner) {
            return Ok(());
        }
        self.send_unlock(server, handle, owner, 0, TO_EOF).await
    }

    /// Releases every lock and wait of this client on every server (a clean end: a
    /// mount that stops, `pvfs_finalize`, a process that exits).
    pub async fn release_all_locks(&self) {
        let mut servers = self.take_opens();
        {
            let mut h = self.lock_state().held();
            servers.extend(h.servers.keys().copied());
            h.servers.clear();
            h.owners.clear();
            h.touched.clear();
        }
        servers.sort_unstable();
        servers.dedup();
        let client = self.inner.pool.client_id();
        let calls = servers.into_iter().map(|s| async move {
            if let Err(e) = self
                .rpc(
                    s,
                    Request::RenewLease(req::RenewLease {
                        client,
                        release: true,
                    }),
                )
                .await
            {
                tracing::debug!(server = self.inner.pool.name(s), "releasing locks: {e}");
            }
        });
        futures::future::join_all(calls).await;
    }

    /// Sends the holds on `server` again if it forgot them (`crate::holds`).
    async fn rehold_if_needed(&self, server: usize) {
        let needed = self
            .lock_state()
            .held()
            .servers
            .get(&server)
            .is_some_and(|s| s.rehold);
        if needed {
            self.rehold(server).await;
            if let Some(s) = self.lock_state().held().servers.get_mut(&server) {
                s.rehold = false;
            }
        }
    }

    /// Reclaims the locks held on `server` if it asked for that (it restarted and is
    /// in its grace period). Locks it refuses are lost.
    async fn reclaim_if_needed(&self, server: usize) {
        if !self
            .lock_state()
            .held()
            .servers
            .get(&server)
            .is_some_and(|s| s.reclaim)
        {
            return;
        }
        let _one = self.lock_state().reclaiming.lock().await;
        let todo: Vec<(Handle, Segment<u64>, Option<OwnerInfo>)> = {
            let h = self.lock_state().held();
            let Some(s) = h.servers.get(&server).filter(|s| s.reclaim) else {
                return;
            };
            s.files
                .iter()
                .flat_map(|(&handle, segs)| {
                    segs.iter()
                        .map(move |seg| (handle, seg.clone()))
                        .collect::<Vec<_>>()
                })
                .map(|(handle, seg)| {
                    let info = h.owners.get(&(handle, seg.owner)).cloned();
                    (handle, seg, info)
                })
                .collect()
        };
        tracing::info!(
            server = self.inner.pool.name(server),
            locks = todo.len(),
            "the server restarted: reclaiming locks"
        );
        let mut lease = 0;
        let mut lost: Vec<(Handle, u64)> = Vec::new();
        let mut unreachable = false;
        for (handle, seg, info) in todo {
            let creds = info
                .as_ref()
                .map_or_else(|| self.creds.clone(), |i| i.creds.clone());
            let posix = info.as_ref().is_none_or(|i| i.kind == LockKind::Posix);
            let who = self.with_creds(creds);
            let request = Request::Lock(req::Lock {
                handle,
                owner: self.lock_owner(seg.owner),
                typ: seg.typ,
                start: seg.start,
                end: seg.end,
                pid: seg.pid,
                flags: LOCK_RECLAIM | if posix { LOCK_POSIX } else { 0 },
                proof: who.lock_proof(handle),
            });
            match who.rpc(server, request).await {
                Ok(Response::Locked { lease: l }) => lease = l,
                Ok(other) => {
                    tracing::warn!("reclaim of a lock on {handle:#x}: {}", other.op_name());
                    lost.push((handle, seg.owner));
                }
                Err(e) if matches!(e.errno, Errno::EIO | Errno::EHOSTDOWN | Errno::ETIMEDOUT) => {
                    // Not reachable now: tried again at the next renewal.
                    unreachable = true;
                    break;
                }
                Err(e) => {
                    tracing::warn!("lock on {handle:#x} could not be reclaimed: {e}");
                    lost.push((handle, seg.owner));
                }
            }
        }
        let mut h = self.lock_state().held();
        for (handle, owner) in lost {
            if let Some(s) = h.servers.get_mut(&server) {
                if let Some(segs) = s.files.get_mut(&handle) {
                    segs.retain(|x| x.owner != owner);
                    if segs.is_empty() {
                        s.files.remove(&handle);
                    }
                }
            }
            h.owners.remove(&(handle, owner));
            h.lost.insert((handle, owner));
        }
        if !unreachable {
            if let Some(s) = h.servers.get_mut(&server) {
                s.reclaim = false;
                if lease != 0 {
                    s.lease = lease;
                }
            }
        }
    }

    /// Starts the lease keeper unless it runs: it renews this client's leases on the
    /// servers where it holds locks every third of a lease, and ends when it holds
    /// none. On a runtime with worker threads it is a task; on one driven only by
    /// its callers (the preload library's) a thread that drives it for each renewal.
    pub(crate) fn keep_leases(&self) {
        {
            let mut h = self.lock_state().held();
            if h.keeper {
                return;
            }
            h.keeper = true;
        }
        let weak = Arc::downgrade(&self.inner);
        let creds = self.creds.clone();
        let period = lease_period(self);
        // A round every period from the start of the last (a round's renewals take
        // at most a period each, at once; its look at the map runs apart), so a
        // server that answers sees a renewal at least every two periods, within
        // its lease.
        let runner = self.lock_state().runner.get().cloned();
        // A runtime with threads of its own runs the keeper as a task; so does one
        // driven by its callers when no thread was given to drive it (an async
        // program on a current-thread runtime): the leases are then renewed while
        // the program awaits anything, which it does while it holds a lock inside
        // one `block_on`.
        let task = runs_tasks_itself()
            || (runner.is_none() && tokio::runtime::Handle::try_current().is_ok());
        if task {
            tokio::spawn(async move {
                let mut tick =
                    tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    if !renew_once(&weak, &creds).await {
                        return;
                    }
                }
            });
            return;
        }
        let Some(rt) = runner else {
            tracing::warn!("no runtime to renew lock leases with: locks end after a lease");
            self.lock_state().held().keeper = false;
            return;
        };
        let spawned = std::thread::Builder::new()
            .name("pvfs-lease".into())
            .spawn(move || {
                crate::blocking::block_signals();
                let mut took = Duration::ZERO;
                loop {
                    std::thread::sleep(period.saturating_sub(took));
                    let Some(rt) = rt.upgrade() else { return };
                    let started = std::time::Instant::now();
                    if !rt.block_on(renew_once(&weak, &creds)) {
                        return;
                    }
                    took = started.elapsed();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the lock lease thread: {e}");
            self.lock_state().held().keeper = false;
        }
    }
}

fn interrupted_error() -> Error {
    Error::new(Errno::EINTR, "interrupted while waiting for a lock")
}

/// One round of lease renewals for the client behind `weak`: false when it holds no
/// locks any more (the keeper ends) or is gone.
async fn renew_once(weak: &Weak<Inner>, creds: &Creds) -> bool {
    let Some(inner) = weak.upgrade() else {
        return false;
    };
    let client = Client {
        inner,
        creds: creds.clone(),
        umask: 0,
    };
    let servers: Vec<usize> = {
        let mut h = client.lock_state().held();
        let mut s: Vec<usize> = h.servers.keys().copied().collect();
        s.extend(h.opens.servers());
        s.sort_unstable();
        s.dedup();
        s.retain(|&s| h.holds_on(s));
        if s.is_empty() {
            h.keeper = false;
            return false;
        }
        s
    };
    let id = client.inner.pool.client_id();
    // Every server at once, each within a renewal period: a server that does not
    // answer (stopped, cut off, its metadata group failing over) must not hold up
    // the renewals elsewhere until those leases run out and the servers release
    // this client's locks for others to take.
    let period = lease_period(&client);
    let renewals = servers.into_iter().map(|server| {
        let client = &client;
        async move {
            let renewal = client.rpc(
                server,
                Request::RenewLease(req::RenewLease {
                    client: id,
                    release: false,
                }),
            );
            let answer = match tokio::time::timeout(period, renewal).await {
                Ok(answer) => answer,
                Err(_) => Err(Error::of_kind(
                    ErrorKind::Unreachable,
                    Errno::ETIMEDOUT,
                    format!("no answer within {period:?}"),
                )),
            };
            match answer {
                Ok(Response::Lease { lease, grace }) => {
                    client.lock_state().held().observe(server, lease, grace);
                    client.reclaim_if_needed(server).await;
                    client.rehold_if_needed(server).await;
                    true
                }
                Ok(other) => {
                    tracing::warn!("lease renewal: {}", unexpected("RenewLease", &other));
                    true
                }
                Err(e) => {
                    tracing::warn!(
                        server = client.inner.pool.name(server),
                        "cannot renew the lock lease: {e}"
                    );
                    false
                }
            }
        }
    });
    let renewed = futures::future::join_all(renewals).await;
    if client.inner.pool.groups_move && renewed.contains(&false) {
        // A metadata group may have moved: the next round goes where the newest map
        // says, in time to reclaim this client's locks in the new primary's grace
        // period.
        // In a task of its own: it may take a while (a server that does not answer
        // is given half a lease), and the rounds go on meanwhile.
        let state = client.lock_state();
        if !state
            .refreshing
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            let (inner, creds) = (client.inner.clone(), creds.clone());
            tokio::spawn(async move {
                let _ = inner.pool.cluster_map(&creds, Some(0)).await;
                inner
                    .locks
                    .refreshing
                    .store(false, std::sync::atomic::Ordering::Release);
            });
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flock_ranges() {
        let size = || Ok(100);
        assert_eq!(
            flock_range(libc::SEEK_SET, 0, 0, 0, size).unwrap(),
            (0, TO_EOF)
        );
        assert_eq!(
            flock_range(libc::SEEK_SET, 10, 5, 0, size).unwrap(),
            (10, 14)
        );
        assert_eq!(flock_range(libc::SEEK_CUR, -2, 2, 7, size).unwrap(), (5, 6));
        assert_eq!(
            flock_range(libc::SEEK_END, 0, -10, 0, size).unwrap(),
            (90, 99)
        );
        assert_eq!(
            flock_range(libc::SEEK_SET, 10, -5, 0, size).unwrap(),
            (5, 9)
        );
        assert!(flock_range(libc::SEEK_SET, -1, 1, 0, size).is_err());
        assert!(flock_range(libc::SEEK_SET, 3, -5, 0, size).is_err());
        assert!(flock_range(99, 0, 0, 0, size).is_err());
        assert_eq!(
            flock_range(libc::SEEK_SET, 1, i64::MAX, 0, size).unwrap(),
            (1, TO_EOF)
        );
        assert_eq!(flock_start_len(10, 14), (10, 5));
        assert_eq!(flock_start_len(10, TO_EOF), (10, 0));
    }

    #[test]
    fn a_new_lease_while_holding_is_lost_outside_grace_and_reclaimed_in_it() {
        let mut h = Held::default();
        let req = LockRequest {
            handle: 9,
            owner: 1,
            kind: LockKind::Posix,
            typ: LockType::Write,
            start: 0,
            end: 9,
            pid: 1,
            wait: false,
        };
        h.observe(0, 5, false);
        h.record(0, &req, Some(LockType::Write), &Creds::default());
        h.observe(0, 5, false);
        assert!(h.holds_on(0));
        h.observe(0, 0, true);
        assert!(h.servers[&0].reclaim && h.holds_on(0));
        h.observe(0, 7, false);
        assert!(!h.holds_on(0));
        assert!(h.lost.contains(&(9, 1)));
    }
}
