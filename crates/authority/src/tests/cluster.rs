//! Three members: leases granted, a silent server marked down and back.

use super::*;
use crate::{Command, Error};

/// Leases of 2 s, as the configuration's default.
const PARAMS: Params = Params {
    lease: Duration::from_secs(2),
    rebuild_after: Duration::from_secs(600),
    data_servers: Vec::new(),
    meta_servers: Vec::new(),
    servers: 0,
    domains: Vec::new(),
};

/// Generous: an election takes at most ~2.2 s with openraft's leader lease, and slow
/// machines add to it.
const ELECT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_members_grant_every_servers_lease_and_the_map_stays_at_version_zero() {
    logs();
    let c = Cluster::start(&[0, 1, 2], 4, PARAMS).await;
    let leader = c.leader(ELECT).await;
    assert!(c.members.contains(&leader));
    // Members 0..2 and server 3, which is no member, renew through whichever member.
    let renewing: Vec<_> = (0..4)
        .map(|s| Renewing::start(c.renewer(s, 100 + s), PARAMS.lease))
        .collect();
    let start = Instant::now();
    // Longer than a lease: had any renewal gone unrecorded, its server would be down.
    tokio::time::sleep(PARAMS.lease + Duration::from_millis(700)).await;
    let end = Instant::now();
    for (s, r) in renewing.into_iter().enumerate() {
        let grants = r.stop();
        assert!(grants.len() >= 4, "server {s}: {} grants", grants.len());
        // The first grant comes at once, and then the lease never lapses.
        assert!(grants[0].got - start < Duration::from_secs(1), "server {s}");
        let lapse = longest_lapse(&grants, grants[0].got, end);
        assert_eq!(lapse, Duration::ZERO, "server {s}");
    }
    for &m in &c.members {
        let map = c
            .wait_map(m, Duration::from_secs(5), "every incarnation seen", |map| {
                map.servers
                    .iter()
                    .enumerate()
                    .all(|(s, e)| e.incarnation == 100 + s as u64)
            })
            .await;
        assert_eq!(map.version, 0, "member {m}: {map:?}");
        assert_eq!(states(&map), vec![State::Up; 4], "member {m}");
        assert!(map.servers.iter().all(|s| s.since == 0 && s.joined == 0));
        assert!(map.servers.iter().all(|s| s.renewed > 0));
    }
    // Any member answers with its map; a renewal for a server the map does not have is refused.
    let fetched = c.renewer(3, 103).fetch_map().await.unwrap();
    assert_eq!(fetched.version, 0);
    let stranger = c.renewer(9, 1).renew().await;
    assert!(matches!(stranger, Err(Error::Refused)), "{stranger:?}");
    c.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_server_is_down_after_its_lease_and_recovers_when_it_renews_again() {
    logs();
    let c = Cluster::start(&[0, 1, 2], 4, PARAMS).await;
    c.leader(ELECT).await;
    let _members: Vec<_> = (0..3)
        .map(|s| Renewing::start(c.renewer(s, 100 + s), PARAMS.lease))
        .collect();
    // Server 3 renews a few times, then falls silent.
    let quiet = c.renewer(3, 7);
    let mut last = None;
    for _ in 0..3 {
        let (until, map) = quiet.renew().await.unwrap();
        assert_eq!(map.version, 0);
        last = Some(until);
        tokio::time::sleep(PARAMS.lease / 4).await;
    }
    let until = last.unwrap();
    let sent = until - held(&PARAMS);
    // Not down while its lease may still hold at the server: no member's map says so at
    // any look that ended before then.
    loop {
        let maps: Vec<Map> = c.members.iter().map(|&m| c.node(m).map()).collect();
        if Instant::now() >= until {
            break;
        }
        for (m, map) in maps.iter().enumerate() {
            let s = map.servers[3].state;
            assert_ne!(s, State::Down, "member {m}: down before its lease ran out");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Down soon after the lease ran out at the authority (the leader counts from the
    // commit, checks every 100 ms, and the Down commits in milliseconds).
    let leader = c.leader(ELECT).await;
    let down_by = sent + PARAMS.lease + Duration::from_millis(1500);
    let within = down_by.saturating_duration_since(Instant::now());
    let (map, _) = c.wait_state(leader, 3, State::Down, until, within).await;
    assert_eq!(map.version, 1);
    assert_eq!((map.servers[3].since, map.servers[3].joined), (1, 0));
    assert_eq!(
        &states(&map)[..3],
        &[State::Up; 3],
        "the renewing ones stay up"
    );
    // It renews again: granted, and recovering (it missed what happened meanwhile).
    let (_, map) = quiet.renew().await.unwrap();
    assert_eq!(map.version, 2);
    let s = &map.servers[3];
    assert_eq!((s.state, s.since, s.joined), (State::Recovering, 2, 2));
    // Caught up: up again.
    let map = quiet
        .propose(Command::CaughtUp {
            server: 3,
            incarnation: 7,
            recovering_since: 0,
        })
        .await
        .unwrap();
    assert_eq!(map.version, 3);
    let s = &map.servers[3];
    assert_eq!((s.state, s.since, s.joined), (State::Up, 3, 2));
    // A server cannot mark another down: only the leader's lease table does.
    let forged = quiet
        .propose(Command::Down {
            server: 0,
            unless_renewed_after: u64::MAX,
            lapsed: Vec::new(),
        })
        .await;
    assert!(matches!(forged, Err(Error::Rejected(_))), "{forged:?}");
    // Every member ends with the same map.
    let want = c.node(leader).map();
    for &m in &c.members {
        c.wait_map(m, Duration::from_secs(5), "the leader's map", |m| {
            m.version == want.version && states(m) == states(&want)
        })
        .await;
    }
    c.stop_all().await;
}
