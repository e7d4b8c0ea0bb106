//! A full disk on one data server: writes that need it fail with ENOSPC, reads and
//! metadata keep working, nothing is corrupted, and writing resumes when space returns.
//! The server's storage is a small tmpfs, mounted in a private mount namespace of the
//! test's thread (the host's mount table never sees it; it vanishes with the test,
//! even a killed one). That needs root, as CI has: elsewhere the test is skipped with
//! the reason (`common::skip`), and under `CI=true` a missing privilege fails it.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{Cluster, Rng};
use pvfs_client::{Errno, LayoutSpec};

#[test]
fn a_full_data_server_gives_enospc_and_recovers() {
    const TEST: &str = "a_full_data_server_gives_enospc_and_recovers";
    // s3 holds data only, so the metadata of the file system lives elsewhere.
    let cluster = Cluster::builder()
        .meta_servers(3)
        .request_timeout(&format!(
            "{}ms",
            common::scaled(Duration::from_secs(5)).as_millis()
        ))
        .configure();
    // Dropped before the cluster: the tmpfs is detached, so removing the cluster's
    // directory (s3 included) does not stop at a busy mount point.
    let Some(_tmpfs) = common::small_storage(&cluster, "s3", "40m", TEST) else {
        return;
    };
    cluster.start_all();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_d15c);
    let block = rng.bytes(8 << 20);
    tc.run(Duration::from_secs(120), async |c| {
        let f = c
            .create("/big", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        // Fill s3 (a quarter of every write lands there) until it refuses.
        let mut written = 0u64;
        let err = loop {
            match f.write_at(written, &block).await {
                Ok(_) => written += block.len() as u64,
                Err(e) => break e,
            }
            assert!(written < 1 << 30, "s3 never filled up");
        };
        assert_eq!(err.errno, Errno::ENOSPC, "{err}");
        // Small writes too (made by a data server on the thread that received them,
        // into a datafile it holds open): of four 4 KiB writes far past the end, one
        // per stripe unit and so one per data server, exactly s3's fails.
        let mut refused = Vec::new();
        for k in 0..4u64 {
            if let Err(e) = f.write_at((1 << 30) + k * 65536, &block[..4096]).await {
                refused.push(e.errno);
            }
        }
        assert_eq!(refused, [Errno::ENOSPC], "one small write per server");
        // What was acknowledged reads back intact.
        for at in (0..written).step_by(block.len()) {
            let mut got = vec![0u8; block.len()];
            assert_eq!(f.read_at(at, &mut got).await.unwrap(), block.len());
            assert!(got == block, "block at {at} damaged by the full disk");
        }
        // Metadata keeps working, and so does data that does not need s3.
        c.mkdir("/still", 0o755).await.unwrap();
        let other = LayoutSpec {
            stripe_size: None,
            stripe_count: Some(1),
            base: Some(0),
            replicas: None,
        };
        let small = c.create("/still/small", 0o644, other, true).await.unwrap();
        small.write_at(0, b"fine").await.unwrap();
        let fs = c.statfs().await;
        let s3_stat = fs.servers.iter().find(|s| s.name == "s3").unwrap();
        assert!(
            s3_stat.stat.as_ref().unwrap().avail_bytes < 8 << 20,
            "s3 not full?"
        );
        // Space returns: the big file goes, writing works again.
        c.unlink("/big").await.unwrap();
        let g = c
            .create("/again", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        g.write_at(0, &block).await.unwrap();
        let mut got = vec![0u8; block.len()];
        g.read_at(0, &mut got).await.unwrap();
        assert!(got == block);
        let report = c.fsck(false, Duration::ZERO).await.unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    });
    drop(tc);
    cluster.stop_clean("s3");
}
