//! `Unlink`: removes a directory entry, and the object with it when it lives here.

use std::sync::Arc;

use pvfs_proto::message::UnlinkWant;
use pvfs_proto::{DirEntry, Errno, Handle, ObjKind, Response, RetryKey};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::{changed, no_entry};
use crate::replay::{remember, replayed};

/// Removes `name` from `dir`. With `drop_object`, the object is deleted in the same
/// commit when this server owns it; otherwise the client deletes it at its owner.
pub async fn handle(
    ctx: &Arc<Ctx>,
    dir: Handle,
    name: String,
    expect: Option<Handle>,
    want: UnlinkWant,
    drop_object: bool,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    let range = ctx.config.servers[ctx.me].handles;
    let response = ctx
        .meta
        .write(move |t| {
            if let Some(done) = replayed(t, retry)? {
                return Ok(done);
            }
            let (handle, kind) = t
                .get_entry(dir, &name)?
                .ok_or_else(|| no_entry(dir, &name))?;
            if expect.is_some_and(|h| h != handle) {
                return Err(changed(dir, &name).into());
            }
            match (want, kind) {
                (UnlinkWant::Dir, k) if k != ObjKind::Dir => {
                    return Err(OpError::new(
                        Errno::ENOTDIR,
                        format!("{name:?} is not a directory"),
                    )
                    .into())
                }
                (UnlinkWant::NotDir, ObjKind::Dir) => {
                    return Err(
                        OpError::new(Errno::EISDIR, format!("{name:?} is a directory")).into(),
                    )
                }
                _ => {}
            }
            t.delete_entry(dir, &name);
            let removed = if drop_object && range.contains(handle) {
                match t.get_object(handle)? {
                    Some(attr) => {
                        t.delete_object(handle);
                        t.clear_xattrs(handle)?;
                        Some(attr.detail)
                    }
                    None => None,
                }
            } else {
                None
            };
            let unlinked = Response::Unlinked {
                entry: DirEntry { name, handle, kind },
                removed,
            };
            remember(t, retry, &unlinked);
            Ok(unlinked)
        })
        .await?;
    Ok(response)
}
