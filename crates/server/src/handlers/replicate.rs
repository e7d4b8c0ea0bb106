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
        .map_err(|e| match e {
            StandbyError::NeedCopy(why) => OpError::changed(why),
            StandbyError::Io(e) => {
                OpError::internal(Errno::from_io(&e), format!("standby copy: {e}"))
            }
        })?;
        Ok(Response::Replicated { through }.into())
    }
}
