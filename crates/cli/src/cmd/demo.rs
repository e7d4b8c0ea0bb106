//! `pvfs demo`: a real 4-server file system on loopback, a short real workload, a
//! summary; then everything is stopped and removed (or kept with `--keep DIR`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use pvfs_client::{Client, LayoutSpec};
use pvfs_config::{format_size, Config, GenOptions};

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
}

/// Runs the demo.
pub fn run(a: DemoArgs) -> anyhow::Result<ExitCode> {
    let tmp;
    let dir = match &a.keep {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            std::fs::canonicalize(d).with_context(|| format!("cannot resolve {}", d.display()))?
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("pvfs-demo-")
                .tempdir()
                .context("cannot create a temporary directory")?;
            tmp.path().to_path_buf()
        }
    };
    let config = Config::generate(&GenOptions {
        base_port: 0,
        ..GenOptions::new(a.servers, &dir)
    })?;
    let config_path = dir.join("pvfs.toml");
    std::fs::write(&config_path, config.to_toml()).context("cannot write the configuration")?;
    println!(
        "== pvfs demo: {} servers on loopback, storage in {}",
        a.servers,
        dir.display()
    );
    let started = Instant::now();
    let children = server::start_servers(&config_path, &config, Duration::from_secs(20))?;
    println!("   started in {:.2}s:", started.elapsed().as_secs_f64());
    for sc in &config.servers {
        println!(
            "   {:<4} {:<22} {}",
            sc.name,
            sc.address,
            sc.roles.describe()
        );
    }
    let outcome = workload(&config, &config_path);
    if let Some(d) = &a.keep {
        drop(children);
        outcome?;
        println!("\n== the file system keeps running. Try:");
        let c = config_path.display();
        println!("   export PVFS_CONFIG={c}");
        println!("   cargo run --release -- ls -l /demo");
        println!("   cargo run --release -- layout /demo/striped.dat");
        println!("   cargo run --release -- df");
        println!(
            "   cargo run --release -- stop          # when done; data stays in {}",
            d.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("\n== stopping the servers and removing {}", dir.display());
    let failed = server::stop_servers(&config, Duration::from_secs(30), true);
    drop(children);
    outcome?;
    if !failed.is_empty() {
        bail!("servers did not stop: {}", failed.join(", "));
    }
    println!("   done");
    Ok(ExitCode::SUCCESS)
}

fn workload(config: &Config, config_path: &std::path::Path) -> anyhow::Result<()> {
    let rt = runtime()?;
    rt.block_on(async {
        let client = Client::new(config.clone());
        println!("\n== a directory tree");
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
        println!("   /demo: {}", names.join("  "));
        println!("   /demo/src holds {} entries", client.readdir("/demo/src").await?.len());
        println!("   readlink /demo/first.c -> {}", client.readlink("/demo/first.c").await?);

        let clients = 4u64;
        let part: u64 = 32 << 20;
        println!("\n== one striped file written by {clients} clients at once, read back by new clients and verified");
        let spec = LayoutSpec {
            stripe_size: Some(64 << 10),
            stripe_count: None,
            base: None,
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
        println!(
            "   wrote {} in {:.2}s, read and verified it in {:.2}s",
            format_size(total),
            wt.as_secs_f64(),
            rt_.as_secs_f64()
        );
        let report = client.layout("/demo/striped.dat").await?;
        let l = report.attr.layout().cloned().context("not a file")?;
        println!(
            "   layout: {} bytes in stripes of {} over {} data servers",
            report.attr.size,
            format_size(l.stripe_size),
            l.datafiles.len()
        );
        for (i, (df, name, st)) in report.datafiles.iter().enumerate() {
            println!("     datafile {i}: server {name:<4} handle {:#x}  {} bytes", df.handle, st.size);
        }
        Ok::<_, anyhow::Error>(())
    })?;

    println!("\n== a small concurrent benchmark (seed 000 §4)");
    let args = bench::args(config_path.to_path_buf(), 4, 64 << 20);
    let (w, r) = bench::concurrent(config, &args)?;
    bench::print(&args, config, &w, &r)?;

    rt.block_on(async {
        let client = Client::new(config.clone());
        let fs = client.statfs().await;
        println!(
            "\n== df: {} objects, {} datafiles, {} free",
            fs.objects,
            fs.datafiles,
            format_size(fs.avail_bytes)
        );
    });
    Ok(())
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
