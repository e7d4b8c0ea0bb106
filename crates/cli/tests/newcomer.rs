//! What a new user reaches for first, through the `pvfs` command line against real
//! servers: paths written `pvfs:/x` in every command (as `pvfs cp` needs them),
//! `pvfs cat`, `ls -a`/`-A`, `cp -r` in every direction, `start` run twice, and a
//! user who cannot authenticate told so once, with no server called down.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::{assert_bytes_eq, is_root, run_pvfs, run_pvfs_as, skip, Cluster, Rng};

/// Names listed by `pvfs ls ARGS`, one per line.
fn names(cluster: &Cluster, args: &[&str]) -> Vec<String> {
    let mut all = vec!["ls"];
    all.extend(args);
    cluster
        .run_cli(&all)
        .ok()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn paths_cat_listings_and_recursive_copies_work_as_users_expect() {
    let cluster = Cluster::start();
    let cli = |args: &[&str]| cluster.run_cli(args);
    let mut rng = Rng::new(0x5eed_0031);

    // Every command takes pvfs:/x and pvfs:///x as it takes /x.
    cli(&["mkdir", "pvfs:/d", "pvfs:///e"]).ok();
    let content = rng.bytes(3 << 20 | 12345);
    let local = cluster.dir().join("f.bin");
    std::fs::write(&local, &content).unwrap();
    cli(&["cp", "-q", local.to_str().unwrap(), "pvfs:///d/f"]).ok();
    let v = cli(&["stat", "--json", "pvfs:/d/f"]).json();
    assert_eq!(v["size"], content.len() as u64);
    cli(&["ln", "pvfs:/d/f", "pvfs:/d/g"]).ok();
    cli(&["mv", "pvfs:/d/g", "pvfs:///e/g"]).ok();
    assert_eq!(names(&cluster, &["pvfs:/e"]), ["g"]);
    cli(&["rm", "pvfs:/e/g"]).ok();
    assert!(names(&cluster, &["pvfs:///e"]).is_empty());
    // A symbolic link's target is text, kept as written.
    cli(&["ln", "-s", "pvfs:/d/f", "/e/s"]).ok();
    let v = cli(&["stat", "--json", "--no-follow", "/e/s"]).json();
    assert_eq!(v["target"], "pvfs:/d/f", "{v}");

    // cat: one file, two in a row, and a reader that stops early.
    let out = Command::new(common::pvfs_bin())
        .args(["cat", "pvfs:/d/f", "/d/f", "-c", cluster.config_str()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_bytes_eq(&out.stdout[..content.len()], &content, "cat, first");
    assert_bytes_eq(&out.stdout[content.len()..], &content, "cat, second");
    let shell = format!(
        "set -o pipefail; {} cat /d/f -c {} | head -c 10 | wc -c",
        common::pvfs_bin(),
        cluster.config_str()
    );
    let out = Command::new("bash").args(["-c", &shell]).output().unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "cat into a reader that stops early: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "10");
    cli(&["cat", "/d"]).err_line();
    cli(&["cat", "/d/none"]).err_containing("/d/none");

    // ls hides names that begin with a dot unless -a (with . and ..) or -A.
    cli(&["mkdir", "/d/.hidden"]).ok();
    assert_eq!(names(&cluster, &["/d"]), ["f"]);
    assert_eq!(names(&cluster, &["-A", "/d"]), [".hidden", "f"]);
    assert_eq!(names(&cluster, &["-a", "/d"]), [".", "..", ".hidden", "f"]);
    let long = cli(&["ls", "-la", "/d"]).ok().to_string();
    let dot = long.lines().next().unwrap();
    assert!(dot.starts_with('d') && dot.ends_with(" ."), "{long}");

    // cp -r: a local tree into pvfs, within pvfs, and back, the same tree each time.
    let tree = cluster.dir().join("tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    std::fs::create_dir_all(tree.join(".dot")).unwrap();
    std::fs::create_dir_all(tree.join("empty")).unwrap();
    let mut files = Vec::new();
    for (i, p) in ["a/x", "a/b/y", ".dot/z", "top"].iter().enumerate() {
        let bytes = rng.bytes([0, 1, 200_000, 70_000][i]);
        std::fs::write(tree.join(p), &bytes).unwrap();
        files.push((p.to_string(), bytes));
    }
    std::fs::set_permissions(tree.join("top"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("a/x", tree.join("link")).unwrap();
    let t = tree.to_str().unwrap();
    cli(&["cp", "/d/f", "/d/f2"]).err_containing("pvfs:/path");
    cli(&["cp", t, "pvfs:/"]).err_containing("is a directory (use -r)");
    cli(&["cp", "-r", t, "pvfs:/"]).ok();
    cli(&["cp", "-r", "pvfs:/tree", "pvfs:/copy"]).ok();
    cli(&["cp", "-r", "pvfs:/copy", "pvfs:/copy/in"]).err_containing("into itself");
    let back = cluster.dir().join("back");
    cli(&["cp", "-r", "pvfs:/copy", back.to_str().unwrap()]).ok();
    assert_same_tree(&tree, &back);
    assert_eq!(
        names(&cluster, &["-A", "/copy"]),
        [".dot", "a", "empty", "link", "top"]
    );
    // Into an existing directory: under the source's name, as cp(1) does.
    let into = cluster.dir().join("into");
    std::fs::create_dir(&into).unwrap();
    cli(&["cp", "-r", "pvfs:/tree", into.to_str().unwrap()]).ok();
    assert_same_tree(&tree, &into.join("tree"));
    for (p, bytes) in &files {
        assert_bytes_eq(&std::fs::read(back.join(p)).unwrap(), bytes, p);
    }
}

/// Both trees hold the same names, kinds, bytes, link targets and file modes.
fn assert_same_tree(a: &Path, b: &Path) {
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(a), names(b), "{} and {}", a.display(), b.display());
    for n in names(a) {
        let (x, y) = (a.join(&n), b.join(&n));
        let (mx, my) = (
            std::fs::symlink_metadata(&x).unwrap(),
            std::fs::symlink_metadata(&y).unwrap(),
        );
        assert_eq!(mx.file_type(), my.file_type(), "{}", y.display());
        if mx.file_type().is_symlink() {
            assert_eq!(
                std::fs::read_link(&x).unwrap(),
                std::fs::read_link(&y).unwrap()
            );
        } else if mx.is_dir() {
            assert_same_tree(&x, &y);
        } else {
            assert_eq!(
                mx.permissions().mode() & 0o777,
                my.permissions().mode() & 0o777,
                "{}",
                y.display()
            );
            assert_bytes_eq(
                &std::fs::read(&y).unwrap(),
                &std::fs::read(&x).unwrap(),
                &y.display().to_string(),
            );
        }
    }
}

#[test]
fn start_twice_names_each_server_once() {
    let cluster = Cluster::builder().configure();
    let none: &[(&str, &str)] = &[];
    let start = || {
        run_pvfs(
            &["start", "-c", cluster.config_str()],
            none,
            &["PVFS_CONFIG"],
        )
    };
    let first = start().ok().to_string();
    let second = start().ok().to_string();
    for name in cluster.names() {
        for (out, running) in [(&first, false), (&second, true)] {
            let lines: Vec<&str> = out
                .lines()
                .filter(|l| l.split_whitespace().next() == Some(name.as_str()))
                .collect();
            assert_eq!(lines.len(), 1, "{name} once:\n{out}");
            assert_eq!(lines[0].contains("already running"), running, "{out}");
        }
    }
    run_pvfs(
        &["stop", "-c", cluster.config_str()],
        none,
        &["PVFS_CONFIG"],
    )
    .ok();
}

#[test]
fn a_user_who_cannot_authenticate_is_told_once_and_no_server_is_called_down() {
    let cluster = Cluster::start();
    // A key file the servers do not hold (a node left out of a key change), and, as
    // root, a user who can read no key and has no MUNGE.
    let wrong = cluster.config_with_other_key();
    let mut cases = vec![("a key the servers do not hold", None, wrong)];
    if is_root() {
        let user = cluster.user_config_without_munge();
        cases.push(("no key and no MUNGE", Some(65534), user));
    } else {
        skip(
            "a_user_who_cannot_authenticate_is_told_once_and_no_server_is_called_down",
            "the case of a user without the key needs root (it runs as nobody)",
        );
    }
    let servers = cluster.names().len();
    for (what, uid, config) in cases {
        for cmd in ["ping", "status", "df"] {
            let out = match uid {
                Some(uid) => run_pvfs_as(uid, &config, &[cmd]),
                None => run_pvfs(
                    &[cmd, "-c", config.to_str().unwrap()],
                    &[],
                    &["PVFS_CONFIG"],
                ),
            };
            let line = out.err_containing("cannot authenticate");
            assert!(
                line.contains(&format!("{servers} of {servers} servers")),
                "{what}, {cmd}: {line}"
            );
            assert!(!line.contains("not answering"), "{what}, {cmd}: {line}");
            let said = out
                .stdout
                .lines()
                .filter(|l| l.contains("cannot authenticate"));
            assert_eq!(said.count(), servers, "{what}, {cmd}:\n{}", out.stdout);
            assert!(
                !out.stdout.contains(" down "),
                "{what}, {cmd}: a server called down:\n{}",
                out.stdout
            );
            // The reason is said once, not once per server.
            let reason = line.split_once("unknown to it): ").map_or(line, |(_, r)| r);
            assert_eq!(
                out.stdout.matches(reason).count() + out.stderr.matches(reason).count(),
                1,
                "{what}, {cmd}: the reason {reason:?} more than once:\n{}{}",
                out.stdout,
                out.stderr
            );
        }
    }
    // Negative control: with the cluster's own key, every server answers.
    cluster.run_cli(&["ping"]).ok();
    // Nothing of the servers' state came from these: they all still answer.
    let v = cluster.run_cli(&["status", "--json"]).json();
    assert_eq!(v["healthy"], true, "{v}");
}
