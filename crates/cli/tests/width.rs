//! Layout widths: a file's bytes start on its first datafile and reach the others
//! only after the file is widened at its metadata server, so a size asks only the
//! datafiles within the width. Shown against real servers: a small file is stat'ed,
//! listed and read with the data servers of its other datafiles dead; every way of
//! putting bytes past the width (writes, list writes, truncate, fallocate) widens the
//! file first, so another client, and an open file whose width is behind, see them;
//! the server refuses a widening without a WRITE capability and never narrows.
#![allow(clippy::unwrap_used)]

mod common;

use pvfs_proto::req;
use std::time::Duration;

use common::{assert_bytes_eq, is_server_down_errno, scaled, Cluster, Rng};
use pvfs_client::{Errno, LayoutSpec};
use pvfs_proto::message::falloc;
use pvfs_proto::{
    decode, encode, rights, Capability, Creds, Handle, Regions, Request, RequestBody, Response,
};

/// Longest a client call may take here (`TestClient::run` scales it).
const CALL: Duration = Duration::from_secs(60);

/// A layout of 4 datafiles of 64 KiB stripes, the first on server `base`.
fn four(base: Option<u32>) -> LayoutSpec {
    LayoutSpec {
        stripe_size: Some(65536),
        stripe_count: Some(4),
        base,
        replicas: None,
    }
}

#[test]
fn a_small_file_needs_only_its_first_data_server() {
    // s0 holds the metadata and the first datafiles; s1..s3 hold only data.
    let timeout = scaled(Duration::from_secs(2));
    let cluster = Cluster::builder()
        .meta_servers(1)
        .request_timeout(&format!("{}ms", timeout.as_millis()))
        .connect_timeout(&format!("{}ms", timeout.as_millis()))
        .start();
    let mut rng = Rng::new(0x5eed_3901);
    let small = rng.bytes(3901);
    let tc = cluster.client();
    tc.run(CALL, async |c| {
        c.mkdir("/d", 0o755).await.unwrap();
        for name in ["/small", "/d/a", "/d/b", "/d/c"] {
            let f = c.create(name, 0o644, four(Some(0)), true).await.unwrap();
            f.write_at(0, &small).await.unwrap();
            let servers: Vec<u32> = f.layout().datafiles.iter().map(|d| d.server).collect();
            assert_eq!(servers, [0, 1, 2, 3], "{name}");
        }
        let l = c.stat("/small").await.unwrap().layout().unwrap().clone();
        assert_eq!(l.width, 1, "a file of one stripe unit is 1 wide");
    });
    for s in ["s1", "s2", "s3"] {
        cluster.kill(s, libc::SIGKILL);
    }
    // A client that never saw the files: everything it needs is on s0.
    let fresh = cluster.client();
    fresh.run(CALL, async |c| {
        assert_eq!(c.stat("/small").await.unwrap().size, 3901);
        let listed = c.readdir_plus("/d", true).await.unwrap();
        assert_eq!(listed.len(), 3);
        for (e, a) in listed {
            assert_eq!(a.unwrap().size, 3901, "{}", e.name);
        }
        // A read asking for more than the file holds: the width says where it ends.
        let f = c.open("/small").await.unwrap();
        let mut got = vec![0u8; 65536];
        let n = f.read_at(0, &mut got).await.unwrap();
        assert_bytes_eq(&got[..n], &small, "/small read whole");
        // Rewriting inside the first stripe unit needs no other server.
        f.write_at(100, b"rewritten").await.unwrap();
        assert_eq!(c.stat("/small").await.unwrap().size, 3901);
        // Growing past it needs s1: a prompt server-down error. The file was widened
        // before the write failed and stays so (a failed write may have written part
        // of its bytes, as write(2) may).
        let e = f.write_at(65536, b"past the first unit").await.unwrap_err();
        assert!(is_server_down_errno(e.errno), "{e}");
        let lite = c.stat_lite("/small").await.unwrap();
        assert_eq!(lite.layout().unwrap().width, 2);
    });
    for s in ["s1", "s2", "s3"] {
        cluster.restart(s);
    }
    // The client may keep the servers for down a moment longer.
    common::poll("the write past the first unit", scaled(CALL), || {
        fresh
            .run(CALL, async |c| {
                let f = c.open("/small").await?;
                f.write_at(65536, b"past the first unit").await
            })
            .ok()
    });
    fresh.run(CALL, async |c| {
        assert_eq!(c.stat("/small").await.unwrap().size, 65536 + 19);
    });
}

#[test]
fn bytes_past_the_width_are_seen_by_every_client() {
    let cluster = Cluster::start();
    let mut rng = Rng::new(0x5eed_3902);
    let small = rng.bytes(3901);
    let far = rng.bytes(1000);
    let (a, b) = (cluster.client(), cluster.client());
    a.run(CALL, async |c| {
        let f = c.create("/f", 0o644, four(None), true).await.unwrap();
        f.write_at(0, &small).await.unwrap();
    });
    // B opens the file while it is 1 wide, and keeps it open.
    let held = b.run(CALL, async |c| c.open("/f").await.unwrap());
    assert_eq!(held.layout().width, 1);
    a.run(CALL, async |c| {
        let f = c.open("/f").await.unwrap();
        f.write_at(200_000, &far).await.unwrap();
        assert_eq!(f.stat().await.unwrap().layout().unwrap().width, 4);
    });
    b.run(CALL, async |c| {
        assert_eq!(c.stat("/f").await.unwrap().size, 201_000);
        // The open file's width is behind: its reads still find the end.
        let mut got = vec![0xffu8; 300_000];
        let n = held.read_at(0, &mut got).await.unwrap();
        assert_eq!(n, 201_000);
        assert_bytes_eq(&got[..3901], &small, "/f start");
        assert!(got[3901..200_000].iter().all(|&x| x == 0), "the hole");
        assert_bytes_eq(&got[200_000..n], &far, "/f far end");
        // A read inside the hole, on an empty datafile: zeros, not the end.
        let mut hole = vec![0xffu8; 100];
        assert_eq!(held.read_at(150_000, &mut hole).await.unwrap(), 100);
        assert!(hole.iter().all(|&x| x == 0));
        // List I/O past the width from the file B held since it was 1 wide.
        let regions = Regions::List(vec![
            pvfs_proto::Extent { offset: 10, len: 5 },
            pvfs_proto::Extent {
                offset: 300_000,
                len: 5,
            },
        ]);
        held.write_regions(&regions, b"0123456789").await.unwrap();
        assert_eq!(c.stat("/f").await.unwrap().size, 300_005);
    });
    a.run(CALL, async |c| {
        assert_eq!(c.stat("/f").await.unwrap().size, 300_005);
    });
}

#[test]
fn truncate_and_fallocate_widen_and_holes_do_not() {
    let cluster = Cluster::start();
    let (a, b) = (cluster.client(), cluster.client());
    a.run(CALL, async |c| {
        let t = c.create("/t", 0o644, four(None), true).await.unwrap();
        t.truncate(150_000).await.unwrap();
        let u = c.create("/u", 0o644, four(None), true).await.unwrap();
        u.fallocate(0, 0, 300_000).await.unwrap();
        let k = c.create("/k", 0o644, four(None), true).await.unwrap();
        k.write_at(0, b"kept").await.unwrap();
        k.fallocate(falloc::KEEP_SIZE, 0, 300_000).await.unwrap();
        let p = c.create("/p", 0o644, four(None), true).await.unwrap();
        p.write_at(0, &[7u8; 3901]).await.unwrap();
        p.fallocate(falloc::PUNCH_HOLE | falloc::KEEP_SIZE, 100_000, 100_000)
            .await
            .unwrap();
        // Cutting a wide file back goes to every datafile.
        let w = c.create("/w", 0o644, four(None), true).await.unwrap();
        w.write_at(0, &vec![1u8; 300_000]).await.unwrap();
        w.truncate(10).await.unwrap();
    });
    b.run(CALL, async |c| {
        let width = |a: &pvfs_client::Attr| a.layout().unwrap().width;
        let t = c.stat("/t").await.unwrap();
        assert_eq!((t.size, width(&t)), (150_000, 3));
        let u = c.stat("/u").await.unwrap();
        assert_eq!((u.size, width(&u)), (300_000, 4));
        // Preallocated blocks past the width count too (st_blocks).
        let k = c.stat("/k").await.unwrap();
        assert_eq!((k.size, width(&k)), (4, 4));
        assert!(k.blocks * 512 >= 300_000, "{} blocks", k.blocks);
        let p = c.stat("/p").await.unwrap();
        assert_eq!((p.size, width(&p)), (3901, 1));
        let w = c.stat("/w").await.unwrap();
        assert_eq!((w.size, width(&w)), (10, 4));
        let f = c.open("/w").await.unwrap();
        let mut got = vec![0xffu8; 300_000];
        assert_eq!(f.read_at(0, &mut got).await.unwrap(), 10);
    });
}

/// Sends one raw request to server `server` on a key-holding connection, with
/// `creds`, and returns the answer (errors included).
async fn raw(config: &pvfs_config::Config, server: usize, creds: Creds, req: Request) -> Response {
    let mux = common::raw_mux(config, server).await;
    let body = encode(&RequestBody {
        creds,
        request: req,
        retry: None,
        origin: 0,
    });
    let mut call = mux.call(&body, &[], true).await.unwrap();
    decode(&call.recv().await.unwrap().body).unwrap()
}

/// The capability on object `handle` its owner grants for `want`.
async fn object_cap(config: &pvfs_config::Config, handle: Handle, want: u32) -> Capability {
    let owner = config.owner_of(handle).unwrap();
    let req = Request::GetAttr(req::GetAttr {
        handle,
        want,
        proof: None,
    });
    match raw(config, owner, Creds::default(), req).await {
        Response::Attr { caps, .. } => caps.into_iter().next().unwrap(),
        other => panic!("GetAttr for a capability: {other:?}"),
    }
}

#[test]
fn widening_needs_a_write_capability_and_never_narrows() {
    let cluster = Cluster::start();
    let config = cluster.config().clone();
    let tc = cluster.client();
    tc.run(CALL, async |c| {
        let f = c.create("/f", 0o644, four(None), true).await.unwrap();
        f.write_at(0, b"small").await.unwrap();
        c.mkdir("/dir", 0o755).await.unwrap();
        let h = f.handle();
        let owner = config.owner_of(h).unwrap();
        let widen = |width, cap| {
            Request::Widen(req::Widen {
                handle: h,
                width,
                cap,
            })
        };
        let width = async |req| match raw(&config, owner, Creds::default(), req).await {
            Response::Attr { attr, .. } => Ok(attr.layout().unwrap().width),
            Response::Error { errno, message, .. } => Err((Errno(errno), message)),
            other => panic!("Widen answered {other:?}"),
        };
        let read = object_cap(&config, h, rights::READ).await;
        let write = object_cap(&config, h, rights::WRITE).await;
        let mut forged = write.clone();
        forged.rights |= rights::REMOVE;
        for (what, cap) in [
            ("no capability", None),
            ("a read capability", Some(read)),
            ("an altered capability", Some(forged)),
        ] {
            let (e, why) = width(widen(3, cap)).await.unwrap_err();
            assert_eq!(e, Errno::EACCES, "{what}: {why}");
        }
        assert_eq!(c.stat("/f").await.unwrap().layout().unwrap().width, 1);
        assert_eq!(width(widen(3, Some(write.clone()))).await, Ok(3));
        assert_eq!(
            width(widen(2, Some(write.clone()))).await,
            Ok(3),
            "never narrower"
        );
        for bad in [0, 5] {
            let (e, why) = width(widen(bad, Some(write.clone()))).await.unwrap_err();
            assert_eq!(e, Errno::EINVAL, "width {bad}: {why}");
        }
        assert_eq!(c.stat("/f").await.unwrap().layout().unwrap().width, 3);
        // Only regular files have a width (and only they are granted WRITE).
        let dir = c.stat("/dir").await.unwrap().handle;
        let cap = object_cap(&config, dir, rights::READ).await;
        let req = Request::Widen(req::Widen {
            handle: dir,
            width: 1,
            cap: Some(cap),
        });
        match raw(
            &config,
            config.owner_of(dir).unwrap(),
            Creds::default(),
            req,
        )
        .await
        {
            Response::Error { errno, .. } => assert_eq!(Errno(errno), Errno::EACCES),
            other => panic!("Widen of a directory answered {other:?}"),
        }
    });
}
