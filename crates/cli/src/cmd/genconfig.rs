//! `pvfs genconfig`: writes the configuration of a new file system.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use pvfs_config::{parse_metadata_sync, parse_size, Config, GenOptions, MetadataSync};

use super::keygen;

/// Options of `pvfs genconfig`.
#[derive(Args)]
pub struct GenconfigArgs {
    /// Number of servers.
    #[arg(long)]
    servers: usize,
    /// How many of them (the first ones) also hold metadata (default: all).
    #[arg(long)]
    meta_servers: Option<usize>,
    /// Directory under which each server keeps its storage (DIR/NAME).
    #[arg(long)]
    dir: PathBuf,
    /// Address the servers listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port of the first server; server i listens on PORT+i (0 picks free ports now).
    #[arg(long, default_value_t = 7000)]
    port: u16,
    /// First port of the servers' Prometheus metrics (GET /metrics, on each server's
    /// host): server i serves them on METRICS_PORT+i (0 picks free ports now; default:
    /// 100 above the servers' ports).
    #[arg(long, value_name = "METRICS_PORT")]
    metrics_port: Option<u16>,
    /// Default stripe size (K, M, G, T or P suffixes: powers of 1024).
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    stripe_size: u64,
    /// Default stripe count (default: all data servers).
    #[arg(long)]
    stripe_count: Option<u32>,
    /// Dirdata shards per new directory (default: all metadata servers).
    #[arg(long)]
    dir_shards: Option<u32>,
    /// Copies of every stripe unit of new files (1 to 3); more than one also names
    /// the servers that run the authority (`docs/replication.md`).
    #[arg(long, default_value_t = 1)]
    replicas: u32,
    /// Name of the file system.
    #[arg(long, default_value = "pvfs")]
    name: String,
    /// munged's socket, for servers that check MUNGE credentials and clients that
    /// prove their user with them (default: libmunge's, /run/munge/munge.socket.2).
    #[arg(long, value_name = "PATH")]
    munge_socket: Option<PathBuf>,
    /// Run every connection over TLS 1.3 (for networks that are not trusted): writes a
    /// CA (STEM-ca.pem, for every node) and the servers' certificate and key
    /// (STEM-tls.pem, STEM-tls.key: servers only) beside the configuration.
    #[arg(long)]
    tls: bool,
    /// When metadata servers sync their redo logs: "commit" (every change on disk
    /// before it is answered) or at least every DURATION (default "10ms"; changes
    /// are in the kernel when answered, and fsync makes them stable at once).
    #[arg(long, value_name = "commit|DURATION", value_parser = parse_metadata_sync)]
    metadata_sync: Option<MetadataSync>,
    /// Where to write the configuration ("-" for standard output). Its key files are
    /// written beside it (STEM.key, STEM-server.key); all are readable by their owner
    /// only.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// Replace an existing FILE and key files (the new configuration is a new file
    /// system: servers refuse the storage of the old one).
    #[arg(long)]
    force: bool,
}

/// Generates and writes the file.
pub fn run(a: GenconfigArgs) -> anyhow::Result<ExitCode> {
    let dir = if a.dir.is_absolute() {
        a.dir
    } else {
        std::env::current_dir()
            .context("cannot read the current directory")?
            .join(a.dir)
    };
    let stdout = a.output.as_os_str() == "-";
    let key_stem = if stdout {
        "pvfs".to_string()
    } else {
        a.output
            .file_stem()
            .map_or("pvfs".into(), |s| s.to_string_lossy().into_owned())
    };
    let opts = GenOptions {
        meta_servers: a.meta_servers,
        host: a.host,
        base_port: a.port,
        stripe_size: a.stripe_size,
        stripe_count: a.stripe_count,
        dir_shards: a.dir_shards,
        replicas: a.replicas,
        name: a.name,
        key_stem,
        tls: a.tls,
        metrics_port: a.metrics_port,
        ..GenOptions::new(a.servers, dir)
    };
    let mut config = Config::generate(&opts)?;
    config.security.munge_socket = a.munge_socket;
    // The servers run as whoever makes their configuration (and owns its key files).
    // SAFETY: geteuid cannot fail and touches no memory.
    config.security.server_uid = unsafe { libc::geteuid() };
    if let Some(m) = a.metadata_sync {
        config.defaults.metadata_sync = m;
    }
    if stdout {
        print!("{}", config.to_toml());
        eprintln!(
            "no key files written: make them beside the saved file with pvfs keygen {} and \
             pvfs keygen {}",
            config.security.key.display(),
            config.security.server_key.display()
        );
    } else {
        let written = keygen::write_new_file_system(&config, &a.output, a.force)?;
        eprintln!(
            "wrote {} ({} server{}, fsid {:#x}) and its keys {} and {}",
            a.output.display(),
            config.servers.len(),
            if config.servers.len() == 1 { "" } else { "s" },
            config.fsid,
            written.security.key.display(),
            written.security.server_key.display()
        );
        // All three are private; the configuration holds no key, and every user who
        // runs pvfs commands or programs needs to read it.
        eprintln!(
            "all three are readable by you only. Every client node needs the \
             configuration, and users must be able to read it (it holds no key: \
             chmod 644 {}); the node key goes to servers and to nodes whose root you \
             trust, the server key to servers only (docs/security.md, \"Keys\")",
            a.output.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
