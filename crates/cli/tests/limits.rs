//! Resource limits: with a small receive-buffer budget many clients
//! writing at once still succeed (the budget paces them, it does not deadlock), server
//! memory stays bounded, and connections beyond the limit are closed at once while the
//! others keep working.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Cluster, Rng};
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
    let cluster = Cluster::builder().set("buffers", "\"16M\"").start();
    assert_eq!(cluster.config().limits.buffers, 16 << 20);
    let before: Vec<u64> = cluster
        .names()
        .iter()
        .map(|n| rss(cluster.pid(n)))
        .collect();
    let mut rng = Rng::new(0x5eed_1157);
    let data = rng.bytes(16 << 20);
    // 16 clients write 16 MiB each at once: 256 MiB through a 16 MiB budget.
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
        // The budget (16 MiB), the idle buffer pool and allocator slack: far below what
        // 16 unpaced 16 MiB streams could pile up.
        assert!(
            after < b + (96 << 20),
            "{n}: memory grew from {b} to {after} bytes under a 16 MiB budget"
        );
    }
}

/// Longest wait for a server's reaction on a raw connection (an answer or a close).
fn react() -> Duration {
    common::scaled(Duration::from_secs(30))
}

/// A ping request frame with request id `id`, built from the documented frame layout
/// (32-byte header: magic, version 1, kind 1 = request, flags 1 = END, id, body length).
fn ping_frame(id: u64) -> Vec<u8> {
    let body = pvfs_proto::encode(&pvfs_proto::RequestBody {
        creds: pvfs_proto::Creds::current(),
        request: pvfs_proto::Request::Ping {},
        retry: None,
    });
    let mut f = vec![0u8; 32];
    f[0..4].copy_from_slice(b"PVFS");
    f[4..6].copy_from_slice(&1u16.to_le_bytes());
    f[6] = 1;
    f[7] = 1;
    f[8..16].copy_from_slice(&id.to_le_bytes());
    f[16..20].copy_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend_from_slice(&body);
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

/// Waits for the server's reaction on `s`; a read that times out fails the test (it
/// is neither an answer nor a close).
fn reaction(s: &mut TcpStream) -> Seen {
    s.set_read_timeout(Some(react())).unwrap();
    let mut h = [0u8; 32];
    match s.read(&mut h[..1]) {
        Ok(0) => return Seen::Closed,
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => return Seen::Closed,
        Err(e) => panic!(
            "the server neither answered nor closed within {:?}: {e}",
            react()
        ),
    }
    // The rest of the answer: header, then body, tag and data (none left unread).
    s.read_exact(&mut h[1..]).unwrap();
    assert_eq!(&h[0..4], b"PVFS", "an answer without the magic: {h:02x?}");
    let le32 = |r: std::ops::Range<usize>| u32::from_le_bytes(h[r].try_into().unwrap()) as usize;
    let rest = le32(16..20) + u16::from_le_bytes([h[20], h[21]]) as usize + le32(24..28);
    let mut body = vec![0u8; rest];
    s.read_exact(&mut body).unwrap();
    Seen::Answered
}

/// Opens a raw connection to `addr` and pings on it: whether it was served or closed.
fn ping_raw(addr: &str, id: u64) -> (TcpStream, Seen) {
    let mut s = TcpStream::connect(addr).unwrap();
    // A server that closed the connection at once may make this write fail (reset).
    if s.write_all(&ping_frame(id)).is_err() {
        return (s, Seen::Closed);
    }
    let seen = reaction(&mut s);
    (s, seen)
}

#[test]
fn connections_beyond_the_limit_are_closed_and_the_rest_keep_working() {
    let cluster = Cluster::builder().set("connections", "4").start();
    let addr = cluster.config().servers[0].address.clone();
    // Connections take the slots one by one, each proven served by a ping's answer
    // (other servers' connections may hold slots too); then one is closed at once.
    let mut held = Vec::new();
    let refused = loop {
        let (s, seen) = ping_raw(&addr, held.len() as u64 + 1);
        match seen {
            Seen::Answered => held.push(s),
            Seen::Closed => break s,
        }
        assert!(held.len() <= 4, "more than 4 connections were served");
    };
    assert!(!held.is_empty(), "no connection was served");
    // Every slot is taken now: another connection, without sending anything, is closed
    // by the server (EOF or reset observed, not a silent read timeout).
    let mut extra = TcpStream::connect(&addr).unwrap();
    assert_eq!(
        reaction(&mut extra),
        Seen::Closed,
        "a connection beyond the limit was served"
    );
    drop(refused);
    let log = cluster.dir().join("s0.log");
    common::poll(
        "the refusal to be logged",
        common::scaled(Duration::from_secs(10)),
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("connection limit reached")
                .then_some(())
        },
    );
    // The served connections keep working.
    for (i, s) in held.iter_mut().enumerate() {
        s.write_all(&ping_frame(100 + i as u64)).unwrap();
        assert_eq!(
            reaction(s),
            Seen::Answered,
            "held connection {i} stopped serving"
        );
    }
    // Freeing slots lets clients in again (as soon as the server noticed the closes).
    drop(held);
    common::poll(
        "a slot to be free again",
        common::scaled(Duration::from_secs(30)),
        || {
            let (_, seen) = ping_raw(&addr, 1000);
            (seen == Seen::Answered).then_some(())
        },
    );
    let tc = cluster.client();
    tc.run(Duration::from_secs(30), async |c| {
        c.mkdir("/ok", 0o755).await.unwrap();
    });
}
