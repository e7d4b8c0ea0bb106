//! Rebuilding a lost server's copies (`docs/replication.md`, "Rebuild"): four real
//! server processes made by `pvfs genconfig --replicas 2`, with `rebuild_after` at
//! its least (five leases). A data server is killed and stays away: the map calls it
//! lost, and the others rebuild the copies it held, while a client writes and reads
//! on. Then a server that shared copies with it is killed too: every datafile the
//! two held is served by the rebuilt copies alone, byte for byte. The lost server
//! comes back: it copies everything whole and takes its places back, its heirs
//! remove the copies they stood in with, and the partner is killed again: the
//! returned server's copies alone serve every byte. With failure domains named, a
//! lost server's heirs keep every datafile's copies in distinct racks.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::churn::{check_all, check_files, wait_state, write_files, write_first, Busy};
use common::{all_up_with_standby_copies, poll, scaled, state_of, Cluster, TestClient};

/// What an heir's log says once it rebuilt what it took.
const REBUILT: &str = "rebuilt the copies this server took of lost servers";

/// What a returned server's log says once it copied everything whole.
const REFILLED: &str = "refilled every datafile this server holds a copy of";

/// What an heir's log says once it removed the copies of places it left.
const SHED: &str = "removed the copies this server held for lost servers that came back";

/// The sum of `field=` over the lines of `log` that contain `what`.
fn logged(log: &str, what: &str, field: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains(what))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(field))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}

/// [`logged`] over every server's log.
fn logged_all(cluster: &Cluster, what: &str, field: &str) -> u64 {
    cluster
        .names()
        .iter()
        .map(|n| logged(&cluster.log(n), what, field))
        .sum()
}

/// Restarts server `name`, waits until it is up, and checks fsck finds nothing.
fn back_and_clean(cluster: &Cluster, name: &str) {
    cluster.restart(name);
    wait_state(cluster, name, "up", Duration::from_secs(60));
    cluster.assert_clean();
}

#[test]
fn a_lost_servers_copies_are_rebuilt_on_the_others_and_given_back_when_it_returns() {
    // Two metadata servers: s2 and s3 hold data only.
    let cluster = common::two_meta_of_four(&[("rebuild_after", r#""5s""#)]);
    all_up_with_standby_copies(&cluster);
    let config = cluster.config().clone();
    // The lost server is no member of the authority; its partner holds copies
    // with it (its neighbour in the chains).
    let (v, w) = (3usize, 2usize);
    let (sv, sw) = (
        config.servers[v].name.clone(),
        config.servers[w].name.clone(),
    );
    assert!(!config.replication.authority.contains(&v));
    assert!(config.meta_group(v).is_empty() && config.meta_group(w).is_empty());
    let tc = TestClient::new(config.clone());
    let (mut copies, _) = write_first(&tc, v);

    // It dies and stays away while a client writes and reads: no error.
    let busy = Busy::start(&config);
    cluster.kill(&sv, libc::SIGKILL);
    wait_state(&cluster, &sv, "lost", Duration::from_secs(60));
    // Its heirs rebuild what it held; the status tells which are still at it.
    poll(
        &format!("{sv}'s copies rebuilt"),
        scaled(Duration::from_secs(120)),
        || {
            let row = common::status_row(&cluster, &sv);
            (row["heirs_rebuilding"] == serde_json::json!([])).then_some(row)
        },
    );
    let (made, more) = busy.finish();
    copies.extend(more);
    // Files made before the map called it lost have copies on it too.
    let on_v = copies.iter().filter(|c| c.contains(&(v as u32))).count() as u64;
    let rebuilt = logged_all(&cluster, REBUILT, "datafiles=");
    assert!(
        rebuilt >= on_v,
        "the heirs rebuilt {rebuilt} datafiles, but {sv} held copies of {on_v}"
    );
    // Gone for good with every copy rebuilt: the file system is healthy again.
    let status = cluster.run_cli(&["status", "--json"]);
    assert!(status.status.success(), "{}", status.stdout);
    assert_eq!(common::status_row(&cluster, &sv)["map_state"], "lost");

    // Its partner goes: whatever had copies on both is served by the rebuilt
    // copies alone.
    let both = copies
        .iter()
        .filter(|c| c.contains(&(v as u32)) && c.contains(&(w as u32)))
        .count();
    assert!(both > 0, "no datafile has its copies on {sv} and {sw}");
    cluster.kill(&sw, libc::SIGKILL);
    wait_state(&cluster, &sw, "down", Duration::from_secs(30));
    check_all(&tc, made);
    back_and_clean(&cluster, &sw);

    // It comes back: it copies everything whole, takes its places back, and its
    // heirs remove the copies they stood in with.
    cluster.restart(&sv);
    poll(
        &format!("{sv} up again, everything copied whole"),
        scaled(Duration::from_secs(120)),
        || {
            (state_of(&cluster, &sv).as_deref() == Some("up")
                && cluster.log(&sv).contains(REFILLED))
            .then_some(())
        },
    );
    let refilled = logged(&cluster.log(&sv), REFILLED, "datafiles=");
    assert!(refilled >= on_v, "{sv} refilled {refilled} of {on_v}");
    poll(
        "the heirs' copies removed",
        scaled(Duration::from_secs(60)),
        || {
            let shed = logged_all(&cluster, SHED, "datafiles=");
            (shed >= on_v).then_some(())
        },
    );
    // Its partner goes again: the returned server's copies alone serve them.
    cluster.kill(&sw, libc::SIGKILL);
    wait_state(&cluster, &sw, "down", Duration::from_secs(30));
    check_all(&tc, made);
    cluster.restart(&sw);
    all_up_with_standby_copies(&cluster);
    let fsck = cluster.run_cli(&["fsck", "--json"]);
    assert_eq!(
        fsck.json_any()["problems"],
        serde_json::json!([]),
        "{}",
        fsck.stdout
    );
    assert!(fsck.status.success());
    cluster.assert_all_running();
    cluster.assert_no_panics();
}

/// The servers holding the places of metadata group `g` under the newest map.
fn group_holders(tc: &TestClient, config: &pvfs_config::Config, g: usize) -> Vec<u32> {
    let map = tc.run(Duration::from_secs(30), async |c| {
        c.cluster_map().await.unwrap().expect("a cluster map")
    });
    map.holders_of(pvfs_proto::map::Held::Meta, &config.meta_group(g))
        .into_iter()
        .map(|h| h.server)
        .collect()
}

#[test]
fn a_lost_metadata_servers_places_in_groups_go_to_heirs_that_serve_when_the_next_dies() {
    // Every server holds metadata and data; s3's group has its standby on s0, and
    // s2's group on s3.
    let cluster = Cluster::builder()
        .servers(4)
        .replicas(2)
        .set("lease", r#""1s""#)
        .set("rebuild_after", r#""5s""#)
        .start();
    all_up_with_standby_copies(&cluster);
    let config = cluster.config().clone();
    let (v, w) = (3usize, 2usize);
    let (sv, sw) = (
        config.servers[v].name.clone(),
        config.servers[w].name.clone(),
    );
    assert_eq!(config.meta_group(w), [w as u32, v as u32]);
    assert!(!config.replication.authority.contains(&v));
    let tc = TestClient::new(config.clone());
    let (mut copies, _) = write_first(&tc, v);

    let busy = Busy::start(&config);
    cluster.kill(&sv, libc::SIGKILL);
    wait_state(&cluster, &sv, "lost", Duration::from_secs(60));
    // The groups it was in get an heir in its place, and their primaries give it a
    // whole copy: s2's group (s2 ships it), and its own (the standby that took it
    // over ships it).
    for g in [w, v] {
        let holders = group_holders(&tc, &config, g);
        assert_eq!(holders.len(), 2, "group {g}: {holders:?}");
        assert!(!holders.contains(&(v as u32)), "group {g}: {holders:?}");
        let heir = *holders
            .iter()
            .find(|&&h| !config.meta_group(g).contains(&h))
            .unwrap_or_else(|| panic!("no heir in group {g}: {holders:?}"));
        let line = format!("group={g} standby={heir} ");
        poll(
            &format!("the heir {heir} with a whole copy of group {g}"),
            scaled(Duration::from_secs(60)),
            || {
                cluster
                    .names()
                    .iter()
                    .any(|n| {
                        cluster.log(n).lines().any(|l| {
                            l.contains("metadata standby has a whole copy") && l.contains(&line)
                        })
                    })
                    .then_some(())
            },
        );
    }
    poll(
        &format!("{sv}'s copies rebuilt"),
        scaled(Duration::from_secs(120)),
        || {
            (common::status_row(&cluster, &sv)["heirs_rebuilding"] == serde_json::json!([]))
                .then_some(())
        },
    );
    let (made, more) = busy.finish();
    copies.extend(more);

    // The next server of its groups goes: its group is served by the heir's copy,
    // every name and byte is there, and creates go on.
    cluster.kill(&sw, libc::SIGKILL);
    wait_state(&cluster, &sw, "down", Duration::from_secs(30));
    check_all(&tc, made);
    tc.run(Duration::from_secs(120), async |c| {
        // New files leave the lost server out.
        let placed = write_files(&c, "/c", 0..8).await;
        assert!(
            placed.iter().all(|p| !p.contains(&(v as u32))),
            "{placed:?}"
        );
        check_files(&c, "/c", 0..8).await;
        let names = c.readdir("/").await.unwrap();
        assert_eq!(names.len() as u64, 24 + made + 8, "{names:?}");
    });
    back_and_clean(&cluster, &sw);
    cluster.assert_no_panics();
}

#[test]
fn a_drained_server_hands_its_copies_over_while_it_serves_and_is_retired() {
    let cluster = common::two_meta_of_four(&[]);
    all_up_with_standby_copies(&cluster);
    let config = cluster.config().clone();
    let (v, w) = (3usize, 2usize);
    let (sv, sw) = (
        config.servers[v].name.clone(),
        config.servers[w].name.clone(),
    );
    let tc = TestClient::new(config.clone());
    let (mut copies, on_v) = write_first(&tc, v);
    // A file of one copy, on it alone: no heir takes it.
    let data = config.data_servers();
    let base = data.iter().position(|&s| s == v).unwrap() as u32;
    let one = pvfs_proto::LayoutSpec {
        replicas: Some(1),
        stripe_count: Some(1),
        base: Some(base),
        ..Default::default()
    };
    tc.run(Duration::from_secs(30), async |c| {
        let f = c.create("/one", 0o644, one, true).await.unwrap();
        f.write_at(0, b"only here").await.unwrap();
    });

    // Drained while a client writes and reads: no error, and it serves meanwhile.
    let busy = Busy::start(&config);
    let out = cluster.run_cli(&["server", "drain", &sv]);
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    // Not retired while the file of one copy is there; removed, it is.
    poll(
        &format!("{sv} drained but for the file of one copy"),
        scaled(Duration::from_secs(120)),
        || {
            cluster
                .log(&sv)
                .contains("drained but for datafiles of files with one copy")
                .then_some(())
        },
    );
    assert_eq!(state_of(&cluster, &sv).as_deref(), Some("draining"));
    tc.run(Duration::from_secs(30), async |c| {
        c.unlink("/one").await.unwrap()
    });
    assert!(
        out.stdout.contains(&format!("draining {sv}")),
        "{}",
        out.stdout
    );
    wait_state(&cluster, &sv, "retired", Duration::from_secs(120));
    let (made, more) = busy.finish();
    copies.extend(more);
    let rebuilt = logged_all(&cluster, REBUILT, "datafiles=");
    assert!(rebuilt >= on_v, "the heirs copied {rebuilt} of {on_v}");
    assert!(cluster
        .log(&sv)
        .contains("drained: every copy this server held"));
    // Retired, it is healthy to be without it; stopped, nothing misses it.
    cluster.kill(&sv, libc::SIGKILL);
    let status = cluster.run_cli(&["status", "--json"]);
    assert!(status.status.success(), "{}", status.stdout);
    // And the server that shared copies with it goes too: the heirs' copies serve.
    cluster.kill(&sw, libc::SIGKILL);
    wait_state(&cluster, &sw, "down", Duration::from_secs(30));
    check_all(&tc, made);
    back_and_clean(&cluster, &sw);
    // A retired server drains no more; one that is not in the configuration
    // neither.
    let again = cluster.run_cli(&["server", "drain", &sv]);
    assert!(!again.status.success(), "{}", again.stdout);
    let unknown = cluster.run_cli(&["server", "drain", "nosuch"]);
    assert!(!unknown.status.success());
    assert!(unknown.stderr.contains("no server"), "{}", unknown.stderr);
    cluster.assert_no_panics();
}

#[test]
fn a_lost_servers_heirs_keep_the_copies_in_distinct_racks() {
    // Racks a = {s0, s1} and b = {s2, s3}: every datafile has one copy in each.
    let cluster = Cluster::builder()
        .servers(4)
        .genconfig_arg("--meta-servers")
        .genconfig_arg("2")
        .replicas(2)
        .set("lease", r#""1s""#)
        .set("rebuild_after", r#""5s""#)
        .domains(&["a", "a", "b", "b"])
        .start();
    all_up_with_standby_copies(&cluster);
    let config = cluster.config().clone();
    let rack = |s: u32| config.servers[s as usize].domain.clone().unwrap();
    let tc = TestClient::new(config.clone());
    let (copies, on_v) = write_first(&tc, 3);
    assert!(
        copies.iter().all(|c| rack(c[0]) != rack(c[1])),
        "{copies:?}"
    );

    // s3 is lost: the one server left in its rack takes all it held, none of the
    // servers beside the other copies (heirs in rotation would pick s0 and s1 too).
    cluster.kill("s3", libc::SIGKILL);
    wait_state(&cluster, "s3", "lost", Duration::from_secs(60));
    poll(
        "s3's copies rebuilt",
        scaled(Duration::from_secs(120)),
        || {
            (common::status_row(&cluster, "s3")["heirs_rebuilding"] == serde_json::json!([]))
                .then_some(())
        },
    );
    let map = tc.run(Duration::from_secs(30), async |c| {
        c.cluster_map().await.unwrap().expect("a cluster map")
    });
    let handles = tc.run(Duration::from_secs(60), async |c| {
        let mut handles = Vec::new();
        for i in 0..24 {
            let f = c.open(&format!("/a{i}")).await.unwrap();
            handles.extend(f.layout().datafiles.iter().map(|d| d.handle));
        }
        handles
    });
    assert_eq!(handles.len(), copies.len());
    let mut took = 0;
    for (h, c) in handles.iter().zip(&copies) {
        let held = map.holder_servers(*h, c);
        assert_eq!(held.len(), 2, "{h:#x} {c:?}: {held:?}");
        assert_ne!(rack(held[0]), rack(held[1]), "{h:#x} {c:?}: {held:?}");
        took += u64::from(c.contains(&3) && held.contains(&2) && !c.contains(&2));
    }
    assert_eq!(took, on_v, "s2 took every copy s3 held");
    tc.run(Duration::from_secs(120), async |c| {
        check_files(&c, "/a", 0..24).await;
    });
    cluster.assert_clean();
}
