//! `StatFs`: space of this server's storage and how many objects it holds.

use std::sync::Arc;

use pvfs_proto::message::StatFsReply;
use pvfs_proto::Response;

use crate::ctx::Ctx;
use crate::error::OpResult;

/// Reports storage space, metadata objects and datafiles.
pub async fn handle(ctx: &Arc<Ctx>) -> OpResult<Response> {
    let objects = ctx.meta.read()?.count_objects()?;
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
        },
    })
}
