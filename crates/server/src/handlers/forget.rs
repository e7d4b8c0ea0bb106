//! `Forget`: another server changed who may use some of its objects; drop what this
//! server cached of them (`crate::perms`).

use pvfs_proto::{Handle, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;

/// Forgets the cached attributes of `handles`.
pub fn handle(ctx: &Ctx, handles: &[Handle]) -> OpResult<Response> {
    ctx.attr_cache.forget(handles);
    Ok(Response::Done {})
}
