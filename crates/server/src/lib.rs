//! The pvfs server: one binary, metadata and/or data roles (PVFS2).
//!
//! A request's path: [`run`] accepts a connection → [`connection::serve`] reads its
//! frames → [`dispatch::dispatch`] matches the request → the kind's
//! [`op::Handler`] in one module of [`handlers`] declares who may send it and does
//! the work over `pvfs-storage` (metadata in a group-committed redb store, data in
//! one local file per datafile) → the answer goes back on the same connection.
//! Byte-range locks live in memory, in [`locks`] (with leases and a grace period after
//! a restart); POSIX lock waits are checked for deadlocks by [`waitfor`].

pub mod access;
pub mod attr_cache;
pub mod background;
pub mod budget;
pub mod caps;
pub mod catchup;
pub mod chain;
pub mod connection;
pub mod copy;
pub mod ctx;
pub mod dispatch;
pub mod error;
pub mod exec;
pub mod feed;
pub mod fence;
pub mod handlers;
pub mod health;
pub mod holds;
pub mod inline;
pub mod lease;
pub mod lifetime;
pub mod limits;
pub mod local;
pub mod locks;
pub mod mend;
pub mod metrics;
pub mod missed;
pub mod once;
pub mod op;
pub mod orphans;
pub mod pace;
pub mod peer;
pub mod perms;
pub mod precreate;
pub mod progress;
pub mod promote;
pub mod random;
pub mod ratelimit;
pub mod rebuild;
pub mod refill;
pub mod replicate;
pub mod reply;
pub mod roster;
pub mod scrape;
pub mod scrub_pass;
pub mod seals;
mod seam;
pub mod session;
pub mod standby;
#[cfg(test)]
mod test_rng;
pub mod unfinished;
pub mod waitfor;

use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use pvfs_config::Config;
use pvfs_proto::message::ServerInfo;
use pvfs_proto::{Attr, ObjDetail, Timespec};
use pvfs_storage::{FileData, Identity, MetaStore, StorageError, SyncPolicy};
use pvfs_transport::{AutoTransport, BufPool, Transport, TransportError};
use thiserror::Error;

use crate::budget::{Budget, CHUNK};
use crate::ctx::{Ctx, Inflight};
use crate::peer::Peers;
use crate::precreate::Precreator;

/// How long a clean stop waits for requests in flight.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a server could not start or stopped abnormally.
#[derive(Debug, Error)]
pub enum ServerError {
    /// The name is not in the configuration.
    #[error("no server named {0:?} in the configuration")]
    UnknownServer(String),
    /// The storage could not be opened or created.
    #[error("storage {path}: {source}")]
    Storage {
        /// The storage directory.
        path: String,
        /// What went wrong.
        source: StorageError,
    },
    /// The listening address could not be bound.
    #[error(transparent)]
    Listen(#[from] TransportError),
    /// `PVFS_FAULTS` (test fault injection) does not parse.
    #[error("{0}")]
    Faults(String),
    /// A file system could not be laid out (`local::LocalServer::configure`).
    #[error("{0}")]
    Setup(String),
    /// The configuration's servers are not those this storage was used with, but
    /// for data servers added at the end (`roster`).
    #[error("{0}")]
    Servers(String),
    /// A key file could not be used.
    #[error("{0} (pvfs keygen makes one; docs/security.md)")]
    Key(#[from] pvfs_auth::KeyError),
    /// TLS is asked for and its files cannot be used.
    #[error("{0} (pvfs genconfig --tls makes them; docs/security.md)")]
    Tls(#[from] pvfs_transport::tls::TlsError),
}

/// Runs server `name` of `config` until `shutdown` completes, then stops cleanly:
/// no new requests, requests in flight finish (up to [`DRAIN_TIMEOUT`]), the
/// metadata store commits and closes. `ready` is called once the server listens.
pub async fn run(
    config: Config,
    name: &str,
    shutdown: impl Future<Output = ()>,
    ready: impl FnOnce(),
) -> Result<(), ServerError> {
    let faults = ctx::Faults::from_env().map_err(ServerError::Faults)?;
    let ctx = open(config, name, Setup::local(faults)).await?;
    let listener = AutoTransport
        .listen(&ctx.config.servers[ctx.me].address)
        .await?;
    // Prometheus metrics, where the configuration asks for them.
    let metrics = ctx.config.servers[ctx.me]
        .metrics
        .clone()
        .map(|addr| tokio::spawn(scrape::serve(ctx.clone(), addr)));
    let served = serve(ctx, listener, shutdown, ready).await;
    if let Some(task) = metrics {
        task.abort();
    }
    served
}

/// What a server runs on besides its configuration: the seams that in-process tests
/// and the simulator replace (the network, the disks, where blocking work runs).
pub struct Setup {
    /// Faults to inject (tests).
    pub faults: ctx::Faults,
    /// How it reaches the other servers.
    pub transport: Arc<dyn Transport>,
    /// Its storage; None: local files under its configured storage directory.
    pub storage: Option<GivenStorage>,
    /// Where blocking storage work runs.
    pub exec: exec::Exec,
    /// Where the round-robin choice of new files' first data server starts; None:
    /// from the process id, so servers started together spread files differently.
    pub first_base: Option<u64>,
}

/// Storage a caller made for a server (`pvfs_storage::sim` in the simulator).
pub struct GivenStorage {
    /// The metadata store's disks (it commits every mutation on its caller's
    /// thread).
    pub disks: pvfs_storage::OpenDisks,
    /// When its redo log is synced: at every commit, or only when asked
    /// (`SyncPolicy::OnFlush`: the caller flushes it, as a real server's background
    /// sync does every `metadata_sync`).
    pub sync: SyncPolicy,
    /// The datafiles.
    pub data: Arc<dyn pvfs_storage::DataBackend>,
    /// How the metadata copy of another server's group that this server takes over
    /// as its standby (`promote`) is opened as a store, from the files of the copy
    /// (`groups/<name>/` in its storage directory); it then commits on its caller's
    /// thread, as the server's own store. None: local files, with a writer thread.
    pub copies: Option<pvfs_storage::OpenDisks>,
    /// Whether the records of ranges other copies missed and of unfinished changes
    /// (`missed`, `unfinished`) are files in the storage directory, as on a real
    /// server (they outlive a crash); otherwise they are kept in memory.
    pub records_on_disk: bool,
}

impl Setup {
    /// A server as `pvfs server` runs one: TCP or Unix sockets, local files, blocking
    /// work on tokio's blocking threads.
    pub fn local(faults: ctx::Faults) -> Setup {
        Setup {
            faults,
            transport: Arc::new(AutoTransport),
            storage: None,
            exec: exec::Exec::Threads,
            first_base: None,
        }
    }
}

/// Opens server `name` of `config` without listening: its storage (made on first
/// start, with the root directory on the root's owner), keys and state. `run` then
/// serves it; in-process tests call its handlers directly (`dispatch::handle`).
pub async fn open(config: Config, name: &str, setup: Setup) -> Result<Arc<Ctx>, ServerError> {
    let faults = setup.faults;
    let me = config
        .server_index(name)
        .ok_or_else(|| ServerError::UnknownServer(name.to_string()))?;
    let sc = config.servers[me].clone();
    let storage_err = |source| ServerError::Storage {
        path: sc.storage.display().to_string(),
        source,
    };
    std::fs::create_dir_all(&sc.storage).map_err(|e| storage_err(StorageError::Io(Arc::new(e))))?;
    // Storage a caller made (the simulator's) is not kept in a directory of its own.
    if setup.storage.is_none() {
        roster::check(&config, &sc.storage).map_err(ServerError::Servers)?;
    }
    let id = Identity {
        fsid: config.fsid,
        server: sc.name.clone(),
    };
    let sync = match config.defaults.metadata_sync {
        pvfs_config::MetadataSync::Commit => SyncPolicy::EveryCommit,
        pvfs_config::MetadataSync::Every(t) => SyncPolicy::Every(t),
    };
    let range = (sc.handles.first, sc.handles.last);
    // Storage a caller made keeps its records of missed ranges and unfinished
    // changes in memory, unless it asks for them in the storage directory (the
    // simulator's replicated runs: they outlive a crash, as on a real server).
    let on_disk = setup.storage.as_ref().is_none_or(|g| g.records_on_disk);
    let missed_dir = on_disk.then_some(sc.storage.as_path());
    let missed = missed::MissedLog::open(missed_dir).map_err(|what| ServerError::Storage {
        path: sc.storage.display().to_string(),
        source: StorageError::Corrupt { what },
    })?;
    let unfinished =
        unfinished::Unfinished::open(missed_dir).map_err(|what| ServerError::Storage {
            path: sc.storage.display().to_string(),
            source: StorageError::Corrupt { what },
        })?;
    let copy_disks = setup.storage.as_ref().and_then(|g| g.copies.clone());
    let (meta, data): (MetaStore, Arc<dyn pvfs_storage::DataBackend>) = match setup.storage {
        None => (
            MetaStore::open_with_sync(
                &sc.storage,
                &id,
                range,
                usize::try_from(config.limits.meta_cache).unwrap_or(usize::MAX),
                sync,
            )
            .map_err(storage_err)?,
            Arc::new(FileData::open(&sc.storage).map_err(storage_err)?),
        ),
        Some(given) => (
            MetaStore::open_on_callers_thread(&sc.storage, &id, range, given.disks, given.sync)
                .map_err(storage_err)?,
            given.data,
        ),
    };
    let keys = Arc::new(pvfs_auth::KeyRing::load(&config.security.key)?);
    let cap_keys = Arc::new(pvfs_auth::KeyRing::load(&config.security.server_key)?);
    let munge =
        pvfs_auth::Munge::open(config.security.munge_socket.as_deref()).map_err(|e| e.to_string());
    if let Err(why) = &munge {
        tracing::info!("MUNGE credentials cannot be checked here ({why}): clients without the key will be refused");
    }
    let (tls, tls_client) = if config.security.tls {
        let sec = &config.security;
        (
            Some(pvfs_transport::tls::TlsServer::load(
                &sec.tls_cert,
                &sec.tls_key,
            )?),
            Some(pvfs_transport::tls::TlsClient::load(&sec.tls_ca)?),
        )
    } else {
        (None, None)
    };
    let policy = pvfs_auth::ServerPolicy {
        fsid: config.fsid,
        server: sc.name.clone(),
        groups: Arc::default(),
        keys: keys.clone(),
        munge,
        root_squash: config.security.root_squash,
        trusted: config.security.trusted.clone(),
    };
    let budget = Budget::new(config.limits.buffers, config.timeouts.request);
    let max_connections = limits::connection_cap(config.limits.connections);
    if max_connections < config.limits.connections {
        tracing::warn!(
            wanted = config.limits.connections,
            served = max_connections,
            "the open-file limit allows fewer client connections than [limits] connections"
        );
    }
    let lock_mark = if sc.roles.contains(pvfs_proto::Roles::META) {
        Some(pvfs_storage::LockMark::open(&sc.storage).map_err(storage_err)?)
    } else {
        None
    };
    let pool = BufPool::new(CHUNK, 64);
    let peers = Arc::new(Peers::new(
        &config,
        pool.clone(),
        keys,
        (tls_client, setup.transport),
    ));
    let precreate = Precreator::new(&config, me, meta.clone(), peers.clone());
    let lease = lease::Lease::start(&config, me, peers.clone())
        .await
        .map_err(|what| ServerError::Storage {
            path: sc.storage.display().to_string(),
            source: StorageError::Corrupt { what },
        })?;
    let standbys = standby::Standbys::new(&config, me, sync);
    let lease = Arc::new(lease);
    // A metadata server with standbys ships every commit to them before answering,
    // while the map names it its group's primary.
    let group = replicate::Shipping::candidates(&config, me as u32, me);
    let replicated = sc.roles.contains(pvfs_proto::Roles::META) && group.0.len() > 1;
    let fence = Arc::new(fence::Fence::new(
        &sc.name,
        replicated && lease.configured(),
        false,
    ));
    let shipping = replicated.then(|| {
        replicate::Shipping::new(
            me as u32,
            group,
            lease.clone(),
            peers.clone(),
            fence.clone(),
            (config.timeouts.request / 2, config.replication.lease),
            setup.exec,
        )
    });
    if let (Some(s), Some(path)) = (&shipping, faults.hold_shipping()) {
        s.held_by_test(path);
    }
    // The mark covers open files' holds too: after a start that may have forgotten
    // some, nothing is deleted for a lease (`holds`).
    let lock_table = locks::LockTable::new(
        config.locks.lease,
        locks::grace_period(config.locks.lease, config.replication.lease),
        config.timeouts.request,
        lock_mark,
    );
    let ctx = Arc::new(Ctx {
        info: ServerInfo {
            name: sc.name.clone(),
            roles: sc.roles,
            fsid: config.fsid,
            version: pvfs_proto::VERSION.to_string(),
        },
        me,
        meta,
        data,
        inline: inline::InlineIo::for_exec(setup.exec),
        peers,
        policy,
        tls,
        caps: caps::Caps::new(cap_keys, config.fsid, config.security.capability_lifetime),
        attr_cache: attr_cache::AttrCache::default(),
        log_limit: ratelimit::LogLimit::new(Duration::from_secs(10)),
        metrics: Arc::new(metrics::Metrics::new()),
        precreate,
        pool,
        next_base: AtomicU64::new(setup.first_base.unwrap_or(u64::from(std::process::id()))),
        inflight: Inflight::default(),
        faults: Arc::new(faults),
        connections: Arc::new(tokio::sync::Semaphore::new(max_connections as usize)),
        max_connections,
        handshakes: Arc::new(tokio::sync::Semaphore::new(
            (max_connections as usize / 2).max(64),
        )),
        addresses: limits::AddressLimits::new(
            config.limits.connections_per_address,
            budget.units(),
        ),
        budget,
        health: health::Health::default(),
        holds: Arc::new(holds::Holds::new(lock_table.grace_end())),
        locks: lock_table,
        wait_graph: waitfor::WaitGraph::new(config.timeouts.request.saturating_mul(3)),
        feed: feed::ChangeFeed::new(),
        retries: once::Retries::default(),
        seals: Arc::new(seals::Seals::new(config.timeouts.request)),
        exec: setup.exec,
        lease,
        chain_locks: Arc::default(),
        copy_pace: Arc::new(pace::Pace::new(config.replication.rebuild_bandwidth)),
        rebuilding: Arc::default(),
        refilling: Arc::default(),
        scrub_pace: Arc::new(pace::Pace::new(config.replication.scrub_bandwidth)),
        scrub_pass: Default::default(),
        missed: Arc::new(missed),
        unfinished: Arc::new(unfinished),
        admissions: Arc::default(),
        standbys,
        shipping,
        fence,
        copy_disks,
        taken_over: std::sync::OnceLock::new(),
        config,
    });
    ensure_root(&ctx).await.map_err(|e| ServerError::Storage {
        path: sc.storage.display().to_string(),
        source: StorageError::Corrupt {
            what: format!("cannot create the root directory: {e}"),
        },
    })?;
    Ok(ctx)
}

/// Serves the opened server `ctx` on `listener` until `shutdown` completes (see
/// [`run`]).
pub async fn serve(
    ctx: Arc<Ctx>,
    mut listener: Box<dyn pvfs_transport::Listener>,
    shutdown: impl Future<Output = ()>,
    ready: impl FnOnce(),
) -> Result<(), ServerError> {
    let sc = ctx.config.servers[ctx.me].clone();
    let storage_err = |source| ServerError::Storage {
        path: sc.storage.display().to_string(),
        source,
    };
    // From here on every commit reaches the standbys before it is answered (what
    // opening wrote, the root directory among it, goes with their first copy).
    if let Some(shipping) = &ctx.shipping {
        ctx.meta.replicate_with(shipping.clone());
    }
    tracing::info!(server = %sc.name, address = %listener.local_addr(), roles = %sc.roles.describe(), "serving");
    ready();
    let expiry = tokio::spawn(once::expire_loop(ctx.meta.clone(), once::keep(&ctx.config)));
    let warm_up = tokio::spawn(ctx.precreate.clone().fill_at_start());
    let trimmer = tokio::spawn(trim_buffers(ctx.pool.clone()));
    let supervisor = tokio::spawn(background::supervise_store(ctx.clone()));
    let lock_expiry = tokio::spawn(background::expire_locks(ctx.clone()));
    let kept_sweep = tokio::spawn(background::sweep_kept(ctx.clone()));
    let renewals = tokio::spawn(ctx.lease.clone().renew_loop());
    let missed_flush = tokio::spawn(background::flush_missed(ctx.clone()));
    let catch_up = tokio::spawn(catchup::run(ctx.clone()));
    let rebuild = tokio::spawn(rebuild::run(ctx.clone()));
    let shipping = ctx.shipping.as_ref().map(replicate::Shipping::spawn);
    // The metadata groups this server takes over as a standby, and the names its
    // handshake then answers to.
    let promoted = Arc::new(promote::Promoted::new(
        ctx.policy.groups.clone(),
        promote::Promoted::superseded_in(&sc.storage),
    ));
    let _ = ctx.taken_over.set(promoted.clone());
    let failover = tokio::spawn(promote::run(ctx.clone(), promoted.clone()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    // Set when the metadata store failed beyond healing: the server stops with it.
    let mut fatal = None;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => {
                    let ip = conn.peer.parse::<std::net::SocketAddr>().ok().map(|a| a.ip());
                    // Closing a connection at once tells the client more than a full
                    // backlog would.
                    match (ctx.handshakes.clone().try_acquire_owned(), ctx.addresses.admit(ip)) {
                        (Ok(handshake), Some(admitted)) => {
                            tokio::spawn(connection::serve(
                                ctx.clone(),
                                promoted.clone(),
                                conn,
                                stop_rx.clone(),
                                (handshake, admitted),
                            ));
                        }
                        (Err(_), _) => {
                            if let Some(dropped) = ctx.log_limit.allow("handshake limit") {
                                tracing::warn!(peer = %conn.peer, dropped, "too many connections in their handshake; closing a new connection");
                            }
                        }
                        (Ok(_), None) => {
                            let key = format!("address limit {}", ip.map_or("local".into(), |i| i.to_string()));
                            if let Some(dropped) = ctx.log_limit.allow(&key) {
                                tracing::warn!(peer = %conn.peer, limit = ctx.config.limits.connections_per_address, dropped, "connection limit of this client address reached; closing a new connection");
                            }
                        }
                    }
                }
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    if let Some(dropped) = ctx.log_limit.allow("accept") {
                        tracing::warn!(dropped, "accept failed: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = &mut shutdown => break,
            e = ctx.health.fatal() => {
                fatal = Some(e);
                break;
            }
        }
    }
    tracing::info!(server = %sc.name, inflight = ctx.inflight.count(), "stopping");
    drop(listener);
    let _ = stop_tx.send(true);
    ctx.feed.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, ctx.inflight.wait_idle())
        .await
        .is_err()
    {
        tracing::warn!(server = %sc.name, "requests still in flight after {DRAIN_TIMEOUT:?}; stopping anyway");
    }
    expiry.abort();
    warm_up.abort();
    trimmer.abort();
    supervisor.abort();
    lock_expiry.abort();
    kept_sweep.abort();
    renewals.abort();
    missed_flush.abort();
    catch_up.abort();
    rebuild.abort();
    failover.abort();
    for task in shipping.iter().flatten() {
        task.abort();
    }
    promoted.close().await;
    if let Err(e) = ctx.missed.flush() {
        tracing::warn!("cannot write the records of missed ranges: {e}");
    }
    ctx.lease.shutdown().await;
    ctx.meta.close().await;
    ctx.standbys.close();
    if let Some(source) = fatal {
        return Err(storage_err(source));
    }
    tracing::info!(server = %sc.name, "stopped");
    Ok(())
}

/// Creates the root directory on the metadata server that owns its handle, on first
/// start. It belongs to the user running the server, mode 0755, with one shard per
/// metadata server.
async fn ensure_root(ctx: &Arc<Ctx>) -> Result<(), String> {
    let root = ctx.config.root_handle();
    if ctx.config.owner_of(root) != Some(ctx.me) {
        return Ok(());
    }
    if ctx
        .meta
        .read()
        .map_err(|e| e.to_string())?
        .get_object(root)
        .map_err(|e| e.to_string())?
        .is_some()
    {
        return Ok(());
    }
    let creds = pvfs_proto::Creds::current();
    let now = Timespec::now();
    let attr = Attr {
        handle: root,
        mode: 0o755,
        uid: creds.uid,
        gid: creds.gid,
        nlink: 2,
        size: 4096,
        atime: now,
        mtime: now,
        ctime: now,
        detail: ObjDetail::Dir {
            parent: root,
            // One shard per metadata server: clients know the root's shape from the
            // configuration and walk paths even when the root's owner is down.
            shards: ctx.config.meta_servers().len() as u32,
            default_layout: None,
            mtime_set: Timespec::default(),
        },
        blocks: 0,
        acl: None,
    };
    ctx.meta
        .write(move |t| {
            if t.get_object(root)?.is_none() {
                t.put_object(&attr);
            }
            Ok(())
        })
        .await
        .map_err(|e| e.to_string())
}

/// How often idle data buffers that no request needed are given back to the system.
const TRIM_EVERY: Duration = Duration::from_secs(30);

/// Gives back, every [`TRIM_EVERY`], the pooled buffers that stayed idle for the whole
/// interval: memory follows the load, not the highest burst since the start.
async fn trim_buffers(pool: BufPool) {
    let mut tick = tokio::time::interval(TRIM_EVERY);
    loop {
        tick.tick().await;
        let released = pool.trim();
        if released > 0 {
            tracing::debug!(released, idle = pool.idle(), "released idle data buffers");
        }
    }
}
