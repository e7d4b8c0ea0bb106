//! `SetDirLayout`: sets or clears the default layout of new files in a directory.

use std::sync::Arc;

use pvfs_proto::{Creds, Errno, Handle, LayoutSpec, Response};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::{change_dir, create::check_spec};

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
            change_dir(t, dir, |owner, _, default_layout| {
                if uid != 0 && uid != owner {
                    return Err(OpError::new(
                        Errno::EPERM,
                        "only the owner or root may set a directory's layout",
                    ));
                }
                *default_layout = layout;
                Ok(())
            })
        })
        .await?;
    Ok(Response::Attr {
        attr,
        caps: Vec::new(),
    })
}
