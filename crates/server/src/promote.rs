//! Failover of metadata groups (`docs/replication.md`, "Failover"): when a group's
//! primary stops serving, a standby whose copy followed it to the end asks the
//! authority to lead the group (`Lead`), opens its copy as a metadata store and
//! serves the group under the group's own name; clients and servers route the
//! group's requests (`pvfs_proto::Scope::Group`) to whichever server the map names.
//!
//! Fencing: a server answers a group's requests only while it holds a lease and its
//! map names it the group's primary ([`Fence`]). The authority moves a group only
//! away from a primary that is down (its lease lapsed first), so two servers never
//! answer for one group at once.
//!
//! The store: the map names a new primary (`Lead`), but the group's store stays the
//! copy that served it last until the new primary has opened its copy and the map
//! records that it serves (`Serve`); it answers nothing before. A named primary
//! whose copy cannot serve (it restarted, or fell behind, before it opened the copy)
//! hands the group back to the copy that served last (`Yield`). So a copy stops
//! being the group's store only once another served: then a primary that comes back
//! marks its own store superseded and follows the new primary as a standby, and a
//! standby that served releases its copy.
//!
//! Files: `<storage>/superseded` (this server's own store no longer holds its group:
//! a standby took it over; written before it could be served again) and
//! `groups/<name>/primary` (this copy became the group's primary store: written
//! before the copy is opened as a metadata store, so before its `Serve`; it is opened
//! again at every start while the map names this server, and is never again
//! overwritten as a standby copy until another copy served the group).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use pvfs_proto::map::ClusterMap;
use pvfs_proto::Errno;
use pvfs_storage::{GroupMarker, Identity, LockMark, MetaStore};

use crate::ctx::{Ctx, Inflight};
use crate::error::{OpError, OpResult};
use crate::fence::Fence;
use crate::lease::View;

/// How often the map is looked at for groups to take over, give up or route anew.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// A group this server took over, and the tasks that run beside its requests.
struct Taken {
    ctx: Arc<Ctx>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The metadata groups this server serves as a standby that took them over.
#[derive(Default)]
pub struct Promoted {
    /// The names the handshake accepts besides the server's own (shared with
    /// `ServerPolicy::groups`).
    names: Arc<RwLock<Vec<String>>>,
    /// The groups taken over, by group: ordered, so that a stop closes them in
    /// group order, not in one a random hash picks (a simulation's run follows from
    /// its seed).
    taken: Mutex<BTreeMap<usize, Taken>>,
    /// Whether this server's own store is superseded (read at start, set by [`run`]).
    superseded: AtomicBool,
    /// The map version of the last `Lead` proposed per group (one try per map).
    proposed: Mutex<HashMap<usize, u64>>,
    /// How many groups are taken over now.
    count: std::sync::atomic::AtomicUsize,
}

impl crate::ctx::TakenOver for Promoted {
    fn store_of(&self, name: &str) -> Option<pvfs_storage::MetaStore> {
        self.by_name(name).map(|group| group.meta.clone())
    }

    fn superseded(&self) -> bool {
        Promoted::superseded(self)
    }

    fn stores(&self) -> Vec<pvfs_storage::MetaStore> {
        self.taken().values().map(|t| t.ctx.meta.clone()).collect()
    }

    fn copies(&self) -> Vec<pvfs_proto::message::GroupCopies> {
        self.taken()
            .values()
            .filter_map(|t| t.ctx.shipping.as_ref().and_then(|s| s.report()))
            .collect()
    }

    fn answering(&self) -> Vec<usize> {
        self.taken()
            .iter()
            .filter(|(_, t)| t.ctx.fence.holds(&t.ctx.lease))
            .map(|(&g, _)| g)
            .collect()
    }
}

impl Promoted {
    /// Nothing taken over; `superseded`: this server's own store no longer holds
    /// its group. `names` is the handshake's list of other names.
    pub fn new(names: Arc<RwLock<Vec<String>>>, superseded: bool) -> Promoted {
        Promoted {
            names,
            superseded: AtomicBool::new(superseded),
            ..Promoted::default()
        }
    }

    /// Whether `storage`, a server's storage directory, holds a superseded store.
    pub fn superseded_in(storage: &Path) -> bool {
        GroupMarker::Superseded.is_set(storage)
    }

    /// Whether this server's own store no longer holds its group.
    pub fn superseded(&self) -> bool {
        self.superseded.load(Ordering::Acquire)
    }

    fn taken(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Taken>> {
        self.taken.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The context serving group `name`, if this server took it over.
    pub fn by_name(&self, name: &str) -> Option<Arc<Ctx>> {
        self.taken()
            .values()
            .find(|t| t.ctx.info.name == name)
            .map(|t| t.ctx.clone())
    }

    /// The context that serves `request` arriving on a connection opened for
    /// server `name`: for a group's request (and a `Sync` of metadata alone, which
    /// syncs the group's store) on a connection opened for a group this server took
    /// over, that group's; otherwise the host's own (a group not served here any
    /// more is refused by dispatch). A server's own requests (data, copies) stay
    /// with the host even when the group it took back bears its own name.
    pub fn serving(&self, host: &Arc<Ctx>, name: &str, request: &pvfs_proto::Request) -> Arc<Ctx> {
        // The common case, nothing taken over, costs one load.
        if self.count.load(Ordering::Acquire) > 0 && request.scope() == pvfs_proto::Scope::Group {
            if let Some(group) = self.by_name(name) {
                return group;
            }
        }
        host.clone()
    }

    /// Whether no proposal was made yet for group `g` under map `version` (one try
    /// per map); records this one.
    fn first_proposal(&self, g: usize, version: u64) -> bool {
        let mut proposed = self.proposed.lock().unwrap_or_else(|e| e.into_inner());
        proposed.insert(g, version) != Some(version)
    }

    /// Forgets the proposal made for group `g` under map `version`, which the
    /// authority did not answer: the next look proposes again under the same map.
    fn unpropose(&self, g: usize, version: u64) {
        let mut proposed = self.proposed.lock().unwrap_or_else(|e| e.into_inner());
        if proposed.get(&g) == Some(&version) {
            proposed.remove(&g);
        }
    }

    /// Whether this server took group `g` over.
    pub fn holds(&self, g: usize) -> bool {
        self.taken().contains_key(&g)
    }

    /// The names the handshake accepts: the groups taken over, and `coming`, the
    /// groups the map names this server the primary of that are not taken over yet
    /// (their clients, routed here by the map already, get in and are told to wait
    /// by a map error rather than refused at the door).
    fn set_names(&self, coming: &[String]) {
        let names: Vec<String> = {
            let taken = self.taken();
            self.count.store(taken.len(), Ordering::Release);
            taken
                .values()
                .map(|t| t.ctx.info.name.clone())
                .chain(coming.iter().cloned())
                .collect()
        };
        *self.names.write().unwrap_or_else(|e| e.into_inner()) = names;
    }

    /// Stops serving every group taken over (a clean stop): their requests drain,
    /// their stores commit and close.
    pub async fn close(&self) {
        let taken: Vec<Taken> = std::mem::take(&mut *self.taken()).into_values().collect();
        self.set_names(&[]);
        for t in taken {
            stop(t).await;
        }
    }
}

/// Stops serving a group taken over.
async fn stop(t: Taken) {
    for task in &t.tasks {
        task.abort();
    }
    t.ctx.feed.close();
    let drain = t.ctx.config.timeouts.request;
    let _ = tokio::time::timeout(drain, t.ctx.inflight.wait_idle()).await;
    // Released, not only closed: connections opened for the group may hold this
    // context for as long as they last, and the copy must open again here if the
    // map names this server once more.
    t.ctx.meta.release().await;
}

/// Looks at the map every [`LOOK_EVERY`] until the task is dropped: routes the
/// servers' calls by it, fences this server's own group, takes over the groups it
/// should lead and gives up those it should not.
pub async fn run(host: Arc<Ctx>, promoted: Arc<Promoted>) {
    if !host.lease.configured() {
        return;
    }
    let mut tick = tokio::time::interval(LOOK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Ok(view) = host.lease.view() else {
            continue;
        };
        host.peers.route(&view.map);
        if let Err(e) = look(&host, &promoted, &view).await {
            if let Some(dropped) = host.log_limit.allow("failover") {
                tracing::warn!(dropped, "metadata failover: {e}");
            }
        }
    }
}

/// One look at the map of `view`.
async fn look(host: &Arc<Ctx>, promoted: &Promoted, view: &View) -> OpResult<()> {
    let map = &view.map;
    let me = host.me;
    if let Some((_, since)) = host.lease.recovering() {
        host.standbys.rejoined(since);
    }
    if host.fence.replicated() {
        // Another server's copy served this server's group (its `Serve` is
        // committed): it may have answered changes this store lacks. A primary
        // named in this server's place that has not served yet supersedes nothing:
        // it may hand the group back (`Yield`), and this store holds every change.
        let elsewhere = view.store(me).is_some_and(|s| s != me);
        if elsewhere && !promoted.superseded() {
            // Written before anything could serve the group from this store again.
            let storage = host.config.servers[me].storage.clone();
            host.blocking(move || Ok(GroupMarker::Superseded.set(&storage)?))
                .await?;
            promoted.superseded.store(true, Ordering::Release);
            tracing::warn!(
                "this server's metadata was served by another server since it was down: \
                 its own store is superseded, it follows that server as a standby"
            );
        }
        let leads = !promoted.superseded() && map.primary(me as u32) == Some(me as u32);
        // The store this server serves its group from is the one that served it last.
        debug_assert!(!leads || view.store(me) == Some(me), "{view:?}");
        host.fence.set_leads(leads, map.version);
        // Named in this server's place, a primary that never served stopped: this
        // store, which served last, takes the group back (a standby whose copy
        // follows may be first).
        if !promoted.superseded() && view.store(me) == Some(me) && map.primary(me as u32).is_none()
        {
            propose(host, promoted, view, me, true).await;
        }
    }
    // The map is at least as new as the one that came with this server's lease, and
    // the lease holds: what it says of the copies here may be acted on. Before its
    // first renewal, a server started again knows only its authority member's own
    // map, which may lag behind what it did before it stopped (a `Serve` committed
    // at the leader, not yet applied here).
    let current = host.lease.valid_under(map.version);
    let mut failed = Vec::new();
    for &g in host.standbys.groups() {
        if g == me && !promoted.superseded() {
            continue;
        }
        let leads = map.primary(g as u32) == Some(me as u32);
        let held = promoted.holds(g);
        // The map names this server the group's primary (serving or not now).
        let named = map
            .servers
            .get(g)
            .is_some_and(|e| e.led_by.map_or(g, |l| l as usize) == me);
        // This server's copy served the group last: it holds every acknowledged
        // change, and stays the group's store until another copy serves.
        let store_here = view.store(g) == Some(me);
        // A copy of a group this server holds no place in (it stood in for a lost
        // member that came back) gets nothing more from the primary: it never
        // counts as following, nor takes the group over.
        let member = host.standbys.holds_place(map, g);
        if !member && !leads && !held {
            host.standbys.unfollow(g);
        }
        if leads && !held && current {
            let name = host.config.servers[g].name.clone();
            promoted.set_names(std::slice::from_ref(&name));
            if let Err(e) = take_over(host, promoted, g, view).await {
                // Still named here (the map says so): its clients wait.
                failed.push(e);
            }
        } else if !leads && held {
            give_up(host, promoted, g, map.version).await;
        } else if !leads && map.primary(g as u32).is_none() && (member || store_here) {
            // The copy that served last is the group's store where it stands,
            // marked, whether it follows anything or not.
            let store = store_here
                && host
                    .standbys
                    .dir(g)
                    .is_some_and(|d| GroupMarker::Primary.is_set(&d));
            propose(host, promoted, view, g, store).await;
        }
        // The copy stays the group's store while the map names this server (one
        // whose lease lapsed serves again from it) or while no other copy served
        // since it did (a primary named in its place may hand the group back);
        // once another served, it is a standby's. A marker left by an earlier
        // process counts as much as a copy taken now.
        if !named && !store_here && current {
            let marked = !host.standbys.is_taken(g)
                && host
                    .standbys
                    .dir(g)
                    .is_some_and(|d| GroupMarker::Primary.is_set(&d));
            if host.standbys.is_taken(g) || marked {
                release(host, g).await?;
            }
        }
        // A group taken over in this look has its fence set by `take_over`, from
        // the map its `Serve` left.
        if held {
            if let Some(t) = promoted.taken().get(&g) {
                // Only a primary whose copy served (its `Serve` committed) answers.
                t.ctx.fence.set_leads(leads && view.served(g), map.version);
            }
        }
    }
    let coming: Vec<String> = host
        .standbys
        .groups()
        .iter()
        .filter(|&&g| map.primary(g as u32) == Some(me as u32) && !promoted.holds(g))
        .filter(|&&g| g != me || promoted.superseded())
        .map(|&g| host.config.servers[g].name.clone())
        .collect();
    promoted.set_names(&coming);
    failed.into_iter().next().map_or(Ok(()), Err)
}

/// Asks the authority to let this server lead group `g`, whose primary does not
/// serve: only while this server is up, with a copy that followed the primary to
/// its end or the copy that served the group last (`store`), and once per map.
async fn propose(host: &Arc<Ctx>, promoted: &Promoted, view: &View, g: usize, store: bool) {
    let map = &view.map;
    // Only an `up` server: one recovering has not shown yet that its copies are
    // current (they follow again only from a new copy), unless its copy of this
    // group is whole by the map's account.
    let up = map.state(host.me as u32) == Some(pvfs_proto::map::ServerState::Up);
    let spared = spared_copy(host, map, g, view.store(g));
    if !(up || spared) || !host.lease.valid() || !(store || spared || host.standbys.following(g)) {
        return;
    }
    if !promoted.first_proposal(g, map.version) {
        return;
    }
    let name = &host.config.servers[g].name;
    match host.lease.propose_lead(g).await {
        Ok(true) => {
            tracing::warn!(group = %name, "took over a metadata group whose primary is down")
        }
        Ok(false) => {}
        Err(e) => {
            // Not answered (an election, a member taken back): proposed again at
            // the next look, as the map may not change again by itself.
            promoted.unpropose(g, map.version);
            tracing::info!(group = %name, "could not take over the metadata: {e}")
        }
    }
}

/// Whether this server's copy of group `g` holds every change of the group though
/// it follows no primary: it followed the group until this server came back from
/// being out ([`crate::standby::Standbys::kept`]), and `last`, the copy that
/// served the group last, is on a server that served nothing after this server
/// went out (the map's `quiet`), or whose storage was replaced since while it had
/// served nothing (`spared_by`; it holds nothing now): it acknowledged nothing
/// this copy lacks.
fn spared_copy(host: &Ctx, map: &ClusterMap, g: usize, last: Option<usize>) -> bool {
    let Some(last) = last.filter(|&l| l != host.me) else {
        return false;
    };
    let Some(me) = map.servers.get(host.me) else {
        return false;
    };
    let quiet = me.quiet.contains(&(last as u32));
    let spared =
        me.spared_by.contains(&(last as u32)) && map.servers.get(last).is_some_and(|e| e.fresh);
    host.standbys.kept(g) && (quiet || spared)
}

/// Serves group `g` from this server's copy (the map of `view` names it the
/// primary): the copy, closed as a standby's, opens as the group's store, and serves
/// once the map records it as the group's store (`Serve`). A copy never opened here
/// that does not follow the last primary's records to their end cannot serve: the
/// group goes back to the copy that served it last (`Yield`).
async fn take_over(host: &Arc<Ctx>, promoted: &Promoted, g: usize, view: &View) -> OpResult<()> {
    let name = host.config.servers[g].name.clone();
    let dir = host
        .standbys
        .dir(g)
        .ok_or_else(|| OpError::internal(Errno::EINVAL, format!("not a standby of group {g}")))?;
    // A server whose storage was replaced takes no group over: its copies hold
    // nothing (`ClusterMap::primary` names nobody for a group led by it).
    debug_assert!(
        view.map.servers.get(host.me).is_some_and(|e| !e.fresh),
        "{view:?}"
    );
    let fresh = !GroupMarker::Primary.is_set(&dir);
    if fresh && !host.standbys.following(g) && !spared_copy(host, &view.map, g, view.store(g)) {
        if view.served(g) {
            // A `Serve` is proposed only once the marker is written: the copy that
            // served has it. Never hand back a group this server answered for.
            return Err(OpError::internal(
                Errno::EIO,
                format!(
                    "the map records this server's copy of the metadata of {name} as the \
                     group's store, but the copy is not marked as one"
                ),
            ));
        }
        hand_back(host, promoted, &view.map, g).await;
        return Err(OpError::busy(
            Errno::EAGAIN,
            format!(
                "the map names this server the primary of the metadata of {name}, but its \
                 copy does not follow the last primary's and never served: the group goes \
                 back to the copy that served it last"
            ),
        ));
    }
    if host.faults.hold_take_over() {
        return Err(OpError::busy(
            Errno::EAGAIN,
            format!("not opening the copy of the metadata of {name}: held by a test's fault"),
        ));
    }
    host.standbys.take(g);
    let started = std::time::Instant::now();
    let ctx = open_group(host, g, dir, fresh).await?;
    // Nothing answered, shipped or started before the map records this copy as the
    // group's store: until then the group may go back to the copy that served it
    // last, which must not miss anything this one did.
    let version = if view.served(g) {
        view.map.version
    } else {
        match host.lease.propose_serve(g).await {
            Ok(Some(version)) => version,
            outcome => {
                ctx.meta.release().await;
                return Err(outcome.err().unwrap_or_else(|| {
                    OpError::busy(
                        Errno::EAGAIN,
                        format!(
                            "the map no longer names this server the primary of the metadata \
                             of {name}"
                        ),
                    )
                }));
            }
        }
    };
    // The copy that serves is marked first: started again, this server opens it
    // again rather than handing back a group it answered for.
    debug_assert!(host
        .standbys
        .dir(g)
        .is_some_and(|d| GroupMarker::Primary.is_set(&d)));
    let shipping = ctx.shipping.clone();
    let mut tasks = vec![
        tokio::spawn(crate::once::expire_loop(
            ctx.meta.clone(),
            crate::once::keep(&ctx.config),
        )),
        tokio::spawn(ctx.precreate.clone().fill_at_start()),
        tokio::spawn(crate::background::supervise_store(ctx.clone())),
        tokio::spawn(crate::background::expire_locks(ctx.clone())),
        tokio::spawn(crate::background::sweep_kept(ctx.clone())),
    ];
    if let Some(s) = &shipping {
        ctx.meta.replicate_with(s.clone());
        tasks.extend(s.spawn());
    }
    ctx.fence.set_leads(true, version);
    promoted.taken().insert(g, Taken { ctx, tasks });
    promoted.set_names(&[]);
    tracing::warn!(
        group = %name,
        seconds = started.elapsed().as_secs_f64(),
        "serving a metadata group from this server's copy, as its primary"
    );
    Ok(())
}

/// Hands group `g` back to the copy that served it last: the map names this server
/// its primary, but its copy never served and cannot (once per map).
async fn hand_back(host: &Arc<Ctx>, promoted: &Promoted, map: &ClusterMap, g: usize) {
    if !promoted.first_proposal(g, map.version) {
        return;
    }
    let name = &host.config.servers[g].name;
    match host.lease.propose_yield(g).await {
        Ok(true) => tracing::warn!(
            group = %name,
            "handed a metadata group back to the copy that served it last: this server's \
             copy does not follow the last primary's and never served"
        ),
        Ok(false) => {}
        Err(e) => {
            promoted.unpropose(g, map.version);
            tracing::info!(group = %name, "could not hand the metadata back: {e}")
        }
    }
}

/// Stops serving group `g`, which map `version` does not let this server serve
/// (another leads it, or this server's lease lapsed); what becomes of its copy is
/// [`release`]'s to say.
async fn give_up(host: &Arc<Ctx>, promoted: &Promoted, g: usize, version: u64) {
    let Some(t) = promoted.taken().remove(&g) else {
        return;
    };
    promoted.set_names(&[]);
    t.ctx.fence.set_leads(false, version);
    stop(t).await;
    tracing::warn!(group = %host.config.servers[g].name, "stops serving this metadata");
}

/// Group `g`'s copy, no longer the group's store, is a standby's again: its marker
/// cleared, it takes a new copy from the group's primary.
async fn release(host: &Arc<Ctx>, g: usize) -> OpResult<()> {
    if let Some(dir) = host.standbys.dir(g) {
        host.blocking(move || {
            GroupMarker::Primary.clear(&dir)?;
            Ok(())
        })
        .await?;
    }
    host.standbys.give_back(g);
    tracing::warn!(group = %host.config.servers[g].name, "no longer the primary of this metadata");
    Ok(())
}

/// Opens the copy in `dir` as group `g`'s store and makes the context serving it,
/// sharing what the host has for the whole process (peers, lease, buffers,
/// connection limits, keys). `fresh`: the copy was a standby's until now.
async fn open_group(host: &Arc<Ctx>, g: usize, dir: PathBuf, fresh: bool) -> OpResult<Arc<Ctx>> {
    let config = host.config.clone();
    let sc = config.servers[g].clone();
    let id = Identity {
        fsid: config.fsid,
        server: sc.name.clone(),
    };
    let range = (sc.handles.first, sc.handles.last);
    let cache = usize::try_from(config.limits.meta_cache).unwrap_or(usize::MAX);
    let sync = host.standbys.sync();
    // Disks a caller gave (the simulator's): the store commits on the caller's
    // thread, as the server's own store does then.
    let disks = host.copy_disks.clone();
    let (meta, mark) = host
        .blocking(move || {
            if fresh {
                GroupMarker::Primary.set(&dir)?;
            }
            let meta = match disks {
                Some(disks) => MetaStore::open_on_callers_thread(&dir, &id, range, disks, sync)?,
                None => MetaStore::open_with_sync(&dir, &id, range, cache, sync)?,
            };
            let mut mark = LockMark::open(&dir)?;
            if fresh {
                // The last primary's clients may hold locks and open files it knew
                // of only in memory: they reclaim them in a grace period here.
                mark.set(true)?;
            }
            Ok((meta, mark))
        })
        .await?;
    let (listed, members) = crate::replicate::Shipping::candidates(&config, host.me as u32, g);
    let fence = Arc::new(Fence::new(&sc.name, true, false));
    let shipping = (listed.len() > 1).then(|| {
        crate::replicate::Shipping::new(
            g as u32,
            (listed, members),
            host.lease.clone(),
            host.peers.clone(),
            fence.clone(),
            (config.timeouts.request / 2, config.replication.lease),
            host.exec,
        )
    });
    let locks = crate::locks::LockTable::new(
        config.locks.lease,
        crate::locks::grace_period(config.locks.lease, config.replication.lease),
        config.timeouts.request,
        Some(mark),
    );
    let mut policy = host.policy.clone();
    policy.server = sc.name.clone();
    policy.groups = Arc::default();
    Ok(Arc::new(Ctx {
        // The group's server's roles: data requests never come here (they are the
        // server's own, `Scope::Server`), but the handle counter of its range does
        // (`Precreate`, `Scope::Group`): one counter per range, wherever it is served.
        info: pvfs_proto::message::ServerInfo {
            name: sc.name.clone(),
            roles: sc.roles,
            fsid: config.fsid,
            version: pvfs_proto::VERSION.to_string(),
        },
        me: g,
        copy_disks: host.copy_disks.clone(),
        taken_over: std::sync::OnceLock::new(),
        precreate: crate::precreate::Precreator::new(&config, g, meta.clone(), host.peers.clone()),
        meta,
        data: host.data.clone(),
        inline: crate::inline::InlineIo::for_exec(host.exec),
        pool: host.pool.clone(),
        peers: host.peers.clone(),
        policy,
        tls: None,
        caps: host.caps.clone(),
        attr_cache: crate::attr_cache::AttrCache::default(),
        log_limit: crate::ratelimit::LogLimit::new(Duration::from_secs(10)),
        metrics: host.metrics.clone(),
        next_base: AtomicU64::new(host.next_base.load(Ordering::Relaxed)),
        inflight: Inflight::default(),
        // A test's faults hold for the groups this server takes over too.
        faults: host.faults.clone(),
        budget: host.budget.clone(),
        connections: host.connections.clone(),
        max_connections: host.max_connections,
        handshakes: host.handshakes.clone(),
        addresses: crate::limits::AddressLimits::new(0, 0),
        health: crate::health::Health::default(),
        holds: Arc::new(crate::holds::Holds::new(locks.grace_end())),
        locks,
        wait_graph: crate::waitfor::WaitGraph::new(config.timeouts.request.saturating_mul(3)),
        feed: crate::feed::ChangeFeed::new(),
        retries: crate::once::Retries::default(),
        seals: Arc::new(crate::seals::Seals::new(config.timeouts.request)),
        exec: host.exec,
        lease: host.lease.clone(),
        chain_locks: host.chain_locks.clone(),
        copy_pace: host.copy_pace.clone(),
        rebuilding: host.rebuilding.clone(),
        refilling: host.refilling.clone(),
        scrub_pace: host.scrub_pace.clone(),
        scrub_pass: Default::default(),
        missed: host.missed.clone(),
        unfinished: host.unfinished.clone(),
        admissions: host.admissions.clone(),
        standbys: crate::standby::Standbys::none(sync),
        shipping,
        fence,
        config,
    }))
}
