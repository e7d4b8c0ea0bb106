//! `Precreate`: a data server reserves datafile handles for a metadata server's pool.
//! The datafiles themselves appear on first write (creating them here would cost four
//! file creations per file created, on the create path's CPU).

use pvfs_proto::{req, Changed, Errno, Response};

use crate::error::{OpError, OpResult};
use crate::op::{Access, Answer, Cx, Handler};
use crate::precreate::check_count;

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
        ctx.require_data()?;
        check_count(count)?;
        if !ctx.lease.disk_current() {
            // A new disk's store starts its handles over: none goes out before the
            // map has seen this disk and it was refilled (`crate::refill`).
            return Err(OpError::busy(
                Errno::EAGAIN,
                "this server's storage directory is new to the map, or still being refilled",
            ));
        }
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
