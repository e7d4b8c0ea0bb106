//! The leader cut off: a new one takes over, the map moves on, live leases hold.

use super::*;
use crate::{ELECTION_MAX, HEARTBEAT};

const PARAMS: Params = Params {
    lease: Duration::from_secs(2),
    rebuild_after: Duration::from_secs(600),
    data_servers: Vec::new(),
    meta_servers: Vec::new(),
    servers: 0,
    domains: Vec::new(),
};

/// The longest a live server may go without a valid lease across the failover, given
/// how many election rounds it took.
///
/// A server renews every `L/4` = 0.5 s and holds each lease `L - margin` = 1.9 s from its
/// sending, so at the cut it holds one until at least `cut + 1.4 s`. openraft 0.9's
/// followers stand for election only after its leader lease (`ELECTION_MAX`, 0.6 s) plus
/// a random election timeout (0.3–0.6 s) without a heartbeat, seen at its tick (every
/// 1.5 heartbeats, 150 ms): a first round wins by `cut + 1.35 s` and the retried renewal
/// is granted milliseconds later, so a single round leaves no lapse at all. Each further
/// round (a split vote) waits one more election timeout and tick (≤ 0.75 s). 0.45 s is
/// left for slow machines (fsyncs, scheduling).
fn lapse_bound(rounds: u64) -> Duration {
    let tick = HEARTBEAT * 3 / 2;
    let first =
        (ELECTION_MAX + ELECTION_MAX + tick).saturating_sub(held(&PARAMS) - PARAMS.lease / 4);
    first + (ELECTION_MAX + tick) * (rounds.max(1) - 1) as u32 + Duration::from_millis(450)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cutting_the_leader_elects_another_that_marks_it_down_while_live_leases_hold() {
    logs();
    let c = Cluster::start(&[0, 1, 2], 4, PARAMS).await;
    let old = c.leader(Duration::from_secs(15)).await;
    let old_term = c.node(old).raft().metrics().borrow().current_term;
    let renewing: Vec<_> = (0..4)
        .map(|s| Renewing::start(c.renewer(s, 100 + s), PARAMS.lease))
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;

    let cut = Instant::now();
    c.net.cut(old);
    let new = c.leader(Duration::from_secs(15)).await;
    let elected = Instant::now();
    assert_ne!(new, old);
    let new_term = c.node(new).raft().metrics().borrow().current_term;
    assert!(new_term > old_term);

    // The old leader's server renews no more (it is cut off): the new leader marks it
    // down a lease after its election, not before the old lease may have run out.
    // Its last lease was sent before the cut, so it ran out before `cut + L - margin`.
    let down_by = elected + PARAMS.lease + Duration::from_millis(1500);
    let within = down_by.saturating_duration_since(Instant::now());
    let (map, _) = c
        .wait_state(new, old as usize, State::Down, cut + held(&PARAMS), within)
        .await;
    assert_eq!(map.version, 1, "{map:?}");
    let live: Vec<NodeId> = (0..4).filter(|&s| s != old).collect();
    for &s in &live {
        assert_eq!(map.servers[s as usize].state, State::Up, "server {s}");
    }
    // Both remaining members agree.
    for &m in c.members.iter().filter(|&&m| m != old) {
        c.wait_map(m, Duration::from_secs(5), "the old leader down", |m| {
            m.servers[old as usize].state == State::Down
        })
        .await;
    }

    // Live servers kept a valid lease through the failover but for a bounded lapse.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let end = Instant::now();
    let rounds = new_term - old_term;
    let bound = lapse_bound(rounds);
    for (s, r) in renewing.into_iter().enumerate() {
        let grants = r.stop();
        if s as NodeId == old {
            continue;
        }
        let lapse = longest_lapse(&grants, cut - Duration::from_millis(500), end);
        println!(
            "server {s}: longest lapse {lapse:?} (bound {bound:?}, {rounds} election rounds, \
             new leader after {:?})",
            elected - cut
        );
        assert!(lapse <= bound, "server {s}: lease lapsed for {lapse:?}");
        // And renewals resumed for good under the new leader.
        assert!(grants.iter().any(|g| g.got > elected), "server {s}");
    }
    c.stop_all().await;
}
