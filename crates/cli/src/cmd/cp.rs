//! `pvfs cp`: copies between the local file system and pvfs, and within pvfs.
//!
//! The copy moves in chunks of a whole number of stripe rows (every data server gets
//! its share of each chunk in one request), and two chunks move at once: one is
//! read while the other is written, so both sides stay busy.

use std::io::IsTerminal;
use std::os::unix::fs::FileExt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use futures::{stream, StreamExt, TryStreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use pvfs_client::{Client, Errno, File, LayoutSpec, ObjKind};
use pvfs_config::{format_size, parse_size};

use crate::cmd::{with_client, UsageError};
use crate::ConfigArg;

/// Options of `pvfs cp`.
#[derive(Args)]
pub struct CpArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Stripe size of a new pvfs file (K, M, G, T or P suffixes: powers of 1024).
    #[arg(long, value_parser = parse_size)]
    stripe_size: Option<u64>,
    /// Stripe count of a new pvfs file.
    #[arg(long)]
    stripe_count: Option<u32>,
    /// Copies of every stripe unit of a new pvfs file (1 to 3).
    #[arg(long)]
    replicas: Option<u32>,
    /// Bytes per chunk (default: 16 MiB rounded to whole stripe rows).
    #[arg(long, value_parser = parse_size)]
    chunk: Option<u64>,
    /// No progress bar even on a terminal.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Source: a local path or pvfs:/path.
    src: String,
    /// Destination: a local path or pvfs:/path (an existing directory gets the source's name).
    dst: String,
}

enum End {
    Local(Arc<std::fs::File>),
    Pvfs(Box<File>),
}

fn pvfs_path(s: &str) -> Option<&str> {
    s.strip_prefix("pvfs:")
}

fn base_name(p: &str) -> &str {
    p.trim_end_matches('/').rsplit('/').next().unwrap_or(p)
}

/// Copies one file.
pub fn run(a: CpArgs) -> anyhow::Result<ExitCode> {
    if pvfs_path(&a.src).is_none() && pvfs_path(&a.dst).is_none() {
        // Like `gsutil cp` and `aws s3 cp`: a copy that touches no pvfs file is a
        // mistake, not a local copy.
        return Err(UsageError(format!(
            "neither {} nor {} is a pvfs path: write pvfs files as pvfs:/path (e.g. pvfs cp {} \
             pvfs:/{}); for a local copy use cp",
            a.src,
            a.dst,
            a.src,
            base_name(&a.src)
        ))
        .into());
    }
    if a.chunk == Some(0) {
        return Err(UsageError("--chunk must be at least one byte".into()).into());
    }
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let started = Instant::now();
        let (src, size) = open_source(&client, &a.src).await?;
        let (dst, chunk) = open_dest(&client, &a, size).await?;
        let bar = if !a.quiet && std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(size);
            bar.set_style(
                ProgressStyle::with_template(
                    "{bytes}/{total_bytes} {wide_bar} {binary_bytes_per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            Some(bar)
        } else {
            None
        };
        copy(&src, &dst, size, chunk as usize, bar.as_ref()).await?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let secs = started.elapsed().as_secs_f64();
        if !a.quiet {
            eprintln!(
                "copied {} in {secs:.2}s ({}/s)",
                format_size(size),
                format_size((size as f64 / secs.max(1e-9)) as u64)
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

async fn open_source(client: &Client, src: &str) -> anyhow::Result<(End, u64)> {
    match pvfs_path(src) {
        Some(p) => {
            let file = client.open(p).await?;
            let size = file.size().await?;
            Ok((End::Pvfs(Box::new(file)), size))
        }
        None => {
            let f = std::fs::File::open(src).with_context(|| format!("cannot open {src}"))?;
            let meta = f.metadata().with_context(|| format!("cannot stat {src}"))?;
            if meta.is_dir() {
                bail!("{src}: is a directory");
            }
            Ok((End::Local(Arc::new(f)), meta.len()))
        }
    }
}

async fn open_dest(client: &Client, a: &CpArgs, size: u64) -> anyhow::Result<(End, u64)> {
    let stripe_row = |file: &File| {
        let l = file.layout();
        l.stripe_size * l.datafiles.len() as u64
    };
    match pvfs_path(&a.dst) {
        Some(p) => {
            let mut path = p.to_string();
            if let Ok(attr) = client.stat(&path).await {
                if attr.kind() == ObjKind::Dir {
                    path = format!("{}/{}", path.trim_end_matches('/'), base_name(&a.src));
                }
            }
            let spec = LayoutSpec {
                stripe_size: a.stripe_size,
                stripe_count: a.stripe_count,
                base: None,
                replicas: a.replicas,
            };
            let file = client.create(&path, 0o644, spec, false).await?;
            if file.size().await? > 0 {
                file.truncate(0).await?;
            }
            let row = stripe_row(&file);
            let chunk = a
                .chunk
                .unwrap_or_else(|| (16 << 20) / row.max(1) * row)
                .max(row);
            let _ = size;
            Ok((End::Pvfs(Box::new(file)), chunk))
        }
        None => {
            let mut path = std::path::PathBuf::from(&a.dst);
            if path.is_dir() {
                path.push(base_name(&a.src));
            }
            let f = std::fs::File::create(&path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            Ok((End::Local(Arc::new(f)), a.chunk.unwrap_or(16 << 20)))
        }
    }
}

async fn read_chunk(src: &End, off: u64, mut buf: Vec<u8>) -> anyhow::Result<Vec<u8>> {
    match src {
        End::Pvfs(f) => {
            let n = f.read_at(off, &mut buf).await?;
            buf.truncate(n);
            Ok(buf)
        }
        End::Local(f) => {
            let f = f.clone();
            tokio::task::spawn_blocking(move || {
                let mut got = 0;
                while got < buf.len() {
                    match f.read_at(&mut buf[got..], off + got as u64) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(anyhow::Error::from(e).context("local read failed")),
                    }
                }
                buf.truncate(got);
                Ok(buf)
            })
            .await
            .context("local read task failed")?
        }
    }
}

async fn write_chunk(dst: &End, off: u64, buf: Vec<u8>) -> anyhow::Result<Vec<u8>> {
    match dst {
        End::Pvfs(f) => {
            f.write_at(off, &buf).await?;
            Ok(buf)
        }
        End::Local(f) => {
            let f = f.clone();
            tokio::task::spawn_blocking(move || {
                f.write_all_at(&buf, off).context("local write failed")?;
                Ok(buf)
            })
            .await
            .context("local write task failed")?
        }
    }
}

/// Chunks moving at once. Each is read and then written; with two, one chunk is read
/// while the other is on the wire, and the data servers never wait for the next
/// request between chunks.
const IN_FLIGHT: usize = 2;

async fn copy(
    src: &End,
    dst: &End,
    size: u64,
    chunk: usize,
    bar: Option<&ProgressBar>,
) -> anyhow::Result<()> {
    assert!(chunk > 0, "a copy moves in non-empty chunks");
    // Buffers come back after their write, so a copy allocates IN_FLIGHT of them.
    let spare = std::sync::Mutex::new(Vec::<Vec<u8>>::new());
    let spare = &spare;
    let one = |off: u64| async move {
        let want = (size - off).min(chunk as u64) as usize;
        let mut buf = spare
            .lock()
            .ok()
            .and_then(|mut s| s.pop())
            .unwrap_or_default();
        buf.resize(want, 0);
        let buf = read_chunk(src, off, buf).await?;
        let end = off + buf.len() as u64;
        if buf.len() < want {
            return Err(pvfs_client::Error::new(
                Errno::EIO,
                format!("source ended at {end} of {size} bytes"),
            )
            .into());
        }
        let buf = write_chunk(dst, off, buf).await?;
        if let Ok(mut s) = spare.lock() {
            s.push(buf);
        }
        Ok::<u64, anyhow::Error>(end)
    };
    let mut chunks = stream::iter((0..size).step_by(chunk))
        .map(one)
        .buffered(IN_FLIGHT);
    while let Some(end) = chunks.try_next().await? {
        if let Some(b) = bar {
            b.set_position(end);
        }
    }
    Ok(())
}
