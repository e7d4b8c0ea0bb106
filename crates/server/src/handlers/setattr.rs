//! `SetAttr`: chmod, chown, utimes, with the POSIX ownership rules
//! (`pvfs_proto::access::may_setattr`).

use std::sync::Arc;

use pvfs_proto::access;
use pvfs_proto::{Handle, ObjDetail, Response, SetAttr, Timespec};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::no_object;
use crate::session::Caller;

/// Applies `set` to an object and returns its new attributes. A change of who may
/// use a directory is announced to the other metadata servers before the answer, so
/// no server goes on deciding with the old permissions.
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    handle: Handle,
    set: SetAttr,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    let creds = caller.creds.clone();
    let perms_change = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
    let owner_change = set.uid.is_some();
    let attr = ctx
        .meta
        .write(move |t| {
            let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
            access::may_setattr(&attr, &set, &creds).map_err(|e| {
                OpError::new(
                    e,
                    format!("not permitted to change the attributes of {handle:#x}"),
                )
            })?;
            attr.mode = access::mode_after_setattr(&attr, &set, &creds);
            if let Some(uid) = set.uid {
                attr.uid = uid;
            }
            if let Some(gid) = set.gid {
                attr.gid = gid;
            }
            let now = Timespec::now();
            if let Some(t) = set.atime {
                attr.atime = if set.now { now } else { t };
            }
            if let Some(m) = set.mtime {
                attr.mtime = if set.now { now } else { m };
                if let ObjDetail::Dir { mtime_set, .. } = &mut attr.detail {
                    // Entry changes before now no longer move the mtime.
                    *mtime_set = now;
                }
            }
            attr.ctime = now;
            t.put_object(&attr);
            if attr.is_dir() {
                attr.merge_shard(&t.shard_stat(handle)?);
            }
            Ok(attr)
        })
        .await?;
    // Directories' permissions, and owners (sticky directories), are what other
    // servers cache.
    if (perms_change && attr.is_dir()) || owner_change {
        crate::perms::announce_change(ctx, handle).await;
    }
    Ok(Response::Attr {
        attr,
        caps: Vec::new(),
    })
}
