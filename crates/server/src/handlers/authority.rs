//! `Authority`: a message of the authority (raft between its members, a server's
//! lease renewal), answered by this server's member of it (`crate::lease`).

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::op::{Access, Answer, Cx, Handler};

/// Hands the message to this server's authority member; servers only.
impl Handler for req::Authority {
    fn access(&self) -> Access<'_> {
        Access::Peer
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let body = cx.ctx.lease.handle(&self.body).await?;
        Ok(Response::Authority { body }.into())
    }
}
