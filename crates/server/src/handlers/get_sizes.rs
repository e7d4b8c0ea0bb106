//! `GetSizes`: local size and mtime of each datafile (readdirplus phase 2, stat).

use pvfs_proto::{req, Changed, Response};

use crate::chain::check_readable;
use crate::error::OpResult;
use crate::handlers::datafiles::check_handles;
use crate::op::{Access, Answer, Cx, Handler};

impl Handler for req::GetSizes {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handles) = (cx.ctx, self.handles);
        check_handles(ctx, &handles)?;
        if let Some(version) = self.map {
            // Sizes of copies come only from a copy that may serve reads.
            check_readable(&ctx.lease, ctx.me as u32, version)?;
        }
        let data = ctx.data.clone();
        let sizes = ctx
            .blocking(move || {
                handles
                    .iter()
                    .map(|&h| Ok(data.stat(h)?))
                    .collect::<OpResult<Vec<_>>>()
            })
            .await?;
        Ok(Response::Sizes { sizes }.into())
    }
}
