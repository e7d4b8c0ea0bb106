//! `pvfs server`, `pvfs start`, `pvfs stop`: running servers; `pvfs server drain`:
//! retiring one; `pvfs server add`: adding one to the configuration.
//!
//! A running server records its process id in `STORAGE/server.pid` (and removes it
//! on a clean stop); `start` launches `pvfs server` processes in the background with
//! their log in `STORAGE/server.log` and waits until every server answers; `stop`
//! sends SIGTERM and waits for each to exit.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use pvfs_client::Client;
use pvfs_config::{Config, ServerConfig};

use crate::cmd::{load_config, runtime};
use crate::ConfigArg;

/// Options of `pvfs server`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServerArgs {
    #[command(subcommand)]
    action: Option<ServerAction>,
    #[command(flatten)]
    config: ConfigArg,
    /// Which server of the configuration to run.
    #[arg(long, required = true)]
    name: Option<String>,
}

/// What `pvfs server` does besides running a server.
#[derive(Subcommand)]
enum ServerAction {
    /// Moves everything off a server so that it can be retired: the others take
    /// copies of all it holds while it serves on, then it leaves the file system
    /// for good (`pvfs status` shows the progress).
    Drain(DrainArgs),
    /// Adds a data server at the end of the configuration file (its text stays;
    /// the new server gets the next range of handles). Copy the file to every
    /// node, start the new server, then restart the others one at a time: new
    /// files then take it in their share (docs/configuration.md, "Adding a server").
    Add(AddArgs),
}

/// Options of `pvfs server add`.
#[derive(Args)]
struct AddArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The new server's name.
    name: String,
    /// The `host:port` it listens on.
    #[arg(long)]
    address: String,
    /// Its storage directory (relative: to the configuration file's directory).
    #[arg(long)]
    storage: PathBuf,
    /// Its failure domain (a rack, a power feed); default: a domain of its own.
    #[arg(long)]
    domain: Option<String>,
}

/// `pvfs server add NAME`: appends a data server to the configuration file.
fn add(a: AddArgs) -> anyhow::Result<ExitCode> {
    let server = ServerConfig {
        name: a.name.clone(),
        address: a.address,
        roles: pvfs_proto::Roles::DATA,
        handles: pvfs_config::HandleRange { first: 0, last: 0 },
        storage: a.storage,
        domain: a.domain,
        metrics: None,
    };
    let config = Config::add_data_server(&a.config.config, server)?;
    let added = config.servers.last().context("no server written")?;
    println!(
        "added data server {} ({}, handles {}) to {}: copy it to every node, start {} \
         (pvfs server --name {}), then restart the other servers one at a time",
        added.name,
        added.address,
        added.handles,
        a.config.config.display(),
        added.name,
        added.name
    );
    Ok(ExitCode::SUCCESS)
}

/// Options of `pvfs server drain`.
#[derive(Args)]
struct DrainArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The server to drain.
    name: String,
}

/// `pvfs server drain NAME`: asks the authority to drain the server.
fn drain(a: DrainArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    crate::cmd::with_client(&config_path, |client| async move {
        let map = client.drain(&a.name).await?;
        let index = client
            .config()
            .server_index(&a.name)
            .context("the server left the configuration")?;
        let heirs: Vec<&str> = map
            .heirs_rebuilding(index as u32)
            .into_iter()
            .filter_map(|h| client.config().servers.get(h as usize))
            .map(|s| s.name.as_str())
            .collect();
        println!(
            "draining {}: {} take copies of what it holds; it is retired once they hold them \
             (pvfs status shows the progress)",
            a.name,
            if heirs.is_empty() {
                "the other servers".to_string()
            } else {
                heirs.join(", ")
            }
        );
        Ok(ExitCode::SUCCESS)
    })
}

/// Options of `pvfs rebalance`.
#[derive(Args)]
pub struct RebalanceArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The data servers to move copies to; default: every data server added
    /// (pvfs server add) that was not rebalanced to yet.
    names: Vec<String>,
}

/// `pvfs rebalance [NAME...]`: asks the authority to hand each added data server
/// its share of the other data servers' copies of replicated files
/// (docs/replication.md, "Rebalance").
pub fn rebalance(a: RebalanceArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    crate::cmd::with_client(&config_path, |client| async move {
        let map = client.rebalance(&a.names).await?;
        let name = |s: u32| {
            client
                .config()
                .servers
                .get(s as usize)
                .map_or_else(|| format!("server {s}"), |c| c.name.clone())
        };
        for (to, e) in map.servers.iter().enumerate() {
            let Some(h) = e.hands.last() else {
                continue;
            };
            if map.hands_rebuilding(to as u32).is_empty() {
                continue;
            }
            let from: Vec<String> = h.from.iter().map(|&s| name(s)).collect();
            println!(
                "rebalancing onto {}: it takes 1/{} of the copies of replicated files on {}; \
                 they shed theirs once it holds them (pvfs status shows the progress)",
                name(to as u32),
                h.share,
                from.join(", ")
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Options of `pvfs start`.
#[derive(Args)]
pub struct StartArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// How long to wait for every server to answer.
    #[arg(long, default_value = "20s", value_parser = pvfs_config::parse_duration)]
    wait: Duration,
}

/// Options of `pvfs stop`.
#[derive(Args)]
pub struct StopArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// How long to wait for each server to exit.
    #[arg(long, default_value = "30s", value_parser = pvfs_config::parse_duration)]
    wait: Duration,
    /// Emergency stop: servers exit at once, failing pending requests (no drain).
    #[arg(long)]
    now: bool,
}

/// The pid file of a server.
pub fn pid_file(sc: &ServerConfig) -> PathBuf {
    sc.storage.join("server.pid")
}

/// The log file `start` gives a server.
pub fn log_file(sc: &ServerConfig) -> PathBuf {
    sc.storage.join("server.log")
}

/// Runs one server in the foreground until SIGTERM or SIGINT.
pub fn run_server(a: ServerArgs) -> anyhow::Result<ExitCode> {
    let name = match a.action {
        Some(ServerAction::Drain(d)) => return drain(d),
        Some(ServerAction::Add(d)) => return add(d),
        None => a.name.context("--name is required")?,
    };
    let config = load_config(&a.config.config)?;
    // PVFS_LOG, else the configuration's level; SIGHUP takes the configuration's
    // again (`reload_log_level`).
    let filter = match std::env::var("PVFS_LOG") {
        Ok(level) => log_filter(&level).context("PVFS_LOG")?,
        Err(_) => log_filter(&config.logging.level).context("logging.level")?,
    };
    let (filter, log_level) = tracing_subscriber::reload::Layer::new(filter);
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        tracing_subscriber::registry()
            .with(filter)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            )
            .init();
    }
    let sc = config
        .servers
        .iter()
        .find(|s| s.name == name)
        .cloned()
        .with_context(|| {
            format!(
                "no server named {:?} in {}",
                name,
                a.config.config.display()
            )
        })?;
    // SAFETY: geteuid cannot fail and touches no memory.
    let euid = unsafe { libc::geteuid() };
    if euid != config.security.server_uid {
        tracing::warn!(
            "this server runs as uid {euid}, and clients make their MUNGE credentials for \
             uid {} ([security] server_uid): users without the key cannot reach it",
            config.security.server_uid
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pvfs-server")
        .build()
        .context("cannot start the async runtime")?;
    let pid_path = pid_file(&sc);
    let config_path = a.config.config.clone();
    let result = rt.block_on(async {
        tokio::spawn(reload_log_level(config_path, log_level));
        let emergency_pid = pid_path.clone();
        let shutdown = async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (term, usr1) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::user_defined1()),
            );
            match (term, usr1) {
                (Ok(mut term), Ok(mut usr1)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = tokio::signal::ctrl_c() => {}
                        _ = usr1.recv() => emergency_exit(&emergency_pid),
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        };
        let ready = || {
            if let Err(e) = std::fs::write(&pid_path, format!("{}\n", std::process::id())) {
                tracing::warn!("cannot write {}: {e}", pid_path.display());
            }
        };
        pvfs_server::run(config, &name, shutdown, ready).await
    });
    // Only remove the pid file if it is ours (another instance may have failed to start).
    if read_pid(&pid_path) == Some(std::process::id()) {
        let _ = std::fs::remove_file(&pid_path);
    }
    result.with_context(|| match running_pid(&sc) {
        // The usual reason its store is in use.
        Some(pid) if pid != std::process::id() => {
            format!("server {} (already running as pid {pid})", name)
        }
        _ => format!("server {}", name),
    })?;
    Ok(ExitCode::SUCCESS)
}

/// A log filter from a level (`info`) or a filter (`info,pvfs_server=debug`).
fn log_filter(level: &str) -> anyhow::Result<tracing_subscriber::EnvFilter> {
    tracing_subscriber::EnvFilter::try_new(level)
        .with_context(|| format!("{level:?} is not a log level or filter"))
}

/// On every SIGHUP, reads the configuration file again and logs at its
/// `[logging] level` from then on (`systemctl reload`); a file that does not load,
/// or a level that does not parse, leaves the level as it was and says why.
async fn reload_log_level(
    config: PathBuf,
    handle: tracing_subscriber::reload::Handle<
        tracing_subscriber::EnvFilter,
        tracing_subscriber::Registry,
    >,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot watch for SIGHUP (the log level stays as it is): {e}");
            return;
        }
    };
    while hup.recv().await.is_some() {
        let level = match load_config(&config) {
            Ok(c) => c.logging.level,
            Err(e) => {
                tracing::warn!("SIGHUP: the log level stays as it is: {e:#}");
                continue;
            }
        };
        match log_filter(&level).map(|f| handle.reload(f)) {
            Ok(Ok(())) => tracing::warn!("SIGHUP: logging at {level:?} from now on"),
            Ok(Err(e)) => tracing::warn!("SIGHUP: the log level stays as it is: {e}"),
            Err(e) => tracing::warn!("SIGHUP: the log level stays as it is: {e:#}"),
        }
    }
}

/// The emergency stop that Cope et al. (2005, "Shared Parallel Filesystems in
/// Heterogeneous Linux Multi-Cluster Environments") ask of a parallel file system: exit
/// now. Every connection drops, so clients fail their pending requests at once with
/// EIO; what was acknowledged is already committed (metadata) or in the kernel's page
/// cache (data), so a restart serves it.
fn emergency_exit(pid_path: &Path) -> ! {
    tracing::warn!("emergency stop: exiting now, pending requests fail");
    if read_pid(pid_path) == Some(std::process::id()) {
        let _ = std::fs::remove_file(pid_path);
    }
    std::process::exit(0)
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether `pid` is a live `pvfs server` process for server `name`.
fn is_our_server(pid: u32, name: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let has = |s: &str| args.contains(&s.as_bytes());
    has("server") && has(name) && !is_zombie(pid)
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// The pid of server `sc` if it is running.
pub fn running_pid(sc: &ServerConfig) -> Option<u32> {
    read_pid(&pid_file(sc)).filter(|&pid| is_our_server(pid, &sc.name))
}

/// Whether servers started by [`start_servers`] outlive the process that started them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifetime {
    /// They run until stopped (`pvfs start`).
    Detached,
    /// The kernel kills them (SIGKILL) when the thread that started them ends, however
    /// it ends (`pvfs demo`).
    DieWithUs,
}

/// Starts every server of `config_path` that is not running yet in the background;
/// returns the children (still running) once all servers answer.
pub fn start_servers(
    config_path: &Path,
    config: &Config,
    wait: Duration,
    lifetime: Lifetime,
) -> anyhow::Result<Vec<Child>> {
    let exe = std::env::current_exe().context("cannot find the pvfs executable")?;
    let config_path = std::fs::canonicalize(config_path)
        .with_context(|| format!("cannot find {}", config_path.display()))?;
    // Each child with its name and where its log started.
    let mut children: Vec<(String, Child, u64)> = Vec::new();
    for sc in &config.servers {
        if running_pid(sc).is_some() {
            continue; // Already running: the caller says so.
        }
        std::fs::create_dir_all(&sc.storage)
            .with_context(|| format!("cannot create {}", sc.storage.display()))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_file(sc))
            .with_context(|| format!("cannot open {}", log_file(sc).display()))?;
        let log_start = log.metadata().map_or(0, |m| m.len());
        let log2 = log.try_clone().context("cannot duplicate the log file")?;
        let mut cmd = Command::new(&exe);
        cmd.arg("server")
            .arg("--config")
            .arg(&config_path)
            .arg("--name")
            .arg(&sc.name)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // A process group of its own: a Ctrl-C in the starting shell must not stop it.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        unblock_signals(&mut cmd);
        if lifetime == Lifetime::DieWithUs {
            die_with_parent(&mut cmd);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start server {}", sc.name))?;
        children.push((sc.name.clone(), child, log_start));
    }
    let rt = runtime()?;
    let client = {
        let _g = rt.enter();
        Client::new(config.clone())
    };
    let deadline = Instant::now() + wait;
    loop {
        for (name, child, log_start) in children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                let sc = config.servers.iter().find(|s| &s.name == name);
                let why = sc
                    .and_then(|sc| last_error(&log_file(sc), *log_start))
                    .map(|e| match e.strip_prefix(&format!("server {name}: ")) {
                        Some(rest) => rest.to_string(),
                        None => e,
                    })
                    .unwrap_or_else(|| format!("{status}"));
                let log = sc.map(|sc| log_file(sc).display().to_string());
                bail!(
                    "server {name} did not start: {why} (log: {})",
                    log.unwrap_or_default()
                );
            }
        }
        let reports = rt.block_on(client.ping());
        let down: Vec<_> = reports.iter().filter(|r| r.result.is_err()).collect();
        if down.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            let names: Vec<_> = down.iter().map(|r| r.name.as_str()).collect();
            bail!("servers not answering after {wait:?}: {}", names.join(", "));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(children.into_iter().map(|(_, c, _)| c).collect())
}

/// The error a server that failed to start printed last in its log (`pvfs: ...`),
/// after byte `from`.
fn last_error(path: &Path, from: u64) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(bytes.get(from as usize..)?);
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("pvfs: "))
        .map(str::to_string)
}

/// Clears the signal mask of the child `cmd` starts (the caller may block signals it
/// waits for in a thread; a server must get its SIGTERM).
pub fn unblock_signals(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: sigemptyset and pthread_sigmask are async-signal-safe; the closure
    // allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
}

/// Makes the child `cmd` starts get SIGKILL when the calling thread ends, also when it
/// is killed (`PR_SET_PDEATHSIG`).
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: prctl, getppid and raise are async-signal-safe; the closure allocates
    // nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            // The parent may have died before prctl: then nobody sends the signal.
            if libc::getppid() as u32 != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// `pvfs start`.
pub fn start(a: StartArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&a.config.config)?;
    let running: Vec<bool> = config
        .servers
        .iter()
        .map(|sc| running_pid(sc).is_some())
        .collect();
    let children = start_servers(&a.config.config, &config, a.wait, Lifetime::Detached)?;
    for (sc, was) in config.servers.iter().zip(running) {
        let pid = running_pid(sc)
            .map(|p| p.to_string())
            .unwrap_or_else(|| "?".into());
        println!(
            "{:<8} {:<22} {:<10} pid {pid:<8} log {}{}",
            sc.name,
            sc.address,
            sc.roles.describe(),
            log_file(sc).display(),
            if was { "  (already running)" } else { "" }
        );
    }
    println!("{} servers answering", config.servers.len());
    // The servers outlive this command.
    drop(children);
    Ok(ExitCode::SUCCESS)
}

/// Stops every server of `config` (SIGTERM, then waits up to `wait` each). Returns
/// the names of servers that did not stop.
pub fn stop_servers(config: &Config, wait: Duration, quiet: bool) -> Vec<String> {
    signal_servers(config, libc::SIGTERM, wait, quiet)
}

/// Sends `sig` to every running server of `config` and waits up to `wait` for each to
/// exit. Returns the names of servers that did not stop.
fn signal_servers(config: &Config, sig: libc::c_int, wait: Duration, quiet: bool) -> Vec<String> {
    let mut signalled = Vec::new();
    for sc in &config.servers {
        match running_pid(sc) {
            None => {
                if !quiet {
                    println!("{:<8} not running", sc.name);
                }
            }
            Some(pid) => {
                // SAFETY: kill(2) with a pid we verified is our server process.
                let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
                if rc != 0 {
                    println!(
                        "{:<8} cannot signal pid {pid}: {}",
                        sc.name,
                        std::io::Error::last_os_error()
                    );
                } else {
                    signalled.push((sc.name.clone(), pid, Instant::now()));
                }
            }
        }
    }
    let mut failed = Vec::new();
    for (name, pid, started) in signalled {
        let deadline = started + wait;
        loop {
            reap(pid);
            if !is_our_server(pid, &name) {
                if !quiet {
                    println!(
                        "{name:<8} stopped (pid {pid}, {:.1}s)",
                        started.elapsed().as_secs_f64()
                    );
                }
                break;
            }
            if Instant::now() > deadline {
                println!("{name:<8} did not stop within {wait:?} (pid {pid})");
                failed.push(name);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    failed
}

/// Collects the exit status of `pid` if it is our child (no-op otherwise).
fn reap(pid: u32) {
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG on a specific pid; fails harmlessly (ECHILD) if it
    // is not our child.
    unsafe {
        libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG);
    }
}

/// `pvfs stop`.
pub fn stop(a: StopArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&a.config.config)?;
    let sig = if a.now { libc::SIGUSR1 } else { libc::SIGTERM };
    let failed = signal_servers(&config, sig, a.wait, false);
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        bail!(
            "{} server(s) did not stop: {}",
            failed.len(),
            failed.join(", ")
        )
    }
}
