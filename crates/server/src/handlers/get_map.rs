//! `GetMap`: the newest cluster map this server knows (which servers the authority
//! counts as alive), for `pvfs status` and for clients that route by it.

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::op::{Access, Answer, Cx, Handler};

/// Answers the map; EOPNOTSUPP without an authority, EAGAIN before the first renewal.
impl Handler for req::GetMap {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        Ok(Response::Map {
            map: cx.ctx.lease.map()?,
        }
        .into())
    }
}
