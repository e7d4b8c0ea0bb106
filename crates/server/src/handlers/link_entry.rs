//! `LinkEntry`: the first step of a rename whose two names live on different
//! servers: put the new name in place (replacing an expected old entry).

use std::sync::Arc;

use pvfs_proto::types::check_name;
use pvfs_proto::{DirEntry, Errno, Handle, ObjKind, Response, RetryKey};

use crate::replay::{remember, replayed};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::changed;

/// Adds `name` -> `handle` to `dir`. With `replace`, the entry must currently name
/// that handle; without, the name must be free.
pub async fn handle(
    ctx: &Arc<Ctx>,
    dir: Handle,
    name: String,
    handle: Handle,
    kind: ObjKind,
    replace: Option<Handle>,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    check_name(&name).map_err(|e| OpError::new(e, format!("invalid name {name:?}")))?;
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
            let linked = Response::Linked { replaced };
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
