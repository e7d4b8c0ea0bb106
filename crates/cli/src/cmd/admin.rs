//! `pvfs ping`, `pvfs df` and `pvfs status`: is every server there and healthy, and
//! how full is it.
//!
//! A server that answers may still be degraded (its metadata store failed, e.g. on a
//! full disk: docs/reliability.md): all three report it as such, with the reason, and
//! exit 1 while any server is down or degraded.

use pvfs_proto::map::ServerState;
use std::process::ExitCode;

use clap::Args;
use pvfs_config::format_size;
use pvfs_proto::message::{Health, Rebuilding};

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

/// Options of `pvfs sync`.
#[derive(Args)]
pub struct SyncArgs {
    #[command(flatten)]
    config: ConfigArg,
}

/// `pvfs sync`: makes everything the file system acknowledged so far stable on disk
/// on every server (metadata and data), as `sync(1)` does for local file systems; the
/// way to do it for a mount, which `sync(1)` does not reach.
pub fn sync(a: SyncArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        client.syncfs().await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// Options of `pvfs status`.
#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// A degraded server's health (None when it is healthy or did not answer).
fn degraded(health: Option<&Health>) -> Option<&Health> {
    health.filter(|h| !h.is_ok())
}

/// The JSON fields of a degraded server: state, errno, reason, for how long.
fn degraded_json(h: &Health) -> serde_json::Value {
    serde_json::json!({
        "state": "degraded",
        "errno": pvfs_proto::Errno(h.errno).name(),
        "reason": h.reason,
        "since_secs": h.since_secs,
    })
}

/// Adds the fields of `extra` (an object) to `v` (an object).
fn merge(mut v: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    if let (Some(v), serde_json::Value::Object(extra)) = (v.as_object_mut(), extra) {
        v.extend(extra);
    }
    v
}

/// Why a server turned this command away although it may well be up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// This user cannot authenticate: no key it can read and no MUNGE, or a key the
    /// servers do not hold.
    Unauthenticated,
    /// The server at that address belongs to another file system (or is another
    /// server of it): the configuration does not match it.
    OtherFileSystem,
}

impl Refusal {
    /// The refusal `e` is, if it is one. A ping's only ESTALE is the handshake's
    /// answer that the server is not the one the configuration names.
    fn of(e: &pvfs_client::Error) -> Option<Refusal> {
        if e.kind == pvfs_proto::ErrorKind::Denied {
            Some(Refusal::Unauthenticated)
        } else if e.errno == pvfs_proto::Errno::ESTALE {
            Some(Refusal::OtherFileSystem)
        } else {
            None
        }
    }

    /// Its state in `--json`.
    fn json_state(self) -> &'static str {
        match self {
            Refusal::Unauthenticated => "unauthenticated",
            Refusal::OtherFileSystem => "other_file_system",
        }
    }

    /// What a row says of the server (the reason comes once, at the end).
    fn row(self) -> &'static str {
        match self {
            Refusal::Unauthenticated => "cannot authenticate (see below)",
            Refusal::OtherFileSystem => "not this file system's server (see below)",
        }
    }
}

/// The servers that turned this command away, and why: such a server is not called
/// down (it may well be up), and each reason, the same for every server, is said once,
/// at the end ([`all_healthy`]).
#[derive(Default)]
struct Refused {
    /// Per kind of refusal: how many servers, and the first one's reason.
    kinds: Vec<(Refusal, usize, String)>,
}

impl Refused {
    /// Notes `e`, the answer of server `name` at `address`, if it is a refusal.
    fn note(&mut self, name: &str, address: &str, e: &pvfs_client::Error) -> Option<Refusal> {
        let kind = Refusal::of(e)?;
        match self.kinds.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, n, _)) => *n += 1,
            None => {
                let why = e.message.replace(&format!("{name} ({address}): "), "");
                self.kinds.push((kind, 1, why));
            }
        }
        Some(kind)
    }

    /// Servers that turned this command away.
    fn servers(&self) -> usize {
        self.kinds.iter().map(|(_, n, _)| n).sum()
    }
}

/// Fails, naming how many servers are down and degraded and why any turned this
/// command away, unless all are healthy.
fn all_healthy(
    total: usize,
    down: usize,
    degraded: &[&str],
    refused: &Refused,
) -> anyhow::Result<()> {
    let mut parts = Vec::new();
    if down > 0 {
        parts.push(format!("{down} of {total} servers not answering"));
    }
    if !degraded.is_empty() {
        parts.push(format!(
            "{} of {total} servers degraded ({})",
            degraded.len(),
            degraded.join(", ")
        ));
    }
    for (kind, n, why) in &refused.kinds {
        parts.push(match kind {
            Refusal::Unauthenticated => format!(
                "this user cannot authenticate to {n} of {total} servers (whether they are \
                 up is unknown to it): {why}"
            ),
            Refusal::OtherFileSystem => format!(
                "{n} of {total} servers answer as another file system's (is this the right \
                 configuration?): {why}"
            ),
        });
    }
    if parts.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{}", parts.join("; "))
    }
}

/// Pings every server; fails if any is down or degraded.
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
        let mut refused = Refused::default();
        let denied: Vec<Option<Refusal>> = reports
            .iter()
            .map(|r| {
                r.result
                    .as_ref()
                    .err()
                    .and_then(|e| refused.note(&r.name, &r.address, e))
            })
            .collect();
        let down = reports.iter().filter(|r| r.result.is_err()).count() - refused.servers();
        let sick: Vec<&str> = reports
            .iter()
            .filter(|r| r.result.is_ok() && degraded(r.health.as_ref()).is_some())
            .map(|r| r.name.as_str())
            .collect();
        if a.json {
            let v: Vec<_> = reports
                .iter()
                .zip(&roles)
                .zip(&denied)
                .map(|((r, roles), &denied)| match (&r.result, degraded(r.health.as_ref())) {
                    (Ok((rtt, info)), None) => serde_json::json!({
                        "name": r.name, "address": r.address, "roles": roles, "ok": true,
                        "state": "ok", "rtt_us": rtt.as_micros() as u64, "version": info.version,
                    }),
                    (Ok((rtt, info)), Some(h)) => merge(
                        serde_json::json!({
                            "name": r.name, "address": r.address, "roles": roles, "ok": false,
                            "rtt_us": rtt.as_micros() as u64, "version": info.version,
                        }),
                        degraded_json(h),
                    ),
                    (Err(e), _) => serde_json::json!({
                        "name": r.name, "address": r.address, "roles": roles, "ok": false,
                        "state": denied.map_or("down", Refusal::json_state),
                        "error": e.message, "errno": e.errno.name(),
                    }),
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            for ((r, roles), &denied) in reports.iter().zip(&roles).zip(&denied) {
                match &r.result {
                    Ok((rtt, _)) => println!(
                        "{:<8} {:<22} {:<10} {:>8.0} us  {}",
                        r.name,
                        r.address,
                        roles,
                        rtt.as_secs_f64() * 1e6,
                        match degraded(r.health.as_ref()) {
                            None => "ok".to_string(),
                            Some(h) => format!("degraded: {}", h.reason),
                        }
                    ),
                    Err(e) => println!(
                        "{:<8} {:<22} {:<10} {:>11}  {}",
                        r.name,
                        r.address,
                        roles,
                        "-",
                        if let Some(d) = denied {
                            d.row()
                        } else {
                            &e.message
                        }
                    ),
                }
            }
        }
        all_healthy(reports.len(), down, &sick, &refused)?;
        Ok(ExitCode::SUCCESS)
    })
}

/// One line per server: ok, degraded (with the reason) or down (with the error), its
/// round trip and space; fails unless every server is healthy.
pub fn status(a: StatusArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let (reports, fs, map) =
            tokio::join!(client.ping(), client.statfs(), client.newest_cluster_map());
        let servers = &client.config().servers;
        // The authority's view: a server it does not count as up is not healthy,
        // whatever it answers itself.
        let map = match map {
            Ok(m) => m,
            // A server that turned this command away is said once, at the end.
            Err(e) if Refusal::of(&e).is_some() => None,
            Err(e) => {
                eprintln!("pvfs: no cluster map: {e}");
                None
            }
        };
        let mut refused = Refused::default();
        if let Some(m) = map.as_ref().filter(|m| m.servers.len() > servers.len()) {
            eprintln!(
                "pvfs: the cluster map has {} servers and this configuration {}: servers were \
                 added since it was written (docs/configuration.md, \"Adding a server\")",
                m.servers.len(),
                servers.len()
            );
        }
        let mut not_up = 0;
        let mut down = 0;
        let mut sick = Vec::new();
        let mut rows = Vec::new();
        // Metadata groups served with a standby down or still copying.
        let mut single_copy = 0;
        for ((sc, r), s) in servers.iter().zip(&reports).zip(&fs.servers) {
            // The ping's health, else the statfs's (the later of two answers).
            let health = r.health.as_ref().or(s.health.as_ref());
            let space = s.stat.as_ref().ok();
            let at = rows.len() as u32;
            let in_map = map.as_ref().and_then(|m| m.servers.get(at as usize));
            // The heirs still rebuilding what a lost server held.
            let rebuilding = map.as_ref().map_or(Vec::new(), |m| m.heirs_rebuilding(at));
            // Gone for good with every copy it held rebuilt elsewhere: nothing
            // depends on it any more.
            let settled = in_map.is_some_and(|e| {
                e.state == ServerState::Retired
                    || (e.state == ServerState::Lost && rebuilding.is_empty())
            });
            let refusal = r
                .result
                .as_ref()
                .err()
                .and_then(|e| refused.note(&r.name, &r.address, e));
            let (state, detail, extra) = match (&r.result, degraded(health), refusal) {
                (Err(e), _, Some(kind)) => {
                    let extra = serde_json::json!({
                        "state": kind.json_state(), "error": e.message, "errno": e.errno.name(),
                    });
                    ("unknown", kind.row().to_string(), extra)
                }
                (Err(e), _, None) => {
                    down += usize::from(!settled);
                    let extra = serde_json::json!({
                        "state": "down", "error": e.message, "errno": e.errno.name(),
                    });
                    ("down", e.message.clone(), extra)
                }
                (Ok(_), Some(h), _) => {
                    sick.push(r.name.as_str());
                    let detail = format!("{}; degraded for {} s", h.reason, h.since_secs);
                    ("degraded", detail, degraded_json(h))
                }
                (Ok(_), None, _) => {
                    let detail = match space {
                        Some(st) => {
                            let used = st.total_bytes.saturating_sub(st.free_bytes);
                            format!(
                                "{} available, {}% used",
                                format_size(st.avail_bytes),
                                use_percent(used, st.avail_bytes)
                            )
                        }
                        None => String::new(),
                    };
                    ("ok", detail, serde_json::json!({"state": "ok"}))
                }
            };
            let rtt = r.result.as_ref().ok().map(|(rtt, _)| rtt);
            let map_state = in_map.map_or("-", |e| e.state.name());
            // Evicted by a metadata primary: the map calls it down within a lease.
            let evicted = in_map.is_some_and(|e| e.evicted);
            if in_map.is_some_and(|e| e.state != ServerState::Up || e.evicted) && !settled {
                not_up += 1;
            }
            let mut v = serde_json::json!({
                "name": r.name, "address": r.address, "roles": sc.roles.describe(),
                "ok": state == "ok" && matches!(map_state, "-" | "up") && !evicted,
            });
            if evicted {
                v = merge(v, serde_json::json!({"evicted": true}));
            }
            if let Some(e) = in_map {
                v = merge(
                    v,
                    serde_json::json!({"map_state": map_state, "map_since": e.since}),
                );
            }
            let detail = if evicted {
                let sep = if detail.is_empty() { "" } else { "; " };
                format!(
                    "{detail}{sep}evicted: it did not confirm its metadata group's changes in \
                     time, and is called down within a lease"
                )
            } else {
                detail
            };
            // A metadata group a standby took over (docs/replication.md, "Failover").
            let served_by = in_map
                .and_then(|e| e.led_by)
                .and_then(|l| servers.get(l as usize))
                .map(|s| s.name.clone());
            let mut detail = match &served_by {
                Some(by) => {
                    v = merge(v, serde_json::json!({"metadata_served_by": by}));
                    let sep = if detail.is_empty() { "" } else { "; " };
                    format!("{detail}{sep}metadata served by {by}")
                }
                None => detail,
            };
            // A replaced disk, or a server that copies every datafile it holds a
            // copy of before it is up (docs/replication.md, "Self-healing").
            if let Some(e) = in_map.filter(|e| e.fresh || e.refill) {
                v = merge(
                    v,
                    serde_json::json!({"new_disk": e.fresh, "refilling": e.refill}),
                );
                let mut what = String::from(if e.fresh {
                    "new disk, refilling every copy"
                } else {
                    "refilling every copy"
                });
                // How far it got, once it counted what to copy.
                if let Some(rf) = space.and_then(|st| st.refilling.as_ref()) {
                    let (json, text) = copy_progress(rf);
                    v = merge(v, serde_json::json!({ "refill": json }));
                    what = format!("{what}: {text}");
                }
                let sep = if detail.is_empty() { "" } else { "; " };
                detail = format!("{detail}{sep}{what}");
            }
            // A lost server's copies, rebuilt on its heirs (docs/replication.md,
            // "Rebuild").
            if let Some(e) = in_map.filter(|e| e.state == ServerState::Lost || e.leaving) {
                let name = |h: &u32| servers.get(*h as usize).map_or("?", |s| s.name.as_str());
                let done: Vec<&str> = e
                    .heirs
                    .iter()
                    .filter(|h| !rebuilding.contains(h))
                    .map(name)
                    .collect();
                let left: Vec<&str> = rebuilding.iter().map(name).collect();
                v = merge(
                    v,
                    serde_json::json!({"heirs_rebuilt": done, "heirs_rebuilding": left}),
                );
                let what = match (e.leaving, left.is_empty()) {
                    (true, true) => "drained".to_string(),
                    (true, false) => {
                        format!("draining: its copies being copied to {}", left.join(", "))
                    }
                    (false, true) => "its copies rebuilt on the others".to_string(),
                    (false, false) => format!("its copies being rebuilt on {}", left.join(", ")),
                };
                let sep = if detail.is_empty() { "" } else { "; " };
                detail = format!("{detail}{sep}{what}");
            }
            // Shares of other servers' places handed to it (`pvfs rebalance`,
            // docs/replication.md, "Rebalance"): they hold them beside it until it
            // copied them, then shed their copies.
            if let Some(e) = in_map.filter(|e| !e.hands.is_empty()) {
                let name = |h: &u32| servers.get(*h as usize).map_or("?", |s| s.name.as_str());
                let from: Vec<&str> = e
                    .hands
                    .iter()
                    .flat_map(|h| h.from.iter())
                    .map(name)
                    .collect();
                let left: Vec<&str> = map
                    .as_ref()
                    .map_or(Vec::new(), |m| m.hands_rebuilding(at))
                    .iter()
                    .map(name)
                    .collect();
                v = merge(
                    v,
                    serde_json::json!({"rebalance": {"from": from, "copying_from": left}}),
                );
                let what = if left.is_empty() {
                    format!(
                        "rebalanced: holds its share of the copies of {}",
                        from.join(", ")
                    )
                } else {
                    format!(
                        "rebalancing: its share of the copies of {} being copied to it",
                        left.join(", ")
                    )
                };
                let sep = if detail.is_empty() { "" } else { "; " };
                detail = format!("{detail}{sep}{what}");
            }
            if let Some(rb) = space.and_then(|st| st.rebuilding.as_ref()) {
                let names: Vec<&str> = rb
                    .lost
                    .iter()
                    .map(|l| servers.get(*l as usize).map_or("?", |s| s.name.as_str()))
                    .collect();
                let (json, text) = copy_progress(rb);
                v = merge(
                    v,
                    serde_json::json!({"rebuilding": merge(json, serde_json::json!({"lost": names}))}),
                );
                let sep = if detail.is_empty() { "" } else { "; " };
                detail = format!(
                    "{detail}{sep}rebuilding copies of {}: {text}",
                    names.join(", ")
                );
            }
            // Checksums a reboot left unsure (docs/storage-format.md, "Checksums").
            if space.is_some_and(|st| st.sums_unsure) {
                v = merge(v, serde_json::json!({"checksums_unsure": true}));
                let sep = if detail.is_empty() { "" } else { "; " };
                detail = format!("{detail}{sep}checksums unsure since a reboot (run pvfs scrub)");
            }
            // The metadata groups it serves as their primary and where their
            // standbys stand (docs/replication.md, "Metadata: a primary and
            // standbys"): a group whose standby is down or still copying is on one
            // copy.
            if let Some(st) = space.filter(|st| !st.groups.is_empty()) {
                let (groups, one_copy) = group_copies(&st.groups, servers, map.as_ref());
                single_copy += one_copy.len();
                v = merge(v, serde_json::json!({"metadata_groups": groups}));
                if !one_copy.is_empty() {
                    let sep = if detail.is_empty() { "" } else { "; " };
                    detail = format!("{detail}{sep}{}", one_copy.join("; "));
                }
            }
            if let Some(rtt) = rtt {
                v = merge(v, serde_json::json!({"rtt_us": rtt.as_micros() as u64}));
            }
            if let Some(st) = space {
                v = merge(
                    v,
                    serde_json::json!({
                        "total_bytes": st.total_bytes, "avail_bytes": st.avail_bytes,
                    }),
                );
            }
            rows.push((
                r,
                sc.roles.describe(),
                (state, map_state),
                rtt.copied(),
                detail,
                merge(v, extra),
            ));
        }
        let changing = changing_groups(client.config(), &reports, &fs.servers, map.as_ref());
        let leader = map
            .as_ref()
            .and_then(|m| m.leader)
            .and_then(|l| servers.get(l as usize))
            .map(|s| s.name.as_str());
        if a.json {
            let mut v = serde_json::json!({
                "healthy": down == 0 && sick.is_empty() && not_up == 0 && refused.servers() == 0,
                "metadata_groups_on_one_copy": single_copy,
                "metadata_groups_changing": changing,
                "servers": rows.iter().map(|row| row.5.clone()).collect::<Vec<_>>(),
            });
            if let Some(m) = &map {
                v = merge(
                    v,
                    serde_json::json!({"map_version": m.version, "authority_leader": leader}),
                );
            }
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            if let Some(m) = &map {
                println!(
                    "cluster map version {}, authority led by {}",
                    m.version,
                    leader.unwrap_or("(electing)")
                );
            }
            println!(
                "{:<8} {:<22} {:<10} {:<9} {:<11} {:>11}  detail",
                "server", "address", "roles", "state", "map", "rtt"
            );
            for (r, roles, (state, map_state), rtt, detail, _) in &rows {
                let rtt = match rtt {
                    Some(d) => format!("{:.0} us", d.as_secs_f64() * 1e6),
                    None => "-".to_string(),
                };
                println!(
                    "{:<8} {:<22} {:<10} {:<9} {:<11} {:>11}  {detail}",
                    r.name, r.address, roles, state, map_state, rtt
                );
            }
            if !changing.is_empty() {
                println!(
                    "metadata of {}: changing hands (its primary under this map has not \
                     taken it up yet; look again in a moment)",
                    changing.join(", ")
                );
            }
        }
        match (all_healthy(reports.len(), down, &sick, &refused), not_up) {
            (Ok(()), 0) => {}
            (Ok(()), n) => {
                anyhow::bail!("{n} of {} servers not up in the cluster map", reports.len())
            }
            (Err(e), 0) => return Err(e),
            (Err(e), n) => anyhow::bail!("{e}; {n} not up in the cluster map"),
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The metadata groups with standbys that no server reported serving although
/// the map names a primary that answered: a primary takes a group up once its lease
/// holds under the map that gave it the group, a moment after the map changed.
fn changing_groups(
    config: &pvfs_config::Config,
    reports: &[pvfs_client::PingReport],
    stats: &[pvfs_client::ServerStat],
    map: Option<&pvfs_proto::map::ClusterMap>,
) -> Vec<String> {
    let Some(map) = map else {
        return Vec::new();
    };
    let reported: std::collections::HashSet<u32> = stats
        .iter()
        .filter_map(|s| s.stat.as_ref().ok())
        .flat_map(|st| st.groups.iter().map(|g| g.group))
        .collect();
    config
        .meta_servers()
        .into_iter()
        .filter(|&g| config.meta_group(g).len() > 1 && !reported.contains(&(g as u32)))
        .filter(|&g| {
            map.primary(g as u32)
                .and_then(|p| reports.get(p as usize))
                .is_some_and(|r| r.result.is_ok())
        })
        .map(|g| config.servers[g].name.clone())
        .collect()
}

/// The JSON of the metadata groups a server serves, and a line for each standby
/// that does not follow its group (down, or its copy under way or not begun).
fn group_copies(
    groups: &[pvfs_proto::message::GroupCopies],
    servers: &[pvfs_config::ServerConfig],
    map: Option<&pvfs_proto::map::ClusterMap>,
) -> (Vec<serde_json::Value>, Vec<String>) {
    let name = |s: u32| servers.get(s as usize).map_or("?", |c| c.name.as_str());
    let mut one_copy = Vec::new();
    let json = groups
        .iter()
        .map(|g| {
            let standbys: Vec<serde_json::Value> = g
                .standbys
                .iter()
                .map(|c| {
                    let down =
                        map.is_some_and(|m| m.state(c.server).is_some_and(|st| !st.serving()));
                    let state = match (c.following, down, c.total > 0) {
                        (true, _, _) => "following",
                        (false, true, _) => "down",
                        (false, false, true) => "copying",
                        (false, false, false) => "no copy yet",
                    };
                    if !c.following {
                        let what = match state {
                            "copying" => format!(
                                "copying it to {}, {} of {}",
                                name(c.server),
                                format_size(c.copied),
                                format_size(c.total)
                            ),
                            "down" => format!("its standby {} down", name(c.server)),
                            _ => format!("its standby {} has no copy yet", name(c.server)),
                        };
                        one_copy.push(format!("metadata of {} on one copy: {what}", name(g.group)));
                    }
                    serde_json::json!({
                        "server": name(c.server), "state": state,
                        "copied": c.copied, "total": c.total,
                    })
                })
                .collect();
            serde_json::json!({"group": name(g.group), "standbys": standbys})
        })
        .collect();
    (json, one_copy)
}

/// Space per server and in total; servers that do not answer are reported, not waited
/// for, and degraded ones with the reason; fails if any is down or degraded.
pub fn df(a: DfArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let fs = client.statfs().await;
        let mut refused = Refused::default();
        let denied: Vec<Option<Refusal>> = fs
            .servers
            .iter()
            .map(|s| {
                s.stat
                    .as_ref()
                    .err()
                    .and_then(|e| refused.note(&s.name, &s.address, e))
            })
            .collect();
        if a.json {
            let servers: Vec<_> = fs
                .servers
                .iter()
                .zip(&denied)
                .map(|(s, &denied)| {
                    let row = match (&s.stat, degraded(s.health.as_ref())) {
                    (Ok(st), None) => serde_json::json!({
                        "name": s.name, "address": s.address, "ok": true, "state": "ok",
                        "total_bytes": st.total_bytes, "free_bytes": st.free_bytes,
                        "avail_bytes": st.avail_bytes, "objects": st.objects, "datafiles": st.datafiles,
                    }),
                    // A degraded server's objects are unknown (its metadata store failed).
                    (Ok(st), Some(h)) => merge(
                        serde_json::json!({
                            "name": s.name, "address": s.address, "ok": false,
                            "total_bytes": st.total_bytes, "free_bytes": st.free_bytes,
                            "avail_bytes": st.avail_bytes, "objects": null, "datafiles": st.datafiles,
                        }),
                        degraded_json(h),
                    ),
                    (Err(e), _) => serde_json::json!({
                        "name": s.name, "address": s.address, "ok": false,
                        "state": denied.map_or("down", Refusal::json_state), "error": e.message,
                    }),
                    };
                    // Space already counted under another server (one disk).
                    merge(row, serde_json::json!({"same_space_as": s.same_space_as}))
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
            for (s, &denied) in fs.servers.iter().zip(&denied) {
                match &s.stat {
                    Ok(st) => {
                        let used = st.total_bytes.saturating_sub(st.free_bytes);
                        let sick = degraded(s.health.as_ref());
                        let objects = match sick {
                            Some(_) => "?".to_string(),
                            None => st.objects.to_string(),
                        };
                        let mut note = match sick {
                            Some(h) => format!("  degraded: {}", h.reason),
                            None => String::new(),
                        };
                        if let Some(other) = &s.same_space_as {
                            note.push_str(&format!("  (same disk as {other}: counted once)"));
                        }
                        println!(
                            "{:<8} {:<22} {:>9} {:>9} {:>9} {:>4}% {:>9} {:>9}{note}",
                            s.name,
                            s.address,
                            format_size(st.total_bytes),
                            format_size(used),
                            format_size(st.avail_bytes),
                            use_percent(used, st.avail_bytes),
                            objects,
                            st.datafiles
                        );
                    }
                    Err(_) if denied.is_some() => {
                        let row = denied.map_or("", Refusal::row);
                        println!("{:<8} {:<22} {row}", s.name, s.address)
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
                use_percent(used, fs.avail_bytes),
                fs.objects,
                fs.datafiles
            );
        }
        let down = fs.servers.iter().filter(|s| s.stat.is_err()).count() - refused.servers();
        let sick: Vec<&str> = fs
            .servers
            .iter()
            .filter(|s| s.stat.is_ok() && degraded(s.health.as_ref()).is_some())
            .map(|s| s.name.as_str())
            .collect();
        all_healthy(fs.servers.len(), down, &sick, &refused)?;
        Ok(ExitCode::SUCCESS)
    })
}

/// How far a whole copy under way got (a rebuild of lost servers' copies, or a
/// refill of a server's own), for `pvfs status`: its fields for `--json`, and in
/// words, with the time left at the rate so far.
fn copy_progress(p: &Rebuilding) -> (serde_json::Value, String) {
    let left = p.bytes_total.saturating_sub(p.bytes_done);
    // The rate so far; none before a second of copying or a byte copied.
    let seconds_left = (p.elapsed_ms >= 1000 && p.bytes_done > 0)
        .then(|| left as f64 * p.elapsed_ms as f64 / 1000.0 / p.bytes_done as f64);
    let json = serde_json::json!({
        "datafiles_total": p.datafiles_total,
        "datafiles_done": p.datafiles_done,
        "bytes_total": p.bytes_total,
        "bytes_done": p.bytes_done,
        "seconds_left": seconds_left.map(|s| s.round() as u64),
    });
    let eta = match seconds_left {
        Some(s) => format!(", about {} left", format_seconds(s)),
        None => String::new(),
    };
    let text = format!(
        "{} of {} datafiles, {} of {}{eta}",
        p.datafiles_done,
        p.datafiles_total,
        format_size(p.bytes_done),
        format_size(p.bytes_total),
    );
    (json, text)
}

/// A time left, as people say it: seconds, minutes or hours.
fn format_seconds(s: f64) -> String {
    match s {
        s if s < 90.0 => format!("{:.0} s", s.max(1.0)),
        s if s < 5400.0 => format!("{:.0} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

/// The use% that df(1) shows: used space over what users can have (used plus
/// available, leaving out the blocks reserved for root), rounded up, so a file system
/// that is full for users shows 100%.
fn use_percent(used: u64, avail: u64) -> u64 {
    let whole = used as u128 + avail as u128;
    if whole == 0 {
        0
    } else {
        (used as u128 * 100).div_ceil(whole) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::use_percent;

    #[test]
    fn use_percent_is_dfs() {
        // 19 GiB used, 73 GiB available, 252 GiB in all: df says 21%.
        assert_eq!(use_percent(19 << 30, 73 << 30), 21);
        assert_eq!(use_percent(0, 10), 0);
        assert_eq!(use_percent(1, 1000), 1, "rounded up");
        assert_eq!(use_percent(10, 0), 100, "nothing left for users");
        assert_eq!(use_percent(0, 0), 0);
    }
}
