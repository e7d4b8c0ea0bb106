//! The lease table's decisions, with made-up moments.

use super::*;

const PARAMS: Params = Params {
    lease: Duration::from_secs(2),
    rebuild_after: Duration::from_secs(10),
    data_servers: Vec::new(),
    meta_servers: Vec::new(),
    servers: 0,
    domains: Vec::new(),
};

fn ms(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

#[test]
fn a_new_leader_counts_every_lease_from_its_election() {
    let t0 = Instant::now();
    let l = Leases::default();
    let map = Map::new(2);
    l.lead(3, t0, 40, 2);
    assert!(l.decide(&map, ms(t0, 1999), &PARAMS).is_empty());
    let cmds = l.decide(&map, ms(t0, 2000), &PARAMS);
    assert_eq!(
        cmds,
        vec![
            Command::Down {
                server: 0,
                unless_renewed_after: 40,
                lapsed: vec![(1, 40)],
            },
            Command::Down {
                server: 1,
                unless_renewed_after: 40,
                lapsed: vec![(0, 40)],
            },
        ]
    );
    // Leading on in the same term changes nothing; a new term starts over.
    l.lead(3, ms(t0, 2000), 50, 2);
    assert_eq!(l.decide(&map, ms(t0, 2000), &PARAMS).len(), 2);
    l.follow();
    l.lead(5, ms(t0, 2100), 60, 2);
    assert!(l.decide(&map, ms(t0, 4099), &PARAMS).is_empty());
    assert_eq!(l.decide(&map, ms(t0, 4100), &PARAMS).len(), 2);
}

#[test]
fn a_recorded_renewal_postpones_down_and_names_its_index() {
    let t0 = Instant::now();
    let l = Leases::default();
    let mut map = Map::new(1);
    l.lead(1, t0, 10, 1);
    // `renewed` records Instant::now(), which is after t0.
    l.renewed(0, 12);
    map.servers[0].renewed = 12;
    let now = Instant::now();
    assert!(l
        .decide(&map, now + PARAMS.lease - Duration::from_millis(1), &PARAMS)
        .is_empty());
    assert_eq!(
        l.decide(&map, now + PARAMS.lease, &PARAMS),
        vec![Command::Down {
            server: 0,
            unless_renewed_after: 12,
            lapsed: Vec::new(),
        }]
    );
}

#[test]
fn a_renewal_seen_only_in_the_map_counts_from_when_it_is_seen() {
    let t0 = Instant::now();
    let l = Leases::default();
    let mut map = Map::new(1);
    l.lead(1, t0, 10, 1);
    // A renewal applied (by a predecessor's commit, or one not recorded yet).
    map.servers[0].renewed = 15;
    assert!(l.decide(&map, ms(t0, 1500), &PARAMS).is_empty());
    assert!(l.decide(&map, ms(t0, 3499), &PARAMS).is_empty());
    assert_eq!(
        l.decide(&map, ms(t0, 3500), &PARAMS),
        vec![Command::Down {
            server: 0,
            unless_renewed_after: 15,
            lapsed: Vec::new(),
        }]
    );
}

#[test]
fn down_servers_are_lost_after_rebuild_after_from_when_this_leader_saw_them() {
    let t0 = Instant::now();
    let l = Leases::default();
    let mut map = Map::new(3);
    map.version = 2;
    map.servers[1].state = State::Down;
    map.servers[2].state = State::Retired;
    l.lead(1, t0, 10, 3);
    let serving = |cmds: Vec<Command>| {
        cmds.into_iter()
            .filter(|c| c.server() != 0)
            .collect::<Vec<_>>()
    };
    assert!(serving(l.decide(&map, ms(t0, 100), &PARAMS)).is_empty());
    assert!(serving(l.decide(&map, ms(t0, 10_099), &PARAMS)).is_empty());
    assert_eq!(
        serving(l.decide(&map, ms(t0, 10_100), &PARAMS)),
        vec![Command::Lost {
            server: 1,
            heirs: Vec::new(),
            meta_heirs: Vec::new(),
            domains: Vec::new(),
        }]
    );
    // Back meanwhile, then down again: the count starts over.
    map.servers[1].state = State::Recovering;
    l.decide(&map, ms(t0, 10_200), &PARAMS);
    map.servers[1].state = State::Down;
    assert!(serving(l.decide(&map, ms(t0, 10_300), &PARAMS)).is_empty());
    assert!(serving(l.decide(&map, ms(t0, 20_299), &PARAMS)).is_empty());
    assert_eq!(serving(l.decide(&map, ms(t0, 20_300), &PARAMS)).len(), 1);
}

#[test]
fn a_pause_counts_every_lease_again_from_its_end() {
    let t0 = Instant::now();
    let l = Leases::default();
    let map = Map::new(2);
    l.lead(1, t0, 10, 2);
    // Beats close together are no pause.
    for at in (0..=1000).step_by(50) {
        assert!(!l.beat(ms(t0, at)));
    }
    // Then nothing ran for 1.5 s: without the pause both would be down at 2000.
    assert!(l.beat(ms(t0, 2500)));
    assert!(l.decide(&map, ms(t0, 2500), &PARAMS).is_empty());
    assert!(l.decide(&map, ms(t0, 4499), &PARAMS).is_empty());
    assert_eq!(l.decide(&map, ms(t0, 4500), &PARAMS).len(), 2);
    // A beat just within the gap is none; one just past it is.
    assert!(!l.beat(ms(t0, 2500) + PAUSED_AFTER));
    assert!(l.beat(ms(t0, 2501) + PAUSED_AFTER * 2));
}

#[test]
fn the_leader_grows_the_map_to_added_data_servers_but_not_to_added_metadata_servers() {
    let t0 = Instant::now();
    let l = Leases::default();
    let map = Map::new(2);
    l.lead(1, t0, 10, 2);
    // The configuration has the map's servers: nothing to grow.
    let same = Params {
        data_servers: vec![0, 1],
        meta_servers: vec![0],
        servers: 2,
        ..PARAMS
    };
    assert!(l.decide(&map, ms(t0, 1), &same).is_empty());
    // Two data servers added at its end.
    let grown = Params {
        data_servers: vec![0, 1, 2, 3],
        servers: 4,
        ..same.clone()
    };
    assert_eq!(
        l.decide(&map, ms(t0, 1), &grown),
        vec![Command::Grow { servers: 4 }]
    );
    // One of them a metadata server: the map stays as it is.
    let meta = Params {
        meta_servers: vec![0, 3],
        ..grown.clone()
    };
    assert!(l.decide(&map, ms(t0, 1), &meta).is_empty());
    // A configuration with fewer servers than the map never shrinks it.
    let fewer = Params {
        data_servers: vec![0],
        servers: 1,
        ..same
    };
    assert!(l.decide(&map, ms(t0, 1), &fewer).is_empty());
}

#[test]
fn a_down_names_every_other_server_whose_lease_lapsed_then() {
    // Server 0 serving and silent, server 1 down and silent, server 2 renewed late:
    // 0's `Down` names 1 (and the index it accounted for), not 2, whose lease holds.
    let t0 = Instant::now();
    let l = Leases::default();
    let mut map = Map::new(3);
    map.servers[1].state = State::Down;
    l.lead(1, t0, 10, 3);
    map.servers[2].renewed = 14;
    // Seen in the map at 1500 ms: counted from then.
    assert!(l.decide(&map, ms(t0, 1500), &PARAMS).is_empty());
    assert_eq!(
        l.decide(&map, ms(t0, 2000), &PARAMS),
        vec![Command::Down {
            server: 0,
            unless_renewed_after: 10,
            lapsed: vec![(1, 10)],
        }]
    );
    // Once 2's lease lapsed too, both name each other.
    let cmds = l.decide(&map, ms(t0, 3500), &PARAMS);
    assert_eq!(
        cmds,
        vec![
            Command::Down {
                server: 0,
                unless_renewed_after: 10,
                lapsed: vec![(1, 10), (2, 14)],
            },
            Command::Down {
                server: 2,
                unless_renewed_after: 14,
                lapsed: vec![(0, 10), (1, 10)],
            },
        ]
    );
}
