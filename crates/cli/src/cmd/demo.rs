//! `pvfs demo`: a real 4-server file system on loopback, a short real workload, a
//! summary; then everything is stopped and removed (or kept with `--keep DIR`).
//!
//! Without `--keep`, the servers and the temporary directory never outlive the demo,
//! however it ends:
//! - normally, or with an error or a panic: it stops the servers and removes the
//!   directory itself;
//! - SIGINT, SIGTERM or SIGHUP (Ctrl-C, a closed terminal): a thread waiting for them
//!   does the same, then the demo dies of the signal;
//! - its standard output closes (`pvfs demo | head -1`): the write that fails does the
//!   same, then the demo dies of SIGPIPE, as a filter does;
//! - SIGKILL, or anything else that ends it at once: the kernel kills the servers
//!   (`PR_SET_PDEATHSIG`), and a small reaper process the demo started, which waits
//!   for the demo's end of a pipe to close, removes the directory and exits.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use pvfs_client::{Client, LayoutSpec};
use pvfs_config::{format_size, Config, ConfigError, GenOptions};

use crate::cmd::server::Lifetime;
use crate::cmd::{bench, runtime, server};

/// Options of `pvfs demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// Keep the file system running in DIR and print how to use it.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Number of servers.
    #[arg(long, default_value_t = 4)]
    servers: usize,
    /// Internal: the reaper of a demo, which removes DIR once the demo is gone.
    #[arg(long, hide = true, value_name = "DIR")]
    reap: Option<PathBuf>,
}

/// What a temporary demo leaves behind until it is cleaned up.
struct Leftovers {
    /// The temporary directory (configuration and storage).
    dir: PathBuf,
    /// The configuration, once written: its servers are stopped by their pid files.
    config: Option<Config>,
    /// The server processes.
    servers: Vec<Child>,
    /// Our end of the reaper's standard input: closing it lets the reaper go.
    reaper: Option<ChildStdin>,
}

/// The running demo's leftovers, for whichever way it ends (see the module docs).
static LEFTOVERS: Mutex<Option<Leftovers>> = Mutex::new(None);

/// The demo's state, whatever another thread did with it before a panic.
fn leftovers() -> MutexGuard<'static, Option<Leftovers>> {
    LEFTOVERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Stops the servers of the demo and removes its directory, at once (SIGKILL) or
/// gently (SIGTERM through `pvfs stop`'s path, up to 30 s) if `gently`. Returns the
/// servers that did not stop gently. Does nothing the second time.
fn clean_up(state: &mut Option<Leftovers>, gently: bool) -> Vec<String> {
    let Some(mut l) = state.take() else {
        return Vec::new();
    };
    let mut failed = Vec::new();
    if gently {
        if let Some(config) = &l.config {
            failed = server::stop_servers(config, Duration::from_secs(30), true);
        }
    }
    for child in &mut l.servers {
        let _ = child.kill();
        let _ = child.wait();
    }
    // Also servers not (yet) in the list, e.g. of a start that failed half-way.
    kill_servers_of(&l.dir.join("pvfs.toml"), Duration::ZERO);
    if let Err(e) = std::fs::remove_dir_all(&l.dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            let _ = writeln!(
                std::io::stderr(),
                "pvfs: cannot remove {}: {e}",
                l.dir.display()
            );
        }
    }
    drop(l.reaper.take());
    failed
}

/// Dies of `sig` (its default action) once cleaned up, as if it had not been caught.
fn die_of(sig: libc::c_int) -> ! {
    // SAFETY: resetting a signal to its default action, unblocking it in this thread
    // and raising it here: plain libc calls on valid arguments.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    std::process::exit(128 + sig)
}

/// Prints a line of the demo's output. When standard output is gone (a reader that
/// stopped early), the demo cleans up and dies of SIGPIPE, as a filter does.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cmd::demo::put(format_args!($($arg)*))
    };
}

/// The body of [`say!`].
fn put(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        drop(out);
        let mut state = leftovers();
        clean_up(&mut state, false);
        die_of(libc::SIGPIPE);
    }
}

/// Cleans up when the demo ends by a panic or an early error return.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        clean_up(&mut leftovers(), false);
    }
}

/// Runs the demo.
pub fn run(a: DemoArgs) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &a.reap {
        return reap(dir);
    }
    match &a.keep {
        Some(d) => run_kept(d, a.servers),
        None => run_temporary(a.servers),
    }
}

/// A demo in a temporary directory that goes with it.
fn run_temporary(servers: usize) -> anyhow::Result<ExitCode> {
    // Before any other thread exists, so that every thread has them blocked and only
    // the watcher receives them.
    watch_stop_signals()?;
    let dir = tempfile::Builder::new()
        .prefix("pvfs-demo-")
        .tempdir()
        .context("cannot create a temporary directory")?
        .keep();
    let guard = Guard;
    *leftovers() = Some(Leftovers {
        dir: dir.clone(),
        config: None,
        servers: Vec::new(),
        reaper: None,
    });
    let dir =
        std::fs::canonicalize(&dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    let reaper = start_reaper(&dir)?;
    if let Some(l) = leftovers().as_mut() {
        l.dir = dir.clone();
        l.reaper = Some(reaper);
    }
    let (config, config_path) = configure(&dir, servers)?;
    if let Some(l) = leftovers().as_mut() {
        l.config = Some(config.clone());
    }
    say!(
        "== pvfs demo: {servers} servers on loopback, storage in {}",
        dir.display()
    );
    let started = Instant::now();
    let children = server::start_servers(
        &config_path,
        &config,
        Duration::from_secs(20),
        Lifetime::DieWithUs,
    )?;
    if let Some(l) = leftovers().as_mut() {
        l.servers = children;
    }
    introduce(&config, started.elapsed());
    let outcome = workload(&config, &config_path, Lifetime::DieWithUs);
    say!("\n== stopping the servers and removing {}", dir.display());
    let failed = clean_up(&mut leftovers(), true);
    drop(guard);
    outcome?;
    if !failed.is_empty() {
        bail!(
            "servers did not stop within 30s and were killed: {}",
            failed.join(", ")
        );
    }
    say!("   done");
    Ok(ExitCode::SUCCESS)
}

/// A demo whose file system keeps running in `dir`.
fn run_kept(dir: &Path, servers: usize) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dir =
        std::fs::canonicalize(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    let (config, config_path) = configure(&dir, servers)?;
    say!(
        "== pvfs demo: {servers} servers on loopback, storage in {}",
        dir.display()
    );
    let started = Instant::now();
    let children = server::start_servers(
        &config_path,
        &config,
        Duration::from_secs(20),
        Lifetime::Detached,
    )?;
    introduce(&config, started.elapsed());
    // The servers outlive the demo.
    drop(children);
    workload(&config, &config_path, Lifetime::Detached)?;
    say!("\n== the file system keeps running. Try:");
    let c = config_path.display();
    say!("   export PVFS_CONFIG={c}");
    say!("   pvfs ls -l /demo");
    say!("   pvfs layout /demo/striped.dat");
    say!("   pvfs df");
    say!(
        "   pvfs stop          # when done; data stays in {}",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes the configuration of a new file system of `servers` servers storing in
/// `dir` to `dir/pvfs.toml`, with its key files beside it (all mode 0600).
fn configure(dir: &Path, servers: usize) -> anyhow::Result<(Config, PathBuf)> {
    let mut config = Config::generate(&GenOptions {
        base_port: 0,
        ..GenOptions::new(servers, dir)
    })
    .map_err(|e| match e {
        ConfigError::Generate(why) => anyhow::anyhow!("cannot lay out the demo: {why}"),
        e => e.into(),
    })?;
    // An authority (the first three servers, or one), so files may have two copies.
    let members = pvfs_config::authority_members(2, servers);
    config.replication.authority = (0..members).collect();
    // Its servers run as this user.
    // SAFETY: geteuid cannot fail and touches no memory.
    config.security.server_uid = unsafe { libc::geteuid() };
    let config_path = dir.join("pvfs.toml");
    if config_path.exists() {
        bail!(
            "{} already exists: {} holds a demo file system already (stop it with \
             `pvfs stop -c {}` and remove the directory, or keep the new one elsewhere)",
            config_path.display(),
            dir.display(),
            config_path.display()
        );
    }
    let config = super::keygen::write_new_file_system(&config, &config_path, false)?;
    Ok((config, config_path))
}

/// Prints the servers once they answer.
fn introduce(config: &Config, took: Duration) {
    say!("   started in {:.2}s:", took.as_secs_f64());
    for sc in &config.servers {
        say!(
            "   {:<4} {:<22} {}",
            sc.name,
            sc.address,
            sc.roles.describe()
        );
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and so in every thread it
/// starts) and starts a thread that waits for them: on one, it cleans up and the demo
/// dies of that signal.
fn watch_stop_signals() -> anyhow::Result<()> {
    // SAFETY: an empty signal set filled with valid signal numbers, and a mask change
    // of the calling thread.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    std::thread::Builder::new()
        .name("demo-signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: sigwait on a valid set, writing into a live integer.
            while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
            // Holding the state until the process is gone: the main thread cannot
            // report a failure its servers' end caused.
            let mut state = leftovers();
            if let Some(l) = state.as_ref() {
                let _ = writeln!(
                    std::io::stderr(),
                    "pvfs: demo interrupted: stopping its servers and removing {}",
                    l.dir.display()
                );
            }
            clean_up(&mut state, false);
            die_of(sig)
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

/// Starts the reaper of the demo in `dir`: `pvfs demo --reap DIR` in a session of its
/// own, reading a pipe whose writing end only this process holds.
fn start_reaper(dir: &Path) -> anyhow::Result<ChildStdin> {
    let exe = std::env::current_exe().context("cannot find the pvfs executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("demo")
        .arg("--reap")
        .arg(dir)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    server::unblock_signals(&mut cmd);
    // SAFETY: setsid is async-signal-safe; the closure allocates nothing. A session
    // of its own: a Ctrl-C or a hangup of the demo's terminal does not reach it.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the demo's reaper")?;
    child
        .stdin
        .take()
        .context("cannot talk to the demo's reaper")
}

/// The reaper: waits until the demo is gone (its end of our standard input closes),
/// waits for the demo's servers to be gone (they die with it; any still there after
/// a while is killed), then removes the demo's directory.
fn reap(dir: &Path) -> anyhow::Result<ExitCode> {
    let is_demo_dir = dir.is_absolute()
        && dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("pvfs-demo-"));
    if !is_demo_dir {
        bail!("--reap: {} is not a demo's directory", dir.display());
    }
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    kill_servers_of(&dir.join("pvfs.toml"), Duration::from_secs(5));
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot remove {}", dir.display())),
    }
    Ok(ExitCode::SUCCESS)
}

/// Waits until no `pvfs server --config CONFIG` process is left, killing those still
/// there after `grace` (SIGKILL); gives up after a minute.
fn kill_servers_of(config: &Path, grace: Duration) {
    let started = Instant::now();
    loop {
        let pids = servers_of(config);
        if pids.is_empty() || started.elapsed() > grace + Duration::from_secs(60) {
            return;
        }
        if started.elapsed() >= grace {
            for pid in pids {
                // SAFETY: kill(2) of a `pvfs server` of this demo's configuration.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The live `pvfs server --config CONFIG` processes.
fn servers_of(config: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let config = config.as_os_str().as_encoded_bytes();
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let serves = args.get(1) == Some(&&b"server"[..]);
            serves
                && args
                    .windows(2)
                    .any(|w| w[0] == b"--config" && w[1] == config)
                && !is_zombie(*pid)
        })
        .collect()
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

fn workload(config: &Config, config_path: &Path, lifetime: Lifetime) -> anyhow::Result<()> {
    let rt = runtime()?;
    rt.block_on(async {
        let client = Client::new(config.clone());
        say!("\n== a directory tree");
        client.mkdir_all("/demo/src/lib", 0o755).await?;
        client.mkdir_all("/demo/docs", 0o755).await?;
        for i in 0..20 {
            let f = client
                .create(&format!("/demo/src/file{i:02}.c"), 0o644, LayoutSpec::default(), true)
                .await?;
            f.write_at(0, format!("int f{i}(void) {{ return {i}; }}\n").as_bytes()).await?;
        }
        client.symlink("src/file00.c", "/demo/first.c").await?;
        client.rename("/demo/src/file19.c", "/demo/docs/moved.c").await?;
        let mut names: Vec<_> = client.readdir("/demo").await?.into_iter().map(|e| e.name).collect();
        names.sort();
        say!("   /demo: {}", names.join("  "));
        say!("   /demo/src holds {} entries", client.readdir("/demo/src").await?.len());
        say!("   readlink /demo/first.c -> {}", client.readlink("/demo/first.c").await?);

        let clients = 4u64;
        let part: u64 = 32 << 20;
        say!("\n== one striped file written by {clients} clients at once, read back by new clients and verified");
        let spec = LayoutSpec {
            stripe_size: Some(64 << 10),
            stripe_count: None,
            base: None,
            replicas: None,
        };
        client.create("/demo/striped.dat", 0o644, spec, true).await?;
        let t = Instant::now();
        let writers: Vec<_> = (0..clients)
            .map(|rank| {
                let c = Client::new(config.clone());
                tokio::spawn(async move { bench::one_client(c, demo_job(rank, clients, part, false)).await })
            })
            .collect();
        for w in writers {
            w.await.context("writer failed")??;
        }
        let wt = t.elapsed();
        let t = Instant::now();
        let readers: Vec<_> = (0..clients)
            .map(|rank| {
                let c = Client::new(config.clone());
                tokio::spawn(async move { bench::one_client(c, demo_job(rank, clients, part, true)).await })
            })
            .collect();
        for r in readers {
            r.await.context("reader failed")??;
        }
        let rt_ = t.elapsed();
        let total = part * clients;
        say!(
            "   wrote {} in {:.2}s, read and verified it in {:.2}s",
            format_size(total),
            wt.as_secs_f64(),
            rt_.as_secs_f64()
        );
        let report = client.layout("/demo/striped.dat").await?;
        let l = report.attr.layout().cloned().context("not a file")?;
        say!(
            "   layout: {} bytes in stripes of {} over {} data servers",
            report.attr.size,
            format_size(l.stripe_size),
            l.datafiles.len()
        );
        for (i, (df, name, st)) in report.datafiles.iter().enumerate() {
            say!("     datafile {i}: server {name:<4} handle {:#x}  {} bytes", df.handle, st.size);
        }
        Ok::<_, anyhow::Error>(())
    })?;

    say!(
        "\n== a small run of the PVFS paper's concurrent read/write test (Carns et al., 2000, §4)"
    );
    let args = bench::args(config_path.to_path_buf(), 4, 64 << 20);
    let (w, r) = bench::concurrent(config, &args)?;
    for line in bench::render(&args, config, &w, &r)?.lines() {
        say!("{line}");
    }

    rt.block_on(async {
        let client = Client::new(config.clone());
        let fs = client.statfs().await;
        say!(
            "\n== df: {} objects, {} datafiles, {} free",
            fs.objects,
            fs.datafiles,
            format_size(fs.avail_bytes)
        );
    });
    if config.data_servers().len() >= 2 && !config.replication.authority.is_empty() {
        let victim = rt.block_on(failover(config))?;
        // Back: it catches up with what it missed and is up again.
        let sc = &config.servers[victim];
        let t = Instant::now();
        let mut one = config.clone();
        one.servers = vec![sc.clone()];
        let children = server::start_servers(config_path, &one, Duration::from_secs(20), lifetime)?;
        if let Some(l) = leftovers().as_mut() {
            l.servers.extend(children);
        }
        rt.block_on(until_up(config, victim))?;
        say!(
            "   {} started again: caught up and up in the cluster map after {:.2}s",
            sc.name,
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Waits until server `victim` is up in the cluster map.
async fn until_up(config: &Config, victim: usize) -> anyhow::Result<()> {
    let client = Client::new(config.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = client
            .cluster_map()
            .await?
            .and_then(|m| m.state(victim as u32));
        if state == Some(pvfs_proto::map::ServerState::Up) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} did not come back up in the cluster map",
                config.servers[victim].name
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A file with two copies read while one of its servers is killed: the read pauses
/// while the authority replaces the dead copy, then goes on (`docs/replication.md`).
/// Returns the server killed (started again by the caller, it catches up).
async fn failover(config: &Config) -> anyhow::Result<usize> {
    let client = Client::new(config.clone());
    let size: u64 = 16 << 20;
    say!(
        "\n== a file with two copies read while a server holding them is killed (lease {:?})",
        config.replication.lease
    );
    let spec = LayoutSpec {
        replicas: Some(2),
        ..LayoutSpec::default()
    };
    let f = client.create("/demo/copies.dat", 0o644, spec, true).await?;
    let data: Vec<u8> = (0..size)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    f.write_at(0, &data).await?;
    f.fsync().await?;
    let layout = f.layout().clone();
    let names = |s: u32| {
        config
            .servers
            .get(s as usize)
            .map_or("?", |s| s.name.as_str())
    };
    let sets: Vec<String> = layout
        .datafiles
        .iter()
        .map(|df| df.replicas().map(names).collect::<Vec<_>>().join("+"))
        .collect();
    say!(
        "   /demo/copies.dat: {}, copies on {}",
        format_size(size),
        sets.join(", ")
    );
    // A server holding copies that does not lead the authority (its death would add
    // an election to the pause).
    let leader = client.cluster_map().await?.and_then(|m| m.leader);
    let victim = layout
        .datafiles
        .iter()
        .flat_map(|df| df.replicas())
        .find(|&s| Some(s) != leader)
        .context("no server to kill")? as usize;
    let sc = &config.servers[victim];
    let pid: libc::pid_t = std::fs::read_to_string(server::pid_file(sc))
        .context("the server's pid file")?
        .trim()
        .parse()
        .context("the server's pid file")?;
    // Read in steps, the server killed after the first few.
    let step = 1 << 20;
    let mut back = vec![0u8; size as usize];
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for (i, chunk) in back.chunks_mut(step).enumerate() {
        if i == 4 {
            // SAFETY: kill(2) of this demo's own server, by its pid file.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            say!("   killed {} (kill -9) while reading", sc.name);
        }
        let t = Instant::now();
        f.read_at((i * step) as u64, chunk).await?;
        slowest = slowest.max(t.elapsed());
    }
    if back != data {
        bail!("the file read back differs from what was written");
    }
    say!(
        "   read and verified {} in {:.2}s without an error; the longest step waited {:.2}s for the failover",
        format_size(size),
        started.elapsed().as_secs_f64(),
        slowest.as_secs_f64()
    );
    Ok(victim)
}

/// One client's part of the demo's striped file.
fn demo_job(rank: u64, clients: u64, size: u64, read: bool) -> bench::Job {
    bench::Job {
        path: "/demo/striped.dat".into(),
        rank,
        clients,
        size,
        block: 8 << 20,
        read,
        fsync: false,
        interleave: None,
    }
}
