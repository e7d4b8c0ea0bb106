//! `Replicate`: the primary of a metadata group ships a step of its store's copy to
//! this standby (`crate::standby`, `crate::replicate`).

use std::sync::Arc;

use pvfs_proto::{req, Changed, Errno, ReplicateStep, Response};
use pvfs_storage::StandbyError;

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::op::{Access, Answer, Cx, Handler};
use crate::standby::GroupCopy;

/// Applies the step to this server's copy of the group's store. Records come in
/// batches sent before the previous ones were answered: one that arrives before
/// its predecessor waits for it.
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
        let copy = ctx
            .standbys
            .get(group)
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
        let store = copy.store.clone();
        let through = match self.step {
            ReplicateStep::Records { records } => {
                replay(&ctx, &copy, epoch, Arc::new(records)).await?
            }
            ReplicateStep::Begin { len } => {
                copy.renew();
                blocking(ctx.exec, move || store.begin(epoch, len).map(|()| 0)).await?
            }
            ReplicateStep::Chunk { offset, data } => {
                blocking(ctx.exec, move || {
                    store.chunk(epoch, offset, &data).map(|()| 0)
                })
                .await?
            }
            ReplicateStep::End { next } => {
                blocking(ctx.exec, move || {
                    store.end(epoch, next)?;
                    Ok(store.holds(epoch).unwrap_or(0))
                })
                .await?
            }
        };
        copy.moved.notify_waiters();
        Ok(Response::Replicated { through }.into())
    }
}

/// Replays a batch of records, once the batches before it are in (up to half a
/// request timeout; then the primary starts over with a copy). Records written
/// without a sync (`metadata_sync` an interval) are a write into the page cache,
/// cheaper than two thread hand-offs, and a change waits for this answer: small
/// batches are replayed here (`crate::inline`).
async fn replay(
    ctx: &Arc<Ctx>,
    copy: &GroupCopy,
    epoch: u64,
    records: Arc<Vec<u8>>,
) -> OpResult<u64> {
    let unsynced = !matches!(
        ctx.config.defaults.metadata_sync,
        pvfs_config::MetadataSync::Commit
    );
    let deadline = tokio::time::Instant::now() + ctx.config.timeouts.request / 2;
    loop {
        let moved = copy.moved.notified();
        tokio::pin!(moved);
        moved.as_mut().enable();
        // A simulation replays every batch here: the batch's size, which the
        // store's page layout decides, must not decide how its run goes on.
        let here = ctx.exec == crate::exec::Exec::Inline;
        let result = if here || (unsynced && ctx.inline.allows(records.len())) {
            ctx.inline.run(|| copy.store.records(epoch, &records))
        } else {
            let (store, records) = (copy.store.clone(), records.clone());
            match ctx.exec.spawn(move || store.records(epoch, &records)).await {
                Ok(r) => r,
                Err(e) => return Err(task_error(e)),
            }
        };
        match result {
            Err(StandbyError::Ahead { .. }) if tokio::time::Instant::now() < deadline => {
                let _ = tokio::time::timeout_at(deadline, moved).await;
            }
            other => return other.map_err(standby_error),
        }
    }
}

/// Runs a step that writes or syncs files on a blocking thread (where `exec` runs
/// blocking work).
async fn blocking(
    exec: crate::exec::Exec,
    step: impl FnOnce() -> Result<u64, StandbyError> + Send + 'static,
) -> OpResult<u64> {
    exec.spawn(step)
        .await
        .map_err(task_error)?
        .map_err(standby_error)
}

fn task_error(e: tokio::task::JoinError) -> OpError {
    OpError::internal(Errno::EIO, format!("standby copy task: {e}"))
}

/// A standby's refusal as the primary sees it: ESTALE (a new copy) or the disk's errno.
fn standby_error(e: StandbyError) -> OpError {
    match e {
        StandbyError::NeedCopy(why) => OpError::changed(why),
        StandbyError::Ahead { first, next } => {
            OpError::changed(format!("records from {first} came, {next} never did"))
        }
        StandbyError::Io(e) => OpError::internal(Errno::from_io(&e), format!("standby copy: {e}")),
    }
}
