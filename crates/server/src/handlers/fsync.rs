//! `Fsync`: makes datafiles durable.

use pvfs_proto::{req, Changed, Errno};

use crate::error::OpError;

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
        let now = ctx.data.verifier();
        if self.verifier != 0 && self.verifier != now {
            return Err(OpError::of_kind(
                pvfs_proto::ErrorKind::Storage,
                Errno::EIO,
                format!(
                    "{} lost power since these datafiles were written: what was not synced \
                     may be lost",
                    ctx.info.name
                ),
            ));
        }
        let data = ctx.data.clone();
        let missed = ctx.missed.clone();
        ctx.blocking(move || {
            handles.iter().try_for_each(|&h| data.sync(h))?;
            // What other copies missed of these bytes is as durable as they are.
            Ok(missed.flush_or_fail()?)
        })
        .await?;
        done()
    }
}
