//! `Fsync`: makes datafiles durable.

use pvfs_proto::{req, Changed};

use crate::error::OpResult;
use crate::handlers::datafiles::check_handles;
use crate::op::{done, Access, Answer, Cx, Handler};

impl Handler for req::Fsync {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handles) = (cx.ctx, self.handles);
        check_handles(ctx, &handles)?;
        let data = ctx.data.clone();
        ctx.blocking(move || handles.iter().try_for_each(|&h| Ok(data.sync(h)?)))
            .await?;
        done()
    }
}
