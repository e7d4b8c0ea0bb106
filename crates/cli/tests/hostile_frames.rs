//! Hostile frames: raw TCP to real servers speaking protocol version 5, in which every
//! connection opens with an authenticated handshake and every later frame carries a
//! MAC. Whatever a client sends — garbage, truncated, oversized, wrong-version,
//! reserved-bit or unknown-kind frames, requests without a handshake, a handshake with
//! the wrong key or for another file system or server, forged, untagged, replayed or
//! altered frames, undecodable bodies, reused request ids, stalled half frames — it
//! gets an error reply, a `Refused` handshake message or a closed connection, exactly
//! as the server documents, never a crash; no request runs on a connection that is
//! not authenticated; and the server keeps serving everyone else.
//!
//! Frames are built here from the documented layout (crates/proto/src/frame.rs), not
//! with the product's encoder: 32-byte header, magic "PVFS" (LE u32), version u16 = 4,
//! kind u8 (1 request, 2 response, 3 data, 4 handshake), flags u8 (1 = END), request
//! id u64, body length u32, tag length u16, reserved u16, data length u32, reserved
//! u32; then body, tag, data.
//!
//! Before the handshake (crates/proto/src/handshake.rs) only handshake frames are
//! accepted: no tag, no data, request id 0, body = one handshake message (Hello,
//! Challenge, Proof, Welcome, Refused). A client that is refused (wrong key, another
//! file system or server name, a message out of order) gets a `Refused` frame, then
//! the connection closes; anything that is not a well-formed handshake frame closes
//! the connection without an answer. After the handshake every frame, in both
//! directions, carries a 16-byte tag (tag length 16): the truncated HMAC-SHA256 under
//! the session key of the direction, the frame's sequence number in that direction,
//! its header and its body (crates/auth/src/mac.rs); bulk data is not covered. The
//! raw sessions here tag what they send with the session's `macs.send` and check every
//! reply with `macs.recv`, so a reply whose tag does not verify fails the test.
#![allow(clippy::unwrap_used)]

mod common;

use pvfs_proto::req;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_bytes_eq, Cluster, Rng, TestClient};
use pvfs_auth::handshake::{HandshakeError, MAX_MESSAGE};
use pvfs_auth::{ClientProof, KeyRing, SessionMacs, TAG_LEN};
use pvfs_client::{Errno, LayoutSpec};
use pvfs_config::Config;
use pvfs_proto::frame::{FrameHeader, FrameKind, MAX_BODY, MAX_DATA, MAX_TAG};
use pvfs_proto::handshake::{
    Challenge, HandshakeMsg, Hello, Method, Proof, Welcome, HANDSHAKE_VERSION, KEY_ID_LEN,
    NONCE_LEN, PROOF_LEN,
};
use pvfs_proto::{
    encode, name_shard, rights, Capability, CreateWhat, Creds, Handle, Regions, Request,
    RequestBody, Response, Stripe,
};

/// The protocol version the servers speak.
const VERSION: u16 = 18;
const REQUEST: u8 = 1;
const RESPONSE: u8 = 2;
const DATA: u8 = 3;
const HANDSHAKE: u8 = 4;
const END: u8 = 1;
/// The tag length every frame announces after the handshake.
const TAG: u16 = 16;

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

/// The request id field of a header.
fn id_of(h: &[u8; 32]) -> u64 {
    u64::from_le_bytes(h[8..16].try_into().unwrap())
}

/// The body of a request frame (the creds of this process).
fn request_body(req: Request) -> Vec<u8> {
    encode(&RequestBody {
        creds: Creds::current(),
        request: req,
        retry: None,
        origin: 0,
    })
}

/// A frame without a tag (what may be sent before the handshake): header, body, data.
fn plain_frame(version: u16, kind: u8, flags: u8, id: u64, body: &[u8], data: &[u8]) -> Vec<u8> {
    let mut f = header(
        version,
        kind,
        flags,
        id,
        body.len() as u32,
        0,
        data.len() as u32,
    )
    .to_vec();
    f.extend_from_slice(body);
    f.extend_from_slice(data);
    f
}

/// A handshake frame (kind 4, END, request id 0, no tag, no data) carrying `msg`.
fn handshake_frame(msg: &HandshakeMsg) -> Vec<u8> {
    plain_frame(VERSION, HANDSHAKE, END, 0, &encode(msg), &[])
}

/// A Hello with the file system's key method for server `server`, a fresh nonce.
fn hello(config: &Config, server: usize, rng: &mut Rng) -> Hello {
    Hello {
        version: HANDSHAKE_VERSION,
        fsid: config.fsid,
        server: config.servers[server].name.clone(),
        nonce: rng.bytes(NONCE_LEN),
        method: Method::Key,
        client: "hostile-frames".into(),
    }
}

/// A request to create the symlink `/name` in the root directory, and the server that
/// holds that name (shard `name_shard(name, m)` of the root lives on the k-th of the
/// `m` metadata servers, the root's owner being the first). If it runs, `/name`
/// exists: that is how the tests tell whether a request ran.
fn create_symlink(config: &Config, name: &str) -> (usize, Request) {
    let metas = config.meta_servers();
    let server = metas[name_shard(name, metas.len() as u32) as usize];
    let creds = Creds::current();
    let req = Request::Create(req::Create {
        hold: 0,
        parent: config.root_handle(),
        name: name.to_string(),
        mode: 0o777,
        umask: 0,
        uid: creds.uid,
        gid: creds.gid,
        what: CreateWhat::Symlink {
            target: "hostile".into(),
        },
    });
    (server, req)
}

/// One frame received from a server.
#[derive(Debug)]
struct Reply {
    raw: [u8; 32],
    kind: u8,
    flags: u8,
    id: u64,
    body: Vec<u8>,
    tag: Vec<u8>,
    data: Vec<u8>,
}

impl Reply {
    fn response(&self) -> Response {
        assert_eq!(self.kind, RESPONSE, "expected a response frame: {self:?}");
        pvfs_proto::decode(&self.body).unwrap_or_else(|e| panic!("undecodable response body: {e}"))
    }

    /// The handshake message of a handshake frame (checking its documented form).
    fn handshake(&self) -> HandshakeMsg {
        assert_eq!(self.kind, HANDSHAKE, "expected a handshake frame: {self:?}");
        assert_eq!(self.flags, END, "handshake frame flags: {self:?}");
        assert_eq!(self.id, 0, "handshake frame request id: {self:?}");
        assert!(self.tag.is_empty(), "a tagged handshake frame: {self:?}");
        assert!(
            self.data.is_empty(),
            "a handshake frame with data: {self:?}"
        );
        pvfs_proto::decode(&self.body)
            .unwrap_or_else(|e| panic!("undecodable handshake message: {e}"))
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
/// Fails the test if the server neither answers nor closes within [`react()`]. The tag
/// is returned, not checked (see [`Session::next`]).
fn read_frame(s: &mut TcpStream) -> Got {
    let mut h = [0u8; 32];
    let mut got = 0;
    while got < 32 {
        match s.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Got::Closed,
            Ok(0) => panic!("connection closed inside a reply header"),
            Ok(n) => got += n,
            Err(e) if got == 0 && e.kind() == ErrorKind::ConnectionReset => return Got::Closed,
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
    assert_eq!(u16::from_le_bytes([h[4], h[5]]), VERSION, "reply version");
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
            && tag_len <= MAX_TAG as usize,
        "reply lengths beyond the limits: {h:02x?}"
    );
    let mut body = vec![0u8; body_len];
    let mut tag = vec![0u8; tag_len];
    let mut data = vec![0u8; data_len];
    s.read_exact(&mut body).unwrap();
    s.read_exact(&mut tag).unwrap();
    s.read_exact(&mut data).unwrap();
    Got::Frame(Reply {
        raw: h,
        kind: h[6],
        flags: h[7],
        id: id_of(&h),
        body,
        tag,
        data,
    })
}

/// Writes bytes the server may refuse before it has read them all: a write or a
/// shutdown failing because the server already closed is the expected outcome, and
/// the caller then asserts the close.
fn send_to_closing(s: &mut TcpStream, bytes: &[u8], then_shutdown: bool) {
    let _ = s.write_all(bytes);
    if then_shutdown {
        let _ = s.shutdown(Shutdown::Write);
    }
}

/// Expects the connection to be closed without any frame first (before the handshake
/// nothing but a `Refused` handshake message is ever answered, and only to a
/// well-formed handshake frame).
#[track_caller]
fn expect_silent_close(s: &mut TcpStream, what: &str) {
    match read_frame(s) {
        Got::Closed => {}
        Got::Frame(r) => panic!("{what}: expected a close without an answer, got {r:?}"),
    }
}

/// Expects a `Refused` handshake frame with `errno` whose message contains `needle`,
/// then a closed connection; returns the message.
#[track_caller]
fn expect_refused_then_close(s: &mut TcpStream, errno: Errno, needle: &str, what: &str) -> String {
    let message = match read_frame(s) {
        Got::Frame(r) => match r.handshake() {
            HandshakeMsg::Refused { errno: e, message } => {
                assert_eq!(Errno(e), errno, "{what}: errno (message {message:?})");
                assert!(
                    message.contains(needle),
                    "{what}: refusal {message:?} should mention {needle:?}"
                );
                message
            }
            other => panic!("{what}: expected Refused, got {other:?}"),
        },
        Got::Closed => panic!("{what}: connection closed without a Refused message"),
    };
    match read_frame(s) {
        Got::Closed => {}
        Got::Frame(r) => panic!("{what}: connection should close after Refused, got {r:?}"),
    }
    message
}

/// Expects the server's Challenge to a Hello for server `server`, checking its form.
#[track_caller]
fn expect_challenge(s: &mut TcpStream, config: &Config, server: usize, what: &str) -> Challenge {
    match read_frame(s) {
        Got::Frame(r) => match r.handshake() {
            HandshakeMsg::Challenge(c) => {
                assert_eq!(c.fsid, config.fsid, "{what}: Challenge fsid");
                assert_eq!(
                    c.server, config.servers[server].name,
                    "{what}: Challenge name"
                );
                assert_eq!(c.nonce.len(), NONCE_LEN, "{what}: Challenge nonce");
                assert_eq!(c.key_id.len(), KEY_ID_LEN, "{what}: Challenge key id");
                assert_eq!(c.proof.len(), PROOF_LEN, "{what}: Challenge proof");
                c
            }
            other => panic!("{what}: expected Challenge, got {other:?}"),
        },
        Got::Closed => panic!("{what}: connection closed instead of a Challenge"),
    }
}

/// A raw connection that has done the handshake with the file system's key: frames
/// written on it are tagged with `macs.send` (in the order they are sealed), replies
/// are checked with `macs.recv`.
struct Session {
    s: TcpStream,
    macs: SessionMacs,
}

impl Session {
    fn open(cluster: &Cluster, server: usize) -> Session {
        let config = cluster.config();
        let (s, macs) = common::raw_session(config, server, &common::key_proof(config))
            .unwrap_or_else(|e| panic!("handshake with the cluster's key refused: {e}"));
        s.set_read_timeout(Some(react())).unwrap();
        s.set_nodelay(true).unwrap();
        Session { s, macs }
    }

    /// A whole tagged frame: the tag is the next in this session's sequence, so frames
    /// must be sent in the order they were sealed.
    fn seal_frame(&mut self, kind: u8, flags: u8, id: u64, body: &[u8], data: &[u8]) -> Vec<u8> {
        let h = header(
            VERSION,
            kind,
            flags,
            id,
            body.len() as u32,
            TAG,
            data.len() as u32,
        );
        let tag = self.macs.send.seal(&h, body);
        let mut f = h.to_vec();
        f.extend_from_slice(body);
        f.extend_from_slice(&tag);
        f.extend_from_slice(data);
        f
    }

    /// A whole tagged request frame.
    fn seal_request(&mut self, id: u64, req: Request, end: bool, data: &[u8]) -> Vec<u8> {
        let body = request_body(req);
        self.seal_frame(REQUEST, if end { END } else { 0 }, id, &body, data)
    }

    /// A whole tagged data frame.
    fn seal_data(&mut self, id: u64, end: bool, data: &[u8]) -> Vec<u8> {
        self.seal_frame(DATA, if end { END } else { 0 }, id, &[], data)
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    /// The next frame from the server, its tag checked: after the handshake every
    /// reply must announce and carry a tag that verifies under the session key.
    #[track_caller]
    fn next(&mut self) -> Got {
        let got = read_frame(&mut self.s);
        if let Got::Frame(r) = &got {
            assert_eq!(
                r.tag.len(),
                TAG_LEN,
                "a reply after the handshake without a {TAG_LEN}-byte tag: {r:?}"
            );
            if let Err(e) = self.macs.recv.open(&r.raw, &r.body, &r.tag) {
                panic!("a reply's tag does not verify ({e}): {r:?}");
            }
        }
        got
    }

    /// Expects an error reply with `errno` for request `id`, then a closed connection.
    #[track_caller]
    fn expect_error_then_close(&mut self, id: u64, errno: Errno, what: &str) {
        match self.next() {
            Got::Frame(r) => {
                assert_eq!(r.id, id, "{what}: reply to the wrong request id");
                assert_eq!(r.flags & END, END, "{what}: error reply without END");
                match r.response() {
                    Response::Error {
                        errno: e, message, ..
                    } => {
                        assert_eq!(Errno(e), errno, "{what}: errno (message {message:?})")
                    }
                    other => panic!("{what}: expected an error reply, got {other:?}"),
                }
            }
            Got::Closed => panic!("{what}: connection closed without the error reply"),
        }
        match self.next() {
            Got::Closed => {}
            Got::Frame(r) => panic!("{what}: connection should close after the error, got {r:?}"),
        }
    }

    /// Expects the connection to be closed without any reply.
    #[track_caller]
    fn expect_silent_close(&mut self, what: &str) {
        match self.next() {
            Got::Closed => {}
            Got::Frame(r) => panic!("{what}: expected a close without an answer, got {r:?}"),
        }
    }

    /// Expects an error reply for `id` and a connection that keeps serving.
    #[track_caller]
    fn expect_error_and_serving(&mut self, id: u64, errno: Option<Errno>, what: &str) {
        match self.next() {
            Got::Frame(r) => {
                assert_eq!(r.id, id, "{what}: reply to the wrong request id");
                match r.response() {
                    Response::Error {
                        errno: e, message, ..
                    } => {
                        if let Some(want) = errno {
                            assert_eq!(Errno(e), want, "{what}: errno (message {message:?})");
                        }
                    }
                    other => panic!("{what}: expected an error reply, got {other:?}"),
                }
            }
            Got::Closed => panic!("{what}: connection closed instead of an error reply"),
        }
        self.expect_ping(0xbeef, what);
    }

    /// Sends a tagged ping and expects its Pong.
    #[track_caller]
    fn expect_ping(&mut self, id: u64, what: &str) {
        let f = self.seal_request(id, Request::Ping(req::Ping {}), true, &[]);
        self.send(&f);
        match self.next() {
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

/// Whether `/name` exists, asked through the healthy client.
fn exists(tc: &TestClient, name: &str) -> bool {
    let path = format!("/{name}");
    tc.run(Duration::from_secs(20), async |c| {
        match c.lstat(&path).await {
            Ok(_) => true,
            Err(e) if e.errno == Errno::ENOENT => false,
            Err(e) => panic!("lstat {path}: {e:?}"),
        }
    })
}

/// `/name` does not exist: the request that would have created it never ran.
#[track_caller]
fn assert_not_run(tc: &TestClient, name: &str, what: &str) {
    assert!(
        !exists(tc, name),
        "{what}: /{name} exists: the server ran a request it should have refused"
    );
}

/// Read and write capabilities for the datafiles of file `file` (index i for datafile
/// i), asked of its owner on a raw session with the file system's key: a data server
/// serves a Read or Write only with one, so the data requests here carry real ones
/// and fail, when they fail, for what they are testing.
fn datafile_caps(cluster: &Cluster, file: Handle, datafiles: &[Handle]) -> Vec<Capability> {
    let owner = cluster.config().owner_of(file).unwrap();
    let mut s = Session::open(cluster, owner);
    let want = rights::READ | rights::WRITE;
    let req = Request::GetAttr(req::GetAttr {
        handle: file,
        want,
        proof: None,
    });
    let f = s.seal_request(1, req, true, &[]);
    s.send(&f);
    let caps = match s.next() {
        Got::Frame(r) => match r.response() {
            Response::Attr { caps, .. } => caps,
            other => panic!("GetAttr for capabilities answered {other:?}"),
        },
        Got::Closed => panic!("GetAttr for capabilities: connection closed"),
    };
    // The object's capability first, then one per datafile in layout order.
    assert_eq!(caps.len(), 1 + datafiles.len(), "capabilities: {caps:?}");
    for (cap, &h) in caps[1..].iter().zip(datafiles) {
        assert_eq!(cap.handle, h, "capability order: {caps:?}");
        assert!(cap.allows(want), "capability rights: {cap:?}");
    }
    caps[1..].to_vec()
}

fn cluster() -> Cluster {
    Cluster::builder()
        .request_timeout(&format!("{}ms", timeout().as_millis()))
        .start()
}

/// The server's log mentions `needle` (polled: lines are written asynchronously).
#[track_caller]
fn assert_logged(cluster: &Cluster, server: usize, needle: &str) {
    let name = cluster.config().servers[server].name.clone();
    common::poll(
        &format!("{name}'s log to mention {needle:?}"),
        common::scaled(Duration::from_secs(10)),
        || cluster.log(&name).contains(needle).then_some(()),
    );
}

#[test]
fn own_frame_encoding_matches_the_documented_layout() {
    let h = FrameHeader {
        kind: FrameKind::Request,
        flags: 1,
        request_id: 0x0102_0304_0506_0708,
        body_len: 77,
        tag_len: 16,
        data_len: 4096,
    };
    assert_eq!(
        header(VERSION, REQUEST, END, 0x0102_0304_0506_0708, 77, TAG, 4096),
        h.encode()
    );
    assert_eq!(FrameHeader::decode(&h.encode()).unwrap(), h);
    for (kind, byte) in [
        (FrameKind::Response, RESPONSE),
        (FrameKind::Data, DATA),
        (FrameKind::Handshake, HANDSHAKE),
    ] {
        let h = FrameHeader {
            kind,
            flags: 0,
            request_id: 9,
            body_len: 3,
            tag_len: 0,
            data_len: 0,
        };
        assert_eq!(header(VERSION, byte, 0, 9, 3, 0, 0), h.encode(), "{kind:?}");
    }
    assert_eq!(usize::from(TAG), TAG_LEN);
}

#[test]
fn malformed_input_before_the_handshake_is_closed_and_the_server_keeps_serving() {
    let cluster = cluster();
    let config = cluster.config().clone();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_0005);
    assert_healthy(&cluster, &tc, &mut rng, "before");
    let n = config.servers.len();
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
        send_to_closing(&mut s, &junk, false);
        expect_silent_close(&mut s, &format!("{len} garbage bytes"));
        assert_healthy(&cluster, &tc, &mut rng, "after garbage bytes");
    }
    // HTTP at the pvfs port.
    let mut s = connect(&cluster, next_server());
    send_to_closing(
        &mut s,
        b"GET / HTTP/1.1\r\nHost: pvfs.example\r\nAccept: */*\r\n\r\n",
        false,
    );
    expect_silent_close(&mut s, "an HTTP request");
    assert_healthy(&cluster, &tc, &mut rng, "after an HTTP request");

    // Truncated frames, then close: nothing is answered, nothing breaks. A request
    // frame is refused at its header (it is no handshake frame); a Hello cut short is
    // closed when the stream ends inside it.
    for (body_sent, data_sent) in [(10usize, 0usize), (100, 0), (100, 5000)] {
        let mut s = connect(&cluster, next_server());
        let mut b = request_body(Request::Ping(req::Ping {}));
        b.resize(100, 0);
        let mut f = header(VERSION, REQUEST, END, 5, 100, 0, 8192).to_vec();
        f.extend_from_slice(&b[..body_sent]);
        f.extend(std::iter::repeat_n(0u8, data_sent));
        send_to_closing(&mut s, &f, true);
        expect_silent_close(&mut s, "a truncated request frame");
        assert_healthy(&cluster, &tc, &mut rng, "after a truncated request frame");
    }
    let srv = next_server();
    let whole = handshake_frame(&HandshakeMsg::Hello(hello(&config, srv, &mut rng)));
    for cut in [20, 32, 40, whole.len() - 1] {
        let mut s = connect(&cluster, srv);
        send_to_closing(&mut s, &whole[..cut], true);
        let what = format!("a Hello cut after {cut} of {} bytes", whole.len());
        expect_silent_close(&mut s, &what);
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }
    // A header cut short, then close.
    let mut s = connect(&cluster, next_server());
    send_to_closing(
        &mut s,
        &header(VERSION, REQUEST, END, 6, 10, 0, 0)[..20],
        true,
    );
    expect_silent_close(&mut s, "a truncated header");

    // Headers the frame layout refuses — oversized lengths, unknown versions (the old
    // versions 1 to 3 among them), reserved bits and fields, unknown kinds — each in front
    // of a well-formed Hello for the server, the field named being the only thing
    // wrong: closed without a Challenge (and without an error response: there is no
    // session to answer in).
    type Spoil = Box<dyn Fn(&mut [u8; 32])>;
    let set32 = |at: usize, v: u32| -> Spoil {
        Box::new(move |h: &mut [u8; 32]| h[at..at + 4].copy_from_slice(&v.to_le_bytes()))
    };
    let mut bad: Vec<(String, Spoil)> = vec![
        ("an oversized body length".into(), set32(16, MAX_BODY + 1)),
        ("a huge body length".into(), set32(16, u32::MAX)),
        ("an oversized data length".into(), set32(24, MAX_DATA + 1)),
        ("a huge data length".into(), set32(24, u32::MAX)),
        (
            "an oversized tag length".into(),
            Box::new(|h: &mut [u8; 32]| h[20..22].copy_from_slice(&(MAX_TAG + 1).to_le_bytes())),
        ),
        (
            "reserved u16".into(),
            Box::new(|h: &mut [u8; 32]| h[22] = 1),
        ),
        (
            "reserved u32".into(),
            Box::new(|h: &mut [u8; 32]| h[31] = 0x40),
        ),
    ];
    for version in (0..VERSION).chain([VERSION + 1, 0xffff]) {
        bad.push((
            format!("version {version}"),
            Box::new(move |h: &mut [u8; 32]| h[4..6].copy_from_slice(&version.to_le_bytes())),
        ));
    }
    for flags in [2u8, 0x80, 0xff] {
        bad.push((
            format!("flags {flags:#x}"),
            Box::new(move |h: &mut [u8; 32]| h[7] = flags),
        ));
    }
    for kind in [0u8, 5, 0xff] {
        bad.push((
            format!("kind {kind}"),
            Box::new(move |h: &mut [u8; 32]| h[6] = kind),
        ));
    }
    for (what, spoil) in bad {
        let srv = next_server();
        let body = encode(&HandshakeMsg::Hello(hello(&config, srv, &mut rng)));
        let mut h = header(VERSION, HANDSHAKE, END, 0, body.len() as u32, 0, 0);
        spoil(&mut h);
        let mut f = h.to_vec();
        f.extend_from_slice(&body);
        let mut s = connect(&cluster, srv);
        send_to_closing(&mut s, &f, false);
        expect_silent_close(&mut s, &format!("a Hello in a frame with {what}"));
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }
    // The same Hello in a well-formed frame is answered (the cases above fail for
    // their one spoiled field only).
    let mut s = connect(&cluster, 0);
    s.write_all(&handshake_frame(&HandshakeMsg::Hello(hello(
        &config, 0, &mut rng,
    ))))
    .unwrap();
    expect_challenge(&mut s, &config, 0, "a well-formed Hello");

    // Handshake frames of the wrong form: a tag, data, a message longer than the
    // handshake's limit, an undecodable message. Closed without an answer.
    let srv = next_server();
    let body = encode(&HandshakeMsg::Hello(hello(&config, srv, &mut rng)));
    let mut tagged = header(VERSION, HANDSHAKE, END, 0, body.len() as u32, TAG, 0).to_vec();
    tagged.extend_from_slice(&body);
    tagged.extend_from_slice(&[0u8; TAG_LEN]);
    let mut with_data = header(VERSION, HANDSHAKE, END, 0, body.len() as u32, 0, 8).to_vec();
    with_data.extend_from_slice(&body);
    with_data.extend_from_slice(&[0u8; 8]);
    let mut long = body.clone();
    long.resize(MAX_MESSAGE as usize + 1, 0);
    let wrong_form: Vec<(&str, Vec<u8>)> = vec![
        ("a tagged Hello", tagged),
        ("a Hello with data", with_data),
        (
            "a handshake message over the limit",
            plain_frame(VERSION, HANDSHAKE, END, 0, &long, &[]),
        ),
        (
            "an undecodable handshake message",
            plain_frame(VERSION, HANDSHAKE, END, 0, &rng.bytes(200), &[]),
        ),
        (
            "an empty handshake message",
            plain_frame(VERSION, HANDSHAKE, END, 0, &[], &[]),
        ),
    ];
    for (what, f) in wrong_form {
        let mut s = connect(&cluster, srv);
        send_to_closing(&mut s, &f, false);
        expect_silent_close(&mut s, what);
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }

    // Frames that only make sense after a handshake, sent without one: a ping, a ping
    // with a (made-up) tag, a create, a data frame, and a response frame as a client.
    // Closed without an answer, and nothing runs.
    let (create_srv, create) = create_symlink(&config, "no-handshake");
    let ping = request_body(Request::Ping(req::Ping {}));
    let mut tagged_ping = header(VERSION, REQUEST, END, 41, ping.len() as u32, TAG, 0).to_vec();
    tagged_ping.extend_from_slice(&ping);
    tagged_ping.extend_from_slice(&rng.bytes(TAG_LEN));
    let without: Vec<(&str, usize, Vec<u8>)> = vec![
        (
            "a ping without a handshake",
            next_server(),
            plain_frame(VERSION, REQUEST, END, 40, &ping, &[]),
        ),
        (
            "a tagged ping without a handshake",
            next_server(),
            tagged_ping,
        ),
        (
            "a create without a handshake",
            create_srv,
            plain_frame(VERSION, REQUEST, END, 42, &request_body(create), &[]),
        ),
        (
            "a data frame without a handshake",
            next_server(),
            plain_frame(VERSION, DATA, END, 43, &[], &[7u8; 100]),
        ),
        (
            "a response frame from a client",
            next_server(),
            plain_frame(VERSION, RESPONSE, END, 44, &encode(&Response::Done {}), &[]),
        ),
    ];
    for (what, srv, f) in without {
        let mut s = connect(&cluster, srv);
        send_to_closing(&mut s, &f, false);
        expect_silent_close(&mut s, what);
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }
    assert_not_run(&tc, "no-handshake", "a create without a handshake");

    // Well-formed handshake frames that break the exchange: refused (EPROTO) with the
    // reason, then closed.
    let srv = next_server();
    let mut old = hello(&config, srv, &mut rng);
    old.version = HANDSHAKE_VERSION + 1;
    let mut short_nonce = hello(&config, srv, &mut rng);
    short_nonce.nonce.truncate(NONCE_LEN - 1);
    let out_of_order: Vec<(&str, HandshakeMsg, &str)> = vec![
        (
            "a Proof first",
            HandshakeMsg::Proof(Proof {
                proof: vec![0; PROOF_LEN],
            }),
            "expected Hello, got Proof",
        ),
        (
            "a Challenge from a client",
            HandshakeMsg::Challenge(Challenge {
                fsid: config.fsid,
                server: config.servers[srv].name.clone(),
                nonce: vec![1; NONCE_LEN],
                key_id: vec![2; KEY_ID_LEN],
                proof: vec![3; PROOF_LEN],
            }),
            "expected Hello, got Challenge",
        ),
        (
            "a Welcome from a client",
            HandshakeMsg::Welcome(Welcome {
                trusted: true,
                uid: 0,
                gid: 0,
                groups: Vec::new(),
            }),
            "expected Hello, got Welcome",
        ),
        (
            "another handshake version",
            HandshakeMsg::Hello(old),
            "handshake version",
        ),
        ("a short nonce", HandshakeMsg::Hello(short_nonce), "nonce"),
    ];
    for (what, msg, needle) in out_of_order {
        let mut s = connect(&cluster, srv);
        s.write_all(&handshake_frame(&msg)).unwrap();
        expect_refused_then_close(&mut s, Errno::EPROTO, needle, what);
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }
    assert_logged(&cluster, srv, "refused a connection");
}

#[test]
fn failed_handshakes_are_refused_and_run_no_request() {
    let cluster = cluster();
    let config = cluster.config().clone();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_0008);
    assert_healthy(&cluster, &tc, &mut rng, "before");

    // The cluster's key opens a session that serves.
    let mut ok = Session::open(&cluster, 1);
    ok.expect_ping(1, "a session with the cluster's key");
    drop(ok);

    // Another key: the server proves a key this client does not hold, and the client
    // never gets in.
    let stranger = ClientProof::Key(Arc::new(KeyRing::generate().unwrap()));
    match common::raw_session(&config, 1, &stranger) {
        Ok(_) => panic!("a handshake with another key was accepted"),
        Err(e) => {
            assert_eq!(e.errno(), Errno::EKEYREJECTED, "another key: {e:?}");
            let text = e.to_string();
            assert!(
                text.contains("does not hold") || text.contains("failed to prove"),
                "another key: the error should say the key is not held: {text}"
            );
        }
    }
    assert_healthy(
        &cluster,
        &tc,
        &mut rng,
        "after a handshake with another key",
    );

    // A Hello for another file system, for a server name that does not exist, or for
    // another server of this file system (a client whose configuration swapped two
    // addresses): refused with ESTALE by a message naming the server that was reached.
    let key = common::key_proof(&config);
    let mut other_fs = config.clone();
    other_fs.fsid ^= 0x5a5a;
    let mut other_name = config.clone();
    other_name.servers[2].name = "no-such-server".into();
    let mut swapped = config.clone();
    swapped.servers[2].address = config.servers[3].address.clone();
    let cases = [
        (
            "another file system",
            other_fs,
            2,
            format!("not {} of", config.servers[2].name),
        ),
        (
            "another server name",
            other_name,
            2,
            "not no-such-server of".to_string(),
        ),
        (
            "another server",
            swapped,
            3,
            format!("not {} of", config.servers[2].name),
        ),
    ];
    for (what, cfg, reached, needle) in cases {
        let e = match common::raw_session(&cfg, 2, &key) {
            Ok(_) => panic!("{what}: the handshake was accepted"),
            Err(e) => e,
        };
        match &e {
            HandshakeError::Refused { errno, message } => {
                assert_eq!(*errno, Errno::ESTALE, "{what}: {message}");
                let naming = format!(
                    "this is server {} of file system {:#x}",
                    config.servers[reached].name, config.fsid
                );
                assert!(
                    message.contains(&naming),
                    "{what}: the refusal should name the server ({naming:?}): {message}"
                );
                assert!(message.contains(&needle), "{what}: {message}");
            }
            other => panic!("{what}: expected the server's refusal, got {other:?}"),
        }
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }
    // The same refusal seen on the wire: one Refused frame, then the close.
    let mut s = connect(&cluster, 0);
    let mut h = hello(&config, 0, &mut rng);
    h.fsid ^= 1;
    s.write_all(&handshake_frame(&HandshakeMsg::Hello(h)))
        .unwrap();
    let naming = format!("this is server {} of", config.servers[0].name);
    expect_refused_then_close(
        &mut s,
        Errno::ESTALE,
        &naming,
        "a raw Hello for another fsid",
    );

    // A client that cannot prove the key: a Hello, then a zeroed Proof with a create
    // right behind it. The server refuses the proof, closes, and never runs the create.
    let (srv, create) = create_symlink(&config, "zero-proof");
    let mut s = connect(&cluster, srv);
    s.write_all(&handshake_frame(&HandshakeMsg::Hello(hello(
        &config, srv, &mut rng,
    ))))
    .unwrap();
    expect_challenge(&mut s, &config, srv, "a Hello before a zeroed Proof");
    let mut f = handshake_frame(&HandshakeMsg::Proof(Proof {
        proof: vec![0; PROOF_LEN],
    }));
    let body = request_body(create);
    f.extend_from_slice(&header(VERSION, REQUEST, END, 1, body.len() as u32, TAG, 0));
    f.extend_from_slice(&body);
    f.extend_from_slice(&rng.bytes(TAG_LEN));
    send_to_closing(&mut s, &f, false);
    expect_refused_then_close(
        &mut s,
        Errno::EKEYREJECTED,
        "failed to prove it holds the file system's key",
        "a zeroed Proof",
    );
    assert_not_run(&tc, "zero-proof", "a create after a zeroed Proof");
    assert_healthy(&cluster, &tc, &mut rng, "after a zeroed Proof");

    // A create (untagged) right after the Hello, in place of the Proof: the Challenge
    // was already sent; the create is no handshake frame, so the connection closes
    // without an answer, and the create does not run.
    let (srv, create) = create_symlink(&config, "no-proof");
    let mut s = connect(&cluster, srv);
    let mut f = handshake_frame(&HandshakeMsg::Hello(hello(&config, srv, &mut rng)));
    f.extend(plain_frame(
        VERSION,
        REQUEST,
        END,
        2,
        &request_body(create),
        &[],
    ));
    send_to_closing(&mut s, &f, false);
    expect_challenge(&mut s, &config, srv, "a create in place of the Proof");
    expect_silent_close(&mut s, "a create in place of the Proof");
    assert_not_run(&tc, "no-proof", "a create in place of the Proof");

    // A second Hello in place of the Proof: refused (EPROTO), then closed.
    let mut s = connect(&cluster, 0);
    s.write_all(&handshake_frame(&HandshakeMsg::Hello(hello(
        &config, 0, &mut rng,
    ))))
    .unwrap();
    expect_challenge(&mut s, &config, 0, "a second Hello");
    s.write_all(&handshake_frame(&HandshakeMsg::Hello(hello(
        &config, 0, &mut rng,
    ))))
    .unwrap();
    expect_refused_then_close(
        &mut s,
        Errno::EPROTO,
        "expected Proof, got Hello",
        "a second Hello",
    );

    // A client that gives up (sends Refused itself) is closed without an answer.
    let mut s = connect(&cluster, 0);
    s.write_all(&handshake_frame(&HandshakeMsg::Hello(hello(
        &config, 0, &mut rng,
    ))))
    .unwrap();
    expect_challenge(&mut s, &config, 0, "a client's Refused");
    s.write_all(&handshake_frame(&HandshakeMsg::Refused {
        errno: Errno::EKEYREJECTED.0,
        message: "not you".into(),
    }))
    .unwrap();
    expect_silent_close(&mut s, "a client's Refused");

    assert_logged(&cluster, 0, "refused a connection");
    assert_healthy(&cluster, &tc, &mut rng, "after the failed handshakes");
}

#[test]
fn malformed_headers_after_the_handshake_get_an_error_then_a_close() {
    let cluster = cluster();
    let config = cluster.config().clone();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_0009);
    assert_healthy(&cluster, &tc, &mut rng, "before");
    let n = config.servers.len();
    let mut srv = 0;
    let mut next_server = || {
        srv = (srv + 1) % n;
        srv
    };

    // Oversized lengths: E2BIG (a tagged error response), then the connection is
    // closed (the frame boundary is lost); nothing is allocated or read.
    let oversized = [
        (
            "body",
            header(VERSION, REQUEST, END, 11, MAX_BODY + 1, TAG, 0),
        ),
        (
            "huge body",
            header(VERSION, REQUEST, END, 12, u32::MAX, TAG, 0),
        ),
        (
            "data",
            header(VERSION, REQUEST, END, 13, 10, TAG, MAX_DATA + 1),
        ),
        (
            "huge data",
            header(VERSION, DATA, END, 14, 0, TAG, u32::MAX),
        ),
        ("tag", header(VERSION, REQUEST, END, 15, 10, MAX_TAG + 1, 0)),
    ];
    for (what, h) in oversized {
        let mut s = Session::open(&cluster, next_server());
        s.expect_ping(1, "before an oversized frame");
        s.send(&h);
        s.expect_error_then_close(id_of(&h), Errno::E2BIG, &format!("oversized {what}"));
        assert_healthy(
            &cluster,
            &tc,
            &mut rng,
            &format!("after an oversized {what}"),
        );
    }

    // Unknown protocol versions (the old versions 1 to 6 among them): EPROTO with the
    // request id, then closed.
    for version in (0..VERSION).chain([VERSION + 1, 0xffff]) {
        let mut s = Session::open(&cluster, next_server());
        s.send(&header(version, REQUEST, END, 21, 0, TAG, 0));
        s.expect_error_then_close(21, Errno::EPROTO, &format!("version {version}"));
        assert_healthy(&cluster, &tc, &mut rng, "after an unknown version");
    }

    // Reserved bits and fields, unknown kinds: EBADMSG, then closed.
    let mut bad = Vec::new();
    for flags in [2u8, 0x80, 0xff] {
        bad.push((
            format!("flags {flags:#x}"),
            header(VERSION, REQUEST, flags, 31, 0, TAG, 0),
        ));
    }
    let mut h = header(VERSION, REQUEST, END, 32, 0, TAG, 0);
    h[22] = 1;
    bad.push(("reserved u16".into(), h));
    let mut h = header(VERSION, REQUEST, END, 33, 0, TAG, 0);
    h[31] = 0x40;
    bad.push(("reserved u32".into(), h));
    for kind in [0u8, 5, 0xff] {
        bad.push((
            format!("kind {kind}"),
            header(VERSION, kind, END, 34, 0, TAG, 0),
        ));
    }
    for (what, h) in bad {
        let mut s = Session::open(&cluster, next_server());
        s.send(&h);
        s.expect_error_then_close(id_of(&h), Errno::EBADMSG, &what);
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }

    // Garbage after a good ping: not our protocol, closed without an answer.
    let mut s = Session::open(&cluster, next_server());
    s.expect_ping(1, "before garbage");
    let mut junk = rng.bytes(100);
    junk[0] = b'X';
    s.send(&junk);
    s.expect_silent_close("garbage after the handshake");
    assert_healthy(&cluster, &tc, &mut rng, "after garbage");

    // Frames only servers send, correctly tagged: a response and a second handshake.
    let hs = encode(&HandshakeMsg::Hello(hello(&config, 0, &mut rng)));
    let only_servers: [(&str, u8, u64, Vec<u8>); 2] = [
        (
            "a response frame from a client",
            RESPONSE,
            41,
            encode(&Response::Done {}),
        ),
        ("a handshake frame after the handshake", HANDSHAKE, 0, hs),
    ];
    for (what, kind, id, body) in only_servers {
        let mut s = Session::open(&cluster, 0);
        let f = s.seal_frame(kind, END, id, &body, &[]);
        s.send(&f);
        s.expect_silent_close(what);
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }

    // A truncated frame, then close: nothing is answered, nothing breaks.
    for (body_sent, tag_sent, data_sent) in [
        (10usize, 0, 0usize),
        (100, 0, 0),
        (100, 8, 0),
        (100, 16, 5000),
    ] {
        let mut s = Session::open(&cluster, next_server());
        let mut b = request_body(Request::Ping(req::Ping {}));
        b.resize(100, 0);
        let h = header(VERSION, REQUEST, END, 5, 100, TAG, 8192);
        let tag = s.macs.send.seal(&h, &b);
        let mut f = h.to_vec();
        f.extend_from_slice(&b[..body_sent]);
        if body_sent == b.len() {
            f.extend_from_slice(&tag[..tag_sent]);
        }
        f.extend(std::iter::repeat_n(0u8, data_sent));
        s.send(&f);
        s.s.shutdown(Shutdown::Write).unwrap();
        s.expect_silent_close("a truncated frame");
        assert_healthy(&cluster, &tc, &mut rng, "after a truncated frame");
    }
    // A header cut short, then close.
    let mut s = Session::open(&cluster, next_server());
    s.send(&header(VERSION, REQUEST, END, 6, 10, TAG, 0)[..20]);
    s.s.shutdown(Shutdown::Write).unwrap();
    s.expect_silent_close("a truncated header");
    assert_healthy(&cluster, &tc, &mut rng, "after a truncated header");
}

#[test]
fn forged_untagged_replayed_or_altered_frames_close_the_connection_without_running() {
    let cluster = cluster();
    let config = cluster.config().clone();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_000a);
    assert_healthy(&cluster, &tc, &mut rng, "before");

    // The control: a correctly tagged create of a new name runs (so the creates below
    // would leave their names behind if the server ran them).
    let (srv, create) = create_symlink(&config, "control");
    let mut s = Session::open(&cluster, srv);
    let f = s.seal_request(1, create, true, &[]);
    s.send(&f);
    match s.next() {
        Got::Frame(r) => {
            assert_eq!(r.id, 1);
            assert!(
                matches!(r.response(), Response::Created { .. }),
                "control create answered {:?}",
                r.response()
            );
        }
        Got::Closed => panic!("control create: connection closed"),
    }
    s.expect_ping(2, "after the control create");
    assert!(exists(&tc, "control"), "the control create did not run");

    // Each case: a session that served a ping, then a create of a new name in a frame
    // that fails authentication. The connection closes without an answer, the name is
    // not created, and the server keeps serving others.
    type Forge = fn(&mut Session, Request, &mut Rng) -> Vec<u8>;
    let cases: Vec<(&str, Forge)> = vec![
        ("a flipped bit in the tag", |s, req, _| {
            let mut f = s.seal_request(10, req, true, &[]);
            let last = f.len() - 1;
            f[last] ^= 0x01;
            f
        }),
        ("a random tag", |s, req, rng| {
            // Not sealed, and followed by the same create correctly sealed with the
            // sequence number the server expects next: a server that skipped the
            // forged frame instead of closing would run that one.
            let body = request_body(req.clone());
            let mut f = header(VERSION, REQUEST, END, 10, body.len() as u32, TAG, 0).to_vec();
            f.extend_from_slice(&body);
            f.extend_from_slice(&rng.bytes(TAG_LEN));
            f.extend(s.seal_request(11, req, true, &[]));
            f
        }),
        ("no tag (tag length 0)", |_, req, _| {
            plain_frame(VERSION, REQUEST, END, 10, &request_body(req), &[])
        }),
        ("a short tag (8 bytes, announced)", |s, req, _| {
            let body = request_body(req);
            let h = header(VERSION, REQUEST, END, 10, body.len() as u32, 8, 0);
            let tag = s.macs.send.seal(&h, &body);
            let mut f = h.to_vec();
            f.extend_from_slice(&body);
            f.extend_from_slice(&tag[..8]);
            f
        }),
        ("a body altered after sealing", |s, req, _| {
            let mut f = s.seal_request(10, req, true, &[]);
            // The symlink's target, "hostile", becomes "hostilf": the same create
            // otherwise, so it would leave its name behind if it ran.
            let at = f
                .windows(7)
                .position(|w| w == b"hostile")
                .expect("the target in the body");
            f[at + 6] = b'f';
            f
        }),
        (
            "a header altered after sealing (request id)",
            |s, req, _| {
                let mut f = s.seal_request(10, req, true, &[]);
                f[8] ^= 0x04;
                f
            },
        ),
        ("a frame sent out of order", |s, req, _| {
            // Sealed second, sent first (the first is never sent).
            let _first = s.seal_request(10, req.clone(), true, &[]);
            s.seal_request(11, req, true, &[])
        }),
    ];
    for (i, (what, forge)) in cases.into_iter().enumerate() {
        let name = format!("forged-{i}");
        let (srv, create) = create_symlink(&config, &name);
        let mut s = Session::open(&cluster, srv);
        s.expect_ping(1, &format!("before {what}"));
        let f = forge(&mut s, create, &mut rng);
        s.send(&f);
        s.expect_silent_close(what);
        assert_not_run(&tc, &name, what);
        assert_healthy(&cluster, &tc, &mut rng, &format!("after {what}"));
    }

    // A replayed frame: the same bytes sent twice. The first runs (the name appears
    // and is then removed by the healthy client); the second closes the connection
    // without running (the name does not come back).
    let (srv, create) = create_symlink(&config, "replayed");
    let mut s = Session::open(&cluster, srv);
    let f = s.seal_request(20, create, true, &[]);
    s.send(&f);
    match s.next() {
        Got::Frame(r) => assert!(
            matches!(r.response(), Response::Created { .. }),
            "the original of the replayed frame answered {:?}",
            r.response()
        ),
        Got::Closed => panic!("the original of the replayed frame: connection closed"),
    }
    assert!(exists(&tc, "replayed"), "the original create did not run");
    tc.run(Duration::from_secs(20), async |c| {
        c.unlink("/replayed").await.unwrap();
    });
    assert_not_run(&tc, "replayed", "the original create, once removed");
    s.send(&f);
    s.expect_silent_close("a replayed frame");
    assert_not_run(&tc, "replayed", "a replayed frame");
    assert_healthy(&cluster, &tc, &mut rng, "after a replayed frame");

    // A frame sealed for another connection (another session key) to the same server.
    let (srv, create) = create_symlink(&config, "other-session");
    let mut a = Session::open(&cluster, srv);
    let f = a.seal_request(30, create, true, &[]);
    let mut b = Session::open(&cluster, srv);
    b.send(&f);
    b.expect_silent_close("a frame sealed for another connection");
    assert_not_run(
        &tc,
        "other-session",
        "a frame sealed for another connection",
    );
    // The connection it was sealed for still serves (its sequence is one ahead now, so
    // its next frame is refused the same way: a lost frame is as bad as a forged one).
    let ping = a.seal_request(31, Request::Ping(req::Ping {}), true, &[]);
    a.send(&ping);
    a.expect_silent_close("a frame after one that was never sent");
    assert_healthy(
        &cluster,
        &tc,
        &mut rng,
        "after frames of another connection",
    );

    // The server says why, in one rate-limited line.
    for srv in 0..config.servers.len() {
        if cluster
            .log(&config.servers[srv].name)
            .contains("failed authentication")
        {
            return;
        }
    }
    panic!("no server logged a frame that failed authentication");
}

#[test]
fn bad_bodies_and_reused_ids_get_error_replies_and_the_connection_keeps_serving() {
    let cluster = cluster();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_0006);
    assert_healthy(&cluster, &tc, &mut rng, "before");

    // Undecodable bodies, correctly tagged: EBADMSG for that request; the same
    // connection keeps serving.
    let ping = request_body(Request::Ping(req::Ping {}));
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
        let mut s = Session::open(&cluster, i % 4);
        let id = 100 + i as u64;
        let f = s.seal_frame(REQUEST, END, id, &body, &[]);
        s.send(&f);
        s.expect_error_and_serving(id, Some(Errno::EBADMSG), what);
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
                    replicas: None,
                },
                true,
            )
            .await
            .unwrap();
        f.write_at(0, &content).await.unwrap();
        (f.handle(), f.layout().clone())
    });
    let (target, layout) = layout;
    let df = layout.datafiles[0];
    let handles: Vec<Handle> = layout.datafiles.iter().map(|d| d.handle).collect();
    let df_cap = datafile_caps(&cluster, target, &handles).remove(0);
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
            replicas: None,
        };
        let f = c.create("/scratch", 0o644, spec, true).await.unwrap();
        (f.handle(), f.layout().datafiles[0])
    });
    let (scratch_file, scratch) = scratch;
    let scratch_cap = datafile_caps(&cluster, scratch_file, &[scratch.handle]).remove(0);
    assert_eq!(
        scratch.server as usize, srv,
        "scratch file on the wrong server"
    );

    // Well-encoded but impossible requests: an error reply, the connection serves on.
    let impossible: Vec<(&str, Request, Vec<u8>)> = vec![
        (
            "a stride shorter than its block",
            Request::Read(req::Read {
                copies: Default::default(),
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
                cap: Some(df_cap.clone()),
            }),
            vec![],
        ),
        (
            "a datafile index past the stripe count",
            Request::Read(req::Read {
                copies: Default::default(),
                handle: df.handle,
                stripe,
                index: 7,
                regions: Regions::contig(0, 10),
                cap: Some(df_cap.clone()),
            }),
            vec![],
        ),
        (
            "a region past the largest file",
            Request::Read(req::Read {
                copies: Default::default(),
                handle: df.handle,
                stripe,
                index: 0,
                regions: Regions::contig(u64::MAX - 5, 5),
                cap: Some(df_cap.clone()),
            }),
            vec![],
        ),
        (
            "a write with less data than its regions",
            Request::Write(req::Write {
                copies: Default::default(),
                handle: scratch.handle,
                stripe,
                index: 0,
                regions: Regions::contig(0, 100_000),
                sync: false,
                cap: Some(scratch_cap.clone()),
            }),
            vec![7u8; 10],
        ),
        (
            "a write with more data than its regions",
            Request::Write(req::Write {
                copies: Default::default(),
                handle: scratch.handle,
                stripe,
                index: 0,
                regions: Regions::contig(0, 10),
                sync: false,
                cap: Some(scratch_cap.clone()),
            }),
            vec![7u8; 5000],
        ),
        (
            "a stripe size of 0",
            Request::Write(req::Write {
                copies: Default::default(),
                handle: scratch.handle,
                stripe: Stripe { size: 0, count: 4 },
                index: 0,
                regions: Regions::contig(0, 10),
                sync: false,
                cap: Some(scratch_cap.clone()),
            }),
            vec![7u8; 10],
        ),
        (
            "a handle of another server",
            Request::GetAttr(req::GetAttr {
                handle: cluster.config().servers[(srv + 1) % 4].handles.first + 12345,
                want: 0,
                proof: None,
            }),
            vec![],
        ),
        (
            "a handle of no server",
            Request::GetAttr(req::GetAttr {
                handle: 3,
                want: 0,
                proof: None,
            }),
            vec![],
        ),
        (
            "a precreate of 4 billion handles",
            Request::Precreate(req::Precreate { count: u32::MAX }),
            vec![],
        ),
    ];
    for (i, (what, req, data)) in impossible.into_iter().enumerate() {
        let mut s = Session::open(&cluster, srv);
        let id = 200 + i as u64;
        let f = s.seal_request(id, req, true, &data);
        s.send(&f);
        // A read answers its error in its first frame; others in their only frame.
        match s.next() {
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
        s.expect_ping(0xbeef, what);
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
    let mut s = Session::open(&cluster, 0);
    let mut two = s.seal_request(7, Request::Ping(req::Ping {}), true, &[]);
    two.extend(s.seal_request(7, Request::Ping(req::Ping {}), true, &[]));
    s.send(&two);
    for _ in 0..2 {
        match s.next() {
            Got::Frame(r) => {
                assert_eq!(r.id, 7);
                assert!(matches!(r.response(), Response::Pong { .. }));
            }
            Got::Closed => panic!("reused ping id: connection closed"),
        }
    }
    s.expect_ping(8, "after a reused ping id");

    // Data frames for requests nobody sent (or that are over) are dropped: nothing
    // answers them, and the connection serves on.
    let mut s = Session::open(&cluster, srv);
    let mut f = s.seal_data(999, true, &[5u8; 100]);
    f.extend(s.seal_data(998, false, &[6u8; 70_000]));
    f.extend(s.seal_data(8, true, &[]));
    s.send(&f);
    s.expect_ping(8, "after data frames for unknown requests");
    let f = s.seal_data(8, true, &[7u8; 10]);
    s.send(&f);
    s.expect_ping(9, "after a data frame for a request that is over");

    // A request id reused while a streaming write with that id is still open: the
    // server answers (errors or not) or closes, and stays up.
    let mut s = Session::open(&cluster, srv);
    let first = Request::Write(req::Write {
        copies: Default::default(),
        handle: scratch.handle,
        stripe,
        index: 0,
        regions: Regions::contig(0, 65536),
        sync: false,
        cap: Some(scratch_cap.clone()),
    });
    let f = s.seal_request(9, first, false, &[1u8; 1000]);
    s.send(&f);
    let f = s.seal_request(9, Request::Ping(req::Ping {}), true, &[]);
    s.send(&f);
    let second = Request::Write(req::Write {
        copies: Default::default(),
        handle: scratch.handle,
        stripe,
        index: 0,
        regions: Regions::contig(0, 10),
        sync: false,
        cap: Some(scratch_cap.clone()),
    });
    let f = s.seal_request(9, second, false, &[2u8; 5]);
    s.send(&f);
    let f = s.seal_data(9, false, &[3u8; 5]);
    s.send(&f);
    let f = s.seal_data(9, true, &[4u8; 64535]);
    s.send(&f);
    // A data frame for a request nobody sent is dropped.
    let f = s.seal_data(999, true, &[5u8; 100]);
    s.send(&f);
    let mut replies = 0;
    let mut closed = false;
    while replies < 3 {
        match s.next() {
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
        s.expect_ping(10, "after a reused write id");
    }
    assert_healthy(&cluster, &tc, &mut rng, "after a reused write id");
}

#[test]
fn stalled_half_frames_do_not_block_other_clients() {
    let cluster = cluster();
    let config = cluster.config().clone();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_0007);
    assert_healthy(&cluster, &tc, &mut rng, "before");
    let n = config.servers.len();

    // On every server, after the handshake: half a header, a header with half its
    // body, a streaming write whose data stops. Before any handshake: a connection
    // with half a Hello, one that sent a Hello and never proves itself, and many with
    // a few bytes each or nothing at all. All kept open by the client.
    let mut idle = Vec::new();
    let mut watched = Vec::new();
    let mut stalled_writes = Vec::new();
    let layout = tc.run(Duration::from_secs(20), async |c| {
        let f = c
            .create("/stall", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, &[1u8; 300_000]).await.unwrap();
        (f.handle(), f.layout().clone())
    });
    let (stall, layout) = layout;
    let stripe = layout.stripe();
    let handles: Vec<Handle> = layout.datafiles.iter().map(|d| d.handle).collect();
    let caps = datafile_caps(&cluster, stall, &handles);
    // Each stalled connection is watched from the moment it stalls: the clock stops
    // when its close is observed.
    let watch = |mut s: Session, what: &'static str| {
        let since = Instant::now();
        std::thread::spawn(move || {
            s.expect_silent_close(what);
            (what, since.elapsed())
        })
    };
    let watch_raw = |mut s: TcpStream, what: &'static str, since: Instant| {
        std::thread::spawn(move || {
            expect_silent_close(&mut s, what);
            (what, since.elapsed())
        })
    };
    for srv in 0..n {
        let mut s = Session::open(&cluster, srv);
        s.send(&header(VERSION, REQUEST, END, 1, 40, TAG, 0)[..16]);
        watched.push(watch(s, "half a header"));

        let mut s = Session::open(&cluster, srv);
        let body = request_body(Request::Ping(req::Ping {}));
        let mut f = s.seal_frame(REQUEST, END, 2, &body, &[]);
        f.truncate(32 + body.len() / 2);
        s.send(&f);
        watched.push(watch(s, "half a frame body"));

        let mut s = connect(&cluster, srv);
        let since = Instant::now();
        let hello = handshake_frame(&HandshakeMsg::Hello(hello(&config, srv, &mut rng)));
        s.write_all(&hello[..40]).unwrap();
        watched.push(watch_raw(s, "half a Hello", since));

        let mut s = connect(&cluster, srv);
        let since = Instant::now();
        s.write_all(&hello).unwrap();
        expect_challenge(&mut s, &config, srv, "a Hello without a Proof");
        watched.push(watch_raw(s, "a Hello without a Proof", since));

        for i in 0..16 {
            let mut s = connect(&cluster, srv);
            let since = Instant::now();
            if i % 2 == 0 {
                s.write_all(b"PVF").unwrap();
                watched.push(watch_raw(s, "3 bytes and no handshake", since));
            } else {
                idle.push(s);
            }
        }
    }
    for (idx, df) in layout.datafiles.iter().enumerate() {
        let mut s = Session::open(&cluster, df.server as usize);
        let req = Request::Write(req::Write {
            copies: Default::default(),
            handle: df.handle,
            stripe,
            index: idx as u32,
            regions: Regions::contig(0, 4 << 20),
            sync: false,
            cap: Some(caps[idx].clone()),
        });
        let f = s.seal_request(3, req, false, &[9u8; 4096]);
        s.send(&f);
        let since = Instant::now();
        stalled_writes.push(std::thread::spawn(move || {
            match s.next() {
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

    // Every stalled connection is closed, without an answer, within the request
    // timeout (the handshake's deadline before the handshake, the frame's after it).
    let bound = timeout() + margin();
    for w in watched {
        let (what, took) = w.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        assert!(
            took < bound,
            "{what}: closed after {took:?} (timeout {:?})",
            timeout()
        );
    }
    // A streaming write whose data stops fails with ETIMEDOUT within the timeout.
    for w in stalled_writes {
        let took = w.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        assert!(took < bound, "stalled write ended after {took:?}");
    }
    // The connections that never sent a byte were closed by their handshake deadline
    // too (long since: the other stalls took as long).
    for mut s in idle {
        expect_silent_close(&mut s, "a connection that sent nothing");
    }
    assert_healthy(&cluster, &tc, &mut rng, "after the stalls");
}

#[test]
fn a_stall_inside_a_frame_header_is_closed_within_the_request_timeout() {
    let cluster = cluster();
    let config = cluster.config().clone();
    let mut rng = Rng::new(0x5eed_000b);
    // After the handshake: half a request header.
    let mut s = Session::open(&cluster, 0);
    s.expect_ping(1, "before half a header");
    s.send(&header(VERSION, REQUEST, END, 2, 40, TAG, 0)[..16]);
    let since = Instant::now();
    // Closed without an answer, not merely silent: `next` fails the test if nothing
    // happens within its wait.
    s.expect_silent_close("half a header");
    let took = since.elapsed();
    assert!(
        took < timeout() + margin(),
        "half a header was closed only after {took:?} (request timeout {:?})",
        timeout()
    );
    // Before the handshake: half a Hello's header (the handshake's deadline runs from
    // the connection's start, so the clock starts at the connect).
    let since = Instant::now();
    let mut s = connect(&cluster, 1);
    let hello = handshake_frame(&HandshakeMsg::Hello(hello(&config, 1, &mut rng)));
    s.write_all(&hello[..16]).unwrap();
    expect_silent_close(&mut s, "half a Hello header");
    let took = since.elapsed();
    assert!(
        took < timeout() + margin(),
        "half a Hello header was closed only after {took:?} (request timeout {:?})",
        timeout()
    );
    // A connection that says nothing at all is closed by the same deadline.
    let since = Instant::now();
    let mut s = connect(&cluster, 2);
    expect_silent_close(&mut s, "a connection without a Hello");
    let took = since.elapsed();
    assert!(
        took < timeout() + margin(),
        "a connection without a Hello was closed only after {took:?} (request timeout {:?})",
        timeout()
    );
    cluster.assert_all_running();
}
