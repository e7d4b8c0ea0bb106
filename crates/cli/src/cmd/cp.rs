//! `pvfs cp`: copies between the local file system and pvfs, and within pvfs.
//!
//! The copy moves in chunks of a whole number of stripe rows (every data server gets
//! its share of each chunk in one request), and two chunks move at once: one is
//! read while the other is written, so both sides stay busy.

use std::io::IsTerminal;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use futures::{stream, StreamExt, TryStreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use pvfs_client::{Client, Errno, File, LayoutSpec, ObjKind};
use pvfs_config::{format_size, parse_size};

use crate::cmd::{strip_prefix, with_client, UsageError};
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
    /// Copy a directory and everything in it (directories, files, symbolic links).
    #[arg(short = 'r', short_alias = 'R', long)]
    recursive: bool,
    /// No progress bar even on a terminal.
    #[arg(long, short = 'q')]
    quiet: bool,
    /// Source: a local path or pvfs:/path (a directory with -r).
    src: String,
    /// Destination: a local path or pvfs:/path (an existing directory gets the source's name).
    dst: String,
}

enum End {
    Local(Arc<std::fs::File>),
    Pvfs(Box<File>),
}

/// One end of a copy: a local path, or a path in pvfs (written `pvfs:/path`).
#[derive(Clone, Debug)]
enum Loc {
    Local(PathBuf),
    Pvfs(String),
}

impl Loc {
    fn parse(arg: &str) -> Loc {
        match strip_prefix(arg) {
            Some(p) => Loc::Pvfs(p.to_string()),
            None => Loc::Local(PathBuf::from(arg)),
        }
    }

    /// `name` inside this directory.
    fn join(&self, name: &str) -> Loc {
        match self {
            Loc::Local(p) => Loc::Local(p.join(name)),
            Loc::Pvfs(p) => Loc::Pvfs(format!("{}/{name}", p.trim_end_matches('/'))),
        }
    }

    fn base_name(&self) -> String {
        match self {
            Loc::Local(p) => p
                .file_name()
                .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into()),
            Loc::Pvfs(p) => base_name(p).to_string(),
        }
    }

    /// What is there now: None when nothing is.
    async fn kind(&self, client: &Client) -> anyhow::Result<Option<ObjKind>> {
        match self {
            Loc::Pvfs(p) => match client.lstat_lite(p).await {
                Ok(attr) => Ok(Some(attr.kind())),
                Err(e) if e.errno == Errno::ENOENT => Ok(None),
                Err(e) => Err(e.into()),
            },
            Loc::Local(p) => match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => Ok(Some(ObjKind::Dir)),
                Ok(m) if m.file_type().is_symlink() => Ok(Some(ObjKind::Symlink)),
                Ok(_) => Ok(Some(ObjKind::File)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(anyhow::Error::from(e).context(format!("cannot stat {self}"))),
            },
        }
    }

    /// Whether this names a directory, following a final symbolic link.
    async fn is_dir(&self, client: &Client) -> bool {
        match self {
            Loc::Pvfs(p) => client.stat(p).await.is_ok_and(|a| a.kind() == ObjKind::Dir),
            Loc::Local(p) => p.is_dir(),
        }
    }
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loc::Local(p) => write!(f, "{}", p.display()),
            Loc::Pvfs(p) => write!(f, "pvfs:{p}"),
        }
    }
}

fn base_name(p: &str) -> &str {
    p.trim_end_matches('/').rsplit('/').next().unwrap_or(p)
}

/// Copies one file, or with `-r` a directory and everything in it.
pub fn run(a: CpArgs) -> anyhow::Result<ExitCode> {
    if strip_prefix(&a.src).is_none() && strip_prefix(&a.dst).is_none() {
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
        let (src, mut dst) = (Loc::parse(&a.src), Loc::parse(&a.dst));
        // An existing directory gets the source's name, as cp(1) does.
        if dst.is_dir(&client).await {
            dst = dst.join(&src.base_name());
        }
        if src.kind(&client).await? == Some(ObjKind::Dir) {
            if !a.recursive {
                bail!("{src}: is a directory (use -r)");
            }
            let (files, bytes) = copy_tree(&client, &a, &src, &dst).await?;
            if !a.quiet {
                eprintln!(
                    "copied {files} files, {} in {:.2}s",
                    format_size(bytes),
                    started.elapsed().as_secs_f64()
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        let show = !a.quiet && std::io::stderr().is_terminal();
        let size = copy_file(&client, &a, &src, &dst, show).await?;
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

/// Copies one file from `src` to the file `dst` (made or emptied first), with a
/// progress bar when `show`. Returns its size.
async fn copy_file(
    client: &Client,
    a: &CpArgs,
    src: &Loc,
    dst: &Loc,
    show: bool,
) -> anyhow::Result<u64> {
    let (from, size, mode) = open_source(client, src).await?;
    let (to, chunk) = open_dest(client, a, dst, mode).await?;
    let bar = show.then(|| {
        let bar = ProgressBar::new(size);
        bar.set_style(
            ProgressStyle::with_template(
                "{bytes}/{total_bytes} {wide_bar} {binary_bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    });
    copy(&from, &to, size, chunk as usize, bar.as_ref()).await?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(size)
}

/// Files of a tree copied at once (each moves its own chunks two at a time).
const FILES_AT_ONCE: usize = 4;

/// Copies directory `src` and everything in it to `dst` (made if missing):
/// directories, files and symbolic links; anything else is left out with a warning.
/// Returns the files and bytes copied.
async fn copy_tree(
    client: &Client,
    a: &CpArgs,
    src: &Loc,
    dst: &Loc,
) -> anyhow::Result<(u64, u64)> {
    if let (Loc::Pvfs(s), Loc::Pvfs(d)) = (src, dst) {
        let s = s.trim_end_matches('/');
        if d.trim_end_matches('/') == s || d.starts_with(&format!("{s}/")) {
            bail!("cannot copy {src} into itself ({dst})");
        }
    }
    let mut files = Vec::new();
    let mut dirs = vec![(src.clone(), dst.clone())];
    while let Some((from, to)) = dirs.pop() {
        make_dir(client, &from, &to).await?;
        for (name, kind) in list(client, &from).await? {
            let (f, t) = (from.join(&name), to.join(&name));
            match kind {
                Some(ObjKind::Dir) => dirs.push((f, t)),
                Some(ObjKind::File) => files.push((f, t)),
                Some(ObjKind::Symlink) => copy_symlink(client, &f, &t).await?,
                _ => eprintln!("pvfs: {f}: not a file, directory or symbolic link: left out"),
            }
        }
    }
    let sizes: Vec<u64> = stream::iter(files.iter())
        .map(|(f, t)| copy_file(client, a, f, t, false))
        .buffer_unordered(FILES_AT_ONCE)
        .try_collect()
        .await?;
    Ok((sizes.len() as u64, sizes.iter().sum()))
}

/// Makes directory `to` for a copy of directory `from` (with its permission bits);
/// one that exists is used as it is.
async fn make_dir(client: &Client, from: &Loc, to: &Loc) -> anyhow::Result<()> {
    let mode = match from {
        Loc::Pvfs(p) => client.stat(p).await?.mode,
        Loc::Local(p) => std::fs::metadata(p)
            .with_context(|| format!("cannot stat {from}"))?
            .mode(),
    } & 0o7777;
    match to {
        Loc::Pvfs(p) => match client.mkdir(p, mode).await {
            Err(e) if e.errno == Errno::EEXIST && to.is_dir(client).await => Ok(()),
            r => r.map(|_| ()).map_err(Into::into),
        },
        Loc::Local(p) => match std::fs::create_dir(p) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && p.is_dir() => Ok(()),
            r => r.with_context(|| format!("cannot create {to}")),
        },
    }
}

/// The names in directory `dir` and what they are (None: a local file of another
/// kind), in name order.
async fn list(client: &Client, dir: &Loc) -> anyhow::Result<Vec<(String, Option<ObjKind>)>> {
    let mut names = match dir {
        Loc::Pvfs(p) => client
            .readdir(p)
            .await?
            .into_iter()
            .map(|e| (e.name, Some(e.kind)))
            .collect(),
        Loc::Local(p) => {
            let mut names = Vec::new();
            for e in std::fs::read_dir(p).with_context(|| format!("cannot list {dir}"))? {
                let e = e.with_context(|| format!("cannot list {dir}"))?;
                let t = e
                    .file_type()
                    .with_context(|| format!("cannot list {dir}"))?;
                let kind = if t.is_dir() {
                    Some(ObjKind::Dir)
                } else if t.is_file() {
                    Some(ObjKind::File)
                } else if t.is_symlink() {
                    Some(ObjKind::Symlink)
                } else {
                    None
                };
                names.push((e.file_name().to_string_lossy().into_owned(), kind));
            }
            names
        }
    };
    names.sort_by(|x, y| x.0.cmp(&y.0));
    Ok(names)
}

/// Makes symbolic link `to` with the target of `from`.
async fn copy_symlink(client: &Client, from: &Loc, to: &Loc) -> anyhow::Result<()> {
    let target = match from {
        Loc::Pvfs(p) => client.readlink(p).await?,
        Loc::Local(p) => std::fs::read_link(p)
            .with_context(|| format!("cannot read link {from}"))?
            .to_string_lossy()
            .into_owned(),
    };
    match to {
        Loc::Pvfs(p) => client.symlink(&target, p).await.map(|_| ())?,
        Loc::Local(p) => {
            std::os::unix::fs::symlink(&target, p).with_context(|| format!("cannot create {to}"))?
        }
    }
    Ok(())
}

/// Opens the source: the file, its size and its permission bits.
async fn open_source(client: &Client, src: &Loc) -> anyhow::Result<(End, u64, u32)> {
    match src {
        Loc::Pvfs(p) => {
            let file = client.open(p).await?;
            let attr = file.stat().await?;
            Ok((End::Pvfs(Box::new(file)), attr.size, attr.mode & 0o7777))
        }
        Loc::Local(p) => {
            let f = std::fs::File::open(p).with_context(|| format!("cannot open {src}"))?;
            let meta = f.metadata().with_context(|| format!("cannot stat {src}"))?;
            if meta.is_dir() {
                bail!("{src}: is a directory");
            }
            Ok((End::Local(Arc::new(f)), meta.len(), meta.mode() & 0o7777))
        }
    }
}

/// Opens (makes or empties) the destination file: it and the chunk size to copy in.
async fn open_dest(
    client: &Client,
    a: &CpArgs,
    dst: &Loc,
    mode: u32,
) -> anyhow::Result<(End, u64)> {
    match dst {
        Loc::Pvfs(path) => {
            let spec = LayoutSpec {
                stripe_size: a.stripe_size,
                stripe_count: a.stripe_count,
                base: None,
                replicas: a.replicas,
            };
            let file = client.create(path, mode, spec, false).await?;
            if file.size().await? > 0 {
                file.truncate(0).await?;
            }
            let l = file.layout();
            let row = l.stripe_size * l.datafiles.len() as u64;
            let chunk = a
                .chunk
                .unwrap_or_else(|| (16 << 20) / row.max(1) * row)
                .max(row);
            Ok((End::Pvfs(Box::new(file)), chunk))
        }
        Loc::Local(path) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(mode)
                .open(path)
                .with_context(|| format!("cannot create {dst}"))?;
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
