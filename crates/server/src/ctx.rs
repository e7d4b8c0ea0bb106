//! Everything a handler needs: configuration, identity, the stores, peers.
//!
//! `Ctx` owns the subsystems (locks, limits, health, caches, precreation); each of
//! them takes only the parts it needs (the store, the peers, where blocking work
//! runs), never `Ctx`, so the modules below it do not depend on it. What needs
//! several of them runs above it: the handlers, and the loops of `crate::background`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use pvfs_config::Config;
use pvfs_proto::message::ServerInfo;
use pvfs_proto::{Errno, Handle, Roles};
use pvfs_storage::{DataBackend, MetaStore};
use pvfs_transport::BufPool;
use tokio::sync::Notify;

use crate::budget::Budget;
use crate::error::{OpError, OpResult};
use crate::exec::Exec;
use crate::peer::Peers;
use crate::precreate::Precreator;

/// Shared state of one running server.
pub struct Ctx {
    /// The file system's configuration.
    pub config: Config,
    /// This server's index in `config.servers`.
    pub me: usize,
    /// Identity answered to `Ping`.
    pub info: ServerInfo,
    /// Metadata (and, on data servers, the handle counter).
    pub meta: MetaStore,
    /// Datafiles.
    pub data: Arc<dyn DataBackend>,
    /// Whether small datafile calls run on the async threads now (`crate::inline`).
    pub inline: crate::inline::InlineIo,
    /// Bulk-data buffers.
    pub pool: BufPool,
    /// Connections to the other servers (shared with the precreate pools).
    pub peers: Arc<Peers>,
    /// What the handshake accepts (keys, MUNGE, root squash).
    pub policy: pvfs_auth::ServerPolicy,
    /// TLS under every connection (`[security] tls`).
    pub tls: Option<pvfs_transport::tls::TlsServer>,
    /// Makes and checks capabilities (with the servers' own key).
    pub caps: crate::caps::Caps,
    /// Attributes of other servers' objects, for permission checks.
    pub attr_cache: crate::attr_cache::AttrCache,
    /// Rate limit of the log lines outsiders can provoke.
    pub log_limit: crate::ratelimit::LogLimit,
    /// What this server counts for Prometheus (`crate::metrics`).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Pools of pre-created datafile handles, per data server.
    pub precreate: Precreator,
    /// Round-robin cursor choosing the first data server of new files.
    pub next_base: AtomicU64,
    /// Requests being handled (drained on clean stop).
    pub inflight: Inflight,
    /// Injected faults (tests only; empty unless `PVFS_FAULTS` is set).
    pub faults: Arc<Faults>,
    /// The budget of received bytes held at once (`[limits] buffers`): a
    /// connection waits for its share before reading a frame's body and data.
    pub budget: Arc<Budget>,
    /// Client connections served at once (`[limits] connections`, under the
    /// open-file limit).
    pub connections: Arc<tokio::sync::Semaphore>,
    /// Their number.
    pub max_connections: u32,
    /// Connections still in their handshake, at once (at most half the connection
    /// slots: those who cannot prove themselves never take every slot).
    pub handshakes: Arc<tokio::sync::Semaphore>,
    /// What one client address may take (connections, buffers).
    pub addresses: crate::limits::AddressLimits,
    /// What the supervisor of the metadata store is doing (`crate::health`).
    pub health: crate::health::Health,
    /// Byte-range locks on this server's objects, waiters and leases (`crate::locks`).
    pub locks: crate::locks::LockTable,
    /// Which clients hold which of this server's objects open (`crate::holds`).
    pub holds: Arc<crate::holds::Holds>,
    /// The wait-for graph of POSIX lock waits, on the coordinating metadata server
    /// (`crate::waitfor`).
    pub wait_graph: crate::waitfor::WaitGraph,
    /// What this server changed, for clients' caches (`crate::feed`).
    pub feed: crate::feed::ChangeFeed,
    /// The retry keys of the mutations being done now (`crate::once`).
    pub retries: crate::once::Retries,
    /// How long this server's directory shards have been sealed (`crate::seals`).
    pub seals: Arc<crate::seals::Seals>,
    /// Where blocking storage work runs.
    pub exec: Exec,
    /// The authority member, lease and cluster map (`crate::lease`).
    pub lease: Arc<crate::lease::Lease>,
    /// The datafile ranges this server passes down chains of copies (`crate::chain`).
    pub chain_locks: Arc<crate::chain::RangeLocks>,
    /// The pace of this server's catch-up and refill copies (`[replication]
    /// rebuild_bandwidth`).
    pub copy_pace: Arc<crate::pace::Pace>,
    /// The rebuild of lost servers' copies under way here (`crate::rebuild`).
    pub rebuilding: Arc<crate::progress::Status>,
    /// The refill of every copy this server holds under way here (a new disk, or a
    /// lost server back: `crate::refill`).
    pub refilling: Arc<crate::progress::Status>,
    /// The pace of this server's scrub reads (`[replication] scrub_bandwidth`).
    pub scrub_pace: Arc<crate::pace::Pace>,
    /// The scrub pass under way here (`crate::scrub_pass`).
    pub scrub_pass: crate::scrub_pass::ScrubPass,
    /// The ranges other copies missed while their servers were down (`crate::missed`).
    pub missed: Arc<crate::missed::MissedLog>,
    /// Changes this copy applied whose end it did not see (`crate::unfinished`).
    pub unfinished: Arc<crate::unfinished::Unfinished>,
    /// Changes of datafiles with copies running, by map version (`crate::missed`).
    pub admissions: Arc<crate::missed::Admissions>,
    /// The copies of other metadata servers' stores this server keeps as their
    /// standby (`crate::standby`).
    pub standbys: crate::standby::Standbys,
    /// The shipping of this server's metadata store to its standbys, when its group
    /// has some (`crate::replicate`).
    pub shipping: Option<Arc<crate::replicate::Shipping>>,
    /// Whether this server may answer for its metadata group now (`crate::fence`).
    pub fence: Arc<crate::fence::Fence>,
    /// How a standby's copy taken over as its group's store is opened, when the
    /// caller gave the storage ([`crate::GivenStorage::copies`]); None: local files.
    pub copy_disks: Option<pvfs_storage::OpenDisks>,
    /// The metadata groups this server took over as their standby, once it serves
    /// (`crate::serve` sets it): where their stores are, for the simulator's checks.
    pub taken_over: std::sync::OnceLock<Arc<dyn TakenOver>>,
}

/// Where the stores of the metadata groups a server took over as their standby
/// are (`crate::promote::Promoted`), seen from below the modules that take them
/// over.
pub trait TakenOver: Send + Sync {
    /// The store serving the group of server `name`, if this server took it over.
    fn store_of(&self, name: &str) -> Option<MetaStore>;
    /// Whether this server's own store was superseded by a copy taken over.
    fn superseded(&self) -> bool;
    /// The stores of every group this server took over, in group order.
    fn stores(&self) -> Vec<MetaStore>;
    /// The groups (by their server's index) this server took over and may answer
    /// for now: their fence holds under its lease.
    fn answering(&self) -> Vec<usize>;
    /// Where the standbys of every group this server took over and serves stand.
    fn copies(&self) -> Vec<pvfs_proto::message::GroupCopies>;
}

/// Faults a test asks a server to inject, from the environment variable `PVFS_FAULTS`:
/// a comma-separated list of `drop-reply:OP:N` (do the next N requests of operation OP,
/// then drop the connection instead of answering: a reply lost after the commit).
#[derive(Default)]
pub struct Faults {
    drop_replies: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    /// While this file exists, a server the map names a metadata group's primary
    /// does not open its copy (as if it stalled just before).
    hold_take_over: Option<std::path::PathBuf>,
    /// While this file exists, a request adding a name to a directory waits before
    /// it looks at the directory's seal (as if it stalled there).
    hold_names: Option<std::path::PathBuf>,
    /// While the file exists, requests of the operation wait before they run.
    hold_ops: Vec<(String, std::path::PathBuf)>,
    /// While this file exists, a hard link counted at its object's owner waits
    /// before its name is put in place.
    hold_linked: Option<std::path::PathBuf>,
    /// While this file exists, no metadata records are shipped to standbys (a
    /// standby that stopped confirming, as over a link that lost its packets).
    hold_shipping: Option<std::path::PathBuf>,
}

impl Faults {
    /// Parses `PVFS_FAULTS` (for tests: `drop-reply:OP:N,…` drops the replies to the
    /// next N requests of operation OP; `hold-take-over:PATH` keeps a server the map
    /// names a metadata group's primary from opening its copy while PATH exists;
    /// `hold-names:PATH` stalls requests adding names to directories while it does,
    /// `hold-op:OP:PATH` requests of operation OP, `hold-linked:PATH` a hard link
    /// between its count at the object's owner and its new name, `hold-shipping:PATH`
    /// the shipping of metadata records to standbys).
    /// Anything it does not understand is an error, so a typo cannot silently turn
    /// fault injection off.
    pub fn from_env() -> Result<Faults, String> {
        let mut drops = std::collections::HashMap::new();
        let mut hold_take_over = None;
        let mut hold_names = None;
        let mut hold_ops = Vec::new();
        let mut hold_linked = None;
        let mut hold_shipping = None;
        let spec = std::env::var("PVFS_FAULTS").unwrap_or_default();
        for item in spec.split(',') {
            let parts: Vec<&str> = item.trim().split(':').collect();
            match parts.as_slice() {
                ["drop-reply", op, n] => {
                    if !pvfs_proto::Request::OP_NAMES.contains(op) {
                        return Err(format!(
                            "PVFS_FAULTS: {item:?}: no operation {op:?} (one of {})",
                            pvfs_proto::Request::OP_NAMES.join(", ")
                        ));
                    }
                    let n = n
                        .parse::<u32>()
                        .map_err(|_| format!("PVFS_FAULTS: {item:?}: bad count {n:?}"))?;
                    drops.insert(op.to_string(), n);
                }
                ["hold-op", op, path] if !path.is_empty() => {
                    if !pvfs_proto::Request::OP_NAMES.contains(op) {
                        return Err(format!(
                            "PVFS_FAULTS: {item:?}: no operation {op:?} (one of {})",
                            pvfs_proto::Request::OP_NAMES.join(", ")
                        ));
                    }
                    tracing::warn!(
                        "fault injection active: {op} requests wait while {path} exists"
                    );
                    hold_ops.push((op.to_string(), std::path::PathBuf::from(path)));
                }
                ["hold-names", path] if !path.is_empty() => {
                    tracing::warn!(
                        "fault injection active: names added to directories wait while \
                         {path} exists"
                    );
                    hold_names = Some(std::path::PathBuf::from(path));
                }
                ["hold-linked", path] if !path.is_empty() => {
                    tracing::warn!(
                        "fault injection active: hard links wait between their count and \
                         their name while {path} exists"
                    );
                    hold_linked = Some(std::path::PathBuf::from(path));
                }
                ["hold-shipping", path] if !path.is_empty() => {
                    tracing::warn!(
                        "fault injection active: no metadata records shipped to standbys \
                         while {path} exists"
                    );
                    hold_shipping = Some(std::path::PathBuf::from(path));
                }
                ["hold-take-over", path] if !path.is_empty() => {
                    tracing::warn!(
                        "fault injection active: no metadata taken over while {path} exists"
                    );
                    hold_take_over = Some(std::path::PathBuf::from(path));
                }
                [""] => {}
                _ => {
                    return Err(format!(
                        "PVFS_FAULTS: unknown fault {item:?} (expected drop-reply:OP:COUNT, \
                         hold-take-over:PATH, hold-names:PATH, hold-linked:PATH, \
                         hold-shipping:PATH or hold-op:OP:PATH)"
                    ))
                }
            }
        }
        if !drops.is_empty() {
            tracing::warn!("fault injection active: dropping replies {drops:?}");
        }
        Ok(Faults {
            drop_replies: std::sync::Mutex::new(drops),
            hold_take_over,
            hold_names,
            hold_ops,
            hold_linked,
            hold_shipping,
        })
    }

    /// Waits, at most `limit`, while a test holds requests of operation `op`.
    pub async fn hold_op(&self, op: &str, limit: std::time::Duration) {
        for (held, path) in &self.hold_ops {
            if held == op {
                hold_while(path, limit, op).await;
            }
        }
    }

    /// Waits, at most `limit`, while a test holds requests that add names.
    pub async fn hold_names(&self, limit: std::time::Duration) {
        if let Some(path) = self.hold_names.as_deref() {
            hold_while(path, limit, "a name to add").await;
        }
    }

    /// Waits, at most `limit`, while a test holds hard links counted at their
    /// object's owner before their names are put in place.
    pub async fn hold_linked(&self, limit: std::time::Duration) {
        if let Some(path) = self.hold_linked.as_deref() {
            hold_while(path, limit, "a counted link").await;
        }
    }

    /// The file that holds the shipping of metadata records while it exists.
    pub fn hold_shipping(&self) -> Option<std::path::PathBuf> {
        self.hold_shipping.clone()
    }

    /// Whether a metadata group the map names this server the primary of is to be
    /// left unopened for now.
    pub fn hold_take_over(&self) -> bool {
        self.hold_take_over.as_deref().is_some_and(|p| p.exists())
    }

    /// Whether the reply to this request of `op` is to be dropped.
    pub fn drop_reply(&self, op: &str) -> bool {
        let Ok(mut m) = self.drop_replies.lock() else {
            return false;
        };
        match m.get_mut(op) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }
}

use crate::seam::hold_while;

impl Ctx {
    /// Client connections served at once at most.
    pub fn connections_total(&self) -> u32 {
        self.max_connections
    }

    /// This server's roles.
    pub fn roles(&self) -> Roles {
        self.info.roles
    }

    /// Fails unless this server has the metadata role.
    pub fn require_meta(&self) -> OpResult<()> {
        if self.roles().contains(Roles::META) {
            Ok(())
        } else {
            Err(OpError::not_here(
                Errno::EINVAL,
                format!("{} is not a metadata server", self.info.name),
            ))
        }
    }

    /// Fails unless this server has the data role.
    pub fn require_data(&self) -> OpResult<()> {
        if self.roles().contains(Roles::DATA) {
            Ok(())
        } else {
            Err(OpError::not_here(
                Errno::EINVAL,
                format!("{} is not a data server", self.info.name),
            ))
        }
    }

    /// Fails with EBUSY for the root directory, which is never removed.
    pub fn refuse_root(&self, h: Handle) -> OpResult<()> {
        if h == self.config.root_handle() {
            return Err(OpError::posix(
                Errno::EBUSY,
                "the root directory cannot be removed",
            ));
        }
        Ok(())
    }

    /// Fails unless `h` is in this server's handle range.
    pub fn require_local(&self, h: Handle) -> OpResult<()> {
        if self.config.servers[self.me].handles.contains(h) {
            return Ok(());
        }
        match self.config.owner_of(h) {
            Some(i) => Err(OpError::not_here(
                Errno::ESTALE,
                format!(
                    "handle {h:#x} belongs to {}, not {}",
                    self.config.servers[i].name, self.info.name
                ),
            )),
            None => Err(OpError::no_server(format!(
                "handle {h:#x} belongs to no server"
            ))),
        }
    }

    /// Whether `h` is in this server's handle range.
    pub fn is_local(&self, h: Handle) -> bool {
        self.here().contains(h)
    }

    /// This server's handle range.
    pub fn here(&self) -> pvfs_config::HandleRange {
        self.config.servers[self.me].handles
    }

    /// Runs `f` as one commit of the metadata store (`MetaStore::write_with`); its
    /// errors keep their kind through the commit.
    pub async fn commit<R, F>(&self, f: F) -> OpResult<R>
    where
        F: FnOnce(&mut pvfs_storage::MetaTxn<'_>) -> OpResult<R> + Send + 'static,
        R: Send + 'static,
    {
        self.meta.write_with(f).await
    }

    /// Runs blocking storage work off the async threads (or right here, with
    /// [`Exec::Inline`]).
    pub async fn blocking<R, F>(&self, f: F) -> OpResult<R>
    where
        F: FnOnce() -> OpResult<R> + Send + 'static,
        R: Send + 'static,
    {
        self.exec.run(f).await
    }

    /// Starts blocking work where this server runs it ([`Exec::spawn`]).
    pub fn spawn_work<R, F>(&self, f: F) -> tokio::task::JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.exec.spawn(f)
    }
}

/// Counts requests in flight so a clean stop can wait for them.
#[derive(Default)]
pub struct Inflight {
    count: AtomicUsize,
    idle: Notify,
}

/// Marks one request in flight until dropped.
pub struct InflightGuard(Arc<Ctx>);

impl Inflight {
    /// Registers a request.
    pub fn enter(ctx: &Arc<Ctx>) -> InflightGuard {
        ctx.inflight.count.fetch_add(1, Ordering::AcqRel);
        InflightGuard(ctx.clone())
    }

    /// Requests in flight now.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Waits until no request is in flight.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        if self.0.inflight.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.inflight.idle.notify_waiters();
        }
    }
}
