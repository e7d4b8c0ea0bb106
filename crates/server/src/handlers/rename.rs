//! `Rename`: moves an entry in one commit when both names' shards are on this server.

use std::sync::Arc;

use pvfs_proto::types::check_name;
use pvfs_proto::{Errno, Handle, Response, RetryKey};

use crate::replay::{remember, replayed};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::{changed, link_entry::put_entry, no_entry};

/// Moves `src_dir/src_name` (which must name `expect_src`) to `dst_dir/dst_name`,
/// replacing `replace` there if given. Kind checks (file over directory, emptiness)
/// were done by the client, which sealed a replaced directory first.
#[allow(clippy::too_many_arguments)]
pub async fn handle(
    ctx: &Arc<Ctx>,
    src_dir: Handle,
    src_name: String,
    dst_dir: Handle,
    dst_name: String,
    expect_src: Handle,
    replace: Option<Handle>,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    check_name(&dst_name).map_err(|e| OpError::new(e, format!("invalid name {dst_name:?}")))?;
    let response = ctx
        .meta
        .write(move |t| {
            if let Some(done) = replayed(t, retry)? {
                return Ok(done);
            }
            let (handle, kind) = t
                .get_entry(src_dir, &src_name)?
                .ok_or_else(|| no_entry(src_dir, &src_name))?;
            if handle != expect_src {
                return Err(changed(src_dir, &src_name).into());
            }
            if t.is_sealed(dst_dir)? {
                return Err(OpError::new(
                    Errno::ENOENT,
                    format!("directory {dst_dir:#x} is being removed"),
                )
                .into());
            }
            t.delete_entry(src_dir, &src_name);
            let replaced = put_entry(t, dst_dir, &dst_name, handle, kind, replace)?;
            let linked = Response::Linked { replaced };
            remember(t, retry, &linked);
            Ok(linked)
        })
        .await?;
    Ok(response)
}
