//! `CreateDatafiles`: creates missing datafiles, empty (fsck's repair of lost ones).
//! One that exists is left as it is, so a retry is harmless.

use pvfs_proto::{req, Changed};

use crate::error::OpResult;
use crate::handlers::datafiles::check_handles;
use crate::op::{done, Access, Answer, Cx, Handler};

impl Handler for req::CreateDatafiles {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handles) = (cx.ctx, self.handles);
        check_handles(ctx, &handles)?;
        let data = ctx.data.clone();
        ctx.blocking(move || Ok(data.create_all(&handles)?)).await?;
        done()
    }
}
