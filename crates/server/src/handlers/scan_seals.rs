//! `ScanSeals`: every sealed directory shard on this server (fsck).

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::op::{Access, Answer, Cx, Handler};

impl Handler for req::ScanSeals {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        ctx.require_meta()?;
        let handles = ctx.meta.read()?.seals()?;
        Ok(Response::HandleList {
            handles,
            more: false,
        }
        .into())
    }
}
