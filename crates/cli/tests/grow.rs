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
    let mut cluster = common::Cluster::builder()
        .servers(4)
        .genconfig_arg("--meta-servers")
        .genconfig_arg("2")
        .replicas(2)
        .set("lease", r#""1s""#)
        .start();
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
