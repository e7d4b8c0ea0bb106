//! `ScanObjects`, `ScanEntries`, `ScanDatafiles`, `ScanLost`, `ScanSeals`,
//! `CreateDatafiles`: what `pvfs fsck` needs to see a whole server's state, page by
//! page, to tell lost datafiles from holes, and to recreate lost datafiles.

use std::sync::Arc;

use pvfs_proto::{Handle, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::datafiles::MAX_HANDLES;

/// Most items one scan page holds.
pub const MAX_PAGE: u32 = 8192;
/// Most objects one page holds (an object with a long symlink target is ~4 KiB, and a
/// page must stay well under the 4 MiB answer limit).
pub const MAX_OBJECT_PAGE: u32 = 512;

fn page(max: u32) -> usize {
    max.clamp(1, MAX_PAGE) as usize
}

/// A page of the objects stored here.
pub fn objects(ctx: &Ctx, after: Option<Handle>, max: u32) -> OpResult<Response> {
    ctx.require_meta()?;
    let max = page(max.min(MAX_OBJECT_PAGE));
    let attrs = ctx.meta.read()?.objects_after(after, max)?;
    let more = attrs.len() == max;
    Ok(Response::Objects { attrs, more })
}

/// A page of the directory entries stored here.
pub fn entries(ctx: &Ctx, after: Option<(Handle, String)>, max: u32) -> OpResult<Response> {
    ctx.require_meta()?;
    let max = page(max);
    let after = after.as_ref().map(|(d, n)| (*d, n.as_str()));
    let entries = ctx.meta.read()?.entries_after(after, max)?;
    let more = entries.len() == max;
    Ok(Response::Entries { entries, more })
}

/// A page of the datafiles present on this data server.
pub async fn datafiles(ctx: &Arc<Ctx>, after: Option<Handle>, max: u32) -> OpResult<Response> {
    ctx.require_data()?;
    let data = ctx.data.clone();
    let all = ctx.blocking(move || Ok(data.list()?)).await?;
    Ok(handle_page(&all, after, max))
}

/// A page of the datafiles this data server created, did not remove, and lacks.
pub async fn lost(ctx: &Arc<Ctx>, after: Option<Handle>, max: u32) -> OpResult<Response> {
    ctx.require_data()?;
    let data = ctx.data.clone();
    let all = ctx.blocking(move || Ok(data.lost()?)).await?;
    Ok(handle_page(&all, after, max))
}

/// The handles of sorted `all` after `after`, at most `max` of them.
fn handle_page(all: &[Handle], after: Option<Handle>, max: u32) -> Response {
    let start = match after {
        Some(a) => all.partition_point(|&h| h <= a),
        None => 0,
    };
    let handles: Vec<Handle> = all[start..].iter().take(page(max)).copied().collect();
    let more = start + handles.len() < all.len();
    Response::HandleList { handles, more }
}

/// Every sealed directory shard here.
pub fn seals(ctx: &Ctx) -> OpResult<Response> {
    ctx.require_meta()?;
    let handles = ctx.meta.read()?.seals()?;
    Ok(Response::HandleList {
        handles,
        more: false,
    })
}

/// Creates missing datafiles, empty.
pub async fn create_datafiles(ctx: &Arc<Ctx>, handles: Vec<Handle>) -> OpResult<Response> {
    ctx.require_data()?;
    if handles.len() > MAX_HANDLES {
        return Err(crate::error::OpError::new(
            pvfs_proto::Errno::E2BIG,
            "too many datafiles in one request",
        ));
    }
    handles.iter().try_for_each(|&h| ctx.require_local(h))?;
    let data = ctx.data.clone();
    ctx.blocking(move || Ok(data.create_all(&handles)?)).await?;
    Ok(Response::Done {})
}
