//! `Precreate`: a data server reserves datafile handles for a metadata server's pool.
//! The datafiles themselves appear on first write (creating them here would cost four
//! file creations per file created, on the create path's CPU).

use std::sync::Arc;

use pvfs_proto::{req, Changed, Errno, Handle, Response};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::op::{Access, Answer, Cx, Handler};

/// Most handles one request may reserve.
pub const MAX_COUNT: u32 = 1 << 20;

/// Reserves `count` handles and answers the range; a retry of a reservation that was
/// made is answered the same range, never a second one.
impl Handler for req::Precreate {
    fn access(&self) -> Access<'_> {
        Access::Peer
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, count) = (cx.ctx, self.count);
        check(ctx, count)?;
        let answer = cx
            .once
            .commit(&ctx.meta, move |t| {
                let first = t.alloc_handles(u64::from(count))?;
                Ok(Response::Handles { first, count })
            })
            .await?;
        Ok(answer.into())
    }
}

/// Fails unless this is a data server and `count` a count one request may reserve.
fn check(ctx: &Ctx, count: u32) -> OpResult<()> {
    ctx.require_data()?;
    if count == 0 || count > MAX_COUNT {
        return Err(OpError::invalid(
            Errno::EINVAL,
            format!("precreate count {count} outside 1..={MAX_COUNT}"),
        ));
    }
    Ok(())
}

/// Reserves `count` consecutive datafile handles from this server's own range,
/// durably (for its own pool, when it is a metadata server too).
pub async fn reserve(ctx: &Arc<Ctx>, count: u32) -> OpResult<(Handle, u32)> {
    check(ctx, count)?;
    let first = ctx
        .commit(move |t| Ok(t.alloc_handles(u64::from(count))?))
        .await?;
    Ok((first, count))
}
