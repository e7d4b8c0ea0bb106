//! A FUSE mount of a test cluster for the `fuse_*` tests: `pvfs mount --foreground`
//! as a child process on a fresh directory. Dropping a [`Mount`] detaches the mount
//! and kills the process, so a failing test leaves neither a mount nor a process
//! behind; a [`Watchdog`] does the same if the test process is killed. A failed test
//! keeps the mount's directory with its log (`mount.log`) and prints where.
//! Commands run against the mount have deadlines (scaled by the suite's slowdown
//! factor): a hung mount fails the test instead of hanging it.
#![allow(dead_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{die_with_parent, keep_if_failed, poll, pvfs_bin, scaled, Cluster, Watchdog};

/// Longest time a mount may take to appear.
pub const MOUNT_DEADLINE: Duration = Duration::from_secs(60);

/// Fails the test with a clear message when this machine cannot mount FUSE.
pub fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: the FUSE tests need the fuse kernel module \
         (scripts/install-deps installs fuse3)"
    );
}

/// Whether `path` is a mount point (from /proc/self/mountinfo; never touches it).
pub fn is_mounted(path: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = path.as_os_str().as_bytes();
    text.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|mp| mp.replace("\\040", " ").as_bytes() == want)
    })
}

/// Detaches whatever is mounted on `path` (test cleanup; errors ignored).
pub fn force_detach(path: &Path) {
    if let Ok(c) = CString::new(path.as_os_str().as_bytes()) {
        // SAFETY: c is a valid path string.
        unsafe {
            libc::umount2(c.as_ptr(), libc::MNT_DETACH);
        }
    }
}

/// A mounted test file system.
pub struct Mount {
    /// Removed on drop unless the test failed (then kept with the log).
    dir: Option<tempfile::TempDir>,
    base: PathBuf,
    path: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    watchdog: Option<Watchdog>,
}

impl Mount {
    /// Mounts `cluster` with `pvfs mount --foreground` and extra options; waits
    /// until the mount is live.
    pub fn start(cluster: &Cluster, extra: &[&str]) -> Mount {
        require_fuse();
        let dir = tempfile::Builder::new()
            .prefix("pvfs-mnt-")
            .tempdir()
            .expect("cannot create a temporary directory");
        // Other users (the unprivileged runs) must reach the mount point.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let watchdog = Watchdog::new(std::slice::from_ref(&base));
        let path = base.join("mnt");
        std::fs::create_dir(&path).unwrap();
        let log = base.join("mount.log");
        let logf = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(pvfs_bin());
        cmd.args(["mount", "--foreground", "--config", cluster.config_str()])
            .args(extra)
            .arg(&path)
            .env_remove("PVFS_CONFIG")
            .env("PVFS_LOG", "info")
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf);
        die_with_parent(&mut cmd);
        let child = cmd.spawn().expect("cannot start pvfs mount");
        let mut m = Mount {
            dir: Some(dir),
            base,
            path,
            log,
            child: Some(child),
            watchdog: Some(watchdog),
        };
        let p = m.path.clone();
        let start = Instant::now();
        loop {
            if is_mounted(&p) {
                break;
            }
            if let Some(st) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("pvfs mount exited ({st}):\n{}", m.log_text());
            }
            assert!(
                start.elapsed() < scaled(MOUNT_DEADLINE),
                "no mount after {:?}:\n{}",
                scaled(MOUNT_DEADLINE),
                m.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        m
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path under the mount point.
    pub fn join(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    /// A scratch directory next to the mount (not on it), readable by everyone.
    pub fn scratch(&self) -> &Path {
        &self.base
    }

    /// What the mount process logged.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Process id of the mount process.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("mount process gone").id()
    }

    /// Sends `signal` to the mount process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe {
            libc::kill(self.pid() as libc::pid_t, signal);
        }
    }

    /// Waits up to `deadline` (scaled) for the mount process to exit.
    pub fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("mount process gone");
        let st = poll("the mount process to exit", scaled(deadline), || {
            child.try_wait().unwrap()
        });
        self.child = None;
        st
    }

    /// `pvfs umount` (must succeed), then waits for the mount process to end.
    pub fn unmount(&mut self) -> ExitStatus {
        let out = run_for(
            Command::new(pvfs_bin()).arg("umount").arg(&self.path),
            Duration::from_secs(60),
        );
        assert!(
            out.status.success(),
            "pvfs umount failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!is_mounted(&self.path), "still mounted after pvfs umount");
        self.wait_exit(Duration::from_secs(30))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if is_mounted(&self.path) {
            force_detach(&self.path);
        }
        if let Some(mut child) = self.child.take() {
            if !matches!(child.try_wait(), Ok(Some(_))) {
                // SIGKILL ends stopped processes too.
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        drop(self.watchdog.take());
        if let Some(dir) = self.dir.take() {
            keep_if_failed(dir, "the mount's log mount.log");
        }
    }
}

/// Runs `cmd` with a deadline (scaled); a command still running then is killed and
/// the test fails (a hung mount must not hang the test).
pub fn run_for(cmd: &mut Command, deadline: Duration) -> Output {
    let deadline = scaled(deadline);
    let start = Instant::now();
    let desc = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {desc}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(deadline) {
        Ok(out) => out.unwrap_or_else(|e| panic!("{desc}: {e}")),
        Err(_) => {
            // SAFETY: kill(2) on the child we started.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
            panic!(
                "{desc} did not finish within {deadline:?} (started {:?} ago)",
                start.elapsed()
            )
        }
    }
}

/// Runs a shell command line with a deadline; asserts success; returns stdout.
#[track_caller]
pub fn sh(script: &str, deadline: Duration) -> String {
    let out = run_for(Command::new("sh").arg("-c").arg(script), deadline);
    assert!(
        out.status.success(),
        "`{script}` failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
