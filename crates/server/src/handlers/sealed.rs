//! A name added to a directory whose shard here is sealed (`crate::seals`): refused
//! while its rmdir may run, allowed once the seal is abandoned.

use std::sync::Arc;

use pvfs_proto::{Errno, Handle};
use tokio::time::Instant;

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::seals::Seals;

/// What a request that adds a name to `dir` may do about a seal of this server's
/// shard of it: Ok(false) if it is not sealed, Ok(true) if it is sealed and abandoned
/// (the commit takes the seal away if it is still abandoned then: see
/// [`Seals::abandoned`]); ENOENT if the directory is gone (an rmdir removed it),
/// EAGAIN if an rmdir may still be running. Waits a little for a running rmdir to
/// unseal, at most half the request timeout.
pub async fn gate(ctx: &Arc<Ctx>, dir: Handle) -> OpResult<bool> {
    if !ctx.meta.read()?.is_sealed(dir)? {
        return Ok(false);
    }
    if !crate::perms::exists_now(ctx, dir).await? {
        return Err(OpError::posix(
            Errno::ENOENT,
            format!("directory {dir:#x} was removed"),
        ));
    }
    let patience = ctx.config.timeouts.request / 2;
    let until = Instant::now() + patience.min(ctx.seals.left(dir));
    loop {
        // Listening before looking, so an unseal between the two is not missed.
        let changed = ctx.seals.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if !ctx.meta.read()?.is_sealed(dir)? {
            return Ok(false);
        }
        if ctx.seals.abandoned(dir) {
            tracing::info!("directory {dir:#x}: a seal older than its rmdir can be goes");
            return Ok(true);
        }
        if tokio::time::timeout_at(until, changed).await.is_err() {
            if ctx.seals.abandoned(dir) {
                return Ok(true);
            }
            return Err(OpError::busy(
                Errno::EAGAIN,
                format!("directory {dir:#x} is being removed (try again)"),
            ));
        }
    }
}

/// In the commit of a request that adds a name to `dir`: refuses while the shard is
/// sealed, unless [`gate`] found the seal abandoned and it still is (then it goes).
pub fn check_unsealed(
    t: &mut pvfs_storage::MetaTxn<'_>,
    seals: &Seals,
    dir: Handle,
    abandoned: bool,
) -> OpResult<()> {
    if !t.is_sealed(dir)? {
        return Ok(());
    }
    if abandoned && seals.abandoned(dir) {
        t.set_sealed(dir, false);
        return Ok(());
    }
    Err(OpError::busy(
        Errno::EAGAIN,
        format!("directory {dir:#x} is being removed (try again)"),
    ))
}
