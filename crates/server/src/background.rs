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
/// A client whose lease ended holds nothing open any more: what it alone held and
/// no name keeps is deleted (`crate::orphans`).
pub async fn expire_locks(ctx: Arc<Ctx>) {
    let on_end = {
        let ctx = ctx.clone();
        move |clients: Vec<(u64, u64)>| {
            let free: Vec<_> = clients
                .into_iter()
                .flat_map(|c| ctx.holds.drop_client(c))
                .collect();
            if !free.is_empty() {
                let ctx = ctx.clone();
                tokio::spawn(async move { crate::orphans::free(&ctx, free).await });
            }
        }
    };
    let holds = ctx.holds.clone();
    ctx.locks
        .expire_loop(ctx.exec, on_end, move || holds.counts().1 == 0)
        .await
}

/// Deletes kept objects nobody holds (`crate::orphans::sweep_loop`).
pub async fn sweep_kept(ctx: Arc<Ctx>) {
    let lease = ctx.config.locks.lease;
    crate::orphans::sweep_loop(ctx, lease).await
}

/// Writes the records of missed ranges to disk every `missed::FLUSH_EVERY` when
/// they changed (`crate::missed`).
pub async fn flush_missed(ctx: Arc<Ctx>) {
    let mut tick = tokio::time::interval(crate::missed::FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (missed, unfinished) = (ctx.missed.clone(), ctx.unfinished.clone());
        let flushed = ctx
            .blocking(move || Ok(missed.flush().and_then(|()| unfinished.compact())))
            .await;
        if let Ok(Err(e)) | Err(e) = flushed.map_err(|e| std::io::Error::other(e.to_string())) {
            if let Some(dropped) = ctx.log_limit.allow("missed ranges") {
                tracing::warn!(dropped, "cannot write the records of missed ranges: {e}");
            }
        }
    }
}
