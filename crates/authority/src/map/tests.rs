//! Every rule of [`Map::apply`], from every state.

use super::*;

const ALL: [State; 6] = [
    State::Up,
    State::Down,
    State::Lost,
    State::Recovering,
    State::Draining,
    State::Retired,
];

/// A map of three servers at version 10 where server 1 is in `state`, seen as incarnation 7,
/// last renewed at log index 40.
fn with(state: State) -> Map {
    let mut m = Map::new(3);
    m.version = 10;
    m.servers[1] = ServerEntry {
        state,
        since: 5,
        joined: 3,
        incarnation: 7,
        renewed: 40,
        led_by: None,
        unserved: false,
        served_by: None,
        evicted: false,
        storage: 0,
        fresh: false,
        refill: false,
        heirs: Vec::new(),
        meta_heirs: Vec::new(),
        domains: Vec::new(),
        quiet: Vec::new(),
        spared_by: Vec::new(),
        lost_at: 0,
        left_at: 0,
        leaving: false,
        rebuilt_at: 0,
        grown: false,
        hands: Vec::new(),
    };
    m
}

/// Applies `cmd` at log index 50 to server 1 in `state`; the result and the new map.
fn run(state: State, cmd: Command) -> (Applied, Map) {
    let mut m = with(state);
    let a = m.apply(&cmd, 50);
    (a, m)
}

/// Asserts server 1 entered `to` at version 11 and nothing else but `renewed`/`incarnation`/`joined` moved.
fn assert_entered(m: &Map, to: State) {
    assert_eq!(m.version, 11);
    assert_eq!(m.servers[1].state, to);
    assert_eq!(m.servers[1].since, 11);
    assert_eq!(m.servers[0], Map::new(3).servers[0]);
    assert_eq!(m.servers[2], Map::new(3).servers[2]);
}

/// Asserts the map is exactly what it was, but for server 1's `renewed`.
fn assert_untouched(m: &Map, state: State) {
    let mut want = with(state);
    want.servers[1].renewed = m.servers[1].renewed;
    assert_eq!(*m, want);
}

#[test]
fn new_map_is_all_up_at_version_zero() {
    let m = Map::new(4);
    assert_eq!(m.version, 0);
    assert_eq!(m.servers.len(), 4);
    for s in &m.servers {
        assert_eq!(
            *s,
            ServerEntry {
                state: State::Up,
                since: 0,
                joined: 0,
                incarnation: 0,
                renewed: 0,
                led_by: None,
                unserved: false,
                served_by: None,
                evicted: false,
                storage: 0,
                fresh: false,
                refill: false,
                heirs: Vec::new(),
                meta_heirs: Vec::new(),
                domains: Vec::new(),
                quiet: Vec::new(),
                spared_by: Vec::new(),
                lost_at: 0,
                left_at: 0,
                leaving: false,
                rebuilt_at: 0,
                grown: false,
                hands: Vec::new(),
            }
        );
    }
}

#[test]
fn encode_decode_round_trip_and_refuse_garbage() {
    let mut m = with(State::Draining);
    m.apply(
        &Command::Down {
            server: 1,
            unless_renewed_after: 40,
            lapsed: Vec::new(),
        },
        41,
    );
    assert_eq!(Map::decode(&m.encode()).unwrap(), m);
    assert!(matches!(
        Map::decode(b"{\"version\":"),
        Err(Error::Decode(_))
    ));
    // An entry from a version the map has not reached is not a map the authority made.
    let mut bad = Map::new(1);
    bad.servers[0].since = 1;
    assert!(matches!(Map::decode(&bad.encode()), Err(Error::Decode(_))));
}

#[test]
fn renew_same_incarnation_grants_without_change() {
    for state in [State::Up, State::Recovering, State::Draining] {
        let (a, m) = run(
            state,
            Command::Renew {
                server: 1,
                incarnation: 7,
                storage: 0,
            },
        );
        assert_eq!(a, Applied::Granted, "{state:?}");
        assert_untouched(&m, state);
        assert_eq!(m.servers[1].renewed, 50, "renewed is the Renew's log index");
    }
}

#[test]
fn renew_first_sight_records_the_incarnation() {
    let mut m = Map::new(2);
    let a = m.apply(
        &Command::Renew {
            server: 1,
            incarnation: 99,
            storage: 0,
        },
        3,
    );
    assert_eq!(a, Applied::Granted);
    assert_eq!(m.version, 0, "first sight is no change of state");
    assert_eq!(m.servers[1].state, State::Up);
    assert_eq!(m.servers[1].incarnation, 99);
    assert_eq!(m.servers[1].renewed, 3);
    assert_eq!(m.servers[0], Map::new(2).servers[0]);
}

#[test]
fn renew_after_restart_of_up_or_draining_is_recovering() {
    for state in [State::Up, State::Draining] {
        let (a, m) = run(
            state,
            Command::Renew {
                server: 1,
                incarnation: 8,
                storage: 0,
            },
        );
        assert_eq!(a, Applied::Granted, "{state:?}");
        assert_entered(&m, State::Recovering);
        assert_eq!(m.servers[1].joined, 11);
        assert_eq!(m.servers[1].incarnation, 8);
        assert_eq!(m.servers[1].renewed, 50);
    }
}

#[test]
fn renew_after_restart_while_recovering_stays_recovering_as_the_new_process() {
    let (a, m) = run(
        State::Recovering,
        Command::Renew {
            server: 1,
            incarnation: 8,
            storage: 0,
        },
    );
    assert_eq!(a, Applied::Granted);
    assert_eq!(m.version, 10, "no change of state, no new version");
    assert_eq!(m.servers[1].state, State::Recovering);
    assert_eq!(m.servers[1].incarnation, 8);
    assert_eq!(m.servers[1].joined, 3);
    // Only the new process's CaughtUp counts now.
    let mut m2 = m.clone();
    assert_eq!(
        m2.apply(
            &Command::CaughtUp {
                server: 1,
                incarnation: 7,
                recovering_since: 0,
            },
            51
        ),
        Applied::Unchanged
    );
    assert_eq!(m2, m);
}

#[test]
fn renew_of_down_or_lost_is_recovering_whatever_the_incarnation() {
    for state in [State::Down, State::Lost] {
        for incarnation in [7, 8] {
            let (a, m) = run(
                state,
                Command::Renew {
                    server: 1,
                    incarnation,
                    storage: 0,
                },
            );
            assert_eq!(a, Applied::Granted, "{state:?}");
            assert_entered(&m, State::Recovering);
            assert_eq!(m.servers[1].joined, 11);
            assert_eq!(m.servers[1].incarnation, incarnation);
            assert_eq!(m.servers[1].renewed, 50);
        }
    }
}

#[test]
fn renew_of_retired_or_unknown_is_refused() {
    let (a, m) = run(
        State::Retired,
        Command::Renew {
            server: 1,
            incarnation: 7,
            storage: 0,
        },
    );
    assert_eq!(a, Applied::Refused);
    assert_untouched(&m, State::Retired);
    let (a, m) = run(
        State::Up,
        Command::Renew {
            server: 3,
            incarnation: 7,
            storage: 0,
        },
    );
    assert_eq!(a, Applied::Refused);
    assert_eq!(m, with(State::Up));
    let (a, _) = run(
        State::Up,
        Command::Renew {
            server: u64::MAX,
            incarnation: 7,
            storage: 0,
        },
    );
    assert_eq!(a, Applied::Refused);
}

#[test]
fn down_marks_a_serving_server_not_renewed_since() {
    for state in ALL {
        for unless in [40, 45] {
            let (a, m) = run(
                state,
                Command::Down {
                    server: 1,
                    unless_renewed_after: unless,
                    lapsed: Vec::new(),
                },
            );
            if state.serving() {
                assert_eq!(a, Applied::Changed, "{state:?}");
                assert_entered(&m, State::Down);
                assert_eq!(m.servers[1].joined, 3, "going down is no join");
            } else {
                assert_eq!(a, Applied::Unchanged, "{state:?}");
                assert_untouched(&m, state);
            }
        }
    }
}

#[test]
fn renew_committed_between_decision_and_down_wins() {
    // The leader decides at renewed = 40; a Renew lands at 45 before the Down at 50.
    let mut m = with(State::Up);
    assert_eq!(
        m.apply(
            &Command::Renew {
                server: 1,
                incarnation: 7,
                storage: 0,
            },
            45
        ),
        Applied::Granted
    );
    let before = m.clone();
    let a = m.apply(
        &Command::Down {
            server: 1,
            unless_renewed_after: 40,
            lapsed: Vec::new(),
        },
        50,
    );
    assert_eq!(a, Applied::Unchanged);
    assert_eq!(m, before);
    // Straight: unless_renewed_after < renewed is a no-op from every serving state.
    for state in [State::Up, State::Recovering, State::Draining] {
        let (a, m) = run(
            state,
            Command::Down {
                server: 1,
                unless_renewed_after: 39,
                lapsed: Vec::new(),
            },
        );
        assert_eq!(a, Applied::Unchanged, "{state:?}");
        assert_untouched(&m, state);
    }
}

#[test]
fn lost_only_from_down() {
    for state in ALL {
        let (a, m) = run(
            state,
            Command::Lost {
                server: 1,
                heirs: Vec::new(),
                meta_heirs: Vec::new(),
                domains: Vec::new(),
            },
        );
        if state == State::Down {
            assert_eq!(a, Applied::Changed);
            assert_entered(&m, State::Lost);
        } else {
            assert_eq!(a, Applied::Unchanged, "{state:?}");
            assert_untouched(&m, state);
        }
    }
}

#[test]
fn caught_up_only_from_recovering_with_its_incarnation() {
    for state in ALL {
        for incarnation in [7, 8] {
            let (a, m) = run(
                state,
                Command::CaughtUp {
                    server: 1,
                    incarnation,
                    recovering_since: 0,
                },
            );
            if state == State::Recovering && incarnation == 7 {
                assert_eq!(a, Applied::Changed);
                assert_entered(&m, State::Up);
                assert_eq!(m.servers[1].joined, 3, "caught up is not a new join");
            } else {
                assert_eq!(a, Applied::Unchanged, "{state:?} {incarnation}");
                assert_untouched(&m, state);
            }
        }
    }
}

#[test]
fn drain_only_from_up() {
    for state in ALL {
        let (a, m) = run(
            state,
            Command::Drain {
                server: 1,
                heirs: Vec::new(),
                meta_heirs: Vec::new(),
                domains: Vec::new(),
            },
        );
        if state == State::Up {
            assert_eq!(a, Applied::Changed);
            assert_entered(&m, State::Draining);
        } else {
            assert_eq!(a, Applied::Unchanged, "{state:?}");
            assert_untouched(&m, state);
        }
    }
}

#[test]
fn retire_only_from_draining_or_lost() {
    for state in ALL {
        let (a, m) = run(state, Command::Retire { server: 1 });
        if matches!(state, State::Draining | State::Lost) {
            assert_eq!(a, Applied::Changed);
            assert_entered(&m, State::Retired);
        } else {
            assert_eq!(a, Applied::Unchanged, "{state:?}");
            assert_untouched(&m, state);
        }
    }
}

#[test]
fn commands_for_unknown_servers_change_nothing() {
    let cmds = [
        Command::Down {
            server: 3,
            unless_renewed_after: u64::MAX,
            lapsed: Vec::new(),
        },
        Command::Lost {
            server: 3,
            heirs: Vec::new(),
            meta_heirs: Vec::new(),
            domains: Vec::new(),
        },
        Command::CaughtUp {
            server: 3,
            incarnation: 0,
            recovering_since: 0,
        },
        Command::Drain {
            server: 3,
            heirs: Vec::new(),
            meta_heirs: Vec::new(),
            domains: Vec::new(),
        },
        Command::Retire { server: 3 },
    ];
    for cmd in cmds {
        let mut m = with(State::Down);
        assert_eq!(m.apply(&cmd, 50), Applied::Unchanged, "{cmd:?}");
        assert_eq!(m, with(State::Down));
    }
}

#[test]
fn a_server_lives_a_whole_life() {
    let mut m = Map::new(2);
    let renew = |incarnation| Command::Renew {
        server: 0,
        incarnation,
        storage: 0,
    };
    assert_eq!(m.apply(&renew(5), 1), Applied::Granted);
    let down = Command::Down {
        server: 0,
        unless_renewed_after: 1,
        lapsed: Vec::new(),
    };
    assert_eq!(m.apply(&down, 2), Applied::Changed);
    assert_eq!((m.version, m.servers[0].state), (1, State::Down));
    assert_eq!(
        m.apply(
            &Command::Lost {
                server: 0,
                heirs: Vec::new(),
                meta_heirs: Vec::new(),
                domains: Vec::new(),
            },
            3
        ),
        Applied::Changed
    );
    assert_eq!(m.apply(&renew(6), 4), Applied::Granted);
    assert_eq!((m.version, m.servers[0].state), (3, State::Recovering));
    assert_eq!(m.servers[0].joined, 3);
    let caught_up = Command::CaughtUp {
        server: 0,
        incarnation: 6,
        recovering_since: 0,
    };
    assert_eq!(m.apply(&caught_up, 5), Applied::Changed);
    assert_eq!(
        m.apply(
            &Command::Drain {
                server: 0,
                heirs: Vec::new(),
                meta_heirs: Vec::new(),
                domains: Vec::new(),
            },
            6
        ),
        Applied::Changed
    );
    assert_eq!(m.apply(&Command::Retire { server: 0 }, 7), Applied::Changed);
    assert_eq!(m.apply(&renew(6), 8), Applied::Refused);
    assert_eq!(
        (m.version, m.servers[0].state, m.servers[0].since),
        (6, State::Retired, 6)
    );
    assert_eq!(m.servers[1], Map::new(2).servers[1]);
}

#[test]
fn versions_only_grow_and_move_exactly_with_states() {
    // A long pseudo-random run of every command on every server (and one past the end).
    let mut m = Map::new(4);
    let mut next = draws(0x9e37_79b9_7f4a_7c15);
    for index in 1..20_000u64 {
        let server = next(5);
        let cmd = match next(6) {
            0 => Command::Renew {
                server,
                incarnation: 1 + next(3),
                // Mostly the first disk; now and then a second one, or none sent.
                storage: [1, 1, 1, 1, 2, 0][next(6) as usize],
            },
            1 => Command::Down {
                server,
                unless_renewed_after: index.saturating_sub(next(40)),
                lapsed: {
                    let mut l = Vec::new();
                    for s in 0..5 {
                        if next(2) == 0 {
                            l.push((s, index.saturating_sub(next(40))));
                        }
                    }
                    l
                },
            },
            2 => Command::Lost {
                server,
                heirs: Vec::new(),
                meta_heirs: Vec::new(),
                domains: Vec::new(),
            },
            3 => Command::CaughtUp {
                server,
                incarnation: 1 + next(3),
                recovering_since: 0,
            },
            4 => Command::Drain {
                server,
                heirs: Vec::new(),
                meta_heirs: Vec::new(),
                domains: Vec::new(),
            },
            _ => Command::Retire { server },
        };
        let before = m.clone();
        let a = m.apply(&cmd, index);
        // A replaced disk while recovering changes `fresh`, not the state; a
        // renewal of a quiet server changes who is quiet.
        let states = |m: &Map| {
            m.servers
                .iter()
                .map(|s| (s.state, s.fresh, s.since, s.quiet.clone()))
                .collect::<Vec<_>>()
        };
        let changed = states(&before) != states(&m);
        assert!(m.version >= before.version);
        assert_eq!(m.version, before.version + u64::from(changed), "{cmd:?}");
        if a == Applied::Changed {
            assert!(changed);
        }
        if matches!(a, Applied::Unchanged | Applied::Refused) {
            assert!(!changed);
        }
        m.check().unwrap();
        if m.servers.iter().all(|s| s.state == State::Retired) {
            // Retired is for good: start the servers over (the version goes on).
            m.servers = Map::new(4).servers;
        }
    }
    assert!(m.version > 1000, "the run moved states: {}", m.version);
}

#[test]
fn a_caught_up_from_before_a_later_fall_is_void() {
    let mut m = Map::new(2);
    let renew = Command::Renew {
        server: 0,
        incarnation: 5,
        storage: 0,
    };
    let down = |after| Command::Down {
        server: 0,
        unless_renewed_after: after,
        lapsed: Vec::new(),
    };
    assert_eq!(m.apply(&renew, 1), Applied::Granted);
    assert_eq!(m.apply(&down(1), 2), Applied::Changed);
    assert_eq!(m.apply(&renew, 3), Applied::Granted);
    assert_eq!(m.servers[0].state, State::Recovering);
    let first = m.servers[0].since;
    // It caught up under that stay, but its report was on its way while it went
    // down and came back: it missed writes since, so the report is void.
    assert_eq!(m.apply(&down(3), 4), Applied::Changed);
    assert_eq!(m.apply(&renew, 5), Applied::Granted);
    assert_eq!(m.servers[0].state, State::Recovering);
    let caught_up = |since| Command::CaughtUp {
        server: 0,
        incarnation: 5,
        recovering_since: since,
    };
    let before = m.clone();
    assert_eq!(m.apply(&caught_up(first), 6), Applied::Unchanged);
    assert_eq!(m, before);
    let second = m.servers[0].since;
    assert!(second > first);
    assert_eq!(m.apply(&caught_up(second), 7), Applied::Changed);
    assert_eq!(m.servers[0].state, State::Up);
}

#[test]
fn lead_moves_a_group_only_away_from_a_primary_that_does_not_serve() {
    // Server 1's group, taken by server 2: only while 1 does not serve and 2 does.
    for state in ALL {
        let (a, m) = run(
            state,
            Command::Lead {
                group: 1,
                server: 2,
            },
        );
        if state.serving() {
            assert_eq!(a, Applied::Unchanged, "{state:?}");
            assert_untouched(&m, state);
        } else {
            assert_eq!(a, Applied::Changed, "{state:?}");
            assert_eq!(m.version, 11);
            assert_eq!(m.servers[1].led_by, Some(2));
            assert_eq!(m.primary(1), 2);
            assert_eq!(m.servers[1].state, state, "the state stays");
        }
    }
    // A taker that does not serve never leads.
    let mut m = with(State::Down);
    m.servers[2].state = State::Down;
    assert_eq!(
        m.apply(
            &Command::Lead {
                group: 1,
                server: 2
            },
            50
        ),
        Applied::Unchanged
    );
    // Once moved, the group follows its new primary: server 1 back (serving) cannot
    // take it back while 2 serves, and a third server takes it only when 2 stops.
    let (_, mut m) = run(
        State::Down,
        Command::Lead {
            group: 1,
            server: 2,
        },
    );
    m.servers[1].state = State::Recovering;
    assert_eq!(
        m.apply(
            &Command::Lead {
                group: 1,
                server: 1
            },
            51
        ),
        Applied::Unchanged
    );
    assert_eq!(
        m.apply(
            &Command::Lead {
                group: 1,
                server: 0
            },
            52
        ),
        Applied::Unchanged
    );
    m.servers[2].state = State::Down;
    assert_eq!(
        m.apply(
            &Command::Lead {
                group: 1,
                server: 1
            },
            53
        ),
        Applied::Changed
    );
    assert_eq!(m.servers[1].led_by, None, "back home: led by itself");
    assert_eq!(m.primary(1), 1);
    // Unknown groups or servers change nothing.
    for cmd in [
        Command::Lead {
            group: 9,
            server: 2,
        },
        Command::Lead {
            group: 1,
            server: 9,
        },
    ] {
        let (a, m) = run(State::Down, cmd);
        assert_eq!(a, Applied::Unchanged);
        assert_untouched(&m, State::Down);
    }
}

#[test]
fn decode_refuses_a_group_led_by_itself_or_nobody() {
    for bad in [1, 3] {
        let mut m = with(State::Down);
        m.servers[1].led_by = Some(bad);
        assert!(Map::decode(&m.encode()).is_err(), "led by {bad}");
    }
    // Maps written before groups could move have no `led_by`: led by themselves.
    let old = br#"{"version":1,"servers":[{"state":"Up","since":0,"joined":0,"incarnation":0,"renewed":0}]}"#;
    let m = Map::decode(old).expect("an older map");
    assert_eq!(m.primary(0), 0);
}

#[test]
fn an_evicted_server_gets_no_lease_until_it_is_down_and_comes_back_recovering() {
    for state in ALL {
        let (a, m) = run(state, Command::Evict { server: 1 });
        if !state.serving() {
            assert_eq!(a, Applied::Unchanged, "{state:?}");
            assert_untouched(&m, state);
            continue;
        }
        assert_eq!(a, Applied::Changed, "{state:?}");
        assert_eq!((m.version, m.servers[1].evicted), (11, true));
        assert_eq!(
            m.servers[1].state, state,
            "the state stays until the lease ends"
        );
        // Its renewals are refused, whatever its incarnation; evicting again changes
        // nothing.
        let mut m = m;
        for inc in [7, 8] {
            let renew = Command::Renew {
                server: 1,
                incarnation: inc,
                storage: 0,
            };
            assert_eq!(m.apply(&renew, 51), Applied::Refused);
        }
        assert_eq!(
            m.apply(&Command::Evict { server: 1 }, 52),
            Applied::Unchanged
        );
        // Down once its lease ran out (no renewal since 40); then a renewal brings
        // it back recovering, with a lease.
        let down = Command::Down {
            server: 1,
            unless_renewed_after: 40,
            lapsed: Vec::new(),
        };
        assert_eq!(m.apply(&down, 53), Applied::Changed);
        assert!(!m.servers[1].evicted);
        let renew = Command::Renew {
            server: 1,
            incarnation: 7,
            storage: 0,
        };
        assert_eq!(m.apply(&renew, 54), Applied::Granted);
        assert_eq!(m.servers[1].state, State::Recovering);
    }
}

#[test]
fn a_renewal_from_a_replaced_disk_comes_back_fresh_and_everyone_out_refills() {
    let renew = |server, incarnation, storage| Command::Renew {
        server,
        incarnation,
        storage,
    };
    for state in [State::Up, State::Draining, State::Down, State::Lost] {
        let mut m = Map::new(4);
        for s in 0..4 {
            assert_eq!(m.apply(&renew(s, 5, 100 + s), 1), Applied::Granted);
        }
        assert_eq!(m.version, 0, "first sight of each disk changes nothing");
        assert!(m.servers.iter().all(|e| !e.fresh && !e.refill));
        m.servers[1].state = state;
        // Server 3 is down: the records others keep of what it missed matter.
        m.servers[3].state = State::Down;
        // The same disk after a restart: an ordinary rejoin, nothing to refill
        // (but after being lost: nobody recorded what it missed since).
        let mut same = m.clone();
        same.apply(&renew(1, 6, 101), 2);
        assert!(
            !same.servers[1].fresh && same.servers[1].refill == (state == State::Lost),
            "{state:?}"
        );
        // A new disk: recovering, fresh, refilling; server 3, out of its chains,
        // refills too (the new disk lost its records of what 3 missed); server 0,
        // up, in every chain, does not.
        assert_eq!(m.apply(&renew(1, 6, 999), 2), Applied::Granted);
        let e = &m.servers[1];
        assert_eq!(
            (e.state, e.fresh, e.refill),
            (State::Recovering, true, true)
        );
        assert_eq!((e.storage, e.incarnation, e.joined), (999, 6, m.version));
        assert!(m.servers[3].refill && !m.servers[3].fresh);
        assert!(!m.servers[0].refill && !m.servers[2].refill);
        // Caught up: up, nothing left to refill.
        let cmd = Command::CaughtUp {
            server: 1,
            incarnation: 6,
            recovering_since: m.servers[1].since,
        };
        assert_eq!(m.apply(&cmd, 3), Applied::Changed);
        let e = &m.servers[1];
        assert_eq!((e.state, e.fresh, e.refill), (State::Up, false, false));
    }
    // Replaced while still recovering: a new map, so a `CaughtUp` sent before is void.
    let mut m = Map::new(2);
    m.apply(&renew(1, 5, 100), 1);
    m.version = 3;
    m.servers[1].state = State::Recovering;
    m.servers[1].since = 3;
    let since = m.servers[1].since;
    assert_eq!(m.apply(&renew(1, 6, 200), 2), Applied::Granted);
    assert_eq!(m.version, 4);
    assert!(m.servers[1].fresh && m.servers[1].since != since);
    let late = Command::CaughtUp {
        server: 1,
        incarnation: 6,
        recovering_since: since,
    };
    assert_eq!(m.apply(&late, 3), Applied::Unchanged);
    // A retired server stays retired, whatever disk it brings.
    let mut m = Map::new(2);
    m.apply(&renew(1, 5, 100), 1);
    m.servers[1].state = State::Retired;
    assert_eq!(m.apply(&renew(1, 6, 200), 2), Applied::Refused);
    assert!(!m.servers[1].fresh);
}

#[test]
fn a_new_disk_on_a_server_quiet_since_another_went_out_spares_it() {
    // Servers 2 and 3 lapse together (the leader decided both `Down`s at once);
    // then 2 comes back with a new disk. 2 served nothing after 3 went out, so its
    // old disk held nothing 3 lacks: 3 keeps its copies and records (no refill), and
    // may take 2's group over while it catches up.
    let renew = |server, incarnation, storage| Command::Renew {
        server,
        incarnation,
        storage,
    };
    let down = |server, unless, lapsed: Vec<(NodeId, u64)>| Command::Down {
        server,
        unless_renewed_after: unless,
        lapsed,
    };
    let start = || {
        let mut m = Map::new(4);
        for s in 0..4 {
            assert_eq!(m.apply(&renew(s, 5, 100 + s), 10 + s), Applied::Granted);
        }
        m
    };
    let mut m = start();
    assert_eq!(m.apply(&down(2, 12, vec![(3, 13)]), 20), Applied::Changed);
    assert_eq!(
        m.apply(&down(3, 13, vec![(2, 12), (0, 9)]), 21),
        Applied::Changed
    );
    assert_eq!(
        m.servers[3].quiet,
        vec![(2, 12)],
        "0 renewed since: not quiet"
    );
    // 3 comes back first (same disk), recovering; then 2 with a new disk.
    assert_eq!(m.apply(&renew(3, 5, 103), 22), Applied::Granted);
    assert_eq!(m.apply(&renew(2, 6, 999), 23), Applied::Granted);
    assert!(m.servers[2].fresh && m.servers[2].refill);
    let e = &m.servers[3];
    assert_eq!(
        (e.state, e.refill, e.spared_by.clone()),
        (State::Recovering, false, vec![2])
    );
    // Recovering, 3 takes over the group of the primary whose disk spared it (the
    // server's takeover asks for a recovering taker only then).
    assert_eq!(m.apply(&lead(2, 3), 24), Applied::Changed);
    assert_eq!(m.primary(2), 3);
    // Up again: nothing of that absence is kept but that 2, still on its new
    // disk, spared it.
    let since = m.servers[3].since;
    let caught_up = Command::CaughtUp {
        server: 3,
        incarnation: 5,
        recovering_since: since,
    };
    assert_eq!(m.apply(&caught_up, 25), Applied::Changed);
    assert!(m.servers[3].quiet.is_empty());
    assert_eq!(m.servers[3].spared_by, vec![2]);

    // Negative: 2 had a renewal granted after 3 went out (it may have taken writes
    // 3 missed, recorded on the disk it lost): 3 refills, and takes no group over
    // while recovering.
    let mut m = start();
    assert_eq!(m.apply(&down(3, 13, vec![(2, 12)]), 20), Applied::Changed);
    assert_eq!(m.apply(&renew(2, 5, 102), 21), Applied::Granted);
    assert_eq!(m.apply(&down(2, 21, vec![]), 22), Applied::Changed);
    assert_eq!(m.apply(&renew(3, 5, 103), 23), Applied::Granted);
    assert_eq!(m.apply(&renew(2, 6, 999), 24), Applied::Granted);
    assert!(m.servers[3].refill && m.servers[3].spared_by.is_empty());

    // A renewal granted between the leader's decision and the `Down`'s commit
    // makes that server not quiet either.
    let mut m = start();
    assert_eq!(m.apply(&renew(2, 5, 102), 20), Applied::Granted);
    assert_eq!(m.apply(&down(3, 13, vec![(2, 12)]), 21), Applied::Changed);
    assert!(m.servers[3].quiet.is_empty());

    // Down again while still recovering: only those quiet all along stay quiet.
    let mut m = start();
    assert_eq!(
        m.apply(&down(3, 13, vec![(1, 11), (2, 12)]), 20),
        Applied::Changed
    );
    assert_eq!(m.apply(&renew(3, 5, 103), 21), Applied::Granted);
    assert_eq!(m.apply(&renew(1, 5, 101), 22), Applied::Granted);
    assert_eq!(
        m.apply(&down(3, 21, vec![(1, 22), (2, 12)]), 23),
        Applied::Changed
    );
    assert_eq!(m.servers[3].quiet, vec![(2, 12)]);

    // A renewal granted to a quiet server takes it off every list, in a new map.
    let mut m = start();
    assert_eq!(
        m.apply(&down(3, 13, vec![(1, 11), (2, 12)]), 20),
        Applied::Changed
    );
    let v = m.version;
    assert_eq!(m.apply(&renew(1, 5, 101), 21), Applied::Granted);
    assert_eq!(
        (m.servers[3].quiet.clone(), m.version),
        (vec![(2, 12)], v + 1)
    );

    // An evicted server goes out with nobody quiet: its primaries answered
    // without its copies before.
    let mut m = start();
    assert_eq!(m.apply(&Command::Evict { server: 3 }, 20), Applied::Changed);
    assert_eq!(m.apply(&down(3, 13, vec![(2, 12)]), 21), Applied::Changed);
    assert!(m.servers[3].quiet.is_empty());

    // A restart while up starts an absence without a `Down`: nobody is quiet.
    let mut m = start();
    assert_eq!(m.apply(&down(3, 13, vec![(2, 12)]), 20), Applied::Changed);
    assert_eq!(m.apply(&renew(3, 5, 103), 21), Applied::Granted);
    let since = m.servers[3].since;
    m.apply(
        &Command::CaughtUp {
            server: 3,
            incarnation: 5,
            recovering_since: since,
        },
        22,
    );
    m.servers[3].quiet = vec![(2, 12)]; // as if left over
    assert_eq!(m.apply(&renew(3, 6, 103), 23), Applied::Granted);
    assert!(m.servers[3].quiet.is_empty());
}

#[test]
fn a_server_still_on_a_new_disk_spares_one_that_goes_out_after_it() {
    // 1 led 0's group while 0 was out; 0 came back and followed it. Then 1 came
    // back with a new disk, and 0 was called down (a stall of the authority's
    // commits) before it took the group over. 1 served nothing since its disk
    // was replaced, so 0's copy, which followed 1 to its end, holds every change:
    // 1 spares 0, also once 0 is up again, and 0 takes the group over. Without
    // that, 1 waits for another copy to serve the group, and 0 for 1 to send it
    // a new copy: the group waits for a person.
    let renew = |server, incarnation, storage| Command::Renew {
        server,
        incarnation,
        storage,
    };
    let down = |server, unless| Command::Down {
        server,
        unless_renewed_after: unless,
        lapsed: Vec::new(),
    };
    let caught_up = |m: &Map, server: NodeId, incarnation| Command::CaughtUp {
        server,
        incarnation,
        recovering_since: m.servers[server as usize].since,
    };
    let start = || {
        let mut m = Map::new(4);
        for s in 0..4 {
            assert_eq!(m.apply(&renew(s, 5, 100 + s), 10 + s), Applied::Granted);
        }
        assert_eq!(m.apply(&down(0, 10), 14), Applied::Changed);
        assert_eq!(m.apply(&lead(0, 1), 15), Applied::Changed);
        assert_eq!(m.apply(&serve(0, 1), 16), Applied::Changed);
        assert_eq!(m.apply(&renew(0, 5, 100), 17), Applied::Granted);
        assert_eq!(m.apply(&caught_up(&m, 0, 5), 18), Applied::Changed);
        assert_eq!(m.primary(0), 1);
        m
    };
    let mut m = start();
    assert_eq!(m.apply(&renew(1, 6, 999), 19), Applied::Granted);
    assert!(m.servers[1].fresh);
    assert_eq!(m.apply(&down(0, 18), 20), Applied::Changed);
    assert_eq!(m.servers[0].spared_by, vec![1]);
    assert_eq!(m.apply(&renew(0, 5, 100), 21), Applied::Granted);
    assert_eq!(m.apply(&caught_up(&m, 0, 5), 22), Applied::Changed);
    assert_eq!(m.servers[0].state, State::Up);
    assert_eq!(m.servers[0].spared_by, vec![1], "kept while 1 catches up");
    // 1 waits for the group to be served elsewhere ...
    assert_eq!(m.apply(&renew(1, 6, 999), 23), Applied::Granted);
    assert_eq!(m.apply(&caught_up(&m, 1, 6), 24), Applied::Unchanged);
    // ... which 0 takes back, and then 1 is up too.
    assert_eq!(m.apply(&lead(0, 0), 25), Applied::Changed);
    assert_eq!(m.primary(0), 0);
    assert_eq!(m.apply(&serve(0, 0), 26), Applied::Changed);
    assert_eq!(m.apply(&caught_up(&m, 1, 6), 27), Applied::Changed);
    assert!(!m.servers[1].fresh);
    // A map that carries it decodes.
    let mut spared = start();
    spared.apply(&renew(1, 6, 999), 19);
    spared.apply(&down(0, 18), 20);
    spared.apply(&renew(0, 5, 100), 21);
    spared.apply(&caught_up(&spared, 0, 5), 22);
    assert_eq!(Map::decode(&spared.encode()).unwrap(), spared);

    // Negative: 1 caught up on its new disk (and may have served since) before 0
    // went out: it spares nothing.
    let mut m = start();
    assert_eq!(m.apply(&renew(1, 6, 999), 19), Applied::Granted);
    assert_eq!(m.apply(&lead(0, 0), 20), Applied::Changed);
    assert_eq!(m.apply(&serve(0, 0), 21), Applied::Changed);
    assert_eq!(m.apply(&caught_up(&m, 1, 6), 22), Applied::Changed);
    assert_eq!(m.apply(&down(0, 18), 23), Applied::Changed);
    assert!(m.servers[0].spared_by.is_empty());
    // Nor does anyone an evicted server: its primary answered without it.
    let mut m = start();
    assert_eq!(m.apply(&renew(1, 6, 999), 19), Applied::Granted);
    assert_eq!(m.apply(&Command::Evict { server: 0 }, 20), Applied::Changed);
    assert_eq!(m.apply(&down(0, 18), 21), Applied::Changed);
    assert!(m.servers[0].spared_by.is_empty());
}

#[test]
fn a_new_disk_seen_while_evicted_is_still_new_once_down() {
    // Server 1, evicted (its renewals refused until it is down), gets a new disk and
    // renews from it: refused, and nothing of it recorded, so that once down it
    // comes back fresh and refilling, not as its old disk.
    let renew = |incarnation, storage| Command::Renew {
        server: 1,
        incarnation,
        storage,
    };
    let mut m = Map::new(3);
    assert_eq!(m.apply(&renew(5, 100), 1), Applied::Granted);
    assert_eq!(m.apply(&Command::Evict { server: 1 }, 2), Applied::Changed);
    let before = m.clone();
    assert_eq!(m.apply(&renew(6, 200), 3), Applied::Refused);
    assert_eq!(m, before, "a refused renewal changes nothing");
    let down = Command::Down {
        server: 1,
        unless_renewed_after: 1,
        lapsed: Vec::new(),
    };
    assert_eq!(m.apply(&down, 4), Applied::Changed);
    assert_eq!(m.apply(&renew(6, 200), 5), Applied::Granted);
    let e = &m.servers[1];
    assert_eq!(
        (e.state, e.fresh, e.refill, e.storage),
        (State::Recovering, true, true, 200)
    );
}

#[test]
fn a_group_leaves_a_primary_whose_disk_was_replaced() {
    let mut m = Map::new(3);
    let renew = |server, storage| Command::Renew {
        server,
        incarnation: 5 + storage,
        storage,
    };
    m.apply(&renew(1, 100), 1);
    let lead = Command::Lead {
        group: 1,
        server: 2,
    };
    // Serving with its own disk: the group stays.
    assert_eq!(m.apply(&lead, 2), Applied::Unchanged);
    // Serving, but from a new disk that holds nothing of the group: it moves.
    m.apply(&renew(1, 200), 3);
    assert!(m.servers[1].state.serving() && m.servers[1].fresh);
    assert_eq!(m.apply(&lead, 4), Applied::Changed);
    assert_eq!(m.primary(1), 2);
}

/// `Lead`, `Serve` and `Yield` of group `g` by `server`.
fn lead(g: NodeId, server: NodeId) -> Command {
    Command::Lead { group: g, server }
}
fn serve(g: NodeId, server: NodeId) -> Command {
    Command::Serve { group: g, server }
}
fn give_back(g: NodeId, server: NodeId) -> Command {
    Command::Yield { group: g, server }
}

#[test]
fn a_group_moves_its_store_only_when_the_named_primary_serves() {
    // Server 1's group; 1 stopped: the map calls it down and names 2 in its place.
    let mut m = with(State::Down);
    assert_eq!(m.apply(&lead(1, 2), 50), Applied::Changed);
    assert_eq!((m.version, m.primary(1), m.store(1)), (11, 2, 1));
    assert!(m.servers[1].unserved);
    // Only the primary the map names serves, once.
    for other in [0, 1, 9] {
        assert_eq!(m.apply(&serve(1, other), 51), Applied::Unchanged, "{other}");
    }
    assert_eq!(m.apply(&serve(9, 2), 51), Applied::Unchanged);
    assert_eq!(m.version, 11);
    assert_eq!(m.apply(&serve(1, 2), 52), Applied::Changed);
    assert_eq!((m.version, m.primary(1), m.store(1)), (12, 2, 2));
    assert!(!m.servers[1].unserved && m.servers[1].served_by.is_none());
    assert_eq!(
        m.apply(&serve(1, 2), 53),
        Applied::Unchanged,
        "served already"
    );
    // Once it served, nothing hands the group back past it.
    assert_eq!(m.apply(&give_back(1, 2), 54), Applied::Unchanged);
    assert_eq!((m.version, m.primary(1), m.store(1)), (12, 2, 2));
    m.check().unwrap();
}

#[test]
fn a_named_primary_that_never_served_hands_the_group_back_to_the_last_store() {
    // Server 1 (stopped) is down; 2 is named in its place, then killed and started
    // again before it served: back as recovering, so the map still names it (it
    // serves, as far as states go) and no other standby may take the group.
    let mut m = with(State::Down);
    m.servers[2].incarnation = 3;
    m.apply(&lead(1, 2), 50);
    let restart = Command::Renew {
        server: 2,
        incarnation: 4,
        storage: 0,
    };
    assert_eq!(m.apply(&restart, 51), Applied::Granted);
    assert_eq!(m.servers[2].state, State::Recovering);
    assert_eq!(m.apply(&lead(1, 0), 52), Applied::Unchanged);
    // The old primary continues: back as recovering, its store is still the group's.
    let back = Command::Renew {
        server: 1,
        incarnation: 7,
        storage: 0,
    };
    assert_eq!(m.apply(&back, 53), Applied::Granted);
    assert_eq!((m.primary(1), m.store(1)), (2, 1));
    // Only the named primary hands it back; the group is its own server's again.
    assert_eq!(m.apply(&give_back(1, 0), 54), Applied::Unchanged);
    let before = m.version;
    assert_eq!(m.apply(&give_back(1, 2), 55), Applied::Changed);
    assert_eq!(m.version, before + 1);
    assert_eq!((m.primary(1), m.store(1)), (1, 1));
    assert_eq!(m.servers[1].led_by, None);
    assert!(!m.servers[1].unserved);
    assert_eq!(m.apply(&give_back(1, 2), 56), Applied::Unchanged, "once");
    assert_eq!(m.apply(&serve(1, 2), 57), Applied::Unchanged, "moved away");
    m.check().unwrap();
}

#[test]
fn a_group_goes_back_only_to_the_copy_that_served_it_last() {
    let mut m = Map::new(4);
    let down = |m: &mut Map, s: usize| {
        m.servers[s].state = State::Down;
    };
    // 1's group served by 2, then 2 down: 3 named, never serves, down too; 0 named.
    down(&mut m, 1);
    m.apply(&lead(1, 2), 1);
    m.apply(&serve(1, 2), 2);
    down(&mut m, 2);
    m.apply(&lead(1, 3), 3);
    assert_eq!((m.primary(1), m.store(1)), (3, 2));
    assert_eq!(m.servers[1].served_by, Some(2));
    down(&mut m, 3);
    m.apply(&lead(1, 0), 4);
    assert_eq!(
        (m.primary(1), m.store(1)),
        (0, 2),
        "named over one that never served"
    );
    // 0 cannot serve: the group goes back to 2, the last copy that served, not to
    // its own server (whose store lacks what 2 answered) nor to 3.
    assert_eq!(m.apply(&give_back(1, 0), 5), Applied::Changed);
    assert_eq!((m.primary(1), m.store(1)), (2, 2));
    assert_eq!(m.servers[1].led_by, Some(2));
    m.check().unwrap();

    // The copy that served last taking the group again serves at once: nothing
    // after it to wait for.
    let mut m = Map::new(3);
    down(&mut m, 1);
    m.apply(&lead(1, 2), 1);
    down(&mut m, 2);
    assert_eq!(m.store(1), 1);
    m.servers[1].state = State::Recovering;
    assert_eq!(m.apply(&lead(1, 1), 2), Applied::Changed);
    assert_eq!((m.primary(1), m.store(1)), (1, 1));
    assert!(!m.servers[1].unserved);
    m.check().unwrap();
}

#[test]
fn only_a_serving_primary_with_its_own_disk_serves() {
    for state in ALL {
        let mut m = with(State::Down);
        m.apply(&lead(1, 2), 50);
        m.servers[2].state = state;
        let a = m.apply(&serve(1, 2), 51);
        assert_eq!(a == Applied::Changed, state.serving(), "{state:?}");
    }
    let mut m = with(State::Down);
    m.apply(&lead(1, 2), 50);
    m.servers[2].fresh = true;
    m.servers[2].state = State::Recovering;
    assert_eq!(m.apply(&serve(1, 2), 51), Applied::Unchanged);
    // A primary that cannot serve hands back whatever its state.
    assert_eq!(m.apply(&give_back(1, 2), 52), Applied::Changed);
    assert_eq!(m.store(1), 1);
}

#[test]
fn decode_refuses_a_store_that_contradicts_the_primary() {
    let mut m = with(State::Down);
    m.apply(&lead(1, 2), 50);
    assert!(Map::decode(&m.encode()).is_ok());
    // Recorded as served by another while served.
    let mut bad = m.clone();
    bad.servers[1].unserved = false;
    bad.servers[1].served_by = Some(0);
    assert!(Map::decode(&bad.encode()).is_err());
    // Waiting for a primary that is the copy that served last.
    let mut bad = m.clone();
    bad.servers[1].led_by = None;
    assert!(Map::decode(&bad.encode()).is_err());
    // Served by itself, or by nobody of the map.
    for by in [1, 3] {
        let mut bad = m.clone();
        bad.servers[1].served_by = Some(by);
        assert!(Map::decode(&bad.encode()).is_err(), "{by}");
    }
    // Maps written before `Serve` existed: a group led by another was served by it.
    let old = br#"{"version":2,"servers":[{"state":"Down","since":1,"joined":0,"incarnation":0,"renewed":0,"led_by":1},{"state":"Up","since":0,"joined":0,"incarnation":0,"renewed":0}]}"#;
    let m = Map::decode(old).expect("an older map");
    assert_eq!((m.primary(0), m.store(0)), (1, 1));
}

#[test]
fn a_group_store_changes_only_by_a_serve() {
    // A long pseudo-random run of every command, the failover ones often: the store
    // of each group (the copy holding every acknowledged change) is the server
    // whose `Serve` applied last, and the one named by a `Lead` only when it
    // already was the store.
    const N: usize = 4;
    let mut m = Map::new(N);
    let mut store: Vec<usize> = (0..N).collect();
    let mut next = draws(0x2545_f491_4f6c_dd1d);
    let mut moved = [0usize; 3];
    for index in 1..50_000u64 {
        let server = next(N as u64);
        let group = next(N as u64);
        let cmd = match next(8) {
            0 => Command::Renew {
                server,
                incarnation: 1 + next(3),
                storage: [1, 1, 1, 1, 1, 2][next(6) as usize],
            },
            1 => Command::Down {
                server,
                unless_renewed_after: index,
                lapsed: {
                    let mut l = Vec::new();
                    for s in 0..N as NodeId {
                        if next(2) == 0 {
                            l.push((s, index.saturating_sub(next(20))));
                        }
                    }
                    l
                },
            },
            2 => Command::CaughtUp {
                server,
                incarnation: 1 + next(3),
                recovering_since: 0,
            },
            3 | 4 => lead(group, server),
            5 | 6 => serve(group, server),
            _ => give_back(group, server),
        };
        let before = m.clone();
        let a = m.apply(&cmd, index);
        m.check().unwrap();
        let g = group as usize;
        match cmd {
            Command::Serve { .. } if a == Applied::Changed => {
                store[g] = server as usize;
                moved[0] += 1;
            }
            Command::Yield { .. } if a == Applied::Changed => {
                assert_ne!(before.primary(g), m.primary(g));
                assert_eq!(m.primary(g), store[g], "back to the last store");
                moved[1] += 1;
            }
            Command::Lead { .. } if a == Applied::Changed => {
                assert_eq!(m.primary(g), server as usize);
                assert_eq!(m.servers[g].unserved, store[g] != server as usize);
                moved[2] += 1;
            }
            _ => {}
        }
        for (g, &s) in store.iter().enumerate() {
            assert_eq!(m.store(g), s, "group {g} after {cmd:?} ({a:?})");
        }
        if a == Applied::Changed {
            assert_eq!(m.version, before.version + 1);
        }
    }
    assert!(
        moved.iter().all(|&n| n > 50),
        "every move happened: {moved:?}"
    );
}

#[test]
fn a_new_disk_is_up_only_once_the_groups_it_led_are_served_elsewhere() {
    let renew = |server, incarnation, storage| Command::Renew {
        server,
        incarnation,
        storage,
    };
    let caught_up = |m: &Map, server: NodeId, incarnation| Command::CaughtUp {
        server,
        incarnation,
        recovering_since: m.servers[server as usize].since,
    };
    let mut m = Map::new(3);
    for s in 0..3 {
        m.apply(&renew(s, 5, 100 + s), 1);
    }
    // 0 stops: 1, its standby, takes its group over and serves it; 0 comes back,
    // follows 1 and is up.
    m.servers[0].state = State::Down;
    assert_eq!(m.apply(&lead(0, 1), 2), Applied::Changed);
    assert_eq!(m.apply(&serve(0, 1), 3), Applied::Changed);
    assert_eq!(m.apply(&renew(0, 6, 100), 4), Applied::Granted);
    assert_eq!(m.apply(&caught_up(&m, 0, 6), 5), Applied::Changed);
    // 1 gets a new disk: still named for 0's group, and its store, though it holds
    // nothing of it.
    assert_eq!(m.apply(&renew(1, 7, 201), 6), Applied::Granted);
    assert!(m.servers[1].fresh);
    assert_eq!((m.primary(0), m.store(0)), (1, 1));
    // It is not up while the map names it for the group…
    assert_eq!(m.apply(&caught_up(&m, 1, 7), 7), Applied::Unchanged);
    // …and takes no group over: it could never serve one.
    let mut other = m.clone();
    other.servers[2].state = State::Down;
    assert_eq!(other.apply(&lead(2, 1), 8), Applied::Unchanged);
    // 0, which followed 1, takes its group back; until it served, 1 still holds the
    // group's store, and is not up.
    assert_eq!(m.apply(&lead(0, 0), 8), Applied::Changed);
    assert_eq!((m.primary(0), m.store(0)), (0, 1));
    assert_eq!(m.apply(&caught_up(&m, 1, 7), 9), Applied::Unchanged);
    assert_eq!(m.apply(&serve(0, 0), 10), Applied::Changed);
    assert_eq!((m.primary(0), m.store(0)), (0, 0));
    assert_eq!(m.apply(&caught_up(&m, 1, 7), 11), Applied::Changed);
    let e = &m.servers[1];
    assert_eq!((e.state, e.fresh, e.refill), (State::Up, false, false));
    m.check().unwrap();
}

#[test]
fn a_lost_server_gets_heirs_once_and_heirs_that_rebuilt_are_recorded() {
    let mut m = Map::new(4);
    m.servers[2].state = State::Lost;
    m.servers[1].state = State::Down;
    // Gone servers and itself are no heirs.
    let lost = |server, heirs: &[NodeId]| Command::Lost {
        server,
        heirs: heirs.to_vec(),
        meta_heirs: heirs.to_vec(),
        domains: Vec::new(),
    };
    assert_eq!(m.apply(&lost(1, &[0, 1, 2, 3]), 5), Applied::Changed);
    let v = m.version;
    assert_eq!(m.servers[1].heirs, [0, 3]);
    assert_eq!(m.servers[1].lost_at, v);
    // Only a server up since before the version it names, and only forward.
    let rebuilt = |server, version| Command::Rebuilt { server, version };
    assert_eq!(m.apply(&rebuilt(0, v + 1), 6), Applied::Unchanged, "future");
    m.servers[3].state = State::Recovering;
    m.servers[3].since = v;
    assert_eq!(m.apply(&rebuilt(3, v), 6), Applied::Unchanged, "not up");
    m.servers[0].since = v;
    assert_eq!(
        m.apply(&rebuilt(0, v - 1), 6),
        Applied::Unchanged,
        "down since"
    );
    assert_eq!(m.apply(&rebuilt(0, v), 6), Applied::Changed);
    assert_eq!(m.servers[0].rebuilt_at, v);
    assert_eq!(m.apply(&rebuilt(0, v), 7), Applied::Unchanged, "again");
    // Back: recovering, copies whole; its heirs stay (no other pick moves).
    let back = Command::Renew {
        server: 1,
        incarnation: 9,
        storage: 0,
    };
    assert_eq!(m.apply(&back, 8), Applied::Granted);
    let e = &m.servers[1];
    assert_eq!((e.state, e.refill), (State::Recovering, true));
    assert_eq!(e.heirs, [0, 3]);
    // Lost again: the heirs and the place among losses of the first loss.
    assert_eq!(
        m.apply(
            &Command::Down {
                server: 1,
                unless_renewed_after: 8,
                lapsed: Vec::new(),
            },
            9
        ),
        Applied::Changed
    );
    assert_eq!(m.apply(&lost(1, &[0]), 10), Applied::Changed);
    assert_eq!(
        (m.servers[1].heirs.as_slice(), m.servers[1].lost_at),
        (&[0, 3][..], v)
    );
    assert!(m.check().is_ok());
    // A decoded map with a server among its own heirs is refused.
    let mut bad = m.clone();
    bad.servers[1].heirs = vec![1];
    assert!(bad.check().is_err());
}

/// The map as clients see it (the server's `wire_map`, without the leader).
fn as_cluster_map(m: &Map) -> pvfs_proto::map::ClusterMap {
    let ids = |v: &[NodeId]| v.iter().map(|&h| h as u32).collect();
    pvfs_proto::map::ClusterMap {
        version: m.version,
        leader: None,
        servers: m
            .servers
            .iter()
            .map(|s| pvfs_proto::map::MapServer {
                state: s.state,
                since: s.since,
                joined: s.joined,
                led_by: s.led_by.map(|l| l as u32),
                fresh: s.fresh,
                refill: s.refill,
                heirs: ids(&s.heirs),
                meta_heirs: ids(&s.meta_heirs),
                domains: ids(&s.domains),
                lost_at: s.lost_at,
                left_at: s.left_at,
                leaving: s.leaving,
                rebuilt_at: s.rebuilt_at,
                spared_by: ids(&s.spared_by),
                quiet: s.quiet.iter().map(|q| q.0 as u32).collect(),
                grown: s.grown,
                hands: s.hands.clone(),
                evicted: s.evicted,
            })
            .collect(),
    }
}

#[test]
fn no_copy_serves_a_read_before_it_is_whole_through_losses_rebuilds_and_returns() {
    // A long pseudo-random run of losses, rebuilds and returns over six servers,
    // with every set of two and three neighbouring copies. A model says which
    // holder of each place holds every byte: a layout's copy at the start; one
    // that enters a set (an heir, a server back) holds nothing until it rebuilt
    // (`Rebuilt`) or caught up (`CaughtUp`: missed ranges, or every datafile
    // whole after a loss). Every copy the map lets serve reads, and every head,
    // must hold every byte; and an heir never moves while its lost server stays
    // gone.
    const N: usize = 6;
    // Each set of copies with three datafiles' handles (the rotation through the
    // heirs depends on the handle).
    let sets: Vec<Vec<u32>> = (0..N as u32)
        .flat_map(|k| {
            let n = N as u32;
            [vec![k, (k + 1) % n], vec![k, (k + 2) % n, (k + 4) % n]]
        })
        .flat_map(|set| [set.clone(), set.clone(), set])
        .collect();
    let mut m = Map::new(N);
    for s in 0..N as NodeId {
        m.apply(
            &Command::Renew {
                server: s,
                incarnation: 1,
                storage: 0,
            },
            0,
        );
    }
    let mut whole: std::collections::HashSet<(usize, u32)> = sets
        .iter()
        .enumerate()
        .flat_map(|(i, set)| set.iter().map(move |&s| (i, s)))
        .collect();
    let mut next = draws(0x9e37_79b9_7f4a_7c15);
    let mut counts = [0usize; 7];
    // Half the losses and drains name racks of two servers.
    let racks: Vec<NodeId> = (0..N as NodeId).map(|s| s - s % 2).collect();
    for index in 1..40_000u64 {
        let server = next(N as u64);
        let e = &m.servers[server as usize];
        // Drains now and then, and at most two servers retired for good.
        let retired = m
            .servers
            .iter()
            .filter(|e| e.state == State::Retired)
            .count();
        let cmd = match next(60) {
            50..=53 => Command::Drain {
                server,
                heirs: (0..N as NodeId).collect(),
                meta_heirs: (0..N as NodeId).collect(),
                domains: if next(2) == 0 {
                    racks.clone()
                } else {
                    Vec::new()
                },
            },
            54 if retired < 2 && e.state == State::Draining => Command::Retire { server },
            // `pvfs rebalance`: a third of every other server's places.
            // To a server up, handed nothing yet, if there is one (servers are
            // seldom up in this run).
            55 => Command::Rebalance {
                server: (0..N as NodeId)
                    .find(|&s| {
                        let e = &m.servers[s as usize];
                        e.state == State::Up && e.hands.is_empty()
                    })
                    .unwrap_or(server),
                from: (0..N as NodeId).collect(),
                share: 3,
                domains: if next(2) == 0 {
                    racks.clone()
                } else {
                    Vec::new()
                },
            },
            k if k >= 50 => Command::Rebuilt {
                server,
                version: m.version,
            },
            k => match k % 10 {
                0 | 1 => Command::Renew {
                    server,
                    incarnation: e.incarnation + next(2),
                    storage: 0,
                },
                2 => Command::Down {
                    server,
                    unless_renewed_after: index,
                    lapsed: Vec::new(),
                },
                3 | 4 => Command::Lost {
                    server,
                    heirs: (0..N as NodeId).collect(),
                    meta_heirs: (0..N as NodeId).collect(),
                    domains: if next(2) == 0 {
                        racks.clone()
                    } else {
                        Vec::new()
                    },
                },
                5 | 6 => Command::CaughtUp {
                    server,
                    incarnation: e.incarnation,
                    recovering_since: e.since,
                },
                _ => Command::Rebuilt {
                    server,
                    version: m.version - next(2).min(m.version),
                },
            },
        };
        let before = as_cluster_map(&m);
        let a = m.apply(&cmd, index);
        m.check().unwrap();
        let after = as_cluster_map(&m);
        for (i, set) in sets.iter().enumerate() {
            let handle = i as u64;
            let was = before.holders(handle, set);
            let now = after.holders(handle, set);
            let mut servers: Vec<u32> = now.iter().map(|h| h.server).collect();
            servers.sort_unstable();
            servers.dedup();
            assert_eq!(servers.len(), now.len(), "{now:?} twice in {set:?}");
            // An heir stays in place while what it stands for is gone and it is not
            // (a server back from being lost takes its place back from the heirs
            // that stood for it).
            let returned = before.state(server as u32) == Some(State::Lost)
                && after.state(server as u32) == Some(State::Recovering);
            // A server handed places rebuilt them: the servers that handed them,
            // heirs among them, hold them no longer.
            let handed = matches!(cmd, Command::Rebuilt { .. })
                && !after.servers[server as usize].hands.is_empty();
            for h in &was {
                if let Some(l) = h.heir_of.filter(|_| !returned && !handed) {
                    let stays = after.state(l).is_some_and(|s| s.gone())
                        && !after.state(h.server).is_some_and(|s| s.gone());
                    assert!(
                        !stays || now.contains(h),
                        "{h:?} moved in {set:?} after {cmd:?}: {was:?} -> {now:?}"
                    );
                }
            }
            // The model.
            for h in &was {
                if !now.iter().any(|n| n.server == h.server) {
                    whole.remove(&(i, h.server));
                }
            }
            for h in &now {
                let entered = !was.iter().any(|w| w.server == h.server);
                if entered {
                    whole.remove(&(i, h.server));
                }
                // What the server copied: under the map of `version`, every place
                // it held then.
                let done = a == Applied::Changed
                    && match cmd {
                        Command::Rebuilt { server, version } => {
                            h.server as NodeId == server
                                && h.heir_of.is_some()
                                && h.since <= version
                        }
                        Command::CaughtUp { server, .. } => h.server as NodeId == server,
                        _ => false,
                    };
                if done {
                    whole.insert((i, h.server));
                }
            }
            // A server that stopped serving may have missed changes.
            for h in &now {
                if !after.state(h.server).is_some_and(|s| s.serving()) {
                    whole.remove(&(i, h.server));
                }
            }
            let serving = after.readable(handle, set);
            for s in serving.into_iter().chain(after.head(handle, set)) {
                assert!(
                    whole.contains(&(i, s)),
                    "server {s} serves {set:?} without every byte after {cmd:?} ({a:?}): {:?}",
                    after.holders(handle, set)
                );
            }
        }
        if a == Applied::Changed || a == Applied::Granted {
            match cmd {
                Command::Lost { .. } => counts[0] += 1,
                Command::Rebuilt { .. } => counts[1] += 1,
                Command::CaughtUp { .. } => counts[2] += 1,
                Command::Renew { .. } if before.state(server as u32) == Some(State::Lost) => {
                    counts[3] += 1
                }
                Command::Drain { .. } => counts[4] += 1,
                Command::Rebalance { .. } => counts[6] += 1,
                Command::Retire { .. } if before.state(server as u32) == Some(State::Draining) => {
                    counts[5] += 1
                }
                _ => {}
            }
        }
    }
    // Drains are rare (a drained server leaves for good), losses are not.
    assert!(
        counts[..4].iter().all(|&n| n > 50) && counts[4] >= 3 && counts[5] >= 1 && counts[6] >= 2,
        "every kind happened: {counts:?}"
    );
}

/// A pseudo-random draw below `n` per call, from `seed` (the same run every time).
fn draws(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed;
    move |n| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) % n
    }
}

#[test]
fn grow_adds_servers_down_that_come_back_recovering_then_up() {
    let mut m = with(State::Up);
    let renew = |server| Command::Renew {
        server,
        incarnation: 9,
        storage: 4,
    };
    // Not in the map yet: refused.
    assert_eq!(m.apply(&renew(4), 50), Applied::Refused);
    assert_eq!(m.apply(&Command::Grow { servers: 5 }, 51), Applied::Changed);
    assert_eq!((m.version, m.servers.len()), (11, 5));
    for new in &m.servers[3..] {
        assert_eq!((new.state, new.since, new.lost_at), (State::Down, 11, 0));
        assert!(new.fresh && new.joined == 0 && new.heirs.is_empty());
        assert!(!new.refill && !new.leaving);
    }
    let before = with(State::Up);
    assert_eq!(m.servers[..3], before.servers[..]);
    // Never shrinks, never grows twice to the same size.
    let same = m.clone();
    assert_eq!(
        m.apply(&Command::Grow { servers: 5 }, 52),
        Applied::Unchanged
    );
    assert_eq!(
        m.apply(&Command::Grow { servers: 2 }, 53),
        Applied::Unchanged
    );
    assert_eq!(m, same);
    // The new server renews: recovering (nothing to copy whole), then up.
    assert_eq!(m.apply(&renew(4), 54), Applied::Granted);
    assert_eq!(m.servers[4].state, State::Recovering);
    assert!(!m.servers[4].refill);
    let caught_up = Command::CaughtUp {
        server: 4,
        incarnation: 9,
        recovering_since: m.servers[4].since,
    };
    assert_eq!(m.apply(&caught_up, 55), Applied::Changed);
    assert_eq!(m.servers[4].state, State::Up);
    assert!(!m.servers[4].fresh && m.servers[4].joined != 0);
}

#[test]
fn rebalance_hands_a_share_of_the_old_servers_places_to_a_server_added_and_up() {
    // Four servers and one added.
    let mut m = Map::new(4);
    assert_eq!(m.apply(&Command::Grow { servers: 5 }, 1), Applied::Changed);
    assert!(m.servers[4].grown && !m.servers[0].grown);
    let rebalance = |from: Vec<NodeId>| Command::Rebalance {
        server: 4,
        from,
        share: 5,
        domains: Vec::new(),
    };
    // Not up yet: nothing.
    assert_eq!(m.apply(&rebalance(vec![0, 1, 2, 3]), 2), Applied::Unchanged);
    let renew = Command::Renew {
        server: 4,
        incarnation: 3,
        storage: 9,
    };
    assert_eq!(m.apply(&renew, 3), Applied::Granted);
    let caught_up = Command::CaughtUp {
        server: 4,
        incarnation: 3,
        recovering_since: m.servers[4].since,
    };
    assert_eq!(m.apply(&caught_up, 4), Applied::Changed);
    // A server gone hands nothing; none left: nothing.
    m.servers[3].state = State::Retired;
    m.servers[3].lost_at = 1;
    m.servers[3].left_at = 1;
    assert_eq!(m.apply(&rebalance(vec![3, 4]), 5), Applied::Unchanged);
    assert_eq!(
        m.apply(
            &Command::Rebalance {
                server: 4,
                from: vec![0],
                share: 0,
                domains: Vec::new(),
            },
            5
        ),
        Applied::Unchanged
    );
    let v = m.version;
    assert_eq!(
        m.apply(&rebalance(vec![2, 0, 1, 3, 4, 9]), 6),
        Applied::Changed
    );
    assert_eq!(m.version, v + 1);
    assert_eq!(
        m.servers[4].hands,
        [Hand {
            from: vec![0, 1, 2],
            share: 5,
            at: v + 1,
            domains: Vec::new(),
        }]
    );
    // Asked again: nothing more.
    let same = m.clone();
    assert_eq!(m.apply(&rebalance(vec![0, 1, 2]), 7), Applied::Unchanged);
    assert_eq!(m, same);
    // An old log's map (no `grown`, no `hands`) still reads; the hands survive a
    // round trip; a hand naming its own server is not a map the authority made.
    let mut old = serde_json::to_value(Map::new(2)).unwrap();
    for e in old["servers"].as_array_mut().unwrap() {
        let e = e.as_object_mut().unwrap();
        e.remove("grown");
        e.remove("hands");
    }
    let old = Map::decode(&serde_json::to_vec(&old).unwrap()).unwrap();
    assert_eq!(old, Map::new(2));
    assert_eq!(Map::decode(&m.encode()).unwrap(), m);
    let cmd: Command = serde_json::from_str(r#"{"Rebalance":{"server":4}}"#).unwrap();
    assert_eq!(
        cmd,
        Command::Rebalance {
            server: 4,
            from: Vec::new(),
            share: 0,
            domains: Vec::new(),
        }
    );
    let mut bad = m.clone();
    bad.servers[4].hands[0].from.push(4);
    assert!(bad.check().is_err());
    // Clients see it: about a fifth of the places go to 4, held beside their
    // servers until 4 rebuilt, then by 4 alone.
    let wire = as_cluster_map(&m);
    let sets = [[0u32, 1], [1, 2], [2, 0]];
    let moved = (0..300u64)
        .flat_map(|h| sets.iter().map(move |c| (h, c)))
        .filter(|(h, c)| wire.holders(*h, &c[..]).iter().any(|x| x.server == 4))
        .count();
    assert!(moved > 200 && moved < 400, "{moved}");
    let rebuilt = Command::Rebuilt {
        server: 4,
        version: m.version,
    };
    assert_eq!(m.apply(&rebuilt, 8), Applied::Changed);
    let wire = as_cluster_map(&m);
    for h in 0..300u64 {
        for c in sets {
            let held = wire.holder_servers(h, &c);
            assert_eq!(held.len(), 2);
            assert!(held.contains(&4) || held == c);
        }
    }
}

#[test]
fn a_summary_names_every_server_state_flag_and_group_served_for_another() {
    let mut m = Map::new(3);
    m.servers[1].state = State::Down;
    m.servers[1].led_by = Some(2);
    m.servers[0].state = State::Recovering;
    m.servers[0].fresh = true;
    m.servers[0].refill = true;
    let names: Vec<String> = ["a", "b"].iter().map(|n| n.to_string()).collect();
    assert_eq!(
        m.summary(&names),
        "a recovering (new disk, refill); b down; server 2 up, serves b"
    );
}
