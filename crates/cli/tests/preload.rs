//! libpvfs_preload.so end to end: unmodified programs — coreutils,
//! python3, and C programs using stdio and raw descriptors — run with `LD_PRELOAD` on a
//! real 4-server file system, without a mount. Every copy is checked twice: with
//! `sha256sum` against the local original, and byte for byte through the client
//! library (so nothing can pass by landing in some local directory).
//!
//! The library is the one `scripts/test` builds before `cargo test` (with plain
//! `cargo test`, run `cargo build --workspace` first). Each test uses its own prefix,
//! a path that does not exist locally.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{assert_bytes_eq, Cluster, Rng};

/// Longest any one program may run.
const DEADLINE: Duration = Duration::from_secs(120);

/// The library, built by `scripts/test` before the tests run (never by a test).
fn preload_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| common::artifact("libpvfs_preload.so"))
}

/// Runs `cmd` to completion (stdin empty, output captured unless the caller set it),
/// killing it and failing the test past [`DEADLINE`].
fn run(mut cmd: Command, what: &str) -> Output {
    let start = Instant::now();
    cmd.stdin(Stdio::null());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut v);
        }
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut v);
        }
        v
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// Programs with the library preloaded on one cluster, under one prefix.
struct Preload<'a> {
    cluster: &'a Cluster,
    prefix: String,
}

impl<'a> Preload<'a> {
    fn new(cluster: &'a Cluster, tag: &str) -> Preload<'a> {
        let prefix = format!("/pvfs-test-{}-{tag}", std::process::id());
        assert!(
            !Path::new(&prefix).exists(),
            "{prefix} exists locally; the test needs a prefix that does not"
        );
        Preload { cluster, prefix }
    }

    /// The local spelling of pvfs path `p`.
    fn at(&self, p: &str) -> String {
        format!("{}{p}", self.prefix)
    }

    /// `prog args` with the library preloaded.
    fn cmd(&self, prog: &str, args: &[&str]) -> Command {
        let mut c = Command::new(prog);
        c.args(args)
            .env("LD_PRELOAD", preload_lib())
            .env("PVFS_CONFIG", self.cluster.config_path())
            .env("PVFS_PREFIX", &self.prefix)
            .env_remove("PVFS_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Runs `prog args` preloaded; returns its output whatever the status.
    fn run(&self, prog: &str, args: &[&str]) -> Output {
        run(self.cmd(prog, args), &format!("{prog} {}", args.join(" ")))
    }

    /// Runs `prog args` preloaded, asserts success, returns stdout.
    #[track_caller]
    fn ok(&self, prog: &str, args: &[&str]) -> String {
        let out = self.run(prog, args);
        assert!(
            out.status.success(),
            "`{prog} {}` failed ({}):\nstdout:\n{}\nstderr:\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `sha256sum` of a pvfs path, read through the library.
    #[track_caller]
    fn sha(&self, p: &str) -> String {
        let out = self.ok("sha256sum", &[&self.at(p)]);
        out.split_whitespace().next().unwrap().to_string()
    }

    /// The bytes of pvfs file `p`, read through the client library.
    fn bytes(&self, p: &str) -> Vec<u8> {
        let path = p.to_string();
        self.cluster
            .client()
            .run(Duration::from_secs(60), async move |c| {
                let f = c.open(&path).await.unwrap();
                let size = f.size().await.unwrap();
                let mut buf = vec![0u8; size as usize];
                let n = f.read_at(0, &mut buf).await.unwrap();
                buf.truncate(n);
                buf
            })
    }

    /// Whether pvfs path `p` exists, asked through the client library.
    fn exists(&self, p: &str) -> bool {
        let path = p.to_string();
        self.cluster
            .client()
            .run(Duration::from_secs(60), async move |c| {
                c.stat_lite(&path).await.is_ok()
            })
    }
}

/// `sha256sum` of a local file, without the library.
fn local_sha(path: &Path) -> String {
    let mut c = Command::new("sha256sum");
    c.arg(path).stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = run(c, "sha256sum");
    assert!(out.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

fn write_random(path: &Path, seed: u64, len: usize) -> Vec<u8> {
    let data = Rng::new(seed).bytes(len);
    std::fs::write(path, &data).unwrap();
    data
}

fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// Compiles tests/preload/posix.c into `dir`.
fn build_posix(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/preload/posix.c");
    let exe = dir.join("posix");
    let mut c = Command::new("cc");
    c.args(["-O2", "-Wall", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = run(c, "cc posix.c");
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn coreutils_copy_list_move_and_remove_with_checksums() {
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "coreutils");
    let dir = cluster.dir().join("local");
    std::fs::create_dir(&dir).unwrap();
    let src = dir.join("src.bin");
    // Odd size: several stripes on every server and a partial last one.
    let data = write_random(&src, 1, 5 * 1024 * 1024 + 12_345);
    let src_sha = local_sha(&src);
    let s = src.to_str().unwrap();

    // mkdir (-p changes into each directory it makes), cp local→pvfs.
    pl.ok("mkdir", &["-p", &pl.at("/t/a/b")]);
    pl.ok("mkdir", &[&pl.at("/t/c")]);
    pl.ok("cp", &[s, &pl.at("/t/a/f")]);
    assert_eq!(pl.sha("/t/a/f"), src_sha, "sha256sum through the library");
    assert_bytes_eq(
        &pl.bytes("/t/a/f"),
        &data,
        "cp local→pvfs, read by the client",
    );

    // cat pvfs→local file, cp pvfs→pvfs, cp pvfs→local.
    let catted = dir.join("catted.bin");
    let mut c = pl.cmd("cat", &[&pl.at("/t/a/f")]);
    c.stdout(std::fs::File::create(&catted).unwrap());
    assert!(run(c, "cat").status.success());
    assert_eq!(local_sha(&catted), src_sha, "cat pvfs > local");
    pl.ok("cp", &[&pl.at("/t/a/f"), &pl.at("/t/a/b/g")]);
    assert_eq!(pl.sha("/t/a/b/g"), src_sha, "cp pvfs→pvfs");
    let back = dir.join("back.bin");
    pl.ok("cp", &[&pl.at("/t/a/b/g"), back.to_str().unwrap()]);
    assert_eq!(local_sha(&back), src_sha, "cp pvfs→local");

    // dd with skip and seek: a hole of 5 blocks, then 10 blocks from block 3.
    pl.ok(
        "dd",
        &[
            &format!("if={s}"),
            &format!("of={}", pl.at("/t/dd.bin")),
            "bs=64K",
            "skip=3",
            "seek=5",
            "count=10",
            "status=none",
        ],
    );
    let mut want = vec![0u8; 5 * 65536];
    want.extend_from_slice(&data[3 * 65536..13 * 65536]);
    assert_bytes_eq(&pl.bytes("/t/dd.bin"), &want, "dd skip/seek");
    let ddback = dir.join("ddback.bin");
    pl.ok(
        "dd",
        &[
            &format!("if={}", pl.at("/t/dd.bin")),
            &format!("of={}", ddback.display()),
            "bs=64K",
            "skip=5",
            "status=none",
        ],
    );
    assert_bytes_eq(
        &std::fs::read(&ddback).unwrap(),
        &data[3 * 65536..13 * 65536],
        "dd skip from pvfs",
    );

    // head and tail, by bytes and by lines.
    let head = pl.run("head", &["-c", "1000", &pl.at("/t/a/f")]);
    assert_bytes_eq(&head.stdout, &data[..1000], "head -c");
    let tail = pl.run("tail", &["-c", "7777", &pl.at("/t/a/f")]);
    assert_bytes_eq(&tail.stdout, &data[data.len() - 7777..], "tail -c");
    let text: String = (0..500).map(|i| format!("line {i}\n")).collect();
    std::fs::write(dir.join("lines.txt"), &text).unwrap();
    pl.ok(
        "cp",
        &[
            dir.join("lines.txt").to_str().unwrap(),
            &pl.at("/t/lines.txt"),
        ],
    );
    assert_eq!(
        pl.ok("head", &["-n", "2", &pl.at("/t/lines.txt")]),
        "line 0\nline 1\n"
    );
    assert_eq!(
        pl.ok("tail", &["-n", "2", &pl.at("/t/lines.txt")]),
        "line 498\nline 499\n"
    );

    // ls -l and stat.
    let ls = pl.ok("ls", &["-l", &pl.at("/t/a")]);
    let f_line = ls
        .lines()
        .find(|l| l.ends_with(" f"))
        .unwrap_or_else(|| panic!("ls -l:\n{ls}"));
    assert!(f_line.starts_with("-rw"), "ls -l: {f_line}");
    assert!(
        f_line.contains(&data.len().to_string()),
        "ls -l size: {f_line}"
    );
    assert!(
        ls.lines().any(|l| l.starts_with('d') && l.ends_with(" b")),
        "ls -l:\n{ls}"
    );
    let mut names: Vec<String> = pl
        .ok("ls", &[&pl.at("/t")])
        .lines()
        .map(String::from)
        .collect();
    names.sort();
    assert_eq!(names, ["a", "c", "dd.bin", "lines.txt"]);
    assert_eq!(
        pl.ok("stat", &["-c", "%s %F", &pl.at("/t/a/f")]).trim(),
        format!("{} regular file", data.len())
    );
    assert_eq!(
        pl.ok("stat", &["-c", "%F", &pl.at("/t/a")]).trim(),
        "directory"
    );
    // mkfifo makes a FIFO (metadata in pvfs); ls -l shows its type.
    pl.ok("mkfifo", &[&pl.at("/t/fifo")]);
    assert_eq!(
        pl.ok("stat", &["-c", "%F", &pl.at("/t/fifo")]).trim(),
        "fifo"
    );
    assert!(pl.ok("ls", &["-l", &pl.at("/t/fifo")]).starts_with('p'));
    pl.ok("rm", &[&pl.at("/t/fifo")]);
    let missing = pl.run("stat", &[&pl.at("/t/nothing")]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("No such file or directory"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );

    // mv inside pvfs, pvfs→local and local→pvfs (across file systems: copy + remove).
    pl.ok("mv", &[&pl.at("/t/a/f"), &pl.at("/t/c/moved")]);
    assert!(!pl.exists("/t/a/f") && pl.exists("/t/c/moved"));
    assert_eq!(pl.sha("/t/c/moved"), src_sha);
    let out_of = dir.join("out.bin");
    pl.ok("mv", &[&pl.at("/t/c/moved"), out_of.to_str().unwrap()]);
    assert!(!pl.exists("/t/c/moved"));
    assert_eq!(local_sha(&out_of), src_sha, "mv pvfs→local");
    pl.ok("mv", &[out_of.to_str().unwrap(), &pl.at("/t/c/in")]);
    assert!(!out_of.exists());
    assert_bytes_eq(&pl.bytes("/t/c/in"), &data, "mv local→pvfs");

    // rm -r of the whole tree.
    pl.ok("rm", &["-r", &pl.at("/t")]);
    assert!(!pl.exists("/t"));
    assert_eq!(pl.ok("ls", &["-A", &pl.at("/")]), "");
}

#[test]
fn python_open_listdir_fork_threads_and_chdir() {
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "python");
    let src = cluster.dir().join("src.bin");
    let data = write_random(&src, 2, 3 * 1024 * 1024 + 17);
    pl.ok("mkdir", &[&pl.at("/py")]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/preload/check.py");
    let out = pl.ok(
        python(),
        &[
            script.to_str().unwrap(),
            &pl.at("/py"),
            src.to_str().unwrap(),
        ],
    );
    assert_eq!(out.trim(), "python ok");
    assert_bytes_eq(&pl.bytes("/py/copy.bin"), &data, "python write");
    assert_eq!(pl.sha("/py/copy.bin"), local_sha(&src));
    assert!(!pl.exists("/py/sub"), "shutil.rmtree left /py/sub");
}

#[test]
fn c_stdio_copy_and_descriptor_semantics() {
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "c");
    let exe = build_posix(cluster.dir());
    let exe = exe.to_str().unwrap();
    let src = cluster.dir().join("src.bin");
    let data = write_random(&src, 3, 2 * 1024 * 1024 + 99);
    pl.ok("mkdir", &[&pl.at("/c")]);

    let out = pl.ok(exe, &["stdio", src.to_str().unwrap(), &pl.at("/c/copy")]);
    assert_eq!(out.trim(), format!("copied {}", data.len()));
    let mut want = data.clone();
    want.extend_from_slice(format!("trailer {}\nappended\n", data.len()).as_bytes());
    assert_bytes_eq(&pl.bytes("/c/copy"), &want, "stdio copy");
    // And back out with stdio, compared by checksum with the original plus its lines.
    let back = cluster.dir().join("back.bin");
    pl.ok(exe, &["stdio", &pl.at("/c/copy"), back.to_str().unwrap()]);
    assert_bytes_eq(
        &std::fs::read(&back).unwrap()[..want.len()],
        &want,
        "stdio copy back",
    );

    pl.ok("mkdir", &[&pl.at("/c/fds")]);
    assert_eq!(pl.ok(exe, &["fds", &pl.at("/c/fds")]).trim(), "fds ok");
    assert_eq!(pl.bytes("/c/fds/forked"), b"parentchild");
    assert!(!pl.exists("/c/fds/f"), "unlinked file still has a name");
}

#[test]
fn local_paths_stay_local_and_exec_fails_loudly() {
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "local");
    let dir = cluster.dir().join("plain");
    std::fs::create_dir(&dir).unwrap();
    let a = dir.join("a");
    let data = write_random(&a, 4, 100_000);
    // A local path that merely contains the prefix's name is untouched.
    let lookalike = dir.join(pl.prefix.trim_start_matches('/'));
    std::fs::create_dir(&lookalike).unwrap();
    pl.ok(
        "cp",
        &[a.to_str().unwrap(), lookalike.join("b").to_str().unwrap()],
    );
    assert_bytes_eq(
        &std::fs::read(lookalike.join("b")).unwrap(),
        &data,
        "local cp",
    );
    let ls = pl.ok("ls", &[lookalike.to_str().unwrap()]);
    assert_eq!(ls.trim(), "b");
    assert!(!pl.exists("/b"));

    // Without PVFS_CONFIG the library is inert: the prefix is just a missing path.
    let mut c = pl.cmd("ls", &[&pl.at("/")]);
    c.env_remove("PVFS_CONFIG");
    let out = run(c, "ls without PVFS_CONFIG");
    assert!(!out.status.success());

    // exec: a pvfs descriptor inherited by a new program is not pvfs there; it fails
    // with EBADF instead of reading as empty.
    pl.ok("cp", &[a.to_str().unwrap(), &pl.at("/f")]);
    let script = format!("cat < {}", pl.at("/f"));
    let out = pl.run("bash", &["-c", &script]);
    assert!(
        !out.status.success(),
        "cat of an inherited pvfs descriptor succeeded"
    );
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Bad file descriptor"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
