//! Errors are right: POSIX errnos from the client library, and from
//! the CLI a non-zero exit status with one line on stderr starting `pvfs: `. A failed
//! operation changes nothing.
#![allow(clippy::unwrap_used)]

mod common;

use std::fmt::Debug;
use std::time::Duration;

use common::{run_pvfs, Cluster, TestClient};
use pvfs_client::{Client, Errno, LayoutSpec, Regions};

const CALL: Duration = Duration::from_secs(30);

/// Asserts `r` failed with `errno`.
#[track_caller]
fn expect_errno<T: Debug>(r: pvfs_client::Result<T>, errno: Errno, what: &str) {
    match r {
        Err(e) => assert_eq!(
            e.errno, errno,
            "{what}: wrong errno, message {:?}",
            e.message
        ),
        Ok(v) => panic!("{what}: should fail with {}, returned {v:?}", errno.name()),
    }
}

fn spec(size: Option<u64>, count: Option<u32>) -> LayoutSpec {
    LayoutSpec {
        stripe_size: size,
        stripe_count: count,
        base: None,
        replicas: None,
    }
}

/// /d (with /d/sub/inner, /d/file), /empty, /file (with data), /f2.
fn setup(tc: &TestClient) {
    tc.run(CALL, async |c| {
        c.mkdir_all("/d/sub/inner", 0o755).await.unwrap();
        let f = c
            .create("/d/file", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, b"in d").await.unwrap();
        c.mkdir("/empty", 0o755).await.unwrap();
        let f = c
            .create("/file", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, b"hello").await.unwrap();
        c.create("/f2", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
    });
}

async fn names(c: &Client, dir: &str) -> Vec<String> {
    let mut v: Vec<String> = c
        .readdir(dir)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    v.sort();
    v
}

#[test]
fn client_library_returns_posix_errnos() {
    let cluster = Cluster::start();
    let tc = cluster.client();
    setup(&tc);
    tc.run(CALL * 2, async |c| {
        let missing = || spec(None, None);
        // Missing paths.
        expect_errno(c.stat("/nope").await, Errno::ENOENT, "stat /nope");
        expect_errno(c.lstat("/d/nope").await, Errno::ENOENT, "lstat /d/nope");
        expect_errno(
            c.open("/nope").await.map(|_| ()),
            Errno::ENOENT,
            "open /nope",
        );
        expect_errno(c.readdir("/nope").await, Errno::ENOENT, "readdir /nope");
        expect_errno(c.unlink("/nope").await, Errno::ENOENT, "unlink /nope");
        expect_errno(c.rmdir("/nope").await, Errno::ENOENT, "rmdir /nope");
        expect_errno(c.rename("/nope", "/x").await, Errno::ENOENT, "rename /nope");
        expect_errno(
            c.rename("/file", "/nope/x").await,
            Errno::ENOENT,
            "rename into a missing directory",
        );
        expect_errno(
            c.mkdir("/nope/x", 0o755).await,
            Errno::ENOENT,
            "mkdir /nope/x",
        );
        expect_errno(
            c.create("/nope/x", 0o644, missing(), false)
                .await
                .map(|_| ()),
            Errno::ENOENT,
            "create /nope/x",
        );
        expect_errno(c.readlink("/nope").await, Errno::ENOENT, "readlink /nope");
        expect_errno(
            c.layout("/nope").await.map(|_| ()),
            Errno::ENOENT,
            "layout /nope",
        );
        expect_errno(
            c.truncate("/nope", 0).await,
            Errno::ENOENT,
            "truncate /nope",
        );

        // rmdir of a non-empty directory; it stays as it was.
        expect_errno(c.rmdir("/d").await, Errno::ENOTEMPTY, "rmdir /d");
        expect_errno(c.rmdir("/d/sub").await, Errno::ENOTEMPTY, "rmdir /d/sub");
        assert_eq!(names(&c, "/d").await, ["file", "sub"]);
        assert_eq!(names(&c, "/d/sub").await, ["inner"]);
        // rmdir of a file, unlink of a directory.
        expect_errno(c.rmdir("/file").await, Errno::ENOTDIR, "rmdir /file");
        expect_errno(c.unlink("/empty").await, Errno::EISDIR, "unlink /empty");

        // mkdir over a file or a directory, exclusive create and symlink over a name.
        expect_errno(c.mkdir("/file", 0o755).await, Errno::EEXIST, "mkdir /file");
        expect_errno(c.mkdir("/d", 0o755).await, Errno::EEXIST, "mkdir /d");
        expect_errno(
            c.create("/file", 0o644, missing(), true).await.map(|_| ()),
            Errno::EEXIST,
            "exclusive create /file",
        );
        expect_errno(
            c.create("/d", 0o644, missing(), true).await.map(|_| ()),
            Errno::EEXIST,
            "exclusive create /d",
        );
        expect_errno(
            c.symlink("/x", "/file").await,
            Errno::EEXIST,
            "symlink over /file",
        );
        expect_errno(
            c.mkdir_all("/file/x", 0o755).await,
            Errno::ENOTDIR,
            "mkdir -p /file/x",
        );
        // The file is untouched.
        let f = c.open("/file").await.unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(f.read_at(0, &mut buf).await.unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");

        // Rename of a directory into its own subtree.
        expect_errno(
            c.rename("/d", "/d/x").await,
            Errno::EINVAL,
            "rename /d /d/x",
        );
        expect_errno(
            c.rename("/d", "/d/sub/inner/x").await,
            Errno::EINVAL,
            "rename /d /d/sub/inner/x",
        );
        expect_errno(
            c.rename("/d", "/d/sub").await,
            Errno::EINVAL,
            "rename /d over its child /d/sub",
        );
        assert_eq!(names(&c, "/d").await, ["file", "sub"]);
        assert!(c.stat("/d/sub/inner").await.is_ok());
        // Other rename conflicts, as rename(2).
        expect_errno(
            c.rename("/empty", "/d").await,
            Errno::ENOTEMPTY,
            "rename over a non-empty dir",
        );
        expect_errno(
            c.rename("/file", "/empty").await,
            Errno::EISDIR,
            "rename a file over a dir",
        );
        expect_errno(
            c.rename("/empty", "/file").await,
            Errno::ENOTDIR,
            "rename a dir over a file",
        );
        assert!(c.stat("/empty").await.is_ok() && c.stat("/file").await.is_ok());

        // Open of a directory.
        expect_errno(c.open("/d").await.map(|_| ()), Errno::EISDIR, "open /d");
        expect_errno(c.open("/").await.map(|_| ()), Errno::EISDIR, "open /");
        expect_errno(
            c.create("/d", 0o644, missing(), false).await.map(|_| ()),
            Errno::EISDIR,
            "non-exclusive create of /d",
        );

        // A path through a file.
        expect_errno(c.stat("/file/x").await, Errno::ENOTDIR, "stat /file/x");
        expect_errno(
            c.mkdir("/file/x", 0o755).await,
            Errno::ENOTDIR,
            "mkdir /file/x",
        );
        expect_errno(
            c.create("/file/x", 0o644, missing(), false)
                .await
                .map(|_| ()),
            Errno::ENOTDIR,
            "create /file/x",
        );
        expect_errno(c.readdir("/file").await, Errno::ENOTDIR, "readdir /file");
        expect_errno(
            c.rename("/f2", "/file/x").await,
            Errno::ENOTDIR,
            "rename to /file/x",
        );

        // Bad layouts: more stripes than data servers, a 100-byte stripe, no stripes.
        expect_errno(
            c.create("/bad1", 0o644, spec(None, Some(5)), true)
                .await
                .map(|_| ()),
            Errno::EINVAL,
            "stripe count 5 on 4 data servers",
        );
        expect_errno(
            c.create("/bad2", 0o644, spec(Some(100), None), true)
                .await
                .map(|_| ()),
            Errno::EINVAL,
            "stripe size 100",
        );
        expect_errno(
            c.create("/bad3", 0o644, spec(None, Some(0)), true)
                .await
                .map(|_| ()),
            Errno::EINVAL,
            "stripe count 0",
        );
        for bad in ["/bad1", "/bad2", "/bad3"] {
            expect_errno(
                c.stat(bad).await,
                Errno::ENOENT,
                &format!("{bad} after a refused create"),
            );
        }

        // Names of 255 bytes are fine, 256 are too long.
        let ok = "n".repeat(255);
        let long = "n".repeat(256);
        c.mkdir(&format!("/{ok}"), 0o755).await.unwrap();
        c.create(&format!("/d/{ok}"), 0o644, missing(), true)
            .await
            .unwrap();
        expect_errno(
            c.mkdir(&format!("/{long}"), 0o755).await,
            Errno::ENAMETOOLONG,
            "mkdir of 256 bytes",
        );
        expect_errno(
            c.create(&format!("/d/{long}"), 0o644, missing(), true)
                .await
                .map(|_| ()),
            Errno::ENAMETOOLONG,
            "create of 256 bytes",
        );
        expect_errno(
            c.symlink("/x", &format!("/{long}")).await,
            Errno::ENAMETOOLONG,
            "symlink of 256 bytes",
        );
        expect_errno(
            c.rename("/f2", &format!("/{long}")).await,
            Errno::ENAMETOOLONG,
            "rename to 256 bytes",
        );

        // Symlink loops.
        c.symlink("/loop2", "/loop1").await.unwrap();
        c.symlink("/loop1", "/loop2").await.unwrap();
        expect_errno(
            c.stat("/loop1").await,
            Errno::ELOOP,
            "stat of a symlink loop",
        );
        assert!(c.lstat("/loop1").await.is_ok());

        // I/O arguments: a buffer that does not match the regions, offsets past the
        // largest file size.
        let f = c.open("/f2").await.unwrap();
        expect_errno(
            f.write_regions(&Regions::contig(0, 10), &[0u8; 5]).await,
            Errno::EINVAL,
            "write_regions with a short buffer",
        );
        expect_errno(
            f.write_at(i64::MAX as u64, b"x").await,
            Errno::EFBIG,
            "write past the largest offset",
        );
        expect_errno(
            f.truncate(u64::MAX).await,
            Errno::EFBIG,
            "truncate to 2^64-1",
        );
        assert_eq!(f.size().await.unwrap(), 0, "failed writes changed /f2");
    });
}

#[test]
fn cli_errors_are_one_line_with_a_nonzero_status() {
    let cluster = Cluster::start();
    let tc = cluster.client();
    setup(&tc);
    let cli = |args: &[&str]| cluster.run_cli(args);

    cli(&["stat", "/nope"]).err_containing("/nope: no such file or directory");
    cli(&["ls", "/nope"]).err_containing("no such file or directory");
    cli(&["ls", "-l", "/d/nope"]).err_containing("no such file or directory");
    cli(&["rm", "/nope"]).err_containing("no such file or directory");
    cli(&["rm", "-f", "/nope"]).ok();
    cli(&["mkdir", "/nope/x"]).err_containing("no such file or directory");
    cli(&["mv", "/nope", "/x"]).err_containing("no such file or directory");
    cli(&["layout", "/nope"]).err_containing("no such file or directory");
    let local = cluster.dir().join("local-copy");
    cli(&["cp", "pvfs:/nope", local.to_str().unwrap()]).err_containing("no such file or directory");
    cli(&["cp", "/definitely/not/here", "pvfs:/x"]).err_containing("/definitely/not/here");

    // rm of a directory without -r; rmdir of a non-empty directory (through mv over it).
    cli(&["rm", "/d"]).err_containing("is a directory");
    cli(&["rm", "/empty"]).err_containing("is a directory");
    cli(&["mv", "/empty", "/d"]).err_containing("directory not empty");
    // mkdir over a file (and over a directory, without -p).
    cli(&["mkdir", "/file"]).err_containing("file exists");
    cli(&["mkdir", "/d"]).err_containing("file exists");
    cli(&["mkdir", "-p", "/d"]).ok();
    cli(&["mkdir", "-p", "/file/x"]).err_containing("not a directory");
    cli(&["ln", "-s", "/x", "/file"]).err_containing("file exists");
    // Rename of a directory into its own subtree.
    cli(&["mv", "/d", "/d/sub/x"]).err_containing_any(&["invalid argument", "into itself"]);
    // Directories where files are needed.
    cli(&["cp", "pvfs:/d", local.to_str().unwrap()]).err_containing("is a directory");
    cli(&["layout", "/d"]).err_line();
    // A path through a file.
    cli(&["stat", "/file/x"]).err_containing("not a directory");
    cli(&["ls", "/file/x"]).err_containing("not a directory");
    // Bad layouts.
    let src = cluster.dir().join("src");
    std::fs::write(&src, b"some bytes").unwrap();
    let src = src.to_str().unwrap();
    cli(&["cp", "--stripe-count", "5", src, "pvfs:/bad1"])
        .err_containing_any(&["invalid argument", "stripe count"]);
    cli(&["cp", "--stripe-size", "100", src, "pvfs:/bad2"])
        .err_containing_any(&["invalid argument", "stripe size"]);
    cli(&["stat", "/bad1"]).err_containing("no such file or directory");
    // A name of 256 bytes.
    let long = format!("/{}", "n".repeat(256));
    cli(&["mkdir", &long]).err_containing("file name too long");
    cli(&["mkdir", &long[..256]]).ok();
    // Nothing changed.
    let out = cli(&["ls", "/d"]);
    assert_eq!(out.ok().lines().collect::<Vec<_>>(), ["file", "sub"]);
}

#[test]
fn setlayout_refuses_impossible_layouts() {
    let cluster = Cluster::start();
    let tc = cluster.client();
    setup(&tc);
    tc.run(CALL, async |c| {
        expect_errno(
            c.set_dir_layout("/d", Some(spec(Some(100), None)))
                .await
                .map(|_| ()),
            Errno::EINVAL,
            "setlayout stripe size 100",
        );
        expect_errno(
            c.set_dir_layout("/d", Some(spec(None, Some(5))))
                .await
                .map(|_| ()),
            Errno::EINVAL,
            "setlayout stripe count 5 of 4",
        );
        expect_errno(
            c.set_dir_layout("/file", Some(spec(Some(65536), None)))
                .await
                .map(|_| ()),
            Errno::ENOTDIR,
            "setlayout on a file",
        );
        expect_errno(
            c.set_dir_layout("/nope", Some(spec(Some(65536), None)))
                .await
                .map(|_| ()),
            Errno::ENOENT,
            "setlayout on a missing directory",
        );
    });
    cluster
        .run_cli(&["setlayout", "/d", "--stripe-size", "100"])
        .err_containing_any(&["invalid argument", "stripe size"]);
    cluster
        .run_cli(&["setlayout", "/d", "--stripe-count", "5"])
        .err_containing_any(&["invalid argument", "stripe count"]);
    cluster.run_cli(&["setlayout", "/d"]).err_line();
}

#[test]
fn lookup_of_a_too_long_name_is_enametoolong() {
    let cluster = Cluster::start();
    let tc = cluster.client();
    let long = format!("/{}", "n".repeat(256));
    tc.run(CALL, async |c| {
        expect_errno(
            c.stat(&long).await,
            Errno::ENAMETOOLONG,
            "stat of a 256-byte name",
        );
        expect_errno(
            c.open(&long).await.map(|_| ()),
            Errno::ENAMETOOLONG,
            "open of a 256-byte name",
        );
        expect_errno(
            c.unlink(&long).await,
            Errno::ENAMETOOLONG,
            "unlink of a 256-byte name",
        );
        expect_errno(
            c.stat(&format!("{long}/x")).await,
            Errno::ENAMETOOLONG,
            "stat through a 256-byte name",
        );
    });
    cluster
        .run_cli(&["stat", &long])
        .err_containing("file name too long");
}

/// Writes the generated configuration with one line replaced; returns (path, line number).
fn broken_config(
    cluster: &Cluster,
    find: &str,
    nth: usize,
    replace: &str,
) -> (std::path::PathBuf, usize) {
    let text = std::fs::read_to_string(cluster.config_path()).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let (idx, _) = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with(find))
        .nth(nth)
        .unwrap_or_else(|| panic!("no line {find:?} in the configuration"));
    lines[idx] = replace.to_string();
    let path = cluster.dir().join(format!("broken-{}.toml", idx + 1));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    (path, idx + 1)
}

#[test]
fn bad_configuration_files_name_the_line_and_key() {
    // No servers needed: the configuration is refused before any connection.
    let cluster = Cluster::builder().configure();
    let cases = [
        ("roles", 2, "roles = [\"metta\"]", "servers[2].roles"),
        (
            "stripe_size",
            0,
            "stripe_size = \"12Q\"",
            "defaults.stripe_size",
        ),
        ("request", 0, "request = \"soon\"", "timeouts.request"),
        ("address", 1, "adress = \"127.0.0.1:1\"", "adress"),
    ];
    for (find, nth, replace, key) in cases {
        let (path, line) = broken_config(&cluster, find, nth, replace);
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        // Library.
        let e = pvfs_config::Config::load(&path).expect_err(replace);
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("{file}:{line}")),
            "{replace}: {msg:?} should name {file}:{line}"
        );
        assert!(
            msg.contains(key),
            "{replace}: {msg:?} should name the key {key}"
        );
        assert_eq!(e.line(), Some(line), "{replace}: line of {msg:?}");
        // CLI, for a client command and for a server.
        for args in [vec!["ping"], vec!["server", "--name", "s0"]] {
            let mut all = args.clone();
            all.extend(["--config", path.to_str().unwrap()]);
            let out = run_pvfs(&all, &[], &["PVFS_CONFIG"]);
            let l = out.err_containing(key);
            assert!(
                l.contains(&format!("{file}:{line}")),
                "`pvfs {}`: {l:?} should name the line",
                all.join(" ")
            );
        }
    }
    // A missing file, and no configuration at all.
    let out = run_pvfs(
        &["ping", "--config", "/no/such/fs.toml"],
        &[],
        &["PVFS_CONFIG"],
    );
    out.err_containing("/no/such/fs.toml");
    let out = run_pvfs(&["ls", "/"], &[], &["PVFS_CONFIG"]);
    assert!(
        !out.status.success(),
        "ls without a configuration succeeded"
    );
}
