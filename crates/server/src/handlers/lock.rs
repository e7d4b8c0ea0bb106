//! `Lock`: takes, upgrades or downgrades a byte-range lock on an object this metadata
//! server owns (`crate::locks`, `docs/locks.md`). A waiting request is answered the
//! moment its lock is granted, or "still waiting" after a bounded time (the client
//! sends it again at once and keeps its place); a POSIX request that must block is
//! first checked for deadlocks at the coordinating server (`crate::waitfor`).

use std::sync::Arc;
use std::time::Duration;

use pvfs_proto::access::{self, MAY_READ, MAY_WRITE};
use pvfs_proto::locks::{LockType, LOCK_APPEND, LOCK_FLAGS, LOCK_POSIX, LOCK_RECLAIM, LOCK_WAIT};
use pvfs_proto::{req, rights, Capability, Changed, Errno, Handle, LockKey, Request, Response};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::local_object;
use crate::locks::{LockAt, TryLock, WaitState, Want};
use crate::op::{Access, Answer, Cx, Handler};
use crate::session::Caller;

/// Fails unless `start ..= end` is a range.
pub(crate) fn check_range(start: u64, end: u64) -> OpResult<()> {
    if start > end {
        return Err(OpError::invalid(
            Errno::EINVAL,
            format!("lock range {start}..={end} ends before it starts"),
        ));
    }
    Ok(())
}

/// Fails unless `caller` may lock `handle` for `want` (`MAY_READ`, `MAY_WRITE`, or
/// both for either): the object must live here; the mode must grant it, or `proof`
/// (a capability on the object granted to the caller) must carry the right. A
/// caller that does not hold the key must show a capability on the object in any
/// case (expired ones count), as for `GetAttr`: knowing a handle is not enough.
pub(crate) fn may_lock(
    ctx: &Ctx,
    caller: &Caller,
    handle: Handle,
    want: u32,
    proof: Option<&Capability>,
) -> OpResult<()> {
    let attr = local_object(ctx, handle)?;
    if !caller.trusted {
        ctx.caps.check(proof, handle, 0, caller, true)?;
    }
    // The mode bits and the POSIX ACL, as an open would check them.
    let by_mode = |w| access::allows(&attr, &caller.creds, w);
    let by_cap = |r| ctx.caps.check(proof, handle, r, caller, false).is_ok();
    let ok = match want {
        MAY_READ => by_mode(MAY_READ) || by_cap(rights::READ),
        MAY_WRITE => by_mode(MAY_WRITE) || by_cap(rights::WRITE),
        _ => {
            by_mode(MAY_READ) || by_mode(MAY_WRITE) || by_cap(rights::READ) || by_cap(rights::WRITE)
        }
    };
    if ok {
        return Ok(());
    }
    let what = match want {
        MAY_READ => "read",
        MAY_WRITE => "write",
        _ => "read or write",
    };
    Err(OpError::denied(
        Errno::EACCES,
        format!(
            "uid {} may not {what} {handle:#x}, which a lock of that kind needs",
            caller.creds.uid
        ),
    ))
}

/// How long a cycle of waits must stand before a wait in it fails with EDEADLK: a
/// wait that ended may still be counted in a cycle until its request takes its
/// edges back, a round trip, longer on a loaded server.
const CYCLE_CONFIRM: Duration = Duration::from_secs(1);
/// How often a wait that closed a cycle asks again meanwhile.
const CYCLE_RECHECK: Duration = Duration::from_millis(25);

/// Which locks of `handle` a request with `flags` is about: the appenders'
/// (`LOCK_APPEND`) or the programs'.
pub(crate) fn lock_at(handle: Handle, flags: u32) -> LockAt {
    if flags & LOCK_APPEND != 0 {
        LockAt::append(handle)
    } else {
        LockAt::program(handle)
    }
}

/// Tells the coordinating metadata server that `waiter` waits for `blockers` here
/// (none: it stopped). EDEADLK if that closes a cycle of waits. A coordinator that
/// cannot be reached leaves the wait unchecked (logged), rather than failing locks.
pub(crate) async fn wait_for(
    ctx: &Arc<Ctx>,
    waiter: LockKey,
    blockers: Vec<LockKey>,
    handle: Handle,
) -> OpResult<()> {
    let Some(&coordinator) = ctx.config.meta_servers().first() else {
        return Ok(());
    };
    let me = u32::try_from(ctx.me).unwrap_or(u32::MAX);
    if coordinator == ctx.me {
        return ctx.wait_graph.wait_for(waiter, &blockers, me, handle);
    }
    let request = Request::WaitFor(req::WaitFor {
        waiter,
        blockers,
        server: me,
        handle,
    });
    match tokio::time::timeout(
        ctx.config.timeouts.request,
        ctx.peers.call(coordinator, request),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.errno == Errno::EDEADLK => Err(e),
        Ok(Err(e)) => {
            unchecked(ctx, &e.to_string());
            Ok(())
        }
        Err(_) => {
            unchecked(ctx, "no answer");
            Ok(())
        }
    }
}

fn unchecked(ctx: &Ctx, why: &str) {
    if let Some(dropped) = ctx.log_limit.allow("deadlock coordinator") {
        tracing::warn!(
            dropped,
            "the deadlock coordinator could not be asked ({why}); a lock wait goes unchecked"
        );
    }
}

/// Takes, upgrades or downgrades the caller's lock; the same request again by the
/// same owner leaves what the first left, so a retry is harmless.
impl Handler for req::Lock {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handle) = (cx.ctx, self.handle);
        let append = self.flags & LOCK_APPEND != 0;
        match lock(ctx, cx.caller, self).await? {
            Response::Locked { lease } if append => {
                // Read once granted: the appender before widened the file before
                // its write, and let go after it. (Granted, it is answered: unknown,
                // every datafile is asked.)
                let width = local_object(ctx, handle)
                    .ok()
                    .and_then(|a| a.layout().map(|l| l.width))
                    .unwrap_or(u32::MAX);
                Ok(Answer::Reply(Response::AppendLocked { lease, width }))
            }
            other => Ok(Answer::Reply(other)),
        }
    }
}

/// Handles `Lock`.
async fn lock(ctx: &Arc<Ctx>, caller: &Caller, a: req::Lock) -> OpResult<Response> {
    if a.flags & !LOCK_FLAGS != 0 {
        return Err(OpError::invalid(
            Errno::EINVAL,
            format!("unknown lock flags {:#x}", a.flags & !LOCK_FLAGS),
        ));
    }
    check_range(a.start, a.end)?;
    let at = lock_at(a.handle, a.flags);
    if at.append && a.flags & LOCK_POSIX != 0 {
        return Err(OpError::invalid(
            Errno::EINVAL,
            "an appender's lock is not a POSIX record lock",
        ));
    }
    let need = match a.typ {
        LockType::Read => MAY_READ,
        LockType::Write => MAY_WRITE,
    };
    may_lock(ctx, caller, a.handle, need, a.proof.as_ref())?;
    let want = Want {
        key: LockKey::new(caller.lock_who(), a.owner),
        typ: a.typ,
        start: a.start,
        end: a.end,
        pid: a.pid,
        posix: a.flags & LOCK_POSIX != 0,
    };
    let table = &ctx.locks;
    if a.flags & LOCK_RECLAIM != 0 {
        if table.grace_end().is_none() {
            return Err(OpError::posix(
                Errno::ENOLCK,
                "a reclaim outside the grace period: the lock was lost",
            ));
        }
        return match grant_now(ctx, at, &want).await? {
            Ok(lease) => Ok(Response::Locked { lease }),
            Err(_) => Err(OpError::posix(
                Errno::ENOLCK,
                "a reclaim conflicts with a lock reclaimed by another owner",
            )),
        };
    }
    let answer_at = tokio::time::Instant::now() + table.answer_after;
    if let Some(end) = table.grace_end() {
        // Only reclaims until the grace period ends: wait for it (bounded).
        if end > answer_at {
            tokio::time::sleep_until(answer_at).await;
            let lease = table.touch(&want.key);
            return Ok(Response::LockWaiting { lease, grace: true });
        }
        tokio::time::sleep_until(end).await;
    }
    if a.flags & LOCK_WAIT == 0 {
        return match grant_now(ctx, at, &want).await? {
            Ok(lease) => {
                table.edges_settled(at).await;
                Ok(Response::Locked { lease })
            }
            Err(_) => Err(OpError::posix(
                Errno::EAGAIN,
                "the range is locked by another owner",
            )),
        };
    }
    let answer = wait(ctx, at, &want, answer_at).await?;
    if matches!(answer, Response::Locked { .. }) {
        table.edges_settled(at).await;
    }
    Ok(answer)
}

/// Grants `want` now if nothing is in the way (first recording in the storage that
/// locks may be held, if it says otherwise): the lease id, or who is in the way.
async fn grant_now(ctx: &Arc<Ctx>, at: LockAt, want: &Want) -> OpResult<Result<u64, LockKey>> {
    loop {
        match ctx.locks.try_lock(at, want)? {
            TryLock::Granted(lease) => return Ok(Ok(lease)),
            TryLock::Blocked(by) => return Ok(Err(by)),
            TryLock::NeedMark => ctx.locks.ensure_marked(ctx.exec).await?,
        }
    }
}

/// A waiting request: granted, or "still waiting" at `answer_at`.
async fn wait(
    ctx: &Arc<Ctx>,
    at: LockAt,
    want: &Want,
    answer_at: tokio::time::Instant,
) -> OpResult<Response> {
    let table = &ctx.locks;
    let (id, notify) = table.wait(at, want)?;
    // Blockers last told to the coordinator (POSIX waits only).
    let mut told: Option<Vec<LockKey>> = None;
    // When the coordinator first found this wait closing a cycle (not yet failed).
    let mut cycle_since: Option<tokio::time::Instant> = None;
    let outcome = loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (state, blockers, need_mark) = table.poll(at, id);
        match state {
            WaitState::Granted => break Ok(()),
            WaitState::Cancelled => break Err(withdrawn()),
            WaitState::Waiting | WaitState::Ready => {}
        }
        if need_mark {
            if let Err(e) = table.ensure_marked(ctx.exec).await {
                table.cancel_id(at, id);
                break Err(e);
            }
            continue;
        }
        if want.posix && !blockers.is_empty() && told.as_ref() != Some(&blockers) {
            // From the moment it is sent, the coordinator may hold either set: an
            // unlock meanwhile waits until the answer says which.
            let before = told.clone().unwrap_or_default();
            let mut either = before.clone();
            either.extend(blockers.iter().filter(|k| !before.contains(k)));
            table.told(at, id, either);
            if let Err(e) = wait_for(ctx, want.key, blockers.clone(), at.handle).await {
                // Refused: the coordinator keeps what it was told before (taken
                // back below).
                table.told(at, id, before);
                if e.errno == Errno::EDEADLK {
                    // A cycle may run through a wait that just ended, whose edges
                    // its own request has not taken back yet (its task late on a
                    // loaded server): look again before failing. A real cycle
                    // stays; it is reported once it stood for CYCLE_CONFIRM.
                    let first = *cycle_since.get_or_insert_with(tokio::time::Instant::now);
                    if first.elapsed() < CYCLE_CONFIRM {
                        tokio::time::sleep(CYCLE_RECHECK).await;
                        continue;
                    }
                }
                table.cancel_id(at, id);
                break Err(e);
            }
            cycle_since = None;
            table.told(at, id, blockers.clone());
            told = Some(blockers);
            continue;
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(answer_at) => {
                // The waiter (and what the coordinator knows) stays for the next send.
                return match table.detach(at, id) {
                    WaitState::Granted => {
                        stop_waiting(ctx, want, (&told, id), at).await;
                        Ok(Response::Locked { lease: table.touch(&want.key) })
                    }
                    WaitState::Cancelled => {
                        stop_waiting(ctx, want, (&told, id), at).await;
                        Err(withdrawn())
                    }
                    WaitState::Waiting | WaitState::Ready => Ok(Response::LockWaiting {
                        lease: table.touch(&want.key),
                        grace: false,
                    }),
                };
            }
        }
    };
    stop_waiting(ctx, want, (&told, id), at).await;
    table.detach(at, id);
    outcome.map(|()| Response::Locked {
        lease: table.touch(&want.key),
    })
}

/// The error of a waiting lock request that was withdrawn (`CancelLock`).
fn withdrawn() -> OpError {
    OpError::posix(Errno::EINTR, "the waiting lock request was withdrawn")
}

/// Removes the edges of waiter `id` at the coordinator (before the answer, so no
/// later wait of another owner finds a wait that is over), and tells the table,
/// for the requests that wait for that ([`crate::locks::LockTable::edges_settled`]).
async fn stop_waiting(
    ctx: &Arc<Ctx>,
    want: &Want,
    (told, id): (&Option<Vec<LockKey>>, u64),
    at: LockAt,
) {
    if told.is_some() {
        let _ = wait_for(ctx, want.key, Vec::new(), at.handle).await;
        ctx.locks.told(at, id, Vec::new());
    }
}
