//! `pvfs layout` and `pvfs setlayout`: where a file's stripes live, and the default
//! layout of new files in a directory.

use std::process::ExitCode;

use clap::Args;
use pvfs_client::LayoutSpec;
use pvfs_config::{format_size, parse_size};

use crate::cmd::with_client;
use crate::ConfigArg;

/// Options of `pvfs layout`.
#[derive(Args)]
pub struct LayoutArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// The file.
    path: String,
}

/// Options of `pvfs setlayout`.
#[derive(Args)]
pub struct SetlayoutArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Stripe size of new files (K, M, G, T or P suffixes: powers of 1024).
    #[arg(long, value_parser = parse_size)]
    stripe_size: Option<u64>,
    /// Number of data servers new files are striped over.
    #[arg(long)]
    stripe_count: Option<u32>,
    /// Index (among the data servers) of every new file's first datafile.
    #[arg(long)]
    base: Option<u32>,
    /// Copies of every stripe unit of new files (1 to 3; more than one needs
    /// `[replication] authority` in the configuration).
    #[arg(long)]
    replicas: Option<u32>,
    /// Remove the directory's default layout (the file system's applies again).
    #[arg(long, conflicts_with_all = ["stripe_size", "stripe_count", "base", "replicas"])]
    clear: bool,
    /// The directory.
    path: String,
}

/// "1 stripe", "4 stripes": a stripe count in words.
pub fn stripes(n: u64) -> String {
    if n == 1 {
        "1 stripe".into()
    } else {
        format!("{n} stripes")
    }
}

/// "1 copy", "2 copies": a replica count in words.
pub fn copies(n: u32) -> String {
    if n == 1 {
        "1 copy".into()
    } else {
        format!("{n} copies")
    }
}

/// A layout request in words, e.g. "stripe size 64K, 4 stripes".
pub fn spec_string(s: &LayoutSpec) -> String {
    let mut parts = Vec::new();
    if let Some(size) = s.stripe_size {
        parts.push(format!("stripe size {}", format_size(size)));
    }
    if let Some(c) = s.stripe_count {
        parts.push(stripes(u64::from(c)));
    }
    if let Some(b) = s.base {
        parts.push(format!("first data server {b}"));
    }
    if let Some(r) = s.replicas {
        parts.push(copies(r));
    }
    if parts.is_empty() {
        "file-system defaults".into()
    } else {
        parts.join(", ")
    }
}

/// Shows stripe size, count and every datafile with its server, handle, bytes and
/// the space its server allocates for it.
pub fn layout(a: LayoutArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let report = client.layout(&a.path).await?;
        let layout = report
            .attr
            .layout()
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("{}: not a regular file", a.path))?;
        if a.json {
            let dfs: Vec<_> = report
                .datafiles
                .iter()
                .enumerate()
                .map(|(i, (df, name, st))| {
                    serde_json::json!({"index": i, "server": name, "server_index": df.server,
                        "copies": df.replicas().collect::<Vec<_>>(),
                        "handle": df.handle, "bytes": st.size, "allocated": st.allocated})
                })
                .collect();
            let v = serde_json::json!({
                "path": a.path, "handle": report.attr.handle, "size": report.attr.size,
                "blocks": report.attr.blocks,
                "stripe_size": layout.stripe_size, "stripe_count": layout.datafiles.len(),
                "replicas": layout.replicas, "width": layout.width, "datafiles": dfs,
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
            return Ok(ExitCode::SUCCESS);
        }
        println!(
            "{}: {} bytes, handle {:#x}",
            a.path, report.attr.size, report.attr.handle
        );
        println!(
            "stripe size {} ({} bytes), stripe count {}, {}, bytes on the first {} so far",
            format_size(layout.stripe_size),
            layout.stripe_size,
            layout.datafiles.len(),
            copies(layout.replicas),
            layout.width
        );
        println!(
            "{:>5}  {:<8} {:>20} {:>14} {:>14}",
            "index", "server", "datafile handle", "bytes", "allocated"
        );
        for (i, (df, name, st)) in report.datafiles.iter().enumerate() {
            println!(
                "{i:>5}  {name:<8} {:>#20x} {:>14} {:>14}",
                df.handle, st.size, st.allocated
            );
            if layout.replicas > 1 {
                let names: Vec<&str> = df
                    .replicas()
                    .filter_map(|s| client.config().servers.get(s as usize))
                    .map(|s| s.name.as_str())
                    .collect();
                println!("{:>5}  copies on {}", "", names.join(", "));
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Sets or clears a directory's default layout.
pub fn setlayout(a: SetlayoutArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let spec = if a.clear {
            None
        } else {
            let spec = LayoutSpec {
                stripe_size: a.stripe_size,
                stripe_count: a.stripe_count,
                base: a.base,
                replicas: a.replicas,
            };
            if spec == LayoutSpec::default() {
                anyhow::bail!(
                    "give --stripe-size, --stripe-count, --base or --replicas (or --clear)"
                );
            }
            Some(spec)
        };
        client.set_dir_layout(&a.path, spec).await?;
        match spec {
            Some(s) => println!("{}: new files get {}", a.path, spec_string(&s)),
            None => println!("{}: default layout cleared", a.path),
        }
        Ok(ExitCode::SUCCESS)
    })
}
