//! `RemoveObject`: deletes an object kept at zero links (a file unlinked while it
//! was open) once it is closed.

use std::sync::Arc;

use pvfs_proto::{rights, Capability, Handle, Response, RetryKey};

use crate::replay::{remember, replayed};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::lifetime;
use crate::session::Caller;

/// Deletes object `handle`, which must have no link left (EBUSY otherwise), and
/// returns what it was (a file's layout tells the client which datafiles to delete,
/// with REMOVE tickets for them). A caller without the key shows a REMOVE ticket for
/// `handle` (from the unlink that took its last link).
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    handle: Handle,
    ticket: Option<&Capability>,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    ctx.caps
        .check_ticket(ticket, handle, rights::REMOVE, caller)?;
    ctx.refuse_root(handle)?;
    let owner = ctx.clone();
    let uid = caller.creds.uid;
    let removed = ctx
        .meta
        .write(move |t| {
            if let Some(done) = replayed(t, retry)? {
                return Ok(done);
            }
            let (detail, tickets) = lifetime::remove_unlinked(t, &owner, handle, uid)?;
            let removed = Response::Removed { detail, tickets };
            remember(t, retry, &removed);
            Ok(removed)
        })
        .await?;
    Ok(removed)
}
