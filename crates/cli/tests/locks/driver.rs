//! Drives `tests/locks/lockprog.c` for the lock tests: compiles it (plain, or with
//! `-DPVFS_CAPI` against libpvfs), starts processes of it, sends them one command
//! at a time and reads their one-line answers with deadlines, so a test can hold a
//! lock in one process while others try, wait, are signalled or killed.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use std::sync::OnceLock;

use crate::common::{artifact, die_with_parent, profile_dir, scaled, Cluster};

/// How long one command may take to answer when it should not wait (scaled).
pub const ANSWER: Duration = Duration::from_secs(30);

/// Compiles `lockprog.c` into `dir` (named `name`), with extra `cc` arguments.
pub fn compile(dir: &Path, name: &str, extra: &[String]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/locks/lockprog.c");
    let exe = dir.join(name);
    let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(extra)
        .output()
        .expect("cannot run cc");
    assert!(
        out.status.success(),
        "cc lockprog.c failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// `lockprog.c` built plainly (for a mount or the preload library), once per run.
pub fn lockprog() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = profile_dir().join("lock-tests");
        std::fs::create_dir_all(&dir).expect("create the lock-tests directory");
        compile(&dir, "lockprog", &[])
    })
}

/// A lock client built on libpvfs (`-DPVFS_CAPI`: `pvfs_fcntl_lock`, `pvfs_flock`)
/// for `cluster`, as a process of its own: a client of its own, as on another node.
pub fn capi_locker(cluster: &Cluster, name: &str) -> Proc {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    let exe = EXE.get_or_init(|| {
        let dir = profile_dir().join("lock-tests");
        std::fs::create_dir_all(&dir).expect("create the lock-tests directory");
        let so = artifact("libpvfs.so");
        let libdir = so.parent().expect("library directory");
        let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi/include");
        let args = [
            "-DPVFS_CAPI".to_string(),
            format!("-I{}", include.display()),
            format!("-L{}", libdir.display()),
            "-lpvfs".to_string(),
            format!("-Wl,-rpath,{}", libdir.display()),
            "-lpthread".to_string(),
        ];
        compile(&dir, "lockprog-capi", &args)
    });
    let mut cmd = Command::new(exe);
    cmd.env("PVFS_CONFIG", cluster.config_str())
        .env_remove("PVFS_LOG")
        // cargo test's LD_LIBRARY_PATH may hold an older libpvfs.so than the RUNPATH.
        .env_remove("LD_LIBRARY_PATH");
    Proc::start(name, cmd)
}

/// A lock client with the preload library (plain `lockprog.c`, reaching pvfs under
/// the local prefix `prefix`) for `cluster`: a client of its own.
pub fn preloaded_locker(cluster: &Cluster, prefix: &str, name: &str) -> Proc {
    let mut preload = std::ffi::OsString::new();
    // A sanitizer's runtime goes first (`scripts/sanitize`).
    if let Some(first) = std::env::var_os("PVFS_TEST_PRELOAD_FIRST").filter(|f| !f.is_empty()) {
        preload.push(first);
        preload.push(":");
    }
    preload.push(artifact("libpvfs_preload.so"));
    let mut cmd = Command::new(lockprog());
    cmd.current_dir(cluster.dir())
        .env("LD_PRELOAD", preload)
        .env("PVFS_CONFIG", cluster.config_path())
        .env("PVFS_PREFIX", prefix)
        .env_remove("PVFS_LOG");
    Proc::start(name, cmd)
}

/// One running lock client.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Proc {
    /// Starts `cmd` (a lockprog, with whatever environment it needs).
    pub fn start(name: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().expect("cannot start lockprog");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            name: name.into(),
            child: Some(child),
            stdin,
            lines: rx,
        }
    }

    /// Sends one command without waiting for its answer.
    pub fn send(&mut self, cmd: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{cmd}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("{}: {cmd}: {e}", self.name));
    }

    /// The next answer within `within` (scaled), or None.
    pub fn answer_within(&mut self, within: Duration) -> Option<String> {
        match self.lines.recv_timeout(scaled(within)) {
            Ok(l) => Some(l),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                panic!("{}: the program ended without answering", self.name)
            }
        }
    }

    /// The next answer (it must come within [`ANSWER`]).
    pub fn answer(&mut self) -> String {
        let name = self.name.clone();
        self.answer_within(ANSWER)
            .unwrap_or_else(|| panic!("{name}: no answer within {:?}", scaled(ANSWER)))
    }

    /// Sends `cmd` and returns its answer.
    #[track_caller]
    pub fn ask(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.answer()
    }

    /// Sends `cmd` and checks its answer is `want`.
    #[track_caller]
    pub fn expect(&mut self, cmd: &str, want: &str) {
        let got = self.ask(cmd);
        assert_eq!(got, want, "{}: `{cmd}`", self.name);
    }

    /// Sends `cmd`, which must wait (no answer within a moment): a lock request
    /// blocked by another owner.
    #[track_caller]
    pub fn blocks(&mut self, cmd: &str) {
        self.send(cmd);
        let early = self.answer_within(Duration::from_millis(300));
        assert_eq!(early, None, "{}: `{cmd}` did not wait", self.name);
    }

    /// After [`Proc::blocks`]: `other` sends `cmd` (an unlock), and this waiter's
    /// answer must be `want`, promptly (woken, not found by a poll).
    #[track_caller]
    pub fn woken_by(&mut self, other: &mut Proc, cmd: &str, want: &str) {
        let t = Instant::now();
        other.expect(cmd, "ok");
        let got = self.answer();
        let took = t.elapsed();
        assert_eq!(got, want, "{}: the waiting request", self.name);
        assert!(
            took < scaled(Duration::from_millis(700)),
            "{}: answered {took:?} after `{cmd}`",
            self.name
        );
    }

    /// After [`Proc::blocks`]: a signal ends the wait, whose answer must be
    /// `err EINTR` (a handler without SA_RESTART).
    #[track_caller]
    pub fn interrupted_by(&mut self, sig: i32) {
        self.signal(sig);
        let got = self.answer();
        assert_eq!(got, "err EINTR", "{}: the interrupted wait", self.name);
    }

    /// Sends `cmd` until its answer is `want` (within [`ANSWER`], scaled): for what
    /// happens just after a call returned (the kernel sends a mount the release of
    /// a closed file in the background).
    #[track_caller]
    pub fn expect_soon(&mut self, cmd: &str, want: &str) {
        let start = Instant::now();
        loop {
            let got = self.ask(cmd);
            if got == want {
                return;
            }
            assert!(
                start.elapsed() < scaled(ANSWER),
                "{}: `{cmd}` answers {got:?}, not {want:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("child").id()
    }

    /// Sends `sig` to the process.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe {
            libc::kill(self.pid() as libc::pid_t, sig);
        }
    }

    /// Waits up to `within` (scaled) for the process to end; how long it took.
    pub fn wait_exit(&mut self, within: Duration) -> Option<Duration> {
        let start = Instant::now();
        let child = self.child.as_mut().expect("child");
        while start.elapsed() < scaled(within) {
            if child.try_wait().ok().flatten().is_some() {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Ends the program (`exit`) and waits for it.
    pub fn finish(mut self) {
        self.send("exit");
        drop(self.stdin.take());
        let name = self.name.clone();
        assert!(
            self.wait_exit(ANSWER).is_some(),
            "{name}: did not exit after `exit`"
        );
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if let Some(mut c) = self.child.take() {
            if !matches!(c.try_wait(), Ok(Some(_))) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}
