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
}
wire_struct!(MapServer {
    state: ServerState,
    since: u64,
    joined: u64,
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
}
