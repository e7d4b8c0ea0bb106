//! `Unlink`: removes a directory entry, and takes the object's link when it lives
//! here (`crate::lifetime`).

use std::sync::Arc;

use pvfs_proto::access;
use pvfs_proto::message::UnlinkWant;
use pvfs_proto::{DirEntry, Errno, Handle, LinkDrop, ObjKind, Response, RetryKey, Timespec};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::{changed, lookup, no_entry};
use crate::lifetime;
use crate::perms::attrs_of;
use crate::replay::{remember, replayed};
use crate::session::Caller;

/// Removes `name` from `dir` (the caller needs write and search permission on `dir`,
/// and in a sticky directory to own it or the object). Unless the name moved
/// (`fate` Moved), the object loses a link (`crate::lifetime`): in the same commit
/// when this server owns it, else at its owner right after (deleted at zero links,
/// unless `fate` keeps it for a file still open). An entry of a directory that no
/// longer exists (what `pvfs fsck` repairs) may be removed only by a key holder
/// naming the object it expects there.
#[allow(clippy::too_many_arguments)]
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    dir: Handle,
    name: String,
    expect: Option<Handle>,
    want: UnlinkWant,
    fate: LinkDrop,
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
    let owner = ctx.clone();
    let uid = caller.creds.uid;
    let mut response = ctx
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
            let changed = Timespec::now();
            t.delete_entry(dir, &name, changed)?;
            let (left, tickets) = lifetime::drop_for_name(t, &owner, handle, fate, uid)?;
            let unlinked = Response::Unlinked {
                entry: DirEntry { name, handle, kind },
                left,
                tickets,
                changed,
            };
            remember(t, retry, &unlinked);
            Ok(unlinked)
        })
        .await?;
    if let Response::Unlinked {
        entry,
        left,
        tickets,
        ..
    } = &mut response
    {
        let creds = &caller.creds;
        lifetime::finish_remote(ctx, creds, entry.handle, fate, retry, (left, tickets)).await;
    }
    Ok(response)
}
