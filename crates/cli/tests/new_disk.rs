//! A replaced disk (`docs/replication.md`, "Self-healing"): four real server
//! processes made by `pvfs genconfig --replicas 2`. A server is killed, its storage
//! directory emptied (a new disk), and it is started again while a client writes
//! and reads. It must serve nothing from the empty disk (a standby takes its
//! metadata over, its copies serve no read, it hands out no handle twice) until it
//! has refilled every copy it holds from the others. Then the server that shared
//! its copies is killed, so that its copies alone serve them: every byte must be
//! there. A standby that took a group over and gets a new disk hands the group to
//! the copy that followed it; a standby evicted while its new disk renews still
//! comes back as a new disk.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::churn::{check_all, check_files, content, wait_state, write_files, write_first, Busy};
use common::TestClient;
use common::{all_up_with_standby_copies, poll, scaled, state_of, Cluster};
use pvfs_proto::codec::{decode, encode};
use pvfs_proto::{Creds, Request, RequestBody, Response, RetryKey};

/// What a server's log says once it refilled its copies.
const REFILLED: &str = "refilled every datafile this server holds a copy of";

/// What a server's log says of a metadata group it took over.
const TOOK_OVER: &str = "serving a metadata group from this server's copy, as its primary";

/// Kills server `name`, empties its storage directory (a new disk) and starts it
/// again, at once or (`down_first`) once the map calls it down.
fn replace_disk(cluster: &Cluster, name: &str, down_first: bool) {
    cluster.kill(name, libc::SIGKILL);
    cluster.empty_storage(name);
    if down_first {
        wait_state(cluster, name, "down", Duration::from_secs(30));
    }
    cluster.restart(name);
}

/// Waits until server `name` is up and has refilled its copies; the datafiles its
/// log says it refilled.
fn wait_refilled(cluster: &Cluster, name: &str) -> u64 {
    poll(
        &format!("{name} up again, its copies refilled"),
        scaled(Duration::from_secs(90)),
        || {
            (state_of(cluster, name).as_deref() == Some("up")
                && cluster.log(name).contains(REFILLED))
            .then_some(())
        },
    );
    let log = cluster.log(name);
    let line = log.lines().find(|l| l.contains(REFILLED)).unwrap();
    let field = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("datafiles="))
        .unwrap_or_else(|| panic!("no datafiles= in {line:?}"));
    field.parse().unwrap()
}

/// Runs `pvfs fsck --json` and asserts it found nothing.
fn assert_fsck_clean(cluster: &Cluster) {
    let fsck = cluster.run_cli(&["fsck", "--json"]);
    let report = fsck.json_any();
    assert_eq!(report["problems"], serde_json::json!([]), "{report}");
    assert!(fsck.status.success());
}

#[test]
fn a_new_disk_serves_nothing_until_refilled_then_holds_every_byte() {
    new_disk_under_load(0, false);
}

#[test]
fn a_new_disk_on_a_server_down_for_a_while_is_refilled_too() {
    new_disk_under_load(1, true);
}

/// The first two tests: server `v` (a member of the authority, a metadata primary,
/// a link of data chains) gets a new disk under load, back at once or once down.
fn new_disk_under_load(v: usize, down_first: bool) {
    let cluster = common::four_with_two_copies();
    let config = cluster.config().clone();
    // Its partner: its metadata standby, the next copy of its chains.
    let w = v + 1;
    let (sv, sw) = (
        config.servers[v].name.clone(),
        config.servers[w].name.clone(),
    );
    assert_eq!(config.meta_group(v), vec![v as u32, w as u32]);
    assert!(config.replication.authority.contains(&v));
    let tc = TestClient::new(config.clone());
    let (mut copies, on_v) = write_first(&tc, v);

    // It gets a new disk while a client reads the files it held copies of and
    // writes new ones: no error.
    let busy = Busy::start(&config);
    let took_over_before = cluster.log(&sw).matches(TOOK_OVER).count();
    replace_disk(&cluster, &sv, down_first);
    let refilled = wait_refilled(&cluster, &sv);
    let (made, more) = busy.finish();
    copies.extend(more);
    eprintln!("{sv} refilled {refilled} datafiles; {made} files written meanwhile");
    assert!(
        refilled >= on_v,
        "{sv} refilled {refilled} datafiles, but held copies of {on_v} before"
    );
    // Its standby took its metadata over rather than let the empty store serve.
    assert!(
        cluster.log(&sw).matches(TOOK_OVER).count() > took_over_before,
        "{sw} did not take {sv}'s metadata over:\n{}",
        cluster.log_tail(&sw)
    );
    assert!(cluster.log(&sv).contains("its own store is superseded"));
    // Its authority log went with the disk: it must vote again before its partner,
    // also a member, goes, or the authority would lose its majority.
    poll(
        &format!("{sv} voting in the authority again"),
        scaled(Duration::from_secs(30)),
        || cluster.log(&sv).contains("votes again").then_some(()),
    );

    // Its partner goes: whatever had copies on both is served by the new disk's
    // copies alone, and its metadata by its copy (a whole one, since the new disk).
    let alone = copies
        .iter()
        .filter(|c| c.contains(&(v as u32)) && c.contains(&(w as u32)))
        .count();
    assert!(alone > 0, "no datafile has its copies on {sv} and {sw}");
    cluster.kill(&sw, libc::SIGKILL);
    check_all(&tc, made);
    cluster.restart(&sw);
    all_up_with_standby_copies(&cluster);
    assert_fsck_clean(&cluster);
    cluster.assert_all_running();
    cluster.assert_no_panics();
    // Its authority log went with the disk: it was taken back as a learner and
    // votes again.
    let log = cluster.log(&sv);
    assert!(log.contains("this member's log went with its storage"));
    assert!(log.contains("votes again"));
}

/// A refill shows in `pvfs status` how far it got and the time left: it counts
/// what it will copy first, then the bytes and datafiles copied grow towards those
/// totals; once it is done nothing is shown. The copies are paced slow enough
/// (`rebuild_bandwidth`) to be seen under way.
#[test]
fn a_refill_shows_how_far_it_got_and_the_time_left() {
    let cluster = common::two_meta_of_four(&[("rebuild_bandwidth", r#""1M""#)]);
    all_up_with_standby_copies(&cluster);
    let config = cluster.config().clone();
    // A data server alone: its new disk takes no metadata group over.
    let v = 3usize;
    let sv = config.servers[v].name.clone();
    assert!(config.meta_group(v).is_empty());
    let tc = TestClient::new(config.clone());
    let (copies, mut on_v) = write_first(&tc, v);
    let more = tc.run(Duration::from_secs(120), async |c| {
        write_files(&c, "/c", 0..48).await
    });
    on_v += more.iter().filter(|c| c.contains(&(v as u32))).count() as u64;
    assert!(copies.len() + more.len() > on_v as usize);

    replace_disk(&cluster, &sv, false);
    // Under way: the words, with the time left at the rate so far ...
    let line = poll(
        &format!("{sv} showing its refill's progress"),
        scaled(Duration::from_secs(60)),
        || {
            let out = cluster.run_cli(&["status"]);
            out.stdout
                .lines()
                .find(|l| l.contains("refilling every copy: ") && l.contains(" left"))
                .map(str::to_string)
        },
    );
    assert!(line.contains(&sv), "{line}");
    assert!(line.contains(" datafiles, "), "{line}");
    // ... and the figures.
    let refill = poll(
        &format!("{sv}'s refill in the JSON"),
        scaled(Duration::from_secs(60)),
        || {
            let row = common::status_row(&cluster, &sv);
            (row["refill"]["bytes_done"].as_u64().unwrap_or(0) > 0).then(|| row["refill"].clone())
        },
    );
    let figure = |k: &str| {
        refill[k]
            .as_u64()
            .unwrap_or_else(|| panic!("no {k} in {refill}"))
    };
    assert!(
        figure("datafiles_total") >= on_v,
        "{refill}: {sv} held {on_v}"
    );
    assert!(
        figure("datafiles_done") <= figure("datafiles_total"),
        "{refill}"
    );
    assert!(figure("bytes_done") <= figure("bytes_total"), "{refill}");

    let refilled = wait_refilled(&cluster, &sv);
    assert!(refilled >= on_v, "{sv} refilled {refilled} of {on_v}");
    let row = common::status_row(&cluster, &sv);
    assert!(row["refill"].is_null(), "{row}");
    assert_fsck_clean(&cluster);
    cluster.assert_all_running();
}

/// Two partners called down together (the authority's leader paused past their
/// leases, then counted every lease again from when it went on), and one of them
/// gets a new disk while the other is still out. The new disk served nothing after
/// its partner went out, so the partner missed nothing it held: it keeps its
/// copies (it does not copy whole), takes the new disk's metadata group over while
/// it catches up, and both come back up with every byte. Without the map's account
/// of who was quiet, each waits for the other for good: the partner for a copy to
/// copy from and for the group's primary to send it a whole copy, the new disk for
/// its partner to serve its group.
#[test]
fn partners_called_down_together_come_back_when_one_gets_a_new_disk() {
    let cluster = common::four_with_two_copies();
    let config = cluster.config().clone();
    let tc = TestClient::new(config.clone());
    let (copies, _) = write_first(&tc, 0);
    let leader = poll("a leader", scaled(Duration::from_secs(10)), || {
        cluster.run_cli(&["status", "--json"]).json_any()["authority_leader"]
            .as_str()
            .map(str::to_string)
    });
    let l = config
        .servers
        .iter()
        .position(|s| s.name == leader)
        .unwrap();
    // A metadata group whose members are not the leader, nor both members of the
    // authority (the leader and the third member stay a majority): its primary
    // `p` gets the new disk, its standby `s` stays out meanwhile.
    let members = &config.replication.authority;
    let (p, s) = config
        .meta_servers()
        .into_iter()
        .map(|g| (g, config.meta_group(g)[1] as usize))
        .find(|&(g, s)| g != l && s != l && !(members.contains(&g) && members.contains(&s)))
        .unwrap();
    let (sp, ss) = (
        config.servers[p].name.clone(),
        config.servers[s].name.clone(),
    );
    assert!(
        copies
            .iter()
            .any(|c| c.contains(&(p as u32)) && c.contains(&(s as u32))),
        "no datafile has its copies on {sp} and {ss}"
    );
    let took_over_before = cluster.log(&ss).matches(TOOK_OVER).count();

    // The leader and the two stop at once; the leader goes on after three leases,
    // takes the gap for a pause of its own, and counts every lease again from
    // then (or an election does): the two lapse together, in one look.
    for n in [&leader, &sp, &ss] {
        cluster.kill(n, libc::SIGSTOP);
    }
    std::thread::sleep(Duration::from_secs(3));
    cluster.kill(&leader, libc::SIGCONT);
    poll(
        &format!("{sp} and {ss} down"),
        scaled(Duration::from_secs(30)),
        || {
            let v = cluster.run_cli(&["status", "--json"]).json_any();
            (common::map_state(&v, &sp).as_deref() == Some("down")
                && common::map_state(&v, &ss).as_deref() == Some("down"))
            .then_some(())
        },
    );

    // `p` gets a new disk while `s` is still stopped, and renews from it.
    cluster.kill(&sp, libc::SIGKILL);
    cluster.empty_storage(&sp);
    cluster.restart(&sp);
    wait_state(&cluster, &sp, "recovering", scaled(Duration::from_secs(30)));
    // `s` goes on: both come back.
    cluster.kill(&ss, libc::SIGCONT);
    wait_refilled(&cluster, &sp);
    wait_state(&cluster, &ss, "up", scaled(Duration::from_secs(60)));
    assert!(
        cluster.log(&ss).matches(TOOK_OVER).count() > took_over_before,
        "{ss} did not take {sp}'s metadata over:\n{}",
        cluster.log_tail(&ss)
    );
    assert!(
        !cluster.log(&ss).contains(REFILLED),
        "{ss} copied every datafile whole, though {sp}'s old disk held nothing it lacked"
    );
    check_all(&tc, 0);
    // Whatever had copies on both is served by the new disk's copies alone.
    cluster.kill(&ss, libc::SIGKILL);
    check_all(&tc, 0);
    cluster.restart(&ss);
    all_up_with_standby_copies(&cluster);
    assert_fsck_clean(&cluster);
    cluster.assert_clean();
}

/// Reserves one datafile handle of data server `server` as a metadata server would
/// (`Precreate`, with the file system's key, at whichever server serves `server`'s
/// metadata group now, or at `server` itself when it has none); the handle, or the
/// error.
async fn reserve_handle(config: &pvfs_config::Config, server: usize, seq: u64) -> Response {
    let body = encode(&RequestBody {
        creds: Creds::default(),
        request: Request::Precreate(pvfs_proto::req::Precreate { count: 1 }),
        retry: Some(RetryKey {
            client: 0x5eed_d15c,
            seq,
        }),
        origin: 0,
    });
    let mut last = None;
    for at in std::iter::once(server).chain(0..config.servers.len()) {
        let Some(mux) = common::raw_mux_via(config, server, at).await else {
            continue;
        };
        let mut call = mux.call(&body, &[], true).await.unwrap();
        let answer: Response = decode(&call.recv().await.unwrap().body).unwrap();
        if matches!(answer, Response::Handles { .. }) {
            return answer;
        }
        last = Some(answer);
    }
    last.expect("no server answers to the name")
}

#[test]
fn a_data_server_with_a_new_disk_hands_out_no_handle_twice() {
    // Two metadata servers; s3 holds data only, and reserves datafile handles from
    // its own store, which a new disk starts over.
    let cluster = common::two_meta_of_four(&[]);
    assert!(cluster.config().meta_group(3).is_empty());
    hands_out_no_handle_twice(&cluster, 3);
}

#[test]
fn a_metadata_and_data_server_with_a_new_disk_hands_out_no_handle_twice() {
    // s1 serves metadata too: its group's store, where its datafile handles are
    // reserved, is taken over by its standby while its own new store starts over;
    // the reservations follow the group.
    let cluster = common::with_copies(4, 2);
    assert!(!cluster.config().meta_group(1).is_empty());
    hands_out_no_handle_twice(&cluster, 1);
}

/// Server `server` of `cluster` gets a new disk: the datafile handles it reserves
/// after it are past every one it reserved before, and files stay whole.
fn hands_out_no_handle_twice(cluster: &Cluster, server: usize) {
    let config = cluster.config().clone();
    poll(
        "every server up, every metadata server with a whole copy at its standby",
        scaled(Duration::from_secs(30)),
        || {
            let up = cluster
                .names()
                .iter()
                .all(|n| state_of(cluster, n).as_deref() == Some("up"));
            let copied = config.meta_servers().iter().all(|&m| {
                cluster
                    .log(&config.servers[m].name)
                    .contains("metadata standby has a whole copy")
            });
            (up && copied).then_some(())
        },
    );
    let name = config.servers[server].name.clone();
    let tc = TestClient::new(config.clone());
    tc.run(Duration::from_secs(120), async |c| {
        write_files(&c, "/a", 0..24).await;
    });
    // The handles it handed out so far: below the next one it reserves.
    let before = match tc.block_on(reserve_handle(&config, server, 1)) {
        Response::Handles { first, .. } => first,
        other => panic!("Precreate on {name}: {other:?}"),
    };
    replace_disk(cluster, &name, false);
    wait_refilled(cluster, &name);
    let after = poll(
        &format!("{name} reserving handles again"),
        scaled(Duration::from_secs(30)),
        || match tc.block_on(reserve_handle(&config, server, 2)) {
            Response::Handles { first, .. } => Some(first),
            Response::Error { errno, .. }
                if pvfs_proto::Errno(errno) == pvfs_proto::Errno::EAGAIN =>
            {
                None
            }
            other => panic!("Precreate on {name} after its new disk: {other:?}"),
        },
    );
    assert!(
        after > before,
        "{name}'s new disk handed out {after:#x}, not past {before:#x}, which it had handed out before"
    );
    // Files made since, and those from before, are whole; fsck finds nothing.
    tc.run(Duration::from_secs(120), async |c| {
        write_files(&c, "/c", 0..24).await;
        check_files(&c, "/a", 0..24).await;
        check_files(&c, "/c", 0..24).await;
    });
    assert_fsck_clean(cluster);
    cluster.assert_all_running();
}

#[test]
fn a_server_whose_records_went_with_new_disks_refills_whole() {
    // Five servers, three copies: s2 is down while files are written, and the two
    // servers that recorded what it missed of the files whose copies are on s2, s3
    // and s4 get new disks one after the other, each refilled from the other. The
    // bytes s2 missed are on them, but no record of its absence is: back, s2 must
    // copy whole, or it would serve what it held before. (All five are members of
    // the authority: each new disk votes again before the next server goes, so that
    // three members vote throughout.)
    let cluster = common::with_copies(5, 3);
    let config = cluster.config().clone();
    let name = |i: usize| config.servers[i].name.clone();
    let tc = TestClient::new(config.clone());
    // Every file is written twice: once with s2 up, then again with s2 down, so
    // s2's stale copy differs from the file everywhere.
    let n = 12;
    let set = [2u32, 3, 4];
    tc.run(Duration::from_secs(120), async |c| {
        write_files(&c, "/old-", 0..n).await;
    });
    cluster.kill(&name(2), libc::SIGKILL);
    wait_state(&cluster, &name(2), "down", Duration::from_secs(30));
    let copies = tc.run(Duration::from_secs(120), async |c| {
        for i in 0..n {
            let (from, to) = (format!("/old-{i}"), format!("/f{i}"));
            let f = c.open(&from).await.unwrap();
            f.write_at(0, &content("/f", i)).await.unwrap();
            f.fsync().await.unwrap();
            c.rename(&from, &to).await.unwrap();
        }
        let mut copies = Vec::new();
        for i in 0..n {
            let f = c.open(&format!("/f{i}")).await.unwrap();
            copies.extend(f.layout().datafiles.iter().map(|d| {
                let mut r: Vec<u32> = d.replicas().collect();
                r.sort_unstable();
                r
            }));
        }
        copies
    });
    let on_234 = copies.iter().filter(|c| **c == set).count();
    assert!(on_234 > 0, "no datafile has its copies on s2, s3 and s4");
    for i in [3, 4] {
        replace_disk(&cluster, &name(i), false);
        wait_refilled(&cluster, &name(i));
        poll(
            &format!("{} a voting member of the authority again", name(i)),
            scaled(Duration::from_secs(30)),
            || cluster.log(&name(i)).contains("votes again").then_some(()),
        );
    }
    cluster.restart(&name(2));
    wait_state(&cluster, &name(2), "up", Duration::from_secs(30));
    // s3 and s4 go: the files whose copies are on s2, s3 and s4 are served by s2's
    // copies alone.
    cluster.kill(&name(3), libc::SIGKILL);
    cluster.kill(&name(4), libc::SIGKILL);
    tc.run(Duration::from_secs(120), async |c| {
        check_files(&c, "/f", 0..n).await;
    });
    assert!(
        cluster.log(&name(2)).contains(REFILLED),
        "{} did not refill its copies",
        name(2)
    );
    cluster.restart(&name(3));
    cluster.restart(&name(4));
    all_up_with_standby_copies(&cluster);
    assert_fsck_clean(&cluster);
    cluster.assert_all_running();
}

/// Four names of directories in the root whose entries server `owner`'s
/// metadata group holds.
fn names_on(config: &pvfs_config::Config, owner: usize, prefix: &str) -> Vec<String> {
    let root = config.root_handle();
    let shards = config.meta_servers().len() as u32;
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|n| config.entry_server(root, shards, n) == owner)
        .take(4)
        .collect()
}

/// Makes directory `/{n}` for every name of `names`: none may fail.
fn mkdirs(tc: &TestClient, names: &[String]) {
    tc.run(Duration::from_secs(60), async |c| {
        for n in names {
            c.mkdir(&format!("/{n}"), 0o755)
                .await
                .unwrap_or_else(|e| panic!("mkdir /{n}: {e}"));
        }
    })
}

/// Server `owner` is killed and its metadata standby `standby` takes its group
/// over and serves it; `owner`, started again, follows it and is up once it holds
/// a whole copy. Directories in the group are made before, between and after;
/// their names.
fn standby_leads_and_owner_follows(
    cluster: &Cluster,
    tc: &TestClient,
    owner: usize,
    standby: usize,
) -> Vec<String> {
    let config = cluster.config();
    assert_eq!(config.meta_group(owner), vec![owner as u32, standby as u32]);
    let (so, ss) = (
        config.servers[owner].name.clone(),
        config.servers[standby].name.clone(),
    );
    let mut all = names_on(config, owner, "a");
    mkdirs(tc, &all);
    let took = cluster.log(&ss).matches(TOOK_OVER).count();
    cluster.kill(&so, libc::SIGKILL);
    poll(
        &format!("{ss} serving {so}'s metadata"),
        scaled(Duration::from_secs(30)),
        || (cluster.log(&ss).matches(TOOK_OVER).count() > took).then_some(()),
    );
    let more = names_on(config, owner, "b");
    mkdirs(tc, &more);
    all.extend(more);
    // Back, its group stays with the standby, which it follows.
    cluster.restart(&so);
    poll(
        &format!("{so} up again, following {ss}"),
        scaled(Duration::from_secs(60)),
        || {
            (state_of(cluster, &so).as_deref() == Some("up")
                && cluster.log(&so).contains("its own store is superseded"))
            .then_some(())
        },
    );
    let more = names_on(config, owner, "c");
    mkdirs(tc, &more);
    all.extend(more);
    all
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

#[test]
fn a_group_led_by_a_standby_that_gets_a_new_disk_goes_back_to_its_own_server() {
    // s1, s0's standby, takes s0's metadata over while s0 is away; s0 comes back
    // and follows it. Then s1 gets a new disk and is started again before its
    // lease runs out: the map still names it for s0's group, but its store holds
    // nothing of it. s0's copy holds every acknowledged change: s0 serves the
    // group again, and every server routes its calls there (s1's refill reads the
    // group's layouts too).
    let cluster = Cluster::builder()
        .servers(4)
        .replicas(2)
        // Long enough that s1, killed and started again, renews before the
        // authority calls it down.
        .set("lease", r#""3s""#)
        .start();
    all_up_with_standby_copies(&cluster);
    let config = cluster.config().clone();
    let (s0, s1) = (
        config.servers[0].name.clone(),
        config.servers[1].name.clone(),
    );
    assert_eq!(config.meta_group(0), vec![0, 1]);
    let tc = TestClient::new(config.clone());
    // s0 goes: s1 takes its group over and serves it; s0 back follows it.
    let mut all = standby_leads_and_owner_follows(&cluster, &tc, 0, 1);

    // s1 gets a new disk and is back at once, while a client makes and renames
    // directories in a loop (a quarter of the names in s0's group): none fails.
    let took = cluster.log(&s0).matches(TOOK_OVER).count();
    let stop = Arc::new(AtomicBool::new(false));
    let creating = {
        let (config, stop) = (config.clone(), stop.clone());
        std::thread::spawn(move || {
            let tc = TestClient::new(config);
            tc.run(Duration::from_secs(300), async |c| {
                let mut made = Vec::new();
                while !stop.load(Ordering::Relaxed) || made.len() < 20 {
                    // Made, then renamed: most renames cross metadata groups, so
                    // one server calls another's group, routed by its map.
                    let (name, moved) = (format!("l{}", made.len()), format!("m{}", made.len()));
                    c.mkdir(&format!("/{name}"), 0o755)
                        .await
                        .unwrap_or_else(|e| panic!("mkdir /{name}: {e}"));
                    c.rename(&format!("/{name}"), &format!("/{moved}"))
                        .await
                        .unwrap_or_else(|e| panic!("rename /{name} /{moved}: {e}"));
                    made.push(moved);
                }
                made
            })
        })
    };
    std::thread::sleep(scaled(Duration::from_millis(500)));
    cluster.kill(&s1, libc::SIGKILL);
    cluster.empty_storage(&s1);
    cluster.restart(&s1);
    // s0 serves its group again, from the copy it followed, within a few leases.
    poll(
        &format!("{s0} serving its own metadata again"),
        scaled(Duration::from_secs(30)),
        || (cluster.log(&s0).matches(TOOK_OVER).count() > took).then_some(()),
    );
    std::thread::sleep(scaled(Duration::from_secs(1)));
    stop.store(true, Ordering::Relaxed);
    all.extend(creating.join().unwrap());
    all_there(&tc, &all);
    let more = names_on(&config, 0, "d");
    mkdirs(&tc, &more);
    all.extend(more);
    all_there(&tc, &all);
    // s1 refills, follows every group it stands by for, and is up.
    wait_refilled(&cluster, &s1);
    all_up_with_standby_copies(&cluster);
    all_there(&TestClient::new(config.clone()), &all);
    cluster.assert_all_running();
    cluster.assert_no_panics();
}

#[test]
fn a_server_called_down_while_its_partner_is_on_a_new_disk_takes_its_group_back() {
    // s0, s3's standby, takes s3's metadata over while s3 is away; s3 comes back
    // and follows it. Then s3 is stopped, and s0 gets a new disk and is back at
    // once; s3 stays stopped until the map calls it down. s0 has served nothing
    // since its disk was replaced, so s3's copy, which followed s0 to its end,
    // holds every acknowledged change: once continued, s3 serves its group
    // again, and s0 refills and is up. (The failover storm found it: without the
    // map's record that s0 spared s3, s3 came up with a copy no longer
    // following, s0 waited for another copy to serve the group, and s3 for s0 to
    // send it a whole copy.) s3 is no member of the authority, so the two others
    // carry it while s0 is taken back.
    let cluster = Cluster::builder()
        .servers(4)
        .replicas(2)
        // Long enough that s0, killed and started again, renews before the
        // authority calls it down.
        .set("lease", r#""3s""#)
        // A patience (half of it) past the lease: s3, stopped, is called down
        // before s2, whose group it stands by for, evicts it (an evicted server
        // is spared by nobody).
        .request_timeout("20s")
        .start();
    all_up_with_standby_copies(&cluster);
    let config = cluster.config().clone();
    let (s0, s3) = (
        config.servers[0].name.clone(),
        config.servers[3].name.clone(),
    );
    assert_eq!(config.meta_group(3), vec![3, 0]);
    assert!(!config.replication.authority.contains(&3));
    let tc = TestClient::new(config.clone());
    // s3 goes: s0 takes its group over and serves it; s3 back follows it.
    let mut all = standby_leads_and_owner_follows(&cluster, &tc, 3, 0);

    // s3 stopped; s0 gets a new disk and is back at once; s3 called down.
    let took = cluster.log(&s3).matches(TOOK_OVER).count();
    cluster.kill(&s3, libc::SIGSTOP);
    cluster.kill(&s0, libc::SIGKILL);
    cluster.empty_storage(&s0);
    cluster.restart(&s0);
    wait_state(&cluster, &s3, "down", Duration::from_secs(30));
    cluster.kill(&s3, libc::SIGCONT);
    // s3 serves its own group again, from the copy it followed.
    poll(
        &format!("{s3} serving its own metadata again"),
        scaled(Duration::from_secs(60)),
        || (cluster.log(&s3).matches(TOOK_OVER).count() > took).then_some(()),
    );
    all_there(&tc, &all);
    let more = names_on(&config, 3, "d");
    mkdirs(&tc, &more);
    all.extend(more);
    // s0 refills, follows every group it stands by for, and is up.
    wait_refilled(&cluster, &s0);
    all_up_with_standby_copies(&cluster);
    all_there(&TestClient::new(config.clone()), &all);
    cluster.assert_all_running();
    cluster.assert_no_panics();
}

#[test]
fn a_new_disk_on_a_standby_evicted_meanwhile_is_still_a_new_disk() {
    // s1, s0's metadata standby, is killed while s0 makes changes, and its storage
    // emptied: s0 evicts it (it confirms nothing while the map keeps it), so the
    // authority refuses its renewals until it is down. It is started again in the
    // meantime, and its refused renewals bring the new disk's id. Once down, it
    // must still come back as a new disk, refilling every copy (recorded while
    // refused, the id made it come back as its old disk, with empty copies taken
    // for whole ones).
    let cluster = Cluster::builder()
        .servers(4)
        .replicas(2)
        // Long enough that s1 is started again before the authority calls it down;
        // the patience before an eviction is half the request timeout.
        .set("lease", r#""4s""#)
        .request_timeout("2s")
        .start();
    all_up_with_standby_copies(&cluster);
    let config = cluster.config().clone();
    let (s0, s1) = (
        config.servers[0].name.clone(),
        config.servers[1].name.clone(),
    );
    assert_eq!(config.meta_group(0), vec![0, 1]);
    let tc = TestClient::new(config.clone());
    let copies = tc.run(Duration::from_secs(120), async |c| {
        write_files(&c, "/a", 0..12).await
    });
    assert!(copies.iter().any(|c| c.contains(&1)));

    // A directory whose object is in s0's group: changing its mode is a change of
    // that group alone, which s0 answers once its standby holds it.
    let dir = tc.run(Duration::from_secs(60), async |c| {
        for i in 0.. {
            let path = format!("/d{i}");
            c.mkdir(&path, 0o755).await.unwrap();
            let a = c.stat(&path).await.unwrap();
            if config.owner_of(a.handle) == Some(0) {
                return a.handle;
            }
        }
        unreachable!()
    });
    // A client changes it in a loop while s1 goes: none fails.
    let stop = Arc::new(AtomicBool::new(false));
    let creating = {
        let (config, stop) = (config.clone(), stop.clone());
        std::thread::spawn(move || {
            let tc = TestClient::new(config);
            tc.run(Duration::from_secs(300), async |c| {
                let mut made = 0u32;
                while !stop.load(Ordering::Relaxed) || made < 20 {
                    let set = pvfs_proto::SetAttr {
                        mode: Some(0o700 | (made % 64)),
                        ..Default::default()
                    };
                    c.setattr_lite(dir, set)
                        .await
                        .unwrap_or_else(|e| panic!("chmod {dir:#x}: {e}"));
                    made += 1;
                }
                made
            })
        })
    };
    std::thread::sleep(scaled(Duration::from_millis(500)));
    cluster.kill(&s1, libc::SIGKILL);
    cluster.empty_storage(&s1);
    poll(
        &format!("{s0} evicting {s1}"),
        scaled(Duration::from_secs(30)),
        || {
            cluster
                .log(&s0)
                .contains("a metadata standby did not confirm a change")
                .then_some(())
        },
    );
    assert_ne!(
        state_of(&cluster, &s1).as_deref(),
        Some("down"),
        "{s1} down before it was started again: the test needs a longer lease"
    );
    cluster.restart(&s1);
    poll(
        &format!("{s1}'s renewals refused"),
        scaled(Duration::from_secs(30)),
        || {
            cluster
                .log(&s1)
                .contains("lease renewal failed")
                .then_some(())
        },
    );
    stop.store(true, Ordering::Relaxed);
    let made = creating.join().unwrap();
    // Down, then back: refilled, up.
    wait_refilled(&cluster, &s1);
    // Each other server goes in turn: the files whose other copy was on it are
    // served by s1's copies alone, and every byte is there.
    for other in [0, 2, 3] {
        let name = config.servers[other].name.clone();
        cluster.kill(&name, libc::SIGKILL);
        tc.run(Duration::from_secs(120), async |c| {
            check_files(&c, "/a", 0..12).await;
        });
        cluster.restart(&name);
        all_up_with_standby_copies(&cluster);
    }
    assert!(made >= 20);
    assert_fsck_clean(&cluster);
    cluster.assert_all_running();
}
