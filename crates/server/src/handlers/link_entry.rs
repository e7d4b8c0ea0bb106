//! `LinkEntry`: the first step of a rename whose two names live on different
//! servers: put the new name in place (replacing an expected old entry).

use pvfs_proto::access;
use pvfs_proto::types::check_name;
use pvfs_proto::{
    req, rights, Changed, DirEntry, Errno, Handle, LinkDrop, ObjKind, Remains, Response, RetryKey,
    Timespec,
};

use crate::caps::Caps;
use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::feed::{entry, object};
use crate::handlers::sealed;
use crate::handlers::{changed, lookup};
use crate::lifetime;
use crate::op::{Access, Answer, Cx, Handler, Tickets};
use crate::perms::attrs_of;
use crate::session::Caller;

/// Adds `name` -> `handle` to `dir`. With `replace`, the entry must currently name
/// that handle, whose object then loses a link as `fate` says; without, the name must
/// be free. A caller without the key shows a MOVE ticket for `handle` (from the
/// lookup of the name it is moved from), and needs write and search permission on
/// `dir` (and the sticky rule for a name it replaces).
impl Handler for req::LinkEntry {
    fn access(&self) -> Access<'_> {
        Access::Ticket {
            tickets: Tickets::One(self.ticket.as_ref(), self.handle),
            rights: rights::MOVE,
        }
    }

    fn changes(&self) -> Vec<Changed> {
        let mut v = vec![entry(self.dir, &self.name), object(self.handle)];
        v.extend(self.replace.map(object));
        v
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, caller) = (cx.ctx, cx.caller);
        ctx.require_meta()?;
        let req::LinkEntry {
            dir,
            name,
            handle,
            kind,
            replace,
            fate,
            counted,
            ..
        } = self;
        check_name(&name).map_err(|e| OpError::invalid(e, format!("invalid name {name:?}")))?;
        let dir_attr = lookup::change(ctx, caller, dir).await?;
        lookup::check_placement(ctx, &dir_attr, &name)?;
        if let Some(r) = replace {
            let replaced = attrs_of(ctx, r).await?;
            access::may_delete(&dir_attr, replaced.uid, &caller.creds)
                .map_err(|e| OpError::denied(e, format!("no permission to replace {name:?}")))?;
        }
        // Kept until the commit ended (`crate::holds`).
        let claims = crate::holds::Claims::new(&ctx.holds);
        let owner = (ctx.caps.clone(), claims.clone(), ctx.here());
        let uid = caller.creds.uid;
        // A moved file's new name is counted before it is in place (at its owner, or
        // in the commit when it lives here): a crash before its old name goes leaves
        // a hard link, never a name without its link.
        let count = counted && kind != ObjKind::Dir;
        let admission = sealed::gate(ctx, dir).await?;
        let remote = count && !ctx.is_local(handle);
        if remote {
            lifetime::add_remote(ctx, caller, handle, true).await?;
        }
        let creds = caller.creds.clone();
        let committed = cx
            .once
            .commit(&ctx.meta, move |t| {
                admission.check(t)?;
                if count && !remote {
                    lifetime::add_link(t, handle, &creds, true)?;
                }
                let changed = Timespec::now();
                let replaced = put_entry(t, dir, &name, handle, kind, replace, changed)?;
                linked(
                    t,
                    (&owner.0, &*owner.1, owner.2),
                    (replaced, fate, uid),
                    changed,
                )
            })
            .await;
        let mut response = match committed {
            Ok(r) => r,
            Err(e) => {
                if remote {
                    // The name is not in place: give its link back (the old name
                    // still holds one, so the object stays).
                    lifetime::drop_remote(ctx, caller, handle, true, None).await;
                }
                return Err(e);
            }
        };
        finish_replaced(ctx, caller, fate, cx.once.peer_key(), &mut response).await?;
        Ok(response.into())
    }

    /// A retry takes the replaced object's link at its owner again if the first run
    /// could not (the same key: it happens once).
    async fn replayed(self, cx: Cx<'_>, mut recorded: Response) -> OpResult<Answer> {
        let key = cx.once.peer_key();
        finish_replaced(cx.ctx, cx.caller, self.fate, key, &mut recorded).await?;
        Ok(recorded.into())
    }
}

/// The answer of a commit that put a name in place (replacing `replaced`, whose
/// object loses a link as `fate` says). Shared with same-server renames.
pub(crate) fn linked(
    t: &mut pvfs_storage::MetaTxn<'_>,
    owner: (&Caps, &crate::holds::Claims, pvfs_config::HandleRange),
    (replaced, fate, uid): (Option<DirEntry>, LinkDrop, u32),
    changed: Timespec,
) -> OpResult<Response> {
    let (left, tickets) = match &replaced {
        Some(r) => lifetime::drop_for_name(t, owner, r.handle, fate, uid)?,
        None => (Remains::Untouched, Vec::new()),
    };
    Ok(Response::Linked {
        replaced,
        left,
        tickets,
        changed,
    })
}

/// After a commit that replaced an entry whose object lives elsewhere: takes its
/// link there (`crate::lifetime::finish_remote`, with the step's retry key `key`),
/// while this server still answers for its group.
/// Shared with same-server renames.
pub(crate) async fn finish_replaced(
    ctx: &Ctx,
    caller: &Caller,
    fate: LinkDrop,
    key: Option<RetryKey>,
    response: &mut Response,
) -> OpResult<()> {
    if let Response::Linked {
        replaced: Some(r),
        left,
        tickets,
        ..
    } = response
    {
        lifetime::finish_remote(ctx, caller, r.handle, fate, key, (left, tickets)).await?;
    }
    Ok(())
}

/// Puts `name` -> `handle` in `dir` inside a commit, checking the replace condition;
/// returns the replaced entry. Shared with same-server renames.
pub(crate) fn put_entry(
    t: &mut pvfs_storage::MetaTxn<'_>,
    dir: Handle,
    name: &str,
    handle: Handle,
    kind: ObjKind,
    replace: Option<Handle>,
    now: Timespec,
) -> OpResult<Option<DirEntry>> {
    let existing = t.get_entry(dir, name)?;
    let replaced = match (existing, replace) {
        (None, None) => None,
        (Some((h, k)), Some(want)) if h == want => Some(DirEntry {
            name: name.to_string(),
            handle: h,
            kind: k,
        }),
        (Some(_), None) => {
            return Err(OpError::posix(Errno::EEXIST, format!("{name:?} exists")));
        }
        _ => return Err(changed(dir, name)),
    };
    t.put_entry(dir, name, handle, kind, now)?;
    Ok(replaced)
}
