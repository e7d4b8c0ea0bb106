//! `ScanHeld`: the objects of this metadata server that clients hold open (fsck).

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::op::{Access, Answer, Cx, Handler};

/// Most handles in one page.
const MAX_PAGE: u32 = 65536;

impl Handler for req::ScanHeld {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        ctx.require_meta()?;
        let max = self.max.clamp(1, MAX_PAGE) as usize;
        let handles = ctx.holds.held_after(self.after, max + 1);
        let more = handles.len() > max;
        Ok(Response::HandleList {
            handles: handles.into_iter().take(max).collect(),
            more,
        }
        .into())
    }
}
