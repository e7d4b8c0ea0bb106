//! `pvfs fsck`: checks the whole file system across servers; `--repair` fixes what can
//! be fixed (the checks are in `pvfs_client::Client::fsck`).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::cmd::with_client;
use crate::ConfigArg;

/// Options of `pvfs fsck`.
#[derive(Args)]
pub struct FsckArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Repair what can be repaired (without it, nothing is changed).
    #[arg(long)]
    repair: bool,
    /// Objects changed more recently than this are not treated as orphans (a create or
    /// rename may be in flight).
    #[arg(long, default_value = "60s", value_parser = pvfs_config::parse_duration)]
    grace: Duration,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Runs the check; exit status 0 when the file system is (now) clean.
pub fn run(a: FsckArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let report = client.fsck(a.repair, a.grace).await?;
        if a.json {
            let problems: Vec<_> = report
                .problems
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "kind": format!("{:?}", p.kind), "what": p.what, "repaired": p.repaired,
                    })
                })
                .collect();
            let v = serde_json::json!({
                "objects": report.objects, "entries": report.entries,
                "datafiles": report.datafiles, "open_unlinked": report.open_unlinked,
                "problems": problems,
                "unrepaired": report.unrepaired(),
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!(
                "checked {} objects, {} entries, {} datafiles",
                report.objects, report.entries, report.datafiles
            );
            if report.open_unlinked > 0 {
                println!(
                    "{} files without a name are still open on a client (deleted at their last close)",
                    report.open_unlinked
                );
            }
            for p in &report.problems {
                let state = if p.repaired {
                    "repaired"
                } else if a.repair {
                    "NOT REPAIRED"
                } else {
                    "found"
                };
                println!("{state:>12}  {:?}: {}", p.kind, p.what);
            }
            match (report.problems.len(), report.unrepaired()) {
                (0, _) => println!("clean"),
                (n, 0) => println!("{n} problems, all repaired"),
                (n, u) if a.repair => println!("{n} problems, {u} not repaired"),
                (n, _) => println!("{n} problems (run with --repair to fix them)"),
            }
        }
        Ok(if report.unrepaired() == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}
