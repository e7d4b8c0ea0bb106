//! `ReadDir`: one page of the entries of a directory shard held here.

use pvfs_proto::{Handle, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;

/// Most entries one page may hold (bounds the answer to well under a frame).
pub const MAX_PAGE: u32 = 4096;

/// Entries of `dir` held here whose names sort after `after`.
pub fn handle(ctx: &Ctx, dir: Handle, after: Option<String>, max: u32) -> OpResult<Response> {
    ctx.require_meta()?;
    let max = max.clamp(1, MAX_PAGE) as usize;
    let (entries, more) = ctx.meta.read()?.list_entries(dir, after.as_deref(), max)?;
    Ok(Response::DirPage { entries, more })
}
