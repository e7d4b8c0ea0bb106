//! `pvfs ls`, `stat`, `mkdir`, `rm`, `mv`, `ln`: the namespace from the shell.

use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use pvfs_client::{Client, Errno, ObjKind};

use crate::cmd::{fs_path, strip_prefix, with_client};
use crate::output::{attr_json, blocks, mode_string, time_string};
use crate::ConfigArg;

/// Options of `pvfs ls`.
#[derive(Args)]
pub struct LsArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Long listing (mode, links, owner, size, time).
    #[arg(short = 'l')]
    long: bool,
    /// Machine-readable output (with attributes).
    #[arg(long)]
    json: bool,
    /// Also names that begin with a dot, and "." and "..".
    #[arg(short = 'a', conflicts_with = "almost_all")]
    all: bool,
    /// Also names that begin with a dot, but not "." and "..".
    #[arg(short = 'A')]
    almost_all: bool,
    /// Directory (or file) to list (`/dir`, or `pvfs:/dir` as `pvfs cp` writes it).
    #[arg(default_value = "/", value_parser = fs_path)]
    path: String,
}

/// Lists a directory; `-l` fetches attributes with the batched two-phase algorithm.
pub fn ls(a: LsArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let attr = client.lstat(&a.path).await?;
        if attr.kind() != ObjKind::Dir {
            print_entries(&a, vec![(base_name(&a.path).to_string(), Ok(attr), true)]);
            return Ok(ExitCode::SUCCESS);
        }
        // With a server down, list what the others hold and say what is missing.
        let listing = client
            .readdir_partial(&a.path, a.long || a.json, true)
            .await?;
        let mut rows: Vec<Row> = listing
            .entries
            .into_iter()
            .map(|(e, r, sized)| (e.name, r, sized))
            .collect();
        if !(a.all || a.almost_all) {
            rows.retain(|(name, _, _)| !name.starts_with('.'));
        }
        rows.sort_by(|x, y| x.0.cmp(&y.0));
        if a.all {
            // "." and "..", first, as ls(1) lists them.
            let parent = match a.path.trim_end_matches('/').rsplit_once('/') {
                Some((p, _)) if !p.is_empty() => p.to_string(),
                _ => "/".to_string(),
            };
            let mut dots = Vec::new();
            for (name, path) in [(".", a.path.as_str()), ("..", parent.as_str())] {
                dots.push((name.to_string(), client.stat(path).await, true));
            }
            rows.splice(0..0, dots);
        }
        print_entries(&a, rows);
        for e in &listing.missing {
            eprintln!("pvfs: {}: listing incomplete: {}", a.path, e.message);
        }
        Ok(if listing.missing.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}

/// One listed name: its attributes (or why not), and whether a file's size is known.
type Row = (String, pvfs_client::Result<pvfs_client::Attr>, bool);

fn print_entries(a: &LsArgs, rows: Vec<Row>) {
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(name, r, sized)| match r {
                Ok(attr) => {
                    let mut j = attr_json(attr);
                    j["name"] = name.clone().into();
                    if !sized && attr.kind() == ObjKind::File {
                        j["size"] = serde_json::Value::Null;
                        j["blocks"] = serde_json::Value::Null;
                    }
                    j
                }
                Err(e) => serde_json::json!({"name": name, "error": e.message}),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    for (name, r, sized) in rows {
        if !a.long {
            println!("{name}");
            continue;
        }
        match r {
            Ok(attr) => {
                let target = match &attr.detail {
                    pvfs_proto::ObjDetail::Symlink { target } => format!(" -> {target}"),
                    _ => String::new(),
                };
                // A file whose data server is down has an unknown size.
                let size = if sized || attr.kind() != ObjKind::File {
                    attr.size.to_string()
                } else {
                    "?".to_string()
                };
                println!(
                    "{} {:>3} {:>6} {:>6} {:>12} {} {name}{target}",
                    mode_string(attr.kind(), attr.mode),
                    attr.nlink,
                    attr.uid,
                    attr.gid,
                    size,
                    &time_string(attr.mtime)[..16],
                )
            }
            Err(e) => println!("?????????? {name}: {}", e.message),
        }
    }
}

fn base_name(path: &str) -> &str {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(path)
}

/// Options of `pvfs stat`.
#[derive(Args)]
pub struct StatArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Describe a final symlink itself instead of its target.
    #[arg(long)]
    no_follow: bool,
    /// What to describe.
    #[arg(value_parser = fs_path)]
    path: String,
}

/// Shows every attribute.
pub fn stat(a: StatArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let attr = if a.no_follow {
            client.lstat(&a.path).await?
        } else {
            client.stat(&a.path).await?
        };
        if a.json {
            let mut j = attr_json(&attr);
            j["path"] = a.path.clone().into();
            println!("{}", serde_json::to_string_pretty(&j)?);
            return Ok(ExitCode::SUCCESS);
        }
        println!("  path: {}", a.path);
        println!(
            "  type: {}   handle: {:#x}",
            attr.kind().name(),
            attr.handle
        );
        println!(
            "  size: {}   blocks: {}   links: {}",
            attr.size,
            blocks(&attr),
            attr.nlink
        );
        println!(
            "  mode: {:04o} ({})   uid: {}   gid: {}",
            attr.mode,
            mode_string(attr.kind(), attr.mode),
            attr.uid,
            attr.gid
        );
        for (label, t) in [
            ("access", attr.atime),
            ("modify", attr.mtime),
            ("change", attr.ctime),
        ] {
            println!("{label:>6}: {}.{:09} UTC", time_string(t), t.nsecs);
        }
        match &attr.detail {
            pvfs_proto::ObjDetail::File { layout } => println!(
                "layout: {} of {}",
                super::layout::stripes(layout.datafiles.len() as u64),
                pvfs_config::format_size(layout.stripe_size)
            ),
            pvfs_proto::ObjDetail::Dir {
                shards,
                default_layout,
                ..
            } => {
                println!("shards: {shards}");
                if let Some(l) = default_layout {
                    println!("default layout: {}", crate::cmd::layout::spec_string(l));
                }
            }
            pvfs_proto::ObjDetail::Symlink { target } => println!("target: {target}"),
            pvfs_proto::ObjDetail::Node { kind, rdev } => {
                println!("type: {}", ObjKind::Node(*kind).name());
                if kind.is_device() {
                    let (major, minor) = attr.device();
                    println!("device: {major},{minor} (rdev {rdev:#x})");
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Options of `pvfs mkdir`.
#[derive(Args)]
pub struct MkdirArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Create missing parents; existing directories are not an error.
    #[arg(short = 'p')]
    parents: bool,
    /// Permission bits (octal).
    #[arg(short = 'm', long, default_value = "755", value_parser = parse_mode)]
    mode: u32,
    /// Directories to create.
    #[arg(required = true, value_parser = fs_path)]
    paths: Vec<String>,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{s:?} is not an octal mode"))
}

/// Creates directories.
pub fn mkdir(a: MkdirArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        for p in &a.paths {
            if a.parents {
                client.mkdir_all(p, a.mode).await?;
            } else {
                client.mkdir(p, a.mode).await?;
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Options of `pvfs rm`.
#[derive(Args)]
pub struct RmArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Remove directories and their contents.
    #[arg(short = 'r', short_alias = 'R')]
    recursive: bool,
    /// Ignore missing paths.
    #[arg(short = 'f')]
    force: bool,
    /// What to remove.
    #[arg(required = true, value_parser = fs_path)]
    paths: Vec<String>,
}

/// Removes files, and directory trees with `-r`.
pub fn rm(a: RmArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        for p in &a.paths {
            let attr = match client.lstat(p).await {
                Ok(attr) => attr,
                Err(e) if e.errno == Errno::ENOENT && a.force => continue,
                Err(e) => return Err(e.into()),
            };
            if attr.kind() == ObjKind::Dir {
                if !a.recursive {
                    bail!("{p}: is a directory (use -r)");
                }
                remove_tree(&client, p).await?;
            } else {
                client.unlink(p).await?;
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Removes a directory and everything below it (depth first, files in parallel).
pub async fn remove_tree(client: &Client, path: &str) -> anyhow::Result<()> {
    let mut stack = vec![(path.trim_end_matches('/').to_string(), false)];
    while let Some((dir, visited)) = stack.pop() {
        if visited {
            client.rmdir(&dir).await?;
            continue;
        }
        stack.push((dir.clone(), true));
        let entries = client.readdir(&dir).await?;
        let mut files = Vec::new();
        for e in entries {
            let child = format!("{dir}/{}", e.name);
            if e.kind == ObjKind::Dir {
                stack.push((child, false));
            } else {
                files.push(child);
            }
        }
        for batch in files.chunks(64) {
            let results = futures::future::join_all(batch.iter().map(|f| client.unlink(f))).await;
            for r in results {
                r?;
            }
        }
    }
    Ok(())
}

/// Options of `pvfs mv`.
#[derive(Args)]
pub struct MvArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Current path.
    #[arg(value_parser = fs_path)]
    from: String,
    /// New path (replaced if it exists, as rename(2) does).
    #[arg(value_parser = fs_path)]
    to: String,
}

/// Renames.
pub fn mv(a: MvArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        client.rename(&a.from, &a.to).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// Options of `pvfs ln`.
#[derive(Args)]
pub struct LnArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Make a symbolic link instead of a hard link.
    #[arg(short = 's')]
    symbolic: bool,
    /// What the link points to: an existing file for a hard link (a symlink is
    /// linked itself), any text for a symbolic one (stored verbatim).
    target: String,
    /// The link to create.
    #[arg(value_parser = fs_path)]
    link: String,
}

/// Creates a hard link (another name of the same file, in any directory), or a
/// symbolic link with -s.
pub fn ln(a: LnArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        if a.symbolic {
            client.symlink(&a.target, &a.link).await?;
        } else {
            let target = strip_prefix(&a.target).unwrap_or(&a.target);
            client.link(target, &a.link).await?;
        }
        Ok(ExitCode::SUCCESS)
    })
}
