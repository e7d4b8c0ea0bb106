//! No client can starve the others: one server under two floods at once — 5,000
//! connections that never say anything, from one address, and 400 connections from
//! another that prove themselves with the key and then trickle a 4 MiB request body a
//! byte at a time — while a real client on a third address keeps creating, writing,
//! reading and removing files. Every one of the real client's operations succeeds, the
//! server's memory stays under a stated bound, and once the floods stop the server
//! serves the flooding addresses again and gives its descriptors and its memory back.
//!
//! What holds them off (`crates/server/src/limits.rs`): connections are capped per
//! client address and, while in their handshake, in total; a connection that does not
//! prove itself within the request timeout is closed; every frame's body and data
//! wait for a share of the receive-buffer budget (one address may hold at most half)
//! before anything is read; a frame that does not arrive within the request timeout
//! is closed.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{key_proof, raw_session_from, Cluster, Rng};
use pvfs_client::LayoutSpec;

fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap()
        * 1024
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Raises this process's open-file limit as far as allowed; returns it.
fn raise_nofile() -> u64 {
    // SAFETY: a zeroed rlimit is a valid out-parameter.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: lim is valid for writes.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: raising the soft limit to the hard one is always allowed.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    lim.rlim_cur
}

const IDLE_FLOOD: usize = 5000;
const TRICKLERS: usize = 400;
/// The most the flooded server's resident memory may grow: its receive-buffer budget
/// (32 MiB), the read buffers of the 400 proven connections (64 KiB each, 25 MiB), the
/// state of the connections it holds, and the allocator's slack.
const RSS_BOUND: u64 = 160 << 20;
/// The most the server's resident memory may stay above its start once the floods
/// stopped and it trimmed: its pooled buffers and the allocator's slack.
const RSS_AFTER: u64 = 48 << 20;

#[test]
fn idle_and_trickling_floods_do_not_starve_a_real_client() {
    let nofile = raise_nofile();
    if nofile < (IDLE_FLOOD + TRICKLERS + 512) as u64 {
        common::skip(
            "idle_and_trickling_floods_do_not_starve_a_real_client",
            &format!("the open-file limit ({nofile}) is below what the floods need"),
        );
        return;
    }
    let cluster = Cluster::builder()
        .set("buffers", "\"32M\"")
        .request_timeout(&format!(
            "{}ms",
            common::scaled(Duration::from_secs(2)).as_millis()
        ))
        .start();
    let config = cluster.config().clone();
    let target = config.servers[0].address.clone();
    let pid = cluster.pid("s0");
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_f100d);
    let data = rng.bytes(256 << 10);
    let work = |tc: &common::TestClient, i: usize| {
        tc.run(Duration::from_secs(30), async |c| {
            let path = format!("/real-{i}");
            let f = c
                .create(&path, 0o644, LayoutSpec::default(), true)
                .await
                .unwrap_or_else(|e| panic!("create {path} under the flood: {e}"));
            f.write_at(0, &data)
                .await
                .unwrap_or_else(|e| panic!("write {path} under the flood: {e}"));
            let mut back = vec![0u8; data.len()];
            let n = f
                .read_at(0, &mut back)
                .await
                .unwrap_or_else(|e| panic!("read {path} under the flood: {e}"));
            assert_eq!(n, data.len());
            assert!(back == data, "{path}: data differs");
            c.unlink(&path)
                .await
                .unwrap_or_else(|e| panic!("unlink {path} under the flood: {e}"));
        });
    };
    // Warm up (the client's connections, the server's pools), then measure.
    work(&tc, 0);
    let base_rss = rss(pid);
    let base_fds = open_fds(pid);

    let idle_from: IpAddr = "127.0.0.2".parse().unwrap();
    let trickle_from: IpAddr = "127.0.0.3".parse().unwrap();
    let rt = common::runtime();

    // Flood 1: connections that never say a word.
    let idle: Vec<tokio::net::TcpStream> = rt.block_on(async {
        let mut held = Vec::with_capacity(IDLE_FLOOD);
        for chunk in 0..IDLE_FLOOD / 500 {
            let batch = futures::future::join_all(
                (0..500).map(|_| common::connect_from(&target, Some(idle_from))),
            )
            .await;
            for c in batch {
                held.push(c.unwrap_or_else(|e| panic!("idle connection (batch {chunk}): {e}")));
            }
        }
        held
    });

    // Flood 2: proven connections that start a 4 MiB request body and trickle it.
    let header = pvfs_proto::FrameHeader {
        kind: pvfs_proto::FrameKind::Request,
        flags: pvfs_proto::frame::FLAG_END,
        request_id: 1,
        body_len: pvfs_proto::frame::MAX_BODY,
        tag_len: pvfs_auth::TAG_LEN as u16,
        data_len: 0,
    }
    .encode();
    let mut tricklers = Vec::new();
    let mut refused = 0;
    for _ in 0..TRICKLERS {
        match raw_session_from(&config, 0, &key_proof(&config), Some(trickle_from)) {
            Ok((mut s, _macs)) => {
                s.set_nonblocking(true).unwrap();
                let _ = s.write_all(&header);
                tricklers.push(s);
            }
            Err(_) => refused += 1,
        }
    }
    assert!(
        tricklers.len() >= TRICKLERS / 2,
        "only {} of {TRICKLERS} proven connections were served ({refused} refused)",
        tricklers.len()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let trickle = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for s in tricklers.iter_mut() {
                    let _ = s.write(&[0u8]);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            tricklers
        })
    };

    // The real client works on, and the server's memory is watched.
    let started = Instant::now();
    let mut peak = rss(pid);
    let mut peak_fds = open_fds(pid);
    let mut i = 1;
    while started.elapsed() < common::scaled(Duration::from_secs(15)) {
        work(&tc, i);
        peak = peak.max(rss(pid));
        peak_fds = peak_fds.max(open_fds(pid));
        i += 1;
    }
    // The floods reached the server (it held their connections for a while).
    assert!(
        peak_fds >= base_fds + TRICKLERS / 2,
        "the server never held the floods' connections ({base_fds} descriptors, at most {peak_fds})"
    );
    assert!(i > 5, "only {} operations rounds in the flood", i - 1);
    eprintln!(
        "{} rounds of create/write/read/unlink under the floods; server RSS {} MiB at start, \
         {} MiB at peak; {} descriptors at start, {} at peak; {} idle and {} trickling \
         connections",
        i - 1,
        base_rss >> 20,
        peak >> 20,
        base_fds,
        peak_fds,
        idle.len(),
        TRICKLERS - refused
    );
    assert!(
        peak < base_rss + RSS_BOUND,
        "the flooded server grew from {} to {} MiB (bound: {} MiB more)",
        base_rss >> 20,
        peak >> 20,
        RSS_BOUND >> 20
    );

    // The floods stop: the flooding addresses are served again, the descriptors go.
    stop.store(true, Ordering::Relaxed);
    drop(trickle.join().unwrap());
    drop(idle);
    common::poll(
        "the server to give back the floods' descriptors",
        common::scaled(Duration::from_secs(30)),
        || (open_fds(pid) <= base_fds + 16).then_some(()),
    );
    for from in [idle_from, trickle_from] {
        let (mut s, mut macs) = common::poll(
            "a flooding address to be served again",
            common::scaled(Duration::from_secs(30)),
            || raw_session_from(&config, 0, &key_proof(&config), Some(from)).ok(),
        );
        common::ping_raw(&mut s, &mut macs);
    }
    work(&tc, i);
    // And the memory they took goes back to the system.
    memory_given_back(pid, base_rss, peak, "the floods");
    cluster.assert_all_running();
}

/// A burst of requests with large bodies, from many connections at once, fills the
/// server's receive buffers; once it is over, the server gives the memory back to the
/// system, rather than holding its peak for good.
#[test]
fn memory_a_burst_of_large_requests_took_goes_back() {
    let cluster = Cluster::builder().start();
    let config = cluster.config().clone();
    let pid = cluster.pid("s0");
    let base_rss = rss(pid);
    let header = pvfs_proto::FrameHeader {
        kind: pvfs_proto::FrameKind::Request,
        flags: pvfs_proto::frame::FLAG_END,
        request_id: 1,
        body_len: pvfs_proto::frame::MAX_BODY,
        tag_len: pvfs_auth::TAG_LEN as u16,
        data_len: 0,
    }
    .encode();
    // Every body but its last byte: the server holds each whole body meanwhile.
    let body = vec![0u8; pvfs_proto::frame::MAX_BODY as usize - 1];
    let mut held = Vec::new();
    for a in 2..6u8 {
        let from: IpAddr = format!("127.0.0.{a}").parse().unwrap();
        for _ in 0..24 {
            let (mut s, _macs) =
                raw_session_from(&config, 0, &key_proof(&config), Some(from)).unwrap();
            s.write_all(&header).unwrap();
            held.push(s);
        }
    }
    let senders: Vec<_> = held
        .into_iter()
        .map(|mut s| {
            let body = body.clone();
            std::thread::spawn(move || {
                let _ = s.write_all(&body);
                s
            })
        })
        .collect();
    let started = Instant::now();
    let mut peak = base_rss;
    while started.elapsed() < common::scaled(Duration::from_secs(3)) {
        peak = peak.max(rss(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    let held: Vec<_> = senders.into_iter().map(|t| t.join().unwrap()).collect();
    peak = peak.max(rss(pid));
    drop(held);
    assert!(
        peak > base_rss + 2 * RSS_AFTER,
        "the burst did not take memory: {} MiB at start, {} MiB at peak",
        base_rss >> 20,
        peak >> 20
    );
    memory_given_back(pid, base_rss, peak, "the burst");
    cluster.assert_all_running();
}

/// Waits until server `pid`'s resident memory is back under `base` + [`RSS_AFTER`]
/// after `what` stopped (idle pooled buffers go within 30 s), and says how soon.
fn memory_given_back(pid: u32, base: u64, peak: u64, what: &str) {
    let stopped = Instant::now();
    let after = common::poll(
        &format!("the server to give back the memory {what} took"),
        common::scaled(Duration::from_secs(90)),
        || {
            let now = rss(pid);
            (now < base + RSS_AFTER).then_some(now)
        },
    );
    eprintln!(
        "server RSS {} MiB at start, {} MiB at peak, {} MiB {:?} after {what} stopped",
        base >> 20,
        peak >> 20,
        after >> 20,
        stopped.elapsed()
    );
}
