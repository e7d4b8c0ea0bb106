//! Pools of pre-created datafile handles (OrangeFS's "precreate").
//!
//! A metadata server keeps, for every data server, a durable pool of datafile handles
//! that data server has reserved for it. A create takes its datafile handles from the
//! pools inside its own commit, so it needs no round trip to any data server. Pools are
//! filled when a metadata server starts and refilled in batches, in the background
//! when they run low and synchronously only when one is empty. Data servers create the
//! datafile itself lazily, on first write.

use pvfs_proto::req;
use std::sync::Arc;

use pvfs_config::Config;
use pvfs_proto::{Errno, Handle, Request, Response, Roles};
use pvfs_storage::MetaStore;
use tokio::sync::Mutex;

use crate::error::{OpError, OpResult};
use crate::peer::Peers;

/// Below this many handles a pool is refilled in the background.
pub const LOW_WATER: u64 = 256;
/// Handles asked for per refill.
pub const BATCH: u32 = 1024;
/// Most handles one request may reserve.
pub const MAX_COUNT: u32 = 1 << 20;
/// How long a metadata server keeps trying, after it starts, to fill its pools
/// while data servers are not answering yet.
pub const FILL_AT_START_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// The pools of one server and what refills them. A handle: clones share the pools
/// (a background refill holds one).
#[derive(Clone)]
pub struct Precreator(Arc<Pools>);

/// What the pools need: the store they live in, the servers that reserve handles for
/// them, and one refill at a time per data server.
struct Pools {
    meta: MetaStore,
    peers: Arc<Peers>,
    /// This server's index in the configuration.
    me: usize,
    /// This server's roles (only a metadata server keeps pools; only a data server
    /// reserves handles).
    roles: Roles,
    /// The configured servers' names, by index.
    names: Vec<String>,
    /// The data servers, by index.
    data_servers: Vec<usize>,
    /// Refill coordination, per configured server.
    refilling: Vec<Mutex<()>>,
}

/// Fails unless `count` is a number of handles one request may reserve.
pub fn check_count(count: u32) -> OpResult<()> {
    if count == 0 || count > MAX_COUNT {
        return Err(OpError::invalid(
            Errno::EINVAL,
            format!("precreate count {count} outside 1..={MAX_COUNT}"),
        ));
    }
    Ok(())
}

impl Precreator {
    /// The pools of server `me` of `config`, kept in `meta`, refilled through `peers`.
    pub fn new(config: &Config, me: usize, meta: MetaStore, peers: Arc<Peers>) -> Precreator {
        Precreator(Arc::new(Pools {
            meta,
            peers,
            me,
            roles: config.servers.get(me).map_or(Roles::default(), |s| s.roles),
            names: config.servers.iter().map(|s| s.name.clone()).collect(),
            data_servers: config.data_servers(),
            refilling: config.servers.iter().map(|_| Mutex::new(())).collect(),
        }))
    }

    /// Handles in the pool for data server `server` now.
    pub fn pool_len(&self, server: usize) -> OpResult<u64> {
        Ok(self.0.meta.read()?.pool_len(server as u32)?)
    }

    /// The name of server `server`, for messages.
    fn name(&self, server: usize) -> &str {
        self.0.names.get(server).map_or("?", String::as_str)
    }

    /// The refill lock of `server`, which must be a data server: every refill holds
    /// it, so only data servers are ever asked for handles.
    fn refill_lock(&self, server: usize) -> OpResult<&Mutex<()>> {
        let p = &self.0;
        match p.refilling.get(server) {
            Some(lock) if p.data_servers.contains(&server) => Ok(lock),
            Some(_) => Err(OpError::not_here(
                Errno::EINVAL,
                format!("{} is not a data server: it has no pool", self.name(server)),
            )),
            None => Err(OpError::no_server(format!("no server {server}"))),
        }
    }

    /// Makes sure the pool for `server` holds at least `need` handles.
    pub async fn ensure(&self, server: usize, need: u64) -> OpResult<()> {
        if self.pool_len(server)? >= need {
            return Ok(());
        }
        let _one_at_a_time = self.refill_lock(server)?.lock().await;
        if self.pool_len(server)? >= need {
            return Ok(());
        }
        self.refill(server, need).await
    }

    /// Starts a background refill of `server`'s pool if it is low and none is running.
    pub fn top_up_later(&self, server: usize) {
        match self.pool_len(server) {
            Ok(n) if n >= LOW_WATER => return,
            Err(_) => return,
            Ok(_) => {}
        }
        let pools = self.clone();
        tokio::spawn(async move {
            let Ok(lock) = pools.refill_lock(server) else {
                return;
            };
            let Ok(_guard) = lock.try_lock() else {
                return;
            };
            if let Err(e) = pools.refill(server, 0).await {
                tracing::warn!(server = %pools.name(server), "precreate refill failed: {e}");
            }
        });
    }

    /// Fills every data server's pool up to [`LOW_WATER`] after a metadata server
    /// starts, so the first creates of a fresh file system do not wait for refills.
    /// Data servers that are not up yet are retried every 250 ms for
    /// [`FILL_AT_START_FOR`]; a create that comes first refills synchronously as
    /// before.
    pub async fn fill_at_start(self) {
        if !self.0.roles.contains(Roles::META) {
            return;
        }
        let start = tokio::time::Instant::now();
        let mut pending = self.0.data_servers.clone();
        while !pending.is_empty() && start.elapsed() < FILL_AT_START_FOR {
            let mut still = Vec::new();
            for server in pending {
                let filled = match self.pool_len(server) {
                    Ok(n) if n >= LOW_WATER => true,
                    Ok(_) => match self.refill_lock(server).map(Mutex::try_lock) {
                        Ok(Ok(_guard)) => self.refill(server, LOW_WATER).await.is_ok(),
                        // A create is refilling it right now.
                        Ok(Err(_)) => false,
                        Err(_) => return,
                    },
                    Err(_) => return,
                };
                if !filled {
                    still.push(server);
                }
            }
            pending = still;
            if !pending.is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        }
    }

    /// Adds a batch (at least `need`) of handles that `server` reserved to its pool;
    /// the caller holds `server`'s refill lock.
    async fn refill(&self, server: usize, need: u64) -> OpResult<()> {
        let count = u64::from(BATCH).max(need).min(u64::from(u32::MAX)) as u32;
        let (first, count) = if server == self.0.me {
            self.reserve(count).await?
        } else {
            match self.precreate_at(server, count).await? {
                Response::Handles { first, count } => (first, count),
                other => {
                    return Err(OpError::internal(
                        Errno::EPROTO,
                        format!("unexpected answer to Precreate: {}", other.op_name()),
                    ))
                }
            }
        };
        let idx = server as u32;
        self.0
            .meta
            .write(move |t| {
                t.pool_add(idx, first, u64::from(count));
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Asks data server `server` to reserve `count` handles; asks again after a pause
    /// while it answers that it cannot yet (a server whose disk is new to the map
    /// reserves none until the map has seen it), within the request timeout.
    async fn precreate_at(&self, server: usize, count: u32) -> OpResult<Response> {
        let started = tokio::time::Instant::now();
        let patience = self.0.peers.request_timeout();
        loop {
            match self
                .0
                .peers
                .call(server, Request::Precreate(req::Precreate { count }))
                .await
            {
                Err(e) if e.kind == pvfs_proto::ErrorKind::Busy && started.elapsed() < patience => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                other => return other,
            }
        }
    }

    /// Reserves `count` consecutive datafile handles from this server's own range,
    /// durably, for its own pool (a server with both roles).
    async fn reserve(&self, count: u32) -> OpResult<(Handle, u32)> {
        check_count(count)?;
        let first = self
            .0
            .meta
            .write_with(move |t| OpResult::Ok(t.alloc_handles(u64::from(count))?))
            .await?;
        Ok((first, count))
    }
}
