//! `SealDir`: the first step of rmdir and of renaming over a directory. A sealed
//! shard is empty and refuses new entries, so once every shard is sealed the
//! directory stays empty until it is removed.

use std::sync::Arc;

use pvfs_proto::{Errno, Handle, Response};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};

/// Seals this server's shard of `dir` if it is empty (else ENOTEMPTY), or unseals it.
pub async fn handle(ctx: &Arc<Ctx>, dir: Handle, seal: bool) -> OpResult<Response> {
    ctx.require_meta()?;
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
