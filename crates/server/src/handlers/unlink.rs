//! `Unlink`: removes a directory entry, and takes the object's link when it lives
//! here (`crate::lifetime`).

use pvfs_proto::access;
use pvfs_proto::message::UnlinkWant;
use pvfs_proto::{req, Changed, DirEntry, Errno, LinkDrop, ObjKind, Response, Timespec};

use crate::error::{OpError, OpResult};
use crate::feed::{entry, object};
use crate::handlers::{changed, lookup, no_entry};
use crate::lifetime;
use crate::op::{Access, Answer, Cx, Handler};
use crate::perms::attrs_of;

/// Removes `name` from `dir` (the caller needs write and search permission on `dir`,
/// and in a sticky directory to own it or the object). Unless the name moved
/// (`fate` Moved), the object loses a link (`crate::lifetime`): in the same commit
/// when this server owns it, else at its owner right after (deleted at zero links,
/// unless `fate` keeps it for a file still open). An entry of a directory that no
/// longer exists (what `pvfs fsck` repairs) may be removed only by a key holder
/// naming the object it expects there.
impl Handler for req::Unlink {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        let mut v = vec![entry(self.dir, &self.name)];
        v.extend(self.expect.map(object));
        v
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, caller) = (cx.ctx, cx.caller);
        let req::Unlink {
            dir,
            name,
            expect,
            want,
            fate,
        } = self;
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
                    OpError::denied(
                        e,
                        format!("{name:?} in sticky directory {dir:#x} belongs to another user"),
                    )
                })?;
            }
            checked = Some(entry.map(|(h, _)| h));
        }
        // Kept until the commit ended (`crate::holds`).
        let releasing = (fate == LinkDrop::Release).then(|| (caller.lock_who(), caller.origin));
        let claims = crate::holds::Claims::releasing(&ctx.holds, releasing);
        let owner = (ctx.caps.clone(), claims.clone(), ctx.here());
        let uid = caller.creds.uid;
        let mut response = cx
            .once
            .commit(&ctx.meta, move |t| {
                let (handle, kind) = t
                    .get_entry(dir, &name)?
                    .ok_or_else(|| no_entry(dir, &name))?;
                if expect.is_some_and(|h| h != handle) || checked.is_some_and(|c| c != Some(handle))
                {
                    return Err(changed(dir, &name));
                }
                match (want, kind) {
                    (UnlinkWant::Dir, k) if k != ObjKind::Dir => {
                        return Err(OpError::posix(
                            Errno::ENOTDIR,
                            format!("{name:?} is not a directory"),
                        ))
                    }
                    (UnlinkWant::NotDir, ObjKind::Dir) => {
                        return Err(OpError::posix(
                            Errno::EISDIR,
                            format!("{name:?} is a directory"),
                        ))
                    }
                    _ => {}
                }
                let changed = Timespec::now();
                t.delete_entry(dir, &name, changed)?;
                let (left, tickets) =
                    lifetime::drop_for_name(t, (&owner.0, &*owner.1, owner.2), handle, fate, uid)?;
                Ok(Response::Unlinked {
                    entry: DirEntry { name, handle, kind },
                    left,
                    tickets,
                    changed,
                })
            })
            .await?;
        finish(&cx, fate, &mut response).await?;
        Ok(response.into())
    }

    /// A retry takes the link at the object's owner again if the first run could not
    /// (its step carries the same key: it happens once).
    async fn replayed(self, cx: Cx<'_>, mut recorded: Response) -> OpResult<Answer> {
        finish(&cx, self.fate, &mut recorded).await?;
        Ok(recorded.into())
    }
}

/// After the commit: the link the removed name held, at the object's owner when it
/// lives elsewhere.
async fn finish(cx: &Cx<'_>, fate: pvfs_proto::LinkDrop, response: &mut Response) -> OpResult<()> {
    if let Response::Unlinked {
        entry,
        left,
        tickets,
        ..
    } = response
    {
        let key = cx.once.peer_key();
        lifetime::finish_remote(cx.ctx, cx.caller, entry.handle, fate, key, (left, tickets))
            .await?;
    }
    Ok(())
}
