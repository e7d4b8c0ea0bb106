//! `Lookup`: one path component in the shard of a directory this server holds.

use std::sync::Arc;

use pvfs_proto::access::{self, MAY_EXEC};
use pvfs_proto::{req, rights, Changed, DirEntry, Errno, Handle, Response};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::{answered, grant, no_entry};
use crate::op::{Access, Answer, Cx, Handler};
use crate::perms::attrs_of;
use crate::session::Caller;

/// Finds `name` in `dir` (the caller needs search permission on `dir`); returns the
/// object's attributes too when it lives here (the usual case: an object is created
/// on the server of its entry's shard), with the rights of `want` it may have. An
/// object that lives elsewhere gets a VISIT capability instead, for its owner.
impl Handler for req::Lookup {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        lookup(cx.ctx, cx.caller, self.dir, &self.name, self.want)
            .await
            .map(Answer::Reply)
    }
}

/// Handles `Lookup`.
async fn lookup(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    dir: Handle,
    name: &str,
    want: u32,
) -> OpResult<Response> {
    ctx.require_meta()?;
    pvfs_proto::types::check_name(name)
        .map_err(|e| OpError::invalid(e, format!("invalid name {name:?}")))?;
    let dir_attr = search(ctx, caller, dir).await?;
    let (handle, kind, attr) = {
        let view = ctx.meta.read()?;
        let (handle, kind) = view
            .get_entry(dir, name)?
            .ok_or_else(|| no_entry(dir, name))?;
        let attr = if ctx.is_local(handle) {
            answered(&view, handle)?
        } else {
            None
        };
        (handle, kind, attr)
    };
    let (attr, caps) = match attr {
        Some(mut a) => {
            let granted = grant::decide(caller, Some(&dir_attr), &a, want)?;
            let caps = grant::issue(ctx, caller, &mut a, granted).await?;
            (Some(a), caps)
        }
        None if want != 0 => {
            // Remove and move rights are decided here, where the name is.
            let mut granted = rights::VISIT;
            if want & (rights::REMOVE | rights::MOVE) != 0 {
                let obj = attrs_of(ctx, handle).await?;
                granted |= grant::decide(caller, Some(&dir_attr), &obj, want)?
                    & (rights::REMOVE | rights::MOVE);
            }
            (None, vec![ctx.caps.mint(handle, granted, caller.creds.uid)])
        }
        None => (None, Vec::new()),
    };
    Ok(Response::Entry {
        entry: DirEntry {
            name: name.to_string(),
            handle,
            kind,
        },
        attr,
        caps,
    })
}

/// The attributes of directory `dir`, if `caller` may search it (EACCES otherwise;
/// ENOTDIR for another kind of object).
pub(crate) async fn search(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    dir: Handle,
) -> OpResult<pvfs_proto::Attr> {
    let dir_attr = attrs_of(ctx, dir).await?;
    if !dir_attr.is_dir() {
        return Err(OpError::posix(
            Errno::ENOTDIR,
            format!("{dir:#x} is not a directory"),
        ));
    }
    access::check(&dir_attr, &caller.creds, MAY_EXEC)
        .map_err(|e| OpError::denied(e, format!("no search permission on directory {dir:#x}")))?;
    Ok(dir_attr)
}

/// The attributes of directory `dir`, if `caller` may search it and change its
/// entries (write and search permission).
pub(crate) async fn change(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    dir: Handle,
) -> OpResult<pvfs_proto::Attr> {
    let dir_attr = search(ctx, caller, dir).await?;
    access::check(&dir_attr, &caller.creds, access::MAY_WRITE)
        .map_err(|e| OpError::denied(e, format!("no write permission on directory {dir:#x}")))?;
    Ok(dir_attr)
}

/// Fails unless entry `name` of directory `dir` (attributes `dir_attr`) belongs on
/// this server: a name put in the wrong shard would be invisible to lookups and
/// listings (not here: EXDEV, naming the right server).
pub(crate) fn check_placement(ctx: &Ctx, dir_attr: &pvfs_proto::Attr, name: &str) -> OpResult<()> {
    let shards = match &dir_attr.detail {
        pvfs_proto::ObjDetail::Dir { shards, .. } => *shards,
        _ => {
            return Err(OpError::posix(
                Errno::ENOTDIR,
                format!("{:#x} is not a directory", dir_attr.handle),
            ))
        }
    };
    let right = ctx.config.entry_server(dir_attr.handle, shards, name);
    if right != ctx.me {
        return Err(OpError::not_here(
            Errno::EXDEV,
            format!(
                "entry {name:?} of directory {:#x} belongs on {}, not {}",
                dir_attr.handle, ctx.config.servers[right].name, ctx.info.name
            ),
        ));
    }
    Ok(())
}
