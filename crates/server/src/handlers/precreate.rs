//! `Precreate`: a data server reserves datafile handles for a metadata server's pool.
//! The datafiles themselves appear on first write (creating them here would cost four
//! file creations per file created, on the create path's CPU).

use std::sync::Arc;

use pvfs_proto::{Errno, Handle, Response};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};

/// Most handles one request may reserve.
pub const MAX_COUNT: u32 = 1 << 20;

/// Reserves `count` handles and answers the range.
pub async fn handle(ctx: &Arc<Ctx>, count: u32) -> OpResult<Response> {
    let (first, count) = reserve(ctx, count).await?;
    Ok(Response::Handles { first, count })
}

/// Reserves `count` consecutive datafile handles from this server's range, durably.
pub async fn reserve(ctx: &Arc<Ctx>, count: u32) -> OpResult<(Handle, u32)> {
    ctx.require_data()?;
    if count == 0 || count > MAX_COUNT {
        return Err(OpError::new(
            Errno::EINVAL,
            format!("precreate count {count} outside 1..={MAX_COUNT}"),
        ));
    }
    let first = ctx
        .meta
        .write(move |t| t.alloc_handles(u64::from(count)))
        .await?;
    Ok((first, count))
}
