//! `RenewLease`: keeps the lease of the caller's client on this server (its locks
//! stay while it renews), or with `release` drops all its locks and waits here (a
//! client that ends cleanly). A client can renew or release only its own: the lease
//! is keyed by the connection's proven identity.

use std::sync::Arc;

use pvfs_proto::Response;

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::session::Caller;

/// Handles `RenewLease`.
pub fn handle(ctx: &Arc<Ctx>, caller: &Caller, client: u64, release: bool) -> OpResult<Response> {
    ctx.require_meta()?;
    let who = caller.lock_who();
    if release {
        ctx.locks.release_client(who, client);
        return Ok(Response::Done {});
    }
    Ok(Response::Lease {
        lease: ctx.locks.renew(who, client).unwrap_or(0),
        grace: ctx.locks.grace_end().is_some(),
    })
}
