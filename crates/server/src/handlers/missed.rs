//! `Missed`: a server catching up asks this one what it missed, after telling it
//! what it copied (`crate::missed`, `crate::catchup`).

use pvfs_proto::{req, Changed, Errno, Response};

use crate::chain;
use crate::error::{OpError, OpResult};
use crate::op::{Access, Answer, Cx, Handler};

/// Most records in one answer.
const MAX_RECORDS: u32 = 1024;

/// Drops the records the caller copied, then answers a page of the rest, once no
/// change admitted under an older map (which could still add one) is running here.
impl Handler for req::Missed {
    fn access(&self) -> Access<'_> {
        Access::Peer
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        ctx.require_data()?;
        if self.server as usize == ctx.me {
            return Err(OpError::invalid(
                Errno::EINVAL,
                "a server asked itself what it missed",
            ));
        }
        // Under the caller's map: the one in which it is back.
        chain::check_map(&ctx.lease, self.map)?;
        let limit = ctx.config.timeouts.request / 2;
        if !ctx.admissions.drained_below(self.map, limit).await {
            return Err(OpError::busy(
                Errno::EAGAIN,
                "changes admitted under an older cluster map are still running here",
            ));
        }
        ctx.missed.done(self.server, &self.done);
        let (records, more) = ctx
            .missed
            .list(self.server, self.max.clamp(1, MAX_RECORDS) as usize);
        Ok(Response::Missed { records, more }.into())
    }
}
