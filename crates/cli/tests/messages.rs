//! Every error the CLI reports says each thing once: the one line on stderr, split at
//! ": " into clauses, never holds the same clause twice (compared without case and
//! without the "(os error N)" that `std::io::Error` appends, so "X: X (os error 2)" is
//! a repeat too). Every error path of the CLI known here is run: bare `pvfs` and
//! other usage mistakes, missing, unreadable and broken configuration files, a second
//! server on a store in use, a server that cannot start, missing files, impossible
//! layouts, servers that do not answer, mount and unmount failures (also as a user who
//! may not open `/dev/fuse`), and the mistakes `pvfs` refuses on purpose: a copy
//! between two local files, a configuration written over an existing one, a mount
//! over a mount point. Each error also has to say what it is about.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{have_command, is_root, run_pvfs, scaled, skip, CliOutput, Cluster};

/// Longest a mount command of these tests may take.
const MOUNT_CMD: Duration = Duration::from_secs(120);

/// The clauses of an error line, normalized: split at ": ", trimmed, lower case,
/// without a trailing "(os error N)" or full stop.
fn clauses(line: &str) -> Vec<String> {
    line.split(": ")
        .map(|c| {
            let mut c = c.trim();
            if let Some(i) = c.rfind(" (os error ") {
                if c.ends_with(')') {
                    c = c[..i].trim_end();
                }
            }
            c.trim_end_matches('.').to_lowercase()
        })
        .collect()
}

/// The first thing `line` says twice, if any: a clause that another clause is, or
/// ends with (after a space, e.g. "cannot create /x: /x: ..."), or starts with
/// (before a space, e.g. "/x: /x is ...").
fn repeated_clause(line: &str) -> Option<String> {
    let c = clauses(line);
    let same = |a: &str, b: &str| {
        !b.is_empty()
            && (a == b
                || a.strip_suffix(b).is_some_and(|r| r.ends_with(' '))
                || a.strip_prefix(b).is_some_and(|r| r.starts_with(' ')))
    };
    (0..c.len()).find_map(|i| {
        c[i + 1..].iter().find_map(|d| {
            if same(&c[i], d) {
                Some(d.clone())
            } else if same(d, &c[i]) {
                Some(c[i].clone())
            } else {
                None
            }
        })
    })
}

/// Asserts `out` is a documented failure (one line starting `pvfs: `, non-zero exit
/// status) that says each thing once and mentions every one of `needles`
/// (case-insensitive); returns the line.
#[track_caller]
fn check<'a>(out: &'a CliOutput, needles: &[&str]) -> &'a str {
    let line = out.err_line();
    if let Some(c) = repeated_clause(line) {
        panic!("`pvfs {}` says {c:?} twice: {line:?}", out.args.join(" "));
    }
    let lower = line.to_lowercase();
    for n in needles {
        assert!(
            lower.contains(&n.to_lowercase()),
            "`pvfs {}`: {line:?} should mention {n:?}",
            out.args.join(" ")
        );
    }
    line
}

/// `pvfs ARGS` without `PVFS_CONFIG` in the environment.
fn pvfs(args: &[&str]) -> CliOutput {
    run_pvfs(args, &[], &["PVFS_CONFIG"])
}

#[test]
fn the_check_catches_what_users_saw() {
    for bad in [
        "pvfs: cannot read x.toml: No such file or directory: No such file or directory (os error 2)",
        "pvfs: server s0: storage /s/s0: I/O error: /s/s0/meta.redb is open in another process: \
         I/O error: /s/s0/meta.redb is open in another process: /s/s0/meta.redb is open in another process",
        "pvfs: /mnt: cannot mount: failed to open /dev/fuse: Permission denied: failed to open \
         /dev/fuse: Permission denied",
        "pvfs: pvfs: one binary for servers, administration, the CLI client, benchmarks and the demo",
        "pvfs: cannot create /b-1: /b-1: server s0: cannot connect to 127.0.0.1:1: Connection refused",
        "pvfs: /: /: the root cannot be changed this way",
        "pvfs: Is a directory: is a directory.",
    ] {
        assert!(repeated_clause(bad).is_some(), "not caught: {bad:?}");
    }
    for good in [
        "pvfs: cannot read x.toml: No such file or directory",
        "pvfs: /x: server s0: cannot connect to 127.0.0.1:7000: Connection refused (os error 111)",
        "pvfs: fs.toml:14: servers[2].roles: unknown role \"metta\" (expected \"meta\" or \"data\")",
    ] {
        assert_eq!(repeated_clause(good), None, "{good:?}");
    }
}

#[test]
fn usage_and_configuration_errors_say_each_thing_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ds = d.to_str().unwrap();
    let p = |name: &str| d.join(name).to_str().unwrap().to_string();

    // Usage.
    let out = pvfs(&[]);
    check(&out, &["no command", "pvfs --help"]);
    assert_eq!(out.status.code(), Some(2));
    check(&pvfs(&["bogus"]), &["bogus"]);
    check(&pvfs(&["bench"]), &["concurrent", "pvfs bench --help"]);
    check(&pvfs(&["ls", "/"]), &["--config"]);
    check(&pvfs(&["cp", "-c", "x.toml"]), &["pvfs cp --help"]);
    check(
        &pvfs(&["genconfig", "--servers", "four", "--dir", ds, "-o", "-"]),
        &["four"],
    );
    check(
        &pvfs(&["mkdir", "-c", "x.toml", "-m", "999", "/x"]),
        &["999", "octal"],
    );

    // genconfig's own checks, and where it writes.
    let fs = p("fs.toml");
    let gen = |extra: &[&str], out: &str| {
        let mut args = vec!["genconfig", "--dir", ds, "--port", "0", "-o", out];
        args.extend(extra);
        pvfs(&args)
    };
    check(&gen(&["--servers", "0"], &fs), &["servers"]);
    check(
        &gen(&["--servers", "4", "--meta-servers", "5"], &fs),
        &["meta"],
    );
    check(
        &gen(&["--servers", "4", "--stripe-count", "9"], &fs),
        &["stripe"],
    );
    check(
        &gen(&["--servers", "2"], &p("no/such/dir/fs.toml")),
        &[
            "cannot write",
            "no/such/dir/fs.toml",
            "no such file or directory",
        ],
    );
    check(&gen(&["--servers", "2"], ds), &[ds, "is a directory"]);
    gen(&["--servers", "2"], &fs).ok();
    check(
        &gen(&["--servers", "2"], &fs),
        &[&fs, "already exists", "--force"],
    );

    // A demo kept where one is kept already; a demo of no servers.
    let kept = d.join("kept");
    std::fs::create_dir(&kept).unwrap();
    std::fs::copy(&fs, kept.join("pvfs.toml")).unwrap();
    check(
        &pvfs(&["demo", "--keep", kept.to_str().unwrap()]),
        &["pvfs.toml already exists", "pvfs stop"],
    );
    check(&pvfs(&["demo", "--servers", "0"]), &["number of servers"]);

    // Configuration files that cannot be read or used.
    check(
        &pvfs(&["ls", "-c", &p("missing.toml"), "/"]),
        &["cannot read", "missing.toml", "no such file or directory"],
    );
    check(
        &pvfs(&["ls", "-c", ds, "/"]),
        &["cannot read", "is a directory"],
    );
    let garbage = p("garbage.toml");
    std::fs::write(&garbage, "servers = [\n").unwrap();
    check(&pvfs(&["ping", "-c", &garbage]), &["garbage.toml:"]);
    let broken = p("broken.toml");
    let text = std::fs::read_to_string(&fs).unwrap();
    std::fs::write(&broken, text.replacen("\"meta\", ", "\"metta\", ", 1)).unwrap();
    check(&pvfs(&["ping", "-c", &broken]), &["metta"]);
    check(
        &pvfs(&["server", "-c", &broken, "--name", "s0"]),
        &["metta"],
    );
    check(&pvfs(&["server", "-c", &fs, "--name", "s9"]), &["s9"]);
    if !is_root() {
        let private = p("private.toml");
        std::fs::copy(&fs, &private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o000)).unwrap();
        check(
            &pvfs(&["ls", "-c", &private, "/"]),
            &["cannot read", "permission denied"],
        );
    }

    // A copy between two local files is a mistake.
    let local = p("local.dat");
    std::fs::write(&local, b"local bytes").unwrap();
    let out = pvfs(&["cp", "-c", &fs, &local, &p("copy.dat")]);
    check(&out, &["pvfs:/"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");

    // Unmounting what is not mounted, and mounts that cannot start: checks that come
    // before any server is asked.
    check(&pvfs(&["umount", ds]), &[ds, "not a fuse mount point"]);
    check(
        &pvfs(&["umount", "/proc"]),
        &["/proc", "not a fuse mount point"],
    );
    check(
        &pvfs(&["mount", "-c", &fs, "--log", &p("no/such/dir/mount.log"), ds]),
        &["mount.log", "no such file or directory"],
    );
    check(
        &pvfs(&["mount", "-c", &fs, &p("no-such-dir")]),
        &["no-such-dir", "no such file or directory"],
    );
    check(
        &pvfs(&["mount", "-c", &fs, &local]),
        &["local.dat", "not a directory"],
    );
    check(
        &pvfs(&["mount", "-c", &p("missing.toml"), ds]),
        &["missing.toml"],
    );
    // /proc is always a mount point. Even if the check were gone this mounts
    // nothing: no server of this configuration runs, so the mount would fail later.
    check(
        &pvfs(&["mount", "-c", &fs, "/proc"]),
        &["/proc", "already a mount point", "umount /proc"],
    );
}

#[test]
fn errors_of_a_file_system_whose_servers_are_down_say_each_thing_once() {
    let cluster = Cluster::builder().servers(2).configure();
    let cfg = cluster.config_str();
    let local = cluster.dir().join("local.dat");
    std::fs::write(&local, b"local bytes").unwrap();
    let local = local.to_str().unwrap();
    let back = cluster.dir().join("back.dat");
    let back = back.to_str().unwrap();
    let mp = cluster.dir().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let mp = mp.to_str().unwrap();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["ls", "/"], vec!["cannot connect"]),
        (vec!["ls", "-l", "/d"], vec!["/d", "cannot connect"]),
        (vec!["stat", "/x"], vec!["/x", "cannot connect"]),
        (vec!["ping"], vec!["2 of 2 servers not answering"]),
        (vec!["df"], vec!["2 of 2 servers not answering"]),
        (vec!["mkdir", "/x"], vec!["/x"]),
        (vec!["rm", "/x"], vec!["/x"]),
        (vec!["mv", "/x", "/y"], vec!["cannot connect"]),
        (vec!["ln", "-s", "t", "/l"], vec!["cannot connect"]),
        (vec!["cp", local, "pvfs:/x"], vec!["/x", "cannot connect"]),
        (vec!["cp", "pvfs:/x", back], vec!["/x", "cannot connect"]),
        (vec!["layout", "/x"], vec!["/x"]),
        (vec!["setlayout", "/", "--stripe-count", "1"], vec!["/"]),
        (vec!["fsck"], vec!["cannot connect"]),
        (
            vec!["bench", "concurrent", "--size-per-client", "1M"],
            vec!["cannot connect"],
        ),
        (
            vec!["bench", "meta", "--files", "10"],
            vec!["cannot connect"],
        ),
        (
            vec!["bench", "mixed", "--duration", "1s"],
            vec!["cannot connect"],
        ),
        (vec!["mount", mp], vec!["cannot reach the file system"]),
        (
            vec!["mount", "--foreground", mp],
            vec!["cannot reach the file system"],
        ),
    ];
    for (args, needles) in cases {
        let mut all = vec![args[0], "-c", cfg];
        if args[0] == "bench" {
            all = vec!["bench", args[1], "-c", cfg];
            all.extend(&args[2..]);
        } else {
            all.extend(&args[1..]);
        }
        check(&pvfs(&all), &needles);
    }
    assert!(!mount::is_mounted(Path::new(mp)));
}

#[test]
fn errors_of_a_running_file_system_say_each_thing_once() {
    let cluster = Cluster::start();
    let cfg = cluster.config_str();
    let cli = |args: &[&str]| {
        let mut all = vec![args[0], "-c", cfg];
        all.extend(&args[1..]);
        pvfs(&all)
    };
    let local = cluster.dir().join("local.dat");
    std::fs::write(&local, b"local bytes").unwrap();
    let local = local.to_str().unwrap();
    cli(&["mkdir", "-p", "/d/sub"]).ok();
    cli(&["cp", local, "pvfs:/file"]).ok();

    // A second server on a store in use, and one not in the configuration.
    check(
        &cli(&["server", "--name", "s0"]),
        &["s0", "already running as pid", "open in another process"],
    );
    check(&cli(&["server", "--name", "s9"]), &["s9"]);

    // Missing files and directories, and paths of the wrong kind.
    for (args, needles) in [
        (
            vec!["stat", "/nope"],
            vec!["/nope", "no such file or directory"],
        ),
        (vec!["ls", "/nope/x"], vec!["no such file or directory"]),
        (vec!["ls", "/file/x"], vec!["not a directory"]),
        (vec!["rm", "/nope"], vec!["/nope"]),
        (vec!["rm", "-r", "/nope"], vec!["/nope"]),
        (vec!["rm", "/d"], vec!["/d", "-r"]),
        (vec!["mv", "/nope", "/x"], vec!["no such file or directory"]),
        (vec!["mv", "/d", "/d/sub/x"], vec!["/d"]),
        (vec!["mv", "/", "/x"], vec!["root"]),
        (vec!["mkdir", "/d"], vec!["/d", "file exists"]),
        (vec!["mkdir", "/nope/x"], vec!["no such file or directory"]),
        (vec!["ln", "-s", "x", "/file"], vec!["file exists"]),
        (vec!["layout", "/nope"], vec!["/nope"]),
        (vec!["layout", "/d"], vec!["/d"]),
        (vec!["cp", "pvfs:/nope", local], vec!["/nope"]),
        (vec!["cp", "pvfs:/d", local], vec!["/d", "is a directory"]),
        (
            vec!["cp", "/no/such/local", "pvfs:/x"],
            vec!["/no/such/local"],
        ),
        (
            vec!["cp", "pvfs:/file", "/no/such/dir/x"],
            vec!["/no/such/dir/x"],
        ),
        (
            vec!["mkdir", &format!("/{}", "n".repeat(256))],
            vec!["too long"],
        ),
    ] {
        check(&cli(&args), &needles);
    }

    // Impossible layouts and options.
    for (args, needles) in [
        (
            vec!["cp", "--stripe-count", "99", local, "pvfs:/bad"],
            vec!["stripe count"],
        ),
        (
            vec!["cp", "--stripe-size", "100", local, "pvfs:/bad"],
            vec!["stripe size"],
        ),
        (
            vec!["setlayout", "/d", "--stripe-count", "99"],
            vec!["stripe count"],
        ),
        (vec!["setlayout", "/d"], vec!["--stripe-size"]),
        (
            vec!["cp", "--stripe-size", "12Q", local, "pvfs:/bad"],
            vec!["12Q"],
        ),
    ] {
        check(&cli(&args), &needles);
    }
    for args in [
        ["bench", "concurrent", "-c", cfg, "--clients", "0"],
        ["bench", "meta", "-c", cfg, "--clients", "0"],
    ] {
        check(&pvfs(&args), &["--clients"]);
    }
    check(&cli(&["stat", "/bad"]), &["/bad"]);
}

#[test]
fn a_server_whose_port_is_taken_says_so_once() {
    // s0's port, held by this test while the server tries it (a new configuration
    // when a test beside took the port first).
    let (cluster, addr, _taken) = (0..4)
        .find_map(|_| {
            let cluster = Cluster::builder().servers(2).configure();
            let addr = cluster.config().servers[0].address.clone();
            let taken = std::net::TcpListener::bind(&addr).ok()?;
            Some((cluster, addr, taken))
        })
        .expect("no configuration with a free port for s0");
    let cfg = cluster.config_str();
    check(
        &pvfs(&["server", "-c", cfg, "--name", "s0"]),
        &[
            "server s0",
            "cannot listen",
            &addr,
            "address already in use",
        ],
    );
    let out = pvfs(&["start", "-c", cfg]);
    pvfs(&["stop", "-c", cfg]).ok();
    check(&out, &["s0 did not start", "cannot listen", "server.log"]);
}

#[test]
fn a_server_that_cannot_start_says_why_once() {
    // A configuration written over one whose storage exists: a new file system,
    // which the old storage refuses.
    let cluster = Cluster::builder().servers(2).configure();
    let cfg = cluster.config_str();
    let first = pvfs(&["start", "-c", cfg]);
    first.ok();
    pvfs(&["stop", "-c", cfg]).ok();
    let dir = cluster.dir().to_str().unwrap();
    pvfs(&[
        "genconfig",
        "--servers",
        "2",
        "--dir",
        dir,
        "--port",
        "0",
        "--force",
        "-o",
        cfg,
    ])
    .ok();
    let out = pvfs(&["start", "-c", cfg]);
    let stop = pvfs(&["stop", "-c", cfg]);
    stop.ok();
    check(
        &out,
        &["did not start", "belongs to file system", "server.log"],
    );
}

#[test]
fn a_server_refuses_fault_injection_it_does_not_understand() {
    // A typo in the test-only PVFS_FAULTS must not silently turn injection off.
    let cluster = Cluster::builder().servers(1).configure();
    for (faults, says) in [
        ("drop-reply:Creat:1", "no operation \"Creat\""),
        ("drop-reply:Create:x", "bad count"),
        ("drop:Create:1", "unknown fault"),
    ] {
        let out = run_pvfs(
            &["server", "-c", cluster.config_str(), "--name", "s0"],
            &[("PVFS_FAULTS", faults)],
            &["PVFS_CONFIG"],
        );
        check(&out, &["PVFS_FAULTS", says]);
    }
}

#[test]
fn mounting_over_a_mount_is_refused() {
    if !is_root() {
        skip(
            "mounting_over_a_mount_is_refused",
            "a root mount of the file system is needed",
        );
        return;
    }
    let cluster = Cluster::start();
    let m = mount::Mount::start(&cluster, &[]);
    let mp = m.path().to_path_buf();
    let count = || {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        text.lines()
            .filter(|l| l.split(' ').nth(4) == mp.to_str())
            .count()
    };
    assert_eq!(count(), 1);
    let mp_str = mp.to_str().unwrap();
    for extra in [&[][..], &["--foreground"][..]] {
        let mut args = vec!["mount", "-c", cluster.config_str()];
        args.extend(extra);
        args.push(mp_str);
        let out = pvfs(&args);
        let stacked = count();
        // A second mount, if any, goes before anything is asserted.
        for _ in 1..stacked {
            mount::force_detach(&mp);
        }
        assert_eq!(stacked, 1, "`pvfs {}` stacked a mount", args.join(" "));
        check(
            &out,
            &[
                mp_str,
                "already a mount point",
                "pvfs:",
                &format!("pvfs umount {mp_str}"),
            ],
        );
    }
    // The first mount still serves.
    assert!(std::fs::read_dir(&mp).is_ok());
    drop(m);
}

#[test]
fn a_user_who_may_not_open_dev_fuse_is_told_what_to_do() {
    let name = "a_user_who_may_not_open_dev_fuse_is_told_what_to_do";
    mount::require_fuse();
    if !is_root() {
        skip(
            name,
            "runs `pvfs mount` as uid 65534 through setpriv, as root",
        );
        return;
    }
    for tool in ["setpriv", "fusermount3"] {
        if !have_command(tool) {
            skip(name, &format!("{tool} is not installed"));
            return;
        }
    }
    let dev = std::fs::metadata("/dev/fuse").unwrap();
    assert!(dev.file_type().is_char_device());
    // The mount runs in a private mount namespace with a 0600 copy of the device over
    // /dev/fuse, so the host's device (whatever its mode, whoever changes it meanwhile)
    // stays as it is. Without unshare, the host's device must be closed to others.
    let private_dev = have_command("unshare");
    if !private_dev && dev.mode() & 0o006 != 0 {
        skip(
            name,
            "/dev/fuse is open to all users and unshare is missing",
        );
        return;
    }
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let conf = base.join("fs.toml");
    std::fs::copy(cluster.config_path(), &conf).unwrap();
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mp = base.join("mnt");
    std::fs::create_dir(&mp).unwrap();
    std::os::unix::fs::chown(&mp, Some(65534), Some(65534)).unwrap();
    let devdir = base.join("dev");
    std::fs::create_dir(&devdir).unwrap();
    for foreground in [false, true] {
        let mut pvfs_args = vec![
            common::pvfs_bin(),
            "mount",
            "-c",
            conf.to_str().unwrap(),
            mp.to_str().unwrap(),
        ];
        if foreground {
            pvfs_args.insert(2, "--foreground");
        }
        let setpriv = [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ];
        let mut cmd = if private_dev {
            let rdev = dev.rdev();
            let (major, minor) = (libc::major(rdev), libc::minor(rdev));
            let script = format!(
                "mount -t tmpfs -o mode=755 tmpfs \"$1\" && mknod -m 600 \"$1/fuse\" c {major} {minor} \
                 && mount --bind \"$1/fuse\" /dev/fuse && shift && exec \"$@\""
            );
            let mut c = Command::new("unshare");
            c.args(["-m", "--propagation", "private", "sh", "-c", &script, "sh"])
                .arg(&devdir)
                .args(setpriv)
                .args(&pvfs_args);
            c
        } else {
            let mut c = Command::new(setpriv[0]);
            c.args(&setpriv[1..]).args(&pvfs_args);
            c
        };
        cmd.env_remove("PVFS_CONFIG")
            .env_remove("PVFS_LOG")
            .current_dir("/");
        let out = mount::run_for(&mut cmd, scaled(MOUNT_CMD));
        if mount::is_mounted(&mp) {
            mount::force_detach(&mp);
            panic!("uid 65534 mounted although /dev/fuse is closed to it");
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Only the error line: a foreground mount logs before it fails.
        let line = stderr
            .lines()
            .rev()
            .find(|l| l.starts_with("pvfs: "))
            .unwrap_or_else(|| panic!("no error line in {stderr:?}"));
        assert!(!out.status.success(), "{stderr}");
        assert_eq!(repeated_clause(line), None, "{line:?} repeats itself");
        for needle in [
            mp.to_str().unwrap(),
            "/dev/fuse",
            "mode 0600",
            "chmod 0666 /dev/fuse",
            "udev",
            "mount as root",
            "--allow-other",
        ] {
            assert!(line.contains(needle), "{line:?} should mention {needle:?}");
        }
        if !foreground {
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
        }
    }
    assert!(!mount::is_mounted(&mp));
}
