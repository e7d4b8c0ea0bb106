//! `pvfs mount` and `pvfs umount`: the FUSE mount (`crates/fuse`, `docs/fuse.md`).
//!
//! Without `--foreground`, `pvfs mount` starts itself again as a background process
//! (a new session, working directory `/`, stdin closed) and returns once that
//! process reports the mount live, or fails with the error it printed. The
//! background process then sends its output to `--log FILE`, or nowhere.

use std::io::{BufRead, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use pvfs_config::{parse_duration, parse_size};
use pvfs_fuse::{MountOptions, Unmounted};
use tracing_subscriber::fmt::writer::BoxMakeWriter;

use crate::cmd::load_config;
use crate::ConfigArg;

/// What the background process prints once the mount is live.
const READY: &str = "pvfs-mount-ready";
/// Longest wait for a background mount to come up.
const START_WAIT: Duration = Duration::from_secs(120);

/// Options of `pvfs mount`.
#[derive(Args)]
pub struct MountArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Serve from this process until unmounted (default: in the background).
    #[arg(long, short = 'f')]
    foreground: bool,
    /// How long the kernel may cache attributes (size, mode, times) when other
    /// clients' changes cannot reach the mount.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    attr_timeout: Duration,
    /// How long the kernel may cache names when other clients' changes cannot reach
    /// the mount.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    entry_timeout: Duration,
    /// How long the kernel may cache names, attributes and file pages while every
    /// server sends the mount the changes other clients make (they are dropped as
    /// they come); 0 turns this off.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    cache_timeout: Duration,
    /// Threads reading FUSE requests.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
    /// Let other users use the mount (non-root mounts need user_allow_other in
    /// /etc/fuse.conf).
    #[arg(long)]
    allow_other: bool,
    /// Bypass the kernel's page cache (every read and write goes to the servers).
    #[arg(long)]
    direct_io: bool,
    /// Read-ahead window set after mounting (K/M suffixes; 0 keeps the kernel's).
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    read_ahead: u64,
    /// Largest read or write request of the kernel (128K to 16M; above 1M a root
    /// mount raises the kernel's fs.fuse.max_pages_limit if needed).
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    max_request: u64,
    /// Largest file read through the kernel's page cache when opened read-only
    /// (K, M, G, T or P suffixes: powers of 1024); larger files, and files opened for writing, are served
    /// without it, with the mount's own read-ahead (docs/fuse.md).
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    page_cache_max: u64,
    /// Answer writes once their data is in the mount and send it to the servers in
    /// the background, several at a time (other clients see a write once it arrived;
    /// an error comes with a later write, fsync or close; docs/fuse.md).
    #[arg(long)]
    write_behind: bool,
    /// Serve this mount's Prometheus metrics on HOST:PORT (GET /metrics): requests it
    /// sent by kind, their latency and errors, bytes read and written (default: none).
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<String>,
    /// Where a background mount writes its log (default: nowhere).
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Internal: this is the background process of a `pvfs mount`.
    #[arg(long, hide = true)]
    daemon_child: bool,
    /// The directory to mount on.
    mountpoint: PathBuf,
}

/// Options of `pvfs umount`.
#[derive(Args)]
pub struct UmountArgs {
    /// Detach at once even if busy (the mount goes when its last user lets go).
    #[arg(long, short = 'l')]
    lazy: bool,
    /// The mount point.
    mountpoint: PathBuf,
}

/// Mounts, in the background unless `--foreground`.
pub fn mount(a: MountArgs) -> anyhow::Result<ExitCode> {
    if a.foreground || a.daemon_child {
        serve(a)
    } else {
        background(a)
    }
}

fn serve(a: MountArgs) -> anyhow::Result<ExitCode> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PVFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A background mount logs to its log file from the start; its standard error
    // (read by the waiting `pvfs mount`) carries only a failure.
    let log_file = match (&a.log, a.daemon_child) {
        (Some(p), true) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("{}", p.display()))?,
        ),
        _ => None,
    };
    let writer = match log_file {
        Some(f) => BoxMakeWriter::new(std::sync::Mutex::new(f)),
        None => BoxMakeWriter::new(std::io::stderr),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(!a.daemon_child)
        .init();
    let config = load_config(&a.config.config)?;
    let opts = MountOptions {
        attr_timeout: a.attr_timeout,
        entry_timeout: a.entry_timeout,
        cache_timeout: a.cache_timeout,
        threads: usize::from(a.threads),
        allow_other: a.allow_other,
        direct_io: a.direct_io,
        read_ahead: a.read_ahead,
        max_request: u32::try_from(a.max_request).unwrap_or(u32::MAX),
        page_cache_max: a.page_cache_max,
        write_behind: a.write_behind,
        metrics: a.metrics.clone(),
    };
    let daemon = a.daemon_child;
    let log = a.log.clone();
    pvfs_fuse::serve(config, &a.mountpoint, &opts, || {
        if daemon {
            announce_ready(log.as_deref());
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Tells the waiting `pvfs mount` the mount is live, then sends this process's
/// output to the log (or nowhere): the parent stops reading.
fn announce_ready(log: Option<&Path>) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{READY}");
    let _ = out.flush();
    let target = match log {
        Some(p) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p),
        None => std::fs::OpenOptions::new().write(true).open("/dev/null"),
    };
    if let Ok(f) = target {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 onto the standard descriptors of this process.
        unsafe {
            libc::dup2(f.as_raw_fd(), 1);
            libc::dup2(f.as_raw_fd(), 2);
        }
    }
}

/// Starts the background process and waits until it reports the mount live.
fn background(a: MountArgs) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the pvfs binary")?;
    let config = a
        .config
        .config
        .canonicalize()
        .with_context(|| format!("{}", a.config.config.display()))?;
    let mountpoint = std::path::absolute(&a.mountpoint)
        .with_context(|| format!("{}", a.mountpoint.display()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg("--config")
        .arg(&config)
        .arg("--daemon-child")
        .arg("--attr-timeout")
        .arg(format!("{}ms", a.attr_timeout.as_millis()))
        .arg("--entry-timeout")
        .arg(format!("{}ms", a.entry_timeout.as_millis()))
        .arg("--cache-timeout")
        .arg(format!("{}ms", a.cache_timeout.as_millis()))
        .arg("--threads")
        .arg(a.threads.to_string())
        .arg("--read-ahead")
        .arg(a.read_ahead.to_string())
        .arg("--max-request")
        .arg(a.max_request.to_string())
        .arg("--page-cache-max")
        .arg(a.page_cache_max.to_string());
    if a.allow_other {
        cmd.arg("--allow-other");
    }
    if a.direct_io {
        cmd.arg("--direct-io");
    }
    if a.write_behind {
        cmd.arg("--write-behind");
    }
    if let Some(log) = &a.log {
        cmd.arg("--log").arg(std::path::absolute(log)?);
    }
    if let Some(addr) = &a.metrics {
        cmd.arg("--metrics").arg(addr);
    }
    cmd.arg(&mountpoint)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the mount process")?;
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        bail!("cannot read the mount process's output");
    };
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(START_WAIT) {
        Ok(line) if line.trim() == READY => Ok(ExitCode::SUCCESS),
        Ok(_) => {
            let status = child.wait().ok();
            let text = err_reader.join().unwrap_or_default();
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim_start_matches("pvfs: ").to_string());
            match (last, status) {
                (Some(msg), _) => bail!("{msg}"),
                (None, Some(st)) => bail!("the mount process exited ({st})"),
                (None, None) => bail!("the mount process failed"),
            }
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{}: the mount did not come up within {START_WAIT:?}",
                mountpoint.display()
            )
        }
    }
}

/// Unmounts (lazily when busy, or with `--lazy`).
pub fn umount(a: UmountArgs) -> anyhow::Result<ExitCode> {
    match pvfs_fuse::unmount(&a.mountpoint, a.lazy)? {
        Unmounted::Clean => {}
        Unmounted::Detached if !a.lazy => println!(
            "{}: busy; detached (it goes away when its last user lets go)",
            a.mountpoint.display()
        ),
        Unmounted::Detached => {}
    }
    Ok(ExitCode::SUCCESS)
}
