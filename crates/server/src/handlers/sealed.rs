//! A name added to a directory whose shard here is sealed (`crate::seals`): refused
//! while its rmdir may run, allowed once the seal is abandoned; and never a name in
//! a directory that is gone.
//!
//! An rmdir seals every shard, removes the name, then deletes the directory at its
//! owner, whose own shard's seal goes with it. A request that looked the directory
//! up before that and adds its name after finds no seal on the owner's shard: the
//! commit itself checks that a directory this server owns still exists.

use std::sync::Arc;

use pvfs_proto::{Errno, Handle};
use tokio::time::Instant;

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::seals::Seals;

/// What [`gate`] found of a directory a request adds a name to, checked again in the
/// request's commit ([`Admission::check`]).
pub struct Admission {
    dir: Handle,
    /// The seal was abandoned by its rmdir: the commit may take it away.
    abandoned: bool,
    /// The directory's object lives in this store.
    owned: bool,
    seals: Arc<Seals>,
}

impl Admission {
    /// In the commit of a request that adds a name to the directory: ENOENT if it is
    /// gone (this server owns it and it was deleted), EAGAIN while its shard here is
    /// sealed, unless [`gate`] found the seal abandoned and it still is (then it goes).
    pub fn check(&self, t: &mut pvfs_storage::MetaTxn<'_>) -> OpResult<()> {
        let dir = self.dir;
        if self.owned && t.get_object(dir)?.is_none() {
            return Err(removed(dir));
        }
        if !t.is_sealed(dir)? {
            return Ok(());
        }
        if self.abandoned && self.seals.abandoned(dir) {
            t.set_sealed(dir, false);
            return Ok(());
        }
        Err(OpError::busy(
            Errno::EAGAIN,
            format!("directory {dir:#x} is being removed (try again)"),
        ))
    }
}

fn removed(dir: Handle) -> OpError {
    OpError::posix(Errno::ENOENT, format!("directory {dir:#x} was removed"))
}

/// What a request that adds a name to `dir` may do about a seal of this server's
/// shard of it, for its commit to check again: not sealed, or sealed and abandoned
/// (the commit takes the seal away if it is still abandoned then: see
/// [`Seals::abandoned`]); ENOENT if the directory is gone (an rmdir removed it),
/// EAGAIN if an rmdir may still be running. Waits a little for a running rmdir to
/// unseal, at most half the request timeout.
pub async fn gate(ctx: &Arc<Ctx>, dir: Handle) -> OpResult<Admission> {
    ctx.faults.hold_names(ctx.config.timeouts.request / 2).await;
    let admit = |abandoned| Admission {
        dir,
        abandoned,
        owned: ctx.is_local(dir),
        seals: ctx.seals.clone(),
    };
    if !ctx.meta.read()?.is_sealed(dir)? {
        return Ok(admit(false));
    }
    if !crate::perms::exists_now(ctx, dir).await? {
        return Err(removed(dir));
    }
    let patience = ctx.config.timeouts.request / 2;
    let until = Instant::now() + patience.min(ctx.seals.left(dir));
    loop {
        // Listening before looking, so an unseal between the two is not missed.
        let changed = ctx.seals.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if !ctx.meta.read()?.is_sealed(dir)? {
            return Ok(admit(false));
        }
        if ctx.seals.abandoned(dir) {
            tracing::info!("directory {dir:#x}: a seal older than its rmdir can be goes");
            return Ok(admit(true));
        }
        if tokio::time::timeout_at(until, changed).await.is_err() {
            if ctx.seals.abandoned(dir) {
                return Ok(admit(true));
            }
            return Err(OpError::busy(
                Errno::EAGAIN,
                format!("directory {dir:#x} is being removed (try again)"),
            ));
        }
    }
}
