//! libpvfs_preload.so end to end: unmodified programs — coreutils as Debian ships
//! them (`cp`, `cp -a`, `cp -t`, `mv`, `install`, `ln -s`, `sed -i`, …), GNU tar,
//! rsync, python3, and C programs using stdio, raw descriptors and every `*at` call —
//! run with `LD_PRELOAD` on a real 4-server file system, without a mount. Copies into
//! directories go through the target directory's `O_PATH` descriptor, as coreutils 9
//! open it. Every result is checked through the client library (content, modes,
//! times, symlink targets, the exact set of names), and the prefix is checked not to
//! exist locally afterwards, so nothing can pass by landing in some local directory.
//!
//! The library is the one `scripts/test` builds before `cargo test` (with plain
//! `cargo test`, run `cargo build --workspace --lib --bins --examples` first). Each
//! test uses its own prefix, a path that does not exist locally. Programs run in the
//! cluster's temporary directory.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "locks/driver.rs"]
mod driver;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use common::{assert_bytes_eq, scaled, Cluster, Rng};
use pvfs_client::ObjKind;
use pvfs_proto::ObjDetail;

/// Longest any one program may run (each takes a few seconds at most here).
fn deadline() -> Duration {
    scaled(Duration::from_secs(120))
}

/// Longest a check through the client library may take.
fn client_deadline() -> Duration {
    scaled(Duration::from_secs(60))
}

/// The library, built by `scripts/test` before the tests run (never by a test).
fn preload_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| common::artifact("libpvfs_preload.so"))
}

/// What `LD_PRELOAD` holds for the programs: the library, after the library named by
/// `PVFS_TEST_PRELOAD_FIRST` when set (a sanitizer's runtime, which must be loaded
/// before any library that uses it: `scripts/sanitize`).
fn preload_value() -> std::ffi::OsString {
    let mut v = std::ffi::OsString::new();
    if let Some(first) = std::env::var_os("PVFS_TEST_PRELOAD_FIRST").filter(|f| !f.is_empty()) {
        v.push(first);
        v.push(":");
    }
    v.push(preload_lib());
    v
}

/// Runs `cmd` to completion (stdin empty, output captured unless the caller set it),
/// killing it and failing the test past [`deadline`].
fn run(mut cmd: Command, what: &str) -> Output {
    cmd.stdin(Stdio::null());
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    common::wait_output(child, deadline(), what)
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
            .current_dir(self.cluster.dir())
            .env("LD_PRELOAD", preload_value())
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
            .run(client_deadline(), async move |c| {
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
            .run(client_deadline(), async move |c| {
                c.stat_lite(&path).await.is_ok()
            })
    }

    /// The handle and link count of pvfs path `p` (not following a final symlink),
    /// asked through the client library.
    fn links(&self, p: &str) -> (u64, u32) {
        let path = p.to_string();
        self.cluster
            .client()
            .run(client_deadline(), async move |c| {
                let a = c.lstat(&path).await.unwrap();
                (a.handle, a.nlink)
            })
    }

    /// Asserts the program succeeded and the prefix did not appear locally (nothing
    /// landed beside pvfs).
    #[track_caller]
    fn ok_in_pvfs(&self, prog: &str, args: &[&str]) -> String {
        let out = self.ok(prog, args);
        self.assert_nothing_local();
        out
    }

    /// Extended attribute `name` of pvfs path `p`, read through the client library.
    fn xattr(&self, p: &str, name: &str) -> Vec<u8> {
        let (path, name) = (p.to_string(), name.to_string());
        self.cluster
            .client()
            .run(client_deadline(), async move |c| {
                let h = c.lstat(&path).await.unwrap().handle;
                c.getxattr(h, &name).await.unwrap()
            })
    }

    /// Asserts that the prefix does not exist locally.
    #[track_caller]
    fn assert_nothing_local(&self) {
        assert!(
            !Path::new(&self.prefix).exists(),
            "{} appeared locally: something went to the local file system",
            self.prefix
        );
    }

    /// The tree under pvfs path `p`, read through the client library: every entry by
    /// its path relative to `p`, with its mtime.
    fn tree(&self, p: &str) -> BTreeMap<String, (Node, (i64, u32))> {
        let root = p.trim_end_matches('/').to_string();
        self.cluster
            .client()
            .run(client_deadline(), async move |c| {
                let mut out = BTreeMap::new();
                let mut todo = vec![String::new()];
                while let Some(rel) = todo.pop() {
                    let dir = format!("{root}{rel}");
                    for e in c.readdir(&dir).await.unwrap() {
                        let r = format!("{rel}/{}", e.name);
                        let path = format!("{root}{r}");
                        let a = c.lstat(&path).await.unwrap();
                        let node = match (a.kind(), &a.detail) {
                            (ObjKind::Dir, _) => {
                                todo.push(r.clone());
                                Node::Dir(a.mode & 0o7777)
                            }
                            (_, ObjDetail::Symlink { target }) => Node::Link(target.clone()),
                            (ObjKind::File, _) => {
                                let f = c.open(&path).await.unwrap();
                                let mut buf = vec![0u8; a.size as usize];
                                let n = f.read_at(0, &mut buf).await.unwrap();
                                buf.truncate(n);
                                Node::File(buf, a.mode & 0o7777)
                            }
                            (k, _) => panic!("{path}: unexpected {k:?}"),
                        };
                        out.insert(r[1..].to_string(), (node, (a.mtime.secs, a.mtime.nsecs)));
                    }
                }
                out
            })
    }

    /// Asserts that pvfs path `p` holds exactly `want` (names, kinds, content, symlink
    /// targets), with `want`'s modes when `modes` and with every file's mtime
    /// [`FILE_MTIME`] when `mtimes`.
    #[track_caller]
    fn assert_tree(&self, p: &str, want: &BTreeMap<String, Node>, modes: bool, mtimes: bool) {
        let got = self.tree(p);
        let names = |m: Vec<&String>| m.into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(
            names(got.keys().collect()),
            names(want.keys().collect()),
            "names under {p}"
        );
        for (name, w) in want {
            let (g, mtime) = &got[name];
            let what = format!("{p}/{name}");
            match (g, w) {
                (Node::File(gd, gm), Node::File(wd, wm)) => {
                    assert_bytes_eq(gd, wd, &what);
                    if modes {
                        assert_eq!(gm, wm, "{what}: mode {gm:o}, want {wm:o}");
                    }
                    if mtimes {
                        assert_eq!(*mtime, FILE_MTIME, "{what}: mtime");
                    }
                }
                (Node::Dir(gm), Node::Dir(wm)) => {
                    if modes {
                        assert_eq!(gm, wm, "{what}: mode {gm:o}, want {wm:o}");
                    }
                }
                (Node::Link(g), Node::Link(w)) => assert_eq!(g, w, "{what}: symlink target"),
                _ => panic!("{what}: {g:?}, want {w:?}"),
            }
        }
    }
}

/// Sets extended attribute `name` of local file `path`; false if the local file
/// system does not take user attributes.
fn set_local_xattr(path: &Path, name: &str, value: &[u8]) -> bool {
    let p = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated path and name; value is live for its length.
    let rc = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        return true;
    }
    let e = std::io::Error::last_os_error();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP),
        "setxattr {}: {e}",
        path.display()
    );
    false
}

/// What one entry of a tree is.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// A regular file: content and mode.
    File(Vec<u8>, u32),
    /// A directory and its mode.
    Dir(u32),
    /// A symlink and its target.
    Link(String),
}

/// The mtime [`sample_tree`] gives every file (seconds, nanoseconds).
const FILE_MTIME: (i64, u32) = (1_500_000_000, 250_000_000);

/// Makes a local tree at `root` — files of several sizes and modes (one empty, one
/// executable, one read-only), nested directories of several modes, a relative
/// symlink and a dangling one — every file with mtime [`FILE_MTIME`]; returns what it
/// holds.
fn sample_tree(root: &Path, seed: u64) -> BTreeMap<String, Node> {
    let mut rng = Rng::new(seed);
    let files: [(&str, Vec<u8>, u32); 5] = [
        ("data.bin", rng.bytes(1_500_000 + 777), 0o640),
        ("empty", Vec::new(), 0o600),
        ("run.sh", b"#!/bin/sh\necho hi\n".to_vec(), 0o755),
        ("sub/note.txt", b"note\n".to_vec(), 0o444),
        ("sub/deeper/x.bin", rng.bytes(70_001), 0o644),
    ];
    let dirs = [("sub", 0o750), ("sub/deeper", 0o755)];
    let links = [("link", "sub/note.txt"), ("dangling", "nowhere")];
    let mut want = BTreeMap::new();
    std::fs::create_dir(root).unwrap();
    for (d, mode) in dirs {
        std::fs::create_dir(root.join(d)).unwrap();
        want.insert(d.to_string(), Node::Dir(mode));
    }
    let mtime = SystemTime::UNIX_EPOCH + Duration::new(FILE_MTIME.0 as u64, FILE_MTIME.1);
    for (name, data, mode) in files {
        let path = root.join(name);
        std::fs::write(&path, &data).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        want.insert(name.to_string(), Node::File(data, mode));
    }
    for (name, target) in links {
        std::os::unix::fs::symlink(target, root.join(name)).unwrap();
        want.insert(name.to_string(), Node::Link(target.to_string()));
    }
    // Directory modes last: a read-only one must not stop the files above.
    for (d, mode) in dirs {
        std::fs::set_permissions(root.join(d), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(TREE_MODE)).unwrap();
    want
}

/// The mode of [`sample_tree`]'s root directory.
const TREE_MODE: u32 = 0o755;

/// `want` as seen below a directory `name` of it (`name/...` for every entry), with
/// the directory itself (`mode`).
fn under(name: &str, mode: u32, want: &BTreeMap<String, Node>) -> BTreeMap<String, Node> {
    let mut out: BTreeMap<String, Node> = want
        .iter()
        .map(|(k, v)| (format!("{name}/{k}"), v.clone()))
        .collect();
    out.insert(name.to_string(), Node::Dir(mode));
    out
}

/// Whether `prog` can run here; if not, the test is skipped (and fails under CI).
fn have(test: &str, prog: &str) -> bool {
    if common::have_command(prog) {
        return true;
    }
    common::skip(test, &format!("{prog} is not installed"));
    false
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

/// Compiles `tests/preload/NAME.c` into `dir/NAME` (with `-pthread`) and returns it.
fn compile_c(dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    common::compile_c(
        &format!("preload/{name}.c"),
        &exe,
        &["-O2", "-Wall", "-pthread"],
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
    let exe = compile_c(cluster.dir(), "posix");
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
fn fallocate_and_block_counts_reach_the_data_servers() {
    // The checker the FUSE test runs on a local file system and on the mount, here
    // on descriptors the library owns: every fallocate mode and st_blocks.
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "alloc");
    let exe = cluster.dir().join("alloc");
    common::compile_c("fuse/alloc.c", &exe, &["-O2", "-Wall"]);
    pl.ok("mkdir", &[&pl.at("/alloc")]);
    let out = pl.ok(exe.to_str().unwrap(), &[&pl.at("/alloc"), "pvfs"]);
    let summary = out.lines().last().unwrap_or("");
    assert!(
        summary.starts_with("# ") && summary.ends_with(" 0 failed"),
        "alloc.c under the preload library:\n{out}"
    );
    // It really went to pvfs: the file is there, with its size and the space its
    // data servers hold for it.
    let tc = cluster.client();
    tc.run(client_deadline(), async |c| {
        let a = c.stat("/alloc/f").await.unwrap();
        assert_eq!(a.size, 6_000_010, "the checker's last size");
        let disk: u64 = a
            .layout()
            .unwrap()
            .datafiles
            .iter()
            .map(|df| {
                std::fs::metadata(cluster.datafile_path(df.server as usize, df.handle))
                    .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
                    .unwrap_or(0)
            })
            .sum();
        assert_eq!(a.blocks * 512, disk, "blocks against the datafiles on disk");
    });
    pl.assert_nothing_local();
}

#[test]
fn local_paths_stay_local_and_exec_without_the_handoff_fails_loudly() {
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

    // exec with the handoff turned off: a pvfs descriptor inherited by a new program
    // is not pvfs there; it fails with EBADF instead of reading as empty. (With the
    // handoff, the default, it works: `exec_hands_over_...` below.)
    pl.ok("cp", &[a.to_str().unwrap(), &pl.at("/f")]);
    let script = format!("cat < {}", pl.at("/f"));
    let mut c = pl.cmd("bash", &["-c", &script]);
    c.env("PVFS_PRELOAD_EXEC", "0");
    let out = run(c, "cat < pvfs without the handoff");
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

/// Asserts `out` succeeded; returns its stdout.
#[track_caller]
fn success(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn exec_hands_over_the_working_directory_and_descriptors() {
    let test = "exec_hands_over_the_working_directory_and_descriptors";
    if !(have(test, "git") && have(test, "make") && have(test, "cc")) {
        return;
    }
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "exec");
    let p = &pl.prefix;
    // git with no configuration but the command line's.
    let git_env = |c: &mut Command| {
        c.env("HOME", cluster.dir())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE");
    };

    // Shell redirections: the builtin echo writes through stdio (no hook sees it),
    // /bin/echo is exec'd with its standard output on the pvfs file, `>>` appends,
    // `<` hands a descriptor to cat.
    let out = pl.ok(
        "bash",
        &[
            "-c",
            &format!("echo one > {p}/out; echo two >> {p}/out; cat {p}/out"),
        ],
    );
    assert_eq!(out, "one\ntwo\n");
    assert_eq!(
        pl.bytes("/out"),
        b"one\ntwo\n",
        "echo > and >>, by the client"
    );
    let out = pl.ok(
        "bash",
        &[
            "-c",
            &format!(
                "/bin/echo three > {p}/out2; /bin/echo four >> {p}/out2; \
                 printf five >> {p}/out2; cat < {p}/out2"
            ),
        ],
    );
    assert_eq!(out, "three\nfour\nfive");
    assert_eq!(
        pl.bytes("/out2"),
        b"three\nfour\nfive",
        "cmd > and >>, by the client"
    );
    // One offset for the shell and the programs it runs, as POSIX says: what the
    // shell writes after /bin/echo lands after it, and what head leaves unread of its
    // standard input (it seeks back to the line's end) the shell reads next.
    let out = pl.ok(
        "bash",
        &[
            "-c",
            &format!(
                "{{ echo a; /bin/echo b; (echo c); echo d; }} > {p}/out4; \
                 printf '1\\n2\\n3\\n' > {p}/in; \
                 {{ read x; echo \"got $x\"; head -n 1; read y; echo \"got $y\"; }} < {p}/in"
            ),
        ],
    );
    assert_eq!(out, "got 1\n2\ngot 3\n");
    assert_eq!(
        pl.bytes("/out4"),
        b"a\nb\nc\nd\n",
        "a shared offset, by the client"
    );
    // Negative control: without the handoff, the exec'd cat cannot read its stdin.
    let mut c = pl.cmd("bash", &["-c", &format!("cat < {p}/out2")]);
    c.env("PVFS_PRELOAD_EXEC", "0");
    let out = run(c, "cat < without the handoff");
    assert!(!out.status.success() && out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Bad file descriptor"));
    // ... and an exec'd program cannot write into its stdout: EBADF, nothing lost
    // silently.
    let mut c = pl.cmd("bash", &["-c", &format!("/bin/echo lost > {p}/out3")]);
    c.env("PVFS_PRELOAD_EXEC", "0");
    let out = run(c, "echo > without the handoff");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Bad file descriptor"));
    assert_eq!(pl.bytes("/out3"), b"");

    // git in a pvfs working directory: every git command is a new program (and git
    // runs more of its own).
    pl.ok("mkdir", &[&pl.at("/x")]);
    let script = "cd PFX/x && git init g && cd g && echo hi > f && git add f && \
                  git -c user.email=a@b -c user.name=n commit -qm m && git log --oneline"
        .replace("PFX", p);
    let mut c = pl.cmd("bash", &["-c", &script]);
    git_env(&mut c);
    let out = success(&run(c, "git under the preload library"), "git");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "git's output:\n{out}");
    assert_eq!(
        lines[0],
        format!("Initialized empty Git repository in {p}/x/g/.git/")
    );
    let (short, subject) = lines[1].split_once(' ').unwrap();
    assert_eq!(subject, "m");
    assert!(short.len() >= 7 && short.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(pl.bytes("/x/g/f"), b"hi\n");
    let head = String::from_utf8(pl.bytes("/x/g/.git/HEAD")).unwrap();
    let branch = head.trim().strip_prefix("ref: ").unwrap();
    let commit = String::from_utf8(pl.bytes(&format!("/x/g/.git/{branch}"))).unwrap();
    assert!(
        commit.starts_with(short),
        "{branch}: {commit}, git log: {short}"
    );
    pl.assert_nothing_local();
    // Negative control: without the handoff, git starts in no directory at all.
    let mut c = pl.cmd("bash", &["-c", &format!("cd {p}/x && git init h")]);
    git_env(&mut c);
    c.env("PVFS_PRELOAD_EXEC", "0");
    let out = run(c, "git init without the handoff");
    assert!(
        !out.status.success(),
        "git init without the handoff succeeded"
    );
    assert!(!pl.exists("/x/h"));

    // Python's subprocess (a vfork child that closes every descriptor it does not
    // pass, then execs): the pvfs working directory, a pvfs stdout, one offset.
    let script = format!(
        "import os, subprocess\n\
         os.chdir('{p}/x')\n\
         f = open('{p}/py.out', 'w')\n\
         f.write('a\\n'); f.flush()\n\
         subprocess.run(['/bin/sh', '-c', 'echo b; pwd'], stdout=f, check=True)\n\
         f.write('c\\n'); f.close()\n\
         r = subprocess.run(['cat', '../py.out'], capture_output=True, check=True)\n\
         print(r.stdout.decode(), end='')\n"
    );
    let out = pl.ok(python(), &["-c", &script]);
    let want = format!("a\nb\n{p}/x\nc\n");
    assert_eq!(out, want);
    assert_eq!(
        pl.bytes("/py.out"),
        want.as_bytes(),
        "python, by the client"
    );

    // make in a pvfs directory: its recipes run in /bin/sh, which runs cc (which runs
    // its compiler passes and the linker), then the program cc made, itself stored in
    // pvfs, with its output redirected into pvfs.
    let local = cluster.dir().join("mk");
    std::fs::create_dir(&local).unwrap();
    std::fs::write(
        local.join("Makefile"),
        "all: hello.out\n\nhello: hello.c\n\tcc -o hello hello.c\n\n\
         hello.out: hello\n\t./hello > hello.out\n",
    )
    .unwrap();
    std::fs::write(
        local.join("hello.c"),
        "#include <stdio.h>\nint main(void) { printf(\"hello from make\\n\"); return 0; }\n",
    )
    .unwrap();
    pl.ok("mkdir", &[&pl.at("/mk")]);
    for f in ["Makefile", "hello.c"] {
        pl.ok("cp", &[local.join(f).to_str().unwrap(), &pl.at("/mk/")]);
    }
    let out = pl.ok("make", &["-C", &pl.at("/mk")]);
    assert!(
        out.contains("cc -o hello hello.c\n./hello > hello.out\n"),
        "make:\n{out}"
    );
    assert_eq!(pl.bytes("/mk/hello.out"), b"hello from make\n");
    assert_eq!(&pl.bytes("/mk/hello")[..4], b"\x7fELF");
    let out = pl.ok("make", &["-C", &pl.at("/mk")]);
    assert!(
        out.contains("Nothing to be done for 'all'"),
        "make again:\n{out}"
    );
    pl.assert_nothing_local();

    // Close-on-exec: a C program that execs itself checks which descriptors it
    // inherited, their offsets, and the working directory.
    let exe = compile_c(cluster.dir(), "exec");
    pl.ok("mkdir", &[&pl.at("/e")]);
    let out = pl.ok(exe.to_str().unwrap(), &["exec", &pl.at("/e")]);
    assert_eq!(out, "", "the child's stdout is a pvfs file");
    assert_eq!(pl.bytes("/e/inherited"), b"parent\nstill\nchild\ndup\n");
    assert_eq!(pl.bytes("/e/cloexec"), b"");
    assert_eq!(pl.bytes("/e/setfd"), b"");
    assert_eq!(pl.bytes("/e/cleared"), b"cleared\nagain\n");
    assert_eq!(pl.bytes("/e/stdio"), b"through stdio\nexec ok\n");

    // A malformed handoff is ignored with one line, and the program runs.
    let mut c = pl.cmd("cat", &[&pl.at("/out")]);
    c.env("PVFS_PRELOAD_STATE", "1|zz|1,2,x");
    let out = run(c, "cat with a malformed handoff");
    assert_eq!(success(&out, "cat"), "one\ntwo\n");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "pvfs_preload: ignoring a malformed PVFS_PRELOAD_STATE\n"
    );
    pl.assert_nothing_local();
}

#[test]
fn every_at_call_relative_to_o_path_rdonly_and_cwd_directories() {
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "at");
    let exe = compile_c(cluster.dir(), "at");
    let exe = exe.to_str().unwrap();
    // opath: open(O_PATH|O_DIRECTORY) as coreutils 9 open a target directory;
    // rdonly: a directory opened for reading; cwd: AT_FDCWD after chdir; walk: one
    // component at a time from "/", as rsync reaches its destination.
    for mode in ["opath", "rdonly", "cwd", "walk"] {
        let dir = format!("/{mode}");
        pl.ok("mkdir", &[&pl.at(&dir)]);
        let out = pl.ok_in_pvfs(exe, &[mode, &pl.at(&dir)]);
        assert_eq!(out.trim(), format!("at ok {mode}"));
        let got = pl.tree(&dir);
        let names: Vec<&str> = got.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["dir", "dir/inner", "kept", "link"],
            "{mode}: left behind"
        );
        let (kept, mtime) = &got["kept"];
        assert_eq!(
            *kept,
            Node::File(format!("kept {mode}\n").into_bytes(), 0o640),
            "{mode}: kept"
        );
        assert_eq!(*mtime, (1_234_567_890, 500_000_000), "{mode}: kept's mtime");
        assert_eq!(got["link"].0, Node::Link("kept".into()), "{mode}: link");
        assert_eq!(got["dir"].0, Node::Dir(0o750), "{mode}: dir");
        assert_eq!(got["dir/inner"].0, Node::File(b"inner\n".to_vec(), 0o644));
    }
}

#[test]
fn coreutils_copy_move_install_and_link_into_directories() {
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "into");
    let local = cluster.dir().join("local");
    std::fs::create_dir(&local).unwrap();
    let want = sample_tree(&local.join("tree"), 11);
    let l = |p: &str| local.join(p).to_str().unwrap().to_string();
    let data = match &want["data.bin"] {
        Node::File(d, _) => d.clone(),
        other => panic!("{other:?}"),
    };
    pl.ok("mkdir", &["-p", &pl.at("/c"), &pl.at("/p/q")]);

    // cp -t DIR, cp FILE DIR/, cp FILE DIR (an existing directory, no slash).
    pl.ok_in_pvfs(
        "cp",
        &["-t", &pl.at("/c"), &l("tree/data.bin"), &l("tree/run.sh")],
    );
    pl.ok_in_pvfs("cp", &[&l("tree/sub/note.txt"), &pl.at("/c/")]);
    pl.ok_in_pvfs("cp", &[&l("tree/empty"), &pl.at("/c")]);
    assert_bytes_eq(&pl.bytes("/c/data.bin"), &data, "cp -t");
    assert_eq!(pl.bytes("/c/note.txt"), b"note\n", "cp into DIR/");
    let names: Vec<String> = pl.tree("/c").into_keys().collect();
    assert_eq!(names, ["data.bin", "empty", "note.txt", "run.sh"]);
    // cp -r of a tree into a directory: symlinks stay symlinks.
    pl.ok_in_pvfs("cp", &["-r", &l("tree"), &pl.at("/c/")]);
    pl.assert_tree("/c/tree", &want, false, false);
    // A relative path from a local working directory into the prefix.
    let rel = format!("{}/c/from-root", pl.prefix.trim_start_matches('/'));
    let mut c = pl.cmd("cp", &[&l("tree/run.sh"), &rel]);
    c.current_dir("/");
    let out = run(c, "cp from /");
    assert!(
        out.status.success(),
        "cp to {rel} from /: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    pl.assert_nothing_local();
    assert_eq!(pl.bytes("/c/from-root"), b"#!/bin/sh\necho hi\n");

    // mv of a local file into a pvfs directory (across file systems: copy, then
    // remove), inside pvfs into a directory (renameat2 with RENAME_NOREPLACE), and of
    // a local tree into a pvfs directory (modes and times kept).
    std::fs::write(local.join("a"), b"moved a\n").unwrap();
    pl.ok_in_pvfs("mv", &[&l("a"), &pl.at("/p/q/")]);
    assert!(!local.join("a").exists(), "mv left the source");
    assert_eq!(pl.bytes("/p/q/a"), b"moved a\n");
    pl.ok_in_pvfs("mv", &[&pl.at("/p/q/a"), &pl.at("/p/")]);
    assert!(!pl.exists("/p/q/a"));
    assert_eq!(pl.bytes("/p/a"), b"moved a\n");
    // An existing target: mv -n keeps it, plain mv replaces it.
    std::fs::write(local.join("a"), b"second a\n").unwrap();
    pl.ok_in_pvfs("cp", &[&l("a"), &pl.at("/p/q/")]);
    pl.ok_in_pvfs("mv", &["-n", &pl.at("/p/q/a"), &pl.at("/p/")]);
    assert_eq!(pl.bytes("/p/a"), b"moved a\n", "mv -n replaced the target");
    pl.ok_in_pvfs("mv", &[&pl.at("/p/q/a"), &pl.at("/p")]);
    assert_eq!(
        pl.bytes("/p/a"),
        b"second a\n",
        "mv did not replace the target"
    );
    assert!(!pl.exists("/p/q/a"));
    let moved = cluster.dir().join("moved");
    sample_tree(&moved, 11);
    pl.ok_in_pvfs("mv", &[moved.to_str().unwrap(), &pl.at("/p/q/")]);
    assert!(!moved.exists(), "mv left the source tree");
    pl.assert_tree("/p/q/moved", &want, true, true);

    // install: modes, into a directory, with leading directories, directories alone.
    pl.ok("mkdir", &[&pl.at("/inst")]);
    pl.ok_in_pvfs(
        "install",
        &["-m", "0644", &l("tree/run.sh"), &pl.at("/inst/plain")],
    );
    pl.ok_in_pvfs(
        "install",
        &["-m", "0600", "-t", &pl.at("/inst"), &l("tree/data.bin")],
    );
    pl.ok_in_pvfs(
        "install",
        &[
            "-D",
            "-m",
            "0755",
            &l("tree/sub/note.txt"),
            &pl.at("/inst/new/deep/tool"),
        ],
    );
    pl.ok_in_pvfs("install", &["-d", "-m", "0750", &pl.at("/inst/d1/d2")]);
    let run_sh = b"#!/bin/sh\necho hi\n".to_vec();
    let mut inst = BTreeMap::new();
    inst.insert("plain".to_string(), Node::File(run_sh, 0o644));
    inst.insert("data.bin".to_string(), Node::File(data.clone(), 0o600));
    inst.insert("new".to_string(), Node::Dir(0o755));
    inst.insert("new/deep".to_string(), Node::Dir(0o755));
    inst.insert(
        "new/deep/tool".to_string(),
        Node::File(b"note\n".to_vec(), 0o755),
    );
    inst.insert("d1".to_string(), Node::Dir(0o755));
    inst.insert("d1/d2".to_string(), Node::Dir(0o750));
    pl.assert_tree("/inst", &inst, true, false);

    // ln -s into a directory (symlinkat on its O_PATH descriptor), to a full path,
    // and -f replacing a link.
    pl.ok("mkdir", &[&pl.at("/ln")]);
    pl.ok_in_pvfs("ln", &["-s", "../c/data.bin", &pl.at("/ln/")]);
    pl.ok_in_pvfs("ln", &["-s", "target-one", &pl.at("/ln/named")]);
    pl.ok_in_pvfs("ln", &["-sf", "target-two", &pl.at("/ln/named")]);
    let mut links = BTreeMap::new();
    links.insert("data.bin".to_string(), Node::Link("../c/data.bin".into()));
    links.insert("named".to_string(), Node::Link("target-two".into()));
    pl.assert_tree("/ln", &links, false, false);
    assert_eq!(
        pl.sha("/ln/data.bin"),
        local_sha(&local.join("tree/data.bin")),
        "reading through the relative link"
    );

    // sed -i writes a temporary file beside the target (mkostemp) and renames it.
    pl.ok_in_pvfs("sed", &["-i", "s/note/NOTE/", &pl.at("/c/note.txt")]);
    assert_eq!(pl.bytes("/c/note.txt"), b"NOTE\n");
    let names: Vec<String> = pl.tree("/c").into_keys().collect();
    assert!(
        !names.iter().any(|n| n.contains("sed")),
        "sed left its temporary file: {names:?}"
    );
}

#[test]
fn cp_a_keeps_modes_times_symlinks_and_hard_links() {
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "cpa");
    let tree = cluster.dir().join("tree");
    let want = sample_tree(&tree, 12);
    // A user extended attribute, which cp -a keeps (where the local file system has
    // them: tmpfs before Linux 6.6 does not).
    let xattr = set_local_xattr(&tree.join("sub/deeper/x.bin"), "user.color", b"blue");
    // cp -a into the root and into a directory by its O_PATH descriptor.
    pl.ok_in_pvfs("cp", &["-a", tree.to_str().unwrap(), &pl.at("/")]);
    pl.assert_tree("/tree", &want, true, true);
    if xattr {
        assert_eq!(
            pl.xattr("/tree/sub/deeper/x.bin", "user.color"),
            b"blue",
            "cp -a: user.color"
        );
    } else {
        eprintln!("the local file system takes no user xattrs: cp -a's are not checked");
    }
    pl.ok("mkdir", &[&pl.at("/into")]);
    pl.ok_in_pvfs("cp", &["-a", tree.to_str().unwrap(), &pl.at("/into/")]);
    pl.assert_tree("/into", &under("tree", TREE_MODE, &want), true, true);
    // cp -a of an existing copy again: every file is rewritten in place.
    pl.ok_in_pvfs("cp", &["-a", tree.to_str().unwrap(), &pl.at("/into/")]);
    pl.assert_tree("/into/tree", &want, true, true);

    // cp -a keeps hard links: two names of one file in pvfs.
    let hl = cluster.dir().join("hl");
    std::fs::create_dir(&hl).unwrap();
    std::fs::write(hl.join("one"), b"one\n").unwrap();
    std::fs::hard_link(hl.join("one"), hl.join("two")).unwrap();
    pl.ok_in_pvfs("cp", &["-a", hl.to_str().unwrap(), &pl.at("/")]);
    assert_eq!(pl.bytes("/hl/one"), b"one\n");
    let (one, two) = (pl.links("/hl/one"), pl.links("/hl/two"));
    assert_eq!(
        (one.0, one.1),
        (two.0, 2),
        "cp -a made two names of one file"
    );
    // And cp -al of a pvfs tree, within pvfs: every file linked, nothing copied.
    pl.ok_in_pvfs("cp", &["-al", &pl.at("/hl"), &pl.at("/hl2")]);
    assert_eq!(pl.links("/hl2/one"), (one.0, 4));
}

#[test]
fn setfacl_getfacl_and_default_acls() {
    if !have("setfacl_getfacl_and_default_acls", "setfacl") {
        return;
    }
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "acl");
    pl.ok("mkdir", &[&pl.at("/acl")]);
    pl.ok("touch", &[&pl.at("/acl/f")]);
    pl.ok("chmod", &["0644", &pl.at("/acl/f")]);
    // A named user and a mask: the group bits become the mask, as on Linux.
    pl.ok_in_pvfs("setfacl", &["-m", "u:4242:rw,m::r", &pl.at("/acl/f")]);
    let acl = pl.ok("getfacl", &["-n", "--omit-header", &pl.at("/acl/f")]);
    for line in [
        "user::rw-",
        "user:4242:rw-\t#effective:r--",
        "mask::r--",
        "other::r--",
    ] {
        assert!(acl.contains(line), "getfacl lacks {line:?}:\n{acl}");
    }
    assert!(!pl.xattr("/acl/f", "system.posix_acl_access").is_empty());
    // chmod moves the mask, not the owning group's entry.
    pl.ok("chmod", &["0664", &pl.at("/acl/f")]);
    let acl = pl.ok("getfacl", &["-n", "--omit-header", &pl.at("/acl/f")]);
    assert!(acl.contains("mask::rw-"), "chmod 0664 left:\n{acl}");
    // A default ACL decides the modes of what is created in the directory (the
    // umask does not apply), and a new directory takes it as its own default.
    pl.ok_in_pvfs("setfacl", &["-d", "-m", "u::rwx,g::-,o::-", &pl.at("/acl")]);
    pl.ok("touch", &[&pl.at("/acl/new")]);
    pl.ok("mkdir", &[&pl.at("/acl/sub")]);
    let mode = |p: &str| pl.ok("stat", &["-c", "%a", &pl.at(p)]).trim().to_string();
    assert_eq!(mode("/acl/new"), "600");
    assert_eq!(mode("/acl/sub"), "700");
    let sub = pl.ok(
        "getfacl",
        &["-n", "-d", "--omit-header", &pl.at("/acl/sub")],
    );
    assert!(
        sub.contains("group::---"),
        "no default ACL on the new directory:\n{sub}"
    );
    // Removing every ACL leaves the bits; getfacl then shows only them.
    pl.ok("setfacl", &["-b", &pl.at("/acl/f")]);
    let acl = pl.ok("getfacl", &["-n", "--omit-header", &pl.at("/acl/f")]);
    assert!(!acl.contains("4242"), "setfacl -b left:\n{acl}");
    pl.assert_nothing_local();
}

#[test]
fn tar_extracts_into_pvfs_relative_to_its_directory_descriptor() {
    let test = "tar_extracts_into_pvfs_relative_to_its_directory_descriptor";
    if !have(test, "tar") {
        return;
    }
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "tar");
    let src = cluster.dir().join("src");
    std::fs::create_dir(&src).unwrap();
    let want = sample_tree(&src.join("tree"), 13);
    let archive = cluster.dir().join("tree.tar");
    // POSIX (pax) format: mtimes to the nanosecond.
    let mut c = Command::new("tar");
    c.arg("--format=posix")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(&src)
        .arg("tree")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    assert!(run(c, "tar -c").status.success());
    let a = archive.to_str().unwrap();

    pl.ok("mkdir", &["-p", &pl.at("/x/y")]);
    pl.ok_in_pvfs("tar", &["-C", &pl.at("/x/y"), "-xf", a]);
    pl.assert_tree("/x/y", &under("tree", TREE_MODE, &want), true, true);
    // Again over the existing files (tar unlinks and recreates each), and with
    // --overwrite (tar opens them in place).
    pl.ok_in_pvfs("tar", &["-C", &pl.at("/x/y"), "-xf", a]);
    pl.assert_tree("/x/y/tree", &want, true, true);
    pl.ok_in_pvfs("tar", &["--overwrite", "-C", &pl.at("/x/y"), "-xf", a]);
    pl.assert_tree("/x/y/tree", &want, true, true);
    // Listing the extracted tree and archiving it again from pvfs.
    let again = cluster.dir().join("again.tar");
    pl.ok_in_pvfs(
        "tar",
        &["-cf", again.to_str().unwrap(), "-C", &pl.at("/x/y"), "tree"],
    );
    let listing = pl.ok("tar", &["-tvf", again.to_str().unwrap()]);
    assert!(listing.contains("tree/sub/deeper/x.bin"), "{listing}");
    assert!(listing.contains("tree/link -> sub/note.txt"), "{listing}");

    // An archive with a hard link: extracted as two names of one file.
    let hl = cluster.dir().join("hl");
    std::fs::create_dir(&hl).unwrap();
    std::fs::write(hl.join("one"), b"one\n").unwrap();
    std::fs::hard_link(hl.join("one"), hl.join("two")).unwrap();
    let hla = cluster.dir().join("hl.tar");
    let mut c = Command::new("tar");
    c.arg("-cf")
        .arg(&hla)
        .arg("-C")
        .arg(cluster.dir())
        .arg("hl")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    assert!(run(c, "tar -c hl").status.success());
    pl.ok_in_pvfs("tar", &["-C", &pl.at("/x"), "-xf", hla.to_str().unwrap()]);
    assert_eq!(pl.bytes("/x/hl/two"), b"one\n");
    let (one, two) = (pl.links("/x/hl/one"), pl.links("/x/hl/two"));
    assert_eq!((one.0, one.1), (two.0, 2), "tar made two names of one file");
}

#[test]
fn rsync_copies_and_updates_a_tree_in_pvfs() {
    let test = "rsync_copies_and_updates_a_tree_in_pvfs";
    if !have(test, "rsync") {
        return;
    }
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "rsync");
    let tree = cluster.dir().join("tree");
    let mut want = sample_tree(&tree, 14);
    let t = tree.to_str().unwrap();

    // Into a directory that rsync makes, then the tree's content into another.
    pl.ok_in_pvfs("rsync", &["-a", t, &pl.at("/r/")]);
    pl.assert_tree("/r", &under("tree", TREE_MODE, &want), true, true);
    pl.ok_in_pvfs("rsync", &["-a", &format!("{t}/"), &pl.at("/flat")]);
    pl.assert_tree("/flat", &want, true, true);

    // An update: rsync writes each changed file to a temporary name beside it and
    // renames it into place; new files appear, modes and times follow the source.
    let data = Rng::new(99).bytes(300_001);
    std::fs::write(tree.join("data.bin"), &data).unwrap();
    std::fs::File::options()
        .write(true)
        .open(tree.join("data.bin"))
        .unwrap()
        .set_modified(SystemTime::UNIX_EPOCH + Duration::new(FILE_MTIME.0 as u64, FILE_MTIME.1))
        .unwrap();
    std::fs::set_permissions(
        tree.join("data.bin"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    want.insert("data.bin".into(), Node::File(data, 0o600));
    std::fs::write(tree.join("sub/deeper/new"), b"new\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(tree.join("sub/deeper/new"))
        .unwrap()
        .set_modified(SystemTime::UNIX_EPOCH + Duration::new(FILE_MTIME.0 as u64, FILE_MTIME.1))
        .unwrap();
    want.insert(
        "sub/deeper/new".into(),
        Node::File(b"new\n".to_vec(), 0o644),
    );
    std::fs::set_permissions(
        tree.join("sub/deeper/new"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    pl.ok_in_pvfs("rsync", &["-a", t, &pl.at("/r/")]);
    pl.assert_tree("/r", &under("tree", TREE_MODE, &want), true, true);
    // A single file into an existing directory.
    pl.ok_in_pvfs(
        "rsync",
        &["-a", &format!("{t}/run.sh"), &pl.at("/flat/sub/")],
    );
    let got = pl.tree("/flat/sub");
    assert_eq!(
        got["run.sh"].0,
        Node::File(b"#!/bin/sh\necho hi\n".to_vec(), 0o755)
    );
}

/// A descriptor of a preloaded program keeps its file after another client (the
/// CLI) removes it or renames another file over it: reads and writes through it
/// work, `pvfs fsck` counts the file as open, and the close frees it.
#[test]
fn a_descriptor_outlives_its_files_removal_by_another_client() {
    let cluster = Cluster::builder().set("lease", "\"2s\"").start();
    let pre = Preload::new(&cluster, "outlives");
    let mut cmd = pre.cmd(driver::lockprog().to_str().unwrap(), &[]);
    cmd.stdout(Stdio::piped());
    let mut p = driver::Proc::start("preloaded", cmd);
    let open_unlinked = || cluster.run_cli(&["fsck", "--json"]).json()["open_unlinked"].clone();
    p.expect(&format!("open 0 {} rw", pre.at("/f")), "ok");
    p.expect("pwrite 0 0 hello", "ok");
    p.expect(&format!("open 1 {} rw", pre.at("/g")), "ok");
    p.expect("pwrite 1 0 old", "ok");
    cluster.run_cli(&["rm", "/f"]).ok();
    let new = cluster.dir().join("new");
    std::fs::write(&new, b"new").unwrap();
    cluster
        .run_cli(&["cp", "-q", new.to_str().unwrap(), "pvfs:/g.new"])
        .ok();
    cluster.run_cli(&["mv", "/g.new", "/g"]).ok();
    p.expect("pread 0 0 5", "data hello");
    p.expect("pwrite 0 5 world", "ok");
    p.expect("pread 0 0 10", "data helloworld");
    p.expect("pread 1 0 3", "data old");
    assert_eq!(open_unlinked(), 2);
    p.expect("close 0", "ok");
    p.expect("close 1", "ok");
    assert_eq!(open_unlinked(), 0);
    let report = cluster.run_cli(&["fsck", "--json"]).json();
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
    p.finish();
}

/// `fcntl` record and OFD locks, `flock` and `lockf` through the library against
/// locks held by another client (a process on libpvfs, as another node would hold
/// them): exclusion, F_GETLK, a waiter woken at the unlock, a wait interrupted by a
/// signal, release at any close (record locks), at the last close (flock) and at
/// exit.
#[test]
fn advisory_locks_against_another_client() {
    let cluster = Cluster::builder().set("lease", "\"2s\"").start();
    let pre = Preload::new(&cluster, "locks");
    let exe = driver::lockprog();
    let preloaded = |name: &str| {
        let mut cmd = pre.cmd(exe.to_str().unwrap(), &[]);
        cmd.stdout(Stdio::piped());
        driver::Proc::start(name, cmd)
    };
    let mut h = driver::capi_locker(&cluster, "holder");
    let mut p = preloaded("preloaded");
    let f = pre.at("/f");
    h.expect("open 0 /f rw", "ok");
    p.expect(&format!("open 0 {f} rw"), "ok");
    h.expect("lk 0 setlk w 0 100", "ok");
    p.expect("lk 0 setlk w 50 1", "err EAGAIN");
    p.expect("lk 0 getlk r 0 0", "lock w 0 100 0");
    p.expect("lk 0 ofd-setlk r 99 5", "err EAGAIN");
    p.expect("flock 0 sh nb", "err EAGAIN");
    p.expect("lockf 0 test 10", "err EACCES");
    p.expect("lockf 0 tlock 10", "err EAGAIN");
    // A waiter woken by the other client's unlock.
    p.blocks("lk 0 setlkw w 0 10");
    p.woken_by(&mut h, "lk 0 setlk u 0 0", "ok");
    h.expect("lk 0 setlk w 5 1", "err EAGAIN");
    // lockf from the offset: unlock to the end of the file.
    p.expect("seek 0 3", "ok");
    p.expect("lockf 0 ulock 0", "ok");
    h.expect("lk 0 setlk w 2 1", "err EAGAIN");
    h.expect("lk 0 setlk w 5 1", "ok");
    // Closing any descriptor of the file ends the process's record locks.
    p.expect("lk 0 setlk w 200 1", "ok");
    p.expect(&format!("open 1 {f} r"), "ok");
    p.expect("close 1", "ok");
    h.expect("lk 0 setlk w 0 0", "ok");
    // A wait interrupted by a signal without SA_RESTART: EINTR.
    p.blocks("lk 0 setlkw r 7 1");
    p.interrupted_by(libc::SIGUSR1);
    h.expect("lk 0 setlk u 0 0", "ok");
    // flock ends with the description's last close.
    p.expect("flock 0 ex", "ok");
    h.expect("flock 0 ex nb", "err EAGAIN");
    p.expect("close 0", "ok");
    h.expect("flock 0 ex nb", "ok");
    h.expect("flock 0 un", "ok");
    // A lock held longer than the lease stays (the library renews its lease from a
    // thread of its own while the program does nothing)...
    p.expect(&format!("open 0 {f} rw"), "ok");
    p.expect("lk 0 setlk w 0 0", "ok");
    std::thread::sleep(Duration::from_secs(3));
    h.expect("lk 0 setlk r 0 1", "err EAGAIN");
    // ...and what a process holds when it exits goes with it (not after the lease).
    p.finish();
    h.expect("lk 0 setlk r 0 1", "ok");
    h.finish();
    pre.assert_nothing_local();
}

#[test]
fn a_program_that_cannot_authenticate_is_told_what_to_do_once() {
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "auth");
    // A node key the servers do not hold (a node left out of a key change).
    let wrong = cluster.config_with_other_key();
    let mut cases = vec![(
        "a key the servers do not hold",
        wrong,
        None,
        "does not hold",
    )];
    // A user who can read no key and has no MUNGE (its socket is nowhere).
    if common::is_root() {
        let user = cluster.user_config_without_munge();
        cases.push(("no key and no MUNGE", user, Some(65534), "set up MUNGE"));
    } else {
        common::skip(
            "a_program_that_cannot_authenticate_is_told_what_to_do_once",
            "the case of a user without the key needs root (it runs as nobody)",
        );
    }
    // One program, two operations on pvfs, each failing: the hint comes once.
    let script = format!("ls -d {0}/ {0}/x ; exit 0", pl.prefix);
    for (what, config, uid, hint) in cases {
        let mut cmd = match uid {
            Some(uid) => {
                let mut c = pl.cmd("setpriv", &[]);
                c.args([
                    format!("--reuid={uid}"),
                    format!("--regid={uid}"),
                    "--clear-groups".into(),
                    "bash".into(),
                    "-c".into(),
                    script.clone(),
                ]);
                c
            }
            None => pl.cmd("bash", &["-c", &script]),
        };
        cmd.env("PVFS_CONFIG", &config);
        let out = run(cmd, what);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("pvfs_preload: cannot authenticate"))
            .collect();
        assert_eq!(said.len(), 1, "{what}: the hint once:\n{stderr}");
        assert!(said[0].contains(hint), "{what}: {}", said[0]);
        // The programs still failed, with the errno of the failure.
        assert_eq!(
            stderr.lines().filter(|l| l.starts_with("ls:")).count(),
            2,
            "{what}:\n{stderr}"
        );
    }
    // Negative control: with the cluster's key the same programs say nothing of it.
    let out = pl.run("bash", &["-c", &script]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("pvfs_preload"), "{stderr}");
}

#[test]
fn a_preloaded_program_serves_its_metrics_when_asked() {
    let cluster = Cluster::start();
    let pl = Preload::new(&cluster, "metrics");
    let local = cluster.dir().join("in.bin");
    let data = write_random(&local, 7, 300_000);
    pl.ok("cp", &[local.to_str().unwrap(), &pl.at("/in")]);
    let addr = common::free_local_addr();
    // Reads one file and writes another through the library, says so, and waits
    // for its standard input to close.
    let script = format!(
        "import sys\n\
         d = open('{0}/in', 'rb').read()\n\
         open('{0}/out', 'wb').write(d[:123456])\n\
         print(len(d), flush=True)\n\
         sys.stdin.read()\n",
        pl.prefix
    );
    let mut cmd = pl.cmd(python(), &["-c", &script]);
    cmd.env("PVFS_METRICS", &addr).stdin(Stdio::piped());
    common::die_with_parent(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), data.len().to_string());
    let text = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(deadline())).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut t = String::new();
        s.read_to_string(&mut t).unwrap();
        t
    };
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} not served:\n{text}"))
            .parse()
            .unwrap()
    };
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert_eq!(value("pvfs_client_written_bytes_total"), 123_456.0);
    assert!(value("pvfs_client_read_bytes_total") >= data.len() as f64);
    assert!(
        text.contains("pvfs_client_requests_total{op=\"Create\"}"),
        "{text}"
    );
}
