//! `SetDirLayout`: sets or clears the default layout of new files in a directory.

use std::sync::Arc;

use pvfs_proto::{Creds, Errno, Handle, LayoutSpec, ObjDetail, Response, Timespec};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::{create::check_spec, no_object};

/// Stores `layout` as `dir`'s default (owner or root only).
pub async fn handle(
    ctx: &Arc<Ctx>,
    creds: &Creds,
    dir: Handle,
    layout: Option<LayoutSpec>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(dir)?;
    if let Some(spec) = layout {
        check_spec(ctx, spec)?;
    }
    let uid = creds.uid;
    let attr = ctx
        .meta
        .write(move |t| {
            let mut attr = t.get_object(dir)?.ok_or_else(|| no_object(dir))?;
            if uid != 0 && uid != attr.uid {
                return Err(OpError::new(
                    Errno::EPERM,
                    "only the owner or root may set a directory's layout",
                )
                .into());
            }
            match &mut attr.detail {
                ObjDetail::Dir { default_layout, .. } => *default_layout = layout,
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
            Ok(attr)
        })
        .await?;
    Ok(Response::Attr { attr })
}
