//! `Forget`: another server changed who may use some of its objects; drop what this
//! server cached of them (`crate::perms`).

use pvfs_proto::{req, Changed};

use crate::error::OpResult;
use crate::op::{done, Access, Answer, Cx, Handler};

/// Forgets the cached attributes of `handles`.
impl Handler for req::Forget {
    fn access(&self) -> Access<'_> {
        Access::Peer
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        cx.ctx.attr_cache.forget(&self.handles);
        done()
    }
}
