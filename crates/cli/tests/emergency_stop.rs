//! `pvfs stop --now` (the emergency stop): servers exit at once, clients get an
//! error immediately instead of hanging, and a restart serves everything that was
//! acknowledged as durable.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Cluster, Rng};
use pvfs_client::LayoutSpec;

#[test]
fn emergency_stop_fails_clients_at_once_and_loses_nothing_acknowledged() {
    let cluster = Cluster::start();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_00e5);
    let durable = rng.bytes(24 << 20);
    tc.run(Duration::from_secs(60), async |c| {
        c.mkdir("/keep", 0o755).await.unwrap();
        let f = c
            .create("/keep/durable", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, &durable).await.unwrap();
        f.fsync().await.unwrap();
    });

    // A client keeps writing while the emergency stop happens.
    let config = cluster.config().clone();
    let started = Arc::new(AtomicBool::new(false));
    let flag = started.clone();
    let writer = std::thread::spawn(move || {
        let rt = common::runtime();
        rt.block_on(async move {
            let c = pvfs_client::Client::new(config);
            let f = c
                .create("/busy", 0o644, LayoutSpec::default(), true)
                .await
                .unwrap();
            let block = vec![7u8; 8 << 20];
            let mut off = 0u64;
            loop {
                if let Err(e) = f.write_at(off, &block).await {
                    return (Instant::now(), e);
                }
                flag.store(true, Ordering::Release);
                off = (off + block.len() as u64) % (512 << 20);
            }
        })
    });
    common::poll(
        "the writer to get going",
        common::scaled(Duration::from_secs(30)),
        || started.load(Ordering::Acquire).then_some(()),
    );

    let t0 = Instant::now();
    let out = cluster.run_cli(&["stop", "--now"]);
    out.ok();
    let stop_took = t0.elapsed();
    assert!(
        stop_took < common::scaled(Duration::from_secs(3)),
        "stop --now took {stop_took:?}"
    );
    let (failed_at, err) = writer.join().unwrap();
    let waited = failed_at.saturating_duration_since(t0);
    assert!(
        waited < common::scaled(Duration::from_secs(2)),
        "the writer noticed the emergency stop only after {waited:?}"
    );
    assert!(
        common::is_server_down_errno(err.errno),
        "writer error: {err:?}"
    );
    for (name, st) in cluster.reap_all() {
        assert!(
            st.success(),
            "{name} exited with {st} after an emergency stop"
        );
        assert!(
            !cluster.storage(&name).join("server.pid").exists(),
            "{name}: pid file left behind"
        );
    }

    // Everything acknowledged is there after a restart.
    cluster.start_all();
    let fresh = cluster.client();
    let got = fresh.run(Duration::from_secs(60), async |c| {
        let f = c.open("/keep/durable").await.unwrap();
        let mut buf = vec![0u8; durable.len() + 10];
        let n = f.read_at(0, &mut buf).await.unwrap();
        buf.truncate(n);
        buf
    });
    common::assert_bytes_eq(&got, &durable, "durable file after an emergency stop");
}
