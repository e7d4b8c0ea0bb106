//! `LinkEntry`: the first step of a rename whose two names live on different
//! servers: put the new name in place (replacing an expected old entry).

use std::sync::Arc;

use pvfs_proto::access;
use pvfs_proto::types::check_name;
use pvfs_proto::{rights, Capability, DirEntry, Errno, Handle, ObjKind, Response, RetryKey};

use crate::replay::{remember, replayed};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::{changed, lookup};
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
}

/// Adds `name` -> `handle` to `dir`. With `replace`, the entry must currently name
/// that handle; without, the name must be free. A caller without the key shows a MOVE
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
    } = l;
    check_name(&name).map_err(|e| OpError::new(e, format!("invalid name {name:?}")))?;
    ctx.caps
        .check_ticket(ticket, handle, rights::MOVE, caller)?;
    let dir_attr = lookup::change(ctx, caller, dir).await?;
    lookup::check_placement(ctx, &dir_attr, &name)?;
    if let Some(r) = replace {
        let replaced = attrs_of(ctx, r).await?;
        access::may_delete(&dir_attr, replaced.uid, &caller.creds)
            .map_err(|e| OpError::new(e, format!("no permission to replace {name:?}")))?;
    }
    let minter = ctx.clone();
    let uid = caller.creds.uid;
    let response = ctx
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
            let replaced = put_entry(t, dir, &name, handle, kind, replace)?;
            let tickets = replaced
                .iter()
                .map(|r| minter.caps.mint(r.handle, rights::REMOVE, uid))
                .collect();
            let linked = Response::Linked { replaced, tickets };
            remember(t, retry, &linked);
            Ok(linked)
        })
        .await?;
    Ok(response)
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
    t.put_entry(dir, name, handle, kind);
    Ok(replaced)
}
