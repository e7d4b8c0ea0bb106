//! The C API as C programs use it: the programs in `tests/capi/*.c` are compiled with
//! `cc -Wall -Wextra -Werror` against the committed `crates/capi/include/pvfs.h` and
//! the libpvfs that `scripts/test` built before this run, then run against a real
//! 4-server file system. Each program checks every function it covers, its error cases
//! and the message counts that docs/capi.md promises (the POSIX I/O extensions paper's
//! "1 + 2m messages" and "no server contacted" claims, Vilayannur et al., 2008), and
//! exits non-zero if any check failed; its output is shown when it fails. One more test
//! installs the library with `scripts/install-capi` and runs the first-program block of
//! docs/capi.md as written: built from the installed copy with pkg-config, against the
//! shared and against the static library.

mod common;
#[path = "locks/driver.rs"]
mod driver;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{artifact, have_command, profile_dir, run_pvfs, scaled, skip, Cluster};

/// Longest time one C program (or the documented build-and-run block) may run on an
/// idle machine; scaled with `PVFS_TEST_SLOWDOWN`.
const PROGRAM_DEADLINE: Duration = Duration::from_secs(120);

/// The C programs, compiled against the shared library.
const PROGRAMS: &[&str] = &[
    "basic", "lite", "group", "xio", "dirplus", "threads", "alloc",
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

/// Link arguments for the shared library, with its directory as the RUNPATH.
fn shared_link() -> Vec<String> {
    let so = artifact("libpvfs.so");
    let libdir = so.parent().expect("library directory").to_path_buf();
    vec![
        format!("-L{}", libdir.display()),
        "-lpvfs".to_string(),
        format!("-Wl,-rpath,{}", libdir.display()),
        "-lpthread".to_string(),
    ]
}

/// Directory of the compiled programs (compiled once per test run).
fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = profile_dir().join("capi-tests");
        std::fs::create_dir_all(&out).expect("create capi-tests directory");
        let shared = shared_link();
        let src = manifest_dir().join("tests/capi");
        for p in PROGRAMS {
            compile(&src.join(format!("{p}.c")), &out.join(p), &shared);
        }
        out
    })
}

/// Waits for `child` with a deadline (killing it past the deadline and failing the
/// test with `what`); returns its status, stdout and stderr.
fn finish(
    mut child: std::process::Child,
    what: &str,
) -> (std::process::ExitStatus, String, String) {
    let deadline = scaled(PROGRAM_DEADLINE);
    let start = Instant::now();
    let out = child.stdout.take().expect("stdout");
    let err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || std::io::read_to_string(out).unwrap_or_default());
    let t_err = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let status = loop {
        if let Some(st) = child.try_wait().expect("waitpid") {
            break st;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    (status, stdout, stderr)
}

/// Runs compiled program `name` with `args` against `cluster`; fails the test with
/// its output if it fails or runs past the deadline. Returns its stdout.
fn run(cluster: &Cluster, name: &str, args: &[&str]) -> String {
    let exe = profile_dir().join("capi-tests").join(name);
    let start = Instant::now();
    let child = Command::new(&exe)
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
    let (status, stdout, stderr) = finish(child, &format!("{name} {args:?}"));
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
fn fallocate_and_block_counts() {
    programs();
    let cluster = Cluster::start();
    run(&cluster, "alloc", &["/alloc"]);
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

/// Names of the sections of the ELF file at `path` (64-bit little-endian, as built
/// here), read from its section header table.
/// `pvfs_fcntl_lock` and `pvfs_flock` between two processes (two clients of the file
/// system, as on two nodes): exclusion, F_GETLK, a waiter woken at the unlock, a wait
/// interrupted by a signal, EDEADLK for POSIX waits and none for OFD waits (as
/// Linux), the descriptor's mode, release at close and at `pvfs_finalize`.
#[test]
fn advisory_locks_between_two_processes() {
    let cluster = Cluster::builder().set("lease", "\"2s\"").start();
    let mut a = driver::capi_locker(&cluster, "A");
    let mut b = driver::capi_locker(&cluster, "B");
    for p in [&mut a, &mut b] {
        p.expect("open 0 /f rw", "ok");
        p.expect("open 1 /g rw", "ok");
    }
    a.expect("lk 0 setlk w 0 100", "ok");
    b.expect("lk 0 setlk w 50 1", "err EAGAIN");
    b.expect("lk 0 getlk w 0 0", "lock w 0 100 0");
    b.expect("lk 0 ofd-getlk r 99 1", "lock w 0 100 0");
    b.expect("flock 0 ex nb", "err EAGAIN");
    b.expect("lk 0 setlk r 100 10", "ok");
    // A read-only descriptor cannot take a write lock (EBADF, as the kernel).
    b.expect("open 2 /f r", "ok");
    b.expect("lk 2 setlk w 500 1", "err EBADF");
    b.expect("lk 2 setlk r 500 1", "ok");
    // A waiter is woken by the unlock.
    b.blocks("lk 0 setlkw w 0 10");
    b.woken_by(&mut a, "lk 0 setlk u 0 0", "ok");
    // A signal without SA_RESTART ends a wait with EINTR.
    a.blocks("lk 0 setlkw r 5 1");
    a.interrupted_by(libc::SIGUSR1);
    // A POSIX cycle is EDEADLK; OFD waits are not checked (as Linux).
    a.expect("lk 1 setlk w 0 0", "ok");
    a.blocks("lk 0 setlkw w 0 10");
    b.expect("lk 1 setlkw w 0 0", "err EDEADLK");
    a.woken_by(&mut b, "lk 0 setlk u 0 0", "ok");
    a.expect("lk 0 setlk u 0 0", "ok");
    a.expect("lk 1 setlk u 0 0", "ok");
    a.expect("lk 0 ofd-setlk w 0 0", "ok");
    b.expect("lk 1 ofd-setlk w 0 0", "ok");
    a.blocks("lk 1 ofd-setlkw w 0 0");
    b.blocks("lk 0 ofd-setlkw w 0 0");
    a.interrupted_by(libc::SIGUSR1);
    b.woken_by(&mut a, "lk 0 ofd-setlk u 0 0", "ok");
    // An OFD lock and a record lock of one process conflict (as Linux).
    b.expect("lk 2 setlk r 700 1", "err EAGAIN");
    b.expect("lk 0 ofd-setlk u 0 0", "ok");
    // pvfs_close of any descriptor ends the process's record locks on the file (here
    // one taken through another descriptor), and the descriptor's OFD locks.
    b.expect("lk 2 setlk r 700 1", "ok");
    b.expect("lk 1 ofd-setlk w 0 0", "ok");
    b.expect("close 0", "ok");
    a.expect("lk 0 setlk w 0 0", "ok");
    a.expect("flock 1 ex nb", "err EAGAIN");
    b.expect("close 1", "ok");
    a.expect("flock 1 ex nb", "ok");
    // A lock held longer than the lease stays (the library renews the lease).
    std::thread::sleep(Duration::from_secs(3));
    b.expect("lk 2 setlk r 0 1", "err EAGAIN");
    // pvfs_finalize (at exit) releases the rest.
    a.finish();
    b.expect("open 0 /f rw", "ok");
    b.expect("lk 0 setlk w 0 0", "ok");
    b.expect("flock 1 ex nb", "err EBADF");
    b.expect("open 1 /g rw", "ok");
    b.expect("flock 1 ex nb", "ok");
    b.finish();
}

/// A descriptor of the C library keeps its file after another client (the CLI)
/// removes it or renames another file over it, reads and writes through it work,
/// `pvfs fsck` counts the file as open, and the close frees it.
#[test]
fn a_descriptor_outlives_its_files_removal_by_another_client() {
    let cluster = Cluster::builder().set("lease", "\"2s\"").start();
    let mut a = driver::capi_locker(&cluster, "A");
    let open_unlinked = || cluster.run_cli(&["fsck", "--json"]).json()["open_unlinked"].clone();
    a.expect("open 0 /f rw", "ok");
    a.expect("pwrite 0 0 hello", "ok");
    a.expect("open 1 /g rw", "ok");
    a.expect("pwrite 1 0 old", "ok");
    cluster.run_cli(&["rm", "/f"]).ok();
    std::fs::write(cluster.dir().join("new"), b"new").unwrap();
    let new = cluster.dir().join("new");
    cluster
        .run_cli(&["cp", "-q", new.to_str().unwrap(), "pvfs:/g.new"])
        .ok();
    cluster.run_cli(&["mv", "/g.new", "/g"]).ok();
    a.expect("pread 0 0 5", "data hello");
    a.expect("pwrite 0 5 world", "ok");
    a.expect("pread 0 0 10", "data helloworld");
    a.expect("pread 1 0 3", "data old");
    assert_eq!(open_unlinked(), 2);
    a.expect("close 0", "ok");
    a.expect("close 1", "ok");
    assert_eq!(open_unlinked(), 0);
    let report = cluster.run_cli(&["fsck", "--json"]).json();
    assert_eq!(report["problems"].as_array().unwrap().len(), 0, "{report}");
    a.finish();
}

fn elf_sections(path: &Path) -> Vec<String> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert!(
        b.len() > 64 && b[..4] == *b"\x7fELF" && b[4] == 2 && b[5] == 1,
        "{} is not a 64-bit little-endian ELF file",
        path.display()
    );
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes")) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes")) as usize;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .map(|i| {
            let name = strtab + u32_at(header(i));
            let end = b[name..]
                .iter()
                .position(|&c| c == 0)
                .map_or(b.len(), |n| name + n);
            String::from_utf8_lossy(&b[name..end]).into_owned()
        })
        .collect()
}

/// The shell block of docs/capi.md that follows the `<!-- capi.rs: first program -->`
/// marker, as a user would paste it.
fn documented_first_program() -> String {
    let doc = manifest_dir().join("../../docs/capi.md");
    let text = std::fs::read_to_string(&doc).expect("read docs/capi.md");
    let after = text
        .split_once("<!-- capi.rs: first program -->")
        .expect("docs/capi.md has no first-program marker")
        .1;
    let body = after
        .split_once("```sh\n")
        .expect("no sh block after the marker")
        .1;
    body.split_once("\n```")
        .expect("unterminated sh block")
        .0
        .to_string()
}

/// `scripts/install-capi` lays out lib/, include/ and a pkg-config file, with the
/// libraries stripped of their debug information; the first-program block of
/// docs/capi.md, run as written with `PKG_CONFIG_PATH` naming the install, builds
/// from the installed copy alone against the shared library (found at run time
/// through pvfs.pc's rpath, with no LD_LIBRARY_PATH) and against the static one.
#[test]
fn installed_library_as_documented() {
    const TEST: &str = "installed_library_as_documented";
    for tool in ["pkg-config", "ldd"] {
        if !have_command(tool) {
            skip(
                TEST,
                &format!("{tool} is not installed (Debian packages pkgconf, libc-bin)"),
            );
            return;
        }
    }
    let so = artifact("libpvfs.so");
    let a = artifact("libpvfs.a");
    let prefix = tempfile::tempdir().expect("tempdir");
    let script = manifest_dir().join("../../scripts/install-capi");
    let child = Command::new(&script)
        .arg("--from")
        .arg(profile_dir())
        .arg(prefix.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run scripts/install-capi");
    let (status, _, stderr) = finish(child, "scripts/install-capi");
    assert!(status.success(), "install-capi failed: {stderr}");
    let p = prefix.path();
    for f in [
        "lib/libpvfs.so",
        "lib/libpvfs.a",
        "include/pvfs.h",
        "lib/pkgconfig/pvfs.pc",
    ] {
        assert!(p.join(f).is_file(), "{f} not installed");
    }

    // Stripped: no DWARF in the installed shared library, which is well smaller than
    // the build's (whose debug information is line tables only); the archive shrinks
    // too. The symbol table stays.
    let installed = p.join("lib/libpvfs.so");
    let sections = elf_sections(&installed);
    assert!(
        sections.iter().all(|s| !s.starts_with(".debug")),
        "installed libpvfs.so keeps debug sections: {sections:?}"
    );
    assert!(sections.iter().any(|s| s == ".symtab"), "{sections:?}");
    assert!(
        elf_sections(&so).iter().any(|s| s == ".debug_info"),
        "the build's {} has no .debug_info to strip",
        so.display()
    );
    let size = |f: &Path| std::fs::metadata(f).expect("stat").len();
    assert!(
        size(&installed) * 3 < size(&so) * 2,
        "installed libpvfs.so is {} bytes, the build's {}",
        size(&installed),
        size(&so)
    );
    assert!(
        size(&p.join("lib/libpvfs.a")) < size(&a),
        "installed libpvfs.a is {} bytes, the build's {}",
        size(&p.join("lib/libpvfs.a")),
        size(&a)
    );
    let pc = std::fs::read_to_string(p.join("lib/pkgconfig/pvfs.pc")).expect("read pvfs.pc");
    assert!(!pc.contains("example.invalid") && !pc.contains('@'), "{pc}");

    // The documented block, in a fresh directory, as a user runs it.
    let cluster = Cluster::start();
    let work = tempfile::tempdir().expect("tempdir");
    let child = Command::new("sh")
        .arg("-ec")
        .arg(documented_first_program())
        .current_dir(work.path())
        .env("PKG_CONFIG_PATH", p.join("lib/pkgconfig"))
        .env("PVFS_CONFIG", cluster.config_str())
        .env_remove("PVFS_LOG")
        .env_remove("LD_LIBRARY_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run sh");
    let (status, stdout, stderr) = finish(child, "the first-program block of docs/capi.md");
    assert!(
        status.success(),
        "the first-program block of docs/capi.md failed ({status}):\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(
        stdout.matches("read back: hello from C\n").count(),
        2,
        "stdout: {stdout}"
    );

    let ldd = |exe: &str| {
        let out = Command::new("ldd")
            .arg(work.path().join(exe))
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .expect("run ldd");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shared = ldd("hello");
    let want = format!("libpvfs.so => {}", installed.display());
    assert!(
        shared.contains(&want),
        "hello does not load {want}: {shared}"
    );
    let stat = ldd("hello-static");
    assert!(
        !stat.contains("libpvfs"),
        "hello-static links libpvfs.so: {stat}"
    );
}
