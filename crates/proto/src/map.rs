//! The cluster map as servers answer it to clients (`GetMap`): which servers the
//! authority counts as alive, and the map's version (`docs/replication.md`). The
//! authority's own state machine keeps more (incarnations, the log index of each
//! server's last renewal); this is what a client needs to route and to show.

use crate::codec::{DecodeError, Reader, Wire};
use crate::wire_struct;

/// A server's state in the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ServerState {
    /// Renewing its lease; holds its roles.
    Up,
    /// Its lease lapsed: it serves nothing, its roles went to others.
    Down,
    /// Down longer than `rebuild_after`: its copies are rebuilt elsewhere.
    Lost,
    /// Back, taking new writes, catching up with what it missed; serves no reads.
    Recovering,
    /// Being emptied (`pvfs server drain`); serves until it is retired.
    Draining,
    /// Emptied; gets no lease.
    Retired,
}

impl ServerState {
    /// Every state, in wire order.
    pub const ALL: [ServerState; 6] = [
        ServerState::Up,
        ServerState::Down,
        ServerState::Lost,
        ServerState::Recovering,
        ServerState::Draining,
        ServerState::Retired,
    ];

    /// Whether a server in this state holds roles, so that its lease running out
    /// makes it `Down`.
    pub fn serving(self) -> bool {
        matches!(
            self,
            ServerState::Up | ServerState::Recovering | ServerState::Draining
        )
    }

    /// Lost or retired: gone for good, its copies and records with it.
    pub fn gone(self) -> bool {
        matches!(self, ServerState::Lost | ServerState::Retired)
    }

    /// The lowercase name `pvfs status` shows.
    pub fn name(self) -> &'static str {
        match self {
            ServerState::Up => "up",
            ServerState::Down => "down",
            ServerState::Lost => "lost",
            ServerState::Recovering => "recovering",
            ServerState::Draining => "draining",
            ServerState::Retired => "retired",
        }
    }

    fn tag(self) -> u8 {
        match self {
            ServerState::Up => 0,
            ServerState::Down => 1,
            ServerState::Lost => 2,
            ServerState::Recovering => 3,
            ServerState::Draining => 4,
            ServerState::Retired => 5,
        }
    }
}

impl Wire for ServerState {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(self.tag());
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let t = u8::get(r)?;
        ServerState::ALL
            .into_iter()
            .find(|s| s.tag() == t)
            .ok_or(DecodeError::UnknownTag {
                what: "server state",
                tag: u32::from(t),
            })
    }
}

/// One server's entry in the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapServer {
    /// Its state.
    pub state: ServerState,
    /// The map version at which it entered that state.
    pub since: u64,
    /// The map version at which it last came back (0: it never left); orders replica
    /// sets, so a server that comes back joins at their end.
    pub joined: u64,
    /// The server whose copy of this server's metadata group is its primary, when
    /// a standby took it over (`docs/replication.md`, "Failover"); `None`: the
    /// server itself.
    pub led_by: Option<u32>,
    /// Its storage directory was replaced (a new disk) and it has not caught up
    /// since: its stores hold none of what it held, so it leads no metadata group.
    pub fresh: bool,
    /// It copies every datafile it holds a copy of before it is up again, not only
    /// the ranges recorded as missed: its storage was replaced, or a server holding
    /// records of what it missed lost them with its own.
    pub refill: bool,
}
wire_struct!(MapServer {
    state: ServerState,
    since: u64,
    joined: u64,
    led_by: Option<u32>,
    fresh: bool,
    refill: bool,
});

/// The map: one entry per server of the configuration, in its order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterMap {
    /// Grows with every change of a server's state.
    pub version: u64,
    /// The authority member that leads, as far as the answering server knows.
    pub leader: Option<u32>,
    /// Per server, in configuration order.
    pub servers: Vec<MapServer>,
}
wire_struct!(ClusterMap {
    version: u64,
    leader: Option<u32>,
    servers: Vec<MapServer>,
});

/// Where the copies of a datafile are, as the sender of a data request sees them
/// (`docs/replication.md`, "Data: chains").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Copies {
    /// The servers holding a copy, in layout order (`Datafile::replicas`); empty: the
    /// datafile has one copy, on the server the request goes to.
    pub servers: Vec<u32>,
    /// The version of the sender's cluster map; the server answers a request of
    /// another version with an error of kind `Map`.
    pub map: u64,
    /// 0 from a client; `n` when the chain's `n`-th member forwards it to the next.
    pub hop: u32,
}
wire_struct!(Copies {
    servers: Vec<u32>,
    map: u64,
    hop: u32,
});

/// What a copy missed of one datafile while its server was down, as another copy's
/// server recorded it (`Missed`): the byte ranges to copy from a copy that has them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MissedRecord {
    /// The datafile.
    pub handle: crate::types::Handle,
    /// The servers of its copies, in layout order (a `Copies`' `servers`).
    pub copies: Vec<u32>,
    /// The ranges of its local bytes, as `start, end` pairs (end exclusive; a change
    /// of the size reaches `u64::MAX`), sorted and apart.
    pub ranges: Vec<u64>,
    /// The record's generation: it grows whenever the record grows, so a server
    /// that copied it drops it only if nothing was added meanwhile.
    pub gen: u64,
}
wire_struct!(MissedRecord {
    handle: crate::types::Handle,
    copies: Vec<u32>,
    ranges: Vec<u64>,
    gen: u64,
});

/// A record a returning server has copied (`Missed`'s `done`): dropped when still of
/// generation `gen`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MissedDone {
    /// The datafile.
    pub handle: crate::types::Handle,
    /// The generation copied.
    pub gen: u64,
}
wire_struct!(MissedDone {
    handle: crate::types::Handle,
    gen: u64,
});

impl Copies {
    /// Whether the datafile has more than one copy.
    pub fn replicated(&self) -> bool {
        !self.servers.is_empty()
    }
}

impl ClusterMap {
    /// The chain of a datafile whose copies are on `copies` (in layout order): the
    /// copies whose servers are up, draining or recovering, ordered by when they last came
    /// back and then by their place in the layout, so a server that returns joins at
    /// the tail and a head moves only away from a server that is down
    /// (`docs/replication.md`, "Placement"). The one function that says which copy
    /// leads, for clients and servers alike. A server missing from the map is left
    /// out.
    pub fn chain(&self, copies: &[u32]) -> Vec<u32> {
        let mut members: Vec<(u64, usize, u32)> = copies
            .iter()
            .enumerate()
            .filter_map(|(at, &s)| {
                let e = self.servers.get(s as usize)?;
                matches!(
                    e.state,
                    ServerState::Up | ServerState::Draining | ServerState::Recovering
                )
                .then_some((e.joined, at, s))
            })
            .collect();
        members.sort_unstable();
        members.into_iter().map(|(_, _, s)| s).collect()
    }

    /// The copy of `copies` that takes writes now: the first member of the chain that
    /// is up, else the first draining one (a recovering one never leads).
    pub fn head(&self, copies: &[u32]) -> Option<u32> {
        let chain = self.chain(copies);
        let first = |want| chain.iter().copied().find(|&s| self.state(s) == Some(want));
        first(ServerState::Up).or_else(|| first(ServerState::Draining))
    }

    /// The server whose copy of metadata group `g` (server `g`'s metadata) serves it
    /// now: `g` itself unless a standby took the group over; `None` while that server
    /// does not serve, or serves with a replaced storage directory that holds nothing
    /// of the group (the group waits for a standby to take it, or for it to return).
    pub fn primary(&self, g: u32) -> Option<u32> {
        let p = self.servers.get(g as usize)?.led_by.unwrap_or(g);
        let e = self.servers.get(p as usize)?;
        (e.state.serving() && !e.fresh).then_some(p)
    }

    /// Server `s`'s state, if the map has it.
    pub fn state(&self, s: u32) -> Option<ServerState> {
        self.servers.get(s as usize).map(|e| e.state)
    }

    /// The copies of `copies` that may serve reads: those up or draining (a
    /// recovering copy may lack what it missed), in chain order.
    pub fn readable(&self, copies: &[u32]) -> Vec<u32> {
        self.chain(copies)
            .into_iter()
            .filter(|&s| self.state(s) != Some(ServerState::Recovering))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};

    #[test]
    fn map_round_trips_and_refuses_unknown_states() {
        let map = ClusterMap {
            version: 7,
            leader: Some(2),
            servers: ServerState::ALL
                .iter()
                .enumerate()
                .map(|(i, &state)| MapServer {
                    state,
                    since: i as u64,
                    joined: 3,
                    led_by: (i == 1).then_some(4),
                    fresh: i == 2,
                    refill: i >= 2,
                })
                .collect(),
        };
        let bytes = encode(&map);
        assert_eq!(decode::<ClusterMap>(&bytes), Ok(map.clone()));
        // The first state's tag sits right after version, leader and the count.
        let at = 8 + 1 + 4 + 4;
        let mut bad = bytes.clone();
        assert_eq!(bad[at], 0, "layout of the encoding changed");
        bad[at] = 6;
        assert!(matches!(
            decode::<ClusterMap>(&bad),
            Err(DecodeError::UnknownTag {
                what: "server state",
                tag: 6
            })
        ));
        assert_eq!(
            ServerState::ALL.map(ServerState::name),
            ["up", "down", "lost", "recovering", "draining", "retired"]
        );
    }

    fn map_of(states: &[(ServerState, u64)]) -> ClusterMap {
        ClusterMap {
            version: 9,
            leader: None,
            servers: states
                .iter()
                .map(|&(state, joined)| MapServer {
                    state,
                    since: 0,
                    joined,
                    led_by: None,
                    fresh: false,
                    refill: false,
                })
                .collect(),
        }
    }

    #[test]
    fn a_group_is_served_by_its_server_or_the_standby_that_took_it() {
        let mut m = map_of(&[
            (ServerState::Up, 0),
            (ServerState::Down, 0),
            (ServerState::Recovering, 5),
        ]);
        assert_eq!(m.primary(0), Some(0));
        assert_eq!(m.primary(1), None, "its primary is down, nobody took it");
        assert_eq!(
            m.primary(2),
            Some(2),
            "a recovering server leads its own group"
        );
        m.servers[1].led_by = Some(2);
        assert_eq!(m.primary(1), Some(2));
        m.servers[2].fresh = true;
        assert_eq!(
            m.primary(2),
            None,
            "a replaced disk holds nothing of its group"
        );
        assert_eq!(m.primary(1), None, "nor of a group it took over");
        m.servers[2].fresh = false;
        m.servers[2].state = ServerState::Down;
        assert_eq!(m.primary(1), None);
        assert_eq!(m.primary(7), None, "no such group");
    }

    #[test]
    fn chains_leave_out_dead_copies_and_put_returning_ones_last() {
        use ServerState::*;
        let all_up = map_of(&[(Up, 0); 4]);
        assert_eq!(all_up.chain(&[2, 0, 3]), [2, 0, 3]);
        assert_eq!(all_up.head(&[2, 0, 3]), Some(2));
        assert_eq!(all_up.readable(&[2, 0, 3]), [2, 0, 3]);
        // The head is down: the next copy leads.
        let m = map_of(&[(Up, 0), (Up, 0), (Down, 0), (Lost, 0)]);
        assert_eq!(m.chain(&[2, 0, 3]), [0]);
        assert_eq!(m.head(&[2, 0, 3]), Some(0));
        // It came back (recovering since version 5): it joins at the tail, never
        // leads, serves no reads; once up it stays at the tail.
        let m = map_of(&[(Up, 0), (Up, 0), (Recovering, 5), (Up, 0)]);
        assert_eq!(m.chain(&[2, 0, 3]), [0, 3, 2]);
        assert_eq!(m.head(&[2, 0, 3]), Some(0));
        assert_eq!(m.readable(&[2, 0, 3]), [0, 3]);
        let m = map_of(&[(Up, 0), (Up, 0), (Up, 5), (Up, 7)]);
        assert_eq!(m.chain(&[2, 0, 3]), [0, 2, 3]);
        // A draining copy leads only when no copy is up; a recovering one never;
        // unknown servers are left out.
        let m = map_of(&[(Recovering, 3), (Draining, 0)]);
        assert_eq!(m.chain(&[0, 1, 7]), [1, 0]);
        assert_eq!(m.head(&[0, 1, 7]), Some(1));
        assert_eq!(m.readable(&[0, 1]), [1]);
        assert_eq!(m.head(&[0]), None);
        assert!(m.readable(&[0]).is_empty());
    }
}
