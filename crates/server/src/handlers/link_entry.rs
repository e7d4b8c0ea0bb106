//! `LinkEntry`: the first step of a rename whose two names live on different
//! servers: put the new name in place (replacing an expected old entry).

use std::sync::Arc;

use pvfs_proto::access;
use pvfs_proto::types::check_name;
use pvfs_proto::{
    rights, Capability, DirEntry, Errno, Handle, LinkDrop, ObjKind, Remains, Response, RetryKey,
    Timespec,
};

use crate::replay::{remember, replayed, replayed_now};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::{changed, lookup};
use crate::lifetime;
use crate::perms::attrs_of;
use crate::session::Caller;

/// What a `LinkEntry` puts where.
pub struct Link {
    /// The directory.
    pub dir: Handle,
    /// The new name.
    pub name: String,
    /// The object it names.
    pub handle: Handle,
    /// The object's kind.
    pub kind: ObjKind,
    /// The object the name must name now, replaced; none: the name must be free.
    pub replace: Option<Handle>,
    /// What the replaced object loses.
    pub fate: LinkDrop,
}

/// Adds `name` -> `handle` to `dir`. With `replace`, the entry must currently name
/// that handle, whose object then loses a link as `fate` says; without, the name must
/// be free. A caller without the key shows a MOVE
/// ticket for `handle` (from the lookup of the name it is moved from), and needs write
/// and search permission on `dir` (and the sticky rule for a name it replaces).
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    l: Link,
    ticket: Option<&Capability>,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    let Link {
        dir,
        name,
        handle,
        kind,
        replace,
        fate,
    } = l;
    check_name(&name).map_err(|e| OpError::new(e, format!("invalid name {name:?}")))?;
    ctx.caps
        .check_ticket(ticket, handle, rights::MOVE, caller)?;
    // A retry of a link that was done is answered from the record before the checks
    // below look for the object it replaced (and may have deleted).
    // What was left to do after its commit is done again, as for a retry answered in
    // the commit below.
    if let Some(mut done) = replayed_now(ctx, retry)? {
        finish_replaced(ctx, caller, fate, retry, &mut done).await;
        return Ok(done);
    }
    let dir_attr = lookup::change(ctx, caller, dir).await?;
    lookup::check_placement(ctx, &dir_attr, &name)?;
    if let Some(r) = replace {
        let replaced = attrs_of(ctx, r).await?;
        access::may_delete(&dir_attr, replaced.uid, &caller.creds)
            .map_err(|e| OpError::new(e, format!("no permission to replace {name:?}")))?;
    }
    let owner = ctx.clone();
    let uid = caller.creds.uid;
    let mut response = ctx
        .meta
        .write(move |t| {
            if let Some(done) = replayed(t, retry)? {
                return Ok(done);
            }
            if t.is_sealed(dir)? {
                return Err(OpError::new(
                    Errno::ENOENT,
                    format!("directory {dir:#x} is being removed"),
                )
                .into());
            }
            let changed = Timespec::now();
            let replaced = put_entry(t, dir, &name, handle, kind, replace, changed)?;
            linked(t, &owner, (replaced, fate, uid), changed, retry)
        })
        .await?;
    finish_replaced(ctx, caller, fate, retry, &mut response).await;
    Ok(response)
}

/// The answer of a commit that put a name in place (replacing `replaced`, whose
/// object loses a link as `fate` says), recorded for a retry. Shared with same-server
/// renames.
pub(crate) fn linked(
    t: &mut pvfs_storage::MetaTxn<'_>,
    owner: &Ctx,
    (replaced, fate, uid): (Option<DirEntry>, LinkDrop, u32),
    changed: Timespec,
    retry: Option<RetryKey>,
) -> Result<Response, pvfs_storage::MetaError> {
    let (left, tickets) = match &replaced {
        Some(r) => lifetime::drop_for_name(t, owner, r.handle, fate, uid)?,
        None => (Remains::Untouched, Vec::new()),
    };
    let answer = Response::Linked {
        replaced,
        left,
        tickets,
        changed,
    };
    remember(t, retry, &answer);
    Ok(answer)
}

/// After a commit that replaced an entry whose object lives elsewhere: takes its
/// link there (`crate::lifetime::finish_remote`). Shared with same-server renames.
pub(crate) async fn finish_replaced(
    ctx: &Ctx,
    caller: &Caller,
    fate: LinkDrop,
    retry: Option<RetryKey>,
    response: &mut Response,
) {
    if let Response::Linked {
        replaced: Some(r),
        left,
        tickets,
        ..
    } = response
    {
        let creds = &caller.creds;
        lifetime::finish_remote(ctx, creds, r.handle, fate, retry, (left, tickets)).await;
    }
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
) -> Result<Option<DirEntry>, pvfs_storage::MetaError> {
    let existing = t.get_entry(dir, name)?;
    let replaced = match (existing, replace) {
        (None, None) => None,
        (Some((h, k)), Some(want)) if h == want => Some(DirEntry {
            name: name.to_string(),
            handle: h,
            kind: k,
        }),
        (Some(_), None) => {
            return Err(OpError::new(Errno::EEXIST, format!("{name:?} exists")).into());
        }
        _ => return Err(changed(dir, name).into()),
    };
    t.put_entry(dir, name, handle, kind, now)?;
    Ok(replaced)
}
