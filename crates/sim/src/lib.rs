//! A deterministic simulation of a whole pvfs file system: real servers
//! (`pvfs_server`) and real clients (`pvfs_client`) in one process, on one thread,
//! under a seeded scheduler with simulated time (tokio's paused clock), a simulated
//! network ([`net`]: delays, partitions, servers that go down) and simulated disks
//! (`pvfs_storage::sim`: what a crash keeps). A nemesis crashes and restarts
//! servers and cuts links while clients run random workloads ([`workload`]) that
//! check every answer against a model, and the namespace's invariants are checked
//! on the servers' stores all along ([`check`]). With [`Options::replicas`] 2 the file
//! system keeps two copies of everything (an authority on openraft, leases, chains of
//! data copies, metadata standbys), the nemesis crashes one server at a time, and
//! the maps are checked too ([`check::Maps`]).
//!
//! Everything a run does follows from its seed: the order tasks run in, every
//! delay, every fault, every id and clock reading (`pvfs_proto::clock`). A failure
//! prints its seed; [`run`] with that seed replays it exactly, and each run's trace
//! hash lets a test check that two runs of one seed were the same
//! (`docs/testing.md`, "The simulator").

pub mod check;
pub mod cluster;
pub mod net;
pub mod rng;
pub mod workload;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cluster::Cluster;
use net::{Latency, SimNet};
use rng::Rng;
use workload::{AppendWitness, Counts, LockWitness, Shared, Worker};

/// Why a run failed.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The run could not be set up.
    Setup(String),
    /// An invariant or a client's model was violated.
    Check(String),
    /// The run did not finish in its simulated time.
    Stuck(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Setup(s) => write!(f, "set-up failed: {s}"),
            Failure::Check(s) => write!(f, "check failed: {s}"),
            Failure::Stuck(s) => write!(f, "stuck: {s}"),
        }
    }
}

/// What happened in a run, in order (operations and their outcomes, faults).
#[derive(Clone, Default)]
pub struct Trace(Arc<Mutex<Vec<String>>>);

impl Trace {
    /// Appends an event, stamped with the simulated time.
    pub fn push(&self, what: String) {
        let t = pvfs_proto::clock::now().saturating_sub(Duration::from_secs(EPOCH));
        let line = format!("{}.{:09} {what}", t.as_secs(), t.subsec_nanos());
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }

    /// The events so far.
    pub fn events(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A hash of every event (FNV-1a): equal for two runs that did the same.
    pub fn hash(&self) -> u64 {
        let mut bytes = Vec::new();
        for e in self.events() {
            bytes.extend_from_slice(e.as_bytes());
            bytes.push(b'\n');
        }
        pvfs_proto::fnv1a64(&bytes)
    }
}

/// What a run simulates.
#[derive(Clone, Debug)]
pub struct Options {
    /// Servers (each with both roles).
    pub servers: usize,
    /// Clients, each with its own directory.
    pub clients: usize,
    /// Operations per client.
    pub ops: usize,
    /// Whether servers crash (a killed process: what it wrote stays) and restart.
    pub crashes: bool,
    /// Whether links between nodes are cut for a while.
    pub partitions: bool,
    /// Whether single connections are reset now and then (what they had in flight is
    /// lost; a client's retry may then repeat a request the server carried out).
    pub resets: bool,
    /// Whether some crashes are power losses (disks keep what was synced and a
    /// seeded part of the rest). Metadata commits are then synced before their
    /// answers and clients fsync what they write, so nothing acknowledged may be lost.
    pub power_loss: bool,
    /// Delay of the network's writes.
    pub latency: Latency,
    /// Whether a client that got no answer waits, before it looks at what its
    /// operation did, until the servers can no longer make it (a request timeout plus
    /// the network's worst delay): without the wait a change made after the look
    /// seems to come from nowhere. Off only to replay seeds found before the wait.
    pub settle: bool,
    /// Copies of every file and metadata group (1: none). With 2, the file system
    /// runs an authority on three of its servers, leases, chains of data copies and
    /// metadata standbys; the nemesis then crashes one server at a time, only once
    /// the map calls every server up, and the replication invariants are checked
    /// all along ([`check::Maps`]).
    pub replicas: u32,
    /// With copies: a cut between two servers counts as a fault, as a crash does.
    /// No server crashes while two servers are cut off from each other, and no two
    /// servers are cut off from each other until the map calls every server up
    /// again after a crash: two copies survive one fault, not two. Off only to
    /// replay the replicated seeds found before (their schedules had crashes and
    /// such cuts at once).
    pub one_fault: bool,
}

impl Options {
    /// The faults the simulator had when it began (no connection resets, no stalled
    /// writes, no wait before a look): the options the seeds it found bugs with
    /// first ran under.
    pub fn first_faults() -> Options {
        let mut o = Options {
            resets: false,
            settle: false,
            ..Options::default()
        };
        o.latency.stall_chance = 0.0;
        o
    }

    /// A replicated file system (two copies of everything) under crashes of one
    /// server at a time and connection resets: what the simulator runs of
    /// replication (`docs/testing.md`). Crashes are killed processes (what a server
    /// keeps in files of its storage directory, the authority's log and the
    /// metadata standby copies, is not in the simulated disks, which a power loss
    /// would cut), and no links are cut.
    pub fn replicated() -> Options {
        Options {
            replicas: 2,
            power_loss: false,
            partitions: false,
            ..Options::default()
        }
    }

    /// The command that replays `seed` under these options.
    pub fn replay_command(&self, seed: u64) -> String {
        let off = [
            (!self.crashes, " --no-crashes"),
            (!self.partitions, " --no-partitions"),
            (!self.resets, " --no-resets"),
            (self.latency.stall_chance == 0.0, " --no-stalls"),
            (!self.power_loss, " --no-power-loss"),
            (!self.settle, " --no-settle"),
            (self.replicas > 1 && !self.one_fault, " --two-faults"),
        ];
        let mut off: String = off.iter().filter(|o| o.0).map(|o| o.1).collect();
        if self.replicas > 1 {
            // `--replicas` turns partitions and power losses off: it goes first, and
            // what is on is said after it.
            let on = [
                (self.partitions, " --partitions"),
                (self.power_loss, " --power-loss"),
            ];
            let on: String = on.iter().filter(|o| o.0).map(|o| o.1).collect();
            off = format!(" --replicas {}{off}{on}", self.replicas);
        }
        format!(
            "cargo run --release -p pvfs-sim --example sim -- --seed {seed} --servers {} \
             --clients {} --ops {}{off}",
            self.servers, self.clients, self.ops
        )
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            servers: 3,
            clients: 3,
            ops: 60,
            crashes: true,
            partitions: true,
            resets: true,
            power_loss: true,
            latency: Latency {
                min: Duration::from_micros(50),
                max: Duration::from_millis(3),
                stall_chance: 0.002,
                stall_max: Duration::from_millis(2500),
            },
            settle: true,
            replicas: 1,
            one_fault: true,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The clients' counts, summed.
    pub counts: Counts,
    /// Server crashes.
    pub crashes: u64,
    /// Of them, power losses.
    pub power_losses: u64,
    /// Partitions.
    pub partitions: u64,
    /// Single connections reset.
    pub resets: u64,
    /// Network writes that stalled (delivered late, overtaken by other connections).
    pub stalls: u64,
    /// Invariant checks of all stores.
    pub checks: u64,
    /// Looks at every server's map (replicated runs).
    pub map_checks: u64,
    /// Map versions seen that call a server down (replicated runs).
    pub down_maps: u64,
    /// Map versions seen in which a standby leads a metadata group (replicated runs).
    pub taken_over_maps: u64,
    /// Connections made.
    pub connections: u64,
    /// Simulated time the run took.
    pub sim_time: Duration,
    /// Events in the trace, and their hash (equal for runs that did the same).
    pub events: usize,
    /// See `events`.
    pub trace_hash: u64,
    /// Whether tokio's scheduler was seeded (built with `--cfg tokio_unstable`):
    /// without it, runs of one seed may differ where `select!` chose a branch.
    pub seeded_scheduler: bool,
}

/// Seconds of the simulated clock's start (2026-01-01) since the Unix epoch.
pub const EPOCH: u64 = 1_767_225_600;

/// The simulation's clock and ids (`pvfs_proto::clock`).
struct SimClock {
    start: tokio::time::Instant,
    rng: Rng,
}

impl pvfs_proto::clock::Hooks for SimClock {
    fn now(&self) -> Duration {
        let d = tokio::time::Instant::now().saturating_duration_since(self.start);
        Duration::from_secs(EPOCH) + d
    }
    fn random_u64(&self) -> u64 {
        self.rng.next_u64()
    }
}

/// Longest simulated time a run may take.
const RUN_LIMIT: Duration = Duration::from_secs(3600);

/// Runs one simulation of `opts` from `seed`: the report, or the failure with the
/// trace of everything that led to it.
pub fn run(seed: u64, opts: &Options) -> Result<Report, (Failure, Vec<String>)> {
    let trace = Trace::default();
    let result = block_on(seed, async {
        let started = tokio::time::Instant::now();
        let r = tokio::time::timeout(RUN_LIMIT, simulate(seed, opts, trace.clone())).await;
        match r {
            Ok(r) => r.map(|mut rep| {
                rep.sim_time = started.elapsed();
                rep
            }),
            Err(_) => Err(Failure::Stuck(format!(
                "the run did not end within {RUN_LIMIT:?} of simulated time"
            ))),
        }
    })
    .map_err(|e| (e, Vec::new()))?;
    match result {
        Ok(mut rep) => {
            rep.events = trace.events().len();
            rep.trace_hash = trace.hash();
            Ok(rep)
        }
        Err(f) => Err((f, trace.events())),
    }
}

/// Runs `fut` as the simulator runs a whole run: on one thread under a seeded
/// scheduler, in simulated time, with the simulation's clock and ids drawn from
/// `seed`. For tests that play out one scene step by step (a race in a fixed order)
/// over a [`Cluster`] and a [`SimNet`] of their own.
pub fn block_on<F: std::future::Future>(seed: u64, fut: F) -> Result<F::Output, Failure> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all().start_paused(true);
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let rt = builder
        .build()
        .map_err(|e| Failure::Setup(format!("runtime: {e}")))?;
    let out = rt.block_on(async {
        let _clock = pvfs_proto::clock::install(Box::new(SimClock {
            start: tokio::time::Instant::now(),
            rng: Rng::new(seed ^ 0x5eed_c10c),
        }));
        fut.await
    });
    drop(rt);
    Ok(out)
}

async fn simulate(seed: u64, opts: &Options, trace: Trace) -> Result<Report, Failure> {
    let rng = Rng::new(seed);
    // Faults added later draw from streams of their own, so that a run without them
    // is the run its seed made before they existed.
    let net = SimNet::new(rng.clone(), Rng::new(seed ^ 0x57a1_1ed0), opts.latency);
    let reset_rng = Rng::new(seed ^ 0x4e5e_7000);
    let replicated = opts.replicas > 1;
    let mut cluster = Cluster::start(
        opts.servers,
        net.clone(),
        rng.clone(),
        opts.power_loss,
        opts.replicas,
    )
    .await
    .map_err(Failure::Setup)?;
    let mut maps = check::Maps::default();
    maps.trace = Some(trace.clone());
    if replicated {
        // The file system serves once its authority formed and every server is up.
        let start = tokio::time::Instant::now();
        while !check::Maps::all_up(&cluster) {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(Failure::Setup(
                    "the servers were not all up within 60 s of simulated time".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            maps.check(&cluster)?;
        }
        trace.push("every server up".into());
    }
    let crashes = Arc::new(Mutex::new(vec![0u64; opts.servers]));
    let shared = Arc::new(Shared {
        trace: trace.clone(),
        lock: Arc::new(Mutex::new(LockWitness::default())),
        appends: Arc::new(Mutex::new(AppendWitness::default())),
        crashes: crashes.clone(),
        config: cluster.config.clone(),
        replicated,
    });
    let mut workers = Vec::new();
    for k in 0..opts.clients {
        let client = pvfs_client::Client::over(cluster.config.clone(), net.node(&format!("c{k}")));
        let mut w = Worker::new(k, client, Rng::new(rng.next_u64()), shared.clone());
        w.fsync = opts.power_loss;
        if opts.settle {
            w.transit = opts.latency.max + opts.latency.stall_max + Duration::from_millis(100);
            w.settle = true;
        }
        let ops = opts.ops;
        workers.push(tokio::spawn(async move {
            w.setup().await?;
            let counts = w.run(ops).await?;
            Ok::<_, Failure>((w, counts))
        }));
    }
    let mut report = Report {
        seed,
        #[cfg(tokio_unstable)]
        seeded_scheduler: true,
        ..Report::default()
    };
    // The nemesis, and the invariant checks, until every client is done.
    let mut restart_at: Vec<Option<tokio::time::Instant>> = vec![None; opts.servers];
    let mut heal_at: Option<tokio::time::Instant> = None;
    // Whether the cut now on is between two servers.
    let mut servers_cut = false;
    // The server that crashed last, and the newest map version then, until a map
    // calls it up again since a later version (caught up after its restart).
    let mut coming_back: Option<(usize, u64)> = None;
    while workers.iter().any(|w| !w.is_finished()) {
        tokio::time::sleep(Duration::from_millis(rng.range(2, 40))).await;
        check::always(&cluster)?;
        report.checks += 1;
        if replicated {
            maps.check(&cluster)?;
        }
        let now = tokio::time::Instant::now();
        for (i, at) in restart_at.iter_mut().enumerate() {
            if at.is_some_and(|t| t <= now) {
                *at = None;
                cluster.start_server(i).await.map_err(Failure::Setup)?;
                trace.push(format!("restart {}", cluster.name(i)));
                check::always(&cluster)?;
                report.checks += 1;
                if replicated {
                    maps.check(&cluster)?;
                }
            }
        }
        if heal_at.is_some_and(|t| t <= now) {
            heal_at = None;
            servers_cut = false;
            net.heal();
            trace.push("heal".into());
        }
        if opts.crashes && rng.chance(0.04) {
            let i = rng.range(0, opts.servers as u64) as usize;
            // With two copies one server may be down at a time: the next crash waits
            // until every server runs and the map calls every one up again (caught up).
            let one_at_a_time = !replicated
                || (settled(&cluster, &mut coming_back) && !(opts.one_fault && servers_cut));
            if cluster.is_up(i) && one_at_a_time {
                let power = opts.power_loss && rng.chance(0.5);
                if replicated {
                    let version = check::Maps::newest(&cluster).map_or(0, |m| m.version);
                    coming_back = Some((i, version));
                }
                // Traced when the server drops off the network: what is left of
                // its process may take a while to stop (the time the crash takes
                // in the trace until the server is gone).
                let how = if power { "power loss" } else { "crash" };
                trace.push(format!("{how} {}", cluster.name(i)));
                cluster.crash(i, power).await;
                trace.push(format!("{} gone", cluster.name(i)));
                if let Ok(mut c) = crashes.lock() {
                    c[i] += 1;
                }
                report.crashes += 1;
                if power {
                    report.power_losses += 1;
                }
                // A replicated server stays down past its lease now and then, so
                // that the authority calls it down and its roles move.
                let most = if replicated { 3000 } else { 1500 };
                restart_at[i] = Some(now + Duration::from_millis(rng.range(20, most)));
            }
        }
        if opts.resets && reset_rng.chance(0.04) {
            if let Some((a, b)) = net.reset_one(|n| reset_rng.range(0, n as u64) as usize) {
                report.resets += 1;
                trace.push(format!("reset {a} {b}"));
            }
        }
        if opts.partitions && heal_at.is_none() && rng.chance(0.03) {
            let a = rng.range(0, opts.servers as u64) as usize;
            let other = if rng.chance(0.5) {
                format!("c{}", rng.range(0, opts.clients as u64))
            } else {
                cluster
                    .name(rng.range(0, opts.servers as u64) as usize)
                    .to_string()
            };
            let a = cluster.name(a).to_string();
            // With copies, two servers are cut off from each other only while no
            // other fault is on (the numbers are drawn all the same).
            let between_servers = !other.starts_with('c');
            let another_fault = replicated
                && opts.one_fault
                && between_servers
                && !settled(&cluster, &mut coming_back);
            if a != other && !another_fault {
                servers_cut = between_servers;
                net.partition(&a, &other);
                report.partitions += 1;
                trace.push(format!("partition {a} {other}"));
                heal_at = Some(now + Duration::from_millis(rng.range(20, 1500)));
            }
        }
    }
    // Quiet: every server up, every link whole, no write stalls.
    net.heal();
    net.calm();
    for i in 0..opts.servers {
        cluster.start_server(i).await.map_err(Failure::Setup)?;
    }
    if replicated {
        // Every server back in the map (caught up) before the last checks.
        let start = tokio::time::Instant::now();
        while !check::Maps::all_up(&cluster) {
            if start.elapsed() > Duration::from_secs(120) {
                return Err(Failure::Stuck(format!(
                    "the servers were not all up within 120 s of the end: {:?}",
                    check::Maps::newest(&cluster)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            maps.check(&cluster)?;
        }
        trace.push("every server up".into());
    }
    let mut done = Vec::new();
    for w in workers {
        match w.await {
            Ok(Ok((w, counts))) => done.push((w, counts)),
            Ok(Err(Failure::Check(f))) if std::env::var_os("PVFS_SIM_DUMP").is_some() => {
                return Err(Failure::Check(format!(
                    "{f}\nstores:\n{}",
                    check::dump(&cluster)
                )));
            }
            Ok(Err(f)) => return Err(f),
            Err(e) => return Err(Failure::Check(format!("a client task failed: {e}"))),
        }
    }
    check::always(&cluster)?;
    // fsck counts the names a crash left uncounted (a rename interrupted between
    // its steps) and removes what it left behind; then the strict invariants hold.
    let admin = pvfs_client::Client::over(cluster.config.clone(), net.node("fsck"));
    let repaired = admin
        .fsck(true, Duration::ZERO)
        .await
        .map_err(|e| Failure::Check(format!("fsck --repair: {e}")))?;
    trace.push(format!("fsck: {} problems", repaired.problems.len()));
    for p in &repaired.problems {
        trace.push(format!(
            "fsck: {:?} {} (repaired: {})",
            p.kind, p.what, p.repaired
        ));
    }
    let again = admin
        .fsck(false, Duration::ZERO)
        .await
        .map_err(|e| Failure::Check(format!("fsck: {e}")))?;
    if !again.problems.is_empty() {
        return Err(Failure::Check(format!(
            "fsck still finds {} problems after its repair: {:?}",
            again.problems.len(),
            again.problems
        )));
    }
    check::quiet(&cluster)?;
    report.checks += 2;
    for (w, counts) in &mut done {
        w.verify().await?;
        let c = &mut report.counts;
        c.ops += counts.ops;
        c.ok += counts.ok;
        c.refused += counts.refused;
        c.indeterminate += counts.indeterminate;
        c.cross_renames += counts.cross_renames;
        c.links += counts.links;
        c.locks += counts.locks;
        c.resumed_moves += counts.resumed_moves;
        c.held_reads += counts.held_reads;
        c.appends += counts.appends;
    }
    if replicated {
        maps.check(&cluster)?;
    }
    report.map_checks = maps.looks;
    report.down_maps = maps.downs;
    report.taken_over_maps = maps.taken_over;
    report.connections = net.connections();
    report.stalls = net.stalls();
    cluster.stop().await;
    Ok(report)
}

/// Whether no fault of a server is on: every server runs, the map calls every one
/// up, and the last one to crash (`coming_back`, with the newest map version at its
/// crash) was called up again since, caught up after its restart (then forgotten).
fn settled(cluster: &Cluster, coming_back: &mut Option<(usize, u64)>) -> bool {
    if let Some((j, v)) = *coming_back {
        let back = check::Maps::newest(cluster).is_some_and(|m| {
            m.servers
                .get(j)
                .is_some_and(|e| e.state == pvfs_proto::map::ServerState::Up && e.joined > v)
        });
        if back {
            *coming_back = None;
        }
    }
    coming_back.is_none()
        && (0..cluster.len()).all(|j| cluster.is_up(j))
        && check::Maps::all_up(cluster)
}
