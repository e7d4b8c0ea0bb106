//! `RemoveObject`: deletes an object whose last entry is already gone.

use std::sync::Arc;

use pvfs_proto::{Handle, Response, RetryKey};

use crate::replay::{remember, replayed};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::no_object;

/// Deletes object `handle` and returns what it was (a file's layout tells the client
/// which datafiles to delete).
pub async fn handle(ctx: &Arc<Ctx>, handle: Handle, retry: Option<RetryKey>) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    if handle == ctx.config.root_handle() {
        return Err(crate::error::OpError::new(
            pvfs_proto::Errno::EBUSY,
            "the root directory cannot be removed",
        ));
    }
    let removed = ctx
        .meta
        .write(move |t| {
            if let Some(done) = replayed(t, retry)? {
                return Ok(done);
            }
            let attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
            t.delete_object(handle);
            t.clear_xattrs(handle)?;
            let removed = Response::Removed {
                detail: attr.detail,
            };
            remember(t, retry, &removed);
            Ok(removed)
        })
        .await?;
    Ok(removed)
}
