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
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// Since it was first lost: the servers that take its copies of datafiles, in
    /// the order the choice for each datafile rotates through
    /// (`docs/replication.md`, "Rebuild"); empty if it never was. Kept when it
    /// comes back, so no other loss's choice moves.
    pub heirs: Vec<u32>,
    /// Since it was first lost: the metadata servers that take its places in
    /// metadata groups (as standbys), as `heirs` do its copies of datafiles.
    pub meta_heirs: Vec<u32>,
    /// The map version at which it was first lost or drained (0: never).
    pub lost_at: u64,
    /// The map version at which it last began to leave (lost, or drained): its
    /// heirs hold its places since.
    pub left_at: u64,
    /// It is being drained (`pvfs server drain`): its heirs hold its places
    /// beside it until it is retired, also while it is down or catching up.
    pub leaving: bool,
    /// The map version under which it last held every copy it took as an heir
    /// (0: never): its copies as an heir since then serve reads.
    pub rebuilt_at: u64,
    /// The failure domain of every server (by index; servers in one domain share
    /// its number) when it was first lost or drained: each place's heir is picked
    /// in a domain none of the other places' servers is in, when one is left.
    /// Empty: no domains were named, any heir will do.
    pub domains: Vec<u32>,
    /// Servers whose storage was replaced while this one was out and that served
    /// nothing after it went out, or that were still catching up on a replaced
    /// disk when it went out: their old disks held nothing it lacks, so its
    /// standby copy of a group one of them led, if it followed the group to the
    /// moment this server went out, holds every change of the group and may take
    /// the group over (while this server catches up, or once it is up while they
    /// still catch up).
    pub spared_by: Vec<u32>,
    /// While it is out or catching up: the servers that served nothing since it
    /// went out (their leases lapsed by then and none was granted since). They
    /// recorded nothing of what it missed, so its catch-up does not wait for them.
    pub quiet: Vec<u32>,
    /// Joined the file system by `Grow` (added to its configuration): what
    /// `pvfs rebalance` hands old copies to.
    pub grown: bool,
    /// The shares of other servers' places handed to this server (`pvfs
    /// rebalance`, `docs/replication.md`, "Rebalance"), oldest first.
    pub hands: Vec<Hand>,
    /// Its renewals are refused until the map calls it down: a metadata primary
    /// evicted it for not confirming a change (it holds no lease within one, and
    /// its group's changes are then answered without it).
    pub evicted: bool,
}

/// A share of some servers' places handed to one server (`pvfs rebalance`): each
/// place one of `from` holds when the hand is made, whose datafile's handle mixed
/// with the two servers falls in `1/share`, takes the receiving server next in its
/// line ([`ClusterMap::lines`]); the server handing it holds it beside the new one
/// until that one rebuilt since `at`, then sheds its copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Hand {
    /// The servers handing a share of their places.
    pub from: Vec<u32>,
    /// One place in `share` goes (at least 1).
    pub share: u32,
    /// The map version of the hand.
    pub at: u64,
    /// Every server's failure domain at the hand (by index; empty: none named):
    /// a place goes to the server handed it only if no other place's server is
    /// in its domain.
    #[cfg_attr(feature = "serde", serde(default))]
    pub domains: Vec<u32>,
}
wire_struct!(Hand {
    from: Vec<u32>,
    share: u32,
    at: u64,
    domains: Vec<u32>,
});

impl Hand {
    /// Whether the place of datafile `handle` held by `from` falls in the share
    /// handed to server `to`.
    pub fn takes(&self, handle: crate::types::Handle, from: u32, to: u32) -> bool {
        // splitmix64 of the handle and both servers: places spread evenly.
        let mut z =
            handle ^ (u64::from(from) << 32 | u64::from(to)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        self.from.contains(&from) && z.is_multiple_of(u64::from(self.share.max(1)))
    }
}
wire_struct!(MapServer {
    state: ServerState,
    since: u64,
    joined: u64,
    led_by: Option<u32>,
    fresh: bool,
    refill: bool,
    heirs: Vec<u32>,
    meta_heirs: Vec<u32>,
    lost_at: u64,
    left_at: u64,
    leaving: bool,
    rebuilt_at: u64,
    domains: Vec<u32>,
    spared_by: Vec<u32>,
    quiet: Vec<u32>,
    grown: bool,
    hands: Vec<Hand>,
    evicted: bool,
});

/// What a set of copies holds: a datafile's bytes, or a metadata group's store
/// (each kind has its own heirs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// The datafile of this handle: the lost server's `heirs`, the rotation
    /// through them starting from a point the handle moves (so the copies of a
    /// lost server spread over all its heirs).
    Data(crate::types::Handle),
    /// A metadata group: its `meta_heirs`.
    Meta,
}

/// A server holding a copy of a datafile under the map (`ClusterMap::holders`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The server.
    pub server: u32,
    /// The lost server whose copy it took (an heir), if it is not in the layout.
    pub heir_of: Option<u32>,
    /// For an heir: the map version since which it holds this place (the latest
    /// loss of the servers it stands for); its copy serves reads once it rebuilt
    /// under a version at least this ([`MapServer::rebuilt_at`]).
    pub since: u64,
}

/// One server of a place's line ([`ClusterMap::lines`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Step {
    /// The server.
    server: u32,
    /// The map version of the hand that put it in the line (`pvfs rebalance`);
    /// None: the layout's server, or an heir.
    hand: Option<u64>,
}

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

/// The servers holding copies of datafile `df` of a layout of `replicas` copies:
/// with more than one, the layout's servers as `map` has them (a lost server's heir
/// in its place, [`ClusterMap::holders`]); else its one server.
pub fn holders_of(
    map: Option<&ClusterMap>,
    replicas: u32,
    df: &crate::layout::Datafile,
) -> Vec<u32> {
    let listed: Vec<u32> = df.replicas().take(replicas.max(1) as usize).collect();
    match map {
        Some(map) if listed.len() > 1 => map.holder_servers(df.handle, &listed),
        _ => listed,
    }
}

impl Copies {
    /// Whether the datafile has more than one copy.
    pub fn replicated(&self) -> bool {
        !self.servers.is_empty()
    }
}

impl MapServer {
    /// Added to the file system (`Grow`) and not up since: it holds nothing, no
    /// copy and no record of what other servers missed, and takes no new files.
    pub fn added(&self) -> bool {
        self.fresh && self.joined == 0
    }
}

impl ClusterMap {
    /// The servers holding the copies of a datafile whose layout puts them on
    /// `copies` (`docs/replication.md`, "Rebuild"). Each place of the layout has a
    /// line of servers: its layout server, and after each server of the line was
    /// first lost, the heir it picked, rotating through its heirs from a place the
    /// datafile's handle and copies choose (a lost server's copies spread over all
    /// its heirs), the first that was never in a line of this datafile. The place is held by the first server of its line that is not
    /// lost (none: the place is left out). Losses are taken in the order they
    /// first happened and their picks never change, so a later loss never moves a
    /// copy, and a server back from being lost takes its place back (from when
    /// its server is lost again, the heir after it holds the place again, as
    /// from a new loss: [`Holder::since`]).
    pub fn holders(&self, handle: crate::types::Handle, copies: &[u32]) -> Vec<Holder> {
        self.holders_of(Held::Data(handle), copies)
    }

    /// [`ClusterMap::holders`] of a set of copies of `what`: a metadata group's
    /// members (`Config::meta_group`) as the map has them now.
    pub fn holders_of(&self, what: Held, copies: &[u32]) -> Vec<Holder> {
        // No server lost, leaving, ever lost or handed to: every line is its
        // layout server alone, which holds it (the common case, on every read and
        // write).
        if self
            .servers
            .iter()
            .all(|e| e.lost_at == 0 && !e.leaving && !e.state.gone() && e.hands.is_empty())
        {
            return copies
                .iter()
                .filter(|&&s| (s as usize) < self.servers.len())
                .map(|&server| Holder {
                    server,
                    heir_of: None,
                    since: 0,
                })
                .collect();
        }
        let mut out = Vec::with_capacity(copies.len());
        for line in self.steps_of(what, copies) {
            // Down the line: past the servers gone, to the first that is not; past
            // one being drained, to the next too (it takes the place meanwhile);
            // past one that handed the place on, to the one it handed it to (it
            // holds the place beside it until that one rebuilt since the hand).
            let (mut since, mut before) = (0, None);
            for (k, step) in line.iter().enumerate() {
                let s = step.server;
                let Some(e) = self.servers.get(s as usize) else {
                    break;
                };
                let handed = line.get(k + 1).and_then(|n| Some((n.server, n.hand?)));
                if !e.state.gone() {
                    let done = handed.is_some_and(|(n, at)| {
                        self.servers
                            .get(n as usize)
                            .is_some_and(|ne| ne.rebuilt_at >= at)
                    });
                    if !done {
                        out.push(Holder {
                            server: s,
                            heir_of: before,
                            since,
                        });
                    }
                    if !e.leaving && handed.is_none() {
                        break;
                    }
                }
                since = since.max(e.left_at);
                if let Some((_, at)) = handed {
                    since = since.max(at);
                }
                before = Some(s);
            }
        }
        out
    }

    /// The line of each place of `copies` ([`ClusterMap::holders`]): its layout
    /// server, then the heirs picked as each was first lost (in a failure domain
    /// apart from the other places', when the map names domains and one is left),
    /// and the servers handed the place (`pvfs rebalance`), in the order of the
    /// map versions of the losses and hands.
    pub fn lines(&self, handle: crate::types::Handle, copies: &[u32]) -> Vec<Vec<u32>> {
        self.lines_of(Held::Data(handle), copies)
    }

    /// [`ClusterMap::lines`] of a set of copies of `what`.
    pub fn lines_of(&self, what: Held, copies: &[u32]) -> Vec<Vec<u32>> {
        self.steps_of(what, copies)
            .into_iter()
            .map(|line| line.into_iter().map(|s| s.server).collect())
            .collect()
    }

    /// [`ClusterMap::lines_of`], saying which servers were handed their place.
    /// A hand (of datafiles only) moves a place held, as of its version, by one
    /// of the servers handing a share, to the server it hands to, when the
    /// datafile falls in the share ([`Hand::takes`]) and that server was never in
    /// a line of the datafile (so places keep distinct servers).
    fn steps_of(&self, what: Held, copies: &[u32]) -> Vec<Vec<Step>> {
        struct Line {
            steps: Vec<Step>,
            // Its last server's loss was taken.
            taken: bool,
            // The map version up to which hands of its last server were looked at
            // (it became the last then, or a hand passed it by).
            after: u64,
        }
        let mut lines: Vec<Line> = copies
            .iter()
            .map(|&s| Line {
                steps: vec![Step {
                    server: s,
                    hand: None,
                }],
                taken: false,
                after: 0,
            })
            .collect();
        let mut seen: Vec<u32> = copies.to_vec();
        // Every hand to a server, as (version, to, hand).
        let hands: Vec<(u64, u32, &Hand)> = match what {
            Held::Data(_) => self
                .servers
                .iter()
                .enumerate()
                .flat_map(|(to, e)| e.hands.iter().map(move |h| (h.at, to as u32, h)))
                .collect(),
            Held::Meta => Vec::new(),
        };
        let handed = hands.len();
        // Each loss taken adds a server never seen to a line, or ends it; each
        // hand looked at adds one, or passes the line by.
        let bound = (self.servers.len() + 1) * (copies.len() + 1) * (handed + 1);
        for _ in 0..=bound {
            // The next event of each line: its last server's loss (not taken),
            // or the first hand of it after the line's `after`.
            let next = lines
                .iter()
                .enumerate()
                .filter_map(|(at, line)| {
                    let last = line.steps.last()?.server;
                    let e = self.servers.get(last as usize)?;
                    let loss = (!line.taken && e.lost_at != 0).then_some((e.lost_at, at, None));
                    let hand = hands
                        .iter()
                        .filter(|(v, _, h)| *v > line.after && h.from.contains(&last))
                        .min_by_key(|(v, to, _)| (*v, *to))
                        .map(|&(v, to, h)| (v, at, Some((to, h))));
                    [loss, hand]
                        .into_iter()
                        .flatten()
                        .min_by_key(|x| (x.0, x.1))
                })
                .min_by_key(|x| (x.0, x.1));
            let Some((_, at, hand)) = next else {
                break;
            };
            let Some(last) = lines[at].steps.last().map(|s| s.server) else {
                break;
            };
            if let Some((to, h)) = hand {
                lines[at].after = h.at;
                if let Held::Data(handle) = what {
                    // Never into a failure domain another place's server is in.
                    let domain = |s: u32| h.domains.get(s as usize).copied();
                    let apart = domain(to).is_none_or(|d| {
                        !lines
                            .iter()
                            .enumerate()
                            .filter(|&(j, _)| j != at)
                            .filter_map(|(_, l)| l.steps.last())
                            .any(|s| domain(s.server) == Some(d))
                    });
                    if h.takes(handle, last, to) && !seen.contains(&to) && apart {
                        seen.push(to);
                        lines[at].steps.push(Step {
                            server: to,
                            hand: Some(h.at),
                        });
                        lines[at].taken = false;
                    }
                }
                continue;
            }
            let e = &self.servers[last as usize];
            let (heirs, salt) = match what {
                Held::Data(handle) => (&e.heirs, handle as usize),
                Held::Meta => (&e.meta_heirs, 0),
            };
            let rot = salt
                .wrapping_add(copies.first().map_or(0, |&c| c as usize))
                .wrapping_add(at)
                % heirs.len().max(1);
            // In rotation, the first heir never seen in a domain none of the other
            // places' servers (as of this loss) is in; else the first never seen.
            let domain = |s: u32| e.domains.get(s as usize).copied();
            let others: Vec<u32> = lines
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != at)
                .filter_map(|(_, line)| domain(line.steps.last()?.server))
                .collect();
            let order = (0..heirs.len())
                .map(|k| heirs[(rot + k) % heirs.len()])
                .filter(|c| !seen.contains(c));
            let pick = order
                .clone()
                .find(|&c| domain(c).is_some_and(|d| !others.contains(&d)))
                .or_else(|| order.clone().next());
            match pick {
                Some(heir) => {
                    seen.push(heir);
                    lines[at].steps.push(Step {
                        server: heir,
                        hand: None,
                    });
                    lines[at].after = lines[at].after.max(e.lost_at);
                }
                None => lines[at].taken = true,
            }
        }
        lines.into_iter().map(|l| l.steps).collect()
    }

    /// The servers of [`ClusterMap::holders`].
    pub fn holder_servers(&self, handle: crate::types::Handle, copies: &[u32]) -> Vec<u32> {
        self.holders(handle, copies)
            .into_iter()
            .map(|h| h.server)
            .collect()
    }

    /// The servers of [`ClusterMap::holders`] whose copies are whole but for what
    /// they missed while down: all but heirs still rebuilding.
    pub fn whole_holders(&self, handle: crate::types::Handle, copies: &[u32]) -> Vec<u32> {
        self.holders(handle, copies)
            .into_iter()
            .filter(|h| self.rebuilt(h))
            .map(|h| h.server)
            .collect()
    }

    /// Whether `server` holds a copy of a datafile whose layout puts its copies on
    /// `copies` ([`ClusterMap::holders`]).
    pub fn holds(&self, handle: crate::types::Handle, copies: &[u32], server: u32) -> bool {
        self.holds_of(Held::Data(handle), copies, server)
    }

    /// [`ClusterMap::holds`] for a set of copies of `what`.
    pub fn holds_of(&self, what: Held, copies: &[u32], server: u32) -> bool {
        self.holders_of(what, copies)
            .iter()
            .any(|h| h.server == server)
    }

    /// The holders of copies on `copies` that are out of `chain` (down, or gone
    /// with nobody to stand for them): what they miss is recorded for them.
    pub fn absent(&self, handle: crate::types::Handle, copies: &[u32], chain: &[u32]) -> Vec<u32> {
        let mut held = self.holder_servers(handle, copies);
        held.retain(|s| !chain.contains(s));
        held
    }

    /// The heirs of lost or draining server `l` that may hold copies of it not
    /// rebuilt yet: those not gone that have not rebuilt since it began to leave
    /// (`pvfs status`; a drained server is retired once none is left).
    pub fn heirs_rebuilding(&self, l: u32) -> Vec<u32> {
        let Some(e) = self
            .servers
            .get(l as usize)
            .filter(|e| e.state.gone() || e.state == ServerState::Draining)
        else {
            return Vec::new();
        };
        e.heirs
            .iter()
            .copied()
            .filter(|&h| {
                self.servers
                    .get(h as usize)
                    .is_some_and(|he| !he.state.gone() && he.rebuilt_at < e.left_at)
            })
            .collect()
    }

    /// The servers that handed server `to` a share of their places
    /// (`pvfs rebalance`) which it has not rebuilt since (`pvfs status`): they hold
    /// those places beside it until it did.
    pub fn hands_rebuilding(&self, to: u32) -> Vec<u32> {
        let Some(e) = self.servers.get(to as usize) else {
            return Vec::new();
        };
        let mut from: Vec<u32> = e
            .hands
            .iter()
            .filter(|h| e.rebuilt_at < h.at)
            .flat_map(|h| h.from.iter().copied())
            .collect();
        from.sort_unstable();
        from.dedup();
        from
    }

    /// Whether `h` may serve reads of its copy as far as rebuilding goes: a
    /// layout's own copy, or an heir's once it rebuilt since it took the place.
    pub fn rebuilt(&self, h: &Holder) -> bool {
        h.heir_of.is_none()
            || self
                .servers
                .get(h.server as usize)
                .is_some_and(|e| e.rebuilt_at >= h.since)
    }

    /// The chain of a datafile whose copies are on `copies` (in layout order): the
    /// [`ClusterMap::holders`] whose servers are up, draining or recovering, the
    /// recovering ones last, each part ordered by when they last came back (an
    /// heir: when it became one, if later) and then by their place in the layout,
    /// so a server that returns, or an heir, joins at the tail, the head is first,
    /// and a head moves only away from a server that is down
    /// (`docs/replication.md`, "Placement"). The one function that says which copy
    /// leads, for clients and servers alike. A server missing from the map is left
    /// out.
    pub fn chain(&self, handle: crate::types::Handle, copies: &[u32]) -> Vec<u32> {
        self.members(handle, copies)
            .into_iter()
            .map(|h| h.server)
            .collect()
    }

    /// [`ClusterMap::chain`] with who each member stands for.
    fn members(&self, handle: crate::types::Handle, copies: &[u32]) -> Vec<Holder> {
        let mut members: Vec<(u64, usize, Holder)> = self
            .holders(handle, copies)
            .into_iter()
            .enumerate()
            .filter_map(|(at, h)| {
                let e = self.servers.get(h.server as usize)?;
                let since = h.since;
                matches!(
                    e.state,
                    ServerState::Up | ServerState::Draining | ServerState::Recovering
                )
                .then_some((e.joined.max(since), at, h))
            })
            .collect();
        // Recovering copies after the others: the head (the first one up) is then
        // first, and every copy that takes new writes is after it.
        members.sort_unstable_by_key(|&(joined, at, h)| {
            (
                self.state(h.server) == Some(ServerState::Recovering),
                joined,
                at,
            )
        });
        members.into_iter().map(|(_, _, h)| h).collect()
    }

    /// The copy of `copies` that takes writes now: the first member of the chain that
    /// is up, else the first draining one (a recovering one never leads, nor an heir
    /// still rebuilding).
    pub fn head(&self, handle: crate::types::Handle, copies: &[u32]) -> Option<u32> {
        let chain = self.members(handle, copies);
        let first = |want| {
            chain
                .iter()
                .find(|h| self.state(h.server) == Some(want) && self.rebuilt(h))
                .map(|h| h.server)
        };
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
    /// recovering copy may lack what it missed, an heir still rebuilding what it
    /// took), in chain order.
    pub fn readable(&self, handle: crate::types::Handle, copies: &[u32]) -> Vec<u32> {
        self.members(handle, copies)
            .into_iter()
            .filter(|h| self.state(h.server) != Some(ServerState::Recovering) && self.rebuilt(h))
            .map(|h| h.server)
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
                    heirs: if i == 2 { vec![0, 1] } else { Vec::new() },
                    meta_heirs: if i == 2 { vec![1] } else { Vec::new() },
                    lost_at: 2,
                    left_at: 3,
                    leaving: i == 4,
                    rebuilt_at: i as u64,
                    domains: if i == 2 {
                        vec![0, 0, 2, 2, 4]
                    } else {
                        Vec::new()
                    },
                    spared_by: if i == 3 { vec![2] } else { Vec::new() },
                    quiet: if i == 1 { vec![0, 2] } else { Vec::new() },
                    grown: i == 3,
                    hands: if i == 3 {
                        vec![Hand {
                            from: vec![0, 1],
                            share: 5,
                            at: 6,
                            domains: Vec::new(),
                        }]
                    } else {
                        Vec::new()
                    },
                    evicted: i == 4,
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
                    heirs: Vec::new(),
                    meta_heirs: Vec::new(),
                    lost_at: 0,
                    left_at: 0,
                    leaving: false,
                    rebuilt_at: 0,
                    spared_by: Vec::new(),
                    quiet: Vec::new(),
                    domains: Vec::new(),
                    grown: false,
                    hands: Vec::new(),
                    evicted: false,
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
        assert_eq!(all_up.chain(0, &[2, 0, 3]), [2, 0, 3]);
        assert_eq!(all_up.head(0, &[2, 0, 3]), Some(2));
        assert_eq!(all_up.readable(0, &[2, 0, 3]), [2, 0, 3]);
        // The head is down: the next copy leads.
        let m = map_of(&[(Up, 0), (Up, 0), (Down, 0), (Lost, 0)]);
        assert_eq!(m.chain(0, &[2, 0, 3]), [0]);
        assert_eq!(m.head(0, &[2, 0, 3]), Some(0));
        // It came back (recovering since version 5): it joins at the tail, never
        // leads, serves no reads; once up it stays at the tail.
        let m = map_of(&[(Up, 0), (Up, 0), (Recovering, 5), (Up, 0)]);
        assert_eq!(m.chain(0, &[2, 0, 3]), [0, 3, 2]);
        assert_eq!(m.head(0, &[2, 0, 3]), Some(0));
        assert_eq!(m.readable(0, &[2, 0, 3]), [0, 3]);
        let m = map_of(&[(Up, 0), (Up, 0), (Up, 5), (Up, 7)]);
        assert_eq!(m.chain(0, &[2, 0, 3]), [0, 2, 3]);
        // A copy still recovering that came back before the head did (both were
        // out) follows every copy that is up: the head is first and passes each
        // change on to it. Ordered by when they came back alone, the head was last
        // and passed nothing on: the recovering copy missed acknowledged writes,
        // with nothing recorded for it to catch up.
        let m = map_of(&[(Up, 7), (Recovering, 5)]);
        assert_eq!(m.chain(0, &[1, 0]), [0, 1]);
        assert_eq!(m.head(0, &[1, 0]), Some(0));
        // A draining copy leads only when no copy is up; a recovering one never;
        // unknown servers are left out.
        let m = map_of(&[(Recovering, 3), (Draining, 0)]);
        assert_eq!(m.chain(0, &[0, 1, 7]), [1, 0]);
        assert_eq!(m.head(0, &[0, 1, 7]), Some(1));
        assert_eq!(m.readable(0, &[0, 1]), [1]);
        assert_eq!(m.head(0, &[0]), None);
        assert!(m.readable(0, &[0]).is_empty());
    }

    #[test]
    fn heirs_stand_in_for_lost_servers_and_serve_reads_once_rebuilt() {
        use ServerState::*;
        let mut m = map_of(&[(Up, 0); 5]);
        m.version = 20;
        let lose = |m: &mut ClusterMap, s: usize, at: u64, heirs: Vec<u32>| {
            m.servers[s].state = Lost;
            m.servers[s].since = at;
            m.servers[s].left_at = at;
            if m.servers[s].lost_at == 0 {
                m.servers[s].lost_at = at;
                m.servers[s].heirs = heirs;
            }
        };
        lose(&mut m, 1, 4, vec![0, 2, 3, 4]);
        // Each set picks from its own place in the heirs: not one server for all.
        let picks: Vec<u32> = [[0, 1], [1, 2], [4, 1]]
            .iter()
            .map(|c| {
                let h = m.holders(0, c);
                assert_eq!(h.len(), 2);
                let heir = h.iter().find(|h| h.heir_of == Some(1)).unwrap();
                assert!(!c.contains(&heir.server), "an heir holds no copy already");
                assert_eq!(heir.since, 4);
                heir.server
            })
            .collect();
        assert!(picks.iter().any(|&p| p != picks[0]), "{picks:?}");
        // The heir joins at the tail, takes writes, serves no read until rebuilt.
        let heir = picks[1];
        assert_eq!(m.chain(0, &[1, 2]), [2, heir]);
        assert_eq!(m.head(0, &[1, 2]), Some(2));
        assert_eq!(m.readable(0, &[1, 2]), [2]);
        m.servers[heir as usize].rebuilt_at = 3;
        assert_eq!(
            m.readable(0, &[1, 2]),
            [2],
            "rebuilt before it took the place"
        );
        m.servers[heir as usize].rebuilt_at = 5;
        assert_eq!(m.readable(0, &[1, 2]), [2, heir]);
        // A later loss moves no earlier heir; the next heir stands for it.
        let before = m.holders(0, &[1, 2]);
        lose(&mut m, 2, 7, vec![0, 3, 4]);
        let after = m.holders(0, &[1, 2]);
        assert_eq!(after[0], before[0]);
        assert_eq!(after[1].heir_of, Some(2));
        assert_ne!(after[1].server, after[0].server);
        // Not rebuilt yet, the second heir does not lead even when it is first.
        assert_eq!(m.head(0, &[1, 2]), Some(heir));
        // An heir lost in turn is stood for by its own heir, since its loss.
        lose(&mut m, heir as usize, 9, vec![0, 3, 4]);
        let again = m.holders(0, &[1, 2]);
        assert_eq!(again[1], after[1]);
        assert_eq!((again[0].heir_of, again[0].since), (Some(heir), 9));
        // The first lost server comes back: it holds its place again, and nothing
        // else moves.
        m.servers[1].state = Recovering;
        let back = m.holders(0, &[1, 2]);
        assert_eq!(
            back[0],
            Holder {
                server: 1,
                heir_of: None,
                since: 0
            }
        );
        assert_eq!(back[1], after[1]);
        // Lost again: its line goes on where it was, past the heirs already in it.
        lose(&mut m, 1, 12, Vec::new());
        let relost = m.holders(0, &[1, 2]);
        assert_eq!(
            (relost[0].server, relost[0].heir_of),
            (again[0].server, again[0].heir_of),
            "{relost:?}"
        );
        assert_eq!(
            relost[0].since, 12,
            "the heir holds the place since the new loss"
        );
        // Over many datafiles of one set, the picks spread over every heir that
        // holds no copy of the set already.
        let mut m = map_of(&[(Up, 0); 6]);
        m.servers[2].state = Lost;
        m.servers[2].lost_at = 3;
        m.servers[2].heirs = vec![0, 1, 3, 4, 5];
        let mut picked: Vec<u32> = (0..64u64)
            .map(|h| m.holders(h, &[2, 3])[0].server)
            .collect();
        picked.sort_unstable();
        picked.dedup();
        assert_eq!(picked, [0, 1, 4, 5]);
        // No heir left to pick: the copy is left out.
        let mut m = map_of(&[(Up, 0), (Lost, 0)]);
        m.servers[1].heirs = vec![0];
        m.servers[1].lost_at = 1;
        m.servers[1].left_at = 1;
        assert_eq!(m.holder_servers(0, &[0, 1]), [0]);
    }

    /// Four old servers and one added (4), handed a fifth of every old server's
    /// places at version 10.
    fn handed_map() -> ClusterMap {
        let mut m = map_of(&[(ServerState::Up, 0); 5]);
        m.version = 11;
        m.servers[4].grown = true;
        m.servers[4].hands = vec![Hand {
            from: vec![0, 1, 2, 3],
            share: 5,
            at: 10,
            domains: Vec::new(),
        }];
        m
    }

    /// Every set of two distinct old servers.
    fn old_pairs() -> Vec<[u32; 2]> {
        let mut sets = Vec::new();
        for a in 0..4 {
            for b in 0..4 {
                if a != b {
                    sets.push([a, b]);
                }
            }
        }
        sets
    }

    #[test]
    fn a_hand_moves_a_share_of_places_to_the_added_server() {
        let mut m = handed_map();
        let (mut moved, mut places) = (0, 0);
        for h in 0..500u64 {
            for c in old_pairs() {
                let held = m.holders(h, &c);
                let servers: Vec<u32> = held.iter().map(|h| h.server).collect();
                let mut distinct = servers.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), servers.len(), "{h} {c:?}: {held:?}");
                // Until the new server rebuilt, both layout servers hold their
                // places, serve reads and lead; the new one is at the tail.
                for s in c {
                    assert!(servers.contains(&s), "{h} {c:?}: {held:?}");
                }
                assert_eq!(m.readable(h, &c), c.to_vec());
                assert_eq!(m.head(h, &c), Some(c[0]));
                places += 2;
                if let Some(n) = held.iter().find(|x| x.server == 4) {
                    moved += 1;
                    assert_eq!(n.since, 10);
                    assert!(n.heir_of.is_some_and(|s| c.contains(&s)));
                    assert_eq!(m.chain(h, &c).last(), Some(&4));
                    assert_eq!(held.len(), 3);
                } else {
                    assert_eq!(held.len(), 2);
                }
            }
        }
        // About a fifth of the places (less the datafiles whose two places both
        // fall in the share: the second stays).
        assert!(
            moved * 100 >= places * 15 && moved * 100 <= places * 21,
            "{moved} of {places}"
        );
        // Rebuilt before the hand: nothing changes.
        let before: Vec<Vec<Holder>> = (0..50).map(|h| m.holders(h, &[0, 1])).collect();
        m.servers[4].rebuilt_at = 9;
        assert_eq!(m.hands_rebuilding(4), [0, 1, 2, 3]);
        let after: Vec<Vec<Holder>> = (0..50).map(|h| m.holders(h, &[0, 1])).collect();
        assert_eq!(before, after);
        // Rebuilt since: only the new server holds the places handed, and serves
        // them; the servers that handed them hold them no longer.
        m.servers[4].rebuilt_at = 10;
        assert!(m.hands_rebuilding(4).is_empty());
        let mut handed_on = 0;
        for h in 0..500u64 {
            for c in old_pairs() {
                let held = m.holder_servers(h, &c);
                assert_eq!(held.len(), 2, "{h} {c:?}: {held:?}");
                assert_ne!(held[0], held[1]);
                if held.contains(&4) {
                    handed_on += 1;
                    let kept: Vec<u32> = c.iter().copied().filter(|s| held.contains(s)).collect();
                    assert_eq!(kept.len(), 1, "{h} {c:?}: {held:?}");
                    assert_eq!(m.readable(h, &c).len(), 2);
                    let lines = m.lines(h, &c);
                    let gone = c.iter().find(|s| !held.contains(s)).copied();
                    assert!(lines
                        .iter()
                        .any(|l| l.len() == 2 && Some(l[0]) == gone && l[1] == 4));
                }
            }
        }
        assert_eq!(handed_on, moved);
    }

    #[test]
    fn a_hand_never_moves_a_place_to_a_server_holding_another() {
        let m = handed_map();
        let mut m = m;
        m.servers[4].rebuilt_at = 10;
        // Sets with a copy on the added server already (new files): the other
        // place never goes to it too.
        for h in 0..500u64 {
            for a in 0..4 {
                for c in [[a, 4], [4, a]] {
                    assert_eq!(m.holder_servers(h, &c), c.to_vec(), "{h} {c:?}");
                }
            }
        }
        // Three copies over five servers, two hands and a loss after them: every
        // place's server is distinct, and the count of places stays.
        let mut m = map_of(&[(ServerState::Up, 0); 6]);
        m.version = 30;
        m.servers[4].hands = vec![Hand {
            from: vec![0, 1, 2, 3],
            share: 3,
            at: 10,
            domains: Vec::new(),
        }];
        m.servers[5].hands = vec![Hand {
            from: vec![0, 1, 2, 3, 4],
            share: 3,
            at: 12,
            domains: Vec::new(),
        }];
        m.servers[4].rebuilt_at = 11;
        m.servers[5].rebuilt_at = 13;
        for h in 0..300u64 {
            for c in [[0, 1, 2], [3, 2, 1], [2, 0, 3]] {
                let held = m.holder_servers(h, &c);
                let mut d = held.clone();
                d.sort_unstable();
                d.dedup();
                assert_eq!((held.len(), d.len()), (3, 3), "{h} {c:?}: {held:?}");
            }
        }
        // The added server is lost after it rebuilt: its places go to its heirs,
        // none to a server that already holds a copy, and the servers that
        // handed them on do not hold them again (their copies are shed).
        m.servers[4].state = ServerState::Lost;
        m.servers[4].lost_at = 20;
        m.servers[4].left_at = 20;
        m.servers[4].heirs = vec![0, 1, 2, 3, 5];
        for h in 0..300u64 {
            for c in [[0, 1, 2], [3, 2, 1], [2, 0, 3]] {
                let held = m.holders(h, &c);
                let mut d: Vec<u32> = held.iter().map(|h| h.server).collect();
                d.sort_unstable();
                d.dedup();
                assert_eq!(d.len(), held.len(), "{h} {c:?}: {held:?}");
                assert!(!d.contains(&4));
                for x in &held {
                    if x.heir_of == Some(4) {
                        assert_eq!(x.since, 20, "{h} {c:?}: {held:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_hand_keeps_the_copies_in_distinct_domains() {
        // Racks {0, 1} and {2, 3, 4}; 4 added and handed half of every place.
        let mut m = map_of(&[(ServerState::Up, 0); 5]);
        m.version = 11;
        m.servers[4].hands = vec![Hand {
            from: vec![0, 1, 2, 3],
            share: 2,
            at: 10,
            domains: vec![0, 0, 2, 2, 2],
        }];
        m.servers[4].rebuilt_at = 10;
        let mut moved = 0;
        for h in 0..200u64 {
            let held = m.holder_servers(h, &[0, 2]);
            assert_eq!(held.len(), 2);
            let rack = |s: u32| [0, 0, 2, 2, 2][s as usize];
            assert_ne!(rack(held[0]), rack(held[1]), "{h}: {held:?}");
            // Only the place in the other rack goes to 4.
            assert_eq!(held[0], 0, "{h}: {held:?}");
            moved += usize::from(held[1] == 4);
        }
        assert!(moved > 50, "{moved}");
        // Without domains, either place may go.
        m.servers[4].hands[0].domains.clear();
        assert!((0..200u64).any(|h| m.holder_servers(h, &[0, 2])[0] == 4));
    }

    #[test]
    fn a_hand_is_taken_in_order_with_the_losses() {
        use ServerState::*;
        // Server 1 lost at 5 with heirs 0, 2, 3; server 4 handed a share of 0, 2
        // and 3 at 10: the places their heirs took of 1 are handed on too, and
        // ones an heir takes of a loss after the hand are not.
        let mut m = map_of(&[(Up, 0); 5]);
        m.version = 20;
        m.servers[1].state = Lost;
        m.servers[1].lost_at = 5;
        m.servers[1].left_at = 5;
        m.servers[1].heirs = vec![0, 2, 3];
        m.servers[4].hands = vec![Hand {
            from: vec![0, 2, 3],
            share: 2,
            at: 10,
            domains: Vec::new(),
        }];
        let mut via_heir = 0;
        for h in 0..200u64 {
            let lines = m.lines(h, &[1, 3]);
            if lines[0].len() == 3 {
                assert_eq!(lines[0][2], 4);
                via_heir += 1;
            }
        }
        assert!(via_heir > 0);
        let mut m2 = m.clone();
        m2.servers[2].state = Lost;
        m2.servers[2].lost_at = 15;
        m2.servers[2].left_at = 15;
        m2.servers[2].heirs = vec![0, 3, 4];
        for h in 0..200u64 {
            let lines = m2.lines(h, &[2, 3]);
            // A place 2 handed before its loss stays handed; one it kept goes to
            // an heir, never handed again by the hand before the loss.
            if let Some(heir) = lines[0].get(1) {
                if lines[0].len() == 3 {
                    assert_eq!(lines[0][1], 4, "{h}: {lines:?}");
                }
                assert_ne!(Some(heir), lines[1].last());
            }
        }
    }

    #[test]
    fn heirs_are_picked_apart_from_the_other_copies_domains() {
        use ServerState::*;
        // Three racks of two: {0, 1}, {2, 3}, {4, 5}; copies on 0 and 2, and 0 lost.
        let picks = |domains: Vec<u32>| -> Vec<u32> {
            let mut m = map_of(&[(Up, 0); 6]);
            m.servers[0].state = Lost;
            m.servers[0].lost_at = 3;
            m.servers[0].heirs = vec![1, 2, 3, 4, 5];
            m.servers[0].domains = domains;
            let mut picked: Vec<u32> = (0..64u64)
                .map(|h| m.holders(h, &[0, 2])[0].server)
                .collect();
            picked.sort_unstable();
            picked.dedup();
            picked
        };
        // Never beside the other copy in its rack, spread over the rest.
        assert_eq!(picks(vec![0, 0, 2, 2, 4, 4]), [1, 4, 5]);
        // Without domains any heir not holding a copy will do: 3 too.
        assert_eq!(picks(Vec::new()), [1, 3, 4, 5]);
        // No heir apart left: one in the same domain rather than none.
        let mut m = map_of(&[(Up, 0); 4]);
        m.servers[0].state = Lost;
        m.servers[0].lost_at = 3;
        m.servers[0].heirs = vec![3];
        m.servers[0].domains = vec![0, 0, 2, 2];
        assert_eq!(m.holder_servers(7, &[0, 2]), [3, 2]);
        // A later loss leaves the earlier pick where it is: the other copy's
        // domain is taken as it was when the first was lost.
        let mut m = map_of(&[(Up, 0); 6]);
        let domains = vec![0, 0, 2, 2, 4, 4];
        for (s, at, heirs) in [
            (0usize, 3u64, vec![1, 2, 3, 4, 5]),
            (2, 5, vec![0, 1, 3, 4, 5]),
        ] {
            m.servers[s].state = Lost;
            m.servers[s].lost_at = at;
            m.servers[s].heirs = heirs;
            m.servers[s].domains = domains.clone();
        }
        for h in 0..64u64 {
            let held = m.holder_servers(h, &[0, 2]);
            assert_eq!(held.len(), 2, "{h}: {held:?}");
            let rack = |s: u32| domains[s as usize];
            assert_ne!(rack(held[0]), rack(held[1]), "{h}: {held:?}");
        }
    }
}
