//! Failures: with one server killed (SIGKILL) or hung
//! (SIGSTOP: it accepts connections but never answers), calls that need it fail with a
//! clear error within the configured timeout (scaled, like every bound here, by
//! `PVFS_TEST_SLOWDOWN`) and never hang; calls that do not need it
//! keep working; `ping`, `df` and `ls` answer promptly with what the live servers know;
//! and once the server is back, everything works again with the same client.
//!
//! The cluster: 4 servers, the first 3 meta+data, s3 data only, request timeout 2 s
//! (times the slowdown factor).
//! A file striped over all 4 servers needs s3; a file striped over the first 3 does
//! not, and neither does any metadata operation.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{assert_bytes_eq, is_server_down_errno, poll, scaled, Cluster, Rng, TestClient};
use pvfs_client::{Errno, LayoutSpec};

/// The configured request timeout: 2 s, times the slowdown factor (a loaded machine
/// must not time out calls to live servers).
fn timeout() -> Duration {
    scaled(Duration::from_secs(2))
}
/// Bound on a failure caused by a dead server (connection refused or reset).
fn dead_bound() -> Duration {
    scaled(Duration::from_secs(4))
}
/// Bound on a failure caused by a hung server: the timeout plus a margin.
fn hung_bound() -> Duration {
    timeout() + scaled(Duration::from_millis(2500))
}
/// Bound on an operation that does not involve the failed server.
fn live_bound() -> Duration {
    scaled(Duration::from_secs(2))
}
/// Longest any call may take before the test calls it a hang (`TestClient::run`
/// scales it; [`hang`] is the scaled value for waits of this file's own).
const HANG: Duration = Duration::from_secs(30);
fn hang() -> Duration {
    scaled(HANG)
}

fn cluster() -> Cluster {
    Cluster::builder()
        .meta_servers(3)
        .request_timeout(&format!("{}ms", timeout().as_millis()))
        .connect_timeout(&format!("{}ms", timeout().as_millis()))
        .start()
}

/// The two files: /wide over all 4 servers, /narrow over s0..s2.
struct Files {
    wide: Vec<u8>,
    narrow: Vec<u8>,
}

fn setup(cluster: &Cluster, tc: &TestClient, rng: &mut Rng) -> Files {
    assert_eq!(
        cluster.config().meta_servers(),
        vec![0, 1, 2],
        "s3 should be data-only"
    );
    let files = Files {
        wide: rng.bytes(3 << 20),
        narrow: rng.bytes((1 << 20) + 17),
    };
    tc.run(HANG, async |c| {
        let spec = |count, base| LayoutSpec {
            stripe_size: Some(65536),
            stripe_count: Some(count),
            base,
            replicas: None,
        };
        let w = c.create("/wide", 0o644, spec(4, None), true).await.unwrap();
        w.write_at(0, &files.wide).await.unwrap();
        let servers: Vec<u32> = w.layout().datafiles.iter().map(|d| d.server).collect();
        assert!(servers.contains(&3), "/wide should use s3: {servers:?}");
        let n = c
            .create("/narrow", 0o644, spec(3, Some(0)), true)
            .await
            .unwrap();
        n.write_at(0, &files.narrow).await.unwrap();
        let servers: Vec<u32> = n.layout().datafiles.iter().map(|d| d.server).collect();
        assert!(
            !servers.contains(&3),
            "/narrow should not use s3: {servers:?}"
        );
        c.mkdir("/dir", 0o755).await.unwrap();
    });
    files
}

/// Runs `f` and returns its result and how long it took (failing on a hang).
fn timed<T>(tc: &TestClient, f: impl AsyncFnOnce(pvfs_client::Client) -> T) -> (T, Duration) {
    let start = Instant::now();
    let v = tc.run(HANG, f);
    (v, start.elapsed())
}

/// Asserts a failure with a server-down errno (or exactly `want`) within `bound`.
#[track_caller]
fn assert_fails<T: std::fmt::Debug>(
    r: (pvfs_client::Result<T>, Duration),
    want: Option<Errno>,
    bound: Duration,
    what: &str,
) {
    let (r, took) = r;
    match r {
        Ok(v) => panic!("{what}: should fail, returned {v:?}"),
        Err(e) => {
            match want {
                Some(w) => assert_eq!(e.errno, w, "{what}: errno ({})", e.message),
                None => assert!(
                    is_server_down_errno(e.errno),
                    "{what}: {} is not EHOSTDOWN, EIO or ETIMEDOUT ({})",
                    e.errno.name(),
                    e.message
                ),
            }
            assert!(!e.message.is_empty(), "{what}: empty message");
        }
    }
    assert!(took < bound, "{what}: took {took:?}, bound {bound:?}");
}

/// Asserts success within `bound`.
#[track_caller]
fn assert_quick<T>(r: (pvfs_client::Result<T>, Duration), bound: Duration, what: &str) -> T {
    let (r, took) = r;
    assert!(took < bound, "{what}: took {took:?}, bound {bound:?}");
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Everything that does not involve s3 works, promptly.
fn check_without_s3(tc: &TestClient, files: &Files, tag: &str) {
    let narrow = &files.narrow;
    let size = assert_quick(
        timed(tc, async |c| c.stat("/narrow").await.map(|a| a.size)),
        live_bound(),
        "stat /narrow",
    );
    assert_eq!(size, narrow.len() as u64);
    let back = assert_quick(
        timed(tc, async |c| {
            let f = c.open("/narrow").await?;
            let mut buf = vec![0u8; narrow.len()];
            let n = f.read_at(0, &mut buf).await?;
            buf.truncate(n);
            Ok(buf)
        }),
        live_bound(),
        "read /narrow",
    );
    assert_bytes_eq(&back, narrow, "/narrow with s3 down");
    assert_quick(
        timed(tc, async |c| {
            let f = c.open("/narrow").await?;
            f.write_at(narrow.len() as u64 - 10, &narrow[narrow.len() - 10..])
                .await
        }),
        live_bound(),
        "write /narrow",
    );
    assert_quick(
        timed(tc, async |c| c.readdir("/").await),
        live_bound(),
        "readdir /",
    );
    assert_quick(
        timed(tc, async |c| c.mkdir(&format!("/dir/{tag}"), 0o755).await),
        live_bound(),
        "mkdir",
    );
    assert_quick(
        timed(tc, async |c| {
            let spec = LayoutSpec {
                stripe_size: Some(65536),
                stripe_count: Some(3),
                base: Some(0),
                replicas: None,
            };
            let f = c
                .create(&format!("/dir/{tag}/f"), 0o644, spec, true)
                .await?;
            f.write_at(0, b"written while a server is down").await
        }),
        live_bound(),
        "create and write a file on live servers",
    );
    let (l, took) = timed(tc, async |c| {
        c.rename(&format!("/dir/{tag}"), &format!("/dir/{tag}-moved"))
            .await
    });
    assert!(took < live_bound());
    l.unwrap();
}

/// `pvfs ping`, `pvfs df` and `pvfs ls -l` answer within `bound`; ping and df name the
/// failed server, list the others as fine, and exit non-zero.
fn check_ping_and_df(cluster: &Cluster, bound: Duration) {
    // The four commands at once: each may wait out the timeout on a hung server.
    let cmds: [&[&str]; 5] = [
        &["ping", "--json"],
        &["ping"],
        &["df", "--json"],
        &["df"],
        &["ls", "-l", "/"],
    ];
    let outs: Vec<common::CliOutput> = std::thread::scope(|sc| {
        let hs: Vec<_> = cmds
            .iter()
            .map(|a| sc.spawn(|| cluster.run_cli(a)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for out in &outs {
        assert!(
            out.elapsed < bound,
            "`pvfs {}` took {:?} (bound {bound:?})",
            out.args.join(" "),
            out.elapsed
        );
    }
    let out = &outs[0];
    out.err_containing("1 of 4");
    let v = out.json_any();
    let servers = v.as_array().unwrap();
    assert_eq!(servers.len(), 4);
    for s in servers {
        let down = s["name"] == "s3";
        assert_eq!(s["ok"], !down, "ping entry {s}");
        if down {
            assert!(
                s["error"].as_str().is_some_and(|e| !e.is_empty()),
                "ping entry {s}"
            );
        }
    }
    let out = &outs[1];
    out.err_line();
    assert_eq!(
        out.stdout.lines().filter(|l| l.ends_with(" ok")).count(),
        3,
        "ping output:\n{}",
        out.stdout
    );

    let out = &outs[2];
    let v = out.json_any();
    let servers = v["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 4);
    let mut total = 0u64;
    for s in servers {
        let down = s["name"] == "s3";
        assert_eq!(s["ok"], !down, "df entry {s}");
        // A disk several servers store on counts once.
        if !down && s["same_space_as"].is_null() {
            total += s["total_bytes"].as_u64().unwrap();
        }
    }
    assert_eq!(
        v["total_bytes"].as_u64().unwrap(),
        total,
        "df total over the live servers"
    );
    let out = &outs[3];
    for name in ["s0", "s1", "s2", "s3", "total"] {
        assert!(
            out.stdout.contains(name),
            "df output lacks {name}:\n{}",
            out.stdout
        );
    }
    // `ls -l` lists what the live servers know.
    let out = &outs[4];
    assert!(
        out.stdout.contains("narrow"),
        "`pvfs ls -l /` output: {}\n{}",
        out.stdout,
        out.stderr
    );
    let out = cluster.run_cli(&["ls", "/"]);
    assert!(out.ok().contains("wide"), "`pvfs ls /` lists every name");
}

/// Polls until /wide is fully usable again through `tc`, then checks its bytes.
fn check_wide_back(tc: &TestClient, files: &Files, what: &str) {
    poll(
        &format!("/wide to be readable {what}"),
        scaled(Duration::from_secs(15)),
        || tc.run(HANG, async |c| c.stat("/wide").await).ok(),
    );
    let back = tc.run(HANG, async |c| {
        let f = c.open("/wide").await.unwrap();
        let mut buf = vec![0u8; files.wide.len()];
        let n = f.read_at(0, &mut buf).await.unwrap();
        buf.truncate(n);
        f.write_at(5, &files.wide[5..100_005]).await.unwrap();
        buf
    });
    assert_bytes_eq(&back, &files.wide, &format!("/wide {what}"));
}

#[test]
fn a_killed_server_gives_prompt_errors_and_the_rest_keeps_working() {
    let cluster = cluster();
    let mut rng = Rng::new(0x5eed_0008);
    let tc = cluster.client();
    let files = setup(&cluster, &tc, &mut rng);
    cluster.kill("s3", libc::SIGKILL);

    // Calls that need s3: a clear error, quickly.
    assert_fails(
        timed(&tc, async |c| c.stat("/wide").await),
        None,
        dead_bound(),
        "stat /wide",
    );
    assert_fails(
        timed(&tc, async |c| {
            let f = c.open("/wide").await?;
            let mut buf = vec![0u8; 1 << 20];
            f.read_at(0, &mut buf).await
        }),
        None,
        dead_bound(),
        "read /wide",
    );
    assert_fails(
        timed(&tc, async |c| {
            let f = c.open("/wide").await?;
            // The bytes already there: whatever part lands, the content stays known.
            f.write_at(0, &files.wide[..300_000]).await
        }),
        None,
        dead_bound(),
        "write /wide",
    );
    assert_fails(
        timed(&tc, async |c| c.layout("/wide").await.map(|_| ())),
        None,
        dead_bound(),
        "layout /wide",
    );
    // Again, on a fresh client (no connection to s3 yet: connection refused).
    let fresh = cluster.client();
    assert_fails(
        timed(&fresh, async |c| c.stat("/wide").await),
        None,
        dead_bound(),
        "stat /wide, new client",
    );
    let out = cluster.run_cli(&["stat", "/wide"]);
    out.err_line();
    assert!(
        out.elapsed < dead_bound(),
        "`pvfs stat /wide` took {:?}",
        out.elapsed
    );
    let local = cluster.dir().join("wide-copy");
    let out = cluster.run_cli(&["cp", "pvfs:/wide", local.to_str().unwrap()]);
    out.err_line();
    assert!(
        out.elapsed < dead_bound(),
        "`pvfs cp pvfs:/wide` took {:?}",
        out.elapsed
    );

    // Calls that do not need it work.
    check_without_s3(&tc, &files, "k1");
    check_without_s3(&fresh, &files, "k2");
    check_ping_and_df(&cluster, dead_bound());

    // Back: the same clients see everything again.
    cluster.restart("s3");
    check_wide_back(&tc, &files, "after s3 restarted (long-lived client)");
    check_wide_back(&fresh, &files, "after s3 restarted (second client)");
    cluster.run_cli(&["ping"]).ok();
    cluster.assert_all_running();
}

#[test]
fn a_server_killed_in_the_middle_of_a_large_write_fails_it_promptly() {
    let cluster = cluster();
    let tc = cluster.client();
    let (handle, server) = tc.run(HANG, async |c| {
        let f = c
            .create("/big", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        let df = f
            .layout()
            .datafiles
            .iter()
            .find(|d| d.server == 3)
            .copied()
            .unwrap();
        (df.handle, df.server as usize)
    });
    let on_s3 = cluster.datafile_path(server, handle);
    // 192 MiB in one call; s3 gets a quarter of it.
    let c = tc.client.clone();
    let write = tc.rt.spawn(async move {
        let f = c.open("/big").await?;
        let buf = vec![0x5au8; 192 << 20];
        f.write_at(0, &buf).await
    });
    // A tight poll (not `poll`, whose pauses grow): kill as soon as bytes arrive.
    let since = Instant::now();
    while std::fs::metadata(&on_s3).map(|m| m.len()).unwrap_or(0) == 0 {
        assert!(
            since.elapsed() < hang(),
            "s3 never received any byte of the write"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    cluster.kill("s3", libc::SIGKILL);
    let killed = Instant::now();
    let r = tc
        .rt
        .block_on(async { tokio::time::timeout(hang(), write).await });
    let took = killed.elapsed();
    let r = r
        .expect("the write hung after a server was killed")
        .unwrap();
    let held = std::fs::metadata(&on_s3).map(|m| m.len()).unwrap_or(0);
    assert!(
        held < 48 << 20,
        "the write had already finished on s3 ({held} bytes) before the kill"
    );
    match r {
        Ok(n) => panic!("write of 192 MiB succeeded ({n}) though s3 was killed during it"),
        Err(e) => assert!(
            is_server_down_errno(e.errno),
            "write failed with {} ({}), expected EHOSTDOWN, EIO or ETIMEDOUT",
            e.errno.name(),
            e.message
        ),
    }
    assert!(
        took < dead_bound(),
        "the write failed {took:?} after the kill"
    );

    // After a restart, the file is usable again (its content is whatever landed).
    cluster.restart("s3");
    poll(
        "/big to be usable again",
        scaled(Duration::from_secs(15)),
        || tc.run(HANG, async |c| c.stat("/big").await).ok(),
    );
    tc.run(HANG, async |c| {
        let f = c.open("/big").await.unwrap();
        let size = f.size().await.unwrap();
        assert!(size <= 192 << 20);
        f.write_at(0, b"still writable").await.unwrap();
        let mut buf = [0u8; 14];
        f.read_at(0, &mut buf).await.unwrap();
        assert_eq!(&buf, b"still writable");
    });
    cluster.assert_all_running();
}

#[test]
fn a_hung_server_gives_etimedout_within_the_timeout_and_serves_again_after_sigcont() {
    let cluster = cluster();
    let mut rng = Rng::new(0x5eed_0009);
    let tc = cluster.client();
    let files = setup(&cluster, &tc, &mut rng);
    cluster.kill("s3", libc::SIGSTOP);

    // Each call waits out the timeout, so they run at once (each is timed alone).
    let e = Some(Errno::ETIMEDOUT);
    let fresh = cluster.client();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            assert_fails(
                timed(&tc, async |c| c.stat("/wide").await),
                e,
                hung_bound(),
                "stat /wide (s3 hung)",
            )
        });
        sc.spawn(|| {
            let r = timed(&tc, async |c| {
                let f = c.open("/wide").await?;
                let mut buf = vec![0u8; 1 << 20];
                f.read_at(0, &mut buf).await
            });
            assert_fails(r, e, hung_bound(), "read /wide (s3 hung)")
        });
        sc.spawn(|| {
            let r = timed(&tc, async |c| {
                let f = c.open("/wide").await?;
                // The bytes already there: whatever part lands, the content stays known.
                f.write_at(0, &files.wide[..300_000]).await
            });
            assert_fails(r, e, hung_bound(), "write /wide (s3 hung)")
        });
        sc.spawn(|| {
            let r = timed(&fresh, async |c| c.stat("/wide").await);
            assert_fails(r, e, hung_bound(), "stat /wide, new client (s3 hung)")
        });
        sc.spawn(|| {
            let out = cluster.run_cli(&["stat", "/wide"]);
            out.err_line();
            let bound = hung_bound() + scaled(Duration::from_secs(1));
            assert!(
                out.elapsed < bound,
                "`pvfs stat /wide` took {:?}",
                out.elapsed
            );
        });
        // Meanwhile, calls that do not need s3 are not held up.
        sc.spawn(|| check_without_s3(&cluster.client(), &files, "h0"));
    });

    check_without_s3(&tc, &files, "h1");
    check_ping_and_df(&cluster, hung_bound() + scaled(Duration::from_secs(1)));

    // SIGCONT: it serves again, to the same clients.
    cluster.kill("s3", libc::SIGCONT);
    check_wide_back(&tc, &files, "after SIGCONT (long-lived client)");
    check_wide_back(&fresh, &files, "after SIGCONT (second client)");
    cluster.run_cli(&["ping"]).ok();

    // A hung metadata server: namespace calls that need it time out; none hangs.
    cluster.kill("s1", libc::SIGSTOP);
    let results: Vec<_> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..6)
            .map(|i| {
                let tc = &tc;
                sc.spawn(move || timed(tc, async |c| c.mkdir(&format!("/dir/m{i}"), 0o755).await))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut failed = 0;
    for (r, took) in results {
        assert!(took < hung_bound(), "mkdir with s1 hung took {took:?}");
        if let Err(e) = r {
            assert_eq!(
                e.errno,
                Errno::ETIMEDOUT,
                "mkdir with s1 hung: {}",
                e.message
            );
            failed += 1;
        }
    }
    // /dir is sharded over every metadata server (s1 too): its listing needs s1.
    let (r, took) = timed(&tc, async |c| c.readdir("/dir").await);
    assert!(took < hung_bound(), "readdir with s1 hung took {took:?}");
    match r {
        Ok(entries) => panic!(
            "readdir /dir with s1 hung returned {} entries",
            entries.len()
        ),
        Err(e) => assert_eq!(
            e.errno,
            Errno::ETIMEDOUT,
            "readdir /dir with s1 hung: {}",
            e.message
        ),
    }
    cluster.kill("s1", libc::SIGCONT);
    assert!(
        (1..6).contains(&failed),
        "{failed} of 6 mkdirs failed with s1 hung; some names belong to s1, some not"
    );
    poll("s1 to serve again", scaled(Duration::from_secs(15)), || {
        tc.run(HANG, async |c| c.readdir("/dir").await).ok()
    });
    cluster.assert_all_running();
}
