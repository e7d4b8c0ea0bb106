//! `ScanObjects`: a page of the objects stored on this metadata server (fsck).

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::handlers::scan::{page, MAX_OBJECT_PAGE};
use crate::op::{Access, Answer, Cx, Handler};

impl Handler for req::ScanObjects {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        ctx.require_meta()?;
        let max = page(self.max.min(MAX_OBJECT_PAGE));
        let attrs = ctx.meta.read()?.objects_after(self.after, max)?;
        let more = attrs.len() == max;
        Ok(Response::Objects { attrs, more }.into())
    }
}
