//! `Ping`: liveness and identity.

use pvfs_proto::Response;

use crate::ctx::Ctx;
use crate::error::OpResult;

/// Answers who this server is.
pub fn handle(ctx: &Ctx) -> OpResult<Response> {
    Ok(Response::Pong {
        info: ctx.info.clone(),
    })
}
