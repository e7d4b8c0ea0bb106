//! Safe retries: a mutation whose reply is lost after its commit is
//! retried with the same key and answered from the recorded reply — a retried create
//! does not fail with EEXIST, a retried rename or unlink does not fail with ENOENT, and
//! nothing happens twice.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::Cluster;
use pvfs_client::{Errno, LayoutSpec};

#[test]
fn mutations_whose_reply_is_lost_are_retried_and_answered_once() {
    // Every server drops the connection instead of answering the first request of each
    // of these operations, after doing it (a reply lost after the commit).
    // SAFETY (edition 2021 API): this test binary runs this single test, before any
    // thread that reads the environment is started.
    let faults: Vec<String> = OPS.iter().map(|op| format!("drop-reply:{op}:1")).collect();
    std::env::set_var("PVFS_FAULTS", faults.join(","));
    let cluster = Cluster::start();
    std::env::remove_var("PVFS_FAULTS");
    let tc = cluster.client();
    tc.run(Duration::from_secs(60), async |c| {
        // Create: done once, answered as created, no EEXIST.
        let f = c
            .create("/f", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, b"hello").await.unwrap();
        assert_eq!(
            c.create("/f", 0o644, LayoutSpec::default(), true)
                .await
                .err()
                .map(|e| e.errno),
            Some(Errno::EEXIST),
            "a genuinely repeated create still fails"
        );
        c.mkdir("/d1", 0o755).await.unwrap();
        c.mkdir("/d2", 0o755).await.unwrap();
        // Renames within and across servers: done once, no ENOENT.
        for i in 0..8 {
            let from = if i == 0 {
                "/f".to_string()
            } else {
                format!("/d{}/f{}", i % 2 + 1, i - 1)
            };
            let to = format!("/d{}/f{i}", (i + 1) % 2 + 1);
            c.rename(&from, &to)
                .await
                .unwrap_or_else(|e| panic!("rename {from} {to}: {e}"));
        }
        let f = c.open("/d1/f7").await.unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(f.read_at(0, &mut buf).await.unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        let mut names = Vec::new();
        for d in ["/", "/d1", "/d2"] {
            names.extend(
                c.readdir(d)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|e| format!("{d}:{}", e.name)),
            );
        }
        names.sort();
        assert_eq!(
            names,
            ["/:d1", "/:d2", "/d1:f7"],
            "each rename happened exactly once"
        );
        // Xattr with XATTR_CREATE: answered once, no EEXIST on the retry.
        c.setxattr(f.handle(), "user.k", b"v", 1).await.unwrap();
        // Unlink: done once, no ENOENT.
        c.unlink("/d1/f7").await.unwrap();
        assert_eq!(
            c.stat("/d1/f7").await.err().map(|e| e.errno),
            Some(Errno::ENOENT)
        );
    });
    // Each injected fault fired: for every operation, some server logged dropping
    // the reply to a request of exactly that operation (each server's whole log).
    let logs: Vec<String> = cluster.names().iter().map(|n| cluster.log(n)).collect();
    for (name, log) in cluster.names().iter().zip(&logs) {
        let active = log
            .lines()
            .find(|l| l.contains("fault injection active"))
            .unwrap_or_else(|| panic!("{name} did not take the injected faults:\n{log}"));
        for op in OPS {
            assert!(
                active.contains(&format!("\"{op}\": 1")),
                "{name} did not take the fault for {op}: {active}"
            );
        }
    }
    for op in OPS {
        let dropped = logs
            .iter()
            .flat_map(|log| log.lines())
            .filter(|l| l.contains("dropping the reply") && op_of(l) == Some(op))
            .count();
        assert!(
            dropped > 0,
            "no server dropped a reply to {op}: that retry was not exercised"
        );
    }
}

/// The operations whose first reply each server drops.
const OPS: [&str; 5] = ["Create", "Rename", "LinkEntry", "Unlink", "SetXattr"];

/// The value of the `op` field of a log line (`op=Create` or `op="Create"`).
fn op_of(line: &str) -> Option<&str> {
    let rest = &line[line.find(" op=")? + 4..];
    let rest = rest.trim_start_matches('"');
    let end = rest
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(rest.len());
    Some(&rest[..end])
}
