//! Resource limits: with a small receive-buffer budget many clients
//! writing at once still succeed (the budget paces them, it does not deadlock), server
//! memory stays bounded, and a connection beyond the limit is refused in its handshake
//! (EAGAIN, saying why), while the others keep working.
//!
//! The raw connections here speak the protocol version below: each served one first does the
//! authenticated handshake with the file system's key (`common::raw_session`), then
//! sends ping frames built from the documented layout (crates/proto/src/frame.rs) with
//! the 16-byte tag of the session's MAC (crates/auth/src/mac.rs), and checks the tag
//! of each Pong with the session's receiving MAC.
#![allow(clippy::unwrap_used)]

mod common;

use pvfs_proto::req;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Cluster, Rng};
use pvfs_auth::handshake::HandshakeError;
use pvfs_auth::{SessionMacs, TAG_LEN};
use pvfs_client::LayoutSpec;

fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn a_small_buffer_budget_paces_writers_without_deadlock_or_growth() {
    // One client address may hold half the budget: 16 MiB here.
    let cluster = Cluster::builder().set("buffers", "\"32M\"").start();
    assert_eq!(cluster.config().limits.buffers, 32 << 20);
    let before: Vec<u64> = cluster
        .names()
        .iter()
        .map(|n| rss(cluster.pid(n)))
        .collect();
    let mut rng = Rng::new(0x5eed_1157);
    let data = rng.bytes(16 << 20);
    // 16 clients (one address) write 16 MiB each at once: 256 MiB through a 16 MiB
    // share of the budget.
    std::thread::scope(|s| {
        let cluster = &cluster;
        let data = &data;
        for i in 0..16u64 {
            s.spawn(move || {
                let tc = cluster.client();
                tc.run(Duration::from_secs(120), async |c| {
                    let f = c
                        .create(&format!("/w{i}"), 0o644, LayoutSpec::default(), true)
                        .await
                        .unwrap();
                    f.write_at(0, data).await.unwrap();
                    let mut back = vec![0u8; data.len()];
                    assert_eq!(f.read_at(0, &mut back).await.unwrap(), data.len());
                    assert!(back == *data, "client {i}: data differs");
                });
            });
        }
    });
    for (n, b) in cluster.names().iter().zip(before) {
        let after = rss(cluster.pid(n));
        // The budget (32 MiB, of which this address may hold 16), the idle buffer pool
        // and allocator slack: far below what 16 unpaced 16 MiB streams could pile up.
        assert!(
            after < b + (112 << 20),
            "{n}: memory grew from {b} to {after} bytes under a 32 MiB budget"
        );
    }
}

/// Longest wait for a server's reaction on a raw connection (an answer or a close).
fn react() -> Duration {
    common::scaled(Duration::from_secs(30))
}

/// The protocol version the servers speak.
const VERSION: u16 = 18;

/// A tagged ping request frame with request id `id`, built from the documented frame
/// layout (32-byte header: magic "PVFS", version 18, kind 1 = request, flags 1 = END,
/// id, body length, tag length 16; then body and tag), sealed with the session's MAC
/// (so frames must be sent in the order they were built).
fn ping_frame(macs: &mut SessionMacs, id: u64) -> Vec<u8> {
    let body = pvfs_proto::encode(&pvfs_proto::RequestBody {
        creds: pvfs_proto::Creds::current(),
        request: pvfs_proto::Request::Ping(req::Ping {}),
        retry: None,
        origin: 0,
    });
    let mut h = [0u8; 32];
    h[0..4].copy_from_slice(b"PVFS");
    h[4..6].copy_from_slice(&VERSION.to_le_bytes());
    h[6] = 1;
    h[7] = 1;
    h[8..16].copy_from_slice(&id.to_le_bytes());
    h[16..20].copy_from_slice(&(body.len() as u32).to_le_bytes());
    h[20..22].copy_from_slice(&(TAG_LEN as u16).to_le_bytes());
    let tag = macs.send.seal(&h, &body);
    let mut f = h.to_vec();
    f.extend_from_slice(&body);
    f.extend_from_slice(&tag);
    f
}

/// What a server did with a raw connection.
#[derive(Debug, PartialEq)]
enum Seen {
    /// It sent bytes (the start of an answer).
    Answered,
    /// It closed the connection: EOF or ECONNRESET was observed.
    Closed,
}

/// Waits for the server's reaction on a connection that has not done the handshake
/// (a served one sends nothing before the client's Hello); a read that times out
/// fails the test (it is neither an answer nor a close).
fn reaction(s: &mut TcpStream) -> Seen {
    s.set_read_timeout(Some(react())).unwrap();
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => Seen::Closed,
        Ok(_) => Seen::Answered,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Seen::Closed,
        Err(e) => panic!(
            "the server neither answered nor closed within {:?}: {e}",
            react()
        ),
    }
}

/// Sends a tagged ping on a session and expects its Pong, the reply's tag checked
/// with the session's MAC; a close or a silence fails the test.
#[track_caller]
fn ping_session(s: &mut TcpStream, macs: &mut SessionMacs, id: u64, what: &str) {
    s.set_read_timeout(Some(react())).unwrap();
    s.write_all(&ping_frame(macs, id))
        .unwrap_or_else(|e| panic!("{what}: cannot send a ping: {e}"));
    let mut h = [0u8; 32];
    s.read_exact(&mut h)
        .unwrap_or_else(|e| panic!("{what}: no answer to a ping: {e}"));
    assert_eq!(
        &h[0..4],
        b"PVFS",
        "{what}: an answer without the magic: {h:02x?}"
    );
    assert_eq!(
        u16::from_le_bytes([h[4], h[5]]),
        VERSION,
        "{what}: answer version"
    );
    assert_eq!(h[6], 2, "{what}: not a response frame: {h:02x?}");
    assert_eq!(
        u64::from_le_bytes(h[8..16].try_into().unwrap()),
        id,
        "{what}: reply id"
    );
    let le32 = |r: std::ops::Range<usize>| u32::from_le_bytes(h[r].try_into().unwrap()) as usize;
    let tag_len = u16::from_le_bytes([h[20], h[21]]) as usize;
    assert_eq!(
        tag_len, TAG_LEN,
        "{what}: an answer without its tag: {h:02x?}"
    );
    assert_eq!(le32(24..28), 0, "{what}: a Pong with data");
    let mut body = vec![0u8; le32(16..20)];
    let mut tag = vec![0u8; tag_len];
    s.read_exact(&mut body).unwrap();
    s.read_exact(&mut tag).unwrap();
    macs.recv
        .open(&h, &body, &tag)
        .unwrap_or_else(|e| panic!("{what}: the answer's tag does not verify: {e}"));
    let resp: pvfs_proto::Response = pvfs_proto::decode(&body).unwrap();
    assert!(
        matches!(resp, pvfs_proto::Response::Pong { .. }),
        "{what}: a ping answered {resp:?}"
    );
}

/// Opens a connection to server 0 and does the handshake, then pings: the session if
/// it was served, or None if the server refused it in the handshake because every
/// connection slot is taken (EAGAIN, saying so: never a silence).
fn session(cluster: &Cluster, id: u64) -> Option<(TcpStream, SessionMacs)> {
    let config = cluster.config();
    match common::raw_session(config, 0, &common::key_proof(config)) {
        Ok((mut s, mut macs)) => {
            ping_session(&mut s, &mut macs, id, "a served connection");
            Some((s, macs))
        }
        Err(HandshakeError::Refused { errno, message }) => {
            assert_eq!(errno, pvfs_proto::Errno::EAGAIN, "{message}");
            assert!(message.contains("limit of 4 connections"), "{message}");
            None
        }
        Err(e) => panic!("a connection beyond the limit should be refused, saying why: {e:?}"),
    }
}

#[test]
fn connections_beyond_the_limit_are_closed_and_the_rest_keep_working() {
    let cluster = Cluster::builder().set("connections", "4").start();
    let addr = cluster.config().servers[0].address.clone();
    // Connections take the slots one by one, each proven served by a handshake and a
    // tagged ping's Pong (other servers' connections may hold slots too); then one is
    // closed at once, before any handshake.
    let mut held = Vec::new();
    loop {
        match session(&cluster, held.len() as u64 + 1) {
            Some(s) => held.push(s),
            None => break,
        }
        assert!(held.len() <= 4, "more than 4 connections were served");
    }
    assert!(!held.is_empty(), "no connection was served");
    // Every slot is taken now: another connection that sends nothing is closed by the
    // server once its handshake time is up (EOF or reset observed, not a silent read
    // timeout).
    let mut extra = TcpStream::connect(&addr).unwrap();
    assert_eq!(
        reaction(&mut extra),
        Seen::Closed,
        "a connection beyond the limit was served"
    );
    let log = cluster.dir().join("s0.log");
    common::poll(
        "the refusal to be logged",
        common::scaled(Duration::from_secs(10)),
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("serves its limit of 4 connections")
                .then_some(())
        },
    );
    // The served connections keep working.
    for (i, (s, macs)) in held.iter_mut().enumerate() {
        ping_session(
            s,
            macs,
            100 + i as u64,
            &format!("held connection {i} after the limit was reached"),
        );
    }
    // Freeing slots lets clients in again (as soon as the server noticed the closes).
    drop(held);
    common::poll(
        "a slot to be free again",
        common::scaled(Duration::from_secs(30)),
        || session(&cluster, 1000).map(|_| ()),
    );
    let tc = cluster.client();
    tc.run(Duration::from_secs(30), async |c| {
        c.mkdir("/ok", 0o755).await.unwrap();
    });
}
