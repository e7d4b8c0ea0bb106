//! Shared harness of the acceptance tests: a real pvfs file system of server processes
//! on loopback ports chosen at run time, in a temporary directory.
//!
//! [`Cluster`] writes a configuration with `pvfs genconfig`, starts every server as its
//! own child process (`pvfs server --config F --name sN`, so one server can be stopped,
//! killed, frozen or restarted alone) and waits until each answers a ping.
//!
//! - Ports: each cluster takes a block of ports below the kernel's ephemeral range
//!   (`net.ipv4.ip_local_port_range`), so no outgoing connection can take a server's
//!   port while it restarts; the block is reserved with a lock file held for the
//!   cluster's life, so concurrent tests (and test binaries) never share one. A start
//!   that still meets `EADDRINUSE` (a program outside the suite) retries on new ports.
//! - Processes: dropping a cluster kills every server it started, also those started
//!   with `pvfs start` (found through their pid files). Children get
//!   `PR_SET_PDEATHSIG(SIGKILL)`, and a [`Watchdog`] kills every daemon whose command
//!   line names the cluster's directory (`pvfs start` servers, background mounts) and
//!   detaches its mounts once the test process is gone, even after a SIGKILL.
//! - Failures: a test that fails keeps the cluster's directory (configuration, server
//!   logs `sN.log`, storage) and prints where it is; a passing test removes it.
//! - Time: everything that waits polls with a deadline scaled by [`slowdown`]; nothing
//!   sleeps to synchronize.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

use pvfs_proto::req;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pvfs_client::Client;
use pvfs_config::Config;

pub mod churn;
pub mod hosts;

/// The `pvfs` binary under test.
pub fn pvfs_bin() -> &'static str {
    env!("CARGO_BIN_EXE_pvfs")
}

/// Longest time any CLI command may take before the test fails (never hang), before
/// scaling by [`slowdown`].
pub const CLI_DEADLINE: Duration = Duration::from_secs(120);
/// Longest time a server may take to answer after it was started, before scaling by
/// [`slowdown`].
pub const START_DEADLINE: Duration = Duration::from_secs(60);

// ----- small utilities ---------------------------------------------------------------

/// Makes the child started by `cmd` die with the test process (SIGKILL on parent
/// death), so a failing test leaves no server or mount process behind.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            Ok(())
        });
    }
}
/// `127.0.0.1:PORT` with a port free now (from the ephemeral range, above every
/// block [`PortBlock`] reserves): for a listener a test asks a program to open.
pub fn free_local_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port();
    format!("127.0.0.1:{port}")
}

/// Polls `f` until it returns `Some`, or panics with `what` after `deadline`.
pub fn poll<T>(what: &str, deadline: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(v) = f() {
            return v;
        }
        if start.elapsed() > deadline {
            panic!("timed out after {deadline:?} waiting for {what}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// A small, fast, seeded PRNG (splitmix64): tests are reproducible from the seed.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (hi exclusive, hi > lo).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(hi > lo);
        lo + self.next_u64() % (hi - lo)
    }

    /// Log-uniform in `lo..=hi`: small and large sizes equally likely per decade.
    pub fn log_range(&mut self, lo: u64, hi: u64) -> u64 {
        let (l, h) = ((lo as f64).ln(), ((hi + 1) as f64).ln());
        let x = l + (self.next_u64() as f64 / u64::MAX as f64) * (h - l);
        (x.exp() as u64).clamp(lo, hi)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() as f64 / u64::MAX as f64) < p
    }

    /// Fills `buf` with pseudo-random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next_u64().to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&last[..n]);
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.fill(&mut v);
        v
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

/// Asserts two byte strings are equal, reporting the first difference (never dumping
/// megabytes into the test output).
#[track_caller]
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    match first {
        Some(i) => {
            let end = (i + 16).min(got.len()).min(want.len());
            panic!(
                "{what}: bytes differ at offset {i} (lengths {} and {}): got {:02x?}, want {:02x?}",
                got.len(),
                want.len(),
                &got[i..end],
                &want[i..end]
            )
        }
        None => panic!(
            "{what}: lengths differ: got {} bytes, want {}",
            got.len(),
            want.len()
        ),
    }
}

/// Whether `errno` is one of the errors a dead or hung server may yield (EHOSTDOWN,
/// EIO or ETIMEDOUT: docs/reliability.md).
pub fn is_server_down_errno(e: pvfs_client::Errno) -> bool {
    use pvfs_client::Errno;
    [Errno::EHOSTDOWN, Errno::EIO, Errno::ETIMEDOUT].contains(&e)
}

// ----- the test environment ---------------------------------------------------------

/// Whether the suite runs under CI (`CI=true`): there, a missing tool or privilege
/// fails the test instead of skipping it.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Skips the rest of a test for `reason` (a missing tool or privilege). Under CI this
/// fails the test; elsewhere it prints the reason and records it in the file named by
/// `PVFS_TEST_SKIPS` (set by `scripts/test`, which repeats every skip in its summary).
/// The caller returns right after.
#[track_caller]
pub fn skip(test: &str, reason: &str) {
    if under_ci() {
        panic!("{test}: {reason} (CI=true: a missing tool or privilege fails the run)");
    }
    eprintln!("SKIPPED {test}: {reason}");
    if let Some(path) = std::env::var_os("PVFS_TEST_SKIPS") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{test}: {reason}");
        }
    }
}

/// Whether command `cmd` can be run (found on `PATH`).
pub fn have_command(cmd: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|d| {
            std::fs::metadata(d.join(cmd))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Whether this test process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The value of test knob `name` (e.g. `PVFS_FUZZ_CASES`), or `default` when unset.
/// A value that does not parse, or one outside `valid`, fails the test: a typo must
/// not silently make a test check less.
#[track_caller]
pub fn knob<T>(name: &str, default: T, valid: impl Fn(&T) -> bool) -> T
where
    T: std::str::FromStr + std::fmt::Debug,
{
    let Ok(text) = std::env::var(name) else {
        return default;
    };
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16)
            .ok()
            .and_then(|v| v.to_string().parse::<T>().ok()),
        None => t.parse::<T>().ok(),
    };
    match parsed {
        Some(v) if valid(&v) => v,
        Some(v) => panic!("{name}={text}: {v:?} is out of range for this knob"),
        None => panic!("{name}={text} does not parse (decimal, or hex with 0x)"),
    }
}

/// How much slower than a developer's idle 2-core machine this one may be (knob
/// `PVFS_TEST_SLOWDOWN`, default 1; `scripts/test` passes it through). Every timing
/// assertion and every wait for an event scales with it.
pub fn slowdown() -> u32 {
    static S: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *S.get_or_init(|| knob("PVFS_TEST_SLOWDOWN", 1u32, |&v| (1..=100).contains(&v)))
}

/// `d` scaled by [`slowdown`]: the bound a timing assertion or a wait uses.
pub fn scaled(d: Duration) -> Duration {
    d * slowdown()
}

/// The cargo profile directory the tests were built into (`target/debug`): this test
/// executable is `target/debug/deps/NAME-HASH`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable outside target/PROFILE/deps")
        .to_path_buf()
}

/// Builds `tests/mpi/NAME.c` with MPICH's `mpicc` into `dir` (no deadline:
/// compiling is not what a test is about).
pub fn mpicc(dir: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/mpi/{name}.c"));
    let exe = dir.join(name);
    let out = Command::new("mpicc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cannot run mpicc");
    assert!(
        out.status.success(),
        "mpicc failed (run scripts/install-deps for mpich and libmpich-dev): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// A library or program the workspace builds (`libpvfs.so`, `libpvfs_preload.so`,
/// `examples/memfs`), built by `scripts/test` before `cargo test` and never by a test.
/// The newest of `PROFILE/NAME` and `PROFILE/deps/NAME` (a library is left in `deps/`
/// when cargo built it only as a dependency). Fails the test with what to run when it
/// was not built.
#[track_caller]
pub fn artifact(name: &str) -> PathBuf {
    let dir = profile_dir();
    [dir.join(name), dir.join("deps").join(name)]
        .into_iter()
        .filter_map(|p| {
            let t = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((t, p))
        })
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "{name} is not built under {}: run ./scripts/test, which builds every \
                 library and program the tests use before it runs them",
                dir.display()
            )
        })
}

// ----- CLI -------------------------------------------------------------------------

/// What a finished CLI command printed.
#[derive(Debug)]
pub struct CliOutput {
    pub args: Vec<String>,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl CliOutput {
    /// Asserts success and returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert!(
            self.status.success(),
            "`pvfs {}` failed ({}):\nstdout:\n{}\nstderr:\n{}",
            self.args.join(" "),
            self.status,
            self.stdout,
            self.stderr
        );
        &self.stdout
    }

    /// Asserts success and parses stdout as JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        let out = self.ok();
        serde_json::from_str(out).unwrap_or_else(|e| {
            panic!(
                "`pvfs {}` printed invalid JSON ({e}):\n{out}",
                self.args.join(" ")
            )
        })
    }

    /// Parses stdout as JSON whatever the exit status.
    #[track_caller]
    pub fn json_any(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "`pvfs {}` printed invalid JSON ({e}):\n{}\nstderr: {}",
                self.args.join(" "),
                self.stdout,
                self.stderr
            )
        })
    }

    /// Asserts the command failed the documented way: non-zero exit status and exactly
    /// one line on stderr, starting with `pvfs: `; returns that line.
    #[track_caller]
    pub fn err_line(&self) -> &str {
        assert!(
            !self.status.success(),
            "`pvfs {}` should have failed:\nstdout:\n{}\nstderr:\n{}",
            self.args.join(" "),
            self.stdout,
            self.stderr
        );
        assert!(
            self.status.code().is_some(),
            "`pvfs {}` died of a signal: {}\nstderr:\n{}",
            self.args.join(" "),
            self.status,
            self.stderr
        );
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert!(
            lines.len() == 1 && lines[0].starts_with("pvfs: "),
            "`pvfs {}` should print one line starting `pvfs: ` on stderr, printed:\n{}",
            self.args.join(" "),
            self.stderr
        );
        lines[0]
    }

    /// Asserts a documented failure whose message contains one of `needles`
    /// (case-insensitive).
    #[track_caller]
    pub fn err_containing_any(&self, needles: &[&str]) -> &str {
        let line = self.err_line();
        let lower = line.to_lowercase();
        assert!(
            needles.iter().any(|n| lower.contains(&n.to_lowercase())),
            "`pvfs {}`: error {line:?} should mention one of {needles:?}",
            self.args.join(" ")
        );
        line
    }

    /// Asserts a documented failure whose message contains `needle`.
    #[track_caller]
    pub fn err_containing(&self, needle: &str) -> &str {
        let line = self.err_line();
        assert!(
            line.contains(needle),
            "`pvfs {}`: error {line:?} should mention {needle:?}",
            self.args.join(" ")
        );
        line
    }
}

/// Runs `pvfs ARGS` with extra environment variables; fails the test if it runs past
/// [`CLI_DEADLINE`].
pub fn run_pvfs(args: &[&str], env: &[(&str, &str)], env_remove: &[&str]) -> CliOutput {
    run_cmd(pvfs_bin(), args, env, env_remove)
}

/// Waits for `child` (stdout and stderr piped) at most `deadline`, killing it and
/// failing the test with `what` past it; returns what it printed.
pub fn wait_output(mut child: Child, deadline: Duration, what: &str) -> std::process::Output {
    let start = Instant::now();
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
        if let Some(st) = child.try_wait().expect("waitpid failed") {
            break st;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    std::process::Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// Runs `program` with `args` (see [`run_pvfs`]; the deadline is the same).
pub fn run_cmd(
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
    env_remove: &[&str],
) -> CliOutput {
    let start = Instant::now();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for k in env_remove {
        cmd.env_remove(k);
    }
    cmd.env_remove("PVFS_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("cannot run the pvfs binary");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("waitpid failed") {
            break st;
        }
        if start.elapsed() > scaled(CLI_DEADLINE) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`{program} {}` did not finish within {:?}",
                args.join(" "),
                scaled(CLI_DEADLINE)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = String::from_utf8_lossy(&t_out.join().unwrap()).into_owned();
    let stderr = String::from_utf8_lossy(&t_err.join().unwrap()).into_owned();
    CliOutput {
        args: args.iter().map(|s| s.to_string()).collect(),
        status,
        stdout,
        stderr,
        elapsed: start.elapsed(),
    }
}

// ----- clients ---------------------------------------------------------------------

/// A client with a tokio runtime of its own.
pub struct TestClient {
    pub rt: tokio::runtime::Runtime,
    pub client: Client,
}

impl TestClient {
    pub fn new(config: Config) -> TestClient {
        let rt = runtime();
        let client = {
            let _g = rt.enter();
            Client::new(config)
        };
        TestClient { rt, client }
    }

    /// Runs a future on this client's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Runs `f(client)` on the runtime, failing the test if it takes longer than
    /// `limit` scaled by [`slowdown`] (a client call must never hang).
    #[track_caller]
    pub fn run<T>(&self, limit: Duration, f: impl AsyncFnOnce(Client) -> T) -> T {
        let c = self.client.clone();
        let limit = scaled(limit);
        match self
            .rt
            .block_on(async move { tokio::time::timeout(limit, f(c)).await })
        {
            Ok(v) => v,
            Err(_) => panic!("client call did not return within {limit:?}"),
        }
    }
}

// ----- raw connections ---------------------------------------------------------------

/// A multiplexed connection to server `server` of `config` that has done the
/// handshake with the file system's key: for raw requests the client library has no
/// call for (damage, fuzzing). Every frame on it carries the session's MAC.
#[allow(dead_code)]
pub async fn raw_mux(config: &Config, server: usize) -> std::sync::Arc<pvfs_transport::MuxConn> {
    raw_mux_via(config, server, server)
        .await
        .expect("raw connection with the handshake")
}

/// A multiplexed connection to `server`'s name (its metadata group) at the address of
/// server `at`, past the handshake; `None` if `at` does not answer to that name now.
#[allow(dead_code)]
pub async fn raw_mux_via(
    config: &Config,
    server: usize,
    at: usize,
) -> Option<std::sync::Arc<pvfs_transport::MuxConn>> {
    let ring = pvfs_auth::KeyRing::load(&config.security.key).expect("the cluster's key file");
    let target = pvfs_transport::Target {
        addr: &config.servers[at].address,
        server: &config.servers[server].name,
        fsid: config.fsid,
        via: &pvfs_transport::AutoTransport,
    };
    let tls = config
        .security
        .tls
        .then(|| pvfs_transport::tls::TlsClient::load(&config.security.tls_ca).unwrap());
    let (mux, _) = pvfs_transport::connect_mux(
        &target,
        &pvfs_auth::ClientProof::Key(std::sync::Arc::new(ring)),
        tls.as_ref(),
        "pvfs-test",
        scaled(Duration::from_secs(5)),
        scaled(Duration::from_secs(10)),
        pvfs_transport::BufPool::new(1 << 20, 4),
    )
    .await
    .ok()?;
    Some(mux)
}

/// A blocking TCP connection to server `server` of `config` that has done the
/// handshake with `proof`, and the session's frame MACs: for tests that write frames
/// byte by byte after the handshake (tag them with `macs.send`). A refused handshake
/// is the error.
pub fn raw_session(
    config: &Config,
    server: usize,
    proof: &pvfs_auth::ClientProof,
) -> Result<(std::net::TcpStream, pvfs_auth::SessionMacs), pvfs_auth::HandshakeError> {
    raw_session_from(config, server, proof, None)
}

/// [`raw_session`] from local address `from` (any 127.x.y.z works on loopback: a
/// test can play several client hosts).
pub fn raw_session_from(
    config: &Config,
    server: usize,
    proof: &pvfs_auth::ClientProof,
    from: Option<std::net::IpAddr>,
) -> Result<(std::net::TcpStream, pvfs_auth::SessionMacs), pvfs_auth::HandshakeError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sc = &config.servers[server];
    let (stream, session) = rt.block_on(async {
        let mut stream = connect_from(&sc.address, from).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (mut r, mut w) = stream.split();
        let run =
            pvfs_auth::handshake::client(&mut r, &mut w, proof, config.fsid, &sc.name, "pvfs-test");
        let session = tokio::time::timeout(scaled(Duration::from_secs(10)), run)
            .await
            .expect("the handshake did not end in time")?;
        Ok::<_, pvfs_auth::HandshakeError>((stream, session))
    })?;
    let stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    Ok((stream, session.macs))
}

/// Compiles the C program `tests/SRC` of this crate into `exe` with `cc` and `flags`
/// (no deadline: compiling is not what a test is about); fails the test with the
/// compiler's messages.
pub fn compile_c(src: &str, exe: &Path, flags: &[&str]) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(src);
    // Flags after the source, so libraries named there link what it needs.
    let out = Command::new("cc")
        .arg("-o")
        .arg(exe)
        .arg(&src)
        .args(flags)
        .output()
        .expect("cannot run cc");
    assert!(
        out.status.success(),
        "cc {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ----- private mounts ---------------------------------------------------------------

/// A tmpfs [`private_tmpfs`] mounted: detached when dropped (drop it before the
/// cluster, so removing the cluster's directory does not stop at a mount point).
pub struct PrivateTmpfs(PathBuf);

impl Drop for PrivateTmpfs {
    fn drop(&mut self) {
        if let Ok(c) = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()) {
            // SAFETY: a valid path string; detaches only in this thread's namespace.
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

/// Mounts a tmpfs of `size` on `dir`, visible only to this thread and the processes
/// it starts from now on: the thread moves to a private mount namespace first, so the
/// host's mount table never changes, and the tmpfs goes away with the namespace when
/// the test ends, however it ends (even killed). `Err` says why it cannot be done here.
pub fn private_tmpfs(dir: &Path, size: &str) -> Result<PrivateTmpfs, String> {
    let c = |s: &str| std::ffi::CString::new(s).unwrap();
    let os_err = || std::io::Error::last_os_error();
    // SAFETY: plain system calls on valid C strings; unshare affects this thread only.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(format!("unshare(CLONE_NEWNS): {}", os_err()));
        }
        let root = c("/");
        let flags = libc::MS_REC | libc::MS_PRIVATE;
        if libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        ) != 0
        {
            return Err(format!(
                "making / private in the new namespace: {}",
                os_err()
            ));
        }
        let target =
            std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()))
                .unwrap();
        let (fstype, opts) = (c("tmpfs"), c(&format!("size={size},mode=700")));
        if libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            opts.as_ptr().cast(),
        ) != 0
        {
            return Err(format!("mount -t tmpfs on {}: {}", dir.display(), os_err()));
        }
    }
    Ok(PrivateTmpfs(dir.to_path_buf()))
}

/// Puts the storage of server `name` of a configured, not yet started `cluster` on a
/// private tmpfs of `size` (see [`private_tmpfs`]; drop the guard before the
/// cluster). None when that cannot be done here (not root, no mount namespace): test
/// `test` is then skipped with the reason.
pub fn small_storage(
    cluster: &Cluster,
    name: &str,
    size: &str,
    test: &str,
) -> Option<PrivateTmpfs> {
    if !is_root() {
        skip(test, "mounting the small tmpfs that fills up needs root");
        return None;
    }
    let dir = cluster.storage(name);
    std::fs::create_dir_all(&dir).unwrap();
    match private_tmpfs(&dir, size) {
        Ok(m) => Some(m),
        Err(e) => {
            skip(test, &format!("cannot mount a private tmpfs: {e}"));
            None
        }
    }
}

// ----- MUNGE ----------------------------------------------------------------------------

/// A private MUNGE daemon for one test: its own key, socket, pid file, seed and log in
/// a temporary directory, run in the foreground as a child of the test (killed on
/// drop, and with the test process). The host's MUNGE, if any, is not touched.
pub struct Munged {
    dir: Option<tempfile::TempDir>,
    /// The daemon's socket (`[security] munge_socket`).
    pub socket: PathBuf,
    child: Child,
}

impl Munged {
    /// Starts one, or returns `None` after [`skip`]ping `test` when MUNGE is not
    /// installed (`./scripts/install-deps` installs it) or the test is not root.
    pub fn start(test: &str) -> Option<Munged> {
        for tool in ["munged", "mungekey"] {
            if !have_command(tool) && !Path::new("/usr/sbin").join(tool).exists() {
                skip(
                    test,
                    &format!("{tool} is not installed (Debian package munge)"),
                );
                return None;
            }
        }
        let dir = tempfile::Builder::new()
            .prefix("pvfs-munge-")
            .tempdir()
            .unwrap();
        // munged checks that its directories are not writable by others and that every
        // user can reach the socket.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        let key = dir.path().join("munge.key");
        let sbin = |t: &str| {
            if have_command(t) {
                PathBuf::from(t)
            } else {
                Path::new("/usr/sbin").join(t)
            }
        };
        let out = Command::new(sbin("mungekey"))
            .arg("--create")
            .arg(format!("--keyfile={}", key.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "mungekey: {out:?}");
        let socket = run.join("munge.socket");
        let mut cmd = Command::new(sbin("munged"));
        cmd.arg("--foreground")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!(
                "--pid-file={}",
                dir.path().join("munged.pid").display()
            ))
            .arg(format!(
                "--seed-file={}",
                dir.path().join("munged.seed").display()
            ))
            .arg(format!(
                "--log-file={}",
                dir.path().join("munged.log").display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        die_with_parent(&mut cmd);
        let child = cmd.spawn().unwrap();
        let mut m = Munged {
            dir: Some(dir),
            socket,
            child,
        };
        let sock = m.socket.clone();
        poll("munged's socket", scaled(Duration::from_secs(20)), || {
            sock.exists().then_some(())
        });
        if let Ok(Some(status)) = m.child.try_wait() {
            panic!("munged exited at once ({status}): {}", m.log());
        }
        Some(m)
    }

    /// The daemon's log.
    pub fn log(&self) -> String {
        let dir = self
            .dir
            .as_ref()
            .map(|d| d.path().to_path_buf())
            .unwrap_or_default();
        std::fs::read_to_string(dir.join("munged.log")).unwrap_or_default()
    }
}

impl Drop for Munged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            if let Some(d) = self.dir.take() {
                keep_if_failed(d, "munged");
            }
        }
    }
}

/// Runs the `pvfs` binary as uid/gid `uid` (no supplementary groups) through
/// `setpriv`, with `config`, and returns what it did.
pub fn run_pvfs_as(uid: u32, config: &Path, args: &[&str]) -> CliOutput {
    let id = uid.to_string();
    let reuid = format!("--reuid={id}");
    let regid = format!("--regid={id}");
    let mut full = vec![reuid.as_str(), regid.as_str(), "--clear-groups", pvfs_bin()];
    full.extend(args);
    let c = config.to_str().unwrap();
    full.extend(["-c", c]);
    run_cmd("setpriv", &full, &[], &["PVFS_CONFIG"])
}

/// Sends one request on a raw session ([`raw_session`]) with a tagged frame and returns
/// the answer, whose tag must verify.
pub fn raw_ask(
    s: &mut std::net::TcpStream,
    macs: &mut pvfs_auth::SessionMacs,
    id: u64,
    creds: pvfs_proto::Creds,
    request: pvfs_proto::Request,
) -> pvfs_proto::Response {
    use std::io::{Read, Write};
    let body = pvfs_proto::encode(&pvfs_proto::RequestBody {
        creds,
        request,
        retry: None,
        origin: 0,
    });
    let h = pvfs_proto::FrameHeader {
        kind: pvfs_proto::FrameKind::Request,
        flags: pvfs_proto::frame::FLAG_END,
        request_id: id,
        body_len: body.len() as u32,
        tag_len: pvfs_auth::TAG_LEN as u16,
        data_len: 0,
    }
    .encode();
    let tag = macs.send.seal(&h, &body);
    let mut frame = h.to_vec();
    frame.extend_from_slice(&body);
    frame.extend_from_slice(&tag);
    s.write_all(&frame).unwrap();
    s.set_read_timeout(Some(scaled(Duration::from_secs(10))))
        .unwrap();
    // Frames of earlier requests (the rest of a read's stream) may come first: each is
    // authenticated in turn, and skipped.
    loop {
        let mut raw = [0u8; 32];
        s.read_exact(&mut raw).unwrap();
        let rh = pvfs_proto::FrameHeader::decode(&raw).unwrap();
        let mut body = vec![0u8; rh.body_len as usize];
        s.read_exact(&mut body).unwrap();
        let mut tag = vec![0u8; rh.tag_len as usize];
        s.read_exact(&mut tag).unwrap();
        let mut data = vec![0u8; rh.data_len as usize];
        s.read_exact(&mut data).unwrap();
        macs.recv
            .open(&raw, &body, &tag)
            .expect("the server's answer carries a valid tag");
        if rh.request_id == id && rh.kind == pvfs_proto::FrameKind::Response {
            return pvfs_proto::decode(&body).unwrap();
        }
    }
}

/// Sends a tagged Ping on a raw session and checks its tagged Pong.
pub fn ping_raw(s: &mut std::net::TcpStream, macs: &mut pvfs_auth::SessionMacs) {
    let r = raw_ask(
        s,
        macs,
        7,
        pvfs_proto::Creds::current(),
        pvfs_proto::Request::Ping(req::Ping {}),
    );
    assert!(matches!(r, pvfs_proto::Response::Pong { .. }), "{r:?}");
}

/// A TCP connection to `addr`, from local address `from` when given.
pub async fn connect_from(
    addr: &str,
    from: Option<std::net::IpAddr>,
) -> std::io::Result<tokio::net::TcpStream> {
    let target: std::net::SocketAddr = addr.parse().map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{addr}: {e}"))
    })?;
    let socket = if target.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    if let Some(ip) = from {
        socket.bind(std::net::SocketAddr::new(ip, 0))?;
    }
    socket.connect(target).await
}

/// The file system's key as a client proof (what key-holding nodes use).
pub fn key_proof(config: &Config) -> pvfs_auth::ClientProof {
    pvfs_auth::ClientProof::Key(std::sync::Arc::new(
        pvfs_auth::KeyRing::load(&config.security.key).expect("the cluster's key file"),
    ))
}

/// A multi-threaded tokio runtime for test clients.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("cannot build a tokio runtime")
}

// ----- the cluster ------------------------------------------------------------------

/// How to build a [`Cluster`].
#[derive(Clone, Debug)]
pub struct Builder {
    servers: usize,
    meta_servers: Option<usize>,
    request_timeout: Option<String>,
    connect_timeout: Option<String>,
    extra: Vec<String>,
    /// (key, TOML value) lines replaced in the generated configuration.
    settings: Vec<(String, String)>,
    /// `[security] munge_socket`.
    munge_socket: Option<PathBuf>,
    /// Environment variables of the server processes (of one server when named).
    server_env: Vec<(Option<String>, String, String)>,
    /// Each server on a host of its own ([`hosts::Hosts`]).
    on_hosts: bool,
    /// Each server's failure domain, in order ([`Builder::domains`]).
    domains: Vec<String>,
}

impl Builder {
    /// Puts each server on a host of its own, a network namespace linked to the
    /// clients' host by a bridge, so a test can cut it off ([`Cluster::hosts`]). The
    /// calling thread moves into the clients' host (see [`hosts::Hosts::enter_clients`]);
    /// check [`hosts::unavailable`] first.
    #[allow(dead_code)]
    pub fn on_hosts(mut self) -> Self {
        self.on_hosts = true;
        self
    }

    /// Sets environment variable `key` of every server process (a test seam such as
    /// `PVFS_FAULTS`), without touching the test process's own environment.
    pub fn server_env(mut self, key: &str, value: &str) -> Self {
        self.server_env
            .push((None, key.to_string(), value.to_string()));
        self
    }

    /// Sets environment variable `key` of server `name`'s process only.
    #[allow(dead_code)]
    pub fn server_env_of(mut self, name: &str, key: &str, value: &str) -> Self {
        self.server_env
            .push((Some(name.to_string()), key.to_string(), value.to_string()));
        self
    }

    pub fn servers(mut self, n: usize) -> Self {
        self.servers = n;
        self
    }

    /// Only the first `m` servers hold metadata; the others are data-only.
    pub fn meta_servers(mut self, m: usize) -> Self {
        self.meta_servers = Some(m);
        self
    }

    /// Sets `[timeouts] request` (e.g. "2s").
    pub fn request_timeout(mut self, t: &str) -> Self {
        self.request_timeout = Some(t.into());
        self
    }

    /// Sets `[timeouts] connect`.
    pub fn connect_timeout(mut self, t: &str) -> Self {
        self.connect_timeout = Some(t.into());
        self
    }

    /// Extra `pvfs genconfig` arguments.
    /// Replaces the value of `key` (a key the generated file has, e.g. "buffers") with
    /// the TOML value `value`.
    pub fn set(mut self, key: &str, value: &str) -> Self {
        self.settings.push((key.to_string(), value.to_string()));
        self
    }

    /// Servers check MUNGE credentials with this daemon (clients that cannot read the
    /// key use it too).
    pub fn munge(mut self, m: &Munged) -> Self {
        self.munge_socket = Some(m.socket.clone());
        self
    }

    /// Copies of everything (`pvfs genconfig --replicas n`).
    pub fn replicas(self, n: u32) -> Self {
        self.genconfig_arg("--replicas")
            .genconfig_arg(&n.to_string())
    }

    /// Adds an argument to `pvfs genconfig`.
    pub fn genconfig_arg(mut self, a: &str) -> Self {
        self.extra.push(a.into());
        self
    }

    /// Names each server's failure domain (`domain =`), in configuration order.
    #[allow(dead_code)]
    pub fn domains(mut self, domains: &[&str]) -> Self {
        self.domains = domains.iter().map(|d| d.to_string()).collect();
        self
    }

    /// Writes the configuration without starting any server.
    pub fn configure(self) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("pvfs-test-")
            .tempdir()
            .expect("cannot create a temporary directory");
        let dir_path = std::fs::canonicalize(dir.path()).unwrap();
        let watchdog = Watchdog::new(std::slice::from_ref(&dir_path));
        let config_path = dir_path.join("fs.toml");
        let n = self.servers.to_string();
        let ports = PortBlock::reserve(self.servers);
        let base = ports.base.to_string();
        let mut args = vec![
            "genconfig",
            "--servers",
            &n,
            "--dir",
            dir_path.to_str().unwrap(),
            "--port",
            &base,
            // Free ports (above the blocks tests reserve), not 100 above the block.
            "--metrics-port",
            "0",
            "-o",
            config_path.to_str().unwrap(),
        ];
        let m;
        if let Some(meta) = self.meta_servers {
            m = meta.to_string();
            args.extend(["--meta-servers", &m]);
        }
        for a in &self.extra {
            args.push(a);
        }
        let munge_socket;
        if let Some(sock) = &self.munge_socket {
            munge_socket = sock.to_str().unwrap().to_string();
            args.extend(["--munge-socket", &munge_socket]);
        }
        run_pvfs(&args, &[], &["PVFS_CONFIG"]).ok();
        let hosts = self.on_hosts.then(|| {
            let h = hosts::Hosts::new(self.servers);
            h.enter_clients();
            // Server i listens on its own host's address.
            let text = std::fs::read_to_string(&config_path).unwrap();
            let mut i = 0;
            let mut out = String::new();
            for line in text.lines() {
                match line.strip_prefix("address = \"127.0.0.1:") {
                    Some(rest) => {
                        out.push_str(&format!(
                            "address = \"{}:{rest}\n",
                            hosts::Hosts::server_ip(i)
                        ));
                        i += 1;
                    }
                    None => {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
            }
            assert_eq!(i, self.servers, "not every server address was moved");
            std::fs::write(&config_path, out).unwrap();
            h
        });
        let mut settings = self.settings.clone();
        if let Some(r) = &self.request_timeout {
            settings.push(("request".into(), format!("\"{r}\"")));
        }
        if let Some(c) = &self.connect_timeout {
            settings.push(("connect".into(), format!("\"{c}\"")));
        }
        if !settings.is_empty() {
            let text = std::fs::read_to_string(&config_path).unwrap();
            let mut out = String::new();
            for line in text.lines() {
                let t = line.trim_start();
                let set = settings.iter().find(|(k, _)| {
                    t.strip_prefix(k.as_str())
                        .is_some_and(|rest| rest.trim_start().starts_with('='))
                });
                match set {
                    Some((k, v)) => out.push_str(&format!("{k} = {v}\n")),
                    None => {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
            }
            std::fs::write(&config_path, out).unwrap();
        }
        if !self.domains.is_empty() {
            let mut config = Config::load(&config_path).unwrap();
            assert_eq!(self.domains.len(), config.servers.len());
            for (s, d) in config.servers.iter_mut().zip(&self.domains) {
                s.domain = Some(d.clone());
            }
            config.write(&config_path, true).unwrap();
        }
        let config = Config::load(&config_path).expect("generated configuration does not load");
        if let Some(r) = &self.request_timeout {
            assert_eq!(
                config.timeouts.request,
                pvfs_config::parse_duration(r).unwrap(),
                "request timeout not applied"
            );
        }
        let names = config.servers.iter().map(|s| s.name.clone()).collect();
        Cluster {
            dir: Some(dir),
            dir_path,
            config_path,
            config,
            names,
            children: Mutex::new(BTreeMap::new()),
            ports,
            watchdog: Some(watchdog),
            user_dir: Mutex::new(None),
            server_env: self.server_env,
            hosts,
        }
    }

    /// Writes the configuration and starts every server as a child process.
    pub fn start(self) -> Cluster {
        // The ports are reserved against other tests, not against programs outside
        // the suite: a start that meets EADDRINUSE is retried with a new
        // configuration (new ports); any other failure is the test's.
        for _ in 0..4 {
            let c = self.clone().configure();
            match c.try_start_all() {
                Ok(()) => return c,
                Err(e) if e.contains("Address already in use") => continue,
                Err(e) => panic!("{e}"),
            }
        }
        let c = self.configure();
        c.start_all();
        c
    }
}

/// A running pvfs file system of server processes (see the module documentation).
pub struct Cluster {
    /// Removed on drop unless the test failed (then kept, and its path printed).
    dir: Option<tempfile::TempDir>,
    dir_path: PathBuf,
    config_path: PathBuf,
    config: Config,
    names: Vec<String>,
    children: Mutex<BTreeMap<String, Child>>,
    /// The servers' ports, reserved for the cluster's life.
    ports: PortBlock,
    watchdog: Option<Watchdog>,
    /// A directory every user may read, for [`Cluster::user_config`].
    user_dir: Mutex<Option<tempfile::TempDir>>,
    /// Environment variables of the server processes ([`Builder::server_env`]).
    server_env: Vec<(Option<String>, String, String)>,
    /// The servers' hosts, when each has its own ([`Builder::on_hosts`]); dropped
    /// after the servers.
    hosts: Option<hosts::Hosts>,
}

impl Cluster {
    pub fn builder() -> Builder {
        Builder {
            servers: 4,
            meta_servers: None,
            request_timeout: None,
            connect_timeout: None,
            extra: Vec::new(),
            settings: Vec::new(),
            munge_socket: None,
            server_env: Vec::new(),
            on_hosts: false,
            domains: Vec::new(),
        }
    }

    /// Four meta+data servers with the generated defaults, all running.
    pub fn start() -> Cluster {
        Cluster::builder().start()
    }

    pub fn dir(&self) -> &Path {
        &self.dir_path
    }

    /// The servers' hosts ([`Builder::on_hosts`]).
    #[allow(dead_code)]
    pub fn hosts(&self) -> &hosts::Hosts {
        self.hosts
            .as_ref()
            .expect("the cluster was not built on_hosts")
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// A copy of the configuration that every user may read, in a directory every user
    /// may enter, naming the cluster's key files (which stay readable by root only):
    /// what a site gives its users. A user's process cannot read the key, so it proves
    /// its user with MUNGE.
    pub fn user_config(&self) -> PathBuf {
        let mut dir = self.user_dir.lock().unwrap();
        if dir.is_none() {
            let d = tempfile::Builder::new()
                .prefix("pvfs-user-")
                .tempdir()
                .unwrap();
            std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            *dir = Some(d);
        }
        let path = dir.as_ref().unwrap().path().join("fs.toml");
        if !path.exists() {
            let mut text = std::fs::read_to_string(&self.config_path).unwrap();
            let sec = &self.config.security;
            for (name, abs) in [("key", &sec.key), ("server_key", &sec.server_key)] {
                let rel = abs.file_name().unwrap().to_str().unwrap();
                text = text.replace(
                    &format!("{name} = \"{rel}\""),
                    &format!("{name} = \"{}\"", abs.display()),
                );
            }
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let c = Config::load(&path).unwrap();
            assert_eq!(c.security.key, sec.key, "the user's copy names the key");
        }
        path
    }

    /// A copy of the configuration whose node key is another one, which the servers
    /// do not hold (a node left out of a key change): its clients cannot authenticate.
    pub fn config_with_other_key(&self) -> PathBuf {
        let key = self.dir().join("other.key");
        run_pvfs(&["keygen", key.to_str().unwrap()], &[], &["PVFS_CONFIG"]).ok();
        let text = std::fs::read_to_string(&self.config_path).unwrap();
        let line = text.lines().find(|l| l.starts_with("key = ")).unwrap();
        let wrong = self.dir().join("wrong.toml");
        std::fs::write(
            &wrong,
            text.replace(line, &format!("key = \"{}\"", key.display())),
        )
        .unwrap();
        wrong
    }

    /// [`Cluster::user_config`], with a MUNGE socket where no munged listens: a user
    /// who can read no key and has no MUNGE.
    pub fn user_config_without_munge(&self) -> PathBuf {
        let user = self.user_config();
        let text = std::fs::read_to_string(&user).unwrap();
        let socket = self.dir().join("no-munged");
        let text = text.replace(
            "[security]\n",
            &format!("[security]\nmunge_socket = \"{}\"\n", socket.display()),
        );
        std::fs::write(&user, text).unwrap();
        user
    }

    pub fn config_str(&self) -> &str {
        self.config_path.to_str().unwrap()
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn names(&self) -> Vec<String> {
        self.names.clone()
    }

    /// Storage directory of server `name`.
    pub fn storage(&self, name: &str) -> PathBuf {
        self.config
            .servers
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no server {name}"))
            .storage
            .clone()
    }

    /// Empties server `name`'s storage directory (a new disk); the server must not
    /// be running.
    pub fn empty_storage(&self, name: &str) {
        assert!(
            !self.children.lock().unwrap().contains_key(name),
            "empty_storage({name}): it is still running"
        );
        let dir = self.storage(name);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
    }

    /// Where server `server` (index into the configuration) keeps datafile `handle`.
    pub fn datafile_path(&self, server: usize, handle: u64) -> PathBuf {
        self.config.servers[server]
            .storage
            .join("data")
            .join(format!("{:02x}", handle & 0xff))
            .join(format!("{handle:016x}"))
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir_path.join(format!("{name}.log"))
    }

    /// The whole log of server `name` (every run of it in this cluster).
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }

    /// How many requests of `what` the servers' logs say wait for the test
    /// (`PVFS_FAULTS` holds: each logs "`what` waits: held by a test's fault").
    pub fn held_by_fault(&self, what: &str) -> usize {
        let line = format!("{what} waits: held by a test's fault");
        self.names()
            .iter()
            .map(|s| self.log(s).matches(&line).count())
            .sum()
    }

    /// The last lines of server `name`'s log (for failure messages).
    pub fn log_tail(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.log_path(name)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Runs `pvfs ARGS` with `PVFS_CONFIG` set to this cluster's configuration.
    pub fn run_cli(&self, args: &[&str]) -> CliOutput {
        run_pvfs(args, &[("PVFS_CONFIG", self.config_str())], &[])
    }

    /// A new client (own runtime, own connections).
    pub fn client(&self) -> TestClient {
        TestClient::new(self.config.clone())
    }

    /// A new client on the current tokio runtime.
    pub fn new_client(&self) -> Client {
        Client::new(self.config.clone())
    }

    /// Adds data server `name` at the end of the configuration with `pvfs server
    /// add` (on the next port of the cluster's block, storing under the cluster's
    /// directory), without starting it: [`Cluster::restart`] starts it.
    #[allow(dead_code)]
    pub fn add_data_server(&mut self, name: &str) {
        assert!(
            self.hosts.is_none(),
            "servers on hosts of their own get no more"
        );
        let port = self.ports.base + self.names.len() as u16;
        let address = format!("127.0.0.1:{port}");
        let out = self.run_cli(&[
            "server",
            "add",
            name,
            "--address",
            &address,
            "--storage",
            name,
        ]);
        out.ok();
        self.config = Config::load(&self.config_path).unwrap();
        self.names.push(name.to_string());
    }

    /// Checks `pvfs fsck` finds no problem, and no server logged a panic.
    #[allow(dead_code)]
    pub fn assert_clean(&self) {
        let fsck = self.run_cli(&["fsck", "--json"]);
        assert_eq!(
            fsck.json_any()["problems"],
            serde_json::json!([]),
            "{}",
            fsck.stdout
        );
        for n in &self.names {
            let log = self.log(n);
            assert!(!log.contains("panicked"), "{n}:\n{log}");
        }
    }

    /// Starts every server that is not running and waits until all answer.
    pub fn start_all(&self) {
        self.try_start_all().unwrap_or_else(|e| panic!("{e}"));
    }

    /// [`Cluster::start_all`], with a server that exits during its start as an error.
    fn try_start_all(&self) -> Result<(), String> {
        for name in &self.names {
            if !self.children.lock().unwrap().contains_key(name) {
                self.spawn(name);
            }
        }
        for name in &self.names {
            self.try_wait_ready(name)?;
        }
        Ok(())
    }

    fn spawn(&self, name: &str) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(name))
            .unwrap();
        let log2 = log.try_clone().unwrap();
        let mut cmd = Command::new(pvfs_bin());
        cmd.args(["server", "--config", self.config_str(), "--name", name])
            .env_remove("PVFS_CONFIG")
            .envs(
                self.server_env
                    .iter()
                    .filter(|(who, _, _)| who.as_deref().is_none_or(|w| w == name))
                    .map(|(_, k, v)| (k, v)),
            )
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        die_with_parent(&mut cmd);
        if let Some(h) = &self.hosts {
            h.on_server(self.index(name), &mut cmd);
        }
        let child = cmd.spawn().expect("cannot start a pvfs server");
        self.children
            .lock()
            .unwrap()
            .insert(name.to_string(), child);
    }

    /// Waits until server `name` answers a ping (fails fast if its process exits).
    pub fn wait_ready(&self, name: &str) {
        self.try_wait_ready(name).unwrap_or_else(|e| panic!("{e}"));
    }

    /// [`Cluster::wait_ready`], with the server's exit as an error (its log's tail).
    fn try_wait_ready(&self, name: &str) -> Result<(), String> {
        let idx = self.index(name);
        let tc = TestClient::new(self.config.clone());
        poll(
            &format!("server {name} to answer"),
            scaled(START_DEADLINE),
            || {
                if let Some(child) = self.children.lock().unwrap().get_mut(name) {
                    if let Some(st) = child.try_wait().unwrap() {
                        return Some(Err(format!(
                            "server {name} exited during start ({st}):\n{}",
                            self.log_tail(name)
                        )));
                    }
                }
                // A fresh client each time: a pool remembers refused connections briefly.
                let c = {
                    let _g = tc.rt.enter();
                    Client::new(self.config.clone())
                };
                let reports = tc.block_on(async {
                    tokio::time::timeout(scaled(Duration::from_secs(10)), c.ping())
                        .await
                        .ok()
                })?;
                reports[idx].result.is_ok().then_some(Ok(()))
            },
        )
    }

    /// Index of server `name` in the configuration.
    pub fn index(&self, name: &str) -> usize {
        self.names
            .iter()
            .position(|n| n == name)
            .unwrap_or_else(|| panic!("no server {name}"))
    }

    /// Process id of running server `name` (a child of this test).
    pub fn pid(&self, name: &str) -> u32 {
        self.children
            .lock()
            .unwrap()
            .get(name)
            .unwrap_or_else(|| panic!("server {name} not running"))
            .id()
    }

    /// Whether child server `name` is still running (not exited).
    pub fn is_running(&self, name: &str) -> bool {
        match self.children.lock().unwrap().get_mut(name) {
            Some(c) => c.try_wait().unwrap().is_none(),
            None => false,
        }
    }

    /// Asserts no server logged a panic.
    #[track_caller]
    pub fn assert_no_panics(&self) {
        for name in &self.names {
            let log = self.log(name);
            assert!(!log.contains("panicked"), "{name}:\n{log}");
        }
    }

    /// Asserts every child server process is still alive.
    #[track_caller]
    pub fn assert_all_running(&self) {
        for name in &self.names {
            assert!(
                self.is_running(name),
                "server {name} died:\n{}",
                self.log_tail(name)
            );
        }
    }

    /// Sends `signal` to server `name`. For SIGTERM and SIGKILL, also waits for the
    /// process to exit and returns its status (the server is then not running).
    pub fn kill(&self, name: &str, signal: i32) -> Option<ExitStatus> {
        let mut children = self.children.lock().unwrap();
        let child = children
            .get_mut(name)
            .unwrap_or_else(|| panic!("server {name} not running"));
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        assert_eq!(
            rc,
            0,
            "kill({name}, {signal}) failed: {}",
            std::io::Error::last_os_error()
        );
        if signal != libc::SIGTERM && signal != libc::SIGKILL {
            return None;
        }
        let status = poll(
            &format!("server {name} to exit"),
            scaled(Duration::from_secs(30)),
            || child.try_wait().unwrap(),
        );
        children.remove(name);
        Some(status)
    }

    /// SIGTERM, and asserts a clean stop (exit status 0).
    #[track_caller]
    pub fn stop_clean(&self, name: &str) {
        let st = self.kill(name, libc::SIGTERM).unwrap();
        assert!(
            st.success(),
            "server {name} stopped with {st} on SIGTERM:\n{}",
            self.log_tail(name)
        );
    }

    /// Starts server `name` again (it must not be running) and waits until it answers.
    pub fn restart(&self, name: &str) {
        assert!(
            !self.children.lock().unwrap().contains_key(name),
            "restart({name}): it is still running"
        );
        self.spawn(name);
        self.wait_ready(name);
    }

    /// Waits for child servers that were stopped behind the harness's back (e.g. by
    /// `pvfs stop`) and returns their exit statuses.
    pub fn reap_all(&self) -> Vec<(String, ExitStatus)> {
        let mut children = self.children.lock().unwrap();
        let mut out = Vec::new();
        for (name, child) in children.iter_mut() {
            let st = poll(
                &format!("server {name} to exit"),
                scaled(Duration::from_secs(30)),
                || child.try_wait().unwrap(),
            );
            out.push((name.clone(), st));
        }
        children.clear();
        out
    }

    /// Pids of `pvfs server` processes of this cluster that are not our children
    /// (started by `pvfs start`), from their pid files.
    pub fn background_pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for sc in &self.config.servers {
            let Ok(text) = std::fs::read_to_string(sc.storage.join("server.pid")) else {
                continue;
            };
            let Ok(pid) = text.trim().parse::<u32>() else {
                continue;
            };
            if is_server_of(pid, self.config_str()) {
                pids.push(pid);
            }
        }
        pids
    }
}

/// Whether `pid` is a live (not zombie) `pvfs server` process for configuration `config`.
pub fn is_server_of(pid: u32, config: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true);
    !zombie && args.contains(&b"server".as_slice()) && args.contains(&config.as_bytes())
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut children = match self.children.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        for (_, child) in children.iter_mut() {
            let _ = child.kill(); // SIGKILL works on stopped processes too
        }
        for (_, child) in children.iter_mut() {
            let _ = child.wait();
        }
        children.clear();
        drop(children);
        // Servers started by `pvfs start` are not our children.
        let pids = self.background_pids();
        for &pid in &pids {
            // SAFETY: kill(2) on a pid just checked to be this cluster's server.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
        let deadline = Instant::now() + scaled(Duration::from_secs(10));
        while pids.iter().any(|&p| is_server_of(p, self.config_str())) && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Everything of ours is stopped: the watchdog has nothing left to do.
        drop(self.watchdog.take());
        if let Some(dir) = self.dir.take() {
            keep_if_failed(
                dir,
                "the cluster's configuration, server logs (sN.log) and storage",
            );
        }
    }
}

/// Drops (removes) `dir`, unless this thread is unwinding from a failed assertion:
/// then keeps it and prints where it is and what it holds.
pub fn keep_if_failed(dir: tempfile::TempDir, what: &str) {
    if std::thread::panicking() {
        let path = dir.keep();
        eprintln!("test failed: kept {} ({what})", path.display());
    }
}

/// A block of consecutive loopback ports below the kernel's ephemeral range, reserved
/// for one cluster by an exclusive `flock` on a lock file: other tests (in this or any
/// other test process) pick another block, and the kernel drops the lock when the
/// process dies, so a killed test leaves no stale reservation. The file is removed
/// when the block is released.
pub struct PortBlock {
    /// First port of the block.
    pub base: u16,
    lock: std::fs::File,
    path: PathBuf,
}

impl PortBlock {
    /// Ports per block: the most servers one test cluster may have.
    const SIZE: u16 = 32;
    /// Lowest port used (above the well-known and most registered service ports).
    const LOW: u16 = 10_000;

    fn lock_dir() -> PathBuf {
        std::env::temp_dir().join("pvfs-test-ports")
    }

    /// Reserves a block of `n` ports that are free on 127.0.0.1 now.
    pub fn reserve(n: usize) -> PortBlock {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        assert!(
            n <= usize::from(Self::SIZE),
            "a test cluster has at most {} servers",
            Self::SIZE
        );
        let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
            .unwrap_or(32_768);
        assert!(
            high >= Self::LOW + 4 * Self::SIZE,
            "the ephemeral port range starts at {high}: too low to keep test ports below it"
        );
        let blocks = (high - Self::LOW) / Self::SIZE;
        let mut rng = Rng::new(
            (u64::from(std::process::id()) << 32)
                ^ std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
        );
        for _ in 0..1000 {
            let base = Self::LOW + (rng.range(0, u64::from(blocks)) as u16) * Self::SIZE;
            let dir = Self::lock_dir();
            if std::fs::create_dir(&dir).is_ok() {
                // Tests run as root and as users: anyone may reserve.
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
            }
            let path = dir.join(format!("{base}.lock"));
            let Ok(lock) = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
            else {
                continue;
            };
            // SAFETY: flock on a file descriptor we own.
            let locked =
                unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
            // The holder before us may have removed the file between our open and our
            // lock: the lock counts only if the path still names the file we locked.
            let current = locked
                && match (lock.metadata(), std::fs::metadata(&path)) {
                    (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
                    _ => false,
                };
            let free = current
                && (0..n as u16)
                    .all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok());
            if free {
                return PortBlock { base, lock, path };
            }
        }
        panic!("no free block of {n} ports below {high} on 127.0.0.1");
    }
}

impl Drop for PortBlock {
    fn drop(&mut self) {
        // Removed while still locked, so nobody can lock this file after we let go.
        let _ = std::fs::remove_file(&self.path);
        // SAFETY: unlock a file descriptor we own (closing it would do the same).
        unsafe {
            libc::flock(std::os::fd::AsRawFd::as_raw_fd(&self.lock), libc::LOCK_UN);
        }
        // Gone when the last reservation is released (fails harmlessly otherwise).
        let _ = std::fs::remove_dir(Self::lock_dir());
    }
}

/// A process that outlives the test process only to clean up after it: once the test
/// process is gone (even killed with SIGKILL), it kills every process whose command
/// line contains one of its paths (servers started with `pvfs start`, background
/// `pvfs mount` daemons), lazily unmounts every mount under them, and removes them.
/// Dropping the watchdog (the test cleaned up itself) ends it at once.
pub struct Watchdog(Child);

impl Watchdog {
    /// Watches for the death of this process on behalf of `paths`.
    pub fn new(paths: &[PathBuf]) -> Watchdog {
        const SCRIPT: &str = r#"
parent=$1; shift
alive() { state=$(sed 's/.*) //' "/proc/$parent/stat" 2>/dev/null) && [ "${state%% *}" != Z ]; }
while alive; do sleep 1; done
self=$(tr '\0' ' ' < /proc/$$/cmdline)
for p in /proc/[0-9]*; do
  cmd=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) || continue
  [ "$cmd" = "$self" ] && continue
  for path in "$@"; do
    case "$cmd" in *"$path"*) kill -9 "${p#/proc/}" 2>/dev/null ;; esac
  done
done
for path in "$@"; do
  awk -v p="$path" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo |
    sort -r | while read -r mp; do umount -l "$mp" 2>/dev/null; done
  rm -rf -- "$path"
done
"#;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(SCRIPT)
            .arg("pvfs-test-watchdog")
            .arg(std::process::id().to_string())
            .args(paths)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Watchdog(cmd.spawn().expect("cannot start the test watchdog (sh)"))
    }
}

/// What a [`Watchdog`] does once the test process is gone, done now by the test
/// itself: kills every other process whose command line contains `path` and lazily
/// detaches every mount under it (for daemons a test started in the background).
pub fn reap_under(path: &Path) {
    let me = std::process::id();
    let want = path.as_os_str().as_encoded_bytes();
    let contains = |hay: &[u8]| hay.windows(want.len()).any(|w| w == want);
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if pid == me {
                continue;
            }
            if std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| contains(&c)) {
                // SAFETY: kill(2) on a process that names the test's own directory.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                }
            }
        }
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| m.replace("\\040", " "))
        .filter(|m| Path::new(m).starts_with(path))
        .collect();
    mounts.sort_by(|a, b| b.cmp(a));
    for m in mounts {
        if let Ok(c) = std::ffi::CString::new(m) {
            // SAFETY: c is a valid path string.
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The exit signal of a status, if it died of one.
pub fn signal_of(st: &ExitStatus) -> Option<i32> {
    st.signal()
}

/// Server `name`'s state in the cluster map, as `pvfs status` shows it.
#[allow(dead_code)]
pub fn state_of(cluster: &Cluster, name: &str) -> Option<String> {
    map_state(&cluster.run_cli(&["status", "--json"]).json_any(), name)
}

/// Four servers made by `pvfs genconfig --replicas 2` with a 1 s lease, once every
/// one is up and has given its metadata standby a whole copy.
#[allow(dead_code)]
pub fn four_with_two_copies() -> Cluster {
    with_copies(4, 2)
}

/// Four servers with two copies of everything and a 1 s lease, the first two
/// serving metadata and all four data (s2 and s3 hold data only), plus `settings`.
#[allow(dead_code)]
pub fn two_meta_of_four(settings: &[(&str, &str)]) -> Cluster {
    let mut b = Cluster::builder()
        .servers(4)
        .genconfig_arg("--meta-servers")
        .genconfig_arg("2")
        .replicas(2)
        .set("lease", r#""1s""#);
    for (k, v) in settings {
        b = b.set(k, v);
    }
    b.start()
}

/// `servers` servers made by `pvfs genconfig --replicas copies` with a 1 s lease,
/// once every one is up and has given its metadata standbys a whole copy.
#[allow(dead_code)]
pub fn with_copies(servers: usize, copies: u32) -> Cluster {
    let cluster = Cluster::builder()
        .servers(servers)
        .replicas(copies)
        .set("lease", r#""1s""#)
        .start();
    all_up_with_standby_copies(&cluster);
    cluster
}

/// Waits until every server is up in the cluster map and, with metadata standbys,
/// has given its standby a whole copy of its metadata (its log tells).
#[allow(dead_code)]
pub fn all_up_with_standby_copies(cluster: &Cluster) {
    poll(
        "every server up, every metadata standby with a whole copy",
        scaled(Duration::from_secs(30)),
        || {
            let config = cluster.config();
            cluster
                .names()
                .iter()
                .enumerate()
                .all(|(i, n)| {
                    // A server with no metadata group (data only) has no standby.
                    let group = config.meta_group(i).len() > 1;
                    state_of(cluster, n).as_deref() == Some("up")
                        && (!group || cluster.log(n).contains("metadata standby has a whole copy"))
                })
                .then_some(())
        },
    );
}

/// The metadata groups `pvfs status --json` shows served: per group, the server
/// serving it and each standby with its state.
#[allow(dead_code)]
pub fn served_groups(
    status: &serde_json::Value,
) -> std::collections::BTreeMap<String, (String, Vec<(String, String)>)> {
    let mut out = std::collections::BTreeMap::new();
    for row in status["servers"].as_array().into_iter().flatten() {
        for g in row["metadata_groups"].as_array().into_iter().flatten() {
            let standbys = g["standbys"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let field = |k: &str| c[k].as_str().unwrap_or("?").to_string();
                    (field("server"), field("state"))
                })
                .collect();
            let group = g["group"].as_str().unwrap_or("?").to_string();
            let by = row["name"].as_str().unwrap_or("?").to_string();
            assert!(
                out.insert(group, (by, standbys)).is_none(),
                "a group served twice: {status}"
            );
        }
    }
    out
}

/// `pvfs status --json`'s row of server `name`.
#[allow(dead_code)]
pub fn status_row(cluster: &Cluster, name: &str) -> serde_json::Value {
    let status = cluster.run_cli(&["status", "--json"]).json_any();
    status["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {status}"))
}

/// A server's state in the JSON of `pvfs status --json`.
#[allow(dead_code)]
pub fn map_state(v: &serde_json::Value, name: &str) -> Option<String> {
    v["servers"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)?["map_state"]
        .as_str()
        .map(str::to_string)
}
