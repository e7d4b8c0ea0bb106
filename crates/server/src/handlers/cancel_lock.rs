//! `CancelLock`: withdraws the caller's waiting lock request (a signal interrupted
//! the program waiting for it): a request waiting on it is answered EINTR; one
//! granted already stays granted (the client then holds the lock).

use std::sync::Arc;

use pvfs_proto::locks::{LockOwner, LockType};
use pvfs_proto::{Handle, LockKey, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::lock::check_range;
use crate::locks::Want;
use crate::session::Caller;

/// Handles `CancelLock`.
pub fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    handle: Handle,
    owner: LockOwner,
    typ: LockType,
    range: (u64, u64),
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    let (start, end) = range;
    check_range(start, end)?;
    let want = Want {
        key: LockKey::new(caller.lock_who(), owner),
        typ,
        start,
        end,
        pid: 0,
        posix: false,
    };
    ctx.locks.cancel(handle, &want);
    Ok(Response::Done {})
}
