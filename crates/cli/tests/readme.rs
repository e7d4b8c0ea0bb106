//! The README's command blocks run as written, so they cannot rot: "Use it", "Mount
//! it" and "Stop it", in that order, in one `bash -euo pipefail`, as a user would paste
//! them. Only what a test must not touch is changed, and each change must apply (a
//! README that no longer matches fails the test rather than running something else):
//!
//! - `/srv/`, `/etc/` and `/mnt/` become directories of a temporary directory;
//! - `--port 7000` becomes a block of ports reserved for this test;
//! - the build command goes, and `export PATH=$PWD/target/release:$PATH` puts the
//!   `pvfs` binary under test on `PATH` (tests never build: `scripts/test` did).
//!
//! The mount block needs `/dev/fuse` (root here; elsewhere it is skipped with a reason,
//! which fails under `CI=true`). Whatever the script leaves running or mounted when it
//! fails is killed and detached when the test ends, and by a watchdog if the test
//! process is killed.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{pvfs_bin, reap_under, scaled, skip, PortBlock, Watchdog};

/// Longest the three blocks may take together (64 MiB copies, a 1 GiB benchmark,
/// 10,000 creates), before scaling by the suite's slowdown factor.
const DEADLINE: Duration = Duration::from_secs(600);

/// The first ```sh block after the line `heading`.
fn block_after(readme: &str, heading: &str) -> String {
    let at = readme
        .lines()
        .position(|l| l.trim_end() == heading)
        .unwrap_or_else(|| panic!("README.md has no heading {heading:?}"));
    let mut lines = readme.lines().skip(at + 1);
    lines
        .by_ref()
        .find(|l| l.trim_end() == "```sh")
        .unwrap_or_else(|| panic!("README.md has no ```sh block after {heading:?}"));
    let block: Vec<&str> = lines.take_while(|l| l.trim_end() != "```").collect();
    block.join("\n") + "\n"
}

/// `text` without its build commands (the parts of a `&&` chain that run `cargo`):
/// `scripts/test` built everything before the tests. Fails the test when there is none.
#[track_caller]
fn without_builds(text: &str) -> String {
    let mut dropped = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split(" && ").collect();
            let kept: Vec<&str> = parts
                .iter()
                .copied()
                .filter(|p| !p.trim_start().starts_with("cargo "))
                .collect();
            dropped += parts.len() - kept.len();
            kept.join(" && ")
        })
        .collect();
    assert!(
        dropped > 0,
        "README.md's commands no longer build pvfs first: update this test with them"
    );
    lines.join("\n") + "\n"
}

/// `text` with every `from` replaced by `to`; fails the test when there is none.
#[track_caller]
fn must_replace(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "README.md's commands no longer contain {from:?}: update this test with them"
    );
    text.replace(from, to)
}

/// Moves the system directories `/srv/`, `/etc/` and `/mnt/` under `root` wherever a
/// word starts with them (after a space, `=` or a line start).
fn localize(text: &str, root: &Path) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut l = String::new();
        let mut prev = ' ';
        let mut rest = line;
        while let Some(c) = rest.chars().next() {
            let hit = ["/srv/", "/etc/", "/mnt/"]
                .into_iter()
                .find(|d| (prev == ' ' || prev == '=') && rest.starts_with(d));
            if let Some(d) = hit {
                l.push_str(&format!("{}{d}", root.display()));
                rest = &rest[d.len()..];
                prev = '/';
            } else {
                l.push(c);
                rest = &rest[c.len_utf8()..];
                prev = c;
            }
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// Whether this process can mount FUSE directly (root, or a readable `/dev/fuse`).
fn can_mount() -> Result<(), String> {
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse is missing (the fuse kernel module)".into());
    }
    if !common::is_root() {
        return Err("mounting under a temporary /mnt needs root".into());
    }
    Ok(())
}

#[test]
fn readme_use_mount_and_stop_blocks_run_as_written() {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let tmp = tempfile::Builder::new()
        .prefix("pvfs-readme-")
        .tempdir()
        .unwrap();
    let root: PathBuf = std::fs::canonicalize(tmp.path()).unwrap();
    let _watchdog = Watchdog::new(std::slice::from_ref(&root));
    for d in ["srv", "etc", "mnt", "home"] {
        std::fs::create_dir(root.join(d)).unwrap();
    }
    let ports = PortBlock::reserve(4);
    let bin_dir = Path::new(pvfs_bin()).parent().unwrap().to_path_buf();

    let mut script = String::from("set -euxo pipefail\n");
    let use_it = block_after(&readme, "## Use it");
    let use_it = without_builds(&use_it);
    let use_it = must_replace(
        &use_it,
        "export PATH=$PWD/target/release:$PATH",
        &format!("export PATH={}:$PATH", bin_dir.display()),
    );
    // Metrics on free ports, not 100 above the block (another test's block).
    let use_it = must_replace(
        &use_it,
        "--port 7000",
        &format!("--port {} --metrics-port 0", ports.base),
    );
    script.push_str(&use_it);
    let mounted = match can_mount() {
        Ok(()) => {
            script.push_str(&block_after(&readme, "### Mount it (FUSE)"));
            true
        }
        Err(why) => {
            skip("readme: the \"Mount it\" block", &why);
            false
        }
    };
    script.push_str(&block_after(&readme, "### Stop it"));
    let script = localize(&script, &root);
    assert!(
        !script.contains("cargo"),
        "the README's blocks would run cargo inside a test:\n{script}"
    );
    for d in ["/srv/", "/etc/", "/mnt/"] {
        let moved = format!("{}{d}", root.display());
        assert!(
            script.contains(&moved) || (d == "/mnt/" && !mounted),
            "README.md's commands no longer use {d}: update this test with them"
        );
    }

    struct Cleanup<'a>(&'a Path);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            reap_under(self.0);
        }
    }
    let _cleanup = Cleanup(&root);

    let (out, leftovers) = run_bash(&script, &root);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the README's commands failed ({}); the script:\n{script}\nstdout:\n{stdout}\n\
         stderr (each command after +):\n{stderr}",
        out.status
    );
    // What the README says the commands do, they do.
    assert!(
        stdout.contains("stripe size 1M (1048576 bytes), stripe count 4"),
        "/data/run1/big.dat should have /data's default layout (1M x 4):\n{stdout}"
    );
    assert!(
        stdout.contains("4 servers answering"),
        "pvfs start:\n{stdout}"
    );
    if mounted {
        assert!(
            stdout.contains("stripe_size=1048576 stripe_count=2"),
            "getfattr should show the layout set with setfattr:\n{stdout}"
        );
    }
    // `pvfs stop` stopped every server; nothing is left mounted.
    assert!(
        leftovers.is_empty(),
        "processes still running after the README's pvfs stop: {leftovers:?}"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(root.to_str().unwrap()),
        "still mounted after pvfs umount:\n{mounts}"
    );
}

/// Command lines of the processes (other than this one) that name `path`.
fn processes_naming(path: &Path) -> Vec<String> {
    let want = path.to_str().unwrap();
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n != me && n.parse::<u32>().is_ok())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(want) && !c.contains("pvfs-test-watchdog"))
        .collect()
}

/// Runs `script` with bash in `root/home` (also `$HOME`), without the caller's pvfs
/// settings; kills it and fails the test past the deadline. Returns its output and
/// the processes naming `root` that were left when it ended (then killed, so that
/// none holds its output open).
fn run_bash(script: &str, root: &Path) -> (std::process::Output, Vec<String>) {
    let home = root.join("home");
    let deadline = scaled(DEADLINE);
    let start = Instant::now();
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(&home)
        .env("HOME", &home)
        .env_remove("PVFS_CONFIG")
        .env_remove("PVFS_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run bash");
    let mut o = child.stdout.take().unwrap();
    let mut e = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = o.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = e.read_to_end(&mut v);
        v
    });
    let status = common::poll(
        "the README's commands",
        deadline + Duration::from_secs(1),
        || {
            let st = child.try_wait().unwrap();
            if st.is_none() && start.elapsed() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                reap_under(root);
                panic!("the README's commands did not finish within {deadline:?}");
            }
            st
        },
    );
    let leftovers = processes_naming(root);
    reap_under(root);
    let out = std::process::Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    };
    (out, leftovers)
}
