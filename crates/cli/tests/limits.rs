//! Resource limits (issue 5 point 4): with a small receive-buffer budget many clients
//! writing at once still succeed (the budget paces them, it does not deadlock), server
//! memory stays bounded, and connections beyond the limit are closed at once while the
//! others keep working.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
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

#[test]
fn connections_beyond_the_limit_are_closed_and_the_rest_keep_working() {
    let cluster = Cluster::builder().set("connections", "4").start();
    let addr = cluster.config().servers[0].address.clone();
    // Four idle connections take the slots; the fifth is closed at once.
    let held: Vec<_> = (0..4)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = std::net::TcpStream::connect(&addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 1];
    let n = extra.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "a connection beyond the limit was served");
    assert!(
        cluster.log_tail("s0").contains("connection limit reached"),
        "the refusal was not logged"
    );
    // Freeing slots lets clients in again.
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    let tc = cluster.client();
    tc.run(Duration::from_secs(30), async |c| {
        c.mkdir("/ok", 0o755).await.unwrap();
    });
}
