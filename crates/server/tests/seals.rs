//! A directory shard sealed by an rmdir that never took the seal back (the client
//! gave up while this server was down): new names are refused as busy while the
//! rmdir may still run, allowed once the seal is older than any rmdir can take, and
//! refused with ENOENT once the directory is gone. Found by the simulator: such a
//! seal used to refuse every new name with ENOENT until `pvfs fsck`.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use pvfs_proto::message::UnlinkWant;
use pvfs_proto::{
    req, CreateWhat, Creds, Errno, ErrorKind, LayoutSpec, LinkDrop, Request, Response,
};
use pvfs_server::local::LocalServer;

fn create(parent: u64, name: &str, what: CreateWhat) -> Request {
    LocalServer::create_request(parent, name, what)
}

fn file(parent: u64, name: &str) -> Request {
    create(
        parent,
        name,
        CreateWhat::File {
            spec: LayoutSpec::default(),
        },
    )
}

fn seal(dir: u64, seal: bool) -> Request {
    Request::SealDir(req::SealDir {
        dir,
        seal,
        ticket: None,
    })
}

#[tokio::test]
async fn an_abandoned_seal_stops_refusing_new_names() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = LocalServer::configure(tmp.path(), 1).unwrap();
    // The grace is four request timeouts.
    config.timeouts.request = Duration::from_millis(500);
    let root = config.root_handle();
    let s = LocalServer::open(config, "s0").await.unwrap();
    let c = Creds::default();
    let mkdir = create(
        root,
        "d",
        CreateWhat::Dir {
            shards: 1,
            default_layout: None,
        },
    );
    let d = match s.call(c.clone(), mkdir, None).await.unwrap() {
        Response::Created { attr, .. } => attr.handle,
        other => panic!("{other:?}"),
    };
    let sealed_at = Instant::now();
    s.call(c.clone(), seal(d, true), None).await.unwrap();

    // While the rmdir may run: busy, and nothing added.
    let e = s.call(c.clone(), file(d, "early"), None).await.unwrap_err();
    assert_eq!((e.kind, e.errno), (ErrorKind::Busy, Errno::EAGAIN), "{e}");
    assert!(
        sealed_at.elapsed() < Duration::from_secs(2),
        "refused early"
    );
    assert!(s.ctx.meta.read().unwrap().is_sealed(d).unwrap());

    // Unsealed by its rmdir: names come at once.
    s.call(c.clone(), seal(d, false), None).await.unwrap();
    s.call(c.clone(), file(d, "after-unseal"), None)
        .await
        .unwrap();
    let unlink = Request::Unlink(req::Unlink {
        dir: d,
        name: "after-unseal".into(),
        expect: None,
        want: UnlinkWant::NotDir,
        fate: LinkDrop::Delete,
    });
    s.call(c.clone(), unlink, None).await.unwrap();

    // Sealed again and abandoned: once the grace is over, a new name takes the seal
    // away.
    s.call(c.clone(), seal(d, true), None).await.unwrap();
    let sealed_at = Instant::now();
    let mut answer = s.call(c.clone(), file(d, "late"), None).await;
    while matches!(&answer, Err(e) if e.kind == ErrorKind::Busy) {
        assert!(
            sealed_at.elapsed() < Duration::from_secs(30),
            "the abandoned seal still refuses names"
        );
        answer = s.call(c.clone(), file(d, "late"), None).await;
    }
    answer.unwrap();
    assert!(
        sealed_at.elapsed() >= Duration::from_secs(2),
        "the seal went before its grace"
    );
    assert!(!s.ctx.meta.read().unwrap().is_sealed(d).unwrap());

    // A directory whose rmdir finished: its sealed shard refuses with ENOENT.
    let e = Request::Create(req::Create {
        hold: 0,
        parent: root,
        name: "gone".into(),
        mode: 0o755,
        umask: 0,
        uid: 0,
        gid: 0,
        what: CreateWhat::Dir {
            shards: 1,
            default_layout: None,
        },
    });
    let gone = match s.call(c.clone(), e, None).await.unwrap() {
        Response::Created { attr, .. } => attr.handle,
        other => panic!("{other:?}"),
    };
    s.call(c.clone(), seal(gone, true), None).await.unwrap();
    let rmdir = Request::Unlink(req::Unlink {
        dir: root,
        name: "gone".into(),
        expect: Some(gone),
        want: UnlinkWant::Dir,
        fate: LinkDrop::Delete,
    });
    s.call(c.clone(), rmdir, None).await.unwrap();
    let e = s.call(c.clone(), file(gone, "x"), None).await.unwrap_err();
    assert_eq!(e.errno, Errno::ENOENT, "{e}");
    s.close().await;
}
