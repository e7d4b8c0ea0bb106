//! `Ping`: liveness, identity and health.

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::op::{Access, Answer, Cx, Handler};

/// Answers who this server is and how it is doing (degraded, with the reason, while
/// its metadata store is failed: `crate::health`).
impl Handler for req::Ping {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        Ok(Response::Pong {
            info: ctx.info.clone(),
            health: ctx.health.report(&ctx.meta),
        }
        .into())
    }
}
