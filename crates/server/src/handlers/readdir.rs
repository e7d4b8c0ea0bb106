//! `ReadDir`: one page of the entries of a directory shard held here.

use std::sync::Arc;

use pvfs_proto::access::{self, MAY_READ};
use pvfs_proto::{Handle, Response};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::perms::attrs_of;
use crate::session::Caller;

/// Most entries one page may hold (bounds the answer to well under a frame).
pub const MAX_PAGE: u32 = 4096;

/// Entries of `dir` held here whose names sort after `after` (the caller needs read
/// permission on `dir`).
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    dir: Handle,
    after: Option<String>,
    max: u32,
) -> OpResult<Response> {
    ctx.require_meta()?;
    let dir_attr = attrs_of(ctx, dir).await?;
    access::check(&dir_attr, &caller.creds, MAY_READ)
        .map_err(|e| OpError::new(e, format!("no read permission on directory {dir:#x}")))?;
    let max = max.clamp(1, MAX_PAGE) as usize;
    let (entries, more) = ctx.meta.read()?.list_entries(dir, after.as_deref(), max)?;
    Ok(Response::DirPage { entries, more })
}
