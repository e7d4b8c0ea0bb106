//! Prometheus metrics of live servers (`[[servers]] metrics`): scraped over HTTP as
//! Prometheus scrapes them, parsed by the Prometheus project's own OpenMetrics parser
//! (the Python `prometheus_client`), and checked to move with real work done
//! through the real client: requests by kind with their latency, errors by errno,
//! bytes read and written (exactly the file's), connections and refused handshakes,
//! the storage's space; and the Grafana dashboard of `contrib/grafana` asks only
//! for metrics the servers serve.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use common::{run_pvfs, skip, under_ci, Cluster, Rng};

/// One sample: its name, labels and value.
#[derive(Debug)]
struct Sample(String, BTreeMap<String, String>, f64);

/// `GET path` on `addr`: the status line and the body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/openmetrics-text\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The samples of OpenMetrics `text`, as the Prometheus project's parser reads them
/// (it refuses text that is not OpenMetrics).
fn parse(text: &str) -> Vec<Sample> {
    let script = "import sys, json\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
        out = []\n\
        for fam in text_string_to_metric_families(sys.stdin.read()):\n\
        \x20   for s in fam.samples:\n\
        \x20       out.append([s.name, s.labels, s.value])\n\
        print(json.dumps(out))\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the text: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<(String, BTreeMap<String, String>, f64)> =
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let labels = s[1].as_object().unwrap();
                let labels = labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                (
                    s[0].as_str().unwrap().to_string(),
                    labels,
                    s[2].as_f64().unwrap(),
                )
            })
            .collect();
    v.into_iter().map(|(n, l, x)| Sample(n, l, x)).collect()
}

/// The sum of the samples named `name` whose labels include `labels`.
fn total(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.0 == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.1.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.2)
        .sum()
}

/// Whether the parser is here; if not, fails under CI and skips `test` otherwise.
fn have_parser(test: &str) -> bool {
    let here = std::process::Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .status()
        .is_ok_and(|s| s.success());
    if !here {
        let why = "python3 with prometheus_client is missing (scripts/install-deps installs it)";
        assert!(!under_ci(), "{why}");
        skip(test, why);
    }
    here
}

/// Every server's samples now.
fn scrape_all(cluster: &Cluster) -> Vec<Vec<Sample>> {
    cluster
        .config()
        .servers
        .iter()
        .map(|s| {
            let addr = s
                .metrics
                .as_deref()
                .expect("genconfig gives every server metrics");
            let (status, body) = get(addr, "/metrics");
            assert_eq!(status, "HTTP/1.1 200 OK", "{addr}");
            parse(&body)
        })
        .collect()
}

/// `name` summed over every server.
fn sum(all: &[Vec<Sample>], name: &str, labels: &[(&str, &str)]) -> f64 {
    all.iter().map(|s| total(s, name, labels)).sum()
}

#[test]
fn servers_serve_metrics_that_move_with_real_work_and_parse_as_openmetrics() {
    if !have_parser("servers_serve_metrics_that_move_with_real_work_and_parse_as_openmetrics") {
        return;
    }
    let cluster = Cluster::start();
    let cli = |args: &[&str]| cluster.run_cli(args);
    let before = scrape_all(&cluster);
    for name in [
        "pvfs_server_read_bytes_total",
        "pvfs_server_written_bytes_total",
    ] {
        assert_eq!(sum(&before, name, &[]), 0.0, "{name} before any file");
    }
    assert_eq!(
        sum(
            &before,
            "pvfs_server_request_errors_total",
            &[("errno", "ENOENT")]
        ),
        0.0
    );
    assert_eq!(
        sum(&before, "pvfs_server_handshake_failures_total", &[]),
        0.0
    );

    // A file striped over every server, written and read back through the client.
    let size = 3 << 20 | 4321;
    let local = cluster.dir().join("f.bin");
    std::fs::write(&local, Rng::new(0x5eed_0001).bytes(size)).unwrap();
    // Written by a batch job (as Slurm sets it), read by a process of no job.
    run_pvfs(
        &[
            "cp",
            "-q",
            local.to_str().unwrap(),
            "pvfs:/f",
            "-c",
            cluster.config_str(),
        ],
        &[("SLURM_JOB_ID", "4711")],
        &["PVFS_CONFIG", "PVFS_JOBID"],
    )
    .ok();
    let out = std::process::Command::new(common::pvfs_bin())
        .args(["cat", "/f", "-c", cluster.config_str()])
        .output()
        .unwrap();
    assert_eq!(out.stdout.len(), size);
    // A lookup that fails, and a client whose key the servers do not hold.
    cli(&["stat", "/missing"]).err_line();
    let wrong = cluster.config_with_other_key();
    run_pvfs(
        &["ping", "-c", wrong.to_str().unwrap()],
        &[],
        &["PVFS_CONFIG"],
    )
    .err_line();

    let after = scrape_all(&cluster);
    // Bytes: exactly the file's, over the servers holding its stripes.
    assert_eq!(
        sum(&after, "pvfs_server_written_bytes_total", &[]),
        size as f64
    );
    assert_eq!(
        sum(&after, "pvfs_server_read_bytes_total", &[]),
        size as f64
    );
    let data_servers = after
        .iter()
        .filter(|s| total(s, "pvfs_server_written_bytes_total", &[]) > 0.0)
        .count();
    assert_eq!(
        data_servers,
        cluster.config().servers.len(),
        "striped over every server"
    );
    // Requests by kind, each with its latency.
    for op in ["Write", "Read", "Lookup", "Create"] {
        let n = sum(&after, "pvfs_server_requests_total", &[("op", op)]);
        assert!(n > 0.0, "{op}: {n}");
        let timed = sum(
            &after,
            "pvfs_server_request_duration_seconds_count",
            &[("op", op)],
        );
        assert_eq!(timed, n, "{op}: every request timed");
    }
    assert!(
        sum(
            &after,
            "pvfs_server_request_errors_total",
            &[("errno", "ENOENT")]
        ) >= 1.0
    );
    assert!(sum(&after, "pvfs_server_handshake_failures_total", &[]) >= 1.0);
    // The metadata stores committed the create (and more), and synced their logs.
    let commits = sum(&after, "pvfs_server_metadata_commits_total", &[]);
    assert!(commits > sum(&before, "pvfs_server_metadata_commits_total", &[]));
    assert!(sum(&after, "pvfs_server_metadata_mutations_total", &[]) >= commits);
    let syncs = sum(&after, "pvfs_server_metadata_syncs_total", &[]);
    let synced = sum(&after, "pvfs_server_metadata_sync_seconds_total", &[]);
    assert!(syncs > 0.0 && synced > 0.0, "{syncs} syncs in {synced} s");
    // The job's writes count under its id; the reads of no job under none.
    let job_writes = sum(
        &after,
        "pvfs_server_job_requests_total",
        &[("job", "4711"), ("op", "Write")],
    );
    assert_eq!(
        job_writes,
        sum(&after, "pvfs_server_requests_total", &[("op", "Write")])
    );
    assert_eq!(
        sum(&after, "pvfs_server_job_requests_total", &[("op", "Read")]),
        0.0
    );
    assert!(sum(&after, "pvfs_server_connections_accepted_total", &[]) > 0.0);
    let budget = cluster.config().limits.buffers as f64;
    for s in &after {
        assert_eq!(total(s, "pvfs_server_buffer_budget_bytes", &[]), budget);
        // Nothing runs, holds a lock or copies between the work and the scrape.
        for idle in [
            "pvfs_server_buffer_budget_used_bytes",
            "pvfs_server_locks_held",
            "pvfs_server_copies_left_bytes",
            "pvfs_server_degraded",
        ] {
            assert!(s.iter().any(|x| x.0 == idle), "{idle} served");
            assert_eq!(total(s, idle, &[]), 0.0, "{idle}");
        }
        let cap = total(s, "pvfs_server_storage_capacity_bytes", &[]);
        let free = total(s, "pvfs_server_storage_free_bytes", &[]);
        assert!(cap > 0.0 && free > 0.0 && free <= cap, "{cap} {free}");
    }
    // The Grafana dashboard shipped in contrib/ asks only for what servers serve.
    let dash =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/grafana/pvfs.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dash).unwrap()).unwrap();
    let served: std::collections::BTreeSet<&str> =
        after.iter().flatten().map(|s| s.0.as_str()).collect();
    let mut asked = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices("pvfs_server_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    served.contains(name.as_str()),
                    "the dashboard asks for {name}, which no server serves"
                );
                asked += 1;
            }
        }
    }
    assert!(asked >= 6, "{asked} metrics asked for");
    // Other paths are not found; the server goes on serving metrics.
    let addr = cluster.config().servers[0].metrics.clone().unwrap();
    assert_eq!(get(&addr, "/").0, "HTTP/1.1 404 Not Found");
    assert_eq!(get(&addr, "/metrics").0, "HTTP/1.1 200 OK");
}

#[test]
fn a_mount_serves_its_clients_metrics() {
    if !have_parser("a_mount_serves_its_clients_metrics") {
        return;
    }
    let cluster = Cluster::start();
    let addr = common::free_local_addr();
    // Direct I/O: every read reaches the servers (no page cache in between).
    let m = mount::Mount::start(&cluster, &["--direct-io", "--metrics", &addr]);
    let scrape = || {
        let (status, body) = get(&addr, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        parse(&body)
    };
    let before = scrape();
    assert_eq!(total(&before, "pvfs_client_written_bytes_total", &[]), 0.0);
    let size = 1 << 20 | 777;
    let bytes = Rng::new(0x5eed_0002).bytes(size);
    std::fs::write(m.join("f"), &bytes).unwrap();
    assert_eq!(std::fs::read(m.join("f")).unwrap(), bytes);
    assert!(std::fs::metadata(m.join("missing")).is_err());
    let after = scrape();
    assert_eq!(
        total(&after, "pvfs_client_written_bytes_total", &[]),
        size as f64
    );
    assert!(total(&after, "pvfs_client_read_bytes_total", &[]) >= size as f64);
    for op in ["Create", "Write", "Read", "Lookup"] {
        assert!(
            total(&after, "pvfs_client_requests_total", &[("op", op)]) > 0.0,
            "{op}"
        );
    }
    assert!(
        total(
            &after,
            "pvfs_client_request_errors_total",
            &[("errno", "ENOENT")]
        ) >= 1.0
    );
    assert!(
        total(
            &after,
            "pvfs_client_request_duration_seconds_count",
            &[("op", "Lookup")]
        ) > 0.0
    );
}
