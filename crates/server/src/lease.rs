//! This server's place in the cluster map: the authority member it runs when the
//! configuration names it (`[replication] authority`), the lease it renews there,
//! and the newest map it knows (`docs/replication.md`, "The authority" and "Leases
//! and fencing"). A file system without an authority has none of this: every
//! server holds its roles for good, as without replication.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pvfs_authority::{Authority, Map, NodeId, Params, Renewer, State, Wire, WireError};
use pvfs_config::Config;
use pvfs_proto::map::{ClusterMap, MapServer};
use pvfs_proto::{req, Errno, Request, Response};
use tokio::time::Instant;

use crate::error::{OpError, OpResult};
use crate::peer::{Lane, Peers};

/// The authority's messages, carried on the servers' own connections to each other
/// (one per pair kept for them: [`Peers::call_on`]).
struct PeerWire(Arc<Peers>);

impl Wire for PeerWire {
    fn call(
        &self,
        to: NodeId,
        body: Vec<u8>,
        deadline: Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>, WireError>> + Send>>
    {
        let peers = self.0.clone();
        Box::pin(async move {
            let idx =
                usize::try_from(to).map_err(|_| WireError::Unreachable("no such server".into()))?;
            let request = Request::Authority(req::Authority { body });
            match peers.call_on(Lane::Authority, idx, request, deadline).await {
                Ok(Response::Authority { body }) => Ok(body),
                Ok(other) => Err(WireError::Unreachable(format!(
                    "unexpected answer {}",
                    other.op_name()
                ))),
                Err(e) if e.errno == Errno::ETIMEDOUT => Err(WireError::Timeout),
                Err(e) => Err(WireError::Unreachable(e.to_string())),
            }
        })
    }
}

/// What the renewals brought: until when this server may serve, and the map.
#[derive(Default)]
struct Held {
    /// The lease's end on this server's clock (counted from the renewal's sending).
    until: Option<Instant>,
    /// The newest map a renewal brought.
    map: Option<Map>,
    /// The newest version of the maps that came with the renewals making `until`:
    /// what the lease holds under ([`Lease::valid_under`]).
    granted: u64,
    /// The servers' names, for the log line of each new map.
    names: Vec<String>,
}

impl Held {
    /// Keeps `map` if it is not older than the one held.
    fn note(&mut self, map: Map) {
        let old = self.map.as_ref().map(|m| m.version);
        if old.is_none_or(|v| v <= map.version) {
            // A new version is a change of some server's state or of who serves
            // a group: the log keeps the history of the cluster as seen here.
            if old.is_none_or(|v| v < map.version) {
                tracing::info!(
                    version = map.version,
                    "cluster map: {}",
                    map.summary(&self.names)
                );
            }
            self.map = Some(map);
        }
    }
}

/// The authority member (if this server is one), the renewals, the newest map.
pub struct Lease {
    member: Option<Authority>,
    renewer: Option<Renewer>,
    held: Mutex<Held>,
    every: Duration,
    log_limit: crate::ratelimit::LogLimit,
    /// This server's index, and the random number of this start of it.
    me: NodeId,
    incarnation: u64,
    /// The id of this server's storage directory (`pvfs_storage::disk_id`; 0
    /// without an authority).
    disk: u64,
}

impl Lease {
    /// A file system without an authority.
    pub fn none() -> Lease {
        Lease {
            member: None,
            renewer: None,
            held: Mutex::new(Held::default()),
            every: Duration::from_secs(1),
            log_limit: crate::ratelimit::LogLimit::new(Duration::from_secs(10)),
            me: 0,
            incarnation: 0,
            disk: 0,
        }
    }

    /// Starts this server's authority member when the configuration names it (its
    /// log under `storage/authority`) and the renewer of its lease.
    pub async fn start(config: &Config, me: usize, peers: Arc<Peers>) -> Result<Lease, String> {
        let r = &config.replication;
        if r.authority.is_empty() {
            return Ok(Lease::none());
        }
        let members: Vec<NodeId> = r.authority.iter().map(|&i| i as NodeId).collect();
        let params = Params {
            lease: r.lease,
            rebuild_after: r.rebuild_after,
            data_servers: config
                .data_servers()
                .into_iter()
                .map(|i| i as NodeId)
                .collect(),
            meta_servers: config
                .meta_servers()
                .into_iter()
                .map(|i| i as NodeId)
                .collect(),
            servers: config.servers.len(),
            domains: config.domains().into_iter().map(|d| d as NodeId).collect(),
        };
        let wire: Arc<dyn Wire> = Arc::new(PeerWire(peers));
        let storage = &config.servers[me].storage;
        let disk = pvfs_storage::disk_id(storage, crate::random::random_u64() | 1)
            .map_err(|e| format!("cannot read the id of {}: {e}", storage.display()))?;
        let member = if r.authority.contains(&me) {
            let dir = config.servers[me].storage.join("authority");
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
            let authority = Authority::start(
                me as NodeId,
                members.clone(),
                config.servers.len(),
                &dir,
                wire.clone(),
                params.clone(),
                disk,
            )
            .await
            .map_err(|e| format!("cannot start the authority in {}: {e}", dir.display()))?;
            Some(authority)
        } else {
            None
        };
        let incarnation = crate::random::random_u64() | 1;
        Ok(Lease {
            member,
            renewer: Some(Renewer::new(
                me as NodeId,
                incarnation,
                disk,
                members,
                wire,
                params,
            )),
            held: Mutex::new(Held {
                names: config.servers.iter().map(|s| s.name.clone()).collect(),
                ..Held::default()
            }),
            every: r.lease / 4,
            log_limit: crate::ratelimit::LogLimit::new(Duration::from_secs(10)),
            me: me as NodeId,
            incarnation,
            disk,
        })
    }

    /// Whether the file system has an authority (and so leases).
    pub fn configured(&self) -> bool {
        self.renewer.is_some()
    }

    /// Whether this server holds a valid lease now (always, without an authority).
    pub fn valid(&self) -> bool {
        if !self.configured() {
            return true;
        }
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.until.is_some_and(|until| Instant::now() < until)
    }

    /// Whether this server holds a valid lease now that was granted with a map no
    /// newer than `version`: a decision drawn from map `version` (who leads a
    /// group) may be acted on under this lease. A renewal after a partition brings a
    /// newer map, and nothing drawn from the old one counts until it is looked at.
    pub fn valid_under(&self, version: u64) -> bool {
        if !self.configured() {
            return true;
        }
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.granted <= version && held.until.is_some_and(|until| Instant::now() < until)
    }

    /// The newest map known here, in its wire form: the member's own (applied from
    /// the authority's log), else the one the last renewal brought.
    pub fn map(&self) -> OpResult<ClusterMap> {
        self.view().map(|v| v.map)
    }

    /// [`Lease::map`], with where each metadata group's store is in the same map.
    pub fn view(&self) -> OpResult<View> {
        if !self.configured() {
            return Err(OpError::posix(
                Errno::EOPNOTSUPP,
                "this file system has no authority ([replication] authority in its configuration)",
            ));
        }
        let leader = self.member.as_ref().and_then(Authority::leader);
        let renewed = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map
            .clone();
        let own = self.member.as_ref().map(Authority::map);
        // The newer of the two: a member may lag the leader that answered a renewal.
        let newest = match (own, renewed) {
            (Some(a), Some(b)) => Some(if a.version >= b.version { a } else { b }),
            (a, b) => a.or(b),
        };
        match newest {
            Some(map) => Ok(View {
                map: wire_map(&map, leader),
                stores: (0..map.servers.len())
                    .map(|g| u32::try_from(map.store(g)).unwrap_or(u32::MAX))
                    .collect(),
            }),
            None => Err(OpError::busy(
                Errno::EAGAIN,
                "no cluster map yet: the authority has not answered this server",
            )),
        }
    }

    /// Answers an authority message from another server (members only).
    pub async fn handle(&self, body: &[u8]) -> OpResult<Vec<u8>> {
        match &self.member {
            Some(a) => Ok(a.handle(body).await),
            None => Err(OpError::not_here(
                Errno::EINVAL,
                "this server is not a member of the authority",
            )),
        }
    }

    /// Renews the lease every quarter lease until the task is dropped; a renewal
    /// that fails is retried at the next tick (the lease then runs out by itself).
    pub async fn renew_loop(self: Arc<Self>) {
        let Some(renewer) = &self.renewer else {
            return;
        };
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match renewer.renew().await {
                Ok((until, map)) => {
                    let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
                    held.until = Some(until.max(held.until.unwrap_or(until)));
                    held.granted = held.granted.max(map.version);
                    held.note(map);
                }
                Err(e) => {
                    if let Some(dropped) = self.log_limit.allow("lease renewal") {
                        tracing::warn!(dropped, "lease renewal failed: {e}");
                    }
                }
            }
        }
    }

    /// The version of the newest map known here if it calls this start of this
    /// server recovering: back, taking new writes, to catch up before it serves
    /// reads (`crate::catchup`).
    /// Also the version since which it has been recovering.
    pub fn recovering(&self) -> Option<(u64, u64)> {
        self.recovering_as().map(|r| (r.version, r.since))
    }

    /// Whether this server may hand out handles of its own store: always without an
    /// authority; with one, once the newest map known here holds this storage
    /// directory's id and does not call it a replaced one still to refill (a new
    /// disk's store starts its handles over, `crate::refill::raise_handles`).
    pub fn disk_current(&self) -> bool {
        if !self.configured() {
            return true;
        }
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.map
            .as_ref()
            .and_then(|m| m.server(self.me))
            .is_some_and(|e| e.storage == self.disk && !e.fresh)
    }

    /// [`Lease::recovering`], with what this server has to do before it is up.
    pub fn recovering_as(&self) -> Option<Recovering> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let map = held.map.as_ref()?;
        map.server(self.me)
            .filter(|e| e.state == State::Recovering && e.incarnation == self.incarnation)
            .map(|e| Recovering {
                version: map.version,
                since: e.since,
                fresh: e.fresh,
                refill: e.refill,
            })
    }

    /// Tells the authority this server caught up with what it missed while it was
    /// away, in the stay as recovering that began at map version `since` (void if
    /// it has gone down and come back since).
    pub async fn report_caught_up(&self, since: u64) -> OpResult<()> {
        let caught_up = pvfs_authority::Command::CaughtUp {
            server: self.me,
            incarnation: self.incarnation,
            recovering_since: since,
        };
        // The map it answers is kept: this server knows at once it is up.
        self.propose(caught_up).await.map(drop)
    }

    /// Asks the authority to make this server the primary of metadata group `g`,
    /// whose primary does not serve (`crate::promote`); whether the map it answered
    /// makes it so (another standby may have been first).
    pub async fn propose_lead(&self, g: usize) -> OpResult<bool> {
        let lead = pvfs_authority::Command::Lead {
            group: g as NodeId,
            server: self.me,
        };
        Ok(self
            .propose(lead)
            .await?
            .is_some_and(|map| map.primary(g) as NodeId == self.me))
    }

    /// Tells the authority that this server, which the map names the primary of
    /// metadata group `g`, opened its copy as the group's store and answers for it
    /// from now on (`crate::promote`); the version of the map it answered when that
    /// map records it (else None: the map names another primary now).
    pub async fn propose_serve(&self, g: usize) -> OpResult<Option<u64>> {
        let serve = pvfs_authority::Command::Serve {
            group: g as NodeId,
            server: self.me,
        };
        Ok(self.propose(serve).await?.and_then(|map| {
            let me = self.me as usize;
            (map.primary(g) == me && map.store(g) == me).then_some(map.version)
        }))
    }

    /// Hands metadata group `g`, which the map names this server the primary of but
    /// which it never served and cannot (`crate::promote`), back to the copy that
    /// served it last; whether the map it answered names another primary.
    pub async fn propose_yield(&self, g: usize) -> OpResult<bool> {
        let give = pvfs_authority::Command::Yield {
            group: g as NodeId,
            server: self.me,
        };
        Ok(self
            .propose(give)
            .await?
            .is_some_and(|map| map.primary(g) as NodeId != self.me))
    }

    /// Tells the authority this server holds every copy it took of lost servers
    /// under map `version` (`crate::rebuild`); whether the map it answered records
    /// it.
    pub async fn propose_rebuilt(&self, version: u64) -> OpResult<bool> {
        let rebuilt = pvfs_authority::Command::Rebuilt {
            server: self.me,
            version,
        };
        Ok(self
            .propose(rebuilt)
            .await?
            .is_some_and(|map| map.server(self.me).is_some_and(|e| e.rebuilt_at >= version)))
    }

    /// Asks the authority to start draining `server`, with every data and metadata
    /// server of the configuration not gone as its heirs (`crate::handlers::drain`);
    /// the map after it.
    pub async fn propose_drain(&self, server: u32) -> OpResult<pvfs_proto::map::ClusterMap> {
        let Some(renewer) = &self.renewer else {
            return Err(OpError::posix(
                Errno::EOPNOTSUPP,
                "this file system has no authority ([replication] authority)",
            ));
        };
        let heirs = |servers: &[NodeId]| -> Vec<NodeId> {
            servers
                .iter()
                .copied()
                .filter(|&s| s != NodeId::from(server))
                .collect()
        };
        let drain = pvfs_authority::Command::Drain {
            server: NodeId::from(server),
            heirs: heirs(&renewer.params().data_servers),
            meta_heirs: heirs(&renewer.params().meta_servers),
            domains: renewer.params().domains.clone(),
        };
        self.propose(drain).await?;
        self.map()
    }

    /// Asks the authority to hand server `server` `1/share` of the places of each
    /// of `from` (`crate::handlers::rebalance`); whether the map it answered has
    /// the share handed.
    pub async fn propose_rebalance(
        &self,
        server: u32,
        from: Vec<u32>,
        share: u32,
    ) -> OpResult<bool> {
        let Some(renewer) = &self.renewer else {
            return Err(OpError::posix(
                Errno::EOPNOTSUPP,
                "this file system has no authority ([replication] authority)",
            ));
        };
        let rebalance = pvfs_authority::Command::Rebalance {
            server: NodeId::from(server),
            from: from.into_iter().map(NodeId::from).collect(),
            share,
            domains: renewer.params().domains.clone(),
        };
        Ok(self.propose(rebalance).await?.is_some_and(|map| {
            map.server(NodeId::from(server))
                .is_some_and(|e| !e.hands.is_empty())
        }))
    }

    /// Tells the authority this server, drained, leaves for good (every heir holds
    /// what it took of it, `crate::rebuild`); whether the map it answered retires it.
    pub async fn propose_retire(&self) -> OpResult<bool> {
        let retire = pvfs_authority::Command::Retire { server: self.me };
        Ok(self.propose(retire).await?.is_some_and(|map| {
            map.server(self.me)
                .is_some_and(|e| e.state == pvfs_authority::State::Retired)
        }))
    }

    /// Asks the authority to stop renewing the lease of `server`, a standby that
    /// does not confirm this server's changes (`crate::replicate`).
    pub async fn propose_evict(&self, server: u32) -> OpResult<()> {
        let evict = pvfs_authority::Command::Evict {
            server: NodeId::from(server),
        };
        self.propose(evict).await.map(drop)
    }

    /// Proposes `cmd` to the authority; the map after it (None without one).
    async fn propose(&self, cmd: pvfs_authority::Command) -> OpResult<Option<Map>> {
        let Some(renewer) = &self.renewer else {
            return Ok(None);
        };
        let map = renewer.propose(cmd).await.map_err(|e| {
            OpError::busy(Errno::EAGAIN, format!("the authority did not answer: {e}"))
        })?;
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .note(map.clone());
        Ok(Some(map))
    }

    /// Stops the authority member cleanly.
    pub async fn shutdown(&self) {
        if let Some(a) = &self.member {
            a.shutdown().await;
        }
    }
}

/// The newest map known here, in its wire form, and where each metadata group's
/// store is in it.
#[derive(Clone, Debug)]
pub struct View {
    /// The map.
    pub map: ClusterMap,
    /// Per group (by its server's index), the server whose copy served it last
    /// (`pvfs_authority::Map::store`): the primary the map names, unless that one
    /// has not served yet.
    stores: Vec<u32>,
}

impl View {
    /// The server whose copy of metadata group `g` served it last: it holds every
    /// change acknowledged for the group. None for a server not in the map.
    pub fn store(&self, g: usize) -> Option<usize> {
        self.stores
            .get(g)
            .and_then(|&s| usize::try_from(s).ok())
            .filter(|&s| s < self.stores.len())
    }

    /// Whether the primary the map names for group `g` (serving or not) has served
    /// it: its copy is the group's store.
    pub fn served(&self, g: usize) -> bool {
        let named = self
            .map
            .servers
            .get(g)
            .map(|e| e.led_by.map_or(g, |l| l as usize));
        named.is_some() && named == self.store(g)
    }
}

/// A stay of this server as recovering, as the newest map known here says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovering {
    /// The map's version.
    pub version: u64,
    /// The version since which the server has been recovering.
    pub since: u64,
    /// Its storage directory was replaced: it leads no group until it is up.
    pub fresh: bool,
    /// It copies every datafile it holds a copy of, not only recorded ranges.
    pub refill: bool,
}

/// Node ids as the wire carries them (none is past `u32`: they index the
/// configuration's servers).
fn ids(v: &[NodeId]) -> Vec<u32> {
    v.iter().filter_map(|&i| u32::try_from(i).ok()).collect()
}

/// The authority's map as the wire carries it to clients.
fn wire_map(map: &Map, leader: Option<NodeId>) -> ClusterMap {
    ClusterMap {
        version: map.version,
        leader: leader.and_then(|l| u32::try_from(l).ok()),
        servers: map
            .servers
            .iter()
            .map(|s| MapServer {
                state: s.state,
                since: s.since,
                joined: s.joined,
                led_by: s.led_by.and_then(|l| u32::try_from(l).ok()),
                fresh: s.fresh,
                refill: s.refill,
                heirs: ids(&s.heirs),
                meta_heirs: ids(&s.meta_heirs),
                lost_at: s.lost_at,
                left_at: s.left_at,
                leaving: s.leaving,
                rebuilt_at: s.rebuilt_at,
                domains: ids(&s.domains),
                spared_by: ids(&s.spared_by),
                quiet: s
                    .quiet
                    .iter()
                    .filter_map(|&(d, _)| u32::try_from(d).ok())
                    .collect(),
                grown: s.grown,
                hands: s.hands.clone(),
                evicted: s.evicted,
            })
            .collect(),
    }
}

#[cfg(test)]
impl Lease {
    /// A lease of a file system with an authority that nobody answers, held for
    /// `left` from now as granted with map `version` (for the fence's tests).
    pub(crate) fn held_for_test(left: Duration, version: u64) -> Lease {
        struct Nobody;
        impl Wire for Nobody {
            fn call(
                &self,
                _to: NodeId,
                _body: Vec<u8>,
                _deadline: Duration,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<Vec<u8>, WireError>> + Send>,
            > {
                Box::pin(async { Err(WireError::Unreachable("nobody".into())) })
            }
        }
        let params = Params {
            lease: Duration::from_secs(2),
            rebuild_after: Duration::from_secs(600),
            data_servers: Vec::new(),
            meta_servers: Vec::new(),
            servers: 1,
            domains: Vec::new(),
        };
        let mut lease = Lease::none();
        lease.renewer = Some(Renewer::new(0, 1, 0, vec![0], Arc::new(Nobody), params));
        let held = lease.held.get_mut().unwrap_or_else(|e| e.into_inner());
        held.until = Some(Instant::now() + left);
        held.granted = version;
        lease
    }
}
