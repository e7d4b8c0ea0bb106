//! The FUSE mount behaves like a local file system: real
//! servers, a real mount in a temporary directory, real programs.
//!
//! - `tests/fuse/semantics.c`, compiled here with `cc`, checks each POSIX semantic
//!   one by one, run as root and as an unprivileged user (uid 65534, on a mount with
//!   `allow_other`, against fixtures root prepared);
//! - a user mounting and unmounting without root, in a private mount namespace (the
//!   host's `/dev/fuse` and mount table are left alone);
//! - ordinary tools (`dd`, `cmp`, `cp -a`, `diff -r`, `ls -l`, `find`, `du`, `df`,
//!   `rm -rf`) on the mount, with the data compared;
//! - POSIX ACLs with `setfacl` and `getfacl`: named users and groups, the mask,
//!   default ACLs inherited by new files and directories (the umask then does not
//!   apply), enforced for another user, and seen by another client;
//! - a file renamed over while others read it: never missing, never short;
//! - a directory of 100k entries listed through the mount;
//! - the mount's life: background mount and `pvfs umount`, SIGTERM/SIGINT
//!   unmounting cleanly, `pvfs umount` of a mount whose daemon was killed or
//!   stopped, and the errors of a mount that cannot work.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;
#[path = "fuse/replace.rs"]
mod replace;

use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{pvfs_bin, run_pvfs, Cluster, Rng, TestClient};
use mount::{is_mounted, run_for, sh, Mount};

/// Longest any program on the mount may take in these tests (`run_for`, `sh` and
/// `TestClient::run` scale it by `PVFS_TEST_SLOWDOWN`).
fn cmd_deadline() -> Duration {
    Duration::from_secs(120)
}

/// Compiles the semantics checker into `dir`.
fn build_semantics(dir: &Path) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuse/semantics.c");
    let exe = dir.join("semantics");
    // No deadline: compiling is not what the test is about.
    let out = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cannot run cc");
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
    let out = run_for(cmd, cmd_deadline());
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
    // "# N checks, M failed": the checker ran its checks (not none) and all held.
    let summary = text.lines().last().unwrap_or("");
    let nums: Vec<u64> = summary
        .trim_start_matches("# ")
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect();
    assert!(
        summary.starts_with("# ") && nums.len() == 2 && nums[0] > 0 && nums[1] == 0,
        "semantics as {who}: summary {summary:?}"
    );
    eprintln!("semantics as {who}: {summary}");
}

#[test]
fn posix_semantics_as_root_and_as_an_unprivileged_user() {
    semantics_on(
        "posix_semantics_as_root_and_as_an_unprivileged_user",
        &["--allow-other"],
    );
}

#[test]
fn posix_semantics_without_the_page_cache() {
    semantics_on(
        "posix_semantics_without_the_page_cache",
        &["--allow-other", "--direct-io"],
    );
}

#[test]
fn posix_semantics_with_write_behind() {
    // Writes answered before the servers have them: every check must still hold
    // for the programs of this mount (they read their own writes, see the sizes they
    // wrote, and truncation, fsync and close wait for the writes in flight).
    semantics_on(
        "posix_semantics_with_write_behind",
        &["--allow-other", "--write-behind"],
    );
}

/// Runs the semantics checker as root and as uid 65534 on a mount with `opts` (test
/// `test` is skipped, with the reason, without root, `cc` or `setpriv`).
fn semantics_on(test: &str, opts: &[&str]) {
    if !common::is_root() {
        common::skip(
            test,
            "running the checker as root and as uid 65534 needs root",
        );
        return;
    }
    for tool in ["cc", "setpriv"] {
        if !common::have_command(tool) {
            common::skip(
                test,
                &format!("`{tool}` is not installed (scripts/install-deps)"),
            );
            return;
        }
    }
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

/// Runs `script` with `sh` as uid 65534; returns its exit status and output.
fn as_nobody(script: &str) -> (bool, String) {
    let out = run_for(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
            ])
            .arg(script),
        cmd_deadline(),
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn posix_acls_with_setfacl_and_getfacl() {
    const TEST: &str = "posix_acls_with_setfacl_and_getfacl";
    if !common::is_root() {
        common::skip(TEST, "checking ACLs as another user needs root");
        return;
    }
    for tool in ["setfacl", "getfacl", "setpriv"] {
        if !common::have_command(tool) {
            common::skip(
                TEST,
                &format!("`{tool}` is not installed (scripts/install-deps)"),
            );
            return;
        }
    }
    let cluster = Cluster::start();
    let m = Mount::start(&cluster, &["--allow-other"]);
    let d = m.join("acl");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = d.to_str().unwrap().to_string();
    let getfacl = |p: &str| sh(&format!("getfacl -n --omit-header -E {p}"), cmd_deadline());

    // A named user and the mask on a file only root could read.
    sh(
        &format!("cd {d} && echo secret > f && chmod 600 f && setfacl -m u:65534:r,g::-,m::r f"),
        cmd_deadline(),
    );
    assert_eq!(
        getfacl(&format!("{d}/f")),
        "user::rw-\nuser:65534:r--\ngroup::---\nmask::r--\nother::---\n\n"
    );
    let ls = sh(&format!("ls -l {d}/f"), cmd_deadline());
    assert!(
        ls.starts_with("-rw-r-----+ "),
        "the mask shows as the group bits: {ls}"
    );
    let (ok, out) = as_nobody(&format!("cat {d}/f"));
    assert!(ok && out == "secret\n", "the named user reads: {out}");
    let (ok, _) = as_nobody(&format!("echo x >> {d}/f"));
    assert!(!ok, "the named user may not write");
    // chmod moves the mask: the named user's read goes with it.
    sh(&format!("chmod g-r {d}/f"), cmd_deadline());
    assert!(getfacl(&format!("{d}/f")).contains("mask::---"));
    let (ok, _) = as_nobody(&format!("cat {d}/f"));
    assert!(!ok, "the mask takes the named user's read away");
    // Only the owner sets ACLs; another client sees them.
    let (ok, out) = as_nobody(&format!("setfacl -m u:65534:rw {d}/f"));
    assert!(!ok && out.contains("Operation not permitted"), "{out}");
    let value = tc_getxattr(&cluster, "/acl/f", pvfs_proto::acl::XATTR_ACCESS);
    let entries = pvfs_proto::acl::from_xattr(&value).unwrap();
    assert!(entries
        .iter()
        .any(|e| e.tag == pvfs_proto::acl::USER && e.id == 65534));
    // setfacl -b leaves the permission bits only.
    sh(&format!("setfacl -b {d}/f"), cmd_deadline());
    assert_eq!(
        getfacl(&format!("{d}/f")),
        "user::rw-\ngroup::---\nother::---\n\n"
    );

    // A default ACL: inherited by new files and directories, whatever the umask.
    sh(
        &format!("cd {d} && mkdir dd && setfacl -d -m u:65534:rw,g::r,o::- dd"),
        cmd_deadline(),
    );
    sh(
        &format!("cd {d}/dd && umask 077 && echo new > new && mkdir sub"),
        cmd_deadline(),
    );
    let ls = sh(&format!("ls -ld {d}/dd/new {d}/dd/sub"), cmd_deadline());
    assert!(
        ls.contains("-rw-rw----+ ") && ls.contains("drwxrw----+ "),
        "{ls}"
    );
    assert_eq!(
        getfacl(&format!("{d}/dd/new")),
        "user::rw-\nuser:65534:rw-\ngroup::r--\nmask::rw-\nother::---\n\n"
    );
    let sub = getfacl(&format!("{d}/dd/sub"));
    assert!(
        sub.contains("default:user:65534:rw-"),
        "a new directory inherits the default ACL: {sub}"
    );
    let (ok, out) = as_nobody(&format!("echo mine > {d}/dd/new && cat {d}/dd/new"));
    assert!(
        ok && out == "mine\n",
        "the inherited ACL lets the user write: {out}"
    );
    // Without a default ACL the umask applies as usual.
    sh(
        &format!("cd {d} && umask 027 && echo p > plain"),
        cmd_deadline(),
    );
    let ls = sh(&format!("ls -l {d}/plain"), cmd_deadline());
    assert!(ls.starts_with("-rw-r----- "), "{ls}");
    // A directory's own ACL decides who may create in it.
    sh(
        &format!("cd {d} && mkdir w && setfacl -m u:65534:rwx w"),
        cmd_deadline(),
    );
    let (ok, out) = as_nobody(&format!("touch {d}/w/made && rm {d}/w/made"));
    assert!(
        ok,
        "a named user with write permission on the directory creates: {out}"
    );
}

/// Extended attribute `name` of pvfs path `path`, read by another client.
fn tc_getxattr(cluster: &Cluster, path: &str, name: &str) -> Vec<u8> {
    let (path, name) = (path.to_string(), name.to_string());
    cluster.client().run(cmd_deadline(), async move |c| {
        let h = c.lstat(&path).await.unwrap().handle;
        c.getxattr(h, &name).await.unwrap()
    })
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
        cmd_deadline(),
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
        cmd_deadline(),
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
    let files = sh(
        &format!("find {} -type f | wc -l", t.display()),
        cmd_deadline(),
    );
    assert_eq!(files.trim(), "150");
    let links = sh(
        &format!("find {} -type l | wc -l", t.display()),
        cmd_deadline(),
    );
    assert_eq!(links.trim(), "6");
    let lsr = sh(&format!("ls -lR {}", t.display()), cmd_deadline());
    assert!(
        lsr.contains("f24.dat") && lsr.contains("link -> sub/f0.dat"),
        "{lsr}"
    );
    let du = sh(&format!("du -sk {}", t.display()), cmd_deadline());
    let kib: u64 = du.split_whitespace().next().unwrap().parse().unwrap();
    assert!(
        kib >= total / 1024,
        "du says {kib} KiB for {total} bytes of files"
    );
    let df = sh(&format!("df -k {}", m.path().display()), cmd_deadline());
    assert!(df.contains(&m.path().display().to_string()), "{df}");
    sh(&format!("rm -rf {}", t.display()), cmd_deadline());
    assert!(!t.exists());
    assert_eq!(
        std::fs::read_dir(m.path()).unwrap().count(),
        1,
        "only /random left"
    );

    // The same file seen by another client right away.
    let tc = cluster.client();
    let st = tc.run(cmd_deadline(), async |c| c.stat("/random").await.unwrap());
    assert_eq!(st.size, (24 << 20) + 4321);

    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());
}

/// Replace by rename is atomic for readers on the mount: one thread writes new
/// versions of a file and renames each over it (what editors, package managers and
/// git do) while two others open and read it, 20,000 times in all: every open
/// finds the file, old or new, and every read gets it whole. (The object a reader's
/// name led to may be gone by the time it opens it: the mount says ESTALE, and the
/// kernel looks the name up again.)
#[test]
fn a_file_renamed_over_is_never_missing_to_readers() {
    const OPENS: usize = 10_000;
    let cluster = Cluster::start();
    let m = Mount::start(&cluster, &[]);
    let (renames, seen) = replace::replace_while_reading(m.path(), m.path(), "cfg", OPENS);
    replace::assert_all_whole(OPENS, renames, &seen);
    eprintln!(
        "{} opens during {renames} replacements, all whole",
        2 * OPENS
    );
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
        cmd_deadline(),
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
        common::scaled(Duration::from_secs(20)),
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
    assert!(start.elapsed() < common::scaled(Duration::from_secs(10)));
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
    assert!(start.elapsed() < common::scaled(Duration::from_secs(60)));
    assert!(!is_mounted(&mp));
}

/// A user (uid 65534) mounts the file system with `pvfs mount` (through the setuid
/// `fusermount3`), works on it and unmounts it with `pvfs umount`, without root. The
/// user cannot read the file system's key, so the mount proves its user with MUNGE
/// (a private `munged`), and the servers hold it to that user's rights.
///
/// `fusermount3` opens `/dev/fuse` as the calling user: Debian's udev rules make it
/// 0666, but container images (this one among them) leave it 0600. The test changes
/// nothing on the host for that: the user's part runs in a private mount namespace
/// (`unshare -m --propagation private`) where a 0666 `fuse` device node, made on a
/// small tmpfs, is bind-mounted over `/dev/fuse`. The user's mount, the user's
/// commands, and the checks that the mount is there and then gone all run inside that
/// namespace; the host's `/dev/fuse` keeps its mode and its mount table never sees
/// the mount. Everything mounted inside goes away when the namespace's last process
/// exits (even on SIGKILL); a user's mount daemon left over by a failure is killed.
/// Needs root (to make the namespace, the node and the user's directory), `unshare`
/// and `setpriv`: without them the test is skipped (under `CI=true` it fails).
#[test]
fn a_user_mounts_and_unmounts_without_root() {
    const TEST: &str = "a_user_mounts_and_unmounts_without_root";
    mount::require_fuse();
    if !common::is_root() {
        common::skip(
            TEST,
            "making the user's mount namespace and /dev/fuse node needs root",
        );
        return;
    }
    for tool in ["unshare", "setpriv", "mknod", "mount", "awk"] {
        if !common::have_command(tool) {
            common::skip(
                TEST,
                &format!("{tool} is not installed (util-linux, coreutils)"),
            );
            return;
        }
    }
    let host_mode = std::fs::metadata("/dev/fuse").unwrap().permissions().mode();
    // The user cannot read the file system's key: the user's mount proves its user
    // with MUNGE (a private munged for this test).
    let Some(munged) = common::Munged::start(TEST) else {
        return;
    };
    let cluster = Cluster::builder().munge(&munged).start();
    // Root makes the user a directory (through a root mount).
    let mut m = Mount::start(&cluster, &[]);
    std::fs::create_dir(m.join("home")).unwrap();
    std::os::unix::fs::chown(m.join("home"), Some(65534), Some(65534)).unwrap();
    m.unmount();

    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let conf = cluster.user_config();
    let mp = base.join("mnt");
    std::fs::create_dir(&mp).unwrap();
    std::os::unix::fs::chown(&mp, Some(65534), Some(65534)).unwrap();
    let devdir = base.join("dev");
    std::fs::create_dir(&devdir).unwrap();
    /// Kills a user's mount daemon for `mp` still running when the test ends.
    struct KillDaemon<'a>(&'a Path);
    impl Drop for KillDaemon<'_> {
        fn drop(&mut self) {
            if let Some(pid) = daemon_pid(self.0) {
                // SAFETY: kill(2) on the pid of this test's mount daemon.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                }
            }
        }
    }
    let _guard = KillDaemon(&mp);
    // What the user does on the user's mount.
    let work = format!(
        "set -e; cd {mp}/home; head -c 3000000 /dev/urandom > f; cp f g; cmp f g; \
         stat -c %u:%g g; ls -l; rm f g; ! touch {mp}/not-mine 2>/dev/null",
        mp = mp.display()
    );
    // Runs as root inside the new namespace; the user's steps through setpriv.
    let script = r#"set -eu
devdir=$1 conf=$2 mp=$3 pvfs=$4 work=$5
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
mounted() { awk -v mp="$mp" '$5 == mp { found = 1 } END { exit !found }' /proc/self/mountinfo; }
mount -t tmpfs -o mode=755,size=64k pvfs-test-dev "$devdir"
mknod -m 666 "$devdir/fuse" c 10 229
mount --bind "$devdir/fuse" /dev/fuse
[ "$(stat -c %a /dev/fuse)" = 666 ] || { echo "/dev/fuse is not 0666 inside" >&2; exit 1; }
cd /
as_user env -u PVFS_CONFIG "$pvfs" mount -c "$conf" "$mp"
mounted || { echo "not mounted after the user's pvfs mount" >&2; exit 1; }
as_user sh -c "$work"
as_user "$pvfs" umount "$mp"
if mounted; then echo "still mounted after the user's pvfs umount" >&2; exit 1; fi
echo unmounted
"#;
    let out = run_for(
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
            .arg(&devdir)
            .arg(&conf)
            .arg(&mp)
            .arg(pvfs_bin())
            .arg(&work)
            .env_remove("PVFS_CONFIG"),
        cmd_deadline(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the user's mount, work and umount ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("65534:65534"),
        "the user's file is the user's: {stdout}"
    );
    assert_eq!(stdout.lines().last(), Some("unmounted"), "{stdout}");
    common::poll(
        "the user's daemon to exit",
        common::scaled(Duration::from_secs(20)),
        || daemon_pid(&mp).is_none_or(is_zombie).then_some(()),
    );
    // The host saw nothing of it.
    assert!(!is_mounted(&mp), "the user's mount leaked to the host");
    assert!(!is_mounted(&devdir), "the device tmpfs leaked to the host");
    assert_eq!(
        std::fs::metadata("/dev/fuse").unwrap().permissions().mode(),
        host_mode,
        "the host's /dev/fuse changed mode"
    );
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
