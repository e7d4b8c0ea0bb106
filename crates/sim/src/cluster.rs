//! A file system of real servers in this process: each server is `pvfs_server::open`
//! and `pvfs_server::serve` over the simulated network, a simulated disk for its
//! metadata store and an in-memory data store; clients are the real client library
//! over the same network. Servers crash (their connections break, their disks keep
//! what a killed process or a power loss keeps) and restart.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pvfs_config::{Config, GenOptions};
use pvfs_server::ctx::{Ctx, Faults};
use pvfs_server::exec::Exec;
use pvfs_server::{GivenStorage, Setup};
use pvfs_storage::redo::{Disk, OsDisk};
use pvfs_storage::sim::{MemData, SimDrive};
use pvfs_storage::OpenDisks;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::net::SimNet;
use crate::rng::Rng;

/// One server's slot: its disks, kept across crashes, and the running instance.
struct Slot {
    name: String,
    drive: SimDrive,
    data: MemData,
    running: Option<Running>,
    /// Crashes so far.
    crashes: u64,
}

/// A file of a metadata copy that a server took over as its group's store (a real
/// file in its storage directory), as one process of the server has it open: once
/// the process crashed, whatever of it is left fails on the file, as it would once
/// dead, and leaves the file to the next process.
#[derive(Debug)]
struct ProcessFile {
    file: OsDisk,
    alive: Arc<AtomicBool>,
}

impl ProcessFile {
    fn check(&self) -> std::io::Result<()> {
        if self.alive.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err(std::io::Error::other(
                "the process that opened the file crashed",
            ))
        }
    }
}

impl Disk for ProcessFile {
    fn len(&self) -> std::io::Result<u64> {
        self.check()?;
        self.file.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.check()?;
        self.file.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.check()?;
        self.file.write_at(offset, data)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.check()?;
        self.file.set_len(len)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.check()?;
        self.file.sync()
    }
}

/// How the process whose life `alive` says opens a metadata copy as a store.
fn copy_disks(alive: Arc<AtomicBool>) -> OpenDisks {
    Arc::new(move |db: &Path, log: &Path| {
        let open = |p: &Path| -> std::io::Result<Box<dyn Disk>> {
            Ok(Box::new(ProcessFile {
                file: OsDisk::open(p)?,
                alive: alive.clone(),
            }))
        };
        Ok((open(db)?, open(log)?))
    })
}

/// A running server instance.
struct Running {
    ctx: Arc<Ctx>,
    /// Whether this process lives (false once it crashed).
    alive: Arc<AtomicBool>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    flusher: JoinHandle<()>,
}

/// The servers of one run, and how to reach them.
pub struct Cluster {
    /// Holds the key files and each server's lock mark.
    _dir: tempfile::TempDir,
    /// The file system's configuration.
    pub config: Config,
    /// The network every node uses.
    pub net: SimNet,
    rng: Rng,
    slots: Vec<Slot>,
    /// When the servers sync their metadata redo logs.
    sync: pvfs_storage::SyncPolicy,
    /// Whether the servers keep their records of missed ranges and unfinished
    /// changes in their storage directories (replicated file systems).
    records_on_disk: bool,
}

/// The lease of a replicated file system in the simulator (`[replication] lease`):
/// as short as the real-process failover tests take it.
pub const LEASE: Duration = Duration::from_secs(1);

/// How often a running server makes its metadata redo log durable (the
/// `metadata_sync` interval of a real server).
pub const METADATA_SYNC: Duration = Duration::from_millis(10);

impl Cluster {
    /// Lays out a file system of `servers` servers (all with both roles) and starts
    /// them. With `sync_every_commit`, every metadata commit is durable before its
    /// answer (`metadata_sync = "commit"`), so a power loss takes nothing that was
    /// acknowledged; otherwise the redo logs are synced every [`METADATA_SYNC`].
    /// With `replicas` above 1, the file system keeps that many copies of every
    /// file and metadata group, under an authority (`pvfs genconfig --replicas`)
    /// with a [`LEASE`] lease.
    pub async fn start(
        servers: usize,
        net: SimNet,
        rng: Rng,
        sync_every_commit: bool,
        replicas: u32,
    ) -> Result<Cluster, String> {
        // A replicated server keeps some state in files of its storage directory
        // (the authority's raft log, the standby copies of metadata stores): in
        // memory where the system has a file system there, so their syncs cost
        // nothing.
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .map_err(|e| format!("temporary directory: {e}"))?;
        let mut opts = GenOptions::new(servers, dir.path().join("storage"));
        opts.base_port = 7000;
        opts.fsid = Some(rng.range(1, 1 << 40));
        opts.replicas = replicas;
        let mut config = Config::generate(&opts).map_err(|e| e.to_string())?;
        if replicas > 1 {
            config.replication.lease = LEASE;
            // The standby copies of metadata stores, and a copy taken over as its
            // group's store, sync their logs at every commit: with an interval, a
            // thread of their own would sync them, and the runs would differ.
            config.defaults.metadata_sync = pvfs_config::MetadataSync::Commit;
        }
        config.security.key = dir.path().join("pvfs.key");
        config.security.server_key = dir.path().join("pvfs-server.key");
        config.timeouts.request = Duration::from_secs(4);
        config.timeouts.connect = Duration::from_secs(1);
        config.timeouts.sync = Duration::from_secs(8);
        for (path, what) in [
            (&config.security.key, "node key"),
            (&config.security.server_key, "server key"),
        ] {
            pvfs_auth::KeyRing::generate()
                .map_err(|e| format!("key: {e}"))?
                .write(path, what, true)
                .map_err(|e| format!("key: {e}"))?;
        }
        let slots = config
            .servers
            .iter()
            .map(|s| Slot {
                name: s.name.clone(),
                drive: SimDrive::new(),
                data: MemData::new(),
                running: None,
                crashes: 0,
            })
            .collect();
        let mut cluster = Cluster {
            _dir: dir,
            config,
            net,
            rng,
            slots,
            records_on_disk: replicas > 1,
            sync: if sync_every_commit {
                pvfs_storage::SyncPolicy::EveryCommit
            } else {
                pvfs_storage::SyncPolicy::OnFlush
            },
        };
        for i in 0..servers {
            cluster.start_server(i).await?;
        }
        Ok(cluster)
    }

    /// Number of servers.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the file system has no server (never: for clippy).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Name of server `i`.
    pub fn name(&self, i: usize) -> &str {
        &self.slots[i].name
    }

    /// Whether server `i` runs.
    pub fn is_up(&self, i: usize) -> bool {
        self.slots[i].running.is_some()
    }

    /// Crashes of server `i` so far.
    pub fn crashes(&self, i: usize) -> u64 {
        self.slots[i].crashes
    }

    /// The state of running server `i`.
    pub fn ctx(&self, i: usize) -> Option<&Arc<Ctx>> {
        self.slots[i].running.as_ref().map(|r| &r.ctx)
    }

    /// Starts server `i` on what its disks hold.
    pub async fn start_server(&mut self, i: usize) -> Result<(), String> {
        let config = self.config.clone();
        let slot = &mut self.slots[i];
        if slot.running.is_some() {
            return Ok(());
        }
        self.net.up(&slot.name);
        let alive = Arc::new(AtomicBool::new(true));
        let setup = Setup {
            faults: Faults::default(),
            transport: self.net.node(&slot.name),
            storage: Some(GivenStorage {
                disks: slot.drive.disks(),
                data: Arc::new(slot.data.clone()),
                sync: self.sync,
                copies: Some(copy_disks(alive.clone())),
                records_on_disk: self.records_on_disk,
            }),
            exec: Exec::Inline,
            first_base: Some(self.rng.range(0, 1 << 16)),
        };
        let ctx = pvfs_server::open(config.clone(), &slot.name, setup)
            .await
            .map_err(|e| format!("{} does not open: {e}", slot.name))?;
        let listener = self.net.listen(&slot.name, &config.servers[i].address);
        let (stop, stopped) = oneshot::channel::<()>();
        let served = ctx.clone();
        let name = slot.name.clone();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(e) = pvfs_server::serve(served, listener, shutdown, || {}).await {
                tracing::debug!(server = %name, "stopped with: {e}");
            }
        });
        let meta = ctx.meta.clone();
        let flusher = tokio::spawn(async move {
            loop {
                tokio::time::sleep(METADATA_SYNC).await;
                if meta.sync().is_err() {
                    return;
                }
            }
        });
        slot.running = Some(Running {
            ctx,
            alive,
            stop,
            task,
            flusher,
        });
        Ok(())
    }

    /// Server `i` crashes: it drops off the network at once and its process is gone.
    /// With `power_loss`, its disks keep only what was synced and a subset the run's
    /// random numbers pick of what was written since; otherwise (a killed process)
    /// everything written stays.
    pub async fn crash(&mut self, i: usize, power_loss: bool) {
        let rng = self.rng.clone();
        let slot = &mut self.slots[i];
        let Some(running) = slot.running.take() else {
            return;
        };
        slot.crashes += 1;
        self.net.down(&slot.name);
        running.alive.store(false, Ordering::Relaxed);
        running.flusher.abort();
        if power_loss {
            let mut rnd = || rng.next_u64();
            slot.drive.crash(&mut rnd);
            slot.data = slot.data.crash(&mut rnd);
        } else {
            slot.drive.kill();
            slot.data = slot.data.kill();
        }
        // What is left of the old process stops: nothing it does reaches the disks
        // or the network any more.
        let _ = running.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(60), running.task).await;
        drop(running.ctx);
    }

    /// Stops every server cleanly (the end of a run).
    pub async fn stop(&mut self) {
        for slot in &mut self.slots {
            if let Some(r) = slot.running.take() {
                r.flusher.abort();
                let _ = r.stop.send(());
                let _ = tokio::time::timeout(Duration::from_secs(60), r.task).await;
            }
        }
    }
}
