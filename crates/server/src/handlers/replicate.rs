//! `Replicate`: the primary of a metadata group ships a step of its store's copy to
//! this standby (`crate::standby`, `crate::replicate`).

use pvfs_proto::{req, Changed, Errno, ReplicateStep, Response};
use pvfs_storage::StandbyError;

use crate::error::{OpError, OpResult};
use crate::op::{Access, Answer, Cx, Handler};

/// Applies the step to this server's copy of the group's store, on a blocking
/// thread (it writes and syncs files).
impl Handler for req::Replicate {
    fn access(&self) -> Access<'_> {
        Access::Peer
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx.clone();
        let group = self.group as usize;
        let store = ctx
            .standbys
            .get(&ctx.config, group)
            .map_err(|e| OpError::internal(Errno::EIO, format!("standby copy: {e}")))?
            .ok_or_else(|| {
                OpError::not_here(
                    Errno::EINVAL,
                    format!(
                        "{} is not a standby of metadata group {}",
                        ctx.info.name, self.group
                    ),
                )
            })?;
        let epoch = self.epoch;
        let step = self.step;
        // Records written without a sync (`metadata_sync` an interval) are a write
        // into the page cache, cheaper than two thread hand-offs: a change waits for
        // this answer (`crate::inline`).
        if let ReplicateStep::Records { records } = &step {
            let unsynced = !matches!(
                ctx.config.defaults.metadata_sync,
                pvfs_config::MetadataSync::Commit
            );
            if unsynced && ctx.inline.allows(records.len()) {
                let through = ctx
                    .inline
                    .run(|| store.records(epoch, records))
                    .map_err(standby_error)?;
                return Ok(Response::Replicated { through }.into());
            }
        }
        let through = tokio::task::spawn_blocking(move || match step {
            ReplicateStep::Begin { len } => store.begin(epoch, len).map(|()| 0),
            ReplicateStep::Chunk { offset, data } => store.chunk(epoch, offset, &data).map(|()| 0),
            ReplicateStep::End { next } => store
                .end(epoch, next)
                .map(|()| store.holds(epoch).unwrap_or(0)),
            ReplicateStep::Records { records } => store.records(epoch, &records),
        })
        .await
        .map_err(|e| OpError::internal(Errno::EIO, format!("standby copy task: {e}")))?
        .map_err(standby_error)?;
        Ok(Response::Replicated { through }.into())
    }
}

/// A standby's refusal as the primary sees it: ESTALE (a new copy) or the disk's errno.
fn standby_error(e: StandbyError) -> OpError {
    match e {
        StandbyError::NeedCopy(why) => OpError::changed(why),
        StandbyError::Io(e) => OpError::internal(Errno::from_io(&e), format!("standby copy: {e}")),
    }
}
