//! The authority (`docs/replication.md`): three of four real server processes run it
//! on openraft; every server renews a lease through it. A server killed (`kill -9`)
//! or stopped (`SIGSTOP`) is marked down in the cluster map once its lease has run
//! out, not before; it comes back as recovering and then up. Killing the member
//! that leads elects another, which goes on deciding. `pvfs status` shows it all.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{map_state, poll, scaled, Cluster};

/// The lease the test file systems use (the smallest the configuration accepts is
/// 500ms; one second keeps the test short and the arithmetic visible).
const LEASE: Duration = Duration::from_secs(1);

/// Four servers, the first three running the authority, with a one-second lease.
fn cluster() -> Cluster {
    Cluster::builder()
        .servers(4)
        .set("authority", r#"["s0", "s1", "s2"]"#)
        // `lease` also names the locks' lease: both become one second here.
        .set("lease", r#""1s""#)
        .start()
}

/// `pvfs status --json`, whatever its exit code.
fn status(cluster: &Cluster) -> serde_json::Value {
    cluster.run_cli(&["status", "--json"]).json_any()
}

/// Waits until every server is up in the map; returns the map's version.
fn all_up(cluster: &Cluster, within: Duration) -> u64 {
    poll("every server up in the cluster map", within, || {
        let v = status(cluster);
        let names = cluster.names();
        let up = names
            .iter()
            .all(|n| map_state(&v, n).as_deref() == Some("up"));
        (up && v["healthy"] == true).then(|| v["map_version"].as_u64().unwrap())
    })
}

/// Waits until `name` has `state` in the map; returns the time it took from `since`.
fn until_state(
    cluster: &Cluster,
    name: &str,
    state: &str,
    since: Instant,
    within: Duration,
) -> Duration {
    poll(
        &format!("{name} {state} in the cluster map"),
        within,
        || (map_state(&status(cluster), name).as_deref() == Some(state)).then(|| since.elapsed()),
    )
}

#[test]
fn a_dead_or_stopped_server_is_marked_down_after_its_lease_and_up_again_when_back() {
    let cluster = cluster();
    let v0 = all_up(&cluster, scaled(Duration::from_secs(30)));
    let human = cluster.run_cli(&["status"]);
    assert!(
        human.ok().contains(&format!("cluster map version {v0}")),
        "{}",
        human.stdout
    );

    // kill -9 of a server that is not a member: down once its lease ran out at the
    // authority (it renewed at most a quarter lease before it died), never sooner.
    let killed = Instant::now();
    cluster.kill("s3", libc::SIGKILL);
    let mut seen_before = Vec::new();
    let took = poll(
        "s3 down in the cluster map",
        scaled(Duration::from_secs(20)),
        || {
            let state = map_state(&status(&cluster), "s3");
            let at = killed.elapsed();
            if state.as_deref() == Some("down") {
                return Some(at);
            }
            seen_before.push((at, state));
            None
        },
    );
    assert!(
        took >= LEASE * 3 / 4,
        "marked down {took:?} after the kill, before its lease could have run out"
    );
    // Its state was seen as up after the kill: the check above is not vacuous.
    assert!(
        seen_before.iter().any(|(_, s)| s.as_deref() == Some("up")),
        "never saw s3 up after the kill: {seen_before:?}"
    );
    assert!(
        took <= scaled(LEASE + Duration::from_secs(3)),
        "took {took:?}"
    );
    let down = cluster.run_cli(&["status"]);
    down.err_containing("not up in the cluster map");
    let v = status(&cluster);
    assert_eq!(v["healthy"], false);
    assert!(v["map_version"].as_u64().unwrap() > v0);

    // Back: recovering (it has nothing to catch up with yet), then up.
    let back = Instant::now();
    cluster.restart("s3");
    until_state(&cluster, "s3", "up", back, scaled(Duration::from_secs(20)));
    let v1 = all_up(&cluster, scaled(Duration::from_secs(20)));
    assert!(v1 >= v0 + 3, "down, recovering, up: {v0} -> {v1}");

    // SIGSTOP looks the same to the others; SIGCONT brings it back.
    let stopped = Instant::now();
    cluster.kill("s3", libc::SIGSTOP);
    let took = until_state(
        &cluster,
        "s3",
        "down",
        stopped,
        scaled(Duration::from_secs(20)),
    );
    assert!(took >= LEASE * 3 / 4, "stopped: marked down after {took:?}");
    cluster.kill("s3", libc::SIGCONT);
    let v2 = all_up(&cluster, scaled(Duration::from_secs(20)));
    assert!(v2 >= v1 + 3, "{v1} -> {v2}");
    cluster.assert_all_running();
}

#[test]
fn killing_the_leading_member_elects_another_that_goes_on_deciding() {
    let cluster = cluster();
    all_up(&cluster, scaled(Duration::from_secs(30)));
    let leader = poll("a leader", scaled(Duration::from_secs(10)), || {
        status(&cluster)["authority_leader"]
            .as_str()
            .map(str::to_string)
    });
    assert!(["s0", "s1", "s2"].contains(&leader.as_str()), "{leader}");

    let killed = Instant::now();
    cluster.kill(&leader, libc::SIGKILL);
    // The new leader waits a full lease before it declares anyone down (it cannot
    // know what its predecessor granted): the dead leader goes down after an
    // election and a lease.
    let took = until_state(
        &cluster,
        &leader,
        "down",
        killed,
        scaled(Duration::from_secs(20)),
    );
    assert!(took >= LEASE, "marked down {took:?} after the kill");
    let v = status(&cluster);
    let new_leader = v["authority_leader"].as_str().unwrap().to_string();
    assert_ne!(new_leader, leader);
    for name in cluster.names().iter().filter(|n| **n != leader) {
        assert_eq!(map_state(&v, name).as_deref(), Some("up"), "{name}: {v}");
    }

    // It goes on deciding: a non-member killed now is marked down by the new leader.
    let second = Instant::now();
    cluster.kill("s3", libc::SIGKILL);
    until_state(
        &cluster,
        "s3",
        "down",
        second,
        scaled(Duration::from_secs(20)),
    );

    // Both come back; the old leader rejoins as a follower with its log.
    cluster.restart(&leader);
    cluster.restart("s3");
    all_up(&cluster, scaled(Duration::from_secs(30)));
}
