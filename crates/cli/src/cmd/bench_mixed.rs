//! `pvfs bench mixed`: a sustained load of many clients mixing metadata and data
//! operations, every read verified against each client's own model of its files, while
//! the servers' memory is sampled: a correct run has no error, no lost update, and
//! flat memory.
//!
//! Each client works in its own directory: it creates files with random contents,
//! overwrites random regions, reads files back (whole or in part) and compares them with
//! its model, renames, unlinks, makes directories, stats and lists. Any difference
//! between what the file system returns and the model is a lost update and fails the
//! run.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use pvfs_client::{Client, LayoutSpec};
use pvfs_config::{format_size, parse_duration, Config};

use crate::cmd::{load_config, runtime};
use crate::ConfigArg;

/// Options of `pvfs bench mixed`.
#[derive(Args)]
pub struct MixedArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Number of clients (each with its own connections).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// How long to run.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    /// Largest file a client writes.
    #[arg(long, default_value = "256K", value_parser = pvfs_config::parse_size)]
    max_file: u64,
    /// Seed of the clients' random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the files afterwards.
    #[arg(long)]
    keep: bool,
}

/// Files one client keeps at most (its model holds their contents: bounded memory).
const MAX_FILES: usize = 32;
/// Directories one client keeps at most, besides its own: at the cap an mkdir turns
/// into an rmdir of an empty one, so the namespace (and the servers' stores) reach a
/// steady size however long the run.
const MAX_DIRS: usize = 16;

/// Operations counted by kind.
const OPS: [&str; 9] = [
    "create",
    "overwrite",
    "read",
    "rename",
    "unlink",
    "mkdir",
    "stat",
    "list",
    "rmdir",
];

/// A tiny deterministic generator (xorshift), one per client.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

/// Runs `pvfs bench mixed`.
pub fn run(a: MixedArgs) -> anyhow::Result<ExitCode> {
    if a.clients == 0 {
        bail!("--clients must be positive");
    }
    let config = load_config(&a.config.config)?;
    let rt = runtime()?;
    let root = format!(
        "/bench-mixed-{}-{}",
        std::process::id(),
        pvfs_proto::Timespec::now().nsecs
    );
    let admin = {
        let _g = rt.enter();
        Client::new(config.clone())
    };
    rt.block_on(admin.mkdir(&root, 0o755))?;
    let stop = Arc::new(AtomicBool::new(false));
    let memory = Arc::new(Mutex::new(Vec::<Vec<u64>>::new()));
    let sampler = {
        let (stop, memory, config) = (stop.clone(), memory.clone(), config.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                if let Ok(mut m) = memory.lock() {
                    m.push(server_rss(&config));
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let started = Instant::now();
    let results = rt.block_on(async {
        let tasks: Vec<_> = (0..a.clients)
            .map(|i| {
                let client = Client::new(config.clone());
                let dir = format!("{root}/c{i}");
                let seed = a.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64 + 1);
                let stop = stop.clone();
                let max_file = a.max_file.max(1);
                tokio::spawn(async move { one_client(client, dir, seed, max_file, stop).await })
            })
            .collect();
        tokio::time::sleep(a.duration).await;
        stop.store(true, Ordering::Release);
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.context("a client task failed")?);
        }
        Ok::<_, anyhow::Error>(out)
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Release);
    let _ = sampler.join();
    let mut counts = [0u64; OPS.len()];
    let mut bytes = 0u64;
    let mut failures = Vec::new();
    for r in results {
        match r {
            Ok((c, b)) => {
                for (t, x) in counts.iter_mut().zip(c) {
                    *t += x;
                }
                bytes += b;
            }
            Err(e) => failures.push(e),
        }
    }
    println!(
        "mixed: {} clients for {elapsed:.0}s: {} operations ({:.0}/s), {} moved",
        a.clients,
        counts.iter().sum::<u64>(),
        counts.iter().sum::<u64>() as f64 / elapsed,
        format_size(bytes)
    );
    let per_kind: Vec<String> = OPS
        .iter()
        .zip(counts)
        .map(|(n, c)| format!("{n} {c}"))
        .collect();
    println!("  {}", per_kind.join(", "));
    let samples = memory.lock().map(|m| m.clone()).unwrap_or_default();
    if let (Some(first), Some(last)) = (
        samples.get(samples.len().min(5).saturating_sub(1)),
        samples.last(),
    ) {
        for (i, sc) in config.servers.iter().enumerate() {
            let peak = samples
                .iter()
                .filter_map(|s| s.get(i))
                .max()
                .copied()
                .unwrap_or(0);
            // Tenths of the run show whether memory levels off or keeps growing.
            let tenths: Vec<String> = (1..=10)
                .map(|k| {
                    let at = (samples.len() * k / 10).saturating_sub(1);
                    format_size(samples.get(at).and_then(|s| s.get(i)).copied().unwrap_or(0))
                })
                .collect();
            println!(
                "  {:<6} memory (RSS): {} after warm-up, {} at the end, peak {}; by tenths of the run: {}",
                sc.name,
                format_size(first.get(i).copied().unwrap_or(0)),
                format_size(last.get(i).copied().unwrap_or(0)),
                format_size(peak),
                tenths.join(" ")
            );
        }
    }
    if !a.keep {
        rt.block_on(crate::cmd::namespace::remove_tree(&admin, &root))?;
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("pvfs: {f:#}");
        }
        bail!("{} of {} clients failed", failures.len(), a.clients);
    }
    println!("  no errors, every read matched what was written");
    Ok(ExitCode::SUCCESS)
}

/// One client's loop; returns its operation counts and bytes moved.
async fn one_client(
    c: Client,
    dir: String,
    seed: u64,
    max_file: u64,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<([u64; OPS.len()], u64)> {
    let mut rng = Rng(seed | 1);
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut dirs = vec![dir.clone()];
    let mut counts = [0u64; OPS.len()];
    let mut bytes = 0u64;
    let mut next = 0u64;
    c.mkdir(&dir, 0o755).await?;
    let pick = |rng: &mut Rng, model: &BTreeMap<String, Vec<u8>>| {
        let n = model.len() as u64;
        (n > 0)
            .then(|| model.keys().nth(rng.below(n) as usize).cloned())
            .flatten()
    };
    while !stop.load(Ordering::Acquire) {
        let op = rng.below(100);
        let kind = match op {
            // A client at its file cap removes instead of creating.
            0..=19 if model.len() >= MAX_FILES => 4,
            0..=19 => 0,
            20..=34 => 1,
            35..=59 => 2,
            60..=67 => 3,
            68..=77 => 4,
            78..=81 => 5,
            82..=91 => 6,
            _ => 7,
        };
        match kind {
            0 => {
                next += 1;
                let d = &dirs[rng.below(dirs.len() as u64) as usize];
                let path = format!("{d}/f{next}");
                let len = rng.below(max_file) as usize + 1;
                let data = rng.bytes(len);
                let f = c.create(&path, 0o644, LayoutSpec::default(), true).await?;
                f.write_at(0, &data)
                    .await
                    .with_context(|| format!("write {path}"))?;
                bytes += data.len() as u64;
                model.insert(path, data);
            }
            1 => {
                let Some(path) = pick(&mut rng, &model) else {
                    continue;
                };
                let Some(content) = model.get_mut(&path) else {
                    continue;
                };
                let off = rng.below(content.len() as u64 + 1) as usize;
                let len = rng.below(max_file / 4 + 1) as usize + 1;
                let patch = rng.bytes(len);
                let f = c.open(&path).await?;
                f.write_at(off as u64, &patch)
                    .await
                    .with_context(|| format!("overwrite {path}"))?;
                if content.len() < off + len {
                    content.resize(off + len, 0);
                }
                content[off..off + len].copy_from_slice(&patch);
                bytes += len as u64;
            }
            2 => {
                let Some(path) = pick(&mut rng, &model) else {
                    continue;
                };
                let want = &model[&path];
                let f = c.open(&path).await?;
                let off = rng.below(want.len() as u64) as usize;
                let len = (want.len() - off).min(rng.below(max_file) as usize + 1);
                let mut got = vec![0u8; len + 7];
                let n = f
                    .read_at(off as u64, &mut got)
                    .await
                    .with_context(|| format!("read {path}"))?;
                let expect = &want[off..(off + len + 7).min(want.len())];
                if &got[..n] != expect {
                    bail!(
                        "lost update: {path} bytes {off}..{} differ from what was written",
                        off + n
                    );
                }
                bytes += n as u64;
            }
            3 => {
                let Some(from) = pick(&mut rng, &model) else {
                    continue;
                };
                next += 1;
                let d = &dirs[rng.below(dirs.len() as u64) as usize];
                let to = format!("{d}/r{next}");
                c.rename(&from, &to)
                    .await
                    .with_context(|| format!("rename {from} {to}"))?;
                if let Some(content) = model.remove(&from) {
                    model.insert(to, content);
                }
            }
            4 => {
                let Some(path) = pick(&mut rng, &model) else {
                    continue;
                };
                c.unlink(&path).await?;
                model.remove(&path);
            }
            5 if dirs.len() > MAX_DIRS => {
                // The first directory is the client's own and holds the others.
                let empty = (1..dirs.len())
                    .filter(|&i| !model.keys().any(|p| parent(p) == dirs[i].as_str()))
                    .collect::<Vec<_>>();
                if empty.is_empty() {
                    continue;
                }
                let i = empty[rng.below(empty.len() as u64) as usize];
                let path = dirs.swap_remove(i);
                c.rmdir(&path).await?;
                counts[8] += 1;
                continue;
            }
            5 => {
                next += 1;
                let path = format!("{dir}/d{next}");
                c.mkdir(&path, 0o755).await?;
                dirs.push(path);
            }
            6 => {
                let Some(path) = pick(&mut rng, &model) else {
                    continue;
                };
                let attr = c.stat(&path).await?;
                if attr.size != model[&path].len() as u64 {
                    bail!(
                        "lost update: {path} has {} bytes, {} were written",
                        attr.size,
                        model[&path].len()
                    );
                }
            }
            _ => {
                let d = &dirs[rng.below(dirs.len() as u64) as usize];
                let listed = c.readdir(d).await?;
                let files = listed
                    .iter()
                    .filter(|e| e.kind == pvfs_client::ObjKind::File)
                    .count();
                let want = model.keys().filter(|p| parent(p) == d.as_str()).count();
                if files != want {
                    bail!("lost update: {d} lists {files} files, the client made {want}");
                }
            }
        }
        counts[kind] += 1;
    }
    Ok((counts, bytes))
}

fn parent(p: &str) -> &str {
    p.rsplit_once('/').map_or("", |(d, _)| d)
}

/// Resident memory of each local server (0 when not running here).
fn server_rss(config: &Config) -> Vec<u64> {
    config
        .servers
        .iter()
        .map(|sc| {
            crate::cmd::server::running_pid(sc)
                .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .and_then(|kb| kb.parse::<u64>().ok())
                })
                .map_or(0, |kb| kb * 1024)
        })
        .collect()
}
