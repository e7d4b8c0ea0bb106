//! The C API as C programs use it: the programs in `tests/capi/*.c` are compiled with
//! `cc -Wall -Wextra -Werror` against the committed `crates/capi/include/pvfs.h` and
//! the libpvfs that cargo built for this test run (`pvfs-capi` is a dev-dependency, so
//! it is built first), then run against a real 4-server file system. Each program
//! checks every function it covers, its error cases and the message counts of issue 4,
//! and exits non-zero if any check failed; its output is shown when it fails. One more
//! test installs the library with `scripts/install-capi` and builds a program from the
//! installed copy with pkg-config, linked to the shared and to the static library.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{artifact, profile_dir, run_pvfs, Cluster};

/// Longest time one C program may run.
const PROGRAM_DEADLINE: Duration = Duration::from_secs(120);

/// The C programs, compiled against the shared library.
const PROGRAMS: &[&str] = &[
    "basic", "lite", "group", "xio", "dirplus", "threads", "smoke",
];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// Compiles `src` into `out` against the header in the source tree; `link` are the
/// link arguments.
fn compile(src: &Path, out: &Path, link: &[String]) {
    let include = format!("-I{}", manifest_dir().join("../capi/include").display());
    let mut args = vec![include];
    args.extend(link.iter().cloned());
    compile_with(src, out, &args);
}

/// Compiles `src` into `out` with `flags` (include and link arguments).
fn compile_with(src: &Path, out: &Path, flags: &[String]) {
    let mut cmd = Command::new(cc());
    cmd.args([
        "-std=gnu11",
        "-O1",
        "-g",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Wno-format-truncation",
    ])
    .arg(src)
    .arg("-o")
    .arg(out)
    .args(flags);
    let res = cmd.output().expect("cannot run cc");
    assert!(
        res.status.success(),
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&res.stderr)
    );
}

/// Directory of the compiled programs (compiled once per test run).
fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = profile_dir().join("capi-tests");
        std::fs::create_dir_all(&out).expect("create capi-tests directory");
        let so = artifact("libpvfs.so");
        let libdir = so.parent().expect("library directory").to_path_buf();
        let shared = vec![
            format!("-L{}", libdir.display()),
            "-lpvfs".to_string(),
            format!("-Wl,-rpath,{}", libdir.display()),
            "-lpthread".to_string(),
        ];
        let src = manifest_dir().join("tests/capi");
        for p in PROGRAMS {
            compile(&src.join(format!("{p}.c")), &out.join(p), &shared);
        }
        out
    })
}

/// Runs compiled program `name` with `args` against `cluster`; fails the test with
/// its output if it fails or runs past the deadline. Returns its stdout.
fn run(cluster: &Cluster, name: &str, args: &[&str]) -> String {
    let exe = profile_dir().join("capi-tests").join(name);
    let start = Instant::now();
    let mut child = Command::new(&exe)
        .args(args)
        .env("PVFS_CONFIG", cluster.config_str())
        .env_remove("PVFS_LOG")
        // cargo test puts target/debug (maybe an older uplifted libpvfs.so) on
        // LD_LIBRARY_PATH, which would win over the program's RUNPATH.
        .env_remove("LD_LIBRARY_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let out = child.stdout.take().expect("stdout");
    let err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || std::io::read_to_string(out).unwrap_or_default());
    let t_err = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let status = loop {
        if let Some(st) = child.try_wait().expect("waitpid") {
            break st;
        }
        if start.elapsed() > PROGRAM_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} {args:?} did not finish within {PROGRAM_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    assert!(
        status.success(),
        "{name} {args:?} failed ({status}):\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    println!("{name}: {:.1?}\n{stdout}", start.elapsed());
    stdout
}

#[test]
fn native_api_and_errors() {
    programs();
    let cluster = Cluster::start();
    run(&cluster, "basic", &["/basic"]);
    // PVFS_STATS=1 makes the CLI print its request counts on stderr at exit.
    let out = run_pvfs(
        &["ls", "/basic"],
        &[("PVFS_CONFIG", cluster.config_str()), ("PVFS_STATS", "1")],
        &[],
    );
    out.ok();
    assert!(
        out.stderr.contains("requests:") && out.stderr.contains("ReadDir"),
        "no request counts on stderr: {:?}",
        out.stderr
    );
    let quiet = cluster.run_cli(&["ls", "/basic"]);
    assert!(quiet.ok().contains("list") && quiet.stderr.is_empty());
}

#[test]
fn lazy_attributes() {
    programs();
    let cluster = Cluster::start();
    run(&cluster, "lite", &["/lite"]);
}

#[test]
fn group_open() {
    programs();
    let cluster = Cluster::start();
    run(&cluster, "group", &["/group"]);
    // Across processes that share nothing but the handle's bytes.
    let token = cluster.dir().join("handle.bin");
    let token = token.to_str().expect("utf-8 path");
    run(&cluster, "group", &["make", "/shipped", token]);
    run(&cluster, "group", &["use", token, "/shipped"]);
}

#[test]
fn noncontiguous_io() {
    programs();
    let cluster = Cluster::start();
    run(&cluster, "xio", &["/xio"]);
}

#[test]
fn bulk_metadata_5000_files() {
    programs();
    let cluster = Cluster::start();
    let shards = cluster.config().defaults.dir_shards.to_string();
    assert_eq!(cluster.config().servers.len(), 4);
    run(&cluster, "dirplus", &["/dirplus", &shards, "5000"]);
}

#[test]
fn threads() {
    programs();
    let cluster = Cluster::start();
    run(&cluster, "threads", &["/threads"]);
}

/// Output of `pkg-config ARGS pvfs` for an installed prefix (None without pkg-config).
fn pkg_config(prefix: &Path, args: &[&str]) -> Option<Vec<String>> {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("pvfs")
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "pkg-config {args:?} pvfs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(String::from)
            .collect(),
    )
}

/// `scripts/install-capi` lays out lib/, include/ and a pkg-config file; a program
/// builds from the installed copy alone, against the shared and the static library.
#[test]
fn installed_library_shared_and_static() {
    let so = artifact("libpvfs.so");
    let prefix = tempfile::tempdir().expect("tempdir");
    let script = manifest_dir().join("../../scripts/install-capi");
    let res = Command::new(&script)
        .arg("--from")
        .arg(profile_dir())
        .arg(prefix.path())
        .output()
        .expect("cannot run scripts/install-capi");
    assert!(
        res.status.success(),
        "install-capi failed: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    let p = prefix.path();
    for f in [
        "lib/libpvfs.so",
        "lib/libpvfs.a",
        "include/pvfs.h",
        "lib/pkgconfig/pvfs.pc",
    ] {
        assert!(p.join(f).is_file(), "{f} not installed");
    }
    assert_eq!(
        std::fs::metadata(p.join("lib/libpvfs.so")).unwrap().len(),
        std::fs::metadata(&so).unwrap().len()
    );
    let include = format!("-I{}", p.join("include").display());
    let lib = p.join("lib");
    let (cflags, libs, private) = match (
        pkg_config(p, &["--cflags"]),
        pkg_config(p, &["--libs"]),
        pkg_config(p, &["--static", "--libs-only-l"]),
    ) {
        (Some(c), Some(l), Some(s)) => (c, l, s),
        _ => {
            println!("pkg-config not found: using the installed paths directly");
            let private = ["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"];
            (
                vec![include],
                vec![format!("-L{}", lib.display()), "-lpvfs".to_string()],
                private.map(String::from).to_vec(),
            )
        }
    };
    let src = manifest_dir().join("tests/capi/smoke.c");
    let out = profile_dir().join("capi-tests");
    std::fs::create_dir_all(&out).expect("capi-tests directory");
    let mut shared: Vec<String> = cflags.clone();
    shared.extend(libs);
    shared.push(format!("-Wl,-rpath,{}", lib.display()));
    compile_with(&src, &out.join("smoke-shared"), &shared);
    let mut stat: Vec<String> = cflags;
    stat.push(lib.join("libpvfs.a").display().to_string());
    stat.extend(private.into_iter().filter(|l| l != "-lpvfs"));
    compile_with(&src, &out.join("smoke-static"), &stat);
    let ldd = Command::new("ldd")
        .arg(out.join("smoke-static"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(
        !ldd.contains("libpvfs"),
        "static build links libpvfs.so: {ldd}"
    );

    let cluster = Cluster::start();
    run(&cluster, "smoke-shared", &["/shared"]);
    run(&cluster, "smoke-static", &["/static"]);
}
