//! Security, end to end with real server processes: only the file system's own nodes
//! get in (the handshake with the key), a user's process proves its user with MUNGE
//! and cannot act as anyone else, root arriving through MUNGE is squashed, requests
//! between servers and administration scans are refused from users, and a client with
//! another file system's configuration (or a server at another's address) fails
//! clearly instead of reading or writing.
//!
//! Tests that run commands as another user need root (`setpriv`) and MUNGE (a private
//! `munged` per test, `common::Munged`); without them they are skipped with a reason
//! (a failure under `CI=true`).
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use pvfs_proto::req;
use std::sync::Arc;
use std::time::Duration;

use common::{key_proof, raw_session, run_pvfs_as, Cluster, Munged};
use pvfs_auth::{ClientProof, HandshakeError, KeyRing, Munge};
use pvfs_client::Errno;
use pvfs_proto::{encode, CreateWhat, Creds, LayoutSpec, Request, RequestBody, Response};

/// uid and gid of the unprivileged user the tests act as (nobody/nogroup).
const USER: u32 = 65534;

/// Sends one request on a raw session and returns the answer.
fn ask(
    s: &mut std::net::TcpStream,
    macs: &mut pvfs_auth::SessionMacs,
    id: u64,
    creds: Creds,
    request: Request,
) -> Response {
    common::raw_ask(s, macs, id, creds, request)
}

fn errno_of(r: &Response) -> Option<Errno> {
    match r {
        Response::Error { errno, .. } => Some(Errno(*errno)),
        _ => None,
    }
}

fn root_creds() -> Creds {
    Creds {
        uid: 0,
        gid: 0,
        groups: vec![],
    }
}

/// Whether this process may run commands as another user.
fn can_switch_users(test: &str) -> bool {
    if !common::is_root() {
        common::skip(test, "running commands as another user needs root");
        return false;
    }
    if !common::have_command("setpriv") {
        common::skip(test, "setpriv is not installed (util-linux)");
        return false;
    }
    true
}

#[test]
fn without_the_key_nothing_runs_and_a_wrong_configuration_fails_clearly() {
    let cluster = Cluster::start();
    let config = cluster.config().clone();

    // A client with another key cannot open a connection to any server: it cannot
    // check the server's proof, nor make its own (the server's refusal of a forged
    // proof is in hostile_frames.rs).
    let stranger = ClientProof::Key(Arc::new(KeyRing::generate().unwrap()));
    for s in 0..config.servers.len() {
        match raw_session(&config, s, &stranger) {
            Err(HandshakeError::Rejected { errno, message }) => {
                assert_eq!(errno, Errno::EKEYREJECTED, "{message}");
                assert!(message.contains("does not hold"), "{message}");
            }
            Err(e) => panic!("server {s}: expected the handshake to fail, got {e:?}"),
            Ok(_) => panic!("server {s} let in a client with another key"),
        }
    }
    // The same client with the key gets in and is answered.
    let (mut s, mut macs) = raw_session(&config, 0, &key_proof(&config)).unwrap();
    let r = ask(
        &mut s,
        &mut macs,
        1,
        root_creds(),
        Request::Ping(req::Ping {}),
    );
    assert!(matches!(r, Response::Pong { .. }), "{r:?}");

    // A request frame without a handshake is not answered: the connection closes.
    {
        use std::io::{Read, Write};
        let mut raw = std::net::TcpStream::connect(&config.servers[1].address).unwrap();
        raw.set_read_timeout(Some(common::scaled(Duration::from_secs(10))))
            .unwrap();
        let body = encode(&RequestBody {
            creds: root_creds(),
            request: Request::ScanObjects(req::ScanObjects {
                after: None,
                max: 10,
            }),
            retry: None,
            origin: 0,
        });
        let mut f = pvfs_proto::FrameHeader {
            kind: pvfs_proto::FrameKind::Request,
            flags: pvfs_proto::frame::FLAG_END,
            request_id: 7,
            body_len: body.len() as u32,
            tag_len: 0,
            data_len: 0,
        }
        .encode()
        .to_vec();
        f.extend_from_slice(&body);
        raw.write_all(&f).unwrap();
        let mut got = Vec::new();
        let n = raw.read_to_end(&mut got).unwrap_or(0);
        assert_eq!(n, 0, "a server answered a request sent without a handshake");
    }

    // The CLI with a key file it cannot use says why, once.
    let dir = tempfile::tempdir().unwrap();
    let other_key = dir.path().join("other.key");
    KeyRing::generate()
        .unwrap()
        .write(&other_key, "test", false)
        .unwrap();
    let text = std::fs::read_to_string(cluster.config_path())
        .unwrap()
        .replace(
            &format!(
                "key = \"{}\"",
                config.security.key.file_name().unwrap().to_str().unwrap()
            ),
            &format!("key = \"{}\"", other_key.display()),
        );
    let wrong_key = dir.path().join("wrong-key.toml");
    std::fs::write(&wrong_key, &text).unwrap();
    let out = common::run_pvfs(
        &["ls", "-c", wrong_key.to_str().unwrap(), "/"],
        &[],
        &["PVFS_CONFIG"],
    );
    out.err_containing("key");

    // Another file system's configuration (same addresses, another fsid): refused,
    // naming what is wrong, and nothing is read.
    let other_fsid = std::fs::read_to_string(cluster.config_path())
        .unwrap()
        .replace(
            &format!("fsid = {}", config.fsid),
            &format!("fsid = {}", config.fsid ^ 1),
        );
    let other = dir.path().join("other.toml");
    std::fs::write(&other, other_fsid).unwrap();
    std::fs::copy(&config.security.key, dir.path().join("fs.key")).unwrap();
    std::fs::copy(
        &config.security.server_key,
        dir.path().join("fs-server.key"),
    )
    .unwrap();
    let out = common::run_pvfs(
        &["ls", "-c", other.to_str().unwrap(), "/"],
        &[],
        &["PVFS_CONFIG"],
    );
    let line = out.err_containing("file system");
    assert!(line.contains("does not match"), "{line}");

    // Two servers' addresses swapped in a client's configuration: the client sees it
    // reached the wrong server instead of using it.
    let text = std::fs::read_to_string(cluster.config_path()).unwrap();
    let (a0, a1) = (&config.servers[0].address, &config.servers[1].address);
    let swapped = text.replace(a0, "SWAP").replace(a1, a0).replace("SWAP", a1);
    let swapped_path = dir.path().join("swapped.toml");
    std::fs::write(&swapped_path, swapped).unwrap();
    let out = common::run_pvfs(
        &["ping", "-c", swapped_path.to_str().unwrap()],
        &[],
        &["PVFS_CONFIG"],
    );
    assert!(
        !out.status.success(),
        "ping with swapped addresses succeeded"
    );
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains(&format!(
            "this is server {} of file system",
            config.servers[1].name
        )),
        "{all}"
    );

    // The refusals are logged, once per source and interval, not once per attempt.
    let log = cluster.log("s1");
    let refused = log.matches("refused a connection").count();
    assert!(refused >= 1, "no refusal logged:\n{log}");
    assert!(
        refused <= 3,
        "{refused} refusal lines for a handful of attempts:\n{log}"
    );
}

#[test]
fn a_user_proves_its_uid_with_munge_and_cannot_act_as_another() {
    const TEST: &str = "a_user_proves_its_uid_with_munge_and_cannot_act_as_another";
    if !can_switch_users(TEST) {
        return;
    }
    let Some(munged) = Munged::start(TEST) else {
        return;
    };
    let cluster = Cluster::builder().munge(&munged).start();
    let config = cluster.config().clone();
    let user_conf = cluster.user_config();
    // Root makes the user a home.
    cluster.run_cli(&["mkdir", "/home"]).ok();
    cluster.run_cli(&["mkdir", "/home/u"]).ok();
    let tc = cluster.client();
    tc.run(Duration::from_secs(20), async |c| {
        c.setattr(
            "/home/u",
            pvfs_client::SetAttr {
                uid: Some(USER),
                gid: Some(USER),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    });

    // The user's CLI cannot read the key; it proves its uid with MUNGE and works.
    let out = run_pvfs_as(USER, &user_conf, &["mkdir", "/home/u/d"]);
    out.ok();
    let out = run_pvfs_as(USER, &user_conf, &["stat", "--json", "/home/u/d"]);
    let st = out.json();
    assert_eq!(st["uid"], USER, "{st}");
    assert_eq!(st["gid"], USER, "{st}");
    let out = run_pvfs_as(USER, &user_conf, &["ls", "/home/u"]);
    assert!(out.ok().contains('d'), "{}", out.stdout);

    // Scans and steps between servers are refused from a user's process.
    let out = run_pvfs_as(USER, &user_conf, &["fsck"]);
    out.err_containing("only accepted from servers and nodes holding the file system's key");

    // In-process, with this (root) process's MUNGE credential: root is squashed to
    // nobody unless its address is trusted.
    let munge = Munge::open(Some(&munged.socket)).unwrap();
    let proof = ClientProof::Munge {
        munge,
        decoder_uid: None,
    };
    let (mut s, mut macs) = raw_session(&config, 0, &proof).unwrap();
    // Claiming to be another user than the credential proves: EPERM.
    let other = Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    let r = ask(&mut s, &mut macs, 1, other, Request::Ping(req::Ping {}));
    assert_eq!(errno_of(&r), Some(Errno::EPERM), "{r:?}");
    // Root's credential acts as nobody: it cannot create root-owned objects.
    let root = config.root_handle();
    let r = ask(
        &mut s,
        &mut macs,
        2,
        root_creds(),
        Request::Create(req::Create {
            hold: 0,
            parent: root,
            name: "made-by-squashed-root".into(),
            mode: 0o644,
            umask: 0,
            uid: 0,
            gid: 0,
            what: CreateWhat::File {
                spec: LayoutSpec::default(),
            },
        }),
    );
    assert_eq!(errno_of(&r), Some(Errno::EPERM), "{r:?}");
    // Requests between servers and admin scans are refused; steps of operations
    // across servers need a ticket, which a user only gets by being allowed the
    // operation.
    for (id, req, want) in [
        (
            3,
            Request::ScanObjects(req::ScanObjects {
                after: None,
                max: 10,
            }),
            Errno::EPERM,
        ),
        (
            5,
            Request::Precreate(req::Precreate { count: 1 }),
            Errno::EPERM,
        ),
        (
            6,
            Request::RemoveObject(req::RemoveObject {
                handle: root,
                ticket: None,
            }),
            Errno::EACCES,
        ),
        (
            7,
            Request::SealDir(req::SealDir {
                dir: root,
                seal: true,
                ticket: None,
            }),
            Errno::EACCES,
        ),
    ] {
        let what = req.op_name();
        let r = ask(&mut s, &mut macs, id, root_creds(), req);
        assert_eq!(errno_of(&r), Some(want), "{what}: {r:?}");
    }
    // The root directory is intact.
    tc.run(Duration::from_secs(20), async |c| {
        c.stat("/home/u/d").await.unwrap();
    });
    // A credential is good once: replaying a captured Hello is refused by MUNGE.
    // (munged keeps a replay cache; the server passes its verdict on.)
    drop(s);
}

#[test]
fn a_user_without_the_key_or_munge_is_told_what_to_do() {
    const TEST: &str = "a_user_without_the_key_or_munge_is_told_what_to_do";
    if !can_switch_users(TEST) {
        return;
    }
    // MUNGE is configured at a socket where no munged listens (a host's own munged
    // must not make this test pass).
    let cluster = Cluster::builder()
        .genconfig_arg("--munge-socket")
        .genconfig_arg("/nonexistent/munge.socket")
        .start();
    let out = run_pvfs_as(USER, &cluster.user_config(), &["ls", "/"]);
    let line = out.err_line();
    assert!(
        line.contains("key") && line.contains("mount") && line.contains("MUNGE"),
        "{line}"
    );
}

// ----- one permission matrix over every interface --------------------------------------

/// The unprivileged user of the matrix: uid 65534, primary group 4242 (no name-service
/// entry, so the groups the server resolves are exactly that one).
const GROUP: u32 = 4242;

/// The tree each interface works on (a copy under `/<interface>`), made by root.
/// (path, kind, mode, uid, gid): kind `d` directory, `f` file with one byte.
const TREE: &[(&str, char, u32, u32, u32)] = &[
    ("", 'd', 0o755, 0, 0),
    ("secret", 'f', 0o600, 0, 0),
    ("public", 'f', 0o644, 0, 0),
    ("shared", 'f', 0o666, 0, 0),
    ("group", 'f', 0o640, 0, GROUP),
    ("closed", 'd', 0o700, 0, 0),
    ("closed/inner", 'f', 0o644, 0, 0),
    ("ro", 'd', 0o555, 0, 0),
    ("ro/f", 'f', 0o644, 0, 0),
    ("tmp", 'd', 0o1777, 0, 0),
    ("tmp/theirs", 'f', 0o666, 1000, 1000),
    ("tmp/mine", 'f', 0o644, USER, GROUP),
    ("home", 'd', 0o755, USER, GROUP),
    ("home/f", 'f', 0o644, USER, GROUP),
    ("setuid", 'f', 0o4755, USER, GROUP),
    ("aclread", 'f', 0o600, 0, 0),
    ("acldeny", 'f', 0o644, 0, 0),
    ("aclgroup", 'f', 0o600, 0, 0),
    ("aclmask", 'f', 0o600, 0, 0),
    ("acldir", 'd', 0o755, 0, 0),
];

/// One entry of an ACL in [`ACLS`]: tag, permissions, id.
type AclRow = (char, u16, u32);

/// POSIX ACLs root sets on the tree: (path, default ACL rather than access ACL,
/// entries as (tag, permissions, id) — `u`/`g` the owner and owning group, `U`/`G` a
/// named user or group, `m` the mask, `o` other).
const ACLS: &[(&str, bool, &[AclRow])] = &[
    // The user may read through a named entry, not write.
    (
        "aclread",
        false,
        &[
            ('u', 6, 0),
            ('U', 4, USER),
            ('g', 0, 0),
            ('m', 4, 0),
            ('o', 0, 0),
        ],
    ),
    // A named entry without rights shuts the user out though others may read.
    (
        "acldeny",
        false,
        &[
            ('u', 6, 0),
            ('U', 0, USER),
            ('g', 4, 0),
            ('m', 4, 0),
            ('o', 4, 0),
        ],
    ),
    // The user's group may write.
    (
        "aclgroup",
        false,
        &[
            ('u', 6, 0),
            ('g', 0, 0),
            ('G', 6, GROUP),
            ('m', 6, 0),
            ('o', 0, 0),
        ],
    ),
    // The mask takes write away from the named user.
    (
        "aclmask",
        false,
        &[
            ('u', 6, 0),
            ('U', 6, USER),
            ('g', 0, 0),
            ('m', 4, 0),
            ('o', 0, 0),
        ],
    ),
    // The user may create in the directory, and what it creates is its owner's only.
    (
        "acldir",
        false,
        &[
            ('u', 7, 0),
            ('U', 7, USER),
            ('g', 5, 0),
            ('m', 7, 0),
            ('o', 5, 0),
        ],
    ),
    ("acldir", true, &[('u', 7, 0), ('g', 0, 0), ('o', 0, 0)]),
];

/// An ACL of [`ACLS`] as its extended attribute value.
fn acl_value(entries: &[AclRow]) -> Vec<u8> {
    use pvfs_proto::acl;
    let e: Vec<acl::AclEntry> = entries
        .iter()
        .map(|&(t, perm, id)| {
            let (tag, id) = match t {
                'u' => (acl::USER_OBJ, acl::UNDEFINED_ID),
                'U' => (acl::USER, id),
                'g' => (acl::GROUP_OBJ, acl::UNDEFINED_ID),
                'G' => (acl::GROUP, id),
                'm' => (acl::MASK, acl::UNDEFINED_ID),
                _ => (acl::OTHER, acl::UNDEFINED_ID),
            };
            acl::AclEntry { tag, perm, id }
        })
        .collect();
    acl::to_xattr(&e)
}

/// (operation, path, argument, expected answer), in order (later steps see what the
/// earlier ones did). The answers are what Linux gives the user on a local file system;
/// the mount (the kernel checks first) must give them too.
const MATRIX: &[(&str, &str, &str, &str)] = &[
    ("read", "secret", "", "EACCES"),
    ("stat", "secret", "", "OK"),
    ("read", "public", "", "OK"),
    ("write", "public", "", "EACCES"),
    ("otrunc", "public", "", "EACCES"),
    ("truncate", "public", "", "EACCES"),
    ("append", "public", "", "EACCES"),
    ("write", "shared", "", "OK"),
    ("read", "group", "", "OK"),
    ("write", "group", "", "EACCES"),
    ("stat", "closed/inner", "", "EACCES"),
    ("read", "closed/inner", "", "EACCES"),
    ("list", "closed", "", "EACCES"),
    ("list", "home", "", "OK"),
    ("create", "newfile", "", "EACCES"),
    ("mkdir", "newdir", "", "EACCES"),
    ("create", "ro/new", "", "EACCES"),
    ("unlink", "ro/f", "", "EACCES"),
    ("unlink", "secret", "", "EACCES"),
    ("unlink", "tmp/theirs", "", "EPERM"),
    ("rename", "tmp/theirs", "tmp/taken", "EPERM"),
    ("unlink", "tmp/mine", "", "OK"),
    ("create", "home/new", "", "OK"),
    ("mkdir", "home/d", "", "OK"),
    ("rename", "home/new", "home/new2", "OK"),
    ("rename", "home/new2", "stolen", "EACCES"),
    ("rename", "public", "home/p", "EACCES"),
    ("symlink", "home/l", "target", "OK"),
    ("unlink", "home/l", "", "OK"),
    ("rmdir", "home/d", "", "OK"),
    ("chmod", "public", "777", "EPERM"),
    ("chmod", "home/f", "600", "OK"),
    ("read", "home/f", "", "OK"),
    ("write", "setuid", "", "OK"),
    ("mode", "setuid", "", "0755 OK"),
    ("read", "aclread", "", "OK"),
    ("write", "aclread", "", "EACCES"),
    ("read", "acldeny", "", "EACCES"),
    ("write", "aclgroup", "", "OK"),
    ("read", "aclmask", "", "OK"),
    ("write", "aclmask", "", "EACCES"),
    ("create", "acldir/new", "", "OK"),
    ("mode", "acldir/new", "", "0600 OK"),
    ("mkdir", "acldir/sub", "", "OK"),
    ("mode", "acldir/sub", "", "0700 OK"),
];

/// Which matrix operations the CLI has a command for.
fn cli_command(op: &str, path: &str, arg: &str, one_byte: &str) -> Option<Vec<String>> {
    let p = |s: &str| s.to_string();
    Some(match op {
        "read" => vec![p("cp"), p("-q"), format!("pvfs:{path}"), p("/dev/null")],
        "write" | "create" => vec![p("cp"), p("-q"), p(one_byte), format!("pvfs:{path}")],
        "stat" => vec![p("stat"), p(path)],
        "list" => vec![p("ls"), p(path)],
        "mkdir" => vec![p("mkdir"), p(path)],
        "unlink" => vec![p("rm"), p(path)],
        "rmdir" => vec![p("rm"), p("-r"), p(path)],
        "rename" => vec![p("mv"), p(path), p(arg)],
        "symlink" => vec![p("ln"), p("-s"), p(arg), p(path)],
        _ => return None,
    })
}

/// The errno a CLI error line names (by the C library's wording of it).
fn errno_named(line: &str) -> &'static str {
    let l = line.to_lowercase();
    for (text, name) in [
        ("permission denied", "EACCES"),
        ("operation not permitted", "EPERM"),
        ("no such file", "ENOENT"),
        ("file exists", "EEXIST"),
        ("not a directory", "ENOTDIR"),
        ("is a directory", "EISDIR"),
        ("directory not empty", "ENOTEMPTY"),
    ] {
        if l.contains(text) {
            return name;
        }
    }
    "EOTHER"
}

/// Compiles tests/security/permcheck.c, with the C library (`pvfs`) or plain POSIX.
fn permcheck(pvfs: bool) -> std::path::PathBuf {
    let out_dir = common::profile_dir().join("security-tests");
    std::fs::create_dir_all(&out_dir).unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/security/permcheck.c");
    let exe = out_dir.join(if pvfs {
        "permcheck-pvfs"
    } else {
        "permcheck-posix"
    });
    let mut cmd = std::process::Command::new("cc");
    cmd.args(["-std=gnu11", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src);
    if pvfs {
        let so = common::artifact("libpvfs.so");
        let libdir = so.parent().unwrap();
        let include = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi/include");
        cmd.arg("-DUSE_PVFS")
            .arg(format!("-I{}", include.display()))
            .arg(format!("-L{}", libdir.display()))
            .arg("-lpvfs")
            .arg(format!("-Wl,-rpath,{}", libdir.display()));
    }
    // No deadline: compiling is not what the test is about.
    let out = cmd.output().expect("cannot run cc");
    assert!(
        out.status.success(),
        "cc permcheck.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `prog` as the matrix's user with `env`, the matrix's operations on stdin
/// (paths under `base`); returns one answer per operation.
fn run_matrix(
    prog: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
    base: &str,
) -> Vec<String> {
    use std::io::Write;
    let mut input = String::new();
    for (op, path, arg, _) in MATRIX {
        let arg = match *op {
            "rename" => format!("{base}/{arg}"),
            _ => arg.to_string(),
        };
        input.push_str(&format!("{op} {base}/{path} {arg}\n"));
    }
    let mut cmd = std::process::Command::new("setpriv");
    cmd.arg(format!("--reuid={USER}"))
        .arg(format!("--regid={GROUP}"))
        .arg("--clear-groups")
        .arg(prog)
        .args(args)
        .env_remove("PVFS_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = common::wait_output(child, common::scaled(Duration::from_secs(120)), "permcheck");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answers: Vec<String> = stdout.lines().map(str::to_string).collect();
    assert_eq!(
        answers.len(),
        MATRIX.len(),
        "{} answered {} of {} operations:\nstdout:\n{stdout}\nstderr:\n{}",
        prog.display(),
        answers.len(),
        MATRIX.len(),
        String::from_utf8_lossy(&out.stderr)
    );
    answers
}

#[test]
fn every_interface_gives_a_user_what_the_kernel_gives() {
    const TEST: &str = "every_interface_gives_a_user_what_the_kernel_gives";
    if !can_switch_users(TEST) {
        return;
    }
    for tool in ["cc", "setpriv"] {
        if !common::have_command(tool) {
            common::skip(TEST, &format!("{tool} is not installed"));
            return;
        }
    }
    let Some(munged) = Munged::start(TEST) else {
        return;
    };
    let cluster = Cluster::builder().munge(&munged).start();
    let user_conf = cluster.user_config();
    let interfaces = ["mount", "cli", "capi", "preload"];
    // Root lays out one tree per interface.
    let tc = cluster.client();
    tc.run(Duration::from_secs(60), async |c| {
        for i in interfaces {
            for (path, kind, mode, uid, gid) in TREE {
                let p = format!("/{i}/{path}");
                let p = p.trim_end_matches('/');
                match kind {
                    'd' => {
                        c.mkdir(p, 0o755).await.unwrap();
                    }
                    _ => {
                        let f = c
                            .create(p, 0o644, LayoutSpec::default(), true)
                            .await
                            .unwrap();
                        f.write_at(0, b"x").await.unwrap();
                    }
                }
                // Owner first: a chown drops a file's set-user-ID bit.
                for set in [
                    pvfs_client::SetAttr {
                        uid: Some(*uid),
                        gid: Some(*gid),
                        ..Default::default()
                    },
                    pvfs_client::SetAttr {
                        mode: Some(*mode),
                        ..Default::default()
                    },
                ] {
                    c.setattr(p, set).await.unwrap();
                }
            }
            for (path, default, entries) in ACLS {
                let h = c.stat(&format!("/{i}/{path}")).await.unwrap().handle;
                let name = if *default {
                    pvfs_proto::acl::XATTR_DEFAULT
                } else {
                    pvfs_proto::acl::XATTR_ACCESS
                };
                c.setxattr(h, name, &acl_value(entries), 0).await.unwrap();
            }
        }
    });
    let expected: Vec<&str> = MATRIX.iter().map(|m| m.3).collect();
    let mut failures = Vec::new();
    let mut compare = |who: &str, got: Vec<String>, skip: &dyn Fn(&str) -> bool| {
        for ((m, want), got) in MATRIX.iter().zip(&expected).zip(&got) {
            if skip(m.0) {
                continue;
            }
            if got != want {
                failures.push(format!(
                    "{who}: {} {} {}: {got}, expected {want}",
                    m.0, m.1, m.2
                ));
            }
        }
    };

    // The mount (root's, --allow-other): the kernel checks, then the servers.
    {
        let mut m = mount::Mount::start(&cluster, &["--allow-other"]);
        let base = m.join("mount");
        let got = run_matrix(&permcheck(false), &[], &[], base.to_str().unwrap());
        compare("mount", got, &|_| false);
        m.unmount();
    }
    // The C library, as the user (it cannot read the key: MUNGE).
    let got = run_matrix(
        &permcheck(true),
        &[user_conf.to_str().unwrap()],
        &[],
        "/capi",
    );
    compare("C library", got, &|_| false);
    // The preload library, as the user.
    let prefix = format!("/pvfs-security-{}", std::process::id());
    let lib = common::artifact("libpvfs_preload.so");
    let got = run_matrix(
        &permcheck(false),
        &[],
        &[
            ("LD_PRELOAD", lib.to_str().unwrap()),
            ("PVFS_CONFIG", user_conf.to_str().unwrap()),
            ("PVFS_PREFIX", &prefix),
        ],
        &format!("{prefix}/preload"),
    );
    compare("preload library", got, &|_| false);
    // The CLI, as the user, for the operations it has commands for.
    let one_byte = cluster.user_config().with_file_name("one-byte");
    std::fs::write(&one_byte, b"y").unwrap();
    let mut got = Vec::new();
    for (op, path, arg, _) in MATRIX {
        let p = format!("/cli/{path}");
        let a = if *op == "rename" {
            format!("/cli/{arg}")
        } else {
            arg.to_string()
        };
        let Some(args) = cli_command(op, &p, &a, one_byte.to_str().unwrap()) else {
            got.push("n/a".to_string());
            continue;
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_pvfs_as_group(USER, GROUP, &user_conf, &args);
        got.push(if out.status.success() {
            "OK".to_string()
        } else {
            errno_named(out.err_line()).to_string()
        });
    }
    compare("CLI", got.clone(), &|op| {
        cli_command(op, "", "", "").is_none()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// [`run_pvfs_as`] with primary group `gid`.
fn run_pvfs_as_group(
    uid: u32,
    gid: u32,
    config: &std::path::Path,
    args: &[&str],
) -> common::CliOutput {
    let reuid = format!("--reuid={uid}");
    let regid = format!("--regid={gid}");
    let mut full = vec![
        reuid.as_str(),
        regid.as_str(),
        "--clear-groups",
        common::pvfs_bin(),
    ];
    full.extend(args);
    full.extend(["-c", config.to_str().unwrap()]);
    common::run_cmd("setpriv", &full, &[], &["PVFS_CONFIG"])
}

#[test]
fn data_servers_refuse_missing_tampered_and_expired_capabilities() {
    // Capabilities live 10 s here (the shortest allowed), so one expires in the test.
    let cluster = Cluster::builder()
        .set("capability_lifetime", "\"10s\"")
        .start();
    let config = cluster.config().clone();
    let data: Vec<u8> = (0..100u8).collect();
    let tc = cluster.client();
    let held = tc.run(Duration::from_secs(30), async |c| {
        let f = c
            .create("/f", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, &data).await.unwrap();
        f
    });
    let root = config.root_handle();
    let shard_server = config.entry_server(root, config.meta_servers().len() as u32, "f");
    let (mut s, mut macs) = raw_session(&config, shard_server, &key_proof(&config)).unwrap();
    let (layout, caps) = match ask(
        &mut s,
        &mut macs,
        1,
        root_creds(),
        Request::Lookup(req::Lookup {
            dir: root,
            name: "f".into(),
            want: pvfs_proto::rights::READ,
        }),
    ) {
        Response::Entry {
            attr: Some(attr),
            caps,
            ..
        } => (attr.layout().unwrap().clone(), caps),
        other => panic!("lookup: {other:?}"),
    };
    assert_eq!(caps.len(), 1 + layout.datafiles.len(), "{caps:?}");
    let df = layout.datafiles[0];
    let (mut d, mut dmacs) = raw_session(&config, df.server as usize, &key_proof(&config)).unwrap();
    let read = |cap: Option<pvfs_proto::Capability>| {
        Request::Read(req::Read {
            copies: Default::default(),
            handle: df.handle,
            stripe: layout.stripe(),
            index: 0,
            regions: pvfs_proto::Regions::contig(0, 10),
            cap,
        })
    };
    let good = caps[1].clone();
    assert_eq!(good.handle, df.handle);
    let r = ask(
        &mut d,
        &mut dmacs,
        2,
        root_creds(),
        read(Some(good.clone())),
    );
    assert!(matches!(r, Response::ReadStart { .. }), "{r:?}");
    let refused = |r: Response, what: &str| {
        assert_eq!(errno_of(&r), Some(Errno::EACCES), "{what}: {r:?}");
    };
    refused(
        ask(&mut d, &mut dmacs, 3, root_creds(), read(None)),
        "no capability",
    );
    let mut more = good.clone();
    more.rights |= pvfs_proto::rights::WRITE;
    refused(
        ask(&mut d, &mut dmacs, 4, root_creds(), read(Some(more))),
        "rights raised",
    );
    let mut longer = good.clone();
    longer.expires += 3600;
    refused(
        ask(&mut d, &mut dmacs, 5, root_creds(), read(Some(longer))),
        "expiry moved",
    );
    let mut flipped = good.clone();
    flipped.mac[0] ^= 1;
    refused(
        ask(&mut d, &mut dmacs, 6, root_creds(), read(Some(flipped))),
        "seal altered",
    );
    // A capability for another datafile (of the same file) does not open this one.
    refused(
        ask(
            &mut d,
            &mut dmacs,
            7,
            root_creds(),
            read(Some(caps[2].clone())),
        ),
        "another datafile",
    );
    // A read capability does not write.
    let write = Request::Write(req::Write {
        copies: Default::default(),
        handle: df.handle,
        stripe: layout.stripe(),
        index: 0,
        regions: pvfs_proto::Regions::contig(0, 0),
        sync: false,
        cap: Some(good.clone()),
    });
    refused(
        ask(&mut d, &mut dmacs, 8, root_creds(), write),
        "a read capability",
    );
    // Nor allocate, punch or zero, with it or without any.
    let fallocate = |cap: Option<pvfs_proto::Capability>| {
        Request::Fallocate(req::Fallocate {
            copies: Default::default(),
            handle: df.handle,
            stripe: layout.stripe(),
            index: 0,
            offset: 0,
            len: 4096,
            mode: pvfs_client::falloc::PUNCH_HOLE | pvfs_client::falloc::KEEP_SIZE,
            cap,
        })
    };
    refused(
        ask(
            &mut d,
            &mut dmacs,
            8,
            root_creds(),
            fallocate(Some(good.clone())),
        ),
        "fallocate with a read capability",
    );
    refused(
        ask(&mut d, &mut dmacs, 8, root_creds(), fallocate(None)),
        "fallocate without a capability",
    );
    // A misplaced name is refused: the same Create at a server that does not hold
    // its shard.
    let wrong = (0..config.servers.len())
        .find(|&i| i != shard_server && config.servers[i].roles.contains(pvfs_proto::Roles::META))
        .unwrap();
    let (mut w, mut wmacs) = raw_session(&config, wrong, &key_proof(&config)).unwrap();
    let r = ask(
        &mut w,
        &mut wmacs,
        9,
        root_creds(),
        Request::Create(req::Create {
            hold: 0,
            parent: root,
            name: "f".into(),
            mode: 0o644,
            umask: 0,
            uid: 0,
            gid: 0,
            what: CreateWhat::File {
                spec: LayoutSpec::default(),
            },
        }),
    );
    assert_eq!(errno_of(&r), Some(Errno::EXDEV), "misplaced create: {r:?}");

    // Expired: refused with EKEYEXPIRED once past its expiry (and the clock slack).
    let wait_until = good.expires + 3;
    common::poll(
        "the capability to expire",
        common::scaled(Duration::from_secs(60)),
        || {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            (now > wait_until).then_some(())
        },
    );
    let r = ask(&mut d, &mut dmacs, 10, root_creds(), read(Some(good)));
    assert_eq!(errno_of(&r), Some(Errno::EKEYEXPIRED), "expired: {r:?}");
    // The client library renews by itself: the file opened before reads on.
    tc.run(Duration::from_secs(30), async |_c| {
        let mut back = vec![0u8; data.len()];
        assert_eq!(held.read_at(0, &mut back).await.unwrap(), data.len());
        assert_eq!(back, data);
        held.write_at(0, b"again").await.unwrap();
    });
}

/// A TCP relay on 127.0.0.1 to `upstream` that keeps every byte it carries (both
/// ways); returns its address and what it carried so far.
fn relay(upstream: String) -> (String, Arc<std::sync::Mutex<Vec<u8>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = seen.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = std::net::TcpStream::connect(&upstream) else {
                continue;
            };
            for (mut from, mut to) in [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server, client),
            ] {
                let keep = keep.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    loop {
                        let n = match from.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        keep.lock().unwrap().extend_from_slice(&buf[..n]);
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
    (addr, seen)
}

#[test]
fn over_tls_nothing_travels_in_the_clear() {
    let cluster = Cluster::builder().genconfig_arg("--tls").start();
    let config = cluster.config().clone();
    assert!(config.security.tls);
    // A client whose connections to s0 go through a relay that records the bytes.
    let (relay_addr, seen) = relay(config.servers[0].address.clone());
    let text = std::fs::read_to_string(cluster.config_path())
        .unwrap()
        .replace(&config.servers[0].address, &relay_addr);
    let relayed_conf = cluster.dir().join("relayed.toml");
    std::fs::write(&relayed_conf, text).unwrap();
    let relayed = pvfs_config::Config::load(&relayed_conf).unwrap();
    let tc = common::TestClient::new(relayed);
    // A file all of whose data lives on s0, full of a marker.
    let marker = b"PVFS-MARKER-IN-THE-CLEAR-";
    let data: Vec<u8> = marker.iter().copied().cycle().take(3 << 20).collect();
    tc.run(Duration::from_secs(60), async |c| {
        let f = c
            .create(
                "/on-s0",
                0o644,
                LayoutSpec {
                    stripe_size: None,
                    stripe_count: Some(1),
                    base: Some(0),
                    replicas: None,
                },
                true,
            )
            .await
            .unwrap();
        assert_eq!(f.layout().datafiles[0].server, 0);
        f.write_at(0, &data).await.unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(f.read_at(0, &mut back).await.unwrap(), data.len());
        assert!(back == data, "data read back over TLS differs");
        c.mkdir("/named-PVFS-MARKER-IN-THE-CLEAR-", 0o755)
            .await
            .unwrap();
    });
    let carried = seen.lock().unwrap().clone();
    assert!(
        carried.len() >= 2 * data.len(),
        "the relay carried {} bytes: the data did not go through it",
        carried.len()
    );
    assert!(
        !carried.windows(marker.len()).any(|w| w == marker),
        "the marker crossed the network in the clear"
    );
    // Nor does the pvfs handshake: a client that does not speak TLS gets nowhere.
    let plain = std::fs::read_to_string(cluster.config_path())
        .unwrap()
        .replace("tls = true", "tls = false");
    let plain_conf = cluster.dir().join("plain.toml");
    std::fs::write(&plain_conf, plain).unwrap();
    let out = common::run_pvfs(
        &["ls", "-c", plain_conf.to_str().unwrap(), "/"],
        &[],
        &["PVFS_CONFIG"],
    );
    out.err_containing("[security] tls = true");
}

#[test]
fn a_user_runs_a_file_system_of_its_own_without_root_or_munge() {
    const TEST: &str = "a_user_runs_a_file_system_of_its_own_without_root_or_munge";
    if !can_switch_users(TEST) {
        return;
    }
    // The demo, as the user: its servers, keys and client are all the user's.
    let id = USER.to_string();
    let (reuid, regid) = (format!("--reuid={id}"), format!("--regid={id}"));
    let out = common::run_cmd(
        "setpriv",
        &[
            &reuid,
            &regid,
            "--clear-groups",
            "env",
            "TMPDIR=/tmp",
            common::pvfs_bin(),
            "demo",
        ],
        &[],
        &["PVFS_CONFIG"],
    );
    assert!(
        out.status.success(),
        "the demo as uid {USER}:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains("done"), "{}", out.stdout);
    // A file system the user generates and starts: the key is the user's, no MUNGE.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(USER), Some(USER)).unwrap();
    let conf = dir.path().join("mine.toml");
    let c = conf.to_str().unwrap();
    let d = dir.path().to_str().unwrap();
    let as_user = |args: &[&str]| {
        let mut full = vec![
            reuid.as_str(),
            regid.as_str(),
            "--clear-groups",
            common::pvfs_bin(),
        ];
        full.extend(args);
        common::run_cmd("setpriv", &full, &[], &["PVFS_CONFIG"])
    };
    as_user(&[
        "genconfig",
        "--servers",
        "2",
        "--dir",
        d,
        "--port",
        "0",
        "--munge-socket",
        "/nonexistent/munge.socket",
        "-o",
        c,
    ])
    .ok();
    // Whatever happens, the user's servers do not outlive the test.
    struct Stop<'a>(&'a dyn Fn());
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            (self.0)();
        }
    }
    let stop = || {
        let _ = as_user(&["stop", "-c", c]);
    };
    let _stop = Stop(&stop);
    as_user(&["start", "-c", c]).ok();
    as_user(&["mkdir", "-c", c, "/mine"]).ok();
    let st = as_user(&["stat", "--json", "-c", c, "/mine"]).json();
    assert_eq!(st["uid"], USER, "{st}");
}

/// Lock requests act on the caller's own locks only: a lock owner is keyed by the
/// connection's proven identity, so a MUNGE-proven user naming another client's
/// owner or lease reaches nothing of it; a user needs a capability on the object
/// (from a lookup) and read, resp. write, permission for a read, resp. write, lock;
/// the wait-for graph is for servers only.
#[test]
fn lock_requests_reach_only_the_callers_own_locks() {
    use pvfs_proto::locks::{LockOwner, LockType, TO_EOF};
    const TEST: &str = "lock_requests_reach_only_the_callers_own_locks";
    if !can_switch_users(TEST) {
        return;
    }
    let Some(munged) = Munged::start(TEST) else {
        return;
    };
    let cluster = Cluster::builder().munge(&munged).start();
    let config = cluster.config().clone();
    let tc = cluster.client();
    // A root-owned file, readable by all.
    let f = tc.run(Duration::from_secs(20), async |c| {
        let file = c
            .create("/locked", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        file.attr().handle
    });
    let server = config.owner_of(f).unwrap();
    let root = config.root_handle();
    let (mut k, mut kmacs) = raw_session(&config, server, &key_proof(&config)).unwrap();
    let munge = Munge::open(Some(&munged.socket)).unwrap();
    let user_proof = ClientProof::Munge {
        munge,
        decoder_uid: None,
    };
    let (mut u, mut umacs) = raw_session(&config, server, &user_proof).unwrap();
    // This (root) process's credential: squashed, it acts as nobody.
    let nobody = root_creds;
    let owner = LockOwner {
        client: 7,
        owner: 1,
    };
    let lock = |typ, owner, proof| {
        Request::Lock(req::Lock {
            handle: f,
            owner,
            typ,
            start: 0,
            end: TO_EOF,
            pid: 1,
            flags: 0,
            proof,
        })
    };
    let unlock = || {
        Request::Unlock(req::Unlock {
            handle: f,
            owner,
            start: 0,
            end: TO_EOF,
            flags: 0,
        })
    };
    let renew = |release| {
        Request::RenewLease(req::RenewLease {
            client: owner.client,
            release,
        })
    };
    let test = |proof| {
        Request::TestLock(req::TestLock {
            handle: f,
            owner: LockOwner {
                client: 8,
                owner: 1,
            },
            typ: LockType::Read,
            start: 0,
            end: 0,
            proof,
        })
    };
    let r = ask(
        &mut k,
        &mut kmacs,
        1,
        root_creds(),
        lock(LockType::Write, owner, None),
    );
    assert!(matches!(r, Response::Locked { .. }), "{r:?}");
    // The user, knowing only the handle: no capability, no lock.
    let r = ask(
        &mut u,
        &mut umacs,
        1,
        nobody(),
        lock(LockType::Read, owner, None),
    );
    assert_eq!(errno_of(&r), Some(Errno::EACCES), "{r:?}");
    // With the capability a lookup of the name grants.
    let r = ask(
        &mut u,
        &mut umacs,
        2,
        nobody(),
        Request::Lookup(req::Lookup {
            dir: root,
            name: "locked".into(),
            want: pvfs_proto::rights::READ,
        }),
    );
    let Response::Entry { caps, .. } = r else {
        panic!("lookup: {r:?}")
    };
    let proof = caps.first().cloned();
    assert!(proof.is_some(), "no capability granted");
    // Read permission: the read lock is refused only by root's write lock.
    let mine = LockOwner {
        client: 9,
        owner: 1,
    };
    let r = ask(
        &mut u,
        &mut umacs,
        3,
        nobody(),
        lock(LockType::Read, mine, proof.clone()),
    );
    assert_eq!(errno_of(&r), Some(Errno::EAGAIN), "{r:?}");
    // No write permission: no write lock.
    let r = ask(
        &mut u,
        &mut umacs,
        4,
        nobody(),
        lock(LockType::Write, mine, proof.clone()),
    );
    assert_eq!(errno_of(&r), Some(Errno::EACCES), "{r:?}");
    // Naming root's owner and lease reaches nothing: the lock stays.
    let r = ask(&mut u, &mut umacs, 5, nobody(), unlock());
    assert!(matches!(r, Response::Done {}), "{r:?}");
    let r = ask(&mut u, &mut umacs, 6, nobody(), renew(true));
    assert!(matches!(r, Response::Done {}), "{r:?}");
    let r = ask(&mut u, &mut umacs, 7, nobody(), test(proof.clone()));
    assert!(
        matches!(r, Response::LockTest { conflict: Some(c) } if c.typ == LockType::Write && !c.same_client),
        "{r:?}"
    );
    // Neither can the user renew root's lease: it is not the user's.
    let r = ask(&mut u, &mut umacs, 8, nobody(), renew(false));
    assert!(matches!(r, Response::Lease { lease: 0, .. }), "{r:?}");
    // The wait-for graph is the servers' own.
    let r = ask(
        &mut u,
        &mut umacs,
        9,
        nobody(),
        Request::WaitFor(req::WaitFor {
            waiter: pvfs_proto::LockKey::new(0, owner),
            blockers: vec![],
            server: 0,
            handle: f,
        }),
    );
    assert_eq!(errno_of(&r), Some(Errno::EPERM), "{r:?}");
    // Root's own unlock works.
    let r = ask(&mut k, &mut kmacs, 2, root_creds(), unlock());
    assert!(matches!(r, Response::Done {}), "{r:?}");
    let r = ask(&mut u, &mut umacs, 10, nobody(), test(proof));
    assert!(matches!(r, Response::LockTest { conflict: None }), "{r:?}");
}
