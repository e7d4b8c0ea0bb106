//! `StatFs`: space of this server's storage, how many objects it holds, and its health.

use std::sync::Arc;

use pvfs_proto::message::StatFsReply;
use pvfs_proto::Response;
use pvfs_storage::StorageError;

use crate::ctx::Ctx;
use crate::error::OpResult;

/// Reports storage space, metadata objects and datafiles. A failed metadata store
/// does not fail the answer: its objects count as 0 and the health says why.
pub async fn handle(ctx: &Arc<Ctx>) -> OpResult<Response> {
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
        },
        health: ctx.health.report(&ctx.meta),
    })
}
