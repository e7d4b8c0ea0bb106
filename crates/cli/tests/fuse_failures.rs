//! The FUSE mount is never stuck: with a server hung
//! (SIGSTOP) or killed (SIGKILL), `ls`, `stat`, `df` and reads on the mount fail with
//! EIO or ETIMEDOUT within the configured request timeout (2 s here, times
//! `PVFS_TEST_SLOWDOWN`) instead of
//! hanging; the mount process survives; once the server is back the mount works
//! again; and `pvfs umount` works throughout.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Cluster, Rng};
use mount::{is_mounted, run_for, Mount};

/// The configured request timeout: 2 s, times the slowdown factor.
fn timeout() -> Duration {
    common::scaled(Duration::from_secs(2))
}
/// Bound on a command that meets a failed server: a few requests in a row, each
/// bounded by the timeout, plus process start-up.
fn bound() -> Duration {
    common::scaled(Duration::from_secs(8))
}
/// Longer than this is a hang (the test fails instead of waiting); `run_for` scales
/// it, [`hang`] is the scaled value for waits of this file's own.
const HANG: Duration = Duration::from_secs(60);
fn hang() -> Duration {
    common::scaled(HANG)
}

/// A cluster whose request and connect timeouts are [`timeout`].
fn cluster_with_timeouts() -> Cluster {
    let t = format!("{}ms", timeout().as_millis());
    Cluster::builder()
        .request_timeout(&t)
        .connect_timeout(&t)
        .start()
}

/// Whether python3 can run the test's program; otherwise the test is skipped.
fn have_python(test: &str) -> bool {
    let ok = common::have_command("python3");
    if !ok {
        common::skip(
            test,
            "python3 is not installed (scripts/install-deps installs it)",
        );
    }
    ok
}

/// Runs `prog args` on the mount; returns (success, stderr, elapsed).
fn run(prog: &str, args: &[&str]) -> (bool, String, Duration) {
    let start = Instant::now();
    let out = run_for(Command::new(prog).args(args), HANG);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        start.elapsed(),
    )
}

/// Asserts `prog args` fails promptly with EIO or ETIMEDOUT.
#[track_caller]
fn fails_promptly(prog: &str, args: &[&str], what: &str) {
    let (ok, err, took) = run(prog, args);
    assert!(!ok, "{what}: `{prog} {args:?}` should fail");
    let lower = err.to_lowercase();
    assert!(
        lower.contains("input/output error") || lower.contains("timed out"),
        "{what}: `{prog}` failed with an unexpected error: {err}"
    );
    assert!(
        took < bound(),
        "{what}: `{prog}` took {took:?} (bound {:?})",
        bound()
    );
}

/// Asserts `prog args` succeeds promptly.
#[track_caller]
fn works(prog: &str, args: &[&str], what: &str) {
    let (ok, err, took) = run(prog, args);
    assert!(ok, "{what}: `{prog} {args:?}` failed: {err}");
    assert!(took < bound(), "{what}: `{prog}` took {took:?}");
}

/// Runs python `script` with the mount's path and s2's pid (the script stops s2),
/// resumes s2, and returns the script's output and how long it ran.
fn python_stopping_s2(cluster: &Cluster, m: &Mount, script: &str) -> (String, Duration) {
    let pid = cluster.pid("s2").to_string();
    let dir = m.path().to_str().unwrap().to_string();
    // How long the program may wait for what it waits for (third argument).
    let wait = bound().as_secs_f64().to_string();
    let start = Instant::now();
    let out = run_for(
        Command::new("python3").args(["-c", script, &dir, &pid, &wait]),
        HANG,
    );
    let took = start.elapsed();
    cluster.kill("s2", libc::SIGCONT);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the program failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (text, took)
}

/// Mount options that cache nothing (neither the kernel nor the mount): every command
/// asks the servers.
const NO_CACHE: &[&str] = &[
    "--attr-timeout",
    "0s",
    "--entry-timeout",
    "0s",
    "--cache-timeout",
    "0s",
];

#[test]
fn a_hung_or_killed_server_gives_prompt_errors_never_a_stuck_mount() {
    let cluster = cluster_with_timeouts();
    assert_eq!(cluster.config().timeouts.request, timeout());
    // No cache (neither the kernel's nor the mount's): every command asks the servers,
    // so it meets the failure at once, without waiting for a cache to expire.
    let mut m = Mount::start(&cluster, NO_CACHE);
    let mut rng = Rng::new(7);
    // Files striped over every server, in a directory sharded over every server.
    std::fs::create_dir(m.join("d")).unwrap();
    for i in 0..8 {
        // A create that comes before the metadata servers have filled their pools of
        // pre-created datafiles (they start filling them when they start) refills
        // synchronously, which can take longer than 2 s in a debug build: retry.
        let data = rng.bytes(1 << 20);
        common::poll(
            "a first write",
            common::scaled(Duration::from_secs(60)),
            || std::fs::write(m.join(&format!("d/f{i}")), &data).ok(),
        );
    }
    let dir = m.join("d");
    let file = m.join("d/f3");
    let (dir, file, mp) = (
        dir.to_str().unwrap().to_string(),
        file.to_str().unwrap().to_string(),
        m.path().to_str().unwrap().to_string(),
    );
    works("ls", &["-l", &dir], "before");

    // A hung server: requests to it time out.
    cluster.kill("s1", libc::SIGSTOP);
    fails_promptly("ls", &["-l", &dir], "s1 hung");
    fails_promptly("stat", &[&file], "s1 hung");
    fails_promptly("cat", &[&file], "s1 hung");
    // df answers with what the live servers know, or fails; never hangs.
    let (_, _, took) = run("df", &[&mp]);
    assert!(took < bound(), "df took {took:?} with s1 hung");
    assert!(is_mounted(m.path()));
    cluster.kill("s1", libc::SIGCONT);
    common::poll(
        "the mount to work again",
        common::scaled(Duration::from_secs(30)),
        || run("ls", &["-l", &dir]).0.then_some(()),
    );
    works("cat", &[&file], "s1 back");

    // A killed server: connections are refused at once.
    cluster.kill("s2", libc::SIGKILL);
    fails_promptly("ls", &["-l", &dir], "s2 killed");
    fails_promptly("stat", &[&file], "s2 killed");
    fails_promptly("cat", &[&file], "s2 killed");
    let (_, _, took) = run("df", &[&mp]);
    assert!(took < bound(), "df took {took:?} with s2 dead");
    // The mount process survived everything.
    assert!(is_mounted(m.path()));
    cluster.restart("s2");
    common::poll(
        "the mount to work after the restart",
        common::scaled(Duration::from_secs(30)),
        || run("cat", &[&file]).0.then_some(()),
    );

    // And with a server hung, pvfs umount still works.
    cluster.kill("s0", libc::SIGSTOP);
    let (ok, _, _) = run("ls", &["-l", &dir]);
    assert!(!ok);
    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());
    cluster.kill("s0", libc::SIGCONT);
}

#[test]
fn an_emergency_stop_fails_the_mount_at_once_and_umount_works() {
    let cluster = Cluster::start();
    let mut m = Mount::start(&cluster, NO_CACHE);
    let mut rng = Rng::new(0x0e5);
    let durable = rng.bytes(8 << 20);
    std::fs::create_dir(m.join("keep")).unwrap();
    {
        use std::io::Write;
        let mut f = std::fs::File::create(m.join("keep/durable")).unwrap();
        f.write_all(&durable).unwrap();
        f.sync_all().unwrap();
    }
    // A writer streams into the mount while the emergency stop happens.
    let busy = m.join("busy");
    let mut writer = Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "count=100000", "status=none"])
        .arg(format!("of={}", busy.display()))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::poll(
        "the writer to get going",
        common::scaled(Duration::from_secs(30)),
        || (std::fs::metadata(&busy).map(|md| md.len()).unwrap_or(0) > (8 << 20)).then_some(()),
    );

    let t0 = Instant::now();
    cluster.run_cli(&["stop", "--now"]).ok();
    // The writer fails at once (not after a request timeout).
    let st = common::poll("dd to fail after the emergency stop", hang(), || {
        writer.try_wait().unwrap()
    });
    let took = t0.elapsed();
    assert!(!st.success(), "dd succeeded after the emergency stop");
    assert!(
        took < common::scaled(Duration::from_secs(3)),
        "dd failed only after {took:?}"
    );
    let mut err = String::new();
    std::io::Read::read_to_string(&mut writer.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.to_lowercase().contains("input/output error"),
        "dd: {err}"
    );
    // The mount answers at once with EIO and stays responsive.
    let keep = m.join("keep");
    let keep = keep.to_str().unwrap();
    fails_promptly("ls", &["-l", keep], "servers stopped");
    fails_promptly("stat", &[&format!("{keep}/durable")], "servers stopped");
    let (_, _, took) = run("df", &[m.path().to_str().unwrap()]);
    assert!(took < bound(), "df took {took:?} with every server stopped");
    assert!(is_mounted(m.path()));
    for (name, st) in cluster.reap_all() {
        assert!(
            st.success(),
            "{name} exited with {st} after an emergency stop"
        );
    }
    // pvfs umount works; after a restart a new mount serves the fsynced file.
    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());
    cluster.start_all();
    let m = Mount::start(&cluster, &[]);
    let got = std::fs::read(m.join("keep/durable")).unwrap();
    common::assert_bytes_eq(&got, &durable, "fsynced file after an emergency stop");
}

#[test]
fn write_behind_reports_writes_lost_in_the_background_at_fsync_and_close() {
    if !have_python("write_behind_reports_writes_lost_in_the_background_at_fsync_and_close") {
        return;
    }
    let cluster = cluster_with_timeouts();
    let m = Mount::start(&cluster, &["--write-behind"]);
    // A program writes two files, striped over every server; after the first MiB of
    // each, a data server hangs (SIGSTOP). Writes may still be answered (they are
    // sent in the background), but fsync and close must report the loss, promptly.
    let script = r#"
import json, os, signal, sys, time
d, pid = sys.argv[1], int(sys.argv[2])
fds = [os.open(f"{d}/w{i}", os.O_CREAT | os.O_WRONLY, 0o644) for i in range(2)]
for fd in fds:
    os.write(fd, b"x" * (1 << 20))
    os.fsync(fd)
os.kill(pid, signal.SIGSTOP)
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return e.strerror
chunk = b"y" * (1 << 20)
t = time.time()
w0 = [attempt(lambda: os.write(fds[0], chunk)) for _ in range(4)]
fsync = attempt(lambda: os.fsync(fds[0]))
w1 = [attempt(lambda: os.write(fds[1], chunk)) for _ in range(4)]
close = attempt(lambda: os.close(fds[1]))
print(json.dumps({"fsync": fsync, "close": close, "writes": w0 + w1,
                  "took": round(time.time() - t, 1)}))
"#;
    let (text, took) = python_stopping_s2(&cluster, &m, script);
    let out: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("the program's output is not its JSON line ({e}): {text}"));
    // Each of fsync and close must be there and report an error (its strerror).
    for call in ["fsync", "close"] {
        let result = out[call]
            .as_str()
            .unwrap_or_else(|| panic!("no result for {call} in the output: {text}"));
        assert!(
            result != "ok" && !result.is_empty(),
            "{call} must report the lost writes: {text}"
        );
    }
    assert_eq!(
        out["writes"].as_array().map(Vec::len),
        Some(8),
        "the eight writes' results: {text}"
    );
    // Each file's failure costs at most a few request timeouts.
    assert!(took < 4 * bound(), "took {took:?}: {text}");
    assert!(is_mounted(m.path()));
}

#[test]
fn writers_stuck_on_a_hung_server_fail_promptly_and_the_mount_still_answers() {
    if !have_python("writers_stuck_on_a_hung_server_fail_promptly_and_the_mount_still_answers") {
        return;
    }
    let cluster = cluster_with_timeouts();
    let m = Mount::start(&cluster, &[]);
    // Six writers, more than the mount's FUSE threads (4), each with a file open
    // and striped over every server; then a data server hangs (SIGSTOP). Each write
    // fails within a few timeouts, and `statvfs` meanwhile is answered (or fails)
    // as promptly: waiting writes never take every FUSE thread.
    let script = r#"
import os, platform, signal, sys, threading, time
d, pid, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
PWRITE = {"x86_64": 18, "aarch64": 68}[platform.machine()]
fds = [os.open(f"{d}/w{i}", os.O_CREAT | os.O_WRONLY, 0o644) for i in range(6)]
for fd in fds:
    os.write(fd, b"x" * (1 << 20))
os.kill(pid, signal.SIGSTOP)
results = {}
tids = {}
def write(i):
    tids[i] = threading.get_native_id()
    t = time.time()
    try:
        os.pwrite(fds[i], b"y" * (1 << 20), 1 << 20)
        r = "ok"
    except OSError as e:
        r = e.strerror.replace(" ", "_")
    results[i] = (r, time.time() - t)
threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
def waiting(i):
    # Inside pwrite (blocked on the mount), or already done.
    if i in results:
        return True
    if i not in tids:
        return False
    try:
        with open(f"/proc/self/task/{tids[i]}/syscall") as f:
            return f.read().split()[0] == str(PWRITE)
    except FileNotFoundError:
        return True
for t in threads:
    t.start()
deadline = time.time() + wait
while not all(waiting(i) for i in range(6)):
    if time.time() > deadline:
        sys.exit(f"the writers did not all reach pwrite within {wait} s")
    time.sleep(0.005)
t = time.time()
try:
    os.statvfs(d)
except OSError:
    pass
print("statvfs", round(time.time() - t, 2))
for t in threads:
    t.join()
for i in range(6):
    print("write", results[i][0], round(results[i][1], 2))
"#;
    let (text, _) = python_stopping_s2(&cluster, &m, script);
    let secs = |s: &str| Duration::from_secs_f64(s.parse::<f64>().unwrap());
    let mut writes = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["statvfs", took] => assert!(secs(took) < bound(), "statvfs waited: {text}"),
            ["write", result, took] => {
                writes += 1;
                assert!(
                    *result == "Input/output_error" || *result == "Connection_timed_out",
                    "a write to a hung server: {text}"
                );
                assert!(secs(took) < bound(), "a write waited: {text}");
            }
            _ => panic!("unexpected output: {text}"),
        }
    }
    assert_eq!(writes, 6, "{text}");
    assert!(is_mounted(m.path()));
}
