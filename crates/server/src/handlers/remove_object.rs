//! `RemoveObject`: deletes an object whose last entry is already gone.

use std::sync::Arc;

use pvfs_proto::{rights, Capability, Handle, Response, RetryKey};

use crate::replay::{remember, replayed};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::{no_object, unlink::datafile_tickets};
use crate::session::Caller;

/// Deletes object `handle` and returns what it was (a file's layout tells the client
/// which datafiles to delete, with REMOVE tickets for them). A caller without the key
/// shows a REMOVE ticket for `handle` (from the unlink that removed its name).
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
    if handle == ctx.config.root_handle() {
        return Err(crate::error::OpError::new(
            pvfs_proto::Errno::EBUSY,
            "the root directory cannot be removed",
        ));
    }
    let minter = ctx.clone();
    let uid = caller.creds.uid;
    let removed = ctx
        .meta
        .write(move |t| {
            if let Some(done) = replayed(t, retry)? {
                return Ok(done);
            }
            let attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
            t.delete_object(handle);
            t.clear_xattrs(handle)?;
            let tickets = datafile_tickets(&minter, &attr.detail, uid);
            let removed = Response::Removed {
                detail: attr.detail,
                tickets,
            };
            remember(t, retry, &removed);
            Ok(removed)
        })
        .await?;
    Ok(removed)
}
