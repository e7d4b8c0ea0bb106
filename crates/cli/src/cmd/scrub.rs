//! `pvfs scrub`: has every data server check every block of its datafiles against
//! its checksum, mending a damaged one from another copy (the walk is in
//! `pvfs_client::Client::scrub`).

use std::process::ExitCode;

use clap::Args;

use crate::cmd::with_client;
use crate::ConfigArg;

/// Options of `pvfs scrub`.
#[derive(Args)]
pub struct ScrubArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Runs a scrub; exit status 0 when no damaged block is left.
pub fn run(a: ScrubArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let r = client.scrub().await?;
        let unmended: Vec<_> = r
            .unmended
            .iter()
            .map(|(server, h, off)| {
                serde_json::json!({"server": server, "datafile": format!("{h:#x}"), "offset": off})
            })
            .collect();
        if a.json {
            let v = serde_json::json!({
                "datafiles": r.datafiles, "bytes": r.bytes, "damaged": r.damaged,
                "mended": r.mended, "resummed": r.resummed, "unmended": unmended,
                "unsure": r.unsure,
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!(
                "checked {} copies of datafiles, {} bytes",
                r.datafiles, r.bytes
            );
            println!(
                "{} blocks did not match their checksums: {} copied again from another copy, \
                 {} summed again (written before a reboot), {} left damaged",
                r.damaged,
                r.mended,
                r.resummed,
                r.unmended.len()
            );
            for (server, h, off) in &r.unmended {
                println!(
                    "  DAMAGED  {server}: datafile {h:#x}, the block at byte {off} (no other copy)"
                );
            }
            for s in &r.unsure {
                println!("  {s}: checksums still unsure since a reboot");
            }
        }
        Ok(if r.unmended.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}
