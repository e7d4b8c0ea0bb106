//! `Unlink`: removes a directory entry, and the object with it when it lives here.

use std::sync::Arc;

use pvfs_proto::access;
use pvfs_proto::message::UnlinkWant;
use pvfs_proto::{
    rights, Capability, DirEntry, Errno, Handle, ObjDetail, ObjKind, Response, RetryKey,
};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::{changed, lookup, no_entry};
use crate::perms::attrs_of;
use crate::replay::{remember, replayed};
use crate::session::Caller;

/// Removes `name` from `dir` (the caller needs write and search permission on `dir`,
/// and in a sticky directory to own it or the object). With `drop_object`, the object
/// is deleted in the same commit when this server owns it; otherwise the client
/// deletes it at its owner (now, or when a file open somewhere is closed), with the
/// REMOVE ticket of the answer (and the datafiles of a file deleted here with theirs).
/// An entry of a directory that no longer exists (what `pvfs fsck` repairs) may be
/// removed only by a key holder naming the object it expects there.
#[allow(clippy::too_many_arguments)]
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    dir: Handle,
    name: String,
    expect: Option<Handle>,
    want: UnlinkWant,
    drop_object: bool,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    let dir_attr = match lookup::change(ctx, caller, dir).await {
        Ok(a) => Some(a),
        Err(e) if e.errno == Errno::ENOENT && caller.trusted && expect.is_some() => None,
        Err(e) => return Err(e),
    };
    // In a sticky directory, who owns the object the name leads to decides; the
    // commit then checks the name still leads there.
    let mut checked = None;
    if let Some(dir_attr) = dir_attr.filter(|a| a.mode & 0o1000 != 0) {
        let entry = ctx.meta.read()?.get_entry(dir, &name)?;
        if let Some((victim, _)) = entry {
            let obj = attrs_of(ctx, victim).await?;
            access::may_delete(&dir_attr, obj.uid, &caller.creds).map_err(|e| {
                OpError::new(
                    e,
                    format!("{name:?} in sticky directory {dir:#x} belongs to another user"),
                )
            })?;
        }
        checked = Some(entry.map(|(h, _)| h));
    }
    let range = ctx.config.servers[ctx.me].handles;
    let minter = ctx.clone();
    let uid = caller.creds.uid;
    let response = ctx
        .meta
        .write(move |t| {
            if let Some(done) = replayed(t, retry)? {
                return Ok(done);
            }
            let (handle, kind) = t
                .get_entry(dir, &name)?
                .ok_or_else(|| no_entry(dir, &name))?;
            if expect.is_some_and(|h| h != handle) || checked.is_some_and(|c| c != Some(handle)) {
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
            let mut tickets = Vec::new();
            let removed = if drop_object && range.contains(handle) {
                match t.get_object(handle)? {
                    Some(attr) => {
                        t.delete_object(handle);
                        t.clear_xattrs(handle)?;
                        tickets = datafile_tickets(&minter, &attr.detail, uid);
                        Some(attr.detail)
                    }
                    None => None,
                }
            } else {
                // Deleting it (now, or later for a file still open) is the caller's
                // next step, at its owner; the caller may, having removed a name.
                tickets.push(minter.caps.mint(handle, rights::REMOVE, uid));
                None
            };
            let unlinked = Response::Unlinked {
                entry: DirEntry { name, handle, kind },
                removed,
                tickets,
            };
            remember(t, retry, &unlinked);
            Ok(unlinked)
        })
        .await?;
    Ok(response)
}

/// REMOVE tickets for the datafiles of a removed object (none for other kinds).
pub(crate) fn datafile_tickets(ctx: &Ctx, detail: &ObjDetail, uid: u32) -> Vec<Capability> {
    match detail {
        ObjDetail::File { layout } => layout
            .datafiles
            .iter()
            .map(|d| ctx.caps.mint(d.handle, rights::REMOVE, uid))
            .collect(),
        _ => Vec::new(),
    }
}
