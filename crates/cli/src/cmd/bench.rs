//! `pvfs bench concurrent`: the PVFS paper's concurrent read/write test (Carns et al.,
//! 2000, "PVFS: A Parallel File System for Linux Clusters", §4).
//!
//! P clients (each with its own connections; with `--processes`, separate OS
//! processes) open one shared new file; each writes its own contiguous region of
//! `--size-per-client` bytes in calls of `--block` bytes; the file is closed and
//! reopened; each reads its region back and verifies every byte. Aggregate bandwidth
//! is total bytes over the slowest client's time, for the write and the read phase.
//! CPU time of the clients and of the servers running on this machine is measured
//! too, so the cost per GiB is visible, not only the speed.
//!
//! Data pattern: each client fills one block-sized buffer with pseudo-random bytes
//! once, then stamps the first 8 bytes of every 4 KiB page with the page's file offset
//! and the client's rank before writing it; verification checks the stamps and
//! compares the rest with the pattern, so a misplaced page or stripe is caught.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use pvfs_client::{Client, LayoutSpec};
use pvfs_config::{format_size, parse_size, Config};

use crate::cmd::{load_config, runtime};
use crate::ConfigArg;

/// Options of `pvfs bench`.
#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    kind: BenchKind,
}

#[derive(Subcommand)]
enum BenchKind {
    /// P clients write disjoint regions of one new file, then read them back (the PVFS
    /// paper's concurrent read/write test, Carns et al., 2000, §4).
    Concurrent(ConcurrentArgs),
    /// Metadata: P clients create N files in one shared new directory, list it,
    /// stat every file, remove them (the shared-file-system study's single-directory
    /// metarates test, Cope et al., 2005).
    Meta(MetaArgs),
    /// Sustained load: many clients mixing metadata and data operations, every read
    /// verified, server memory sampled.
    Mixed(crate::cmd::bench_mixed::MixedArgs),
    /// One client process of `concurrent --processes` (internal).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

/// Options of `pvfs bench meta`.
#[derive(Args)]
pub struct MetaArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Number of clients (each with its own connections).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Files created in the shared directory, in total.
    #[arg(long, default_value_t = 10_000)]
    files: usize,
    /// Operations each client keeps in flight.
    #[arg(long, default_value_t = 16)]
    depth: usize,
    /// Bytes written into each file right after its create, in the create phase (K, M
    /// or G suffixes): with more than 0, every create also makes a datafile on a data
    /// server (small-file creates); 0 creates empty files (metadata only).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    write: u64,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Options of `pvfs bench concurrent`.
#[derive(Args, Clone)]
pub struct ConcurrentArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Number of clients.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Bytes each client writes and reads (K, M, G, T or P suffixes: powers of 1024).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    size_per_client: u64,
    /// Stripe size of the test file.
    #[arg(long, value_parser = parse_size)]
    stripe_size: Option<u64>,
    /// Stripe count of the test file.
    #[arg(long)]
    stripe_count: Option<u32>,
    /// Bytes per read or write call.
    #[arg(long, default_value = "16M", value_parser = parse_size)]
    block: u64,
    /// Run each client as a separate OS process.
    #[arg(long)]
    processes: bool,
    /// fsync at the end of the write phase (inside the timed part).
    #[arg(long)]
    fsync: bool,
    /// Path of the test file (default: a new name in the root directory).
    #[arg(long)]
    path: Option<String>,
    /// Keep the test file.
    #[arg(long)]
    keep: bool,
    /// Interleave the clients' regions in units of this size (client r owns units r,
    /// r+P, r+2P, ...: the strided pattern of an MPI file view), written through the
    /// partitioned-file interface; default: contiguous regions.
    #[arg(long, value_parser = parse_size)]
    interleave: Option<u64>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Options of the hidden worker.
#[derive(Args)]
struct WorkerArgs {
    #[command(flatten)]
    config: ConfigArg,
    #[arg(long)]
    path: String,
    #[arg(long)]
    rank: u64,
    #[arg(long)]
    size: u64,
    #[arg(long)]
    block: u64,
    #[arg(long)]
    read: bool,
    #[arg(long)]
    fsync: bool,
    #[arg(long)]
    interleave: Option<u64>,
    #[arg(long)]
    clients: u64,
}

/// Result of one phase.
#[derive(Clone, Debug)]
pub struct Phase {
    /// Bytes moved by all clients.
    pub bytes: u64,
    /// The slowest client's time.
    pub slowest: Duration,
    /// CPU seconds used by the clients.
    pub client_cpu: f64,
    /// CPU seconds used by local servers (None when they are not on this machine).
    pub server_cpu: Option<f64>,
}

impl Phase {
    /// Aggregate bandwidth in MiB/s.
    pub fn mib_per_sec(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64 / self.slowest.as_secs_f64().max(1e-9)
    }

    /// CPU seconds (clients and servers) per GiB moved.
    pub fn cpu_per_gib(&self) -> f64 {
        (self.client_cpu + self.server_cpu.unwrap_or(0.0))
            / (self.bytes as f64 / (1u64 << 30) as f64)
    }
}

/// Runs `pvfs bench`.
pub fn run(a: BenchArgs) -> anyhow::Result<ExitCode> {
    match a.kind {
        BenchKind::Concurrent(c) => {
            let config = load_config(&c.config.config)?;
            let (w, r) = concurrent(&config, &c)?;
            print!("{}", report(&c, &config, &w, &r)?);
            Ok(ExitCode::SUCCESS)
        }
        BenchKind::Meta(m) => meta(m),
        BenchKind::Mixed(m) => crate::cmd::bench_mixed::run(m),
        BenchKind::Worker(w) => worker(w),
    }
}

/// Runs `pvfs bench meta`.
fn meta(m: MetaArgs) -> anyhow::Result<ExitCode> {
    if m.clients == 0 || m.depth == 0 {
        bail!("--clients and --depth must be positive");
    }
    let config = load_config(&m.config.config)?;
    let rt = runtime()?;
    let dir = format!(
        "/bench-meta-{}-{}",
        std::process::id(),
        pvfs_proto::Timespec::now().nsecs
    );
    let admin = {
        let _g = rt.enter();
        Client::new(config.clone())
    };
    rt.block_on(admin.mkdir(&dir, 0o755))?;
    let names: Vec<String> = (0..m.files).map(|i| format!("{dir}/f{i:07}")).collect();
    let clients: Vec<Client> = {
        let _g = rt.enter();
        (0..m.clients)
            .map(|_| Client::new(config.clone()))
            .collect()
    };
    let data: std::sync::Arc<Vec<u8>> = std::sync::Arc::new(
        (0..usize::try_from(m.write)?)
            .map(|i| (i % 251) as u8)
            .collect(),
    );
    #[derive(Clone, Copy)]
    enum Op {
        Create,
        Stat,
        Unlink,
    }
    let run_op = |op: Op| -> anyhow::Result<f64> {
        let start = Instant::now();
        rt.block_on(async {
            let tasks: Vec<_> = clients
                .iter()
                .enumerate()
                .map(|(rank, client)| {
                    let client = client.clone();
                    let mine: Vec<String> = names
                        .iter()
                        .skip(rank)
                        .step_by(m.clients)
                        .cloned()
                        .collect();
                    let depth = m.depth;
                    let data = data.clone();
                    tokio::spawn(async move {
                        use futures::StreamExt;
                        let results: Vec<pvfs_client::Result<()>> = futures::stream::iter(mine)
                            .map(|name| {
                                let client = client.clone();
                                let data = data.clone();
                                async move {
                                    match op {
                                        Op::Create => {
                                            let f = client
                                                .create(&name, 0o644, LayoutSpec::default(), true)
                                                .await?;
                                            f.write_at(0, &data).await.map(|_| ())
                                        }
                                        Op::Stat => client.stat(&name).await.map(|_| ()),
                                        Op::Unlink => client.unlink(&name).await,
                                    }
                                }
                            })
                            .buffer_unordered(depth)
                            .collect()
                            .await;
                        results.into_iter().collect::<pvfs_client::Result<()>>()
                    })
                })
                .collect();
            for t in tasks {
                t.await.context("bench client task failed")??;
            }
            Ok::<_, anyhow::Error>(())
        })?;
        Ok(start.elapsed().as_secs_f64())
    };
    let create = run_op(Op::Create)?;
    let start = Instant::now();
    let listed = rt.block_on(admin.readdir(&dir))?.len();
    let list = start.elapsed().as_secs_f64();
    if listed != m.files {
        bail!("readdir found {listed} entries, expected {}", m.files);
    }
    let start = Instant::now();
    let plus = rt.block_on(admin.readdir_plus(&dir, true))?;
    let list_plus = start.elapsed().as_secs_f64();
    if let Some((e, Err(err))) = plus.iter().find(|(_, r)| r.is_err()) {
        bail!("readdir_plus: {}: {}", e.name, err.message);
    }
    let stat = run_op(Op::Stat)?;
    let unlink = run_op(Op::Unlink)?;
    rt.block_on(admin.rmdir(&dir))?;
    let n = m.files as f64;
    if m.json {
        let v = serde_json::json!({
            "clients": m.clients, "files": m.files, "depth": m.depth, "write_bytes": m.write,
            "create_per_sec": n / create, "stat_per_sec": n / stat, "unlink_per_sec": n / unlink,
            "readdir_secs": list, "readdir_plus_secs": list_plus,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let written = if m.write > 0 {
            format!(", {} bytes written into each", m.write)
        } else {
            String::new()
        };
        println!(
            "meta: {} clients x {} in flight, {} files in one directory{written}",
            m.clients, m.depth, m.files
        );
        let what = if m.write > 0 {
            "create+write"
        } else {
            "create"
        };
        println!("{what:<13} {:>10.0} /s  ({create:.2}s)", n / create);
        println!("readdir       {:>10.0} entries/s  ({list:.3}s)", n / list);
        println!(
            "readdir+attrs {:>10.0} entries/s  ({list_plus:.3}s)",
            n / list_plus
        );
        println!("stat          {:>10.0} /s  ({stat:.2}s)", n / stat);
        println!("unlink        {:>10.0} /s  ({unlink:.2}s)", n / unlink);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs both phases and returns (write, read).
pub fn concurrent(config: &Config, c: &ConcurrentArgs) -> anyhow::Result<(Phase, Phase)> {
    if c.clients == 0 || c.size_per_client == 0 || c.block == 0 {
        bail!("--clients, --size-per-client and --block must be positive");
    }
    let rt = runtime()?;
    let path = c.path.clone().unwrap_or_else(|| {
        format!(
            "/bench-{}-{}",
            std::process::id(),
            pvfs_proto::Timespec::now().nsecs
        )
    });
    let spec = LayoutSpec {
        stripe_size: c.stripe_size,
        stripe_count: c.stripe_count,
        base: None,
        replicas: None,
    };
    let admin = {
        let _g = rt.enter();
        Client::new(config.clone())
    };
    rt.block_on(admin.create(&path, 0o644, spec, true))?;
    let write = phase(&rt, config, c, &path, false)?;
    let read = phase(&rt, config, c, &path, true)?;
    if !c.keep {
        rt.block_on(admin.unlink(&path))?;
    }
    Ok((write, read))
}

fn phase(
    rt: &tokio::runtime::Runtime,
    config: &Config,
    c: &ConcurrentArgs,
    path: &str,
    read: bool,
) -> anyhow::Result<Phase> {
    let servers_before = server_cpu(config);
    let cpu_before = cpu_times();
    let times: Vec<Duration> = if c.processes {
        let exe = std::env::current_exe().context("cannot find the pvfs executable")?;
        let children = (0..c.clients as u64)
            .map(|rank| {
                let mut cmd = Command::new(&exe);
                cmd.args(["bench", "worker", "--config"])
                    .arg(&c.config.config)
                    .args(["--path", path])
                    .args(["--rank", &rank.to_string()])
                    .args(["--size", &c.size_per_client.to_string()])
                    .args(["--block", &c.block.to_string()])
                    .args(["--clients", &c.clients.to_string()])
                    .stdout(Stdio::piped());
                if let Some(unit) = c.interleave {
                    cmd.args(["--interleave", &unit.to_string()]);
                }
                if read {
                    cmd.arg("--read");
                }
                if c.fsync {
                    cmd.arg("--fsync");
                }
                cmd.spawn().context("cannot start a bench worker")
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut times = Vec::new();
        for child in children {
            let out = child.wait_with_output().context("bench worker failed")?;
            if !out.status.success() {
                bail!("a bench worker failed ({})", out.status);
            }
            let secs: f64 = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .context("bench worker printed no time")?;
            times.push(Duration::from_secs_f64(secs));
        }
        times
    } else {
        rt.block_on(async {
            let tasks: Vec<_> = (0..c.clients as u64)
                .map(|rank| {
                    let client = Client::new(config.clone());
                    let job = Job {
                        path: path.to_string(),
                        rank,
                        clients: c.clients as u64,
                        size: c.size_per_client,
                        block: c.block,
                        read,
                        fsync: c.fsync,
                        interleave: c.interleave,
                    };
                    tokio::spawn(async move { one_client(client, job).await })
                })
                .collect();
            let mut times = Vec::new();
            for t in tasks {
                times.push(t.await.context("bench client task failed")??);
            }
            Ok::<_, anyhow::Error>(times)
        })?
    };
    let cpu_after = cpu_times();
    let servers_after = server_cpu(config);
    let client_cpu = if c.processes {
        cpu_after.1 - cpu_before.1
    } else {
        cpu_after.0 - cpu_before.0
    };
    Ok(Phase {
        bytes: c.size_per_client * c.clients as u64,
        slowest: times.into_iter().max().unwrap_or_default(),
        client_cpu,
        server_cpu: servers_before.zip(servers_after).map(|(b, a)| a - b),
    })
}

/// One client's part: open, write or read+verify its region, close. Returns the time
/// spent, excluding verification.
/// What one benchmark client does.
#[derive(Clone, Debug)]
pub struct Job {
    /// The shared file.
    pub path: String,
    /// This client's number.
    pub rank: u64,
    /// Number of clients.
    pub clients: u64,
    /// Bytes this client moves.
    pub size: u64,
    /// Bytes per call.
    pub block: u64,
    /// Read and verify instead of write.
    pub read: bool,
    /// fsync after writing.
    pub fsync: bool,
    /// Interleaved units of this size instead of one contiguous region.
    pub interleave: Option<u64>,
}

/// One client's part: open, write or read+verify its region, close. Returns the time
/// spent, excluding verification.
pub async fn one_client(client: Client, job: Job) -> anyhow::Result<Duration> {
    let Job {
        ref path,
        rank,
        clients,
        size,
        block,
        read,
        fsync,
        interleave,
    } = job;
    let start = Instant::now();
    let file = client.open(path).await?;
    // Contiguous: this client's region starts at rank * size. Interleaved: positions are
    // in this client's partition (units rank, rank + P, ...), mapped by the server side.
    let partition = interleave.map(|unit| pvfs_client::Partition {
        offset: rank * unit,
        gsize: unit,
        stride: clients.max(1) * unit,
    });
    let base = if partition.is_some() { 0 } else { rank * size };
    let block = block.min(size) as usize;
    let pattern = pattern(rank, block);
    let mut buf = pattern.clone();
    let mut off = 0u64;
    let mut verify_time = Duration::ZERO;
    while off < size {
        let n = (block as u64).min(size - off) as usize;
        let at = base + off;
        if read {
            let got = match &partition {
                Some(p) => file.read_partition(p, at, &mut buf[..n]).await?,
                None => file.read_at(at, &mut buf[..n]).await?,
            };
            if got != n {
                bail!("client {rank}: short read at {at}: {got} of {n} bytes");
            }
            let t = Instant::now();
            verify(&buf[..n], &pattern[..n], rank, at)?;
            verify_time += t.elapsed();
        } else {
            stamp(&mut buf[..n], rank, at);
            match &partition {
                Some(p) => file.write_partition(p, at, &buf[..n]).await?,
                None => file.write_at(at, &buf[..n]).await?,
            };
        }
        off += n as u64;
    }
    if fsync && !read {
        file.fsync().await?;
    }
    Ok(start.elapsed() - verify_time)
}

const PAGE: usize = 4096;

fn pattern(rank: u64, len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (rank + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn stamp_value(rank: u64, offset: u64) -> [u8; 8] {
    (offset ^ rank.rotate_left(48) ^ 0x5056_4653_0000_0000).to_le_bytes()
}

/// Stamps every page of `buf` (at file offset `at`) with its offset and the rank.
fn stamp(buf: &mut [u8], rank: u64, at: u64) {
    let mut i = 0;
    while i < buf.len() {
        let n = 8.min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&stamp_value(rank, at + i as u64)[..n]);
        i += PAGE;
    }
}

fn verify(buf: &[u8], pattern: &[u8], rank: u64, at: u64) -> anyhow::Result<()> {
    let mut i = 0;
    while i < buf.len() {
        let end = (i + PAGE).min(buf.len());
        let n = 8.min(end - i);
        let want = stamp_value(rank, at + i as u64);
        if buf[i..i + n] != want[..n] || buf[i + n..end] != pattern[i + n..end] {
            bail!(
                "client {rank}: data mismatch in the page at file offset {}",
                at + i as u64
            );
        }
        i = end;
    }
    Ok(())
}

fn worker(w: WorkerArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&w.config.config)?;
    let rt = runtime()?;
    let took = rt.block_on(async {
        let client = Client::new(config);
        let job = Job {
            path: w.path.clone(),
            rank: w.rank,
            clients: w.clients,
            size: w.size,
            block: w.block,
            read: w.read,
            fsync: w.fsync,
            interleave: w.interleave,
        };
        one_client(client, job).await
    })?;
    println!("{}", took.as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

/// (this process's CPU seconds, its waited-for children's CPU seconds).
fn cpu_times() -> (f64, f64) {
    let get = |who| {
        // SAFETY: getrusage fills the struct we pass; zeroed is a valid initial value.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid `who` constant and a pointer to a live rusage.
        unsafe { libc::getrusage(who, &mut u) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(u.ru_utime) + tv(u.ru_stime)
    };
    (get(libc::RUSAGE_SELF), get(libc::RUSAGE_CHILDREN))
}

/// Total CPU seconds of the servers of `config` running on this machine, if all are.
fn server_cpu(config: &Config) -> Option<f64> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut total = 0.0;
    for sc in &config.servers {
        let pid = crate::cmd::server::running_pid(sc)?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
        // Fields after the command: state is index 0, utime 11, stime 12.
        let utime: f64 = fields.get(11)?.parse().ok()?;
        let stime: f64 = fields.get(12)?.parse().ok()?;
        total += (utime + stime) / ticks;
    }
    Some(total)
}

/// A benchmark's result as text (JSON with `--json`), lines ending in newlines.
fn report(c: &ConcurrentArgs, config: &Config, w: &Phase, r: &Phase) -> anyhow::Result<String> {
    use std::fmt::Write;
    let mut out = String::new();
    let stripe_size = c.stripe_size.unwrap_or(config.defaults.stripe_size);
    let stripe_count = c.stripe_count.unwrap_or(config.defaults.stripe_count);
    if c.json {
        let ph = |p: &Phase| {
            serde_json::json!({
                "bytes": p.bytes, "slowest_secs": p.slowest.as_secs_f64(),
                "mib_per_sec": p.mib_per_sec(), "client_cpu_secs": p.client_cpu,
                "server_cpu_secs": p.server_cpu, "cpu_secs_per_gib": p.cpu_per_gib(),
            })
        };
        let v = serde_json::json!({
            "clients": c.clients, "size_per_client": c.size_per_client, "block": c.block,
            "stripe_size": stripe_size, "stripe_count": stripe_count,
            "processes": c.processes, "fsync": c.fsync, "interleave": c.interleave,
            "write": ph(w), "read": ph(r),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(out);
    }
    writeln!(
        out,
        "concurrent: {} clients ({}) x {}, stripe {} x {}, block {}{}",
        c.clients,
        if c.processes { "processes" } else { "tasks" },
        format_size(c.size_per_client),
        format_size(stripe_size),
        stripe_count,
        format_size(c.block),
        c.interleave
            .map(|u| format!(", interleaved in units of {}", format_size(u)))
            .unwrap_or_default()
    )?;
    writeln!(
        out,
        "{:<6} {:>10} {:>10} {:>12} {:>11} {:>11} {:>10}",
        "phase", "bytes", "slowest s", "MiB/s", "client cpu", "server cpu", "cpu s/GiB"
    )?;
    for (name, p) in [("write", w), ("read", r)] {
        writeln!(
            out,
            "{name:<6} {:>10} {:>10.3} {:>12.0} {:>11.2} {:>11} {:>10.2}",
            format_size(p.bytes),
            p.slowest.as_secs_f64(),
            p.mib_per_sec(),
            p.client_cpu,
            p.server_cpu
                .map(|s| format!("{s:.2}"))
                .unwrap_or_else(|| "-".into()),
            p.cpu_per_gib()
        )?;
    }
    Ok(out)
}

/// Arguments for running the benchmark from code (the demo).
pub fn args(config: PathBuf, clients: usize, size_per_client: u64) -> ConcurrentArgs {
    ConcurrentArgs {
        config: ConfigArg { config },
        clients,
        size_per_client,
        stripe_size: None,
        stripe_count: None,
        block: 16 << 20,
        processes: false,
        fsync: false,
        path: None,
        keep: false,
        json: false,
        interleave: None,
    }
}

/// A benchmark's result as the CLI prints it.
pub fn render(c: &ConcurrentArgs, config: &Config, w: &Phase, r: &Phase) -> anyhow::Result<String> {
    report(c, config, w, r)
}
