//! `SetParent`: records a directory's new parent after it was renamed elsewhere.

use std::sync::Arc;

use pvfs_proto::{Errno, Handle, ObjDetail, Response, Timespec};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::no_object;

/// Sets the parent of directory `dir`.
pub async fn handle(ctx: &Arc<Ctx>, dir: Handle, new_parent: Handle) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(dir)?;
    ctx.meta
        .write(move |t| {
            let mut attr = t.get_object(dir)?.ok_or_else(|| no_object(dir))?;
            match &mut attr.detail {
                ObjDetail::Dir { parent, .. } => *parent = new_parent,
                _ => {
                    return Err(OpError::new(
                        Errno::ENOTDIR,
                        format!("{dir:#x} is not a directory"),
                    )
                    .into())
                }
            }
            attr.ctime = Timespec::now();
            t.put_object(&attr);
            Ok(())
        })
        .await?;
    Ok(Response::Done {})
}
