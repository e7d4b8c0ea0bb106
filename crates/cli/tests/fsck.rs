//! `fsck` (issue 5 point 3): damage a file system on purpose in each way a crash or a
//! lost disk can, and check that fsck finds it, repairs it with `repair`, and that a
//! second check is clean.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{Cluster, Rng};
use pvfs_client::{Client, LayoutSpec, ProblemKind};
use pvfs_proto::{decode, encode, Creds, Request, RequestBody, Response};

async fn check(c: &Client, repair: bool) -> pvfs_client::FsckReport {
    c.fsck(repair, Duration::ZERO).await.expect("fsck")
}

fn kinds(r: &pvfs_client::FsckReport) -> Vec<ProblemKind> {
    r.problems.iter().map(|p| p.kind.clone()).collect()
}

/// Sends one raw request (for damage the client library has no call for).
async fn raw(config: &pvfs_config::Config, server: usize, request: Request) -> Response {
    use pvfs_transport::{AutoTransport, BufPool, MuxConn, Transport};
    let conn = AutoTransport
        .connect(&config.servers[server].address, Duration::from_secs(5))
        .await
        .unwrap();
    let mux = MuxConn::start(conn, BufPool::new(1 << 20, 1), Duration::from_secs(5));
    let body = encode(&RequestBody {
        creds: Creds::default(),
        request,
        retry: None,
    });
    let mut call = mux.call(&body, &[], true).await.unwrap();
    decode(&call.recv().await.unwrap().body).unwrap()
}

#[test]
fn fsck_finds_and_repairs_each_kind_of_damage() {
    let cluster = Cluster::start();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_f5c4);
    let big = rng.bytes(3 << 20);
    let config = cluster.config().clone();
    let (victim_df, victim_server) = tc.run(Duration::from_secs(120), async |c| {
        c.mkdir_all("/a/b", 0o755).await.unwrap();
        for name in ["/a/f1", "/a/b/f2", "/a/orphan", "/a/dangling", "/big"] {
            let f = c
                .create(name, 0o644, LayoutSpec::default(), true)
                .await
                .unwrap();
            f.write_at(0, &big).await.unwrap();
        }
        c.symlink("f1", "/a/link").await.unwrap();
        c.mkdir("/a/sealed", 0o755).await.unwrap();
        let clean = check(&c, false).await;
        assert!(
            clean.problems.is_empty(),
            "fresh file system: {:?}",
            clean.problems
        );
        assert!(clean.objects >= 9 && clean.datafiles >= 20, "{clean:?}");
        let df = c.open("/big").await.unwrap().layout().datafiles[1];
        (df.handle, df.server as usize)
    });

    // 1. A lost datafile of a written file.
    std::fs::remove_file(cluster.datafile_path(victim_server, victim_df)).unwrap();
    // 2. A name dropped while its object stays (an interrupted unlink).
    // 3. An object removed while its name stays (a dangling entry).
    // 4. A stray datafile nobody names.
    let stray = config.servers[2].handles.first + 0xfff_0000;
    std::fs::create_dir_all(cluster.datafile_path(2, stray).parent().unwrap()).unwrap();
    std::fs::write(cluster.datafile_path(2, stray), b"stray bytes").unwrap();
    // 5. A sealed shard of a directory that still exists (an interrupted rmdir).
    tc.run(Duration::from_secs(60), async |c| {
        let a = c.stat("/a").await.unwrap().handle;
        c.unlink_at(a, "orphan", true).await.unwrap();
        let dangling = c.stat("/a/dangling").await.unwrap().handle;
        c.remove_object(dangling).await.unwrap();
        let sealed = c.stat("/a/sealed").await.unwrap().handle;
        let owner = config.owner_of(sealed).unwrap();
        match raw(
            &config,
            owner,
            Request::SealDir {
                dir: sealed,
                seal: true,
            },
        )
        .await
        {
            Response::Done {} => {}
            other => panic!("seal: {other:?}"),
        }
    });

    let found = tc.run(Duration::from_secs(120), async |c| check(&c, false).await);
    let mut k = kinds(&found);
    k.sort_by_key(|k| format!("{k:?}"));
    for want in [
        ProblemKind::MissingDatafile,
        ProblemKind::OrphanObject,
        ProblemKind::DanglingEntry,
        ProblemKind::OrphanDatafile,
        ProblemKind::StaleSeal,
    ] {
        assert!(
            k.contains(&want),
            "fsck missed {want:?}; found {:?}",
            found.problems
        );
    }
    assert!(
        found.problems.iter().all(|p| !p.repaired),
        "a check without repair changed something"
    );
    // Read-only: the same problems are still there.
    let again = tc.run(Duration::from_secs(120), async |c| check(&c, false).await);
    assert_eq!(again.problems.len(), found.problems.len());

    let repaired = tc.run(Duration::from_secs(120), async |c| check(&c, true).await);
    assert_eq!(repaired.unrepaired(), 0, "{:?}", repaired.problems);
    let clean = tc.run(Duration::from_secs(120), async |c| check(&c, false).await);
    assert!(
        clean.problems.is_empty(),
        "after repair: {:?}",
        clean.problems
    );

    // The repaired file system works: the stray file is gone, the lost stripe reads as
    // zeros, the unsealed directory takes new entries, the rest is intact.
    assert!(!cluster.datafile_path(2, stray).exists());
    tc.run(Duration::from_secs(60), async |c| {
        let f = c.open("/big").await.unwrap();
        let mut got = vec![0u8; big.len()];
        assert_eq!(f.read_at(0, &mut got).await.unwrap(), big.len());
        let stripe = f.layout().stripe();
        for (x, (g, w)) in got.iter().zip(&big).enumerate() {
            let (idx, _) = stripe.locate(x as u64);
            let want = if idx == 1 { 0 } else { *w };
            assert_eq!(*g, want, "byte {x} of /big after repair");
        }
        c.create("/a/sealed/new", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        assert!(c.stat("/a/dangling").await.is_err());
        assert!(c.stat("/a/orphan").await.is_err());
        let f1 = c.open("/a/f1").await.unwrap();
        let mut got = vec![0u8; big.len()];
        f1.read_at(0, &mut got).await.unwrap();
        assert_eq!(got, big);
    });
}

#[test]
fn fsck_refuses_to_judge_with_a_server_down() {
    let cluster = Cluster::builder().request_timeout("2s").start();
    cluster.kill("s1", libc::SIGKILL);
    let tc = cluster.client();
    let err = tc.run(Duration::from_secs(30), async |c| {
        c.fsck(false, Duration::ZERO).await.unwrap_err()
    });
    assert!(common::is_server_down_errno(err.errno), "{err:?}");
}
