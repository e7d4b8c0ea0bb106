//! `Lookup`: one path component in the shard of a directory this server holds.

use pvfs_proto::{DirEntry, Handle, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::no_entry;

/// Finds `name` in `dir`; returns the object's attributes too when it lives here
/// (the usual case: an object is created on the server of its entry's shard).
pub fn handle(ctx: &Ctx, dir: Handle, name: &str) -> OpResult<Response> {
    ctx.require_meta()?;
    pvfs_proto::types::check_name(name)
        .map_err(|e| crate::error::OpError::new(e, format!("invalid name {name:?}")))?;
    let view = ctx.meta.read()?;
    let (handle, kind) = view
        .get_entry(dir, name)?
        .ok_or_else(|| no_entry(dir, name))?;
    let attr = if ctx.is_local(handle) {
        view.get_object(handle)?
    } else {
        None
    };
    Ok(Response::Entry {
        entry: DirEntry {
            name: name.to_string(),
            handle,
            kind,
        },
        attr,
    })
}
