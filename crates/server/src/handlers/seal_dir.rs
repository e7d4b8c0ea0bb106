//! `SealDir`: the first step of rmdir and of renaming over a directory. A sealed
//! shard is empty and refuses new entries, so once every shard is sealed the
//! directory stays empty until it is removed.

use std::sync::Arc;

use pvfs_proto::{rights, Capability, Errno, Handle, Response};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::session::Caller;

/// Seals this server's shard of `dir` if it is empty (else ENOTEMPTY), or unseals it.
/// A caller without the key shows a REMOVE ticket for `dir` (from the lookup of its
/// name: it may remove it).
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    dir: Handle,
    seal: bool,
    ticket: Option<&Capability>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.caps.check_ticket(ticket, dir, rights::REMOVE, caller)?;
    ctx.meta
        .write(move |t| {
            if seal && !t.dir_is_empty(dir)? {
                return Err(OpError::new(
                    Errno::ENOTEMPTY,
                    format!("directory {dir:#x} is not empty"),
                )
                .into());
            }
            t.set_sealed(dir, seal);
            Ok(())
        })
        .await?;
    Ok(Response::Done {})
}
