//! `StatFs`: space of this server's storage, how many objects it holds, and its health.
//!
//! Objects are counted where their metadata group is served: a server counts its
//! own store's unless a standby's copy superseded it, and the stores of the groups
//! it took over as their standby, so `pvfs df` counts each group once, also while a
//! standby serves it.

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
        let count =
            |meta: &pvfs_storage::MetaStore| match meta.read().and_then(|r| r.count_objects()) {
                Ok(n) => Ok(n),
                Err(StorageError::Failed { .. }) => Ok(0),
                Err(e) => Err(e),
            };
        let taken = ctx.taken_over.get();
        let mut objects = if taken.is_some_and(|t| t.superseded()) {
            0
        } else {
            count(&ctx.meta)?
        };
        for store in taken.map(|t| t.stores()).unwrap_or_default() {
            objects += count(&store)?;
        }
        // The groups served here and where their standbys stand.
        let mut groups: Vec<_> = ctx.shipping.iter().filter_map(|s| s.report()).collect();
        groups.extend(taken.map(|t| t.copies()).unwrap_or_default());
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
                groups,
                refilling: ctx.refilling.report(),
            },
            health: ctx.health.report(&ctx.meta),
        }
        .into())
    }
}
