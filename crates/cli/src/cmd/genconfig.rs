//! `pvfs genconfig`: writes the configuration of a new file system.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use pvfs_config::{parse_size, Config, ConfigError, GenOptions};

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
    /// Default stripe size (K, M, G, T or P suffixes: powers of 1024).
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    stripe_size: u64,
    /// Default stripe count (default: all data servers).
    #[arg(long)]
    stripe_count: Option<u32>,
    /// Dirdata shards per new directory (default: all metadata servers).
    #[arg(long)]
    dir_shards: Option<u32>,
    /// Name of the file system.
    #[arg(long, default_value = "pvfs")]
    name: String,
    /// Where to write the configuration ("-" for standard output). The file is
    /// created readable by its owner only (it holds the file system's secret).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// Replace an existing FILE (the new configuration is a new file system: servers
    /// refuse the storage of the old one).
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
    let opts = GenOptions {
        meta_servers: a.meta_servers,
        host: a.host,
        base_port: a.port,
        stripe_size: a.stripe_size,
        stripe_count: a.stripe_count,
        dir_shards: a.dir_shards,
        name: a.name,
        ..GenOptions::new(a.servers, dir)
    };
    let config = Config::generate(&opts)?;
    if a.output.as_os_str() == "-" {
        print!("{}", config.to_toml());
    } else {
        match config.write(&a.output, a.force) {
            Ok(()) => {}
            Err(ConfigError::Exists { path }) => bail!(
                "{path} already exists: it holds the fsid and secret of a file system, and \
                 a new one cannot open that file system's storage (--force replaces it)"
            ),
            Err(e) => return Err(e.into()),
        }
        eprintln!(
            "wrote {} ({} server{}, fsid {:#x})",
            a.output.display(),
            config.servers.len(),
            if config.servers.len() == 1 { "" } else { "s" },
            config.fsid
        );
    }
    Ok(ExitCode::SUCCESS)
}
