//! The `pvfs` command line, end to end: genconfig, start, ping, mkdir, ls, stat, mv,
//! ln, cp in every direction, layout, setlayout, df, bench and stop, with `--json`
//! outputs parsed and checked against each other and against the bytes copied; the
//! mistakes it refuses (a copy between two local files, a configuration written over
//! an existing one); help texts that cite sources, not notes; and the demo, which
//! leaves no server and no directory behind however it ends.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::BufRead;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{assert_bytes_eq, poll, run_pvfs, scaled, Cluster, Rng};
use serde_json::Value;

/// Every subcommand of `pvfs`.
const SUBCOMMANDS: &[&str] = &[
    "genconfig",
    "server",
    "start",
    "stop",
    "ping",
    "df",
    "ls",
    "stat",
    "mkdir",
    "rm",
    "mv",
    "ln",
    "cat",
    "cp",
    "layout",
    "setlayout",
    "bench",
    "demo",
    "fsck",
    "mount",
    "umount",
];

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Bytes datafile `idx` holds of a file of `size` bytes written without holes (stripe
/// size `s`, `c` datafiles), from the definition.
fn share(s: u64, c: u64, idx: u64, size: u64) -> u64 {
    let row = s * c;
    (size / row) * s + (size % row).saturating_sub(idx * s).min(s)
}

/// Checks `pvfs layout --json PATH`: geometry, and bytes per datafile adding up to the
/// size, each datafile holding exactly its share.
fn check_layout(
    cluster: &Cluster,
    path: &str,
    stripe_size: u64,
    stripe_count: u64,
    size: u64,
) -> Value {
    let v = cluster.run_cli(&["layout", "--json", path]).json();
    assert_eq!(v["path"], path);
    assert_eq!(v["size"].as_u64(), Some(size), "{path}: layout size");
    assert_eq!(
        v["stripe_size"].as_u64(),
        Some(stripe_size),
        "{path}: stripe size"
    );
    assert_eq!(
        v["stripe_count"].as_u64(),
        Some(stripe_count),
        "{path}: stripe count"
    );
    let dfs = v["datafiles"].as_array().unwrap();
    assert_eq!(dfs.len() as u64, stripe_count);
    let mut sum = 0;
    let mut allocated = 0;
    let mut servers = Vec::new();
    for (i, d) in dfs.iter().enumerate() {
        assert_eq!(d["index"].as_u64(), Some(i as u64));
        let bytes = d["bytes"].as_u64().unwrap();
        assert_eq!(
            bytes,
            share(stripe_size, stripe_count, i as u64, size),
            "{path}: datafile {i} bytes"
        );
        sum += bytes;
        let server = d["server"].as_str().unwrap().to_string();
        let idx = d["server_index"].as_u64().unwrap() as usize;
        assert_eq!(cluster.config().servers[idx].name, server);
        // The bytes are on that server's disk.
        let file = cluster.datafile_path(idx, d["handle"].as_u64().unwrap());
        let md = std::fs::metadata(&file).ok();
        let on_disk = md.as_ref().map_or(0, |m| m.len());
        assert_eq!(
            on_disk,
            bytes,
            "{path}: datafile {i} on disk ({})",
            file.display()
        );
        // And the space its server reports is what that disk allocates for it.
        let blocks = md.as_ref().map_or(0, |m| m.blocks() * 512);
        assert_eq!(
            d["allocated"].as_u64(),
            Some(blocks),
            "{path}: datafile {i} allocated ({})",
            file.display()
        );
        allocated += blocks;
        servers.push(server);
    }
    assert_eq!(sum, size, "{path}: bytes per datafile add up to the size");
    assert_eq!(
        v["blocks"].as_u64(),
        Some(allocated / 512),
        "{path}: blocks are the datafiles' allocation"
    );
    servers.sort();
    servers.dedup();
    assert_eq!(
        servers.len() as u64,
        stripe_count,
        "{path}: datafiles on distinct servers"
    );
    // The human form says the same.
    let text = cluster.run_cli(&["layout", path]).ok().to_string();
    assert!(
        text.contains(&format!("{size} bytes")),
        "layout output:\n{text}"
    );
    assert!(
        text.contains(&format!("stripe count {stripe_count}")),
        "layout output:\n{text}"
    );
    v
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

#[test]
fn genconfig_writes_a_loadable_configuration_and_refuses_bad_options() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out_file = dir.path().join("fs.toml");
    let f = out_file.to_str().unwrap();
    let none: &[(&str, &str)] = &[];
    let out = run_pvfs(
        &[
            "genconfig",
            "--servers",
            "4",
            "--dir",
            d,
            "--port",
            "0",
            "--stripe-size",
            "1M",
            "--stripe-count",
            "2",
            "-o",
            f,
        ],
        none,
        &["PVFS_CONFIG"],
    );
    out.ok();
    assert!(
        out.stderr.contains("4 servers"),
        "genconfig says what it wrote: {}",
        out.stderr
    );
    let c = pvfs_config::Config::load(&out_file).unwrap();
    assert_eq!(c.servers.len(), 4);
    assert_eq!(c.defaults.stripe_size, MIB);
    assert_eq!(c.defaults.stripe_count, 2);
    let mut ports = Vec::new();
    for (i, s) in c.servers.iter().enumerate() {
        assert_eq!(s.name, format!("s{i}"));
        assert_eq!(s.storage, dir.path().join(&s.name));
        let port: u16 = s.address.rsplit(':').next().unwrap().parse().unwrap();
        assert_ne!(port, 0, "port 0 must be replaced by a free port");
        assert!(
            s.roles.contains(pvfs_config::Roles::DATA)
                && s.roles.contains(pvfs_config::Roles::META)
        );
        ports.push(port);
    }
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 4, "distinct ports");
    // Handle ranges do not overlap.
    for a in 0..4 {
        for b in a + 1..4 {
            assert!(!c.servers[a].handles.overlaps(&c.servers[b].handles));
        }
    }
    // To standard output, with data-only servers and a fixed base port.
    let out = run_pvfs(
        &[
            "genconfig",
            "--servers",
            "3",
            "--meta-servers",
            "1",
            "--dir",
            d,
            "--port",
            "7100",
            "-o",
            "-",
        ],
        none,
        &[],
    );
    let c = pvfs_config::Config::parse(out.ok(), "stdout").unwrap();
    assert_eq!(c.meta_servers(), vec![0]);
    assert_eq!(c.data_servers(), vec![0, 1, 2]);
    let addrs: Vec<&str> = c.servers.iter().map(|s| s.address.as_str()).collect();
    assert_eq!(
        addrs,
        ["127.0.0.1:7100", "127.0.0.1:7101", "127.0.0.1:7102"]
    );

    // Bad values: one line, non-zero status, nothing written.
    let bad = dir.path().join("bad.toml");
    let b = bad.to_str().unwrap();
    for args in [
        vec!["--servers", "0"],
        vec!["--servers", "4", "--meta-servers", "5"],
        vec!["--servers", "4", "--stripe-count", "9"],
        vec!["--servers", "4", "--stripe-size", "100"],
    ] {
        let mut all = vec!["genconfig", "--dir", d, "--port", "0", "-o", b];
        all.extend(args);
        run_pvfs(&all, none, &[]).err_line();
        assert!(!bad.exists(), "`pvfs {}` wrote a file", all.join(" "));
    }
    // Options the parser refuses: non-zero status, the option named.
    for args in [
        vec![
            "genconfig",
            "--servers",
            "4",
            "--dir",
            d,
            "-o",
            b,
            "--stripe-size",
            "12Q",
        ],
        vec!["genconfig", "--servers", "four", "--dir", d, "-o", b],
        vec![
            "genconfig",
            "--servers",
            "4",
            "--dir",
            d,
            "-o",
            b,
            "--bogus",
        ],
        vec!["genconfig", "--dir", d, "-o", b],
    ] {
        let out = run_pvfs(&args, none, &[]);
        assert!(
            !out.status.success() && out.status.code().is_some(),
            "`pvfs {}` succeeded",
            args.join(" ")
        );
        assert!(
            out.stdout.is_empty(),
            "`pvfs {}` printed on stdout",
            args.join(" ")
        );
        assert!(!bad.exists());
    }
}

#[test]
fn usage_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let none: &[(&str, &str)] = &[];
    run_pvfs(
        &[
            "genconfig",
            "--servers",
            "4",
            "--dir",
            d,
            "-o",
            "-",
            "--stripe-size",
            "12Q",
        ],
        none,
        &[],
    )
    .err_containing("stripe-size");
    run_pvfs(
        &[
            "genconfig",
            "--servers",
            "4",
            "--dir",
            d,
            "-o",
            "-",
            "--bogus",
        ],
        none,
        &[],
    )
    .err_containing("--bogus");
    run_pvfs(&["ls", "/"], none, &["PVFS_CONFIG"]).err_containing("config");
    let out = run_pvfs(
        &[
            "cp",
            "-c",
            "/no/such/fs.toml",
            "--chunk",
            "0",
            "/etc/hostname",
            "pvfs:/h",
        ],
        none,
        &[],
    );
    out.err_containing("--chunk");
    assert_eq!(out.status.code(), Some(2), "a usage error");
}

#[test]
fn every_command_end_to_end() {
    let cluster = Cluster::builder().configure();
    let mut rng = Rng::new(0x5eed_000a);
    let cfg = cluster.config_str();
    let none: &[(&str, &str)] = &[];
    // Commands with an explicit --config (and no PVFS_CONFIG) ...
    let pv = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--config", cfg]);
        run_pvfs(&all, none, &["PVFS_CONFIG"])
    };
    // ... and through PVFS_CONFIG.
    let cli = |args: &[&str]| cluster.run_cli(args);

    // ----- start, ping
    let out = pv(&["start"]);
    assert!(
        out.ok().contains("4 servers answering"),
        "start output:\n{}",
        out.stdout
    );
    assert_eq!(cluster.background_pids().len(), 4);
    let v = cli(&["ping", "--json"]).json();
    let servers = v.as_array().unwrap();
    assert_eq!(servers.len(), 4);
    for (i, s) in servers.iter().enumerate() {
        assert_eq!(s["name"], format!("s{i}"));
        assert_eq!(s["address"], cluster.config().servers[i].address);
        assert_eq!(s["ok"], true);
        assert!(s["rtt_us"].as_u64().is_some());
        assert!(s["roles"].as_str().unwrap().contains("data"));
    }
    let text = pv(&["ping"]).ok().to_string();
    assert_eq!(
        text.lines().filter(|l| l.ends_with("ok")).count(),
        4,
        "ping output:\n{text}"
    );
    // A second start finds them running.
    assert!(cli(&["start"]).ok().contains("already running"));

    // ----- mkdir
    cli(&["mkdir", "-p", "/proj/a/b", "/proj/c"]).ok();
    cli(&["mkdir", "-p", "/proj/a/b"]).ok();
    cli(&["mkdir", "/proj/d", "/proj/e"]).ok();
    cli(&["mkdir", "-m", "700", "/proj/private"]).ok();

    // ----- cp local -> pvfs -> pvfs -> local, sizes not a multiple of the stripe
    let local = cluster.dir().join("data.bin");
    let content = rng.bytes((5 * MIB + 12345) as usize);
    std::fs::write(&local, &content).unwrap();
    let size = content.len() as u64;
    cli(&[
        "cp",
        "--stripe-size",
        "96K",
        "--stripe-count",
        "3",
        local.to_str().unwrap(),
        "pvfs:/proj/data.bin",
    ])
    .ok();
    check_layout(&cluster, "/proj/data.bin", 96 * KIB, 3, size);
    cli(&[
        "cp",
        "--stripe-size",
        "4608",
        "--stripe-count",
        "2",
        "pvfs:/proj/data.bin",
        "pvfs:/proj/c/copy.bin",
    ])
    .ok();
    check_layout(&cluster, "/proj/c/copy.bin", 4608, 2, size);
    let back = cluster.dir().join("back.bin");
    pv(&["cp", "pvfs:/proj/c/copy.bin", back.to_str().unwrap()]).ok();
    assert_bytes_eq(&read(&back), &content, "local -> pvfs -> pvfs -> local");
    // A small chunk size: many pipelined chunks.
    cli(&[
        "cp",
        "--chunk",
        "64K",
        "pvfs:/proj/data.bin",
        back.to_str().unwrap(),
    ])
    .ok();
    assert_bytes_eq(&read(&back), &content, "pvfs -> local in 64K chunks");
    // Into directories: the source's name is kept.
    cli(&["cp", local.to_str().unwrap(), "pvfs:/proj/a"]).ok();
    check_layout(&cluster, "/proj/a/data.bin", 64 * KIB, 4, size);
    let outdir = cluster.dir().join("out");
    std::fs::create_dir(&outdir).unwrap();
    cli(&["cp", "pvfs:/proj/a/data.bin", outdir.to_str().unwrap()]).ok();
    assert_bytes_eq(
        &read(&outdir.join("data.bin")),
        &content,
        "pvfs -> local directory",
    );
    // An empty file, and a copy over a longer file (which is cut to the new size).
    let empty = cluster.dir().join("empty");
    std::fs::write(&empty, b"").unwrap();
    cli(&["cp", empty.to_str().unwrap(), "pvfs:/proj/empty"]).ok();
    check_layout(&cluster, "/proj/empty", 64 * KIB, 4, 0);
    let small = cluster.dir().join("small");
    std::fs::write(&small, b"short").unwrap();
    cli(&["cp", small.to_str().unwrap(), "pvfs:/proj/a/data.bin"]).ok();
    check_layout(&cluster, "/proj/a/data.bin", 64 * KIB, 4, 5);
    cli(&["cp", "pvfs:/proj/a/data.bin", back.to_str().unwrap()]).ok();
    assert_eq!(read(&back), b"short");

    // ----- ls
    let names: Vec<String> = cli(&["ls", "/proj"])
        .ok()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(names, ["a", "c", "d", "data.bin", "e", "empty", "private"]);
    let long = cli(&["ls", "-l", "/proj"]).ok().to_string();
    let line = |name: &str| {
        long.lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("ls -l lacks {name}:\n{long}"))
            .to_string()
    };
    assert!(line("a").starts_with("drwxr-xr-x"), "{}", line("a"));
    assert!(
        line("private").starts_with("drwx------"),
        "{}",
        line("private")
    );
    assert!(
        line("data.bin").starts_with("-rw-r--r--"),
        "{}",
        line("data.bin")
    );
    assert!(
        line("data.bin").contains(&format!(" {size} ")),
        "{}",
        line("data.bin")
    );
    let v = cli(&["ls", "--json", "/proj"]).json();
    let entries = v.as_array().unwrap();
    assert_eq!(entries.len(), 7);
    let entry = |name: &str| entries.iter().find(|e| e["name"] == name).unwrap().clone();
    assert_eq!(entry("data.bin")["type"], "file");
    assert_eq!(entry("data.bin")["size"].as_u64(), Some(size));
    assert_eq!(entry("data.bin")["stripe_size"].as_u64(), Some(96 * KIB));
    assert_eq!(entry("c")["type"], "dir");
    assert_eq!(entry("empty")["size"].as_u64(), Some(0));
    // ls of a file lists the file.
    assert_eq!(cli(&["ls", "/proj/data.bin"]).ok().trim(), "data.bin");

    // ----- stat
    let v = cli(&["stat", "--json", "/proj/data.bin"]).json();
    assert_eq!(v["path"], "/proj/data.bin");
    assert_eq!(v["type"], "file");
    assert_eq!(v["size"].as_u64(), Some(size));
    assert_eq!(v["mode"].as_u64(), Some(0o644));
    assert_eq!(v["st_mode"].as_u64(), Some(0o100644));
    assert_eq!(v["stripe_size"].as_u64(), Some(96 * KIB));
    assert_eq!(v["stripe_count"].as_u64(), Some(3));
    // Blocks: what the data servers allocate (compared with their disks by
    // check_layout), at least the bytes written for a file with no holes.
    let blocks = v["blocks"].as_u64().unwrap();
    assert!(blocks * 512 >= size, "{blocks} blocks for {size} bytes");
    assert_eq!(v["uid"].as_u64(), Some(unsafe { libc::geteuid() } as u64));
    let handle = v["handle"].as_u64().unwrap();
    let v = cli(&["stat", "--json", "/proj"]).json();
    assert_eq!(v["type"], "dir");
    assert_eq!(v["st_mode"].as_u64(), Some(0o040755));
    let text = cli(&["stat", "/proj/data.bin"]).ok().to_string();
    assert!(
        text.contains(&format!("size: {size}")),
        "stat output:\n{text}"
    );
    assert!(text.contains("layout: 3 stripes"), "stat output:\n{text}");

    // ----- mv (file across directories, directory rename)
    cli(&["mv", "/proj/data.bin", "/proj/a/b/moved.bin"]).ok();
    cli(&["stat", "/proj/data.bin"]).err_containing("no such file or directory");
    let v = cli(&["stat", "--json", "/proj/a/b/moved.bin"]).json();
    assert_eq!(v["handle"].as_u64(), Some(handle), "mv keeps the object");
    assert_eq!(v["size"].as_u64(), Some(size));
    cli(&["mv", "/proj/d", "/proj/e/d2"]).ok();
    assert_eq!(cli(&["ls", "/proj/e"]).ok().trim(), "d2");
    // mv over an existing file replaces it.
    cli(&["mv", "/proj/empty", "/proj/c/copy.bin"]).ok();
    assert_eq!(
        cli(&["stat", "--json", "/proj/c/copy.bin"]).json()["size"].as_u64(),
        Some(0)
    );

    // ----- ln -s
    cli(&["ln", "-s", "/proj/a/b/moved.bin", "/proj/link"]).ok();
    let v = cli(&["stat", "--json", "/proj/link"]).json();
    assert_eq!(
        (v["type"].as_str(), v["size"].as_u64()),
        (Some("file"), Some(size)),
        "stat follows the link"
    );
    let v = cli(&["stat", "--json", "--no-follow", "/proj/link"]).json();
    assert_eq!(v["type"], "symlink");
    assert_eq!(v["target"], "/proj/a/b/moved.bin");
    assert!(cli(&["ls", "-l", "/proj"])
        .ok()
        .contains("link -> /proj/a/b/moved.bin"));
    cli(&["cp", "pvfs:/proj/link", back.to_str().unwrap()]).ok();
    assert_bytes_eq(&read(&back), &content, "cp through a symlink");

    // ----- ln (hard): another name of the same file, in another directory
    cli(&["ln", "/proj/a/b/moved.bin", "/proj/e/hard.bin"]).ok();
    let v = cli(&["stat", "--json", "/proj/e/hard.bin"]).json();
    assert_eq!(
        (
            v["handle"].as_u64(),
            v["nlink"].as_u64(),
            v["size"].as_u64()
        ),
        (Some(handle), Some(2), Some(size)),
        "a hard link is the same file"
    );
    cli(&["ln", "/proj/a/b/moved.bin", "/proj/e/hard.bin"]).err_containing("file exists");
    cli(&["ln", "/proj/e", "/proj/e-link"]).err_containing("hard links");
    cli(&["rm", "/proj/e/hard.bin"]).ok();
    let v = cli(&["stat", "--json", "/proj/a/b/moved.bin"]).json();
    assert_eq!(
        v["nlink"].as_u64(),
        Some(1),
        "rm of one name keeps the other"
    );

    // ----- setlayout, then files created in that directory get it
    cli(&["mkdir", "/proj/striped"]).ok();
    let out = cli(&[
        "setlayout",
        "/proj/striped",
        "--stripe-size",
        "128K",
        "--stripe-count",
        "2",
    ]);
    out.ok();
    let text = cli(&["stat", "/proj/striped"]).ok().to_string();
    assert!(
        text.contains("default layout"),
        "stat of a directory with a layout:\n{text}"
    );
    cli(&["cp", local.to_str().unwrap(), "pvfs:/proj/striped/f"]).ok();
    check_layout(&cluster, "/proj/striped/f", 128 * KIB, 2, size);
    // Explicit options still win; unset ones come from the directory.
    cli(&[
        "cp",
        "--stripe-count",
        "3",
        local.to_str().unwrap(),
        "pvfs:/proj/striped/g",
    ])
    .ok();
    check_layout(&cluster, "/proj/striped/g", 128 * KIB, 3, size);
    let tc = cluster.client();
    tc.run(std::time::Duration::from_secs(30), async |c| {
        let f = c
            .create("/proj/striped/lib", 0o644, Default::default(), true)
            .await
            .unwrap();
        assert_eq!(
            (f.layout().stripe_size, f.layout().datafiles.len()),
            (128 * KIB, 2)
        );
    });
    // Subdirectories made later inherit the default.
    cli(&["mkdir", "/proj/striped/sub"]).ok();
    cli(&["cp", small.to_str().unwrap(), "pvfs:/proj/striped/sub/h"]).ok();
    check_layout(&cluster, "/proj/striped/sub/h", 128 * KIB, 2, 5);
    // One stripe is said in the singular.
    let one = cli(&["setlayout", "/proj/striped/sub", "--stripe-count", "1"])
        .ok()
        .to_string();
    assert!(one.contains("new files get 1 stripe\n"), "{one}");
    cli(&["cp", small.to_str().unwrap(), "pvfs:/proj/striped/sub/one"]).ok();
    let text = cli(&["stat", "/proj/striped/sub/one"]).ok().to_string();
    assert!(
        text.contains("layout: 1 stripe of 64K"),
        "stat output:\n{text}"
    );
    cli(&["setlayout", "--clear", "/proj/striped"]).ok();
    cli(&["cp", small.to_str().unwrap(), "pvfs:/proj/striped/i"]).ok();
    check_layout(&cluster, "/proj/striped/i", 64 * KIB, 4, 5);

    // ----- df
    let v = cli(&["df", "--json"]).json();
    let servers = v["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 4);
    let (mut total, mut free, mut objects, mut datafiles) = (0, 0, 0, 0);
    for (i, s) in servers.iter().enumerate() {
        assert_eq!(s["name"], format!("s{i}"));
        assert_eq!(s["ok"], true);
        let t = s["total_bytes"].as_u64().unwrap();
        let f = s["free_bytes"].as_u64().unwrap();
        assert!(t > 0 && f <= t && s["avail_bytes"].as_u64().unwrap() <= f);
        // Every server stores in this test's directory, on one disk: its space
        // counts once, under the first server.
        if i == 0 {
            assert!(s["same_space_as"].is_null(), "{s}");
            total += t;
            free += f;
        } else {
            assert_eq!(s["same_space_as"], "s0", "{s}");
        }
        objects += s["objects"].as_u64().unwrap();
        datafiles += s["datafiles"].as_u64().unwrap();
    }
    assert_eq!(v["total_bytes"].as_u64(), Some(total));
    assert_eq!(v["free_bytes"].as_u64(), Some(free));
    // ... which is the size of the disk holding the test's directory.
    let disk = disk_total(cluster.dir());
    assert_eq!(
        total, disk,
        "df's total against statvfs of the storage disk"
    );
    assert_eq!(v["objects"].as_u64(), Some(objects));
    assert_eq!(v["datafiles"].as_u64(), Some(datafiles));
    assert_eq!(v["used_bytes"].as_u64(), Some(total - free));
    // The root, 9 directories, 8 files and a symlink; every written datafile.
    assert!(objects >= 19, "df counts {objects} objects");
    assert!(
        datafiles >= 3 + 2 + 2 + 3,
        "df counts {datafiles} datafiles"
    );
    let text = cli(&["df"]).ok().to_string();
    for name in ["s0", "s1", "s2", "s3", "total"] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "df output lacks {name}:\n{text}"
        );
    }

    // ----- bench, in-process and as processes
    let before = cli(&["ls", "/"]).ok().to_string();
    for extra in [&[][..], &["--processes"][..]] {
        let mut args = vec![
            "bench",
            "concurrent",
            "--clients",
            "2",
            "--size-per-client",
            "2M",
            "--block",
            "512K",
            "--json",
        ];
        args.extend(extra);
        let v = cli(&args).json();
        assert_eq!(v["clients"].as_u64(), Some(2));
        assert_eq!(v["processes"].as_bool(), Some(!extra.is_empty()));
        for phase in ["write", "read"] {
            assert_eq!(v[phase]["bytes"].as_u64(), Some(4 * MIB), "{phase} bytes");
            assert!(v[phase]["mib_per_sec"].as_f64().unwrap() > 0.0);
            assert!(v[phase]["slowest_secs"].as_f64().unwrap() > 0.0);
        }
    }
    let text = cli(&[
        "bench",
        "concurrent",
        "--clients",
        "2",
        "--size-per-client",
        "1M",
    ])
    .ok()
    .to_string();
    assert!(
        text.contains("write") && text.contains("read"),
        "bench output:\n{text}"
    );
    assert_eq!(cli(&["ls", "/"]).ok(), before, "bench left its file behind");

    // ----- bench mixed: every kind of operation, checked, and cleaned up after
    let text = cli(&[
        "bench",
        "mixed",
        "--clients",
        "4",
        "--duration",
        "6s",
        "--max-file",
        "64K",
    ])
    .ok()
    .to_string();
    assert!(
        text.contains("no errors, every read matched"),
        "bench mixed output:\n{text}"
    );
    let count = |kind: &str| -> u64 {
        text.split(&format!("{kind} "))
            .nth(1)
            .and_then(|rest| rest.split([',', '\n']).next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    for kind in ["create", "read", "rename", "mkdir"] {
        assert!(count(kind) > 0, "bench mixed did no {kind}:\n{text}");
    }
    // Each client keeps 16 directories at most; past that, mkdirs turn into rmdirs.
    if count("mkdir") > 4 * 16 + 8 {
        assert!(
            count("rmdir") > 0,
            "bench mixed never removed a directory:\n{text}"
        );
    }
    assert_eq!(
        cli(&["ls", "/"]).ok(),
        before,
        "bench mixed left files behind"
    );

    // ----- rm
    cli(&["rm", "/proj/link"]).ok();
    assert_eq!(
        cli(&["stat", "--json", "/proj/a/b/moved.bin"]).json()["size"].as_u64(),
        Some(size),
        "rm of a link keeps its target"
    );
    cli(&["rm", "/proj/c/copy.bin", "/proj/striped/f"]).ok();
    cli(&["rm", "-r", "/proj"]).ok();
    cli(&["stat", "/proj"]).err_containing("no such file or directory");
    assert_eq!(cli(&["ls", "/"]).ok().trim(), "");
    // The datafiles went with the files.
    let v = cli(&["df", "--json"]).json();
    assert_eq!(
        v["datafiles"].as_u64(),
        Some(0),
        "datafiles left after rm -r: {v}"
    );

    // ----- --help everywhere
    for sub in SUBCOMMANDS {
        let out = run_pvfs(&[sub, "--help"], none, &[]);
        assert!(
            out.ok().contains("Usage"),
            "`pvfs {sub} --help`:\n{}",
            out.stdout
        );
    }

    // ----- stop
    let out = pv(&["stop"]);
    assert_eq!(
        out.ok().lines().filter(|l| l.contains("stopped")).count(),
        4,
        "stop output:\n{}",
        out.stdout
    );
    assert!(cluster.background_pids().is_empty());
    for name in cluster.names() {
        assert!(!cluster.storage(&name).join("server.pid").exists());
    }
    let out = cli(&["ping"]);
    out.err_containing("4 of 4");
    assert!(
        out.elapsed < common::scaled(std::time::Duration::from_secs(5)),
        "ping with every server stopped took {:?}",
        out.elapsed
    );
}

#[test]
fn genconfig_keeps_an_existing_configuration_and_writes_it_private() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let file = dir.path().join("fs.toml");
    let f = file.to_str().unwrap();
    let none: &[(&str, &str)] = &[];
    let gen = |extra: &[&str]| {
        let mut args = vec!["genconfig", "--servers", "2", "--dir", d, "-o", f];
        args.extend(extra);
        run_pvfs(&args, none, &["PVFS_CONFIG"])
    };
    let mode_of = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let mode = || mode_of(&file);
    let key_id = |p: &std::path::Path| pvfs_auth::KeyRing::load(p).unwrap().current().fingerprint();
    let out = gen(&[]);
    out.ok();
    assert_eq!(mode(), 0o600, "the configuration is private");
    // ... and genconfig says that users need to read it, and how.
    assert!(
        out.stderr.contains("users must be able to read it")
            && out.stderr.contains(&format!("chmod 644 {f}")),
        "{}",
        out.stderr
    );
    let first = pvfs_config::Config::load(&file).unwrap();
    // The keys are separate files beside it, named after it, private too.
    assert_eq!(first.security.key, dir.path().join("fs.key"));
    assert_eq!(first.security.server_key, dir.path().join("fs-server.key"));
    for k in [&first.security.key, &first.security.server_key] {
        assert_eq!(mode_of(k), 0o600, "{}", k.display());
    }
    let first_keys = (
        key_id(&first.security.key),
        key_id(&first.security.server_key),
    );
    assert_ne!(first_keys.0, first_keys.1, "two different keys");

    // Again: refused, and the file system keeps its fsid and keys.
    let out = gen(&[]);
    let line = out.err_containing("--force");
    assert!(
        line.contains(f) && line.contains("already exists"),
        "{line}"
    );
    assert_eq!(pvfs_config::Config::load(&file).unwrap(), first);
    assert_eq!(
        (
            key_id(&first.security.key),
            key_id(&first.security.server_key)
        ),
        first_keys
    );
    assert_eq!(mode(), 0o600);

    // A key file alone (the configuration removed) is not silently replaced either.
    std::fs::rename(&file, dir.path().join("fs.toml.saved")).unwrap();
    let line = gen(&[]).err_containing("already exists").to_string();
    assert!(line.contains("fs.key"), "{line}");
    std::fs::rename(dir.path().join("fs.toml.saved"), &file).unwrap();

    // --force replaces them all, also a file others could read, with private ones.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    gen(&["--force"]).ok();
    let second = pvfs_config::Config::load(&file).unwrap();
    assert_ne!(second.fsid, first.fsid);
    assert_ne!(key_id(&second.security.key), first_keys.0);
    assert_ne!(key_id(&second.security.server_key), first_keys.1);
    assert_eq!(mode(), 0o600);
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["fs-server.key", "fs.key", "fs.toml"],
        "nothing left beside the files"
    );
}

#[test]
fn cp_between_two_local_files_is_refused_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("small.dat");
    std::fs::write(&src, b"local bytes").unwrap();
    let dst = dir.path().join("local.dat");
    // No configuration is needed to see the mistake, and none is read.
    let out = run_pvfs(
        &[
            "cp",
            "-c",
            "/no/such/fs.toml",
            src.to_str().unwrap(),
            dst.to_str().unwrap(),
        ],
        &[],
        &["PVFS_CONFIG"],
    );
    let line = out.err_containing("pvfs:/");
    assert!(
        line.contains("small.dat") && line.contains("local.dat"),
        "{line}"
    );
    assert_eq!(out.status.code(), Some(2), "a usage error: {line}");
    assert!(!dst.exists(), "cp copied locally");
}

#[test]
fn help_texts_cite_sources_not_notes() {
    let mut commands: Vec<Vec<&str>> = SUBCOMMANDS.iter().map(|c| vec![*c]).collect();
    commands.extend([
        vec!["bench", "concurrent"],
        vec!["bench", "meta"],
        vec!["bench", "mixed"],
    ]);
    commands.push(vec![]);
    let note = |text: &str| {
        let lower = text.to_lowercase();
        let words: Vec<&str> = lower.split_whitespace().collect();
        let numbered = |w: &str| {
            words
                .windows(2)
                .any(|p| p[0] == w && p[1].starts_with(|c: char| c.is_ascii_digit()))
        };
        // Written in pieces, so that searching the sources for such notes finds
        // none here.
        lower.contains(concat!("design ", "§"))
            || lower.contains(concat!("seed", "-0"))
            || numbered("seed")
            || numbered("issue")
            || numbered("point")
    };
    let mut all = String::new();
    for c in &commands {
        let mut args = c.clone();
        args.push("--help");
        let out = run_pvfs(&args, &[], &[]);
        let text = out.ok();
        assert!(
            !note(text),
            "`pvfs {}` cites an internal note:\n{text}",
            args.join(" ")
        );
        all.push_str(text);
    }
    assert!(
        all.contains("Carns et al., 2000"),
        "the concurrent test cites the PVFS paper"
    );
}

// ----- the demo ----------------------------------------------------------------------

/// Live processes whose arguments (after the program) satisfy `f`.
fn processes(f: impl Fn(&[String]) -> bool) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit(')')
                .next()
                .is_none_or(|r| r.trim_start().starts_with('Z'));
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .skip(1)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            !zombie && f(&args)
        })
        .collect()
}

/// The servers of the demo in `dir` (`pvfs server --config DIR/pvfs.toml ...`).
fn demo_servers(dir: &Path) -> Vec<u32> {
    let config = dir.join("pvfs.toml").to_str().unwrap().to_string();
    processes(|a| a.first().is_some_and(|c| c == "server") && a.contains(&config))
}

/// The reaper of the demo in `dir` (`pvfs demo --reap DIR`).
fn demo_reapers(dir: &Path) -> Vec<u32> {
    let d = dir.to_str().unwrap().to_string();
    processes(|a| a.first().is_some_and(|c| c == "demo") && a.contains(&d))
}

/// Asserts that nothing of the demo in `dir` is left: no server, no reaper, no
/// directory (waiting up to `wait` for the reaper's part).
#[track_caller]
fn assert_demo_gone(dir: &Path, wait: Duration) {
    poll(
        &format!("the demo's servers, reaper and {} to go", dir.display()),
        wait,
        || {
            (demo_servers(dir).is_empty() && demo_reapers(dir).is_empty() && !dir.exists())
                .then_some(())
        },
    );
}

/// `pvfs demo` with its output piped; returns it, its directory (named on its first
/// line) and the rest of its output.
fn start_demo() -> (
    Child,
    PathBuf,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut cmd = Command::new(common::pvfs_bin());
    cmd.arg("demo")
        .env_remove("PVFS_CONFIG")
        .env_remove("PVFS_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    common::die_with_parent(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let dir = first
        .trim_end()
        .rsplit_once("storage in ")
        .map(|(_, d)| PathBuf::from(d))
        .unwrap_or_else(|| panic!("the demo's first line names no directory: {first:?}"));
    assert!(dir.is_dir(), "{first}");
    (child, dir, out)
}

/// Waits for the demo to end and returns the signal that ended it.
fn demo_signal(demo: &mut Child) -> Option<i32> {
    let st = poll("the demo to end", scaled(Duration::from_secs(120)), || {
        demo.try_wait().unwrap()
    });
    common::signal_of(&st)
}

#[test]
fn the_demo_runs_cites_its_sources_and_leaves_nothing_behind() {
    let out = run_pvfs(&["demo"], &[], &["PVFS_CONFIG"]);
    let text = out.ok();
    let first = text.lines().next().unwrap();
    let dir = PathBuf::from(first.rsplit_once("storage in ").unwrap().1);
    assert!(
        text.contains("concurrent read/write test (Carns et al., 2000, §4)"),
        "{text}"
    );
    assert!(!text.to_lowercase().contains("seed"), "{text}");
    // A server killed while a file with two copies is read: the read goes on.
    for shown in [
        "killed s",
        "without an error",
        "caught up and up in the cluster map",
    ] {
        assert!(text.contains(shown), "{shown:?} missing: {text}");
    }
    assert!(text.trim_end().ends_with("done"), "{text}");
    // The demo removed its directory itself.
    assert!(!dir.exists(), "{} is left", dir.display());
    assert_demo_gone(&dir, scaled(Duration::from_secs(30)));
}

#[test]
fn the_demo_cleans_up_when_its_reader_stops_early() {
    // `pvfs demo | head -1`.
    let (mut demo, dir, out) = start_demo();
    drop(out);
    assert_eq!(
        demo_signal(&mut demo),
        Some(libc::SIGPIPE),
        "the demo ends as a filter does when its reader goes"
    );
    // It cleaned up before it died.
    assert!(demo_servers(&dir).is_empty(), "servers outlived the demo");
    assert!(!dir.exists(), "{} is left", dir.display());
    assert_demo_gone(&dir, scaled(Duration::from_secs(30)));
}

#[test]
fn the_demo_cleans_up_on_ctrl_c() {
    let (mut demo, dir, _out) = start_demo();
    poll(
        "the demo's four servers",
        scaled(Duration::from_secs(60)),
        || (demo_servers(&dir).len() == 4).then_some(()),
    );
    // SAFETY: kill(2) of our child.
    unsafe { libc::kill(demo.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(demo_signal(&mut demo), Some(libc::SIGINT));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut demo.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("interrupted"), "{err}");
    assert!(demo_servers(&dir).is_empty(), "servers outlived the demo");
    assert!(!dir.exists(), "{} is left", dir.display());
    assert_demo_gone(&dir, scaled(Duration::from_secs(30)));
}

#[test]
fn the_demo_cleans_up_when_killed() {
    let (mut demo, dir, _out) = start_demo();
    poll(
        "the demo's four servers",
        scaled(Duration::from_secs(60)),
        || (demo_servers(&dir).len() == 4).then_some(()),
    );
    demo.kill().unwrap();
    assert_eq!(demo_signal(&mut demo), Some(libc::SIGKILL));
    // Its servers die with it, and its reaper removes the directory.
    assert_demo_gone(&dir, scaled(Duration::from_secs(60)));
}

/// Total bytes of the file system holding `dir` (statvfs).
fn disk_total(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs is plain old data; zeroes are a valid value to be overwritten.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `s` is a valid out-pointer.
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut s) }, 0);
    s.f_blocks as u64 * s.f_frsize as u64
}
