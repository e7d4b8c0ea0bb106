//! Snapshots, purged logs, a member catching up from a snapshot, and restarts.

use super::*;
use crate::{Command, SNAPSHOT_EVERY};
use openraft::RaftMetrics;

/// Long leases: nothing is marked down while these tests look (they do not renew all
/// the time).
const PARAMS: Params = Params {
    lease: Duration::from_secs(20),
    rebuild_after: Duration::from_secs(600),
    data_servers: Vec::new(),
    meta_servers: Vec::new(),
    servers: 0,
    domains: Vec::new(),
};

const ELECT: Duration = Duration::from_secs(15);

fn metrics(c: &Cluster, n: NodeId) -> RaftMetrics<NodeId, openraft::EmptyNode> {
    c.node(n).raft().metrics().borrow().clone()
}

/// Commits more renewals than a snapshot's worth, several at a time, from `servers`.
async fn many_renewals(c: &Cluster, servers: &[NodeId]) {
    let per_task = SNAPSHOT_EVERY / 8 + 20;
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let s = servers[t % servers.len()];
            let r = c.renewer(s, 100 + s);
            tokio::spawn(async move {
                for _ in 0..per_task {
                    r.renew().await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// Waits until member `n`'s raft has built or installed a snapshot and purged its log.
async fn wait_snapshot(c: &Cluster, n: NodeId) -> RaftMetrics<NodeId, openraft::EmptyNode> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = metrics(c, n);
        if m.snapshot.is_some() && m.purged.is_some() {
            return m;
        }
        assert!(Instant::now() < deadline, "member {n}: no snapshot: {m:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restarting_every_member_keeps_the_map_from_snapshot_and_log() {
    logs();
    let c = Cluster::start(&[0, 1, 2], 4, PARAMS).await;
    let leader = c.leader(ELECT).await;
    many_renewals(&c, &[0, 1, 2, 3]).await;
    // Some state changes, after the snapshot so they live in the log only.
    let r = c.renewer(3, 103);
    r.propose(Command::Drain {
        server: 3,
        heirs: Vec::new(),
        meta_heirs: Vec::new(),
        domains: Vec::new(),
    })
    .await
    .unwrap();
    let map = r.propose(Command::Retire { server: 3 }).await.unwrap();
    assert_eq!(map.version, 2);
    assert_eq!(map.servers[3].state, State::Retired);
    let before_metrics = wait_snapshot(&c, leader).await;
    // Log indices start at 0: a snapshot holding `SNAPSHOT_EVERY` entries ends at index
    // `SNAPSHOT_EVERY - 1` at the earliest (openraft counts entries, not the last index).
    let snapshot = before_metrics.snapshot.expect("wait_snapshot saw one");
    assert!(
        snapshot.index + 1 >= SNAPSHOT_EVERY,
        "the snapshot holds fewer than {SNAPSHOT_EVERY} entries: {snapshot:?}"
    );
    let want = c.node(leader).map();
    for &m in &c.members {
        c.wait_map(m, Duration::from_secs(10), "the leader's map", |m| {
            *m == want
        })
        .await;
    }

    c.stop_all().await;
    c.start_all().await;

    let leader = c.leader(ELECT).await;
    for &m in &c.members {
        // The same map, renewals and incarnations included (nobody renewed since).
        let got = c
            .wait_map(
                m,
                Duration::from_secs(10),
                "the map before the restart",
                |m| *m == want,
            )
            .await;
        assert_eq!(got.version, 2);
    }
    // The log before the snapshot stayed purged; the snapshot came back from the file.
    let after = metrics(&c, leader);
    assert!(after.purged.is_some(), "{after:?}");
    assert!(after.snapshot.is_some(), "{after:?}");
    // And it keeps working: a retired server is still refused, others still granted.
    assert!(c.renewer(3, 103).renew().await.is_err());
    let (_, map) = c.renewer(1, 101).renew().await.unwrap();
    assert_eq!(map.version, 2);
    c.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_behind_the_purged_log_catches_up_from_a_snapshot() {
    logs();
    let c = Cluster::start(&[0, 1, 2], 4, PARAMS).await;
    let leader = c.leader(ELECT).await;
    let behind = *c.members.iter().find(|&&m| m != leader).unwrap();
    c.net.cut(behind);
    // From the servers not cut off (a member cut off cannot renew either).
    let others: Vec<NodeId> = (0..4).filter(|&s| s != behind).collect();
    many_renewals(&c, &others).await;
    let map = c
        .renewer(3, 103)
        .propose(Command::Drain {
            server: 3,
            heirs: Vec::new(),
            meta_heirs: Vec::new(),
            domains: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(map.version, 1);
    let leader = c.leader(ELECT).await;
    let lm = wait_snapshot(&c, leader).await;
    let purged = lm.purged.unwrap().index;
    let applied_behind = metrics(&c, behind).last_applied.map_or(0, |l| l.index);
    assert!(
        applied_behind < purged,
        "the member cut off is behind the purged log: {applied_behind} < {purged}"
    );

    c.net.heal(behind);
    // Reconnected, it may disturb the term once (it stood for election while alone);
    // the log it lacks is gone, so it gets the leader's snapshot.
    let leader = c.leader(ELECT).await;
    let want = c.node(leader).map();
    c.wait_map(behind, Duration::from_secs(15), "the leader's map", |m| {
        *m == want
    })
    .await;
    let m = metrics(&c, behind);
    let installed = m.snapshot.expect("the member installed a snapshot");
    assert!(installed.index >= purged, "{m:?}");
    c.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_whose_log_went_with_its_disk_votes_only_once_taken_back() {
    logs();
    let c = Cluster::start(&[0, 1, 2], 3, PARAMS).await;
    c.leader(ELECT).await;
    for s in 0..3 {
        c.renewer_on(s, 100 + s, 500 + s).renew().await.unwrap();
    }
    // Member 0, the lowest (the one that forms a new authority), gets a new disk.
    c.replace_disk(0, 999).await;
    // Its own map is empty: it did not form an authority of its own. It grants no
    // vote: it may have voted in this term before, and forgot.
    assert_eq!(c.node(0).map().version, 0);
    let ask = crate::wire::Request::Vote(openraft::raft::VoteRequest::new(
        openraft::Vote::new(1000, 1),
        None,
    ));
    let answer = c.node(0).handle(&ask.encode().unwrap()).await;
    assert!(
        matches!(
            crate::wire::Reply::decode(&answer),
            Ok(crate::wire::Reply::Failed(_))
        ),
        "a member that forgot its log answered a vote"
    );
    // It is taken back: a learner, then a voter once it holds the leader's log.
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        let l = c.leader(ELECT).await;
        let m = metrics(&c, l);
        let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
        if voters == [0, 1, 2] && c.node(l).taken_back().contains(&0) {
            break l;
        }
        assert!(Instant::now() < deadline, "member 0 not taken back: {m:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(leader, 0, "a member that forgot its log led");
    assert_eq!(c.node(0).standing().get(), crate::rejoin::Standing::Voting);
    let want = c.node(leader).map();
    c.wait_map(0, Duration::from_secs(10), "the leader's map", |m| {
        *m == want
    })
    .await;
    assert_eq!(want.servers[0].storage, 500, "the old disk, as renewed");
    // With member 0 voting again, the authority goes on without another member.
    let other = *[1, 2].iter().find(|&&m| m != leader).unwrap();
    c.net.cut(leader);
    let next = c.leader(ELECT).await;
    assert_ne!(next, leader);
    let (_, map) = c
        .renewer_on(other, 100 + other, 500 + other)
        .renew()
        .await
        .unwrap();
    assert_eq!(map.servers[other as usize].storage, 500 + other);
    c.net.heal(leader);
    c.stop_all().await;
}
