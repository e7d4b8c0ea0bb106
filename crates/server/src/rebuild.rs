//! Rebuilding (`docs/replication.md`, "Rebuild"): a server down longer than
//! `[replication] rebuild_after` is lost, for good; the map names its heirs (the
//! data servers not gone then), and `ClusterMap::holders` puts, in each datafile's
//! set of copies, one of them in its place. An heir is at the tail of those chains
//! from that map on, so it takes every change at once; this task copies the
//! datafiles it took whole from a copy that serves reads (as a refill does,
//! `crate::refill::copy_whole`, under each datafile's lock here, paced by
//! `[replication] rebuild_bandwidth`), then proposes `Rebuilt`: from the map that
//! records it, its copies serve reads. Until then the copies that were there serve
//! them, so nothing is read from an heir that lacks bytes.
//!
//! A pass first counts what it will copy (the sources' sizes, asked a page at a
//! time), so `pvfs status` shows bytes copied, bytes left and the time left.
//!
//! A lost server that comes back copies every datafile whole and takes its places
//! back; once it is up, the heirs that stood for it remove the copies they no
//! longer hold (each under its lock, the map looked at again there).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use pvfs_proto::map::{ClusterMap, ServerState};
use pvfs_proto::{Handle, Roles};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::refill::{copy_whole, count, datafiles_of, ObjectPages};

/// The lost or draining servers that `me` may have taken copies of since it last
/// rebuilt: it is an heir of a server gone or being drained now, and one began to
/// leave after its last rebuild; and the servers that handed `me` a share of their
/// places (`pvfs rebalance`) since then (a pass finds which places it took,
/// `ClusterMap::holders`). Empty: nothing to rebuild.
pub fn owed(map: &ClusterMap, me: u32) -> Vec<u32> {
    let Some(mine) = map.servers.get(me as usize) else {
        return Vec::new();
    };
    let leaving = |e: &pvfs_proto::map::MapServer| e.state.gone() || e.leaving;
    let handed = map.hands_rebuilding(me);
    if handed.is_empty()
        && !map
            .servers
            .iter()
            .any(|e| leaving(e) && e.heirs.contains(&me))
    {
        return Vec::new();
    }
    (0..map.servers.len() as u32)
        .filter(|&l| {
            let e = &map.servers[l as usize];
            (leaving(e) && e.left_at > mine.rebuilt_at) || handed.contains(&l)
        })
        .collect()
}

/// Rebuilds whenever the map names this server an heir that has not rebuilt yet,
/// while it is up; tries again every half lease until it succeeds.
pub async fn run(ctx: Arc<Ctx>) {
    if !ctx.lease.configured() || !ctx.roles().contains(Roles::DATA) {
        return;
    }
    let me = ctx.me as u32;
    let mut tick = tokio::time::interval(ctx.config.replication.lease / 2);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Datafiles copied by this process, with the version since which it held the
    // place it copied them for: a later pass (the map changed, a source went
    // away) does not copy them again. This server has stayed in their chains
    // since, or caught up with what it missed while it was out of them.
    let mut copied: HashSet<(Handle, u64)> = HashSet::new();
    // The map version of the last pass that removed the copies of places this
    // server left.
    let mut shed_at = 0;
    // The hands of this server's places (`pvfs rebalance`) whose copies a pass
    // removed here, as (server handed to, version of the hand).
    let mut shed_hands: HashSet<(u32, u64)> = HashSet::new();
    // When a drained server looks again for files of one copy it holds, and how
    // long it waits between looks.
    let mut retry_retire: Option<Instant> = None;
    let again = ctx.config.replication.lease * 5;
    loop {
        tick.tick().await;
        let Ok(map) = ctx.lease.map() else {
            continue;
        };
        let handed = handed_on(&map, me);
        let up = matches!(map.state(me), Some(ServerState::Up | ServerState::Draining));
        let came_back = returned(&map, me, shed_at);
        if came_back || (up && !handed.is_subset(&shed_hands)) {
            match shed(&ctx, &map).await {
                Ok(removed) => {
                    shed_at = map.version;
                    shed_hands.extend(handed);
                    if removed > 0 && came_back {
                        tracing::info!(
                            datafiles = removed,
                            "removed the copies this server held for lost servers that came back"
                        );
                    } else if removed > 0 {
                        tracing::info!(
                            datafiles = removed,
                            "removed the copies of places this server handed on (pvfs \
                             rebalance) to servers that hold them now"
                        );
                    }
                }
                Err(e) => {
                    if let Some(dropped) = ctx.log_limit.allow("shed") {
                        tracing::info!(dropped, "copies of places left not removed yet: {e}");
                    }
                }
            }
        }
        if map.state(me) == Some(ServerState::Draining) && map.heirs_rebuilding(me).is_empty() {
            // Files of one copy have no heir: they keep it here until they are
            // gone (looked for again every five leases).
            if retry_retire.is_none_or(|at| Instant::now() >= at) {
                match alone_here(&ctx).await {
                    Ok(0) => retire(&ctx).await,
                    Ok(n) => {
                        retry_retire = Some(Instant::now() + again);
                        tracing::warn!(
                            datafiles = n,
                            "drained but for datafiles of files with one copy, which only this \
                             server holds: not retired until they are copied elsewhere (pvfs cp \
                             --replicas 2) or removed"
                        );
                    }
                    Err(e) => {
                        retry_retire = Some(Instant::now() + again);
                        tracing::info!("drained, not retired yet: {e}");
                    }
                }
            }
            continue;
        }
        let lost = owed(&map, me);
        if lost.is_empty() || !matches!(map.state(me), Some(ServerState::Up)) {
            ctx.rebuilding.end();
            continue;
        }
        let started = Instant::now();
        let outcome = match rebuild(&ctx, &map, &lost, &mut copied).await {
            Ok(done) => report(&ctx, map.version).await.map(|()| done),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(done) => {
                ctx.rebuilding.end();
                tracing::info!(
                    lost = ?lost,
                    datafiles = done.datafiles,
                    bytes = done.bytes,
                    without_another_copy = done.alone,
                    seconds = started.elapsed().as_secs_f64(),
                    "rebuilt the copies this server took of lost servers"
                );
                if done.alone > 0 {
                    tracing::warn!(
                        datafiles = done.alone,
                        "datafiles with no copy left were lost with the lost servers"
                    );
                }
            }
            Err(e) => {
                if let Some(dropped) = ctx.log_limit.allow("rebuild") {
                    tracing::info!(dropped, "not rebuilt yet: {e}");
                }
            }
        }
    }
}

/// Whether a server `me` is an heir of came back and is up since map version
/// `after`: `me` may hold copies of places it no longer holds.
fn returned(map: &ClusterMap, me: u32, after: u64) -> bool {
    map.servers
        .iter()
        .any(|e| e.heirs.contains(&me) && e.state == ServerState::Up && e.since > after)
}

/// The hands of `me`'s places (`pvfs rebalance`) that the servers handed them
/// rebuilt, as (server handed to, version of the hand): `me` may hold copies of
/// places it no longer holds.
fn handed_on(map: &ClusterMap, me: u32) -> HashSet<(u32, u64)> {
    map.servers
        .iter()
        .enumerate()
        .flat_map(|(to, e)| {
            e.hands
                .iter()
                .filter(move |h| h.from.contains(&me) && e.rebuilt_at >= h.at)
                .map(move |h| (to as u32, h.at))
        })
        .collect()
}

/// Whether `me` is in a line of a datafile whose layout copies are `copies` but
/// holds none of its places: an heir whose lost server came back, or a server
/// that handed the place on (`pvfs rebalance`) to one that rebuilt it since.
fn left(map: &ClusterMap, handle: Handle, copies: &[u32], me: u32) -> bool {
    map.state(me).is_some_and(|s| !s.gone())
        && map.lines(handle, copies).iter().any(|l| l.contains(&me))
        && !map.holds(handle, copies, me)
}

/// Removes this server's copies of the datafiles whose places it left under `map`
/// (looked at again under each datafile's lock); how many it removed.
async fn shed(ctx: &Arc<Ctx>, map: &ClusterMap) -> OpResult<u64> {
    let me = ctx.me as u32;
    let mut removed = 0;
    let mut pages = ObjectPages::new(ctx);
    while let Some(attrs) = pages.next(ctx).await? {
        for (handle, copies) in datafiles_of(&attrs) {
            if copies.len() < 2 || !left(map, handle, &copies, me) {
                continue;
            }
            let limit = ctx.config.timeouts.request;
            let _held = ctx.chain_locks.lock(handle, 0, u64::MAX, limit).await?;
            if !left(&ctx.lease.map()?, handle, &copies, me) {
                continue;
            }
            let store = ctx.data.clone();
            ctx.blocking(move || Ok(store.remove(handle)?)).await?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The version since which this server (`me`) holds, as an heir that has not
/// rebuilt it yet, a place among the copies of a datafile whose layout copies are
/// `copies`; None when it holds none so.
fn takes(map: &ClusterMap, handle: Handle, copies: &[u32], me: u32) -> Option<u64> {
    // A file of one copy has no heirs: clients reach its one server alone.
    if copies.len() < 2 {
        return None;
    }
    map.holders(handle, copies)
        .into_iter()
        .find(|h| h.server == me && !map.rebuilt(h))
        .map(|h| h.since)
}

/// One pass: counts, then copies every datafile this server took as an heir
/// under `map` and has not rebuilt, but those in `copied`.
async fn rebuild(
    ctx: &Arc<Ctx>,
    map: &ClusterMap,
    lost: &[u32],
    copied: &mut HashSet<(Handle, u64)>,
) -> OpResult<crate::refill::Refilled> {
    let me = ctx.me as u32;
    let key = |handle: Handle, copies: &[u32]| {
        takes(map, handle, copies, me).map(|since| (handle, since))
    };
    let (datafiles, bytes) = count(ctx, map, copied, &key).await?;
    ctx.rebuilding.begin(lost, datafiles, bytes);
    copy_whole(ctx, map, map.version, copied, &key, &ctx.rebuilding.meter).await
}

/// How many datafiles of files with one copy this server holds (no heir takes
/// them: a drained server is retired only without any).
async fn alone_here(ctx: &Arc<Ctx>) -> OpResult<u64> {
    let me = ctx.me as u32;
    let mut alone = 0;
    let mut pages = ObjectPages::new(ctx);
    while let Some(attrs) = pages.next(ctx).await? {
        alone += datafiles_of(&attrs)
            .filter(|(_, copies)| copies.as_slice() == [me])
            .count() as u64;
    }
    Ok(alone)
}

/// This server, drained (every heir holds what it took of it), leaves for good.
async fn retire(ctx: &Arc<Ctx>) {
    match ctx.lease.propose_retire().await {
        Ok(true) => tracing::warn!(
            "drained: every copy this server held is held by others; retired (stop it)"
        ),
        Ok(false) => {}
        Err(e) => {
            if let Some(dropped) = ctx.log_limit.allow("retire") {
                tracing::info!(dropped, "drained, not retired yet: {e}");
            }
        }
    }
}

/// Tells the authority this server rebuilt what it took under map `version`.
async fn report(ctx: &Arc<Ctx>, version: u64) -> OpResult<()> {
    if ctx.lease.propose_rebuilt(version).await? {
        return Ok(());
    }
    Err(crate::chain::map_error(format!(
        "the authority did not record this server's rebuild under cluster map version \
         {version}"
    )))
}
