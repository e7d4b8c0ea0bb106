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

use std::sync::Arc;
use std::time::Duration;

use common::{key_proof, raw_session, run_pvfs_as, Cluster, Munged};
use pvfs_auth::{ClientProof, HandshakeError, KeyRing, Munge};
use pvfs_client::Errno;
use pvfs_proto::{decode, encode, CreateWhat, Creds, LayoutSpec, Request, RequestBody, Response};

/// uid and gid of the unprivileged user the tests act as (nobody/nogroup).
const USER: u32 = 65534;

/// Sends one request on a raw session (`raw_session`) and returns the answer.
fn ask(
    s: &mut std::net::TcpStream,
    macs: &mut pvfs_auth::SessionMacs,
    id: u64,
    creds: Creds,
    request: Request,
) -> Response {
    use std::io::{Read, Write};
    let body = encode(&RequestBody {
        creds,
        request,
        retry: None,
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
    s.set_read_timeout(Some(common::scaled(Duration::from_secs(10))))
        .unwrap();
    let mut raw = [0u8; 32];
    s.read_exact(&mut raw).unwrap();
    let rh = pvfs_proto::FrameHeader::decode(&raw).unwrap();
    assert_eq!(rh.request_id, id);
    let mut body = vec![0u8; rh.body_len as usize];
    s.read_exact(&mut body).unwrap();
    let mut tag = vec![0u8; rh.tag_len as usize];
    s.read_exact(&mut tag).unwrap();
    let mut data = vec![0u8; rh.data_len as usize];
    s.read_exact(&mut data).unwrap();
    macs.recv
        .open(&raw, &body, &tag)
        .expect("the server's answer carries a valid tag");
    decode(&body).unwrap()
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
    let r = ask(&mut s, &mut macs, 1, root_creds(), Request::Ping {});
    assert!(matches!(r, Response::Pong { .. }), "{r:?}");

    // A request frame without a handshake is not answered: the connection closes.
    {
        use std::io::{Read, Write};
        let mut raw = std::net::TcpStream::connect(&config.servers[1].address).unwrap();
        raw.set_read_timeout(Some(common::scaled(Duration::from_secs(10))))
            .unwrap();
        let body = encode(&RequestBody {
            creds: root_creds(),
            request: Request::ScanObjects {
                after: None,
                max: 10,
            },
            retry: None,
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
    let r = ask(&mut s, &mut macs, 1, other, Request::Ping {});
    assert_eq!(errno_of(&r), Some(Errno::EPERM), "{r:?}");
    // Root's credential acts as nobody: it cannot create root-owned objects.
    let root = config.root_handle();
    let r = ask(
        &mut s,
        &mut macs,
        2,
        root_creds(),
        Request::Create {
            parent: root,
            name: "made-by-squashed-root".into(),
            mode: 0o644,
            uid: 0,
            gid: 0,
            what: CreateWhat::File {
                spec: LayoutSpec::default(),
            },
        },
    );
    assert_eq!(errno_of(&r), Some(Errno::EPERM), "{r:?}");
    // Peer and admin requests are refused.
    for (id, req) in [
        (
            3,
            Request::ScanObjects {
                after: None,
                max: 10,
            },
        ),
        (
            4,
            Request::RemoveObject {
                handle: root,
                ticket: None,
            },
        ),
        (5, Request::Precreate { count: 1 }),
        (
            6,
            Request::SealDir {
                dir: root,
                seal: true,
                ticket: None,
            },
        ),
    ] {
        let what = req.op_name();
        let r = ask(&mut s, &mut macs, id, root_creds(), req);
        assert_eq!(errno_of(&r), Some(Errno::EPERM), "{what}: {r:?}");
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
