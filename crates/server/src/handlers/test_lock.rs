//! `TestLock` (F_GETLK): the first lock of another owner that keeps the caller's
//! owner from taking a lock. The caller needs read or write permission on the object.

use std::sync::Arc;

use pvfs_proto::access::{MAY_READ, MAY_WRITE};
use pvfs_proto::locks::{LockOwner, LockType};
use pvfs_proto::{Capability, Handle, LockKey, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::lock::{check_range, may_lock};
use crate::session::Caller;

/// Handles `TestLock`.
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    handle: Handle,
    owner: LockOwner,
    typ: LockType,
    range: (u64, u64),
    proof: Option<&Capability>,
) -> OpResult<Response> {
    let (start, end) = range;
    check_range(start, end)?;
    may_lock(ctx, caller, handle, MAY_READ | MAY_WRITE, proof)?;
    // In the grace period locks not yet reclaimed would be missed: wait it out
    // (bounded; the client asks again).
    if let Some(grace_end) = ctx.locks.grace_end() {
        let answer_at = tokio::time::Instant::now() + ctx.locks.answer_after;
        let grace_end = tokio::time::Instant::from_std(grace_end);
        tokio::time::sleep_until(grace_end.min(answer_at)).await;
        if ctx.locks.grace_end().is_some() {
            let key = LockKey::new(caller.lock_who(), owner);
            return Ok(Response::LockWaiting {
                lease: ctx.locks.touch(&key),
                grace: true,
            });
        }
    }
    let key = LockKey::new(caller.lock_who(), owner);
    Ok(Response::LockTest {
        conflict: ctx.locks.test(handle, &key, typ, start, end),
    })
}
