//! Runs the simulator: `cargo run --release -p pvfs-sim --example sim -- [--seed N]
//! [--seeds COUNT | --minutes M] [--servers S] [--clients C] [--ops O] [--no-crashes]
//! [--no-partitions] [--no-resets] [--no-stalls] [--no-power-loss]
//! [--no-settle] [--replicas R] [--two-faults] [--trace] [--log]`. Prints one line per failing seed (with the command
//! that replays it) and a summary: runs, operations, faults, schedules a minute.

use std::time::{Duration, Instant};

use pvfs_sim::{run, Options};

/// What `--help` prints.
const USAGE: &str = "\
usage: sim [--seed N] [--seeds COUNT | --minutes M] [--servers S] [--clients C] [--ops O]
           [--no-crashes] [--no-partitions] [--no-resets] [--no-stalls] [--no-power-loss]
           [--no-settle] [--replicas R] [--two-faults] [--trace] [--log]

Runs seeded schedules of the simulated cluster (servers, clients, network, disks in one
thread, faults chosen by the seed) from seed N (default 1): COUNT of them, or as many as
fit in M minutes (default one). Prints one line per failing seed with the command that
replays it, then a summary. PVFS_SIM_DUMP=1 prints a failing run's state; --log prints
the servers' and clients' log lines (filter in PVFS_LOG, default debug). --no-settle:
a client looks at once at what an operation without an answer did (as the simulator
did first; only to replay seeds found then). --replicas 2: a file system with two
copies of everything (an authority, leases, chains, metadata standbys), crashes of one
server at a time, no partitions and no power losses (add --partitions, --power-loss to
have them), and the replication invariants checked; a cut between two servers counts
as a fault then (no crash while one is on), unless --two-faults (only to replay the
replicated seeds found before, whose schedules had both at once).
";

/// Stamps log lines with the simulated clock: seconds since the run's start.
struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        let t = pvfs_proto::clock::now().saturating_sub(Duration::from_secs(pvfs_sim::EPOCH));
        write!(w, "{}.{:06}", t.as_secs(), t.subsec_micros())
    }
}

fn main() {
    let mut opts = Options::default();
    let mut seed: u64 = 1;
    let mut seeds: Option<u64> = None;
    let mut minutes: Option<f64> = None;
    let mut trace = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || -> String {
            args.next().unwrap_or_else(|| {
                eprintln!("{a} needs a value");
                std::process::exit(2)
            })
        };
        let num = |s: String| -> u64 {
            let parsed = match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|_| {
                eprintln!("not a number: {s}");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--seed" => seed = num(val()),
            "--seeds" => seeds = Some(num(val())),
            "--minutes" => {
                minutes = Some(val().parse().unwrap_or_else(|_| {
                    eprintln!("--minutes takes a number");
                    std::process::exit(2)
                }))
            }
            "--servers" => opts.servers = num(val()) as usize,
            "--clients" => opts.clients = num(val()) as usize,
            "--ops" => opts.ops = num(val()) as usize,
            "--no-crashes" => opts.crashes = false,
            "--no-partitions" => opts.partitions = false,
            "--no-resets" => opts.resets = false,
            "--no-stalls" => opts.latency.stall_chance = 0.0,
            "--no-settle" => opts.settle = false,
            "--two-faults" => opts.one_fault = false,
            "--no-power-loss" => opts.power_loss = false,
            "--replicas" => {
                let r = num(val()) as u32;
                if r > 1 {
                    let o = Options::replicated();
                    opts.replicas = r;
                    opts.power_loss = o.power_loss;
                    opts.partitions = o.partitions;
                }
            }
            "--partitions" => opts.partitions = true,
            "--power-loss" => opts.power_loss = true,
            "--trace" => trace = true,
            "--help" | "-h" => {
                print!("{USAGE}");
                return;
            }
            "--log" => {
                // Servers' and clients' log lines (PVFS_LOG, e.g. debug), stamped
                // with the simulated clock (seconds since the run's start).
                let filter = std::env::var("PVFS_LOG").unwrap_or_else(|_| "debug".into());
                tracing_subscriber::fmt()
                    .with_timer(SimTime)
                    .with_env_filter(filter)
                    .with_writer(std::io::stderr)
                    .init();
            }
            _ => {
                eprintln!("unknown argument {a}\n{USAGE}");
                std::process::exit(2)
            }
        }
    }
    let start = Instant::now();
    let until = minutes.map(|m| start + Duration::from_secs_f64(m * 60.0));
    let count = seeds.unwrap_or(if until.is_some() { u64::MAX } else { 1 });
    let (mut runs, mut failed, mut ops, mut crashes, mut partitions) = (0u64, 0u64, 0u64, 0, 0);
    let (mut resets, mut stalls, mut downs, mut taken) = (0u64, 0u64, 0u64, 0u64);
    for s in seed..seed.saturating_add(count) {
        if until.is_some_and(|u| Instant::now() >= u) {
            break;
        }
        runs += 1;
        match run(s, &opts) {
            Ok(r) => {
                ops += r.counts.ops;
                crashes += r.crashes;
                partitions += r.partitions;
                resets += r.resets;
                stalls += r.stalls;
                downs += r.down_maps;
                taken += r.taken_over_maps;
                if trace || count == 1 {
                    println!("{r:?}");
                }
            }
            Err((f, events)) => {
                failed += 1;
                println!("seed {s} ({s:#x}) FAILED: {f}");
                let shown = if trace {
                    0
                } else {
                    events.len().saturating_sub(40)
                };
                for line in &events[shown..] {
                    println!("    {line}");
                }
                println!("    replay: {}", opts.replay_command(s));
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{runs} runs from seed {seed} in {secs:.1} s ({:.0} schedules a minute): {failed} failed; \
         {ops} operations, {crashes} crashes, {partitions} partitions, {resets} connections \
         reset, {stalls} stalled writes; replication: {downs} map versions with a server \
         down, {taken} with a metadata group taken over",
        runs as f64 / secs * 60.0
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
