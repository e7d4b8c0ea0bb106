//! `StatFs`: space of this server's storage, how many objects it holds, and its health.

use pvfs_proto::message::StatFsReply;
use pvfs_proto::{req, Changed, Response};
use pvfs_storage::StorageError;

use crate::error::OpResult;
use crate::op::{Access, Answer, Cx, Handler};

/// Reports storage space, metadata objects and datafiles. A failed metadata store
/// does not fail the answer: its objects count as 0 and the health says why.
impl Handler for req::StatFs {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        let objects = match ctx.meta.read().and_then(|r| r.count_objects()) {
            Ok(n) => n,
            Err(StorageError::Failed { .. }) => 0,
            Err(e) => return Err(e.into()),
        };
        let data = ctx.data.clone();
        let (space, datafiles) = ctx
            .blocking(move || Ok((data.statfs()?, data.count()?)))
            .await?;
        Ok(Response::StatFs {
            stat: StatFsReply {
                total_bytes: space.total_bytes,
                free_bytes: space.free_bytes,
                avail_bytes: space.avail_bytes,
                objects,
                datafiles,
                free_inodes: space.free_inodes,
                fs_id: space.fs_id,
                sums_unsure: ctx.data.sums_unsure(),
                rebuilding: ctx.rebuilding.report(),
            },
            health: ctx.health.report(&ctx.meta),
        }
        .into())
    }
}
