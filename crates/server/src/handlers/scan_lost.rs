//! `ScanLost`: a page of the datafiles this data server created, did not remove, and
//! lacks on its disk: lost, not holes (fsck).

use pvfs_proto::{req, Changed};

use crate::error::OpResult;
use crate::handlers::scan::handle_page;
use crate::op::{Access, Answer, Cx, Handler};

impl Handler for req::ScanLost {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        ctx.require_data()?;
        let data = ctx.data.clone();
        let all = ctx.blocking(move || Ok(data.lost()?)).await?;
        Ok(handle_page(&all, self.after, self.max).into())
    }
}
