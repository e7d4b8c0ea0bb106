//! `pvfs bench meta` and `pvfs bench concurrent` run in the suite, small: against a
//! real cluster, in both output forms, with every number they print parsed and checked
//! for sanity (positive, finite, consistent with the sizes asked and with each other),
//! and nothing left behind in the file system afterwards.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::Cluster;

/// Asserts `x` is a finite number in `(lo, hi)`.
#[track_caller]
fn sane(x: f64, lo: f64, hi: f64, what: &str) {
    assert!(
        x.is_finite() && x > lo && x < hi,
        "{what} = {x}: not in ({lo}, {hi})"
    );
}

/// The JSON number at `key` of `v`.
#[track_caller]
fn num(v: &serde_json::Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {key} in {v}"))
}

/// Names in the root directory (the benchmarks must leave none of theirs).
fn root_names(cluster: &Cluster) -> Vec<String> {
    let tc = cluster.client();
    tc.run(Duration::from_secs(60), async |c| {
        c.readdir("/")
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect()
    })
}

/// Upper bound on an operation rate no run here can reach (per second): a number
/// above it is a unit or a timing error.
const RATE_MAX: f64 = 1e7;

#[test]
fn bench_meta_runs_and_reports_sane_numbers() {
    let cluster = Cluster::start();
    let files = 300;
    let out = cluster.run_cli(&[
        "bench",
        "meta",
        "--clients",
        "3",
        "--files",
        &files.to_string(),
        "--depth",
        "4",
        "--json",
    ]);
    let v = out.json();
    assert_eq!(v["clients"], 3, "{v}");
    assert_eq!(v["files"], files, "{v}");
    assert_eq!(v["depth"], 4, "{v}");
    for key in ["create_per_sec", "stat_per_sec", "unlink_per_sec"] {
        sane(num(&v, key), 0.0, RATE_MAX, key);
    }
    let limit = common::CLI_DEADLINE.as_secs_f64();
    for key in ["readdir_secs", "readdir_plus_secs"] {
        sane(num(&v, key), 0.0, limit, key);
    }

    // Small-file creates: each file gets its bytes.
    let out = cluster.run_cli(&[
        "bench",
        "meta",
        "--clients",
        "2",
        "--files",
        "100",
        "--write",
        "4096",
        "--json",
    ]);
    let v = out.json();
    assert_eq!(v["write_bytes"], 4096, "{v}");
    sane(num(&v, "create_per_sec"), 0.0, RATE_MAX, "create+write");

    // The human form: each line's rate is the files over its seconds.
    let out = cluster.run_cli(&["bench", "meta", "--clients", "2", "--files", "200"]);
    let text = out.ok();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("meta: 2 clients x 16 in flight, 200 files in one directory"),
        "{text}"
    );
    let mut seen = Vec::new();
    for line in lines {
        // "create        12345 /s  (0.02s)"
        let (name, rest) = line.split_at(14);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let rate: f64 = f[0].parse().unwrap_or_else(|_| panic!("rate in {line:?}"));
        let secs: f64 = f[2]
            .trim_start_matches('(')
            .trim_end_matches(')')
            .trim_end_matches('s')
            .parse()
            .unwrap_or_else(|_| panic!("seconds in {line:?}"));
        sane(rate, 0.0, RATE_MAX, line);
        assert!(secs >= 0.0 && secs < limit, "{line:?}: seconds");
        // The seconds are printed rounded: the rate must match them within that.
        let unit = if line.contains("entries/s") {
            0.0005
        } else {
            0.005
        };
        let lo = 200.0 / (secs + unit);
        let hi = if secs > unit {
            200.0 / (secs - unit)
        } else {
            f64::INFINITY
        };
        assert!(
            rate >= lo.floor() - 1.0 && rate <= hi.ceil() + 1.0,
            "{line:?}: rate {rate} does not match 200 files in {secs}s"
        );
        seen.push(name.trim().to_string());
    }
    assert_eq!(
        seen,
        ["create", "readdir", "readdir+attrs", "stat", "unlink"],
        "{text}"
    );
    let left: Vec<String> = root_names(&cluster)
        .into_iter()
        .filter(|n| n.starts_with("bench-meta"))
        .collect();
    assert!(left.is_empty(), "bench meta left {left:?}");
}

#[test]
fn bench_concurrent_runs_and_reports_sane_numbers() {
    let cluster = Cluster::start();
    let per_client: u64 = 1 << 20;
    let clients = 3u64;
    let total = clients * per_client;
    let limit = common::CLI_DEADLINE.as_secs_f64();
    for extra in [
        &[][..],
        &["--interleave", "64K"],
        &["--processes", "--fsync"],
    ] {
        let mut args = vec![
            "bench",
            "concurrent",
            "--clients",
            "3",
            "--size-per-client",
            "1M",
            "--block",
            "256K",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = cluster.run_cli(&args);
        let v = out.json();
        assert_eq!(v["clients"], 3, "{v}");
        assert_eq!(v["size_per_client"], per_client, "{v}");
        assert_eq!(v["block"], 256 << 10, "{v}");
        let defaults = &cluster.config().defaults;
        assert_eq!(v["stripe_size"], defaults.stripe_size, "{v}");
        assert_eq!(v["stripe_count"], defaults.stripe_count, "{v}");
        for phase in ["write", "read"] {
            let p = &v[phase];
            let what = |k: &str| format!("{extra:?} {phase} {k}");
            assert_eq!(p["bytes"], total, "{}: {v}", what("bytes"));
            let secs = num(p, "slowest_secs");
            sane(secs, 0.0, limit, &what("slowest_secs"));
            let mib = num(p, "mib_per_sec");
            let want = total as f64 / (1 << 20) as f64 / secs;
            assert!(
                (mib - want).abs() <= want * 1e-6,
                "{}: {mib} MiB/s, but {total} bytes in {secs}s is {want}",
                what("mib_per_sec")
            );
            let cpu = num(p, "client_cpu_secs");
            assert!(
                cpu.is_finite() && cpu >= 0.0,
                "{}: {cpu}",
                what("client cpu")
            );
            if let Some(s) = p["server_cpu_secs"].as_f64() {
                assert!(s.is_finite() && s >= 0.0, "{}: {s}", what("server cpu"));
            }
            let per_gib = num(p, "cpu_secs_per_gib");
            assert!(per_gib.is_finite() && per_gib >= 0.0, "{}", what("cpu/GiB"));
        }
    }

    // The human form: a header and one row per phase, the numbers as in JSON.
    let out = cluster.run_cli(&[
        "bench",
        "concurrent",
        "--clients",
        "3",
        "--size-per-client",
        "1M",
        "--block",
        "256K",
    ]);
    let text = out.ok();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("concurrent: 3 clients (tasks) x 1M"),
        "{text}"
    );
    assert_eq!(lines.len(), 4, "{text}");
    for (line, phase) in lines[2..].iter().zip(["write", "read"]) {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[0], phase, "{text}");
        assert_eq!(f[1], "3M", "{text}");
        let secs: f64 = f[2].parse().unwrap();
        let mib: f64 = f[3].parse().unwrap();
        assert!(secs >= 0.0 && secs < limit, "{line:?}: seconds");
        // Both are printed rounded (seconds to 0.001, MiB/s to 1): they must agree
        // within that.
        let lo = 3.0 / (secs + 0.0005) - 0.5;
        let hi = if secs > 0.0005 {
            3.0 / (secs - 0.0005) + 0.5
        } else {
            f64::INFINITY
        };
        assert!(
            mib >= lo && mib <= hi,
            "{line:?}: {mib} MiB/s for 3 MiB in {secs}s"
        );
    }
    let left = root_names(&cluster);
    assert!(left.is_empty(), "bench concurrent left {left:?}");
}
