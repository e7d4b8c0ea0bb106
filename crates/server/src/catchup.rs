//! Catching up (`docs/replication.md`, "Self-healing"): a server that is back after
//! being down is `recovering` in the map. It takes new writes at once (it is at the
//! tail of its chains) but serves no reads until it has copied, from the copies that
//! are up, every range the other servers recorded as missed by it
//! (`crate::missed`); then it tells the authority it caught up, and is up.
//!
//! Each range is copied holding this server's own copy of the datafile
//! (`crate::copy`), so the copy leaves this server's bytes as the source's, with
//! every change on its way applied after, in order. A server marked `refill` copies
//! every datafile whole instead (`crate::refill`).

use std::sync::Arc;

use pvfs_proto::map::{MissedDone, MissedRecord, ServerState};
use pvfs_proto::{req, Errno, Request, Response};

use crate::chain;
use crate::copy::{copies_agree, copy_ranges, source, Size};
use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};

/// Records asked for at once.
const PAGE: u32 = 256;

/// What one catch-up copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// Datafiles with a record.
    pub datafiles: u64,
    /// Bytes copied.
    pub bytes: u64,
}

/// Catches up whenever the map says this start of the server is recovering, then
/// reports it; tries again every quarter lease until it succeeds.
pub async fn run(ctx: Arc<Ctx>) {
    if !ctx.lease.configured() {
        return;
    }
    let mut tick = tokio::time::interval(ctx.config.replication.lease / 4);
    let mut progress = crate::refill::Progress::default();
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some((version, since)) = ctx.lease.recovering() else {
            if ctx.unfinished.any_cut() {
                if let Err(e) = settle(&ctx).await {
                    if let Some(dropped) = ctx.log_limit.allow("settle") {
                        tracing::info!(dropped, "changes cut short not settled yet: {e}");
                    }
                }
            }
            continue;
        };
        let started = std::time::Instant::now();
        let outcome = match catch_up(&ctx, version, &mut progress).await {
            Ok(copied) => ctx.lease.report_caught_up(since).await.map(|()| copied),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(copied) => tracing::info!(
                datafiles = copied.datafiles,
                bytes = copied.bytes,
                seconds = started.elapsed().as_secs_f64(),
                "caught up with what this server missed"
            ),
            Err(e) => {
                if let Some(dropped) = ctx.log_limit.allow("catch-up") {
                    tracing::info!(dropped, "not caught up yet: {e}");
                }
            }
        }
    }
}

/// Copies what this server missed under map `version` (in which it is recovering):
/// the records of every data server that is up or back, each range from a copy
/// that is up. Fails (and is tried again) while a server that may hold records of
/// it is down, or a datafile it missed bytes of has no copy up: its copy would be
/// served with bytes missing. A lost server's records are gone with it (its
/// copies are rebuilt elsewhere).
pub async fn catch_up(
    ctx: &Arc<Ctx>,
    version: u64,
    progress: &mut crate::refill::Progress,
) -> OpResult<Copied> {
    let mut copied = Copied::default();
    let view = ctx.lease.view()?;
    let map = &view.map;
    if map.version != version {
        return Err(chain::map_error(
            "the cluster map changed while catching up",
        ));
    }
    let Some(stay) = ctx.lease.recovering_as() else {
        return Err(chain::map_error("this server is not recovering"));
    };
    ctx.standbys.rejoined(stay.since);
    let me = ctx.me as u32;
    // Its metadata group has standbys (a data server alone has none).
    let group_copied = ctx.config.meta_group(ctx.me).len() > 1;
    if stay.fresh && group_copied && view.store(ctx.me).is_none_or(|s| s == ctx.me) {
        // Its own store, on the new disk, holds nothing of its group: a standby
        // takes the group over and serves it (`crate::promote`: until it serves, the
        // group may come back here), and this server follows it.
        return Err(OpError::busy(
            Errno::EAGAIN,
            "this server's storage directory was replaced: waiting for a standby to take \
             its metadata over",
        ));
    }
    if stay.fresh {
        // Nor does it hold anything of the groups it led (as a standby that took them
        // over) before its disk was replaced: the map names it for them until a copy
        // that followed takes each over and serves it (`crate::promote`); the
        // authority keeps it recovering until then.
        let named = |g: usize| {
            map.servers
                .get(g)
                .is_some_and(|e| e.led_by.map_or(g, |l| l as usize) == ctx.me)
        };
        let led = (0..map.servers.len())
            .find(|&g| g != ctx.me && (named(g) || view.store(g) == Some(ctx.me)));
        if let Some(g) = led {
            return Err(OpError::busy(
                Errno::EAGAIN,
                format!(
                    "this server's storage directory was replaced: waiting for another copy \
                     to serve the metadata of {} it led",
                    ctx.config.servers.get(g).map_or("?", |s| s.name.as_str())
                ),
            ));
        }
    }
    // Metadata: every group this server stands by for whose primary serves (its
    // own group too, when another server took it over) has given it a whole copy
    // (the primary sends one to a recovering standby).
    for &g in ctx.standbys.groups() {
        if !ctx.standbys.holds_place(map, g) {
            continue;
        }
        let led_by_another = map.primary(g as u32).is_some_and(|p| p != me);
        if led_by_another && !ctx.standbys.following(g) {
            return Err(OpError::busy(
                Errno::EAGAIN,
                format!(
                    "no whole copy of the metadata of {} yet",
                    ctx.config.servers[g].name
                ),
            ));
        }
    }
    if !ctx.roles().contains(pvfs_proto::Roles::DATA) {
        return Ok(copied);
    }
    // Changes cut short here first: what is copied next comes from the copies that
    // took changes meanwhile, and lands after.
    copied.bytes += settle(ctx).await?;
    for s in ctx.config.data_servers() {
        if s == ctx.me {
            continue;
        }
        match map.state(s as u32) {
            // A server that is back itself knows what it recorded as well; the
            // bytes come from a copy that is up.
            Some(ServerState::Up | ServerState::Draining | ServerState::Recovering) => {
                let from = pull_from(ctx, map, s, version).await?;
                copied.datafiles += from.datafiles;
                copied.bytes += from.bytes;
            }
            Some(s) if s.gone() => {}
            // Added to the configuration and not yet to the map, or added and
            // never up since: it recorded nothing.
            None => {}
            _ if map.servers.get(s).is_some_and(|e| e.added()) => {}
            // Copying every datafile whole, it needs no record of what it missed.
            _ if stay.refill => {}
            // It served nothing since this server went out: it recorded nothing.
            _ if map
                .servers
                .get(ctx.me)
                .is_some_and(|e| e.quiet.contains(&(s as u32))) => {}
            state => {
                return Err(OpError::busy(
                    Errno::EAGAIN,
                    format!(
                        "{} is {}: it may hold records of what this server missed",
                        ctx.config.servers[s].name,
                        state.map_or("unknown", ServerState::name)
                    ),
                ))
            }
        }
    }
    if stay.refill {
        let started = std::time::Instant::now();
        let done = crate::refill::refill(ctx, map, version, stay.since, progress).await?;
        if stay.fresh && !group_copied {
            crate::refill::raise_handles(ctx, done.highest).await?;
        }
        tracing::info!(
            datafiles = done.datafiles,
            bytes = done.bytes,
            without_another_copy = done.alone,
            removed_meanwhile = done.removed,
            seconds = started.elapsed().as_secs_f64(),
            "refilled every datafile this server holds a copy of"
        );
        if done.alone > 0 {
            tracing::warn!(
                datafiles = done.alone,
                "datafiles with no other copy were lost with this server's storage"
            );
        }
        copied.datafiles += done.datafiles;
        copied.bytes += done.bytes;
    }
    Ok(copied)
}

/// Copies every record server `s` holds for this one, telling it which it copied.
async fn pull_from(
    ctx: &Arc<Ctx>,
    map: &pvfs_proto::map::ClusterMap,
    s: usize,
    version: u64,
) -> OpResult<Copied> {
    let mut copied = Copied::default();
    let mut done: Vec<MissedDone> = Vec::new();
    loop {
        let ask = Request::Missed(req::Missed {
            server: ctx.me as u32,
            map: version,
            done: std::mem::take(&mut done),
            max: PAGE,
        });
        let (records, more) = match ctx.peers.call(s, ask).await? {
            Response::Missed { records, more } => (records, more),
            other => {
                return Err(OpError::internal(
                    Errno::EPROTO,
                    format!("Missed answered with {}", other.op_name()),
                ))
            }
        };
        if records.is_empty() {
            debug_assert!(!more);
            return Ok(copied);
        }
        for rec in &records {
            copied.bytes += pull_record(ctx, map, s, version, rec).await?;
            copied.datafiles += 1;
            done.push(MissedDone {
                handle: rec.handle,
                gen: rec.gen,
            });
        }
    }
}

/// Makes this server's copy of one record's ranges (a record server `recorder`
/// kept) what a copy that is up has, the recorder's when it is up; the bytes
/// copied.
async fn pull_record(
    ctx: &Arc<Ctx>,
    map: &pvfs_proto::map::ClusterMap,
    recorder: usize,
    version: u64,
    rec: &MissedRecord,
) -> OpResult<u64> {
    let me = ctx.me as u32;
    if rec.copies.len() < 2 {
        return Err(OpError::internal(
            Errno::EPROTO,
            format!(
                "a record of datafile {:#x} names copies {:?}",
                rec.handle, rec.copies
            ),
        ));
    }
    // A place this server no longer holds (it handed it on, `pvfs rebalance`):
    // nothing to copy, its copy is shed.
    if !map.holds(rec.handle, &rec.copies, me) {
        return Ok(0);
    }
    // The recorder's copy when it still holds a place (it may have handed its own
    // on since it recorded this), else another that is up.
    let prefer = map
        .holds(rec.handle, &rec.copies, recorder as u32)
        .then_some(recorder as u32);
    let source = match source(map, rec.handle, &rec.copies, me, prefer) {
        Some(s) => (s, Size::Source),
        None => match recovering_source(ctx, map, recorder as u32, rec) {
            Some(Recovering::Newer(size)) => (recorder, size),
            // Each took the same change while the other was out (a change cut short
            // and settled on both, or a client's retry): nothing to copy when the
            // copies hold the same bytes.
            Some(Recovering::Both)
                if copies_agree(ctx, recorder, rec.handle, &rec.copies, version, &rec.ranges)
                    .await? =>
            {
                return Ok(0)
            }
            _ => {
                return Err(OpError::busy(
                    Errno::EAGAIN,
                    format!(
                        "no copy of datafile {:#x} is up to copy what this server missed from",
                        rec.handle
                    ),
                ))
            }
        },
    };
    copy_ranges(ctx, source, rec.handle, &rec.copies, version, &rec.ranges).await
}

/// What the recovering recorder of a record holds of its ranges
/// ([`recovering_source`]).
enum Recovering {
    /// Their newest bytes, to copy, leaving this copy the size given.
    Newer(Size),
    /// This server recorded it as missing some of them too: each copy took changes
    /// there while the other was out.
    Both,
}

/// The recorder of `rec` as the copy to catch up from though it is recovering
/// itself, when its copy holds the ranges' newest bytes: the datafile's only copies
/// are its and this server's, it is in the chain (it takes changes), and this
/// server, the only one that could, recorded it as missing none of those bytes.
/// Two copies back from being out at different times each recorded what the other
/// missed, and neither is up: each copies from the other what the other changed
/// alone. The copy keeps the longer size when the ranges end (writes: this copy
/// may hold writes past the source's end that the source missed); a range that
/// reaches the end (a truncate) leaves the source's size, which is the newest, as
/// this server's records of the source end before it. Where the two records
/// overlap, which change came last is unknown: the copies go on only if they hold
/// the same bytes there, else both wait for a copy that is up.
fn recovering_source(
    ctx: &Ctx,
    map: &pvfs_proto::map::ClusterMap,
    recorder: u32,
    rec: &MissedRecord,
) -> Option<Recovering> {
    let me = ctx.me as u32;
    let mut holders = map.holder_servers(rec.handle, &rec.copies);
    holders.sort_unstable();
    holders.dedup();
    let mut pair = vec![me, recorder];
    pair.sort_unstable();
    if holders != pair || !map.chain(rec.handle, &rec.copies).contains(&recorder) {
        return None;
    }
    if ctx.missed.misses_any(recorder, rec.handle, &rec.ranges) {
        return Some(Recovering::Both);
    }
    let ends = rec.ranges.chunks_exact(2).all(|p| p[1] != u64::MAX);
    Some(Recovering::Newer(if ends {
        Size::Longer
    } else {
        Size::Source
    }))
}

/// Settles the changes cut short here in the background, if there are any: called
/// when a change that was noted failed, so that the copies agree again at once
/// rather than at the next look (every `L / 4`).
pub fn settle_soon(ctx: &Arc<Ctx>) {
    if !ctx.unfinished.any_cut() {
        return;
    }
    let ctx = ctx.clone();
    tokio::spawn(async move {
        if let Err(e) = settle(&ctx).await {
            tracing::debug!("changes cut short not settled yet: {e}");
        }
    });
}

/// Settles the changes this copy applied whose end it did not see
/// (`crate::unfinished`): for each, the last copy of the datafile's chain that may
/// serve reads holds the outcome. Another: this copy takes its bytes of the range.
/// This one: its bytes stand, and the copies out of the chain get the range recorded
/// as missed. None (every copy in the chain is catching up): it waits, unless this
/// copy is the chain's only one. The bytes copied.
pub async fn settle(ctx: &Arc<Ctx>) -> OpResult<u64> {
    let Ok(_one) = ctx.unfinished.settling.try_lock() else {
        return Err(OpError::busy(
            Errno::EAGAIN,
            "changes cut short are being settled",
        ));
    };
    let me = ctx.me as u32;
    let mut bytes = 0;
    for (id, r) in ctx.unfinished.cut() {
        let map = ctx.lease.map()?;
        // A place this server no longer holds (handed on, `pvfs rebalance`, or
        // given back to a lost server that came back): its copy is not read
        // again, and is shed; copying into it would make it again.
        if !map.holds(r.handle, &r.copies, me) && map.state(me).is_some_and(|s| !s.gone()) {
            ctx.unfinished.settled(id);
            continue;
        }
        let chain = map.chain(r.handle, &r.copies);
        let readable = map.readable(r.handle, &r.copies);
        let last = chain.iter().rev().copied().find(|c| readable.contains(c));
        match last {
            Some(s) if s != me => {
                bytes += copy_ranges(
                    ctx,
                    (s as usize, Size::Source),
                    r.handle,
                    &r.copies,
                    map.version,
                    &[r.start, r.end],
                )
                .await?;
            }
            None if chain != [me] => continue,
            _ => {
                let absent = map.absent(r.handle, &r.copies, &chain);
                ctx.missed
                    .record(&absent, r.handle, &r.copies, r.start, r.end);
            }
        }
        tracing::debug!(
            handle = r.handle,
            start = r.start,
            end = r.end,
            "settled a change cut short"
        );
        ctx.unfinished.settled(id);
    }
    Ok(bytes)
}
