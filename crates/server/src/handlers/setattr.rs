//! `SetAttr`: chmod, chown, utimes, with the POSIX ownership rules
//! (`pvfs_proto::access::may_setattr`).

use pvfs_proto::access;
use pvfs_proto::{req, Changed, ObjDetail, Response, Timespec};

use crate::error::{OpError, OpResult};
use crate::feed::object;
use crate::handlers::no_object;
use crate::op::{Access, Answer, Cx, Handler};

/// Applies `set` to an object and returns its new attributes. A change of who may
/// use a directory is announced to the other metadata servers before the answer, so
/// no server goes on deciding with the old permissions. A retry is answered from
/// the record: a chmod repeated after another client's would undo theirs.
impl Handler for req::SetAttr {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.handle)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handle, set) = (cx.ctx, self.handle, self.set);
        ctx.require_meta()?;
        ctx.require_local(handle)?;
        let creds = cx.caller.creds.clone();
        let perms_change = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
        let owner_change = set.uid.is_some();
        let answer = cx
            .once
            .commit(&ctx.meta, move |t| {
                let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
                access::may_setattr(&attr, &set, &creds).map_err(|e| {
                    OpError::denied(
                        e,
                        format!("not permitted to change the attributes of {handle:#x}"),
                    )
                })?;
                attr.mode = access::mode_after_setattr(&attr, &set, &creds);
                if set.mode.is_some() {
                    let mode = attr.mode;
                    crate::handlers::acl::chmod(&mut attr, mode);
                }
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
                Ok(Response::Attr {
                    attr,
                    caps: Vec::new(),
                })
            })
            .await?;
        // Directories' permissions, and owners (sticky directories), are what other
        // servers cache.
        let dir = matches!(&answer, Response::Attr { attr, .. } if attr.is_dir());
        if (perms_change && dir) || owner_change {
            crate::perms::announce_change(ctx, handle).await;
        }
        Ok(answer.into())
    }
}
