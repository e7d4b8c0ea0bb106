//! The HTTP endpoint of a server's Prometheus metrics (`[[servers]] metrics` in the
//! configuration): `GET /metrics` answers what `crate::metrics` counted, with the
//! server's state read at that moment.

use std::sync::Arc;

use crate::ctx::Ctx;

/// Serves the metrics of `ctx` on `addr` until the task is dropped.
pub async fn serve(ctx: Arc<Ctx>, addr: String) {
    pvfs_metrics::serve(addr, move || {
        let ctx = ctx.clone();
        async move { ctx.metrics.render(&snapshot(&ctx).await) }
    })
    .await
}

/// The server's state now, for a scrape.
async fn snapshot(ctx: &Arc<Ctx>) -> crate::metrics::Snapshot {
    let data = ctx.data.clone();
    let space = ctx.blocking(move || Ok(data.statfs()?)).await.ok();
    let unit = crate::budget::BUDGET_UNIT;
    let size = u64::from(ctx.budget.units());
    let free = ctx.budget.available() as u64;
    let left = |s: &crate::progress::Status| {
        s.report()
            .map_or(0, |r| r.bytes_total.saturating_sub(r.bytes_done))
    };
    crate::metrics::Snapshot {
        space,
        in_flight: ctx.inflight.count() as u64,
        budget: (size.saturating_sub(free) * unit, size * unit),
        locks: ctx.locks.held_count() as u64,
        held: ctx.holds.counts().0 as u64,
        rebuild_left: left(&ctx.rebuilding),
        refill_left: left(&ctx.refilling),
        degraded: !ctx.health.report(&ctx.meta).is_ok(),
        meta: {
            use std::sync::atomic::Ordering::Relaxed;
            let s = ctx.meta.commit_stats();
            [
                s.commits.load(Relaxed),
                s.jobs.load(Relaxed),
                s.syncs.load(Relaxed),
                s.sync_nanos.load(Relaxed),
            ]
        },
    }
}
