//! `Ping`: liveness, identity and health.

use pvfs_proto::Response;

use crate::ctx::Ctx;
use crate::error::OpResult;

/// Answers who this server is and how it is doing (degraded, with the reason, while
/// its metadata store is failed: `crate::health`).
pub fn handle(ctx: &Ctx) -> OpResult<Response> {
    Ok(Response::Pong {
        info: ctx.info.clone(),
        health: ctx.health.report(&ctx.meta),
    })
}
