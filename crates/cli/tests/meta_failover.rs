//! Failover of metadata (`docs/replication.md`, "Failover") on four real server
//! processes made by `pvfs genconfig --replicas 2`: a metadata primary killed
//! (`kill -9`) while a client creates names in a loop costs that client a pause, never
//! an error; its standby serves its names, each acknowledged one exactly once. The
//! killed server, restarted, finds its group led by the standby, follows it as a
//! standby itself, and takes the group back when the standby is killed in turn. With
//! three copies, a standby named in a stopped primary's place and killed before it
//! served hands the group back to the primary's store, which was never superseded.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::churn::{check_all, wait_state, write_first};
use common::{
    all_up_with_standby_copies, four_with_two_copies, poll, scaled, state_of, Cluster, TestClient,
};

/// Creates `/{prefix}{i}` for i = 0, 1, … until `stop`, each once (a create that
/// fails is the test's failure); the names made and the longest call.
fn create_until(
    config: pvfs_config::Config,
    prefix: &'static str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(Vec<String>, Duration)> {
    std::thread::spawn(move || {
        let tc = TestClient::new(config);
        tc.run(Duration::from_secs(300), async |c| {
            let mut made = Vec::new();
            let mut longest = Duration::ZERO;
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) || i < 20 {
                let name = format!("{prefix}{i}");
                let t = Instant::now();
                c.mkdir(&format!("/{name}"), 0o755)
                    .await
                    .unwrap_or_else(|e| panic!("mkdir /{name}: {e}"));
                longest = longest.max(t.elapsed());
                made.push(name);
                i += 1;
            }
            (made, longest)
        })
    })
}

/// The objects `pvfs df --json` counts in the whole file system.
fn df_objects(cluster: &Cluster) -> u64 {
    let v = cluster.run_cli(&["df", "--json"]).json_any();
    v["objects"]
        .as_u64()
        .unwrap_or_else(|| panic!("no object count: {v}"))
}

/// Checks that every name in `names` is there, as a directory, once.
fn all_there(tc: &TestClient, names: &[String]) {
    tc.run(Duration::from_secs(120), async |c| {
        for name in names {
            let a = c
                .stat(&format!("/{name}"))
                .await
                .unwrap_or_else(|e| panic!("/{name} acknowledged, then: {e}"));
            assert!(a.is_dir(), "/{name}");
        }
        let listed = c.readdir("/").await.unwrap();
        for name in names {
            let n = listed.iter().filter(|e| &e.name == name).count();
            assert_eq!(n, 1, "/{name} listed {n} times");
        }
    });
}

/// What `taker`'s log says of the metadata groups it took over.
const TOOK_OVER: &str = "serving a metadata group from this server's copy, as its primary";

/// Sends `signal` to `victim` (`SIGKILL`, `SIGSTOP`) while a client creates names
/// `/{prefix}N` in a loop, and lets it go on until `taker` serves a metadata group
/// it took over; the names acknowledged and the longest create.
fn fail_while_creating(
    cluster: &Cluster,
    (victim, signal): (&str, i32),
    taker: &str,
    prefix: &'static str,
) -> (Vec<String>, Duration) {
    let before = cluster.log(taker).matches(TOOK_OVER).count();
    let stop = Arc::new(AtomicBool::new(false));
    let creating = create_until(cluster.config().clone(), prefix, stop.clone());
    std::thread::sleep(scaled(Duration::from_millis(500)));
    cluster.kill(victim, signal);
    poll(
        &format!("{taker} serving {victim}'s metadata"),
        scaled(Duration::from_secs(30)),
        || (cluster.log(taker).matches(TOOK_OVER).count() > before).then_some(()),
    );
    std::thread::sleep(scaled(Duration::from_millis(500)));
    stop.store(true, Ordering::Relaxed);
    creating.join().unwrap()
}

#[test]
fn a_killed_metadata_primary_costs_a_pause_and_its_standby_serves_every_name() {
    let cluster = four_with_two_copies();
    let config = cluster.config().clone();
    let (s0, s1) = (
        config.servers[0].name.clone(),
        config.servers[1].name.clone(),
    );
    assert_eq!(config.meta_group(0), vec![0, 1]);
    let root = config.root_handle();
    let shards = config.meta_servers().len() as u32;

    let objects_before = df_objects(&cluster);
    // s0 dies while a client creates names; about a quarter of them are s0's.
    let (made, longest) = fail_while_creating(&cluster, (&s0, libc::SIGKILL), &s1, "a");
    let on_s0 = made
        .iter()
        .filter(|n| config.entry_server(root, shards, n) == 0)
        .count();
    assert!(on_s0 > 0, "no name of {} landed on {s0}", made.len());
    eprintln!(
        "{} names created, {on_s0} on {s0}; the longest create took {longest:?}",
        made.len()
    );
    let tc = TestClient::new(config.clone());
    all_there(&tc, &made);
    // `pvfs df` counts s0's group where it is served now: every object once.
    assert_eq!(
        df_objects(&cluster),
        objects_before + made.len() as u64,
        "objects counted by pvfs df with {s0} down and its group served by {s1}"
    );
    // `pvfs status` shows s0's group served by s1 on one copy, its standby down.
    let status = cluster.run_cli(&["status", "--json"]).json_any();
    let served = common::served_groups(&status);
    assert_eq!(
        served.get(&s0),
        Some(&(s1.clone(), vec![(s0.clone(), "down".to_string())])),
        "{status}"
    );
    assert!(
        status["metadata_groups_on_one_copy"].as_u64() >= Some(1),
        "{status}"
    );

    // s0 back: its group stays with s1; s0 follows it as a standby, and is up once
    // it holds a whole copy of its own group from s1.
    cluster.restart(&s0);
    poll(
        &format!("{s0} up again, with a copy of its own metadata from {s1}"),
        scaled(Duration::from_secs(60)),
        || {
            (state_of(&cluster, &s0).as_deref() == Some("up")
                && cluster.log(&s0).contains("its own store is superseded"))
            .then_some(())
        },
    );
    assert!(cluster.storage(&s0).join("superseded").exists());
    // Once s0 holds a whole copy, every group is on two copies again. (A server
    // reports the groups it serves while its fence holds: one that just learned a
    // new map may miss from one look, so the whole picture is polled for; such a
    // group is listed as changing hands, and no look leaves one out while every
    // server answers.)
    let whole = |status: &serde_json::Value| {
        let served = common::served_groups(status);
        let changing = status["metadata_groups_changing"]
            .as_array()
            .map_or(0, |a| a.len());
        let answered = status["servers"]
            .as_array()
            .is_some_and(|rows| rows.iter().all(|r| r["state"] == "ok"));
        assert!(
            !answered || served.len() + changing == config.meta_servers().len(),
            "a metadata group neither served nor changing hands: {status}"
        );
        status["metadata_groups_on_one_copy"] == 0
            && served.len() == config.meta_servers().len()
            && served.get(&s0) == Some(&(s1.clone(), vec![(s0.clone(), "following".to_string())]))
    };
    let until = Instant::now() + scaled(Duration::from_secs(60));
    loop {
        let status = cluster.run_cli(&["status", "--json"]).json_any();
        if whole(&status) {
            break;
        }
        assert!(
            Instant::now() < until,
            "every metadata group on two copies, {s0}'s served by {s1} and followed by \
             {s0}: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // s1 dies in turn: s0 takes its group back, from the copy it followed.
    let (more, _) = fail_while_creating(&cluster, (&s1, libc::SIGKILL), &s0, "b");
    let mut all: Vec<String> = made.into_iter().chain(more).collect();
    all_there(&tc, &all);

    // s0, serving its group again, stops (`SIGSTOP`) with s1 back: s1 takes the group
    // over; s0, continued, finds its lease lapsed and the group moved, and serves
    // none of it from its copy, which is now behind.
    cluster.restart(&s1);
    poll(
        &format!("{s1} up again with a copy of the metadata {s0} serves"),
        scaled(Duration::from_secs(60)),
        || (state_of(&cluster, &s1).as_deref() == Some("up")).then_some(()),
    );
    let (more, _) = fail_while_creating(&cluster, (&s0, libc::SIGSTOP), &s1, "c");
    cluster.kill(&s0, libc::SIGCONT);
    all.extend(more);
    all_there(&tc, &all);
    // Not even a client that still routes by an old map reads from s0: its fence
    // refuses, and the retry goes where the new map says.
    tc.run(Duration::from_secs(60), async |c| {
        c.mkdir("/after", 0o755).await.unwrap();
    });
    all.push("after".into());
    all_there(&TestClient::new(config.clone()), &all);
}

#[test]
fn a_lock_held_through_a_stopped_metadata_primary_is_reclaimed_on_its_standby() {
    use pvfs_client::{LockKind, LockRequest};
    use pvfs_proto::locks::LockType;

    let cluster = four_with_two_copies();
    let config = cluster.config().clone();
    let (s0, s1) = (
        config.servers[0].name.clone(),
        config.servers[1].name.clone(),
    );
    let holder = TestClient::new(config.clone());
    let other = TestClient::new(config.clone());
    // A file whose object (and so its locks) lives on s0.
    let handle = holder.run(Duration::from_secs(60), async |c| {
        for i in 0.. {
            let f = c
                .create(&format!("/l{i}"), 0o644, Default::default(), true)
                .await
                .unwrap();
            if config.owner_of(f.handle()) == Some(0) {
                return f.handle();
            }
        }
        unreachable!()
    });
    let lock = |owner: u64, start: u64| LockRequest {
        handle,
        owner,
        kind: LockKind::Posix,
        typ: LockType::Write,
        start,
        end: start + 99,
        pid: owner as u32,
        wait: false,
    };
    holder.run(Duration::from_secs(60), async |c| {
        c.lock(&lock(1, 0), &mut || false).await.unwrap();
    });
    let taken = |at: u64| {
        other.run(Duration::from_secs(60), async |c| {
            c.lock(&lock(2, at), &mut || false).await.map(|_| ())
        })
    };
    assert_eq!(taken(50).unwrap_err().errno, pvfs_proto::Errno::EAGAIN);

    let before = cluster.log(&s1).matches(TOOK_OVER).count();
    // Stopped, s0 answers nothing: a request to it times out.
    cluster.kill(&s0, libc::SIGSTOP);
    // A lock asked for while the group fails over (its first try unanswered past the
    // request timeout) waits for the standby and is granted there, as any other
    // request would be.
    let asked = {
        let config = config.clone();
        let req = LockRequest {
            wait: true,
            ..lock(3, 400)
        };
        std::thread::spawn(move || {
            TestClient::new(config).run(Duration::from_secs(60), async |c| {
                c.lock(&req, &mut || false).await
            })
        })
    };
    poll(
        &format!("{s1} serving {s0}'s metadata"),
        scaled(Duration::from_secs(30)),
        || (cluster.log(&s1).matches(TOOK_OVER).count() > before).then_some(()),
    );
    let granted = asked.join().unwrap();
    assert!(
        granted.is_ok(),
        "a lock asked for during the failover: {granted:?}"
    );
    // Past the new primary's grace period (a lease): the holder renewed its lease
    // there meanwhile and reclaimed its lock, so it is still in the way…
    std::thread::sleep(scaled(Duration::from_secs(3)));
    let refused = taken(50).expect_err("a lock held through the failover was given away");
    assert_eq!(refused.errno, pvfs_proto::Errno::EAGAIN, "{refused}");
    // …of that range only: the group is served, and the range next to it is free.
    taken(200).unwrap();
    // Released by its holder, the range is free for the other.
    holder.run(Duration::from_secs(60), async |c| {
        c.unlock(handle, 1, 0, 99).await.unwrap();
    });
    taken(50).unwrap();
    cluster.kill(&s0, libc::SIGCONT);
}

#[test]
fn a_standby_that_confirms_nothing_while_it_renews_its_lease_is_evicted() {
    // s1 renews its lease like any server but drops its answers to the metadata
    // shipped to it (it applies them, then the connection breaks): s0's changes
    // never reach a confirmed standby.
    let cluster = Cluster::builder()
        .servers(4)
        .replicas(2)
        .set("lease", r#""1s""#)
        .request_timeout("4s")
        .server_env_of("s1", "PVFS_FAULTS", "drop-reply:Replicate:1000000000")
        .start();
    let config = cluster.config().clone();
    assert_eq!(config.meta_group(0), vec![0, 1]);
    let root = config.root_handle();
    let shards = config.meta_servers().len() as u32;
    let on_s0: Vec<String> = (0..)
        .map(|i| format!("e{i}"))
        .filter(|n| config.entry_server(root, shards, n) == 0)
        .take(3)
        .collect();
    let tc = TestClient::new(config.clone());
    for name in &on_s0 {
        // Answered, after the patience (half the request timeout) and the eviction:
        // never hung, and never answered while s1 still counted as holding it.
        let took = tc.run(Duration::from_secs(60), async |c| {
            let t = Instant::now();
            c.mkdir(&format!("/{name}"), 0o755).await.unwrap();
            t.elapsed()
        });
        eprintln!("/{name} took {took:?}");
    }
    let log = cluster.log("s0");
    assert!(
        log.contains("a metadata standby did not confirm a change") && log.contains("evicted"),
        "s0 never evicted its silent standby:\n{log}"
    );
    // The eviction made the map call s1 down although its process ran throughout,
    // and s1 came back recovering (it can never follow s0, so it stays so).
    let s1 = cluster.log("s1");
    assert!(
        s1.contains("lease renewal failed"),
        "s1's renewals were never refused:\n{s1}"
    );
    assert_ne!(state_of(&cluster, "s1").as_deref(), Some("up"));
    all_there(&tc, &on_s0);
}

/// What a standby's log says when the map names it a group's primary.
const NAMED: &str = "took over a metadata group whose primary is down";
/// What a named primary that cannot serve says when it hands the group back.
const HANDED_BACK: &str = "handed a metadata group back to the copy that served it last";

#[test]
fn a_standby_named_in_a_stopped_primarys_place_and_killed_before_it_served_hands_the_group_back() {
    // Three copies of every group on five servers (five members of the authority:
    // two faulted leave a majority). Every server leaves a group it is named the
    // primary of unopened while `hold` exists, as if it stalled just before.
    let faults = tempfile::tempdir().unwrap();
    let hold = faults.path().join("hold");
    let cluster = Cluster::builder()
        .servers(5)
        .replicas(3)
        // Long enough that a standby killed and started again renews before the
        // authority calls it down: the map keeps naming it.
        .set("lease", r#""3s""#)
        .server_env("PVFS_FAULTS", &format!("hold-take-over:{}", hold.display()))
        .start();
    common::all_up_with_standby_copies(&cluster);
    let config = cluster.config().clone();
    let names = cluster.names();
    let s0 = names[0].clone();
    let group = config.meta_group(0);
    assert_eq!(group.len(), 3, "{group:?}");
    let root = config.root_handle();
    let shards = config.meta_servers().len() as u32;
    let tc = TestClient::new(config.clone());
    let on_s0 = |prefix: &str| -> Vec<String> {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .filter(|n| config.entry_server(root, shards, n) == 0)
            .take(3)
            .collect()
    };
    let before = on_s0("a");
    tc.run(Duration::from_secs(60), async |c| {
        for n in &before {
            c.mkdir(&format!("/{n}"), 0o755).await.unwrap();
        }
    });

    // s0 stops; the map names one of its standbys in its place, which holds.
    std::fs::write(&hold, b"").unwrap();
    cluster.kill(&s0, libc::SIGSTOP);
    let named = poll(
        &format!("a standby of {s0} named its primary"),
        scaled(Duration::from_secs(30)),
        || {
            group[1..]
                .iter()
                .map(|&s| names[s as usize].clone())
                .find(|n| cluster.log(n).contains(NAMED))
        },
    );
    assert!(
        !cluster.log(&named).contains(TOOK_OVER),
        "{named} served although held"
    );
    // It dies before it serves, and s0 continues: back as recovering, its store
    // still holds every change (nobody served after it).
    cluster.kill(&named, libc::SIGKILL);
    cluster.kill(&s0, libc::SIGCONT);
    poll(
        &format!("{s0} back in the map"),
        scaled(Duration::from_secs(30)),
        || (state_of(&cluster, &s0).as_deref() == Some("recovering")).then_some(()),
    );
    // Started again within its lease, the named standby is still the map's primary
    // of the group, but its copy no longer follows: it hands the group back.
    cluster.restart(&named);
    poll(
        &format!("{named} handing {s0}'s metadata back"),
        scaled(Duration::from_secs(30)),
        || cluster.log(&named).contains(HANDED_BACK).then_some(()),
    );
    assert!(!cluster.log(&named).contains(TOOK_OVER));

    // s0 serves its group again from its own store, never superseded; every name
    // acknowledged before is there, and new ones are made on it.
    let after = on_s0("b");
    tc.run(Duration::from_secs(60), async |c| {
        for n in &after {
            c.mkdir(&format!("/{n}"), 0o755).await.unwrap();
        }
    });
    let all: Vec<String> = before.into_iter().chain(after).collect();
    all_there(&tc, &all);
    assert!(
        !cluster.storage(&s0).join("superseded").exists(),
        "{s0}'s store was superseded by a standby that never served"
    );
    let status = cluster.run_cli(&["status", "--json"]).json_any();
    let s0_row = status["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == s0.as_str())
        .unwrap()
        .clone();
    assert!(
        s0_row.get("metadata_served_by").is_none(),
        "{s0}'s metadata served by another: {s0_row}"
    );
    assert!(
        !cluster.log(&s0).contains("its own store is superseded"),
        "{}",
        cluster.log(&s0)
    );
    std::fs::remove_file(&hold).unwrap();
}

#[test]
fn a_server_out_briefly_while_its_partner_is_dead_comes_back_up() {
    // s2 dies (not yet lost); s3, its metadata standby and the other copy of the
    // files they share, serves its group. Then s3 stops (`SIGSTOP`) past its lease
    // and is called down, and goes on. s2 was down before s3 went out, so it
    // recorded nothing s3 missed: s3 catches up without it and is up, and every file
    // reads back, those with copies on s2 and s3 from s3's copies alone. Without the
    // map's account of who served nothing since s3 went out, s3 waits for s2's
    // records until s2 is lost.
    let cluster = four_with_two_copies();
    let config = cluster.config().clone();
    let (s2, s3) = (
        config.servers[2].name.clone(),
        config.servers[3].name.clone(),
    );
    assert_eq!(config.meta_group(2), vec![2, 3]);
    let tc = TestClient::new(config.clone());
    let (copies, _) = write_first(&tc, 2);
    assert!(
        copies.iter().any(|c| c.contains(&2) && c.contains(&3)),
        "no datafile has its copies on {s2} and {s3}"
    );
    cluster.kill(&s2, libc::SIGKILL);
    wait_state(&cluster, &s2, "down", scaled(Duration::from_secs(30)));
    cluster.kill(&s3, libc::SIGSTOP);
    wait_state(&cluster, &s3, "down", scaled(Duration::from_secs(30)));
    cluster.kill(&s3, libc::SIGCONT);
    wait_state(&cluster, &s3, "up", scaled(Duration::from_secs(30)));
    check_all(&tc, 0);
    let made: Vec<String> = (0..16).map(|i| format!("m{i}")).collect();
    tc.run(Duration::from_secs(120), async |c| {
        for n in &made {
            c.mkdir(&format!("/{n}"), 0o755).await.unwrap();
        }
    });
    all_there(&tc, &made);
    cluster.restart(&s2);
    all_up_with_standby_copies(&cluster);
    cluster.assert_clean();
}
