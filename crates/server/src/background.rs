//! The loops a server runs beside its requests that need several of its parts. They
//! live above [`Ctx`], as the handlers do, so that the subsystems `Ctx` owns never
//! name it: each loop hands its subsystem the parts it works with.

use std::sync::Arc;

use crate::ctx::Ctx;
use crate::health;

/// Heals the metadata store each time it fails, until the server stops or gives up
/// ([`health::supervise`]).
pub async fn supervise_store(ctx: Arc<Ctx>) {
    health::supervise(&ctx.health, &ctx.meta, ctx.exec).await
}

/// Ends the lock leases and waiters not renewed in time, and clears the storage's
/// lock mark once no lock is held ([`crate::locks::LockTable::expire_loop`]).
pub async fn expire_locks(ctx: Arc<Ctx>) {
    ctx.locks.expire_loop(ctx.exec).await
}
