//! An authority of one member (a test file system): leader at once, a server's whole life.

use super::*;
use crate::{Command, Error};

const PARAMS: Params = Params {
    lease: Duration::from_secs(1),
    rebuild_after: Duration::from_millis(500),
    data_servers: Vec::new(),
    meta_servers: Vec::new(),
    servers: 0,
    domains: Vec::new(),
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_member_leads_at_once_and_runs_a_servers_whole_life() {
    logs();
    let c = Cluster::start(&[0], 2, PARAMS).await;
    // No election timeout to wait for: the only voter elects itself at once.
    let leader = c.leader(Duration::from_secs(3)).await;
    assert_eq!(leader, 0);
    let _me = Renewing::start(c.renewer(0, 1), PARAMS.lease);
    let other = c.renewer(1, 5);
    let (until, map) = other.renew().await.unwrap();
    assert_eq!((map.version, map.servers[1].incarnation), (0, 5));

    // Silent: down once its lease ran out (not while it held), lost rebuild_after later.
    let within = PARAMS.lease + Duration::from_secs(2);
    let (map, before_down) = c.wait_state(0, 1, State::Down, until, within).await;
    assert_eq!(map.version, 1);
    let lost_from = before_down + PARAMS.rebuild_after;
    let within = PARAMS.rebuild_after + Duration::from_secs(2);
    let (map, _) = c.wait_state(0, 1, State::Lost, lost_from, within).await;
    assert_eq!((map.version, map.servers[1].since), (2, 2));

    // Back as a new process: recovering, then up once caught up.
    let other = c.renewer(1, 6);
    let (_, map) = other.renew().await.unwrap();
    let s = &map.servers[1];
    assert_eq!(
        (map.version, s.state, s.joined, s.incarnation),
        (3, State::Recovering, 3, 6)
    );
    let stale = Command::CaughtUp {
        server: 1,
        incarnation: 5,
        recovering_since: 0,
    };
    assert_eq!(
        other.propose(stale).await.unwrap().version,
        3,
        "another incarnation's CaughtUp"
    );
    let map = other
        .propose(Command::CaughtUp {
            server: 1,
            incarnation: 6,
            recovering_since: 0,
        })
        .await
        .unwrap();
    assert_eq!((map.version, map.servers[1].state), (4, State::Up));

    // Drained and retired: no lease any more.
    other
        .propose(Command::Drain {
            server: 1,
            heirs: Vec::new(),
            meta_heirs: Vec::new(),
            domains: Vec::new(),
        })
        .await
        .unwrap();
    let map = other.propose(Command::Retire { server: 1 }).await.unwrap();
    assert_eq!((map.version, map.servers[1].state), (6, State::Retired));
    assert!(matches!(other.renew().await, Err(Error::Refused)));
    // The renewing member itself stayed up throughout.
    let map = c.node(0).map();
    assert_eq!((map.servers[0].state, map.servers[0].since), (State::Up, 0));
    c.stop_all().await;
}
