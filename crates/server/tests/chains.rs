//! Chains of copies on real servers (three opened in this process, each on its own
//! loopback listener, one of them the authority): a write sent to the head of a
//! datafile's chain reaches every copy's disk before it is answered; a copy that is
//! not the head refuses a client's change, and so does every copy under another map
//! version; overlapping writes racing through the head leave every copy the same;
//! a client naming fewer copies than its capability was granted for is refused;
//! a truncate passes down the chain; reads and sizes come from any copy that is up
//! (`docs/replication.md`, "Data: chains"). With the head's range lock switched off,
//! the racing writes leave the copies different (3 runs of 3).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use pvfs_proto::map::Copies;
use pvfs_proto::{
    decode, encode, req, rights, Creds, ErrorKind, Regions, Request, RequestBody, Response, Stripe,
};
use pvfs_server::ctx::{Ctx, Faults};
use pvfs_server::Setup;
use pvfs_transport::{connect_mux, AutoTransport, BufPool, MuxConn, Target, Transport};

/// Three servers with both roles; server 0 runs the authority.
struct Cluster {
    ctxs: Vec<Arc<Ctx>>,
    conns: Vec<Arc<MuxConn>>,
    stop: tokio::sync::watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

async fn start() -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let mut config = pvfs_server::local::LocalServer::configure(dir.path(), 3).unwrap();
    config.replication.authority = vec![0];
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut ctxs = Vec::new();
    for s in &config.servers {
        let ctx = pvfs_server::open(config.clone(), &s.name, Setup::local(Faults::default()))
            .await
            .unwrap();
        let listener = AutoTransport.listen(&s.address).await.unwrap();
        let mut stopped = stopped.clone();
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        tokio::spawn(pvfs_server::serve(ctx.clone(), listener, shutdown, || {}));
        ctxs.push(ctx);
    }
    // Every server holds a lease and knows the map.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !ctxs
        .iter()
        .all(|c| c.lease.valid() && c.lease.map().is_ok())
    {
        assert!(tokio::time::Instant::now() < deadline, "no leases");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let keys = Arc::new(pvfs_auth::KeyRing::load(&config.security.key).unwrap());
    let proof = pvfs_auth::ClientProof::Key(keys);
    let mut conns = Vec::new();
    for s in &config.servers {
        let target = Target {
            addr: &s.address,
            server: &s.name,
            fsid: config.fsid,
            via: &AutoTransport,
        };
        let (mux, _) = connect_mux(
            &target,
            &proof,
            None,
            "chains-test",
            Duration::from_secs(5),
            Duration::from_secs(30),
            BufPool::new(1 << 20, 4),
        )
        .await
        .unwrap();
        conns.push(mux);
    }
    Cluster {
        ctxs,
        conns,
        stop,
        _dir: dir,
    }
}

impl Cluster {
    /// Sends `request` (with `data`) to server `i`; its answer, or the error's kind.
    async fn call(&self, i: usize, request: Request, data: &[u8]) -> Result<Response, ErrorKind> {
        let body = encode(&RequestBody {
            creds: Creds::default(),
            request,
            retry: None,
            origin: 0,
        });
        let mut call = self.conns[i].call(&body, &[data], true).await.unwrap();
        let frame = call.recv().await.unwrap();
        match decode::<Response>(&frame.body).unwrap() {
            Response::Error { kind, .. } => Err(kind),
            other => Ok(other),
        }
    }

    fn copies(&self, hop: u32) -> Copies {
        Copies {
            servers: vec![0, 1, 2],
            map: self.ctxs[0].lease.map().unwrap().version,
            hop,
        }
    }

    /// Server `i`'s copy of datafile `h`, from its disk.
    fn on_disk(&self, i: usize, h: u64) -> Vec<u8> {
        let data = &self.ctxs[i].data;
        let size = data.stat(h).unwrap().size as usize;
        let mut buf = vec![0u8; size];
        let n = data.read_at(h, 0, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }
}

const STRIPE: Stripe = Stripe {
    size: 65536,
    count: 1,
};

fn write(c: &Cluster, h: u64, offset: u64, len: u64, copies: Copies) -> Request {
    Request::Write(req::Write {
        handle: h,
        stripe: STRIPE,
        index: 0,
        regions: Regions::contig(offset, len),
        sync: false,
        cap: Some(
            c.ctxs[0]
                .caps
                .mint_for_copies(h, rights::WRITE, 0, &[0, 1, 2]),
        ),
        copies,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_pass_down_the_chain_and_only_the_head_takes_them() {
    let c = start().await;
    let h = c.ctxs[0].config.servers[0].handles.first + 4242;

    // The head (server 0: all up, first in the layout) takes a write; every copy has
    // it on disk when it is answered.
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let w = write(&c, h, 0, bytes.len() as u64, c.copies(0));
    match c.call(0, w, &bytes).await.unwrap() {
        Response::Written { bytes: n, .. } => assert_eq!(n, bytes.len() as u64),
        other => panic!("{other:?}"),
    }
    for i in 0..3 {
        assert_eq!(c.on_disk(i, h), bytes, "copy on server {i}");
    }

    // Not the head: refused with a map error, nothing written there.
    let w = write(&c, h, 0, 4, c.copies(0));
    assert_eq!(c.call(1, w, b"XXXX").await.unwrap_err(), ErrorKind::Map);
    // Another map version: refused, by the head too.
    let mut stale = c.copies(0);
    stale.map += 1;
    let w = write(&c, h, 0, 4, stale);
    assert_eq!(c.call(0, w, b"YYYY").await.unwrap_err(), ErrorKind::Map);
    // A client naming fewer copies than its capability was granted for (so that one
    // copy would miss the write): refused, whatever the copies it names.
    for fewer in [vec![], vec![0, 1]] {
        let mut w = write(&c, h, 0, 4, c.copies(0));
        if let Request::Write(w) = &mut w {
            w.copies.servers = fewer;
        }
        assert_eq!(c.call(0, w, b"WWWW").await.unwrap_err(), ErrorKind::Denied);
    }
    // Forwarded at the wrong place in the chain (as if the first member): refused.
    let w = write(&c, h, 0, 4, c.copies(2));
    assert_eq!(c.call(1, w, b"ZZZZ").await.unwrap_err(), ErrorKind::Map);
    for i in 0..3 {
        assert_eq!(c.on_disk(i, h), bytes, "copy on server {i} after refusals");
    }

    // Overlapping writes racing through the head reach every copy in one order.
    let c = Arc::new(c);
    let mut racers = Vec::new();
    for k in 0..24u8 {
        let c = c.clone();
        racers.push(tokio::spawn(async move {
            let off = u64::from(k % 4) * 1000;
            let data = vec![k; 50_000];
            let w = write(&c, h, off, data.len() as u64, c.copies(0));
            c.call(0, w, &data).await.map(|_| ())
        }));
    }
    for r in racers {
        r.await.unwrap().unwrap();
    }
    let head = c.on_disk(0, h);
    assert_ne!(head, bytes, "the racing writes changed it");
    for i in 1..3 {
        assert_eq!(
            c.on_disk(i, h),
            head,
            "copy on server {i} after racing writes"
        );
    }
    assert_eq!(c.ctxs[0].chain_locks.held(), 0);

    // A truncate passes down the chain too.
    let t = Request::Truncate(req::Truncate {
        handle: h,
        stripe: STRIPE,
        index: 0,
        size: 12_345,
        cap: Some(
            c.ctxs[0]
                .caps
                .mint_for_copies(h, rights::WRITE, 0, &[0, 1, 2]),
        ),
        copies: c.copies(0),
    });
    c.call(0, t, &[]).await.unwrap();
    for i in 0..3 {
        assert_eq!(
            c.on_disk(i, h),
            head[..12_345],
            "copy on server {i} after truncate"
        );
    }

    // Every copy that is up answers sizes and reads under the map; not under another.
    for i in 0..3 {
        let version = c.copies(0).map;
        let sizes = Request::GetSizes(req::GetSizes {
            handles: vec![h],
            map: Some(version),
        });
        match c.call(i, sizes, &[]).await.unwrap() {
            Response::Sizes { sizes } => assert_eq!(sizes[0].size, 12_345),
            other => panic!("{other:?}"),
        }
        let stale = Request::GetSizes(req::GetSizes {
            handles: vec![h],
            map: Some(version + 1),
        });
        assert_eq!(c.call(i, stale, &[]).await.unwrap_err(), ErrorKind::Map);
        let read = Request::Read(req::Read {
            handle: h,
            stripe: STRIPE,
            index: 0,
            regions: Regions::contig(0, 100),
            cap: Some(
                c.ctxs[0]
                    .caps
                    .mint_for_copies(h, rights::READ, 0, &[0, 1, 2]),
            ),
            copies: c.copies(0),
        });
        match c.call(i, read, &[]).await.unwrap() {
            Response::ReadStart { local_size } => assert_eq!(local_size, 12_345),
            other => panic!("{other:?}"),
        }
    }
    let _ = c.stop.send(true);
}
