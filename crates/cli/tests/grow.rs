//! Adding a data server to a running file system (`docs/configuration.md`, "Adding
//! a server"): four real server processes with two copies of everything; `pvfs
//! server add` appends a fifth to the configuration, the four restart one at a time
//! with it while a client writes and reads on (no error), then the new server
//! starts: the map takes it, and new files take it in their share. Its copies serve
//! alone when the server sharing them is killed. A client with the old
//! configuration gets a clear error for files placed on it, and a server refuses a
//! configuration that adds a metadata server.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::churn::{check_all, check_files, wait_state, write_files, write_first, Busy};
use common::{all_up_with_standby_copies, TestClient};

#[test]
fn a_data_server_added_takes_its_share_of_new_files_after_a_rolling_restart() {
    let mut cluster = common::two_meta_of_four(&[]);
    all_up_with_standby_copies(&cluster);
    let old = cluster.config().clone();
    let tc = TestClient::new(old.clone());
    let (first, _) = write_first(&tc, 3);
    assert!(first.iter().all(|c| c.iter().all(|&s| s < 4)));

    // Added to the configuration; every server restarts with it, one at a time,
    // while a client with the old one writes and reads on.
    cluster.add_data_server("s4");
    let config = cluster.config().clone();
    assert_eq!(config.servers.len(), 5);
    let busy = Busy::start(&old);
    for name in ["s3", "s2", "s1", "s0"] {
        restarted(&cluster, name);
    }
    let (made, _) = busy.finish();
    // The map has it now (the leader restarted with the new configuration), down
    // until it starts; files made meanwhile left it out.
    assert_eq!(common::state_of(&cluster, "s4").as_deref(), Some("down"));

    cluster.restart("s4");
    wait_state(&cluster, "s4", "up", Duration::from_secs(60));
    let new = TestClient::new(config.clone());
    let copies = new.run(Duration::from_secs(120), async |c| {
        write_files(&c, "/n", 0..10).await
    });
    // Its share of the new datafiles' first copies is a fifth (round robin over
    // the five data servers): at least half that, and second copies too.
    let first_on = copies.iter().filter(|c| c[0] == 4).count();
    let second_on = copies.iter().filter(|c| c[1] == 4).count();
    assert!(first_on * 10 >= copies.len(), "{copies:?}");
    assert!(second_on > 0, "{copies:?}");
    new.run(Duration::from_secs(120), async |c| {
        check_files(&c, "/n", 0..10).await;
    });
    check_all(&new, made);

    // The server after it in the chains goes: its copies alone serve.
    let partner = copies
        .iter()
        .find(|c| c[0] == 4)
        .map(|c| config.servers[c[1] as usize].name.clone())
        .unwrap();
    cluster.kill(&partner, libc::SIGKILL);
    wait_state(&cluster, &partner, "down", Duration::from_secs(30));
    new.run(Duration::from_secs(120), async |c| {
        check_files(&c, "/n", 0..10).await;
    });
    cluster.restart(&partner);
    all_up_with_standby_copies(&cluster);

    // A client that still has the old configuration: reads go to the copy it
    // knows; a write to a datafile with a copy on the new server either goes
    // through a server that knows it (the new one joined the chain last) and is
    // there, or fails with a clear error. No hang.
    let width = copies.len() / 10;
    let (file, datafile) = copies
        .chunks(width)
        .enumerate()
        .find_map(|(i, file)| Some((i, file.iter().position(|c| c[0] == 4)?)))
        .unwrap();
    let at = datafile as u64 * config.defaults.stripe_size;
    let wrote = tc.run(Duration::from_secs(120), async |c| {
        let f = c.open(&format!("/n{file}")).await.unwrap();
        let mut buf = vec![0u8; 1 << 20];
        f.read_at(0, &mut buf).await.unwrap();
        f.write_at(at, b"x").await
    });
    match wrote {
        Err(e) => assert!(e.to_string().contains("not in the configuration"), "{e}"),
        Ok(_) => new.run(Duration::from_secs(60), async |c| {
            let f = c.open(&format!("/n{file}")).await.unwrap();
            let mut one = [0u8; 1];
            f.read_at(at, &mut one).await.unwrap();
            assert_eq!(&one, b"x");
        }),
    }
    // And `pvfs status` with the old one says why.
    let old_path = cluster.dir().join("old.toml");
    old.write(&old_path, false).unwrap();
    let out = common::run_pvfs(
        &["status", "--config", old_path.to_str().unwrap()],
        &[],
        &["PVFS_CONFIG"],
    );
    assert!(out.stderr.contains("servers were added"), "{}", out.stderr);

    cluster.assert_clean();
    cluster.assert_all_running();

    // A metadata server added: the servers refuse to start with that.
    let mut meta = config.clone();
    let mut s5 = meta.servers[4].clone();
    s5.name = "s5".into();
    s5.roles = pvfs_proto::Roles::META | pvfs_proto::Roles::DATA;
    s5.handles.first += 1 << 40;
    s5.handles.last += 1 << 40;
    s5.storage = cluster.dir().join("s5");
    s5.address = "127.0.0.1:1".into();
    meta.servers.push(s5);
    let bad = cluster.dir().join("meta.toml");
    meta.write(&bad, false).unwrap();
    let out = common::run_pvfs(
        &["server", "--config", bad.to_str().unwrap(), "--name", "s3"],
        &[],
        &["PVFS_CONFIG"],
    );
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("adds metadata server s5"),
        "{}",
        out.stderr
    );
    cluster.assert_all_running();
}

/// The handles of every datafile of `{prefix}{i}` for i in `range`, each with the
/// servers its layout puts its copies on.
fn datafiles(tc: &TestClient, prefix: &str, range: std::ops::Range<u64>) -> Vec<(u64, Vec<u32>)> {
    tc.run(Duration::from_secs(120), async |c| {
        let mut out = Vec::new();
        for i in range {
            let f = c.open(&format!("{prefix}{i}")).await.unwrap();
            let layout = f.layout();
            for d in &layout.datafiles {
                let copies = d.replicas().take(layout.replicas.max(1) as usize).collect();
                out.push((d.handle, copies));
            }
        }
        out
    })
}

/// The datafiles on disk in a server's storage directory.
fn on_disk(storage: &std::path::Path) -> std::collections::HashSet<u64> {
    let mut found = std::collections::HashSet::new();
    let Ok(dirs) = std::fs::read_dir(storage.join("data")) else {
        return found;
    };
    for dir in dirs.flatten() {
        let Ok(files) = std::fs::read_dir(dir.path()) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name().to_string_lossy().to_string();
            if name.len() == 16 {
                if let Ok(h) = u64::from_str_radix(&name, 16) {
                    found.insert(h);
                }
            }
        }
    }
    found
}

/// How many big files (`/c0` ..) the rebalance test writes, of [`BIG_SIZE`] bytes.
const BIG: u64 = 6;
const BIG_SIZE: usize = 4 << 20;

/// The bytes of big file `/c{i}`.
fn big(i: u64) -> Vec<u8> {
    common::Rng::new(0xb16 + i).bytes(BIG_SIZE)
}

/// Writes `/c0` .. and fsyncs them.
async fn write_big(c: &pvfs_client::Client) {
    for i in 0..BIG {
        let f = c
            .create(
                &format!("/c{i}"),
                0o644,
                pvfs_proto::LayoutSpec::default(),
                true,
            )
            .await
            .unwrap();
        f.write_at(0, &big(i)).await.unwrap();
        f.fsync().await.unwrap();
    }
}

/// Reads `/c0` .. back, byte for byte.
async fn check_big(c: &pvfs_client::Client) {
    for i in 0..BIG {
        let f = c.open(&format!("/c{i}")).await.unwrap();
        let mut back = vec![0u8; BIG_SIZE + 1];
        let n = f.read_at(0, &mut back).await.unwrap();
        common::assert_bytes_eq(&back[..n], &big(i), &format!("/c{i}"));
    }
}

/// What a server's log says once it removed the copies it handed on.
const SHED: &str = "removed the copies of places this server handed on";

#[test]
fn rebalance_moves_a_share_of_old_copies_onto_an_added_server() {
    // Slow copies (1 MiB/s per server) of 48 MiB of big files, so the move takes
    // a while: the server taking copies is killed in the middle of it.
    let mut cluster = common::two_meta_of_four(&[("rebuild_bandwidth", r#""1M""#)]);
    all_up_with_standby_copies(&cluster);
    let old = cluster.config().clone();
    let tc = TestClient::new(old.clone());
    write_first(&tc, 3);
    tc.run(Duration::from_secs(120), async |c| write_big(&c).await);
    let mut before = datafiles(&tc, "/a", 0..24);
    before.extend(datafiles(&tc, "/c", 0..BIG));
    assert!(before
        .iter()
        .all(|(_, c)| c.len() == 2 && c.iter().all(|&s| s < 4)));

    // Nothing added: nothing to rebalance.
    let out = cluster.run_cli(&["rebalance"]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("nothing to rebalance"),
        "{}",
        out.stderr
    );

    cluster.add_data_server("s4");
    let config = cluster.config().clone();
    for name in ["s3", "s2", "s1", "s0"] {
        restarted(&cluster, name);
    }
    // Added but down: the rebalance waits for it.
    let out = cluster.run_cli(&["rebalance"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("servers down: s4"), "{}", out.stderr);
    cluster.restart("s4");
    wait_state(&cluster, "s4", "up", Duration::from_secs(60));

    // The rebalance, while a client writes and reads on.
    let busy = Busy::start(&config);
    let out = cluster.run_cli(&["rebalance"]);
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("rebalancing onto s4"), "{}", out.stdout);
    let again = cluster.run_cli(&["rebalance"]);
    assert!(
        again.stderr.contains("nothing to rebalance"),
        "{}",
        again.stderr
    );
    // s4 copies; killed in the middle of it, it starts over and finishes.
    common::poll(
        "s4 copying",
        common::scaled(Duration::from_secs(60)),
        || {
            let row = common::status_row(&cluster, "s4");
            (row["rebuilding"]["bytes_done"].as_u64().unwrap_or(0) > 0).then_some(())
        },
    );
    let row = common::status_row(&cluster, "s4");
    assert_ne!(
        row["rebalance"]["copying_from"],
        serde_json::json!([]),
        "{row}"
    );
    cluster.kill("s4", libc::SIGKILL);
    wait_state(&cluster, "s4", "down", Duration::from_secs(30));
    cluster.restart("s4");
    wait_state(&cluster, "s4", "up", Duration::from_secs(60));
    let (made, _) = busy.finish();
    // A server handing places is killed while s4 copies them again: the others
    // record what it misses of the places it holds beside s4, and once s4 holds
    // them it neither copies them back nor stays recovering.
    common::poll(
        "s4 copying again",
        common::scaled(Duration::from_secs(60)),
        || {
            let row = common::status_row(&cluster, "s4");
            (row["rebuilding"]["bytes_done"].as_u64().unwrap_or(0) > 0).then_some(())
        },
    );
    cluster.kill("s2", libc::SIGKILL);
    wait_state(&cluster, "s2", "down", Duration::from_secs(30));
    // Changes s2 misses: new files, and old ones written again.
    let new = TestClient::new(config.clone());
    new.run(Duration::from_secs(120), async |c| {
        write_files(&c, "/d", 0..4).await;
        for i in 0..4 {
            let f = c.open(&format!("/a{i}")).await.unwrap();
            f.write_at(0, &common::churn::content("/a", i))
                .await
                .unwrap();
            f.fsync().await.unwrap();
        }
    });
    common::poll(
        "s4 rebalanced with s2 down",
        common::scaled(Duration::from_secs(240)),
        || {
            let row = common::status_row(&cluster, "s4");
            (row["rebalance"]["copying_from"] == serde_json::json!([])).then_some(())
        },
    );
    cluster.restart("s2");
    wait_state(&cluster, "s2", "up", Duration::from_secs(60));
    let status = cluster.run_cli(&["status"]);
    assert!(
        status
            .stdout
            .contains("rebalanced: holds its share of the copies of s0, s1, s2, s3"),
        "{}",
        status.stdout
    );
    check_all(&new, made);
    new.run(Duration::from_secs(120), async |c| {
        check_big(&c).await;
        check_files(&c, "/d", 0..4).await;
    });

    // About a fifth of the old copies are on s4 now, and only there: the servers
    // that handed them shed theirs.
    let map = new
        .run(Duration::from_secs(30), async |c| {
            c.newest_cluster_map().await
        })
        .unwrap()
        .unwrap();
    let moved: Vec<&(u64, Vec<u32>)> = before
        .iter()
        .filter(|(h, c)| map.holder_servers(*h, c).contains(&4))
        .collect();
    let places = before.len() * 2;
    assert!(
        moved.len() * 100 >= places * 10 && moved.len() * 100 <= places * 30,
        "{} of {places} copies moved",
        moved.len()
    );
    let disks: Vec<_> = config.servers.iter().map(|s| on_disk(&s.storage)).collect();
    common::poll(
        "the old servers shed the copies they handed on",
        common::scaled(Duration::from_secs(60)),
        || {
            let disks: Vec<_> = config.servers.iter().map(|s| on_disk(&s.storage)).collect();
            moved
                .iter()
                .all(|(h, c)| {
                    let held = map.holder_servers(*h, c);
                    c.iter()
                        .all(|s| held.contains(s) || !disks[*s as usize].contains(h))
                })
                .then_some(())
        },
    );
    for (h, c) in &moved {
        let held = map.holder_servers(*h, c);
        assert_eq!(held.len(), 2, "{h:#x} {c:?}: {held:?}");
        let other = held.iter().find(|&&s| s != 4).unwrap();
        assert!(c.contains(other));
        if disks[*other as usize].contains(h) {
            assert!(disks[4].contains(h), "{h:#x} not on s4");
        }
    }
    let shed: u64 = ["s0", "s1", "s2", "s3"]
        .iter()
        .map(|n| {
            cluster
                .log(n)
                .lines()
                .filter(|l| l.contains(SHED))
                .filter_map(|l| {
                    l.split_whitespace()
                        .find_map(|w| w.strip_prefix("datafiles="))
                        .and_then(|v| v.parse::<u64>().ok())
                })
                .sum::<u64>()
        })
        .sum();
    assert!(
        shed >= moved.len() as u64 / 2,
        "{shed} shed, {} moved",
        moved.len()
    );
    cluster.assert_clean();

    // The server sharing a moved copy with s4 goes: s4's copies serve alone.
    let (_, c) = moved[0];
    let partner = *map
        .holder_servers(moved[0].0, c)
        .iter()
        .find(|&&s| s != 4)
        .unwrap();
    let partner = config.servers[partner as usize].name.clone();
    cluster.kill(&partner, libc::SIGKILL);
    wait_state(&cluster, &partner, "down", Duration::from_secs(30));
    new.run(Duration::from_secs(120), async |c| {
        check_files(&c, "/a", 0..24).await;
        check_big(&c).await;
    });
    cluster.restart(&partner);
    all_up_with_standby_copies(&cluster);
    cluster.assert_clean();
    cluster.assert_all_running();
    for n in cluster.names() {
        let log = cluster.log(&n);
        assert!(!log.contains("panicked"), "{n}:\n{log}");
    }
}

/// Stops server `name` cleanly, starts it again and waits until the map has it
/// up again since (a restart is a new process, which catches up first).
fn restarted(cluster: &common::Cluster, name: &str) {
    let since = || {
        let status = cluster.run_cli(&["status", "--json"]).json_any();
        let row = status["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap();
        (
            row["map_state"].as_str().map(str::to_string),
            row["map_since"].as_u64(),
        )
    };
    let (_, before) = since();
    let before = before.unwrap();
    cluster.kill(name, libc::SIGTERM);
    cluster.restart(name);
    common::poll(
        &format!("{name} up again"),
        common::scaled(Duration::from_secs(60)),
        || match since() {
            (Some(state), Some(at)) if state == "up" && at > before => Some(()),
            _ => None,
        },
    );
}
