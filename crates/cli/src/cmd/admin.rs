//! `pvfs ping` and `pvfs df`: is every server there, and how full is it.

use std::process::ExitCode;

use clap::Args;
use pvfs_config::format_size;

use crate::cmd::with_client;
use crate::ConfigArg;

/// Options of `pvfs ping`.
#[derive(Args)]
pub struct PingArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Options of `pvfs df`.
#[derive(Args)]
pub struct DfArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Pings every server; fails if any is down.
pub fn ping(a: PingArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let reports = client.ping().await;
        let roles: Vec<String> = client
            .config()
            .servers
            .iter()
            .map(|s| s.roles.describe())
            .collect();
        let down = reports.iter().filter(|r| r.result.is_err()).count();
        if a.json {
            let v: Vec<_> = reports
                .iter()
                .zip(&roles)
                .map(|(r, roles)| match &r.result {
                    Ok((rtt, info)) => serde_json::json!({
                        "name": r.name, "address": r.address, "roles": roles, "ok": true,
                        "rtt_us": rtt.as_micros() as u64, "version": info.version,
                    }),
                    Err(e) => serde_json::json!({
                        "name": r.name, "address": r.address, "roles": roles, "ok": false,
                        "error": e.message, "errno": e.errno.name(),
                    }),
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            for (r, roles) in reports.iter().zip(&roles) {
                match &r.result {
                    Ok((rtt, _)) => println!(
                        "{:<8} {:<22} {:<10} {:>8.0} us  ok",
                        r.name,
                        r.address,
                        roles,
                        rtt.as_secs_f64() * 1e6
                    ),
                    Err(e) => println!(
                        "{:<8} {:<22} {:<10} {:>11}  {}",
                        r.name, r.address, roles, "-", e.message
                    ),
                }
            }
        }
        if down > 0 {
            anyhow::bail!("{down} of {} servers not answering", reports.len());
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Space per server and in total; servers that do not answer are reported, not waited for.
pub fn df(a: DfArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let fs = client.statfs().await;
        if a.json {
            let servers: Vec<_> = fs
                .servers
                .iter()
                .map(|s| match &s.stat {
                    Ok(st) => serde_json::json!({
                        "name": s.name, "address": s.address, "ok": true,
                        "total_bytes": st.total_bytes, "free_bytes": st.free_bytes,
                        "avail_bytes": st.avail_bytes, "objects": st.objects, "datafiles": st.datafiles,
                    }),
                    Err(e) => serde_json::json!({"name": s.name, "address": s.address, "ok": false, "error": e.message}),
                })
                .collect();
            let v = serde_json::json!({
                "servers": servers,
                "total_bytes": fs.total_bytes, "free_bytes": fs.free_bytes,
                "avail_bytes": fs.avail_bytes, "used_bytes": fs.total_bytes.saturating_sub(fs.free_bytes),
                "objects": fs.objects, "datafiles": fs.datafiles,
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!(
                "{:<8} {:<22} {:>9} {:>9} {:>9} {:>5} {:>9} {:>9}",
                "server", "address", "size", "used", "avail", "use%", "objects", "datafiles"
            );
            for s in &fs.servers {
                match &s.stat {
                    Ok(st) => {
                        let used = st.total_bytes.saturating_sub(st.free_bytes);
                        println!(
                            "{:<8} {:<22} {:>9} {:>9} {:>9} {:>4}% {:>9} {:>9}",
                            s.name,
                            s.address,
                            format_size(st.total_bytes),
                            format_size(used),
                            format_size(st.avail_bytes),
                            percent(used, st.total_bytes),
                            st.objects,
                            st.datafiles
                        );
                    }
                    Err(e) => println!("{:<8} {:<22} {}", s.name, s.address, e.message),
                }
            }
            let used = fs.total_bytes.saturating_sub(fs.free_bytes);
            println!(
                "{:<8} {:<22} {:>9} {:>9} {:>9} {:>4}% {:>9} {:>9}",
                "total",
                "",
                format_size(fs.total_bytes),
                format_size(used),
                format_size(fs.avail_bytes),
                percent(used, fs.total_bytes),
                fs.objects,
                fs.datafiles
            );
        }
        let down = fs.servers.iter().filter(|s| s.stat.is_err()).count();
        if down > 0 {
            anyhow::bail!("{down} of {} servers not answering", fs.servers.len());
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn percent(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        0
    } else {
        (part as u128 * 100 / whole as u128) as u64
    }
}
