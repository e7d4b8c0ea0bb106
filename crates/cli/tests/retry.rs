//! Safe retries (issue 5 point 1): a mutation whose reply is lost after its commit is
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
    std::env::set_var(
        "PVFS_FAULTS",
        "drop-reply:Create:1,drop-reply:Rename:1,drop-reply:LinkEntry:1,drop-reply:Unlink:1,drop-reply:SetXattr:1",
    );
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
    // The servers did drop replies (the retries were exercised, not skipped).
    let dropped = cluster
        .names()
        .iter()
        .filter(|n| cluster.log_tail(n).contains("dropping the reply"))
        .count();
    assert!(
        dropped > 0,
        "no server dropped a reply: the faults were not injected"
    );
}
