//! Hostile frames: raw TCP to real servers. Garbage, truncated,
//! oversized, wrong-version and reserved-bit frames, undecodable bodies, reused request
//! ids and stalled half frames each get an error reply or a closed connection — never
//! a crash — and the server keeps serving everyone else.
//!
//! Frames are built here from the documented layout (crates/proto/src/frame.rs), not
//! with the product's encoder: 32-byte header, magic "PVFS" (LE u32), version u16 = 1,
//! kind u8 (1 request, 2 response, 3 data), flags u8 (1 = END), request id u64, body
//! length u32, tag length u16, reserved u16, data length u32, reserved u32; then body,
//! tag, data.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::{assert_bytes_eq, Cluster, Rng, TestClient};
use pvfs_client::{Errno, LayoutSpec};
use pvfs_proto::frame::{FrameHeader, FrameKind, MAX_BODY, MAX_DATA, MAX_TAG};
use pvfs_proto::{encode, Creds, Regions, Request, RequestBody, Response, Stripe};

const REQUEST: u8 = 1;
const RESPONSE: u8 = 2;
const DATA: u8 = 3;
const END: u8 = 1;
/// The request timeout of the test cluster: 2 s, times the slowdown factor.
fn timeout() -> Duration {
    common::scaled(Duration::from_secs(2))
}
/// Longest wait for a server's reaction on a raw connection.
fn react() -> Duration {
    common::scaled(Duration::from_secs(10))
}
/// Margin over the request timeout for a server to close a stalled connection.
fn margin() -> Duration {
    common::scaled(Duration::from_secs(3))
}

#[allow(clippy::too_many_arguments)]
fn header(version: u16, kind: u8, flags: u8, id: u64, body: u32, tag: u16, data: u32) -> [u8; 32] {
    let mut h = [0u8; 32];
    h[0..4].copy_from_slice(b"PVFS");
    h[4..6].copy_from_slice(&version.to_le_bytes());
    h[6] = kind;
    h[7] = flags;
    h[8..16].copy_from_slice(&id.to_le_bytes());
    h[16..20].copy_from_slice(&body.to_le_bytes());
    h[20..22].copy_from_slice(&tag.to_le_bytes());
    h[24..28].copy_from_slice(&data.to_le_bytes());
    h
}

/// A whole request frame.
fn request(id: u64, req: Request, end: bool, data: &[u8]) -> Vec<u8> {
    let body = encode(&RequestBody {
        creds: Creds::current(),
        request: req,
        retry: None,
    });
    let mut f = header(
        1,
        REQUEST,
        if end { END } else { 0 },
        id,
        body.len() as u32,
        0,
        data.len() as u32,
    )
    .to_vec();
    f.extend_from_slice(&body);
    f.extend_from_slice(data);
    f
}

fn data_frame(id: u64, end: bool, data: &[u8]) -> Vec<u8> {
    let mut f = header(
        1,
        DATA,
        if end { END } else { 0 },
        id,
        0,
        0,
        data.len() as u32,
    )
    .to_vec();
    f.extend_from_slice(data);
    f
}

/// One frame received from a server.
#[derive(Debug)]
struct Reply {
    kind: u8,
    flags: u8,
    id: u64,
    body: Vec<u8>,
    #[allow(dead_code)]
    data: Vec<u8>,
}

impl Reply {
    fn response(&self) -> Response {
        assert_eq!(self.kind, RESPONSE, "expected a response frame: {self:?}");
        pvfs_proto::decode(&self.body).unwrap_or_else(|e| panic!("undecodable response body: {e}"))
    }
}

/// What came back on a raw connection.
#[derive(Debug)]
enum Got {
    Frame(Reply),
    Closed,
}

fn connect(cluster: &Cluster, server: usize) -> TcpStream {
    let s = TcpStream::connect(&cluster.config().servers[server].address).unwrap();
    s.set_read_timeout(Some(react())).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Reads the next frame, or notices the connection was closed (EOF or reset).
/// Fails the test if the server neither answers nor closes within [`react()`].
fn next(s: &mut TcpStream) -> Got {
    let mut h = [0u8; 32];
    let mut got = 0;
    while got < 32 {
        match s.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Got::Closed,
            Ok(0) => panic!("connection closed inside a response header"),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Got::Closed,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!(
                    "server neither answered nor closed the connection within {:?}",
                    react()
                )
            }
            Err(e) => panic!("read failed: {e}"),
        }
    }
    assert_eq!(&h[0..4], b"PVFS", "reply without the magic: {h:02x?}");
    assert_eq!(u16::from_le_bytes([h[4], h[5]]), 1, "reply version");
    assert_eq!((h[22], h[23]), (0, 0), "reply reserved field");
    assert_eq!(&h[28..32], &[0, 0, 0, 0], "reply reserved field");
    let le32 = |r: std::ops::Range<usize>| u32::from_le_bytes(h[r].try_into().unwrap()) as usize;
    let (body_len, tag_len, data_len) = (
        le32(16..20),
        u16::from_le_bytes([h[20], h[21]]) as usize,
        le32(24..28),
    );
    assert!(
        body_len <= MAX_BODY as usize
            && data_len <= MAX_DATA as usize
            && tag_len <= MAX_TAG as usize
    );
    let mut body = vec![0u8; body_len];
    let mut tag = vec![0u8; tag_len];
    let mut data = vec![0u8; data_len];
    s.read_exact(&mut body).unwrap();
    s.read_exact(&mut tag).unwrap();
    s.read_exact(&mut data).unwrap();
    Got::Frame(Reply {
        kind: h[6],
        flags: h[7],
        id: u64::from_le_bytes(h[8..16].try_into().unwrap()),
        body,
        data,
    })
}

/// Expects an error reply with `errno` for request `id`, then a closed connection.
#[track_caller]
fn expect_error_then_close(s: &mut TcpStream, id: u64, errno: Errno, what: &str) {
    match next(s) {
        Got::Frame(r) => {
            assert_eq!(r.id, id, "{what}: reply to the wrong request id");
            assert_eq!(r.flags & END, END, "{what}: error reply without END");
            match r.response() {
                Response::Error { errno: e, message } => {
                    assert_eq!(Errno(e), errno, "{what}: errno (message {message:?})")
                }
                other => panic!("{what}: expected an error reply, got {other:?}"),
            }
        }
        Got::Closed => panic!("{what}: connection closed without the error reply"),
    }
    match next(s) {
        Got::Closed => {}
        Got::Frame(r) => panic!("{what}: connection should close after the error, got {r:?}"),
    }
}

/// Expects the connection to be closed, perhaps after an error reply.
#[track_caller]
fn expect_closed(s: &mut TcpStream, what: &str) {
    loop {
        match next(s) {
            Got::Closed => return,
            Got::Frame(r) => match r.response() {
                Response::Error { .. } => {}
                other => panic!("{what}: expected an error or a close, got {other:?}"),
            },
        }
    }
}

/// Expects an error reply for `id` and a connection that keeps serving.
#[track_caller]
fn expect_error_and_serving(s: &mut TcpStream, id: u64, errno: Option<Errno>, what: &str) {
    match next(s) {
        Got::Frame(r) => {
            assert_eq!(r.id, id, "{what}: reply to the wrong request id");
            match r.response() {
                Response::Error { errno: e, message } => {
                    if let Some(want) = errno {
                        assert_eq!(Errno(e), want, "{what}: errno (message {message:?})");
                    }
                }
                other => panic!("{what}: expected an error reply, got {other:?}"),
            }
        }
        Got::Closed => panic!("{what}: connection closed instead of an error reply"),
    }
    expect_ping(s, 0xbeef, what);
}

/// Sends a ping on `s` and expects its Pong.
#[track_caller]
fn expect_ping(s: &mut TcpStream, id: u64, what: &str) {
    s.write_all(&request(id, Request::Ping {}, true, &[]))
        .unwrap();
    match next(s) {
        Got::Frame(r) => {
            assert_eq!(r.id, id, "{what}: ping answered with the wrong id");
            assert!(
                matches!(r.response(), Response::Pong { .. }),
                "{what}: ping answered {:?}",
                r.response()
            );
        }
        Got::Closed => panic!("{what}: connection closed; it should keep serving"),
    }
}

/// Every server process is alive, and a normal client — connected before the hostile
/// connection — pings all servers and writes and reads a file.
#[track_caller]
fn assert_healthy(cluster: &Cluster, tc: &TestClient, rng: &mut Rng, what: &str) {
    cluster.assert_all_running();
    let len = rng.range(1, 300_000) as usize;
    let data = rng.bytes(len);
    let started = Instant::now();
    tc.run(Duration::from_secs(20), async |c| {
        for r in c.ping().await {
            assert!(
                r.result.is_ok(),
                "{what}: server {} does not answer: {:?}",
                r.name,
                r.result.err()
            );
        }
        let f = c
            .create("/healthy", 0o644, LayoutSpec::default(), false)
            .await
            .unwrap();
        f.write_at(0, &data).await.unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(f.read_at(0, &mut back).await.unwrap(), data.len());
        assert_bytes_eq(&back, &data, what);
    });
    assert!(
        started.elapsed() < common::scaled(Duration::from_secs(5)),
        "{what}: normal client took {:?}",
        started.elapsed()
    );
}

fn cluster() -> Cluster {
    Cluster::builder()
        .request_timeout(&format!("{}ms", timeout().as_millis()))
        .start()
}

#[test]
fn own_frame_encoding_matches_the_documented_layout() {
    let h = FrameHeader {
        kind: FrameKind::Request,
        flags: 1,
        request_id: 0x0102_0304_0506_0708,
        body_len: 77,
        tag_len: 3,
        data_len: 4096,
    };
    assert_eq!(
        header(1, REQUEST, END, 0x0102_0304_0506_0708, 77, 3, 4096),
        h.encode()
    );
}

#[test]
fn malformed_headers_get_an_error_or_a_close_and_the_server_keeps_serving() {
    let cluster = cluster();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_0005);
    assert_healthy(&cluster, &tc, &mut rng, "before");
    let n = cluster.config().servers.len();
    let mut srv = 0;
    let mut next_server = || {
        srv = (srv + 1) % n;
        srv
    };

    // Garbage bytes: not our protocol; the connection is closed.
    for len in [32, 100, 4096] {
        let mut s = connect(&cluster, next_server());
        let mut junk = rng.bytes(len);
        junk[0] = b'X';
        s.write_all(&junk).unwrap();
        expect_closed(&mut s, &format!("{len} garbage bytes"));
        assert_healthy(&cluster, &tc, &mut rng, "after garbage bytes");
    }
    // HTTP at the pvfs port.
    let mut s = connect(&cluster, next_server());
    s.write_all(b"GET / HTTP/1.1\r\nHost: pvfs.example\r\nAccept: */*\r\n\r\n")
        .unwrap();
    expect_closed(&mut s, "an HTTP request");

    // A truncated frame, then close: nothing is answered, nothing breaks.
    for (body_sent, data_sent) in [(10usize, 0usize), (100, 0), (100, 5000)] {
        let mut s = connect(&cluster, next_server());
        let body = encode(&RequestBody {
            creds: Creds::current(),
            request: Request::Ping {},
            retry: None,
        });
        let mut f = header(1, REQUEST, END, 5, 100, 0, 8192).to_vec();
        let mut b = body.clone();
        b.resize(100, 0);
        f.extend_from_slice(&b[..body_sent]);
        f.extend(std::iter::repeat_n(0u8, data_sent));
        s.write_all(&f).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        expect_closed(&mut s, "a truncated frame");
        assert_healthy(&cluster, &tc, &mut rng, "after a truncated frame");
    }
    // A header cut short, then close.
    let mut s = connect(&cluster, next_server());
    s.write_all(&header(1, REQUEST, END, 6, 10, 0, 0)[..20])
        .unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    expect_closed(&mut s, "a truncated header");

    // Oversized lengths: E2BIG, then the connection is closed (the frame boundary is
    // lost); nothing is allocated or read.
    let oversized = [
        ("body", header(1, REQUEST, END, 11, MAX_BODY + 1, 0, 0)),
        ("huge body", header(1, REQUEST, END, 12, u32::MAX, 0, 0)),
        ("data", header(1, REQUEST, END, 13, 10, 0, MAX_DATA + 1)),
        ("huge data", header(1, DATA, END, 14, 0, 0, u32::MAX)),
        ("tag", header(1, REQUEST, END, 15, 10, MAX_TAG + 1, 0)),
    ];
    for (what, h) in oversized {
        let mut s = connect(&cluster, next_server());
        s.write_all(&h).unwrap();
        let id = u64::from_le_bytes(h[8..16].try_into().unwrap());
        expect_error_then_close(&mut s, id, Errno::E2BIG, &format!("oversized {what}"));
        assert_healthy(
            &cluster,
            &tc,
            &mut rng,
            &format!("after an oversized {what}"),
        );
    }

    // Unknown protocol versions: EPROTO with the request id, then closed.
    for version in [0u16, 2, 0xffff] {
        let mut s = connect(&cluster, next_server());
        s.write_all(&header(version, REQUEST, END, 21, 0, 0, 0))
            .unwrap();
        expect_error_then_close(&mut s, 21, Errno::EPROTO, &format!("version {version}"));
        assert_healthy(&cluster, &tc, &mut rng, "after an unknown version");
    }

    // Reserved bits and fields, unknown kinds: EBADMSG, then closed.
    let mut bad = Vec::new();
    for flags in [2u8, 0x80, 0xff] {
        bad.push((
            format!("flags {flags:#x}"),
            header(1, REQUEST, flags, 31, 0, 0, 0),
        ));
    }
    let mut h = header(1, REQUEST, END, 32, 0, 0, 0);
    h[22] = 1;
    bad.push(("reserved u16".into(), h));
    let mut h = header(1, REQUEST, END, 33, 0, 0, 0);
    h[31] = 0x40;
    bad.push(("reserved u32".into(), h));
    for kind in [0u8, 4, 0xff] {
        bad.push((format!("kind {kind}"), header(1, kind, END, 34, 0, 0, 0)));
    }
    for (what, h) in bad {
        let mut s = connect(&cluster, next_server());
        s.write_all(&h).unwrap();
        let id = u64::from_le_bytes(h[8..16].try_into().unwrap());
        expect_error_then_close(&mut s, id, Errno::EBADMSG, &what);
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }

    // A response frame sent by a client: the connection is closed.
    let mut s = connect(&cluster, next_server());
    let body = encode(&Response::Done {});
    let mut f = header(1, RESPONSE, END, 41, body.len() as u32, 0, 0).to_vec();
    f.extend_from_slice(&body);
    s.write_all(&f).unwrap();
    expect_closed(&mut s, "a response frame from a client");
    assert_healthy(
        &cluster,
        &tc,
        &mut rng,
        "after a response frame from a client",
    );
}

#[test]
fn bad_bodies_and_reused_ids_get_error_replies_and_the_connection_keeps_serving() {
    let cluster = cluster();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_0006);
    assert_healthy(&cluster, &tc, &mut rng, "before");

    // Undecodable bodies: EBADMSG for that request; the same connection keeps serving.
    let ping = encode(&RequestBody {
        creds: Creds::current(),
        request: Request::Ping {},
        retry: None,
    });
    let mut trailing = ping.clone();
    trailing.extend_from_slice(b"trailing junk");
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("empty body", Vec::new()),
        ("0xff bytes", vec![0xff; 20]),
        ("random bytes", rng.bytes(3000)),
        ("a cut body", ping[..ping.len() - 1].to_vec()),
        ("trailing bytes", trailing),
        ("a huge count", {
            // creds: uid, gid, then a group count far beyond the body.
            let mut b = vec![0u8; 8];
            b.extend_from_slice(&u32::MAX.to_le_bytes());
            b
        }),
    ];
    for (i, (what, body)) in bodies.into_iter().enumerate() {
        let mut s = connect(&cluster, i % 4);
        let id = 100 + i as u64;
        let mut f = header(1, REQUEST, END, id, body.len() as u32, 0, 0).to_vec();
        f.extend_from_slice(&body);
        s.write_all(&f).unwrap();
        expect_error_and_serving(&mut s, id, Some(Errno::EBADMSG), what);
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }

    // A real file to aim data requests at.
    let content = rng.bytes(300_000);
    let layout = tc.run(Duration::from_secs(20), async |c| {
        let f = c
            .create(
                "/target",
                0o644,
                LayoutSpec {
                    stripe_size: Some(65536),
                    stripe_count: Some(4),
                    base: None,
                },
                true,
            )
            .await
            .unwrap();
        f.write_at(0, &content).await.unwrap();
        f.layout().clone()
    });
    let df = layout.datafiles[0];
    let stripe = Stripe {
        size: 65536,
        count: 4,
    };
    let srv = df.server as usize;
    // Writes are aimed at another file on the same server: a write that fails midway
    // may have written part of its bytes, as write(2) may.
    let scratch = tc.run(Duration::from_secs(20), async |c| {
        let spec = LayoutSpec {
            stripe_size: Some(65536),
            stripe_count: Some(1),
            base: Some(srv as u32),
        };
        let f = c.create("/scratch", 0o644, spec, true).await.unwrap();
        f.layout().datafiles[0]
    });
    assert_eq!(
        scratch.server as usize, srv,
        "scratch file on the wrong server"
    );

    // Well-encoded but impossible requests: an error reply, the connection serves on.
    let impossible: Vec<(&str, Request, Vec<u8>)> = vec![
        (
            "a stride shorter than its block",
            Request::Read {
                handle: df.handle,
                stripe,
                index: 0,
                regions: Regions::Strided {
                    offset: 0,
                    block: 100,
                    stride: 10,
                    start: 0,
                    len: 1000,
                },
            },
            vec![],
        ),
        (
            "a datafile index past the stripe count",
            Request::Read {
                handle: df.handle,
                stripe,
                index: 7,
                regions: Regions::contig(0, 10),
            },
            vec![],
        ),
        (
            "a region past the largest file",
            Request::Read {
                handle: df.handle,
                stripe,
                index: 0,
                regions: Regions::contig(u64::MAX - 5, 5),
            },
            vec![],
        ),
        (
            "a write with less data than its regions",
            Request::Write {
                handle: scratch.handle,
                stripe,
                index: 0,
                regions: Regions::contig(0, 100_000),
                sync: false,
            },
            vec![7u8; 10],
        ),
        (
            "a write with more data than its regions",
            Request::Write {
                handle: scratch.handle,
                stripe,
                index: 0,
                regions: Regions::contig(0, 10),
                sync: false,
            },
            vec![7u8; 5000],
        ),
        (
            "a stripe size of 0",
            Request::Write {
                handle: scratch.handle,
                stripe: Stripe { size: 0, count: 4 },
                index: 0,
                regions: Regions::contig(0, 10),
                sync: false,
            },
            vec![7u8; 10],
        ),
        (
            "a handle of another server",
            Request::GetAttr {
                handle: cluster.config().servers[(srv + 1) % 4].handles.first + 12345,
            },
            vec![],
        ),
        (
            "a handle of no server",
            Request::GetAttr { handle: 3 },
            vec![],
        ),
        (
            "a precreate of 4 billion handles",
            Request::Precreate { count: u32::MAX },
            vec![],
        ),
    ];
    for (i, (what, req, data)) in impossible.into_iter().enumerate() {
        let mut s = connect(&cluster, srv);
        let id = 200 + i as u64;
        s.write_all(&request(id, req, true, &data)).unwrap();
        // A read answers its error in its first frame; others in their only frame.
        match next(&mut s) {
            Got::Frame(r) => {
                assert_eq!(r.id, id, "{what}: reply id");
                match r.response() {
                    Response::Error { .. } => {}
                    Response::Handles { count, .. } if count < 1_000_000 => {} // a capped precreate
                    other => panic!("{what}: expected an error, got {other:?}"),
                }
            }
            Got::Closed => panic!("{what}: connection closed instead of an error reply"),
        }
        expect_ping(&mut s, 0xbeef, what);
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }
    // The file was not damaged by any of it.
    tc.run(Duration::from_secs(20), async |c| {
        let f = c.open("/target").await.unwrap();
        let mut back = vec![0u8; content.len()];
        assert_eq!(f.read_at(0, &mut back).await.unwrap(), content.len());
        assert_bytes_eq(&back, &content, "/target after impossible requests");
    });

    // A request id reused by two pings in flight at once: both are answered.
    let mut s = connect(&cluster, 0);
    let mut two = request(7, Request::Ping {}, true, &[]);
    two.extend(request(7, Request::Ping {}, true, &[]));
    s.write_all(&two).unwrap();
    for _ in 0..2 {
        match next(&mut s) {
            Got::Frame(r) => {
                assert_eq!(r.id, 7);
                assert!(matches!(r.response(), Response::Pong { .. }));
            }
            Got::Closed => panic!("reused ping id: connection closed"),
        }
    }
    expect_ping(&mut s, 8, "after a reused ping id");

    // A request id reused while a streaming write with that id is still open: the
    // server answers (errors or not) or closes, and stays up.
    let mut s = connect(&cluster, srv);
    let first = Request::Write {
        handle: scratch.handle,
        stripe,
        index: 0,
        regions: Regions::contig(0, 65536),
        sync: false,
    };
    s.write_all(&request(9, first, false, &[1u8; 1000]))
        .unwrap();
    s.write_all(&request(9, Request::Ping {}, true, &[]))
        .unwrap();
    let second = Request::Write {
        handle: scratch.handle,
        stripe,
        index: 0,
        regions: Regions::contig(0, 10),
        sync: false,
    };
    s.write_all(&request(9, second, false, &[2u8; 5])).unwrap();
    s.write_all(&data_frame(9, false, &[3u8; 5])).unwrap();
    s.write_all(&data_frame(9, true, &[4u8; 64535])).unwrap();
    // A data frame for a request nobody sent is dropped.
    s.write_all(&data_frame(999, true, &[5u8; 100])).unwrap();
    let mut replies = 0;
    let mut closed = false;
    while replies < 3 {
        match next(&mut s) {
            Got::Frame(r) => {
                assert_eq!(r.id, 9, "reply to an id never sent: {r:?}");
                replies += 1;
            }
            Got::Closed => {
                closed = true;
                break;
            }
        }
    }
    if !closed {
        expect_ping(&mut s, 10, "after a reused write id");
    }
    assert_healthy(&cluster, &tc, &mut rng, "after a reused write id");
}

#[test]
fn stalled_half_frames_do_not_block_other_clients() {
    let cluster = cluster();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_0007);
    assert_healthy(&cluster, &tc, &mut rng, "before");
    let n = cluster.config().servers.len();

    // On every server: half a header, a header with half its body, a streaming write
    // whose data stops, and many connections with a few bytes each. All kept open.
    let mut half_headers = Vec::new();
    let mut half_bodies = Vec::new();
    let mut stalled_writes = Vec::new();
    let layout = tc.run(Duration::from_secs(20), async |c| {
        let f = c
            .create("/stall", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, &[1u8; 300_000]).await.unwrap();
        f.layout().clone()
    });
    let stripe = layout.stripe();
    for srv in 0..n {
        let mut s = connect(&cluster, srv);
        s.write_all(&header(1, REQUEST, END, 1, 40, 0, 0)[..16])
            .unwrap();
        half_headers.push(s);
        let mut s = connect(&cluster, srv);
        let mut f = header(1, REQUEST, END, 2, 100, 0, 0).to_vec();
        f.extend_from_slice(&[0u8; 50]);
        s.write_all(&f).unwrap();
        // Watched from now on: the clock stops when the close is observed.
        let since = Instant::now();
        half_bodies.push(std::thread::spawn(move || {
            expect_closed(&mut s, "a stalled frame body");
            since.elapsed()
        }));
        for _ in 0..16 {
            let mut s = connect(&cluster, srv);
            s.write_all(b"PVF").unwrap();
            half_headers.push(s);
        }
    }
    for (idx, df) in layout.datafiles.iter().enumerate() {
        let mut s = connect(&cluster, df.server as usize);
        let req = Request::Write {
            handle: df.handle,
            stripe,
            index: idx as u32,
            regions: Regions::contig(0, 4 << 20),
            sync: false,
        };
        s.write_all(&request(3, req, false, &[9u8; 4096])).unwrap();
        let since = Instant::now();
        stalled_writes.push(std::thread::spawn(move || {
            match next(&mut s) {
                Got::Frame(r) => {
                    assert_eq!(r.id, 3);
                    match r.response() {
                        Response::Error { errno, .. } => {
                            assert_eq!(Errno(errno), Errno::ETIMEDOUT)
                        }
                        other => panic!("stalled write answered {other:?}"),
                    }
                }
                Got::Closed => {}
            }
            since.elapsed()
        }));
    }

    // Meanwhile everyone else is served promptly.
    for round in 0..3 {
        assert_healthy(
            &cluster,
            &tc,
            &mut rng,
            &format!("with stalled connections open, round {round}"),
        );
        let fresh = cluster.client();
        assert_healthy(
            &cluster,
            &fresh,
            &mut rng,
            &format!("new client with stalled connections open, round {round}"),
        );
    }

    // A frame whose payload stalls is dropped within the request timeout.
    let bound = timeout() + margin();
    for w in half_bodies {
        let took = w.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        assert!(
            took < bound,
            "a stalled frame body was closed after {took:?} (timeout {:?})",
            timeout()
        );
    }
    // A streaming write whose data stops fails with ETIMEDOUT within the timeout.
    for w in stalled_writes {
        let took = w.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        assert!(took < bound, "stalled write ended after {took:?}");
    }
    assert_healthy(&cluster, &tc, &mut rng, "after the stalls");
    drop(half_headers);
    assert_healthy(
        &cluster,
        &tc,
        &mut rng,
        "after closing the stalled connections",
    );
}

#[test]
fn a_stall_inside_a_frame_header_is_closed_within_the_request_timeout() {
    let cluster = cluster();
    let mut s = connect(&cluster, 0);
    s.write_all(&header(1, REQUEST, END, 1, 40, 0, 0)[..16])
        .unwrap();
    let since = Instant::now();
    // Closed (perhaps after an error reply), not merely silent: `next` fails the test
    // if nothing happens within its wait.
    expect_closed(&mut s, "half a header");
    let took = since.elapsed();
    assert!(
        took < timeout() + margin(),
        "half a header was closed only after {took:?} (request timeout {:?})",
        timeout()
    );
    cluster.assert_all_running();
}
