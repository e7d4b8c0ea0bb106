//! Deleting the objects kept at zero links once no client holds them open
//! (`crate::holds`): at the last `Unhold`, when a client's lease ends or it ends
//! cleanly, and in a sweep of the store's `kept` table (what a restart forgot who
//! held: swept once clients had a lease's time to hold again). Runs above
//! [`Ctx`], as the handlers do.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use pvfs_proto::{req, Handle, ObjDetail, Request};

use crate::ctx::Ctx;
use crate::holds::Claims;
use crate::lifetime;

/// Kept objects read from the store per page of a sweep.
const SWEEP_PAGE: usize = 1024;

/// Deletes those of `handles` that are kept at zero links and held by no one, in one
/// commit, then their datafiles (in the background, one request per data server).
/// Returns how many objects it deleted.
pub async fn free(ctx: &Arc<Ctx>, handles: Vec<Handle>) -> usize {
    if handles.is_empty() {
        return 0;
    }
    let claims = Claims::new(&ctx.holds);
    let owner = (ctx.caps.clone(), claims.clone());
    let deleted = ctx
        .commit(move |t| {
            let mut out = Vec::new();
            for h in handles {
                if let Some(d) = lifetime::delete_if_free(t, (&owner.0, &owner.1), h)? {
                    out.push((h, d.0));
                }
            }
            Ok(out)
        })
        .await;
    drop(claims);
    let deleted = match deleted {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!("objects left without names and holders not deleted yet: {e}");
            return 0;
        }
    };
    let n = deleted.len();
    let mut by_server: BTreeMap<usize, Vec<Handle>> = BTreeMap::new();
    let map = ctx.lease.map().ok();
    for (h, detail) in deleted {
        tracing::debug!("object {h:#x} deleted at its last close");
        if let ObjDetail::File { layout } = detail {
            // Every copy of every datafile goes, an heir's too.
            for d in &layout.datafiles {
                for s in pvfs_proto::map::holders_of(map.as_ref(), layout.replicas, d) {
                    by_server.entry(s as usize).or_default().push(d.handle);
                }
            }
        }
    }
    for (server, handles) in by_server {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let n = handles.len();
            let request = Request::RemoveDatafiles(req::RemoveDatafiles {
                handles,
                tickets: Vec::new(),
            });
            if let Err(e) = ctx.peers.call(server, request).await {
                tracing::warn!(
                    "{n} datafiles left behind on server {server} (fsck removes them): {e}"
                );
            }
        });
    }
    n
}

/// Every `lease`: ends the holds of clients whose lease ended and deletes what they
/// held alone; after the first lease since start, also every kept object nobody
/// holds (clients re-register their holds within a lease of seeing a new one).
pub async fn sweep_loop(ctx: Arc<Ctx>, lease: Duration) {
    let start = tokio::time::Instant::now();
    let every = (lease / 2).clamp(Duration::from_millis(100), Duration::from_secs(10));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if start.elapsed() < lease + every || !ctx.roles().contains(pvfs_proto::Roles::META) {
            continue;
        }
        sweep(&ctx).await;
    }
}

/// One pass over the `kept` table: deletes each object no client holds.
pub async fn sweep(ctx: &Arc<Ctx>) -> usize {
    let mut after = None;
    let mut freed = 0;
    loop {
        let page = match ctx
            .meta
            .read()
            .and_then(|r| r.kept_after(after, SWEEP_PAGE))
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("cannot read the kept objects: {e}");
                return freed;
            }
        };
        let Some(&last) = page.last() else {
            return freed;
        };
        after = Some(last);
        let free_now: Vec<Handle> = page
            .into_iter()
            .filter(|&h| !ctx.holds.is_held(h))
            .collect();
        freed += free(ctx, free_now).await;
    }
}
