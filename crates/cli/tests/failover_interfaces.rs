//! Failover through every way in (`docs/replication.md`, "Failover"): on four real
//! server processes made by `pvfs genconfig --replicas 2`, programs create, write,
//! fsync and close files in a loop through the FUSE mount (python3), the preload
//! library (the same python3 program, unmodified), the C library (`failover/loop.c`),
//! MPI-IO on the mount (`mpi/failover_loop.c`, two ranks writing each file
//! together) and the `pvfs` CLI, all at once, while a server that is a metadata
//! primary, a member of the authority and a link of data chains is killed
//! (`kill -9`) or cut off the network. Every program ends well, and every file it
//! made reads back byte for byte through the client library: a pause, never an error.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    all_up_with_standby_copies, artifact, assert_bytes_eq, have_command, hosts, poll, run_pvfs,
    scaled, skip, Cluster, TestClient,
};
use mount::Mount;

/// What a server's log says of a metadata group it took over.
const TOOK_OVER: &str = "serving a metadata group from this server's copy, as its primary";
/// Ranks of the MPI program.
const RANKS: usize = 2;
/// Bytes per file of loop.py and loop.c, and per rank of the MPI program.
const BLOCK: usize = 65536;

/// Why the programs cannot run here (a missing tool), or None.
fn missing_tool() -> Option<String> {
    for tool in ["python3", "cc", "mpicc", "mpiexec"] {
        if !have_command(tool) {
            return Some(format!(
                "{tool} is not installed (scripts/install-deps installs it)"
            ));
        }
    }
    None
}

/// File i of loop.py and loop.c.
fn content(i: usize) -> Vec<u8> {
    (0..BLOCK)
        .map(|k| ((i * 7 + k % 256) & 0xff) as u8)
        .collect()
}

/// File i of the MPI program: each rank's block in rank order.
fn mpi_content(i: usize) -> Vec<u8> {
    (0..RANKS * BLOCK)
        .map(|at| ((at / BLOCK) * 31 + i * 7 + at % BLOCK) as u8)
        .collect()
}

/// The programs, built once into `dir`.
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi/include");
    let so = artifact("libpvfs.so");
    let libdir = so.parent().unwrap();
    let capi = dir.join("loop");
    let flags = [
        "-O2".to_string(),
        "-Wall".to_string(),
        "-Werror".to_string(),
        format!("-I{}", include.display()),
        format!("-L{}", libdir.display()),
        "-lpvfs".to_string(),
        "-lpthread".to_string(),
        format!("-Wl,-rpath,{}", libdir.display()),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    common::compile_c("failover/loop.c", &capi, &flags);
    (capi, common::mpicc(dir, "failover_loop"))
}

/// One program of the loop, running.
struct Program {
    what: &'static str,
    child: Child,
}

impl Program {
    fn start(what: &'static str, mut cmd: Command) -> Program {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_remove("PVFS_LOG")
            .env_remove("LD_LIBRARY_PATH");
        common::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {what} program: {e}"));
        Program { what, child }
    }

    /// Waits for its end; the files it made and its longest, or the test fails.
    fn finish(self) -> (usize, f64) {
        let out = common::wait_output(self.child, scaled(Duration::from_secs(120)), self.what);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the {} program failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
            self.what,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let words: Vec<&str> = stdout.split_whitespace().collect();
        match words.as_slice() {
            ["files", n, "longest", s] => (n.parse().unwrap(), s.parse().unwrap()),
            _ => panic!("the {} program said {stdout:?}", self.what),
        }
    }
}

/// Runs every program against `cluster` (four servers, two copies), does `fault` to
/// server s0 once each has made a file, lets them go on until s1 serves s0's
/// metadata and a second more, then `heal`s and checks every file.
fn through_every_interface(cluster: &Cluster, fault: impl FnOnce(), heal: impl FnOnce()) {
    let config = cluster.config().clone();
    assert_eq!(config.meta_group(0), vec![0, 1]);
    let (s0, s1) = (&config.servers[0].name, &config.servers[1].name);
    let programs = tempfile::tempdir().unwrap();
    let (capi, mpi) = build(programs.path());
    let m = Mount::start(cluster, &[]);
    let stop = cluster.dir().join("stop");
    let loop_py = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/failover/loop.py");
    let prefix = format!("/pvfs-test-{}-failover", std::process::id());
    assert!(!Path::new(&prefix).exists(), "{prefix} exists locally");

    let mut mount = Command::new("python3");
    mount.arg(&loop_py).arg(m.join("mount")).arg(&stop);
    let mut preload = Command::new("python3");
    preload
        .arg(&loop_py)
        .arg(format!("{prefix}/preload"))
        .arg(&stop)
        .env("LD_PRELOAD", artifact("libpvfs_preload.so"))
        .env("PVFS_CONFIG", cluster.config_path())
        .env("PVFS_PREFIX", &prefix);
    let mut c = Command::new(&capi);
    c.arg("/capi")
        .arg(&stop)
        .env("PVFS_CONFIG", cluster.config_path());
    let mut mpiexec = Command::new("mpiexec");
    mpiexec
        .args(["-n", &RANKS.to_string()])
        .arg(&mpi)
        .arg(format!("ufs:{}", m.join("mpi").display()))
        .arg(&stop);
    let running = vec![
        Program::start("mount", mount),
        Program::start("preload", preload),
        Program::start("C library", c),
        Program::start("MPI-IO", mpiexec),
    ];
    // The CLI: a new directory per call.
    let done = Arc::new(AtomicBool::new(false));
    let cli = {
        let done = done.clone();
        let config_path = cluster.config_str().to_string();
        std::thread::spawn(move || {
            let mut longest = Duration::ZERO;
            let mut i = 0;
            run_pvfs(&["mkdir", "/cli"], &[("PVFS_CONFIG", &config_path)], &[]).ok();
            while i < 5 || !done.load(Ordering::Relaxed) {
                let t = Instant::now();
                run_pvfs(
                    &["mkdir", &format!("/cli/d{i}")],
                    &[("PVFS_CONFIG", &config_path)],
                    &[],
                )
                .ok();
                longest = longest.max(t.elapsed());
                i += 1;
            }
            (i, longest.as_secs_f64())
        })
    };

    // Once every program has made a file, the fault; then on until s1 serves.
    let tc = TestClient::new(config.clone());
    let made = |dir: &str| -> usize {
        tc.run(Duration::from_secs(60), async |c| {
            c.readdir(dir).await.map(|e| e.len()).unwrap_or(0)
        })
    };
    poll(
        "every program making files",
        scaled(Duration::from_secs(60)),
        || {
            ["/mount", "/preload", "/capi", "/mpi", "/cli"]
                .iter()
                .all(|d| made(d) > 0)
                .then_some(())
        },
    );
    let before = cluster.log(s1).matches(TOOK_OVER).count();
    fault();
    poll(
        &format!("{s1} serving {s0}'s metadata"),
        scaled(Duration::from_secs(30)),
        || (cluster.log(s1).matches(TOOK_OVER).count() > before).then_some(()),
    );
    std::thread::sleep(scaled(Duration::from_secs(1)));
    heal();
    std::fs::write(&stop, b"").unwrap();
    done.store(true, Ordering::Relaxed);

    let mut results = Vec::new();
    for p in running {
        let what = p.what;
        results.push((what, p.finish()));
    }
    results.push(("CLI", cli.join().unwrap()));
    for (what, (n, longest)) in &results {
        eprintln!("{what}: {n} files, the longest took {longest:.2} s");
        // The fault reached every program: none can have gone on without a pause
        // (every fsync syncs s0's metadata group, and no standby serves it before
        // the authority calls s0 down, a lease after its last renewal).
        assert!(
            *longest > 0.5,
            "the {what} program never waited: did the fault reach it?"
        );
    }

    // Every file each program made, byte for byte, through the client library.
    tc.run(Duration::from_secs(300), async |c| {
        for (what, (n, _)) in &results {
            let dir = match *what {
                "mount" => "/mount",
                "preload" => "/preload",
                "C library" => "/capi",
                "MPI-IO" => "/mpi",
                _ => {
                    let listed = c.readdir("/cli").await.unwrap();
                    assert_eq!(listed.len(), *n, "directories the CLI made");
                    continue;
                }
            };
            for i in 0..*n {
                let path = format!("{dir}/f{i}");
                let want = if *what == "MPI-IO" {
                    mpi_content(i)
                } else {
                    content(i)
                };
                let f = c
                    .open(&path)
                    .await
                    .unwrap_or_else(|e| panic!("{path}: {e}"));
                let mut back = vec![0u8; want.len() + 1];
                let got = f.read_at(0, &mut back).await.unwrap();
                assert_bytes_eq(&back[..got], &want, &path);
            }
            let listed = c.readdir(dir).await.unwrap();
            assert_eq!(listed.len(), *n, "files in {dir}");
        }
    });
    drop(m);
}

/// A cluster of four servers with two copies of everything and a 1 s lease.
fn cluster(on_hosts: bool) -> Cluster {
    let mut b = Cluster::builder()
        .servers(4)
        .replicas(2)
        .set("lease", r#""1s""#);
    if on_hosts {
        b = b.on_hosts();
    }
    let cluster = b.start();
    all_up_with_standby_copies(&cluster);
    cluster
}

#[test]
fn a_killed_server_costs_every_interface_a_pause_never_an_error() {
    if let Some(why) = missing_tool() {
        skip("failover_interfaces", &why);
        return;
    }
    let cluster = cluster(false);
    let s0 = cluster.config().servers[0].name.clone();
    through_every_interface(
        &cluster,
        || {
            cluster.kill(&s0, libc::SIGKILL);
        },
        || {},
    );
    cluster.restart(&s0);
}

#[test]
fn a_server_cut_off_costs_every_interface_a_pause_never_an_error() {
    if let Some(why) = missing_tool().or(hosts::unavailable().map(str::to_string)) {
        skip("failover_interfaces", &why);
        return;
    }
    let cluster = cluster(true);
    through_every_interface(
        &cluster,
        || cluster.hosts().cut(0),
        || cluster.hosts().heal(0),
    );
}
