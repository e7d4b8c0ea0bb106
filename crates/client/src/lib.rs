//! The pvfs client library: every interface (CLI, FUSE, C, preload) goes through it.
//!
//! [`Client`] holds the configuration and one multiplexed connection per server. It
//! resolves paths through the sharded directories ([`namespace`]), creates and opens
//! files, and [`File`] does striped I/O ([`io`]): one request per involved data server
//! per call, data streamed in bounded chunks. The metadata servers never see file data.
//! [`locks`] holds byte-range locks on the servers (leases, reclaims, waits).
//! [`blocking`] wraps it all for callers without an async runtime.

mod append;
mod at;
pub mod blocking;
mod caps;
mod copies;
mod degraded;
mod error;
mod failover;
pub mod feed;
mod file;
mod fsck;
mod group;
pub mod holds;
mod io;
pub mod locks;
mod map;
pub mod metrics;
mod namespace;
mod placement;
mod pool;
mod reaper;
mod scrub;

use std::sync::Arc;

use pvfs_config::Config;
use pvfs_proto::{Creds, Handle};

pub use at::Leftovers;
pub use degraded::PartialListing;
pub use error::{Error, Result};
pub use file::{File, Partition};
pub use fsck::{FsckReport, Problem, ProblemKind};
pub use group::GROUP_HANDLE_MAX;
pub use io::WrittenStats;
pub use locks::{LockKind, LockRequest};
pub use namespace::{apply_datafile_stats, apply_stripe_stats, StripeTotals};
pub use namespace::{FsStat, LayoutReport, PingReport, RenameMode, ServerStat, Unlinked};
pub use pool::Stats;
pub use pvfs_proto::message::falloc;
pub use pvfs_proto::{
    Attr, DirEntry, Errno, ErrorKind, LayoutSpec, LockConflict, LockType, NodeKind, ObjKind,
    Regions, Remains, SetAttr, Timespec,
};
pub use scrub::ScrubReport;

use placement::Placement;
use pool::Pool;

pub(crate) struct Inner {
    config: Config,
    pool: Pool,
    place: Placement,
    /// Shard counts of directories seen: fixed at mkdir and handles are never reused,
    /// so entries never go stale.
    dir_shards: std::sync::Mutex<std::collections::HashMap<Handle, u32>>,
    /// Capabilities granted, per object and user.
    caps: caps::CapCache,
    /// Locks held, leases, lost locks (`locks`).
    locks: locks::LockState,
    /// Datafiles of deleted files waiting to be deleted (`reaper`).
    reaper: reaper::Reaper,
}

/// A connection to one pvfs file system. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    creds: Creds,
    /// The umask creates carry (0: modes are given as meant).
    umask: u32,
}

impl Client {
    /// A client for the file system `config` describes, acting as the calling
    /// process's user. Connections are made on first use, so this never blocks.
    pub fn new(config: Config) -> Client {
        Client::over(config, Arc::new(pvfs_transport::AutoTransport))
    }

    /// [`Client::new`], reaching the servers through `transport` (a simulated
    /// network in tests) instead of TCP or Unix sockets.
    pub fn over(config: Config, transport: Arc<dyn pvfs_transport::Transport>) -> Client {
        Client {
            inner: Arc::new(Inner {
                pool: Pool::new(&config, transport),
                place: Placement::new(&config),
                dir_shards: std::sync::Mutex::new(std::collections::HashMap::new()),
                caps: caps::CapCache::default(),
                locks: locks::LockState::default(),
                reaper: reaper::Reaper::new(config.servers.len()),
                config,
            }),
            creds: Creds::current(),
            umask: 0,
        }
    }

    /// The same connections, acting as another user (a FUSE mount serves many).
    pub fn with_creds(&self, creds: Creds) -> Client {
        Client {
            inner: self.inner.clone(),
            creds,
            umask: self.umask,
        }
    }

    /// The same client, its creates carrying `umask` (the caller's process umask):
    /// servers apply it to new objects' modes unless the parent directory has a
    /// default ACL, which then decides, as a local file system does.
    pub fn with_umask(&self, umask: u32) -> Client {
        Client {
            inner: self.inner.clone(),
            creds: self.creds.clone(),
            umask: umask & 0o777,
        }
    }

    /// The file system's configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// What this client counted for Prometheus (its clones count into it too).
    pub fn metrics(&self) -> &metrics::ClientMetrics {
        &self.inner.pool.metrics
    }

    /// Serves this client's metrics on `addr` (`GET /metrics`, OpenMetrics text) on
    /// the current tokio runtime, until the task is aborted. A port that cannot be
    /// bound is logged, and the client goes on without serving them.
    pub fn serve_metrics(&self, addr: String) -> tokio::task::JoinHandle<()> {
        let metrics = self.inner.pool.metrics.clone();
        tokio::spawn(pvfs_metrics::serve(addr, move || {
            let text = metrics.render();
            async move { text }
        }))
    }

    /// Makes every metadata change any server acknowledged so far stable on disk
    /// (`Sync` to every metadata server, in parallel): what an fsync of a directory
    /// asks. Metadata servers sync their redo logs at least every `[defaults]
    /// metadata_sync` anyway; this is for "now".
    pub async fn sync_metadata(&self) -> error::Result<()> {
        io::sync_servers(&self.inner.pool, &self.creds, false).await
    }

    /// `syncfs`: makes everything the file system acknowledged so far stable on disk:
    /// every metadata change and every datafile's written bytes (`Sync` to every
    /// server, in parallel).
    pub async fn syncfs(&self) -> error::Result<()> {
        io::sync_servers(&self.inner.pool, &self.creds, true).await
    }

    /// The credentials requests carry.
    pub fn creds(&self) -> &Creds {
        &self.creds
    }

    /// Requests this client has sent.
    pub fn stats(&self) -> &Stats {
        &self.inner.pool.stats
    }

    /// The root directory's handle.
    pub fn root(&self) -> Handle {
        self.inner.config.root_handle()
    }
}
