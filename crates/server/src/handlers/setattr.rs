//! `SetAttr`: chmod, chown, utimes, with the POSIX ownership rules.

use pvfs_proto::{Creds, Errno, Handle, Response, SetAttr, Timespec};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::no_object;

/// Applies `set` to an object and returns its new attributes.
pub async fn handle(ctx: &Ctx, creds: &Creds, handle: Handle, set: SetAttr) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    let creds = creds.clone();
    let attr = ctx
        .meta
        .write(move |t| {
            let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
            check_permission(&creds, &attr, &set)?;
            if let Some(mode) = set.mode {
                attr.mode = mode & 0o7777;
            }
            if let Some(uid) = set.uid {
                attr.uid = uid;
            }
            if let Some(gid) = set.gid {
                attr.gid = gid;
            }
            if (set.uid.is_some() || set.gid.is_some()) && creds.uid != 0 {
                // POSIX: a chown by a non-root user clears set-user-ID and set-group-ID.
                attr.mode &= !0o6000;
            }
            if let Some(t) = set.atime {
                attr.atime = t;
            }
            if let Some(t) = set.mtime {
                attr.mtime = t;
            }
            attr.ctime = Timespec::now();
            t.put_object(&attr);
            Ok(attr)
        })
        .await?;
    Ok(Response::Attr { attr })
}

fn check_permission(creds: &Creds, attr: &pvfs_proto::Attr, set: &SetAttr) -> Result<(), OpError> {
    if creds.uid == 0 {
        return Ok(());
    }
    let owner = creds.uid == attr.uid;
    let eperm = |what: &str| {
        Err(OpError::new(
            Errno::EPERM,
            format!("only the owner or root may {what}"),
        ))
    };
    if set.mode.is_some() && !owner {
        return eperm("change the mode");
    }
    if let Some(uid) = set.uid {
        if uid != attr.uid {
            return Err(OpError::new(Errno::EPERM, "only root may change the owner"));
        }
    }
    if let Some(gid) = set.gid {
        let member = gid == creds.gid || creds.groups.contains(&gid);
        if gid != attr.gid && !(owner && member) {
            return eperm("change the group to one the owner belongs to");
        }
    }
    if (set.atime.is_some() || set.mtime.is_some()) && !owner {
        return eperm("set times");
    }
    Ok(())
}
