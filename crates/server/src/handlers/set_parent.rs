//! `SetParent`: records a directory's new parent after it was renamed elsewhere.

use std::sync::Arc;

use pvfs_proto::{rights, Capability, Handle, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::change_dir;
use crate::session::Caller;

/// Sets the parent of directory `dir`; a caller without the key shows a MOVE ticket
/// for it (from the lookup of the name it was moved from).
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    dir: Handle,
    new_parent: Handle,
    ticket: Option<&Capability>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.caps.check_ticket(ticket, dir, rights::MOVE, caller)?;
    ctx.require_local(dir)?;
    ctx.meta
        .write(move |t| {
            change_dir(t, dir, |_, parent, _| {
                *parent = new_parent;
                Ok(())
            })
        })
        .await?;
    Ok(Response::Done {})
}
