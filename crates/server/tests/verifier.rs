//! The write verifier: a data server answers writes, truncates and preallocations
//! with a number that changes only when its machine boots again (a power loss may
//! have taken what was not synced), and refuses with EIO an fsync whose writes were
//! made under another one — instead of claiming a durability it cannot give. (Found
//! by the simulator: a truncate, a power loss of its data server, then an fsync that
//! succeeded on the restarted server, which had lost the truncate.)
#![allow(clippy::unwrap_used)]

use pvfs_proto::{req, rights, Creds, Errno, ErrorKind, Regions, Request, Response, Stripe};
use pvfs_server::local::LocalServer;

#[tokio::test]
async fn an_fsync_under_another_verifier_than_its_writes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = LocalServer::configure(dir.path(), 1).unwrap();
    let handle = config.servers[0].handles.first + 77;
    let s = LocalServer::open(config, "s0").await.unwrap();
    let stripe = Stripe {
        size: 65536,
        count: 1,
    };
    let truncate = Request::Truncate(req::Truncate {
        copies: Default::default(),
        handle,
        stripe,
        index: 0,
        size: 4096,
        cap: Some(s.ctx.caps.mint(handle, rights::WRITE, 0)),
    });
    let verifier = match s.call(Creds::default(), truncate, None).await.unwrap() {
        Response::Written {
            bytes: 0,
            stat,
            verifier,
        } => {
            assert_eq!(stat.size, 4096);
            verifier
        }
        other => panic!("{other:?}"),
    };
    assert_ne!(verifier, 0);
    let fsync = |verifier| {
        Request::Fsync(req::Fsync {
            handles: vec![handle],
            verifier,
        })
    };
    // The verifier the writes got, or none: synced.
    for v in [verifier, 0] {
        let r = s.call(Creds::default(), fsync(v), None).await.unwrap();
        assert_eq!(r, Response::Done {});
    }
    // Another one (the server's machine booted since the writes): refused.
    let e = s
        .call(Creds::default(), fsync(verifier ^ 1), None)
        .await
        .unwrap_err();
    assert_eq!((e.errno, e.kind), (Errno::EIO, ErrorKind::Storage), "{e}");
    // A write answers the same verifier.
    let write = Request::Write(req::Write {
        copies: Default::default(),
        handle,
        stripe,
        index: 0,
        regions: Regions::contig(0, 0),
        sync: false,
        cap: Some(s.ctx.caps.mint(handle, rights::WRITE, 0)),
    });
    match s.call(Creds::default(), write, None).await.unwrap() {
        Response::Written { verifier: v, .. } => assert_eq!(v, verifier),
        other => panic!("{other:?}"),
    }
    s.close().await;
}
