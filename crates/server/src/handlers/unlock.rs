//! `Unlock`: releases what the owner holds on a range of an object (which may split
//! a lock), and grants what waited for it. Only the caller's own locks: the owner is
//! keyed by the connection's proven identity (`crate::locks`).

use std::sync::Arc;

use pvfs_proto::locks::LockOwner;
use pvfs_proto::{Handle, LockKey, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::lock::check_range;
use crate::session::Caller;

/// Handles `Unlock`.
pub fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    handle: Handle,
    owner: LockOwner,
    start: u64,
    end: u64,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    check_range(start, end)?;
    ctx.locks
        .unlock(handle, &LockKey::new(caller.lock_who(), owner), start, end);
    Ok(Response::Done {})
}
