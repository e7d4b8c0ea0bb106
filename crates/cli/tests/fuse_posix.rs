//! The FUSE mount behaves like a local file system (issue 3, points 1 and 2): real
//! servers, a real mount in a temporary directory, real programs.
//!
//! - `tests/fuse/semantics.c`, compiled here with `cc`, checks each POSIX semantic
//!   one by one, run as root and as an unprivileged user (uid 65534, on a mount with
//!   `allow_other`, against fixtures root prepared);
//! - ordinary tools (`dd`, `cmp`, `cp -a`, `diff -r`, `ls -l`, `find`, `du`, `df`,
//!   `rm -rf`) on the mount, with the data compared;
//! - a directory of 100k entries listed through the mount;
//! - the mount's life: background mount and `pvfs umount`, SIGTERM/SIGINT
//!   unmounting cleanly, `pvfs umount` of a mount whose daemon was killed or
//!   stopped, and the errors of a mount that cannot work.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{pvfs_bin, run_pvfs, Cluster, Rng, TestClient};
use mount::{is_mounted, run_for, sh, Mount};

/// Longest any program on the mount may take in these tests.
const CMD: Duration = Duration::from_secs(120);

/// Compiles the semantics checker into `dir`.
fn build_semantics(dir: &Path) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuse/semantics.c");
    let exe = dir.join("semantics");
    let out = run_for(
        Command::new("cc")
            .args(["-O1", "-Wall", "-o"])
            .arg(&exe)
            .arg(&src),
        CMD,
    );
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

/// Runs the checker; fails the test with its report if any check failed.
fn run_semantics(cmd: &mut Command, who: &str, m: &Mount) {
    let out = run_for(cmd, CMD);
    let text = String::from_utf8_lossy(&out.stdout);
    let failed: Vec<&str> = text.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        out.status.success() && failed.is_empty(),
        "semantics as {who} ({}):\n{}\n{}\nstderr: {}\nmount log:\n{}",
        out.status,
        failed.join("\n"),
        text.lines().last().unwrap_or(""),
        String::from_utf8_lossy(&out.stderr),
        m.log_text()
    );
    let summary = text.lines().last().unwrap_or("");
    eprintln!("semantics as {who}: {summary}");
}

#[test]
fn posix_semantics_as_root_and_as_an_unprivileged_user() {
    semantics_on(&["--allow-other"]);
}

#[test]
fn posix_semantics_without_the_page_cache() {
    semantics_on(&["--allow-other", "--direct-io"]);
}

#[test]
fn posix_semantics_with_write_behind() {
    // Writes answered before the servers have them: every check must still hold
    // for the programs of this mount (they read their own writes, see the sizes they
    // wrote, and truncation, fsync and close wait for the writes in flight).
    semantics_on(&["--allow-other", "--write-behind"]);
}

/// Runs the semantics checker as root and as uid 65534 on a mount with `opts`.
fn semantics_on(opts: &[&str]) {
    let cluster = Cluster::start();
    let m = Mount::start(&cluster, opts);
    let exe = build_semantics(m.scratch());

    let root_dir = m.join("root");
    std::fs::create_dir(&root_dir).unwrap();
    run_semantics(
        Command::new(&exe).arg(&root_dir).arg(m.join("root")),
        "root",
        &m,
    );

    // Fixtures owned by root, and a directory for the user.
    let fx = m.join("fixtures");
    std::fs::create_dir(&fx).unwrap();
    let mode = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    std::fs::write(fx.join("rootfile"), "root").unwrap();
    mode(&fx.join("rootfile"), 0o666);
    std::fs::write(fx.join("rootfile_ro"), "ro").unwrap();
    mode(&fx.join("rootfile_ro"), 0o644);
    std::fs::write(fx.join("suidfile"), "").unwrap();
    mode(&fx.join("suidfile"), 0o6777);
    std::fs::create_dir(fx.join("ro_dir")).unwrap();
    mode(&fx.join("ro_dir"), 0o555);
    std::fs::create_dir(fx.join("sticky")).unwrap();
    mode(&fx.join("sticky"), 0o1777);
    std::fs::write(fx.join("sticky/victim"), "v").unwrap();
    mode(&fx.join("sticky/victim"), 0o666);
    let user_dir = m.join("user");
    std::fs::create_dir(&user_dir).unwrap();
    std::os::unix::fs::chown(&user_dir, Some(65534), Some(65534)).unwrap();

    run_semantics(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .arg(&user_dir)
            .arg(&fx),
        "uid 65534",
        &m,
    );
    // The fixtures the user could not touch are intact.
    assert_eq!(std::fs::read(fx.join("sticky/victim")).unwrap(), b"v");
    assert_eq!(std::fs::read(fx.join("rootfile_ro")).unwrap(), b"ro");
}

#[test]
fn ordinary_programs_see_their_data() {
    let cluster = Cluster::start();
    let mut m = Mount::start(&cluster, &[]);
    let local = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0x5eed_f00d);

    // dd in 1 MiB blocks, both ways, with the bytes compared.
    let src = local.path().join("random");
    std::fs::write(&src, rng.bytes((24 << 20) + 4321)).unwrap();
    let on = m.join("random");
    let back = local.path().join("back");
    sh(
        &format!(
            "dd if={} of={} bs=1M status=none && dd if={} of={} bs=1M status=none && cmp {} {} && cmp {} {}",
            src.display(),
            on.display(),
            on.display(),
            back.display(),
            src.display(),
            back.display(),
            src.display(),
            on.display()
        ),
        CMD,
    );
    assert_eq!(std::fs::metadata(&on).unwrap().len(), (24 << 20) + 4321);

    // A tree: cp -a in, diff -r, ls -lR, find, du, cp -a back out.
    let tree = local.path().join("tree");
    let mut total = 0u64;
    for d in 0..6 {
        let dir = tree.join(format!("dir{d}")).join("sub");
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..25 {
            let len = rng.log_range(0, 200_000) as usize;
            total += len as u64;
            std::fs::write(dir.join(format!("f{f}.dat")), rng.bytes(len)).unwrap();
        }
        std::os::unix::fs::symlink("sub/f0.dat", tree.join(format!("dir{d}/link"))).unwrap();
    }
    std::fs::set_permissions(
        tree.join("dir0/sub/f1.dat"),
        PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let t = m.join("tree");
    let out_copy = local.path().join("copy");
    sh(
        &format!(
            "cp -a {src} {dst} && diff -r {src} {dst} && cp -a {dst} {back} && diff -r {src} {back}",
            src = tree.display(),
            dst = t.display(),
            back = out_copy.display()
        ),
        CMD,
    );
    // cp -a kept modes and modification times.
    for rel in ["dir0/sub/f1.dat", "dir3/sub/f7.dat"] {
        let a = std::fs::metadata(tree.join(rel)).unwrap();
        let b = std::fs::metadata(t.join(rel)).unwrap();
        assert_eq!(a.mode(), b.mode(), "{rel}: mode");
        assert_eq!(
            (a.mtime(), a.mtime_nsec()),
            (b.mtime(), b.mtime_nsec()),
            "{rel}: mtime"
        );
        assert_eq!(a.len(), b.len(), "{rel}: size");
    }
    let files = sh(&format!("find {} -type f | wc -l", t.display()), CMD);
    assert_eq!(files.trim(), "150");
    let links = sh(&format!("find {} -type l | wc -l", t.display()), CMD);
    assert_eq!(links.trim(), "6");
    let lsr = sh(&format!("ls -lR {}", t.display()), CMD);
    assert!(
        lsr.contains("f24.dat") && lsr.contains("link -> sub/f0.dat"),
        "{lsr}"
    );
    let du = sh(&format!("du -sk {}", t.display()), CMD);
    let kib: u64 = du.split_whitespace().next().unwrap().parse().unwrap();
    assert!(
        kib >= total / 1024,
        "du says {kib} KiB for {total} bytes of files"
    );
    let df = sh(&format!("df -k {}", m.path().display()), CMD);
    assert!(df.contains(&m.path().display().to_string()), "{df}");
    sh(&format!("rm -rf {}", t.display()), CMD);
    assert!(!t.exists());
    assert_eq!(
        std::fs::read_dir(m.path()).unwrap().count(),
        1,
        "only /random left"
    );

    // The same file seen by another client right away.
    let tc = cluster.client();
    let st = tc.run(CMD, async |c| c.stat("/random").await.unwrap());
    assert_eq!(st.size, (24 << 20) + 4321);

    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());
}

#[test]
fn a_directory_of_100k_entries_lists_completely() {
    const N: usize = 100_000;
    let cluster = Cluster::start();
    let tc = TestClient::new(cluster.config().clone());
    // Created through the client library, 256 at a time (faster than one by one
    // through the kernel); listed through the mount.
    let start = Instant::now();
    tc.run(Duration::from_secs(600), async |c| {
        c.mkdir("/big", 0o755).await.unwrap();
        let dir = c.lookup(c.root(), "big").await.unwrap().handle;
        let names: Vec<String> = (0..N).map(|i| format!("entry-{i:06}")).collect();
        for chunk in names.chunks(256) {
            let futs = chunk.iter().map(|n| {
                let c = c.clone();
                async move {
                    c.create_at(dir, n, 0o644, Default::default())
                        .await
                        .map(|_| ())
                }
            });
            for r in futures::future::join_all(futs).await {
                r.unwrap();
            }
        }
    });
    eprintln!("created {N} entries in {:?}", start.elapsed());
    let m = Mount::start(&cluster, &[]);
    let start = Instant::now();
    let mut seen = HashSet::with_capacity(N);
    for e in std::fs::read_dir(m.join("big")).unwrap() {
        let e = e.unwrap();
        assert!(e.file_type().unwrap().is_file());
        assert!(
            seen.insert(e.file_name().into_string().unwrap()),
            "listed twice"
        );
    }
    eprintln!("listed {} entries in {:?}", seen.len(), start.elapsed());
    assert_eq!(seen.len(), N);
    assert!(seen.contains("entry-000000") && seen.contains("entry-099999"));
    // A listing with attributes (readdirplus) agrees.
    let n = sh(
        &format!("ls -l {} | grep -c entry-", m.join("big").display()),
        CMD,
    );
    assert_eq!(n.trim(), N.to_string());
}

#[test]
fn mount_lifecycle_signals_and_dead_daemons() {
    mount::require_fuse();
    let cluster = Cluster::start();

    // Background mount: returns once live; pvfs umount ends the daemon.
    let dir = tempfile::tempdir().unwrap();
    let mp = std::fs::canonicalize(dir.path()).unwrap().join("bg");
    std::fs::create_dir(&mp).unwrap();
    let log = dir.path().join("bg.log");
    let out = run_pvfs(
        &[
            "mount",
            "--config",
            cluster.config_str(),
            "--log",
            log.to_str().unwrap(),
            mp.to_str().unwrap(),
        ],
        &[],
        &["PVFS_CONFIG"],
    );
    out.ok();
    struct Detach<'a>(&'a Path);
    impl Drop for Detach<'_> {
        fn drop(&mut self) {
            if is_mounted(self.0) {
                mount::force_detach(self.0);
            }
        }
    }
    let _guard = Detach(&mp);
    assert!(
        is_mounted(&mp),
        "background mount not live when pvfs mount returned"
    );
    std::fs::write(mp.join("bg.txt"), "background").unwrap();
    let daemon = daemon_pid(&mp).expect("the background mount process");
    let out = run_pvfs(&["umount", mp.to_str().unwrap()], &[], &[]);
    out.ok();
    assert!(!is_mounted(&mp));
    common::poll(
        "the background daemon to exit",
        Duration::from_secs(20),
        || (!Path::new(&format!("/proc/{daemon}")).exists() || is_zombie(daemon)).then_some(()),
    );

    // SIGTERM and SIGINT unmount cleanly; the process exits 0.
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut m = Mount::start(&cluster, &[]);
        assert_eq!(std::fs::read(m.join("bg.txt")).unwrap(), b"background");
        m.signal(sig);
        let st = m.wait_exit(Duration::from_secs(30));
        assert!(st.success(), "signal {sig}: exit {st}\n{}", m.log_text());
        assert!(!is_mounted(m.path()), "signal {sig}: still mounted");
    }

    // SIGTERM while a file is open and a process sits in the mount: detached
    // anyway, nothing left mounted.
    let mut m = Mount::start(&cluster, &[]);
    let holder = std::fs::File::open(m.join("bg.txt")).unwrap();
    m.signal(libc::SIGTERM);
    let st = m.wait_exit(Duration::from_secs(30));
    assert!(st.success(), "busy SIGTERM: exit {st}\n{}", m.log_text());
    assert!(!is_mounted(m.path()));
    drop(holder);

    // A killed daemon leaves a dead mount; pvfs umount removes it.
    let mut m = Mount::start(&cluster, &[]);
    m.signal(libc::SIGKILL);
    m.wait_exit(Duration::from_secs(10));
    assert!(is_mounted(m.path()), "the kernel keeps a dead mount");
    let err = std::fs::metadata(m.join("bg.txt")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
    let out = run_pvfs(&["umount", m.path().to_str().unwrap()], &[], &[]);
    out.ok();
    assert!(!is_mounted(m.path()));

    // A stopped (hung) daemon: pvfs umount still works and does not hang.
    let m = Mount::start(&cluster, &[]);
    m.signal(libc::SIGSTOP);
    let start = Instant::now();
    let out = run_pvfs(&["umount", m.path().to_str().unwrap()], &[], &[]);
    out.ok();
    assert!(!is_mounted(m.path()));
    assert!(start.elapsed() < Duration::from_secs(10));
    drop(m); // SIGKILL works on a stopped process

    // Errors: not a mount point; a mount point that is a file; servers down.
    let out = run_pvfs(&["umount", dir.path().to_str().unwrap()], &[], &[]);
    out.err_containing("not a FUSE mount point");
    let file = dir.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let out = run_pvfs(
        &["mount", "-c", cluster.config_str(), file.to_str().unwrap()],
        &[],
        &[],
    );
    out.err_containing("not a directory");
    for name in cluster.names() {
        cluster.kill(&name, libc::SIGKILL);
    }
    let start = Instant::now();
    let out = run_pvfs(
        &["mount", "-c", cluster.config_str(), mp.to_str().unwrap()],
        &[],
        &[],
    );
    out.err_containing("cannot reach the file system");
    assert!(start.elapsed() < Duration::from_secs(60));
    assert!(!is_mounted(&mp));
}

#[test]
fn a_user_mounts_and_unmounts_without_root() {
    mount::require_fuse();
    // fusermount3 opens /dev/fuse as the calling user: Debian's udev rules make it
    // 0666; container images sometimes leave it 0600. Use the standard mode for the
    // duration of this test.
    let _mode = DevFuseMode::standard();
    let cluster = Cluster::start();
    // Root makes the user a directory (through a root mount).
    let mut m = Mount::start(&cluster, &[]);
    std::fs::create_dir(m.join("home")).unwrap();
    std::os::unix::fs::chown(m.join("home"), Some(65534), Some(65534)).unwrap();
    m.unmount();

    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let conf = base.join("fs.toml");
    std::fs::copy(cluster.config_path(), &conf).unwrap();
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mp = base.join("mnt");
    std::fs::create_dir(&mp).unwrap();
    std::os::unix::fs::chown(&mp, Some(65534), Some(65534)).unwrap();
    struct Detach<'a>(&'a Path);
    impl Drop for Detach<'_> {
        fn drop(&mut self) {
            if is_mounted(self.0) {
                mount::force_detach(self.0);
            }
        }
    }
    let _guard = Detach(&mp);
    let as_user = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(args)
            .env_remove("PVFS_CONFIG")
            .current_dir("/");
        run_for(&mut c, CMD)
    };
    let out = as_user(&[
        pvfs_bin(),
        "mount",
        "-c",
        conf.to_str().unwrap(),
        mp.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "user mount failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_mounted(&mp));
    let script = format!(
        "set -e; cd {mp}/home; head -c 3000000 /dev/urandom > f; cp f g; cmp f g;          stat -c %u:%g g; ls -l; rm f g; ! touch {mp}/not-mine 2>/dev/null",
        mp = mp.display()
    );
    let out = as_user(&["sh", "-c", &script]);
    assert!(
        out.status.success(),
        "as the user on the user's mount: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("65534:65534"));
    let daemon = daemon_pid(&mp).expect("the user's mount process");
    let out = as_user(&[pvfs_bin(), "umount", mp.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "user umount failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&mp));
    common::poll("the user's daemon to exit", Duration::from_secs(20), || {
        (!Path::new(&format!("/proc/{daemon}")).exists() || is_zombie(daemon)).then_some(())
    });
}

/// Sets /dev/fuse to its standard mode 0666 and puts the old mode back on drop.
struct DevFuseMode(Option<u32>);

impl DevFuseMode {
    fn standard() -> DevFuseMode {
        let dev = Path::new("/dev/fuse");
        let old = std::fs::metadata(dev).unwrap().permissions().mode() & 0o7777;
        if old & 0o666 == 0o666 {
            return DevFuseMode(None);
        }
        std::fs::set_permissions(dev, std::fs::Permissions::from_mode(0o666)).unwrap();
        DevFuseMode(Some(old))
    }
}

impl Drop for DevFuseMode {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(old));
        }
    }
}

/// The pid of the background `pvfs mount` process serving `mp`.
fn daemon_pid(mp: &Path) -> Option<u32> {
    let want = mp.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        (args.contains(&b"--daemon-child".as_slice()) && args.contains(&want)).then_some(pid)
    })
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

#[test]
fn pvfs_binary_knows_mount_and_umount() {
    let out = Command::new(pvfs_bin())
        .args(["mount", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--foreground",
        "--attr-timeout",
        "--entry-timeout",
        "--threads",
        "--allow-other",
    ] {
        assert!(text.contains(opt), "pvfs mount --help lacks {opt}:\n{text}");
    }
    let out = Command::new(pvfs_bin())
        .args(["umount", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
}
