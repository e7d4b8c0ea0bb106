//! `Rename`: moves an entry in one commit when both names' shards are on this server.

use std::sync::Arc;

use pvfs_proto::access::{self, MAY_WRITE};
use pvfs_proto::types::check_name;
use pvfs_proto::{Errno, Handle, LinkDrop, Response, RetryKey, Timespec};

use crate::replay::{replayed, replayed_now};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::link_entry::{finish_replaced, linked, put_entry};
use crate::handlers::{changed, lookup, no_entry};
use crate::perms::attrs_of;
use crate::session::Caller;

/// What a `Rename` moves where.
pub struct Move {
    /// The directory the entry leaves.
    pub src_dir: Handle,
    /// Its name there.
    pub src_name: String,
    /// The directory it goes to.
    pub dst_dir: Handle,
    /// Its new name.
    pub dst_name: String,
    /// The object the entry must name.
    pub expect_src: Handle,
    /// The object the destination entry must name, replaced; none: the name is free.
    pub replace: Option<Handle>,
    /// What the replaced object loses.
    pub fate: LinkDrop,
}

/// Moves `src_dir/src_name` (which must name `expect_src`) to `dst_dir/dst_name`,
/// replacing `replace` there if given. The caller needs to be allowed to remove the
/// source name and any name it replaces (write and search permission, the sticky
/// rule) and to add names to the destination; a directory moved to another parent
/// also needs write permission on itself. Kind checks (file over directory,
/// emptiness) were done by the client, which sealed a replaced directory first.
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    m: Move,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    check_name(&m.dst_name)
        .map_err(|e| OpError::new(e, format!("invalid name {:?}", m.dst_name)))?;
    // A retry of a rename that was done is answered from the record before the checks
    // below look for objects the rename itself may have deleted (the one it replaced).
    // What was left to do after its commit is done again, as for a retry answered in
    // the commit below.
    if let Some(mut done) = replayed_now(ctx, retry)? {
        finish_replaced(ctx, caller, m.fate, retry, &mut done).await;
        return Ok(done);
    }
    let c = &caller.creds;
    let src_attr = lookup::change(ctx, caller, m.src_dir).await?;
    let dst_attr = if m.dst_dir == m.src_dir {
        src_attr.clone()
    } else {
        lookup::change(ctx, caller, m.dst_dir).await?
    };
    lookup::check_placement(ctx, &src_attr, &m.src_name)?;
    lookup::check_placement(ctx, &dst_attr, &m.dst_name)?;
    let moved = attrs_of(ctx, m.expect_src).await?;
    let denied = |e: Errno, what: String| OpError::new(e, what);
    access::may_delete(&src_attr, moved.uid, c)
        .map_err(|e| denied(e, format!("no permission to move {:?}", m.src_name)))?;
    if let Some(r) = m.replace {
        let replaced = attrs_of(ctx, r).await?;
        access::may_delete(&dst_attr, replaced.uid, c)
            .map_err(|e| denied(e, format!("no permission to replace {:?}", m.dst_name)))?;
    }
    if moved.is_dir() && m.src_dir != m.dst_dir {
        access::check(&moved, c, MAY_WRITE).map_err(|e| {
            denied(
                e,
                format!(
                    "no write permission on directory {:?} to move it",
                    m.src_name
                ),
            )
        })?;
    }
    let Move {
        src_dir,
        src_name,
        dst_dir,
        dst_name,
        expect_src,
        replace,
        fate,
    } = m;
    let owner = ctx.clone();
    let uid = caller.creds.uid;
    let mut response = ctx
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
            let changed = Timespec::now();
            t.delete_entry(src_dir, &src_name, changed)?;
            let replaced = put_entry(t, dst_dir, &dst_name, handle, kind, replace, changed)?;
            linked(t, &owner, (replaced, fate, uid), changed, retry)
        })
        .await?;
    finish_replaced(ctx, caller, fate, retry, &mut response).await;
    Ok(response)
}
