//! Small datafile operations: sizes, truncate, remove, fsync.

use std::sync::Arc;

use pvfs_proto::{Errno, Handle, Response, Stripe};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::write::check_stripe;

/// Most datafiles one request may name.
pub const MAX_HANDLES: usize = 65536;

pub(crate) fn check_handles(ctx: &Ctx, handles: &[Handle]) -> OpResult<()> {
    ctx.require_data()?;
    if handles.len() > MAX_HANDLES {
        return Err(OpError::new(
            Errno::E2BIG,
            format!(
                "{} datafiles in one request (limit {MAX_HANDLES})",
                handles.len()
            ),
        ));
    }
    handles.iter().try_for_each(|&h| ctx.require_local(h))
}

/// `GetSizes`: local size and mtime of each datafile (readdirplus phase 2, stat).
pub async fn get_sizes(ctx: &Arc<Ctx>, handles: Vec<Handle>) -> OpResult<Response> {
    check_handles(ctx, &handles)?;
    let data = ctx.data.clone();
    let sizes = ctx
        .blocking(move || {
            handles
                .iter()
                .map(|&h| Ok(data.stat(h)?))
                .collect::<OpResult<Vec<_>>>()
        })
        .await?;
    Ok(Response::Sizes { sizes })
}

/// `Truncate`: datafile `index` keeps exactly its share of a file of `size` bytes.
pub async fn truncate(
    ctx: &Arc<Ctx>,
    handle: Handle,
    stripe: Stripe,
    index: u32,
    size: u64,
) -> OpResult<Response> {
    check_handles(ctx, &[handle])?;
    check_stripe(stripe, index)?;
    if size > pvfs_proto::layout::MAX_FILE_SIZE {
        return Err(OpError::new(Errno::EFBIG, format!("size {size} too large")));
    }
    let local = stripe.local_size(u64::from(index), size);
    let data = ctx.data.clone();
    ctx.blocking(move || Ok(data.truncate(handle, local)?))
        .await?;
    Ok(Response::Done {})
}

/// `RemoveDatafiles`: deletes datafiles of a removed file.
/// A caller without the key shows a REMOVE ticket for each (from the removal of the
/// file they belonged to).
pub async fn remove(
    ctx: &Arc<Ctx>,
    caller: &crate::session::Caller,
    handles: Vec<Handle>,
    tickets: &[pvfs_proto::Capability],
) -> OpResult<Response> {
    check_handles(ctx, &handles)?;
    for &h in &handles {
        let ticket = tickets.iter().find(|t| t.handle == h);
        ctx.caps
            .check_ticket(ticket, h, pvfs_proto::rights::REMOVE, caller)?;
    }
    let data = ctx.data.clone();
    ctx.blocking(move || handles.iter().try_for_each(|&h| Ok(data.remove(h)?)))
        .await?;
    Ok(Response::Done {})
}

/// `Fsync`: makes datafiles durable.
pub async fn fsync(ctx: &Arc<Ctx>, handles: Vec<Handle>) -> OpResult<Response> {
    check_handles(ctx, &handles)?;
    let data = ctx.data.clone();
    ctx.blocking(move || handles.iter().try_for_each(|&h| Ok(data.sync(h)?)))
        .await?;
    Ok(Response::Done {})
}
