//! `RemoveObject`: deletes an object whose last entry is already gone.

use std::sync::Arc;

use pvfs_proto::{Handle, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::no_object;

/// Deletes object `handle` and returns what it was (a file's layout tells the client
/// which datafiles to delete).
pub async fn handle(ctx: &Arc<Ctx>, handle: Handle) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    let detail = ctx
        .meta
        .write(move |t| {
            let attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
            t.delete_object(handle);
            t.clear_xattrs(handle)?;
            Ok(attr.detail)
        })
        .await?;
    Ok(Response::Removed { detail })
}
