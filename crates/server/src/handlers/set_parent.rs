//! `SetParent`: records a directory's new parent after it was renamed elsewhere.

use std::sync::Arc;

use pvfs_proto::{Handle, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::change_dir;

/// Sets the parent of directory `dir`.
pub async fn handle(ctx: &Arc<Ctx>, dir: Handle, new_parent: Handle) -> OpResult<Response> {
    ctx.require_meta()?;
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
