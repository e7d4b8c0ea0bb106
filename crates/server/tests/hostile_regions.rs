//! A data request whose region description would make the server walk billions of
//! pieces (a terabyte in 1-byte blocks, found by fuzzing: 2^28 bytes of it took a
//! data server 12 s of CPU from a 41-byte request) is refused at once, with E2BIG,
//! for reads and writes; an ordinary one still works (negative control).
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use pvfs_proto::{req, rights, Creds, Errno, Regions, Request, Response, Stripe};
use pvfs_server::local::LocalServer;

#[tokio::test]
async fn reads_and_writes_of_hostile_regions_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = LocalServer::configure(dir.path(), 1).unwrap();
    let handle = config.servers[0].handles.first + 1000;
    let s = LocalServer::open(config, "s0").await.unwrap();
    let stripe = Stripe {
        size: 65536,
        count: 1,
    };
    let hostile = Regions::Strided {
        offset: 0,
        block: 1,
        stride: 2,
        start: 0,
        len: 1 << 40,
    };
    let read = |regions: Regions| {
        Request::Read(req::Read {
            copies: Default::default(),
            handle,
            stripe,
            index: 0,
            regions,
            cap: Some(s.ctx.caps.mint(handle, rights::READ, 0)),
        })
    };
    let write = |regions: Regions| {
        Request::Write(req::Write {
            copies: Default::default(),
            handle,
            stripe,
            index: 0,
            regions,
            sync: false,
            cap: Some(s.ctx.caps.mint(handle, rights::WRITE, 0)),
        })
    };
    for (what, request) in [
        ("read", read(hostile.clone())),
        ("write", write(hostile.clone())),
    ] {
        let start = Instant::now();
        let err = s.call(Creds::default(), request, None).await.unwrap_err();
        assert_eq!(err.errno, Errno::E2BIG, "{what}: {err}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what}: refused only after {:?}",
            start.elapsed()
        );
    }
    // An ordinary read of the (empty) datafile is answered (streamed).
    let ok = s
        .call(Creds::default(), read(Regions::contig(0, 4096)), None)
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    let zero_write = s
        .call(Creds::default(), write(Regions::contig(0, 0)), None)
        .await
        .unwrap();
    assert!(
        matches!(zero_write, Response::Written { bytes: 0, .. }),
        "{zero_write:?}"
    );
    s.close().await;
}
