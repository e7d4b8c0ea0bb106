//! The precreate pools of an in-process server with both roles, which fills them from
//! its own handle range: filled at start, refilled on demand and in the background,
//! never handing out a handle twice.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use pvfs_proto::{ErrorKind, Handle};
use pvfs_server::local::LocalServer;
use pvfs_server::precreate::{BATCH, LOW_WATER};

/// Takes `n` handles out of `server`'s pool, as creates do.
async fn take(s: &LocalServer, server: u32, n: u64) -> Vec<Handle> {
    s.ctx
        .meta
        .write(move |t| t.pool_take(server, n))
        .await
        .unwrap()
}

#[tokio::test]
async fn pools_fill_with_distinct_handles_of_the_data_servers_range() {
    let dir = tempfile::tempdir().unwrap();
    let config = LocalServer::configure(dir.path(), 1).unwrap();
    let range = config.servers[0].handles;
    let s = LocalServer::open(config, "s0").await.unwrap();
    let pools = &s.ctx.precreate;
    assert_eq!(
        pools.pool_len(0).unwrap(),
        0,
        "nothing fills it before serving"
    );
    // At start: up to the low-water mark, in one batch.
    pools.clone().fill_at_start().await;
    assert_eq!(pools.pool_len(0).unwrap(), u64::from(BATCH));
    // A create that needs more than a batch refills what it needs.
    pools.ensure(0, 3000).await.unwrap();
    assert_eq!(pools.pool_len(0).unwrap(), u64::from(BATCH) + 3000);
    let handles = take(&s, 0, u64::from(BATCH) + 3000).await;
    let distinct: BTreeSet<Handle> = handles.iter().copied().collect();
    assert_eq!(distinct.len(), handles.len(), "a handle reserved twice");
    assert!(handles.iter().all(|&h| range.contains(h)));
    // Drained below the low-water mark: a background refill tops it up.
    pools.top_up_later(0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while pools.pool_len(0).unwrap() < LOW_WATER {
        assert!(tokio::time::Instant::now() < deadline, "no refill in 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let more = take(&s, 0, u64::from(BATCH)).await;
    assert_eq!(more.len(), BATCH as usize);
    assert!(
        more.iter().all(|h| !distinct.contains(h)),
        "a handle handed out twice"
    );
    // The handles were reserved durably: the store allocates past them.
    let next = s.ctx.meta.write(|t| t.alloc_handles(1)).await.unwrap();
    assert!(handles.iter().chain(&more).all(|&h| h < next));
    // No pool for a server that does not exist.
    let e = pools.ensure(7, 1).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NoServer);
    s.close().await;
}
