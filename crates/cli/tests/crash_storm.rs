//! Crash safety: a seeded, replayable storm of creates, writes with
//! fsync, renames, hard links, unlinks and mkdirs by several clients while servers are
//! killed with SIGKILL at random moments and restarted. After each round: every
//! operation that returned success is there (with its data when it was fsynced),
//! nothing is half done (every entry of every directory leads to a readable object, no
//! file counts fewer links than it has names), and what failed is either fully there
//! or fully absent.
//!
//! At the end, `fsck` finds what the kills interrupted between the steps of
//! multi-server operations, repairs it, and everything acknowledged still verifies,
//! every file's link count now its number of names.
//!
//! `PVFS_CRASH_SEED` (decimal, or hex with 0x; printed both ways) replays a run;
//! `PVFS_CRASH_ROUNDS` (default 3, at least 1) and `PVFS_CRASH_ROUND_SECS` (default 3,
//! at least 1) make it a soak; `PVFS_CRASH_TRACE=1` prints the time of each walk. A
//! value that does not parse or is out of range fails the test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Cluster, Rng};
use pvfs_client::{Client, Errno, LayoutSpec, ObjKind};

/// What one client knows about its own subtree.
#[derive(Default, Clone)]
struct Model {
    /// Directories that exist.
    dirs: BTreeSet<String>,
    /// Files that exist: Some(content) when all of it was written and fsynced.
    files: BTreeMap<String, Option<Vec<u8>>>,
    /// Names whose fate is unknown (their operation failed).
    uncertain: BTreeSet<String>,
    /// Names that are gone for sure: successfully unlinked, or renamed away (fresh
    /// names are never reused, so none of these may exist again).
    gone: BTreeSet<String>,
    /// Counter for fresh names.
    next: u64,
}

impl Model {
    fn fresh(&mut self, rng: &mut Rng, prefix: &str) -> String {
        self.next += 1;
        let dirs: Vec<&String> = self.dirs.iter().collect();
        let dir = dirs[rng.range(0, dirs.len() as u64) as usize];
        format!("{dir}/{prefix}{}", self.next)
    }

    fn pick_file(&self, rng: &mut Rng) -> Option<String> {
        let files: Vec<&String> = self.files.keys().collect();
        (!files.is_empty()).then(|| files[rng.range(0, files.len() as u64) as usize].clone())
    }
}

/// One client's storm until `stop` is set.
async fn storm(c: Client, root: String, seed: u64, stop: Arc<AtomicBool>, mut m: Model) -> Model {
    let mut rng = Rng::new(seed);
    if m.dirs.is_empty() {
        c.mkdir(&root, 0o755).await.expect("client root");
        m.dirs.insert(root);
    }
    while !stop.load(Ordering::Acquire) {
        match rng.range(0, 10) {
            0 => {
                let d = m.fresh(&mut rng, "d");
                match c.mkdir(&d, 0o755).await {
                    Ok(_) => {
                        m.dirs.insert(d);
                    }
                    Err(_) => {
                        m.uncertain.insert(d);
                    }
                }
            }
            1..=5 => {
                let f = m.fresh(&mut rng, "f");
                let len = rng.log_range(1, 300_000) as usize;
                let data = rng.bytes(len);
                match c.create(&f, 0o644, LayoutSpec::default(), true).await {
                    Err(_) => {
                        m.uncertain.insert(f);
                    }
                    Ok(file) => {
                        let durable =
                            file.write_at(0, &data).await.is_ok() && file.fsync().await.is_ok();
                        m.files.insert(f, durable.then_some(data));
                    }
                }
            }
            6 => {
                // A hard link, often into another directory (and shard server).
                let Some(from) = m.pick_file(&mut rng) else {
                    continue;
                };
                let to = m.fresh(&mut rng, "l");
                match c.link(&from, &to).await {
                    Ok(_) => {
                        let content = m.files.get(&from).cloned().flatten();
                        m.files.insert(to, content);
                    }
                    Err(_) => {
                        m.uncertain.insert(to);
                    }
                }
            }
            7 => {
                let Some(from) = m.pick_file(&mut rng) else {
                    continue;
                };
                let to = m.fresh(&mut rng, "r");
                match c.rename(&from, &to).await {
                    Ok(()) => {
                        let content = m.files.remove(&from).flatten();
                        m.files.insert(to, content);
                        m.gone.insert(from);
                    }
                    Err(_) => {
                        m.files.remove(&from);
                        m.uncertain.insert(from);
                        m.uncertain.insert(to);
                    }
                }
            }
            _ => {
                let Some(f) = m.pick_file(&mut rng) else {
                    continue;
                };
                m.files.remove(&f);
                if c.unlink(&f).await.is_err() {
                    m.uncertain.insert(f);
                } else {
                    m.gone.insert(f);
                }
            }
        }
    }
    m
}

/// What a walk found at one path: its kind, and for a file its handle and link count.
type Found = (ObjKind, u64, u32);

/// Every entry of the tree under `root` leads to a readable object; returns the paths.
/// Attributes come batched (readdirplus: one request per server per directory), so
/// the walk stays fast as the tree grows over a long soak.
async fn walk_all(c: &Client, root: &str) -> BTreeMap<String, Found> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_string()];
    while let Some(dir) = todo.pop() {
        let entries = c
            .readdir_plus(&dir, true)
            .await
            .unwrap_or_else(|e| panic!("readdir {dir}: {e}"));
        for (e, attr) in entries {
            let p = format!("{dir}/{}", e.name);
            let attr = attr.unwrap_or_else(|err| panic!("entry {p} points nowhere: {err}"));
            assert_eq!(
                attr.kind(),
                e.kind,
                "{p}: entry kind and object kind differ"
            );
            let found = (e.kind, attr.handle, attr.nlink);
            match e.kind {
                ObjKind::Dir => todo.push(p.clone()),
                ObjKind::File => {
                    let size = attr.size;
                    let f = c
                        .file_from_attr(attr)
                        .unwrap_or_else(|err| panic!("open {p}: {err}"));
                    let mut buf = vec![0u8; size as usize];
                    let n = f
                        .read_at(0, &mut buf)
                        .await
                        .unwrap_or_else(|err| panic!("read {p}: {err}"));
                    assert_eq!(n as u64, size, "{p}: short read of a whole file");
                }
                ObjKind::Symlink | ObjKind::Node(_) => {}
            }
            out.insert(p, found);
        }
    }
    out
}

#[test]
fn acknowledged_operations_survive_random_server_kills() {
    let seed = common::knob("PVFS_CRASH_SEED", 0x5eed_c0deu64, |_| true);
    let rounds = common::knob("PVFS_CRASH_ROUNDS", 3u64, |&r| (1..=100_000).contains(&r));
    let secs = common::knob("PVFS_CRASH_ROUND_SECS", 3u64, |&s| {
        (1..=86_400).contains(&s)
    });
    let round_time = Duration::from_secs(secs);
    eprintln!(
        "crash storm: seed {seed} ({seed:#x}), {rounds} rounds of {round_time:?} \
         (replay with PVFS_CRASH_SEED={seed})"
    );
    let cluster = Cluster::builder()
        .request_timeout(&format!(
            "{}ms",
            common::scaled(Duration::from_secs(2)).as_millis()
        ))
        .connect_timeout(&format!(
            "{}ms",
            common::scaled(Duration::from_secs(1)).as_millis()
        ))
        .start();
    let names = cluster.names();
    let clients = 4;
    let mut models = vec![Model::default(); clients];
    let mut killer_rng = Rng::new(seed ^ 0x6b69_6c6c);
    let mut kills = 0;
    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..clients)
            .map(|i| {
                let config = cluster.config().clone();
                let stop = stop.clone();
                let m = models[i].clone();
                let s = seed.wrapping_add(round * 1000 + i as u64);
                std::thread::spawn(move || {
                    let rt = common::runtime();
                    rt.block_on(storm(Client::new(config), format!("/c{i}"), s, stop, m))
                })
            })
            .collect();
        let until = Instant::now() + round_time;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(killer_rng.range(150, 700)));
            let victim = &names[killer_rng.range(0, names.len() as u64) as usize];
            cluster.kill(victim, libc::SIGKILL);
            kills += 1;
            std::thread::sleep(Duration::from_millis(killer_rng.range(50, 400)));
            cluster.restart(victim);
        }
        stop.store(true, Ordering::Release);
        for (i, w) in workers.into_iter().enumerate() {
            models[i] = w.join().expect("storm client panicked");
        }
        cluster.assert_all_running();

        // Check with a fresh client, after every server has been restarted at least once
        // in the run (the store opened) and all are up.
        let checking = Instant::now();
        verify(&cluster, &models, &format!("round {round}"), false);
        let total: usize = models.iter().map(|m| m.files.len()).sum();
        let durable: usize = models
            .iter()
            .map(|m| m.files.values().filter(|c| c.is_some()).count())
            .sum();
        eprintln!(
            "round {round}: {kills} kills so far; {total} files tracked, {durable} fsynced, all verified in {:.1?}",
            checking.elapsed()
        );
    }

    // What the kills interrupted between the steps of multi-server operations is
    // garbage for fsck: found, repaired, and everything acknowledged still verifies.
    let tc = cluster.client();
    let limit = Duration::from_secs(300);
    let found = tc.run(limit, async |c| {
        c.fsck(false, Duration::ZERO).await.expect("fsck")
    });
    assert!(
        found.problems.iter().all(|p| !p.repaired),
        "fsck without --repair changed something"
    );
    let repaired = tc.run(limit, async |c| {
        c.fsck(true, Duration::ZERO).await.expect("fsck --repair")
    });
    assert_eq!(repaired.unrepaired(), 0, "{:?}", repaired.problems);
    let clean = tc.run(limit, async |c| {
        c.fsck(false, Duration::ZERO).await.expect("fsck")
    });
    assert!(
        clean.problems.is_empty(),
        "after repair: {:?}",
        clean.problems
    );
    let mut kinds: Vec<String> = found
        .problems
        .iter()
        .map(|p| format!("{:?}", p.kind))
        .collect();
    kinds.sort();
    kinds.dedup();
    eprintln!(
        "fsck after {kills} kills: {} problems ({}), all repaired",
        found.problems.len(),
        kinds.join(", ")
    );
    verify(&cluster, &models, "after fsck --repair", true);
}

/// Checks, with a fresh client, that every acknowledged operation of `models` is there
/// (fsynced data byte-exact, every entry leads to an object, nothing that no operation
/// made, no file with fewer links than names — exactly as many when `exact`); `what`
/// names the moment in failure messages.
fn verify(cluster: &Cluster, models: &[Model], what: &str, exact: bool) {
    let tc = cluster.client();
    // The tree only grows over a soak (directories are never removed): allow for it.
    let tracked: usize = models
        .iter()
        .map(|m| m.dirs.len() + m.files.len() + m.gone.len())
        .sum();
    let limit = Duration::from_secs(120) + Duration::from_millis(20) * tracked as u32;
    let trace = common::knob("PVFS_CRASH_TRACE", 0u8, |&t| t <= 1) == 1;
    tc.run(limit, async |c| {
        for (i, m) in models.iter().enumerate() {
            let root = format!("/c{i}");
            let t = Instant::now();
            let present = walk_all(&c, &root).await;
            if trace {
                eprintln!(
                    "  {root}: walked {} entries ({} dirs tracked) in {:.1?}",
                    present.len(),
                    m.dirs.len(),
                    t.elapsed()
                );
            }
            for d in &m.dirs {
                if d != &root {
                    assert_eq!(
                        present.get(d).map(|p| p.0),
                        Some(ObjKind::Dir),
                        "{what}: acknowledged mkdir {d} lost"
                    );
                }
            }
            // Names per file (hard links stay within one client's tree).
            let mut names: BTreeMap<u64, u32> = BTreeMap::new();
            for (kind, handle, _) in present.values() {
                if *kind == ObjKind::File {
                    *names.entry(*handle).or_default() += 1;
                }
            }
            for (p, (kind, handle, nlink)) in &present {
                if *kind != ObjKind::File {
                    continue;
                }
                let n = names[handle];
                assert!(
                    *nlink >= n,
                    "{what}: {p} has {n} names but counts {nlink} links: one name too few would delete it with a name left"
                );
                assert!(!exact || *nlink == n, "{what}: {p} has {n} names, {nlink} links");
            }
            for (f, content) in &m.files {
                assert_eq!(
                    present.get(f).map(|p| p.0),
                    Some(ObjKind::File),
                    "{what}: acknowledged file {f} lost"
                );
                if let Some(want) = content {
                    let file = c.open(f).await.unwrap();
                    let mut got = vec![0u8; want.len() + 1];
                    let n = file.read_at(0, &mut got).await.unwrap();
                    got.truncate(n);
                    common::assert_bytes_eq(&got, want, &format!("{what}: fsynced {f}"));
                }
            }
            for p in present.keys() {
                let known =
                    m.dirs.contains(p) || m.files.contains_key(p) || m.uncertain.contains(p);
                assert!(known, "{what}: {p} exists but no operation made it");
            }
            // Names unlinked or renamed away (acknowledged) are gone for good.
            for p in &m.gone {
                match c.stat(p).await {
                    Err(e) => assert_eq!(
                        e.errno,
                        Errno::ENOENT,
                        "{what}: stat of unlinked or renamed-away {p}: {e}"
                    ),
                    Ok(a) => panic!(
                        "{what}: {p} was unlinked or renamed away, but it exists ({:?})",
                        a.kind()
                    ),
                }
            }
        }
    });
}
