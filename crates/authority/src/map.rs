//! The map: what the authority decides, and the pure function that applies a command to it.
//!
//! Everything here is deterministic and depends only on the map and the command (and the
//! command's raft log index): every member applies the same log to the same initial map
//! and so holds the same map. Time never enters here; the leader's lease table
//! (`lease.rs`) decides *when* to propose `Down` and `Lost`, and the conditions below
//! decide whether they still hold when they are applied.

use crate::{Error, NodeId};
use serde::{Deserialize, Serialize};

/// A server's state in the map: the wire's, so clients and the authority name states
/// alike (serialized by its name in the authority's log).
pub use pvfs_proto::map::ServerState as State;

/// One server's entry in the map.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ServerEntry {
    /// Its state.
    pub state: State,
    /// The map version at which it entered `state`.
    pub since: u64,
    /// The map version at which it last came back (0 = never left).
    pub joined: u64,
    /// Random per server process start; 0 = never seen.
    pub incarnation: u64,
    /// The raft log index of its last applied `Renew` (decides the `Down` race, see [`Command::Down`]).
    pub renewed: u64,
    /// The server whose copy of this server's metadata group serves it (its
    /// primary), when that is not this server itself: set by [`Command::Lead`].
    #[serde(default)]
    pub led_by: Option<NodeId>,
    /// The primary the map names for this server's group (`led_by`, or this server)
    /// has not served it yet: its [`Command::Serve`] is not committed, so it has
    /// answered nothing for the group, and the group's store is still the copy of
    /// `served_by`. Set by [`Command::Lead`], cleared by [`Command::Serve`] and
    /// [`Command::Yield`].
    #[serde(default)]
    pub unserved: bool,
    /// While `unserved`: the server whose copy served this server's group last
    /// (None: this server); None otherwise.
    #[serde(default)]
    pub served_by: Option<NodeId>,
    /// Its renewals are refused until it is down: a metadata primary could not get
    /// its standby copy to confirm changes (set by [`Command::Evict`]).
    #[serde(default)]
    pub evicted: bool,
    /// The id of its storage directory, from its renewals (0: not known yet): a
    /// renewal with another id comes from a replaced directory (a new disk).
    #[serde(default)]
    pub storage: u64,
    /// Its storage directory was replaced and it has not caught up since: it leads
    /// no metadata group (its stores hold nothing of them).
    #[serde(default)]
    pub fresh: bool,
    /// It copies every datafile it holds a copy of before it is up, not only the
    /// ranges recorded as missed (its storage was replaced, or a server holding
    /// records of what it missed lost them with its own).
    #[serde(default)]
    pub refill: bool,
    /// Since it was first lost: the servers that take its copies of datafiles (set
    /// by its first [`Command::Lost`], kept after); each datafile's copy goes to
    /// one of them, chosen by `ClusterMap::holders` (`docs/replication.md`,
    /// "Rebuild").
    #[serde(default)]
    pub heirs: Vec<NodeId>,
    /// Since it was first lost: the metadata servers that take its places in
    /// metadata groups (set with `heirs`, kept after).
    #[serde(default)]
    pub meta_heirs: Vec<NodeId>,
    /// The map version of its first [`Command::Lost`] or [`Command::Drain`] (0:
    /// never): orders losses for `ClusterMap::holders`.
    #[serde(default)]
    pub lost_at: u64,
    /// The map version at which it last began to leave (lost or drained): its
    /// heirs hold its places since.
    #[serde(default)]
    pub left_at: u64,
    /// It is being drained ([`Command::Drain`]) until it is retired: back from
    /// down, it is draining again once caught up.
    #[serde(default)]
    pub leaving: bool,
    /// The map version under which it last held every copy it took as an heir
    /// ([`Command::Rebuilt`]; 0: never): its copies as an heir of servers lost
    /// before then serve reads.
    #[serde(default)]
    pub rebuilt_at: u64,
    /// Since it was first lost or drained: every server's failure domain then
    /// (`ClusterMap::holders` picks its heirs apart from the other copies' domains;
    /// empty: none named).
    #[serde(default)]
    pub domains: Vec<NodeId>,
    /// Since it last went down from `up` or `draining` (its last [`Command::Down`]),
    /// and while it has not been up since: the servers that served nothing after
    /// it went out as far as the map can tell, each with the log index of its last
    /// granted renewal when the leader decided so. Such a server held no lease
    /// after that moment unless a renewal of it was granted past that index, so
    /// while none was it took no write and no metadata change this server missed;
    /// a granted renewal past the index takes it off the list (a new map version).
    #[serde(default)]
    pub quiet: Vec<(NodeId, u64)>,
    /// Servers whose storage was replaced while this one was out and that served
    /// nothing after it went out ([`ServerEntry::quiet`] then), or that were
    /// still catching up on a replaced disk ([`ServerEntry::fresh`]) when it went
    /// out: their old disks held no record of what it missed nor a metadata
    /// change its copies lack, so it need not copy whole, and its standby copy of
    /// a group they led, if it followed to the moment this server went out, holds
    /// the group's every change. Kept once it is up for those still catching up
    /// (such a group has no primary until a copy that followed takes it over).
    #[serde(default)]
    pub spared_by: Vec<NodeId>,
    /// It joined the file system by [`Command::Grow`]: `pvfs rebalance` hands it a
    /// share of the old servers' places.
    #[serde(default)]
    pub grown: bool,
    /// The shares of other servers' places handed to it ([`Command::Rebalance`]),
    /// oldest first: each moves through the lines (`ClusterMap::lines`).
    #[serde(default)]
    pub hands: Vec<Hand>,
}

/// A share of some servers' places handed to one ([`Command::Rebalance`]): the
/// wire's, so the authority and clients compute the same lines.
pub use pvfs_proto::map::Hand;

/// What the authority decides: every server's state, and one version for the whole map.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Map {
    /// Bumped by one by every change of any server's state or of a group's primary
    /// or store, never otherwise.
    pub version: u64,
    /// Indexed by the server's position in the configuration.
    pub servers: Vec<ServerEntry>,
}

/// A change proposed to the map.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// A server's heartbeat: grants it a lease unless it is retired.
    Renew {
        /// The renewing server.
        server: NodeId,
        /// Its process's incarnation (a restart is a new one).
        incarnation: u64,
        /// The id of its storage directory (a new disk is a new one; 0: not sent).
        #[serde(default)]
        storage: u64,
    },
    /// The leader saw the server's lease lapse. Applies only if no `Renew` of the server
    /// was applied after log index `unless_renewed_after`: a renewal committed between
    /// the leader's decision and this command's commit granted a lease, so it wins.
    Down {
        /// The server whose lease lapsed.
        server: NodeId,
        /// The server's `renewed` as the leader saw it when it decided.
        unless_renewed_after: u64,
        /// The other servers whose leases the leader saw lapsed when it decided,
        /// each with the newest renewal's log index it accounted for: they served
        /// nothing from then on unless a later renewal was granted
        /// ([`ServerEntry::quiet`]).
        #[serde(default)]
        lapsed: Vec<(NodeId, u64)>,
    },
    /// The leader saw the server down longer than `rebuild_after`: it is gone for
    /// good, and its copies of datafiles go to `heirs`.
    Lost {
        /// The server.
        server: NodeId,
        /// The data servers that take its copies (those not gone when the leader
        /// decided; the ones gone when it applies are left out).
        #[serde(default)]
        heirs: Vec<NodeId>,
        /// The metadata servers that take its places in metadata groups, alike.
        #[serde(default)]
        meta_heirs: Vec<NodeId>,
        /// Every server's failure domain (`Params::domains`; empty: none named).
        #[serde(default)]
        domains: Vec<NodeId>,
    },
    /// An heir holds every copy it took of lost servers under map `version`: those
    /// serve reads from now on.
    Rebuilt {
        /// The heir.
        server: NodeId,
        /// The map version under which it finished: void if the heir stopped
        /// serving since (it may have missed changes, and catches up first).
        version: u64,
    },
    /// A recovering server has caught up with what it missed.
    CaughtUp {
        /// The server.
        server: NodeId,
        /// The incarnation that caught up (a later restart must catch up again).
        incarnation: u64,
        /// The map version since which it was recovering when it caught up: a server
        /// that went down and came back meanwhile (the command was on its way) must
        /// catch up again with what it missed then. 0 (logs written before it
        /// existed): not checked.
        #[serde(default)]
        recovering_since: u64,
    },
    /// Start handing over a server's roles and copies.
    Drain {
        /// The server.
        server: NodeId,
        /// The data servers that take its copies while it still serves, as a lost
        /// server's heirs (the ones gone when it applies are left out).
        #[serde(default)]
        heirs: Vec<NodeId>,
        /// The metadata servers that take its places in metadata groups, alike.
        #[serde(default)]
        meta_heirs: Vec<NodeId>,
        /// Every server's failure domain, as [`Command::Lost`]'s.
        #[serde(default)]
        domains: Vec<NodeId>,
    },
    /// A drained (or lost) server leaves for good: a draining one only once every
    /// heir rebuilt what it took of it.
    Retire {
        /// The server.
        server: NodeId,
    },
    /// Servers were added at the end of the configuration: the map grows to
    /// `servers` entries, the new ones down until they renew (they come back
    /// recovering, as a server that was down, with nothing to catch up with). Never
    /// shrinks; proposed by the leader when its configuration has more servers than
    /// the map, none of the new ones a metadata server (`docs/configuration.md`,
    /// "Adding a server").
    Grow {
        /// How many servers the map has then.
        servers: NodeId,
    },
    /// `pvfs rebalance`: server `server` (up, never handed a share before) is
    /// handed `1/share` of the places of each of `from` (those not gone nor
    /// leaving when it applies; never `server` itself): each such place whose
    /// datafile falls in the share takes `server` next in its line, the server
    /// handing it holding it beside until `server` rebuilt since
    /// (`docs/replication.md`, "Rebalance").
    Rebalance {
        /// The server handed the shares.
        server: NodeId,
        /// The servers handing a share of their places.
        #[serde(default)]
        from: Vec<NodeId>,
        /// One place in `share` goes.
        #[serde(default)]
        share: u32,
        /// Every server's failure domain, as [`Command::Lost`]'s: a place goes
        /// to `server` only if no other place's server is in its domain.
        #[serde(default)]
        domains: Vec<NodeId>,
    },
    /// A metadata primary's standby on `server` does not confirm its changes while it
    /// renews its lease: its renewals are refused from now on, so it is down within
    /// a lease like a silent server (and comes back recovering, with new copies), and
    /// a copy that lacks acknowledged changes never takes a group over.
    Evict {
        /// The server.
        server: NodeId,
    },
    /// A standby takes over a metadata group whose primary is no longer serving:
    /// applies only while the group's primary (the group's own server unless a
    /// `Lead` moved it) is not serving and `server` is, so a group has one primary
    /// per map version and the old one's lease lapsed first (`Down` comes only after
    /// it did). The map names `server` the primary, but the group's store stays
    /// the copy that served it last until `server` serves ([`Command::Serve`]).
    Lead {
        /// The group: the index of the metadata server whose group it is.
        group: NodeId,
        /// The standby that takes it.
        server: NodeId,
    },
    /// The primary the map names for a metadata group opened its copy as the
    /// group's store and answers for it from now on (it answers nothing before this
    /// is committed): the copy that served the group before is superseded. Applies
    /// only while the map names `server` and it has not served yet, and `server`
    /// serves with its own storage.
    Serve {
        /// The group.
        group: NodeId,
        /// The primary the map names for it.
        server: NodeId,
    },
    /// The primary the map names for a metadata group never served it and cannot
    /// (its copy does not hold the last primary's end: it restarted, or fell behind,
    /// before it opened the copy): the group goes back to the copy that served it
    /// last. Applies only while the map names `server` and it has not served yet, so
    /// the group never goes back past a primary that answered for it.
    Yield {
        /// The group.
        group: NodeId,
        /// The primary the map names for it.
        server: NodeId,
    },
}

impl Command {
    /// The server the command is about.
    pub fn server(&self) -> NodeId {
        match *self {
            Command::Renew { server, .. }
            | Command::Down { server, .. }
            | Command::Lost { server, .. }
            | Command::Rebuilt { server, .. }
            | Command::CaughtUp { server, .. }
            | Command::Drain { server, .. }
            | Command::Rebalance { server, .. }
            | Command::Retire { server }
            | Command::Evict { server }
            | Command::Lead { server, .. }
            | Command::Serve { server, .. }
            | Command::Yield { server, .. } => server,
            // The last server it adds.
            Command::Grow { servers } => servers.saturating_sub(1),
        }
    }
}

/// What applying one command did.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// A `Renew` granted a lease (the server's state may have changed too: back from `Down`).
    Granted,
    /// A `Renew` was refused: the server is retired or not in the map. No lease.
    Refused,
    /// Another command changed the server's state (and the map's version).
    Changed,
    /// Another command found its condition false (or the server unknown): nothing changed.
    Unchanged,
}

impl Map {
    /// One line of every server's state, named by `names` (the configuration's
    /// order), for a server's log when the map changes: `s0 up; s1 down; s2
    /// recovering (new disk, refill); s3 up, serves s1`.
    pub fn summary(&self, names: &[String]) -> String {
        let name = |i: usize| {
            names
                .get(i)
                .map_or_else(|| format!("server {i}"), Clone::clone)
        };
        let mut parts = Vec::with_capacity(self.servers.len());
        for (i, e) in self.servers.iter().enumerate() {
            let mut flags = Vec::new();
            if e.fresh {
                flags.push("new disk");
            }
            if e.refill {
                flags.push("refill");
            }
            if e.evicted {
                flags.push("evicted");
            }
            let mut part = format!("{} {}", name(i), e.state.name());
            if !flags.is_empty() {
                part.push_str(&format!(" ({})", flags.join(", ")));
            }
            let led: Vec<String> = self
                .servers
                .iter()
                .enumerate()
                .filter(|(_, g)| g.led_by == Some(i as NodeId))
                .map(|(g, _)| name(g))
                .collect();
            if !led.is_empty() {
                part.push_str(&format!(", serves {}", led.join(" ")));
            }
            parts.push(part);
        }
        parts.join("; ")
    }

    /// A new file system's map: version 0, every server `Up` since 0, never left, never seen.
    pub fn new(servers: usize) -> Map {
        let entry = ServerEntry {
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
            lost_at: 0,
            left_at: 0,
            leaving: false,
            rebuilt_at: 0,
            domains: Vec::new(),
            quiet: Vec::new(),
            spared_by: Vec::new(),
            grown: false,
            hands: Vec::new(),
        };
        Map {
            version: 0,
            servers: vec![entry; servers],
        }
    }

    /// The map's bytes (JSON).
    pub fn encode(&self) -> Vec<u8> {
        // A map has nothing serde_json could refuse (no maps with non-string keys, no
        // floats): serializing it cannot fail.
        serde_json::to_vec(self).expect("a map always serializes")
    }

    /// Reads a map [`Map::encode`] wrote.
    pub fn decode(b: &[u8]) -> Result<Map, Error> {
        let map: Map = serde_json::from_slice(b).map_err(|e| Error::Decode(e.to_string()))?;
        map.check()?;
        Ok(map)
    }

    /// Checks the invariants every map the authority made holds: no entry from the
    /// future, and a group led by another server names one that exists.
    pub fn check(&self) -> Result<(), Error> {
        for (i, s) in self.servers.iter().enumerate() {
            if s.since > self.version || s.joined > self.version {
                return Err(Error::Decode(format!(
                    "server {i} since {} joined {} is past the map's version {}",
                    s.since, s.joined, self.version
                )));
            }
            let names = |l: &[NodeId]| {
                l.iter()
                    .all(|&o| o != i as NodeId && (o as usize) < self.servers.len())
            };
            let quiet: Vec<NodeId> = s.quiet.iter().map(|q| q.0).collect();
            if !names(&quiet)
                || !names(&s.spared_by)
                || (matches!(s.state, State::Up | State::Draining) && !s.quiet.is_empty())
            {
                return Err(Error::Decode(format!(
                    "server {i} is {} with quiet {:?} and spared by {:?}",
                    s.state.name(),
                    s.quiet,
                    s.spared_by
                )));
            }
            if (s.fresh || s.refill) && matches!(s.state, State::Up | State::Draining) {
                return Err(Error::Decode(format!(
                    "server {i} is {} with copies still to refill",
                    s.state.name()
                )));
            }
            if let Some(l) = s.led_by {
                if l == i as NodeId || l >= self.servers.len() as NodeId {
                    return Err(Error::Decode(format!(
                        "server {i}'s group is led by {l}, not another server of the map"
                    )));
                }
            }
            if let Some(l) = s.served_by {
                if l == i as NodeId || l >= self.servers.len() as NodeId || !s.unserved {
                    return Err(Error::Decode(format!(
                        "server {i}'s group was served by {l} (unserved: {}), not by another \
                         server of the map before an unserved primary",
                        s.unserved
                    )));
                }
            }
            if s.heirs.contains(&(i as NodeId))
                || s.meta_heirs.contains(&(i as NodeId))
                || (s.lost_at == 0 && !(s.heirs.is_empty() && s.meta_heirs.is_empty()))
                || s.lost_at > self.version
                || s.left_at > self.version
                || s.left_at < s.lost_at
                || (s.leaving && (s.state == State::Up || s.lost_at == 0))
                || s.rebuilt_at > self.version
            {
                return Err(Error::Decode(format!(
                    "server {i} is {} with heirs {:?} since {} (rebuilt at {})",
                    s.state.name(),
                    s.heirs,
                    s.lost_at,
                    s.rebuilt_at
                )));
            }
            if s.hands.iter().any(|h| {
                h.at == 0
                    || h.at > self.version
                    || h.share == 0
                    || h.from.is_empty()
                    || h.from
                        .iter()
                        .any(|&f| f as usize == i || f as usize >= self.servers.len())
            }) {
                return Err(Error::Decode(format!(
                    "server {i} was handed {:?} in a map of version {}",
                    s.hands, self.version
                )));
            }
            // A primary that has not served yet is never the copy that served last:
            // going back to that copy (`Yield`) moves the group.
            if s.unserved && self.store(i) == self.primary(i) {
                return Err(Error::Decode(format!(
                    "server {i}'s group waits for its primary {} to serve, which served it last",
                    self.primary(i)
                )));
            }
        }
        Ok(())
    }

    /// The entry of `server`, if the map has one.
    pub fn server(&self, server: NodeId) -> Option<&ServerEntry> {
        usize::try_from(server)
            .ok()
            .and_then(|i| self.servers.get(i))
    }

    /// Applies `cmd`, committed at raft log index `log_index`; the answer says what it did.
    pub fn apply(&mut self, cmd: &Command, log_index: u64) -> Applied {
        let before = self.version;
        let applied = self.apply_inner(cmd, log_index);
        // The version moves exactly when a state changed, by one (`Granted` may or may
        // not have changed one: back from `Down`, a restart).
        debug_assert!(match applied {
            Applied::Changed => self.version == before + 1,
            Applied::Granted => self.version == before || self.version == before + 1,
            Applied::Refused | Applied::Unchanged => self.version == before,
        });
        debug_assert!(self.check().is_ok(), "{self:?}");
        applied
    }

    fn apply_inner(&mut self, cmd: &Command, log_index: u64) -> Applied {
        if let Command::Grow { servers } = *cmd {
            return self.grow(servers);
        }
        let Some(i) = usize::try_from(cmd.server())
            .ok()
            .filter(|&i| i < self.servers.len())
        else {
            return match cmd {
                Command::Renew { .. } => Applied::Refused,
                _ => Applied::Unchanged,
            };
        };
        let entry = &self.servers[i];
        match *cmd {
            Command::Renew {
                incarnation,
                storage,
                ..
            } => {
                let before = self.version;
                let applied = self.renew(i, incarnation, storage);
                // Only a granted renewal holds a `Down` off (a refused one gave no lease).
                if applied == Applied::Granted {
                    self.servers[i].renewed = log_index;
                    // It holds a lease again: no longer quiet for anyone (a new map,
                    // since the map shows whom each server waits for).
                    let mut unquiet = false;
                    for e in &mut self.servers {
                        let n = e.quiet.len();
                        e.quiet.retain(|&(s, u)| s != i as NodeId || log_index <= u);
                        unquiet |= e.quiet.len() != n;
                    }
                    if unquiet && self.version == before {
                        self.version += 1;
                    }
                }
                applied
            }
            Command::Down {
                unless_renewed_after,
                ref lapsed,
                ..
            } => {
                // A renewal applied after the leader looked granted a lease that runs
                // past this command: the server is alive, and must not be marked down.
                if entry.state.serving() && entry.renewed <= unless_renewed_after {
                    // An evicted server's primaries answered without its copies
                    // before it went out: nobody's quiet since spares it anything.
                    let quiet = if entry.evicted {
                        Vec::new()
                    } else {
                        self.quiet_since_out(i, lapsed)
                    };
                    // Servers on a replaced disk still catching up lead no group
                    // and have served nothing since the disk was replaced, so
                    // nothing after this server goes out either.
                    let fresh = if entry.evicted {
                        Vec::new()
                    } else {
                        self.fresh_but(i)
                    };
                    let was_in = matches!(entry.state, State::Up | State::Draining);
                    self.enter(i, State::Down);
                    let entry = &mut self.servers[i];
                    if was_in {
                        // A new absence: what spared the last one says nothing of it.
                        entry.spared_by = fresh;
                    }
                    entry.quiet = quiet;
                    Applied::Changed
                } else {
                    Applied::Unchanged
                }
            }
            Command::Lost {
                ref heirs,
                ref meta_heirs,
                ref domains,
                ..
            } => {
                let applied = self.transition(i, State::Down, State::Lost);
                if applied == Applied::Changed {
                    self.leave(i, heirs, meta_heirs, domains);
                }
                applied
            }
            Command::Rebuilt { version, .. } => {
                // Only an heir that has been up all along since the map it copied
                // under: one that went down meanwhile comes back recovering and
                // catches up first (and reports again).
                if !matches!(entry.state, State::Up | State::Draining)
                    || entry.since > version
                    || version <= entry.rebuilt_at
                    || version > self.version
                {
                    return Applied::Unchanged;
                }
                self.version += 1;
                self.servers[i].rebuilt_at = version;
                Applied::Changed
            }
            Command::CaughtUp {
                incarnation,
                recovering_since,
                ..
            } => {
                // A server that restarted again while catching up must catch up again: only
                // the incarnation the map knows may say it is done; and one that went down
                // and came back since it began must catch up with that too.
                // A new disk holds nothing of the other groups the map still names
                // it for (it led them, or served them last): it is up only once
                // another copy took each over and served it, so that a group never
                // comes back to an empty store (see `Lead`).
                if entry.state == State::Recovering
                    && entry.incarnation == incarnation
                    && (recovering_since == 0 || entry.since == recovering_since)
                    && !(entry.fresh && self.holds_another_group(i))
                {
                    // A server being drained goes on draining.
                    let state = if entry.leaving {
                        State::Draining
                    } else {
                        State::Up
                    };
                    let fresh = self.fresh_but(i);
                    self.enter(i, state);
                    let entry = &mut self.servers[i];
                    entry.fresh = false;
                    entry.refill = false;
                    entry.quiet.clear();
                    // A group led by a server still on its replaced disk has no
                    // primary: this server's copy, if it followed, may take it over.
                    entry.spared_by.retain(|s| fresh.contains(s));
                    Applied::Changed
                } else {
                    Applied::Unchanged
                }
            }
            Command::Drain {
                ref heirs,
                ref meta_heirs,
                ref domains,
                ..
            } => {
                let applied = self.transition(i, State::Up, State::Draining);
                if applied == Applied::Changed {
                    self.leave(i, heirs, meta_heirs, domains);
                    self.servers[i].leaving = true;
                }
                applied
            }
            Command::Retire { .. } => match entry.state {
                State::Lost => {
                    self.enter(i, State::Retired);
                    Applied::Changed
                }
                // Drained only once every heir holds what it took of it.
                State::Draining if self.rebuilt_heirs(i) => {
                    self.enter(i, State::Retired);
                    Applied::Changed
                }
                _ => Applied::Unchanged,
            },
            Command::Rebalance {
                ref from,
                share,
                ref domains,
                ..
            } => {
                // Only to a server up (it copies at once), handed nothing before
                // (a rebalance asked again changes nothing).
                if entry.state != State::Up
                    || entry.leaving
                    || !entry.hands.is_empty()
                    || share == 0
                {
                    return Applied::Unchanged;
                }
                let mut from: Vec<u32> = from
                    .iter()
                    .copied()
                    .filter(|&f| f != i as NodeId)
                    .filter(|&f| {
                        self.server(f)
                            .is_some_and(|e| !e.state.gone() && !e.leaving)
                    })
                    .filter_map(|f| u32::try_from(f).ok())
                    .collect();
                from.sort_unstable();
                from.dedup();
                if from.is_empty() {
                    return Applied::Unchanged;
                }
                self.version += 1;
                let at = self.version;
                let domains = domains
                    .iter()
                    .filter_map(|&d| u32::try_from(d).ok())
                    .collect();
                self.servers[i].hands.push(Hand {
                    from,
                    share,
                    at,
                    domains,
                });
                Applied::Changed
            }
            Command::Evict { .. } => {
                if entry.state.serving() && !entry.evicted {
                    self.version += 1;
                    self.servers[i].evicted = true;
                    Applied::Changed
                } else {
                    Applied::Unchanged
                }
            }
            Command::Lead { group, server } => {
                let Some(g) = usize::try_from(group)
                    .ok()
                    .filter(|&g| g < self.servers.len())
                else {
                    return Applied::Unchanged;
                };
                let primary = self.primary(g);
                let p = &self.servers[primary];
                // A primary whose storage was replaced holds nothing of the group,
                // nor does a taker whose storage was (it could never serve).
                let primary_serves = p.state.serving() && !p.fresh;
                let taker = &self.servers[i];
                if primary_serves || primary == i || !taker.state.serving() || taker.fresh {
                    return Applied::Unchanged;
                }
                // The copy that served last stays the group's store until the new
                // primary serves (a primary named before it that never served
                // changes nothing of it).
                let store = self.store(g);
                self.version += 1;
                let group = &mut self.servers[g];
                group.led_by = (i != g).then_some(server);
                group.unserved = store != i;
                group.served_by = (group.unserved && store != g).then_some(store as NodeId);
                Applied::Changed
            }
            Command::Serve { group, .. } => {
                let Some(g) = self.unserved_primary(group, i) else {
                    return Applied::Unchanged;
                };
                let taker = &self.servers[i];
                if !taker.state.serving() || taker.fresh {
                    return Applied::Unchanged;
                }
                self.version += 1;
                let group = &mut self.servers[g];
                group.unserved = false;
                group.served_by = None;
                debug_assert_eq!(self.store(g), i, "the primary that served is the store");
                Applied::Changed
            }
            Command::Yield { group, .. } => {
                let Some(g) = self.unserved_primary(group, i) else {
                    return Applied::Unchanged;
                };
                let store = self.store(g);
                self.version += 1;
                let group = &mut self.servers[g];
                group.led_by = (store != g).then_some(store as NodeId);
                group.unserved = false;
                group.served_by = None;
                debug_assert_eq!(self.primary(g), store, "back to the copy that served last");
                Applied::Changed
            }
            // Applied before the server is looked up (it is not in the map yet).
            Command::Grow { .. } => Applied::Unchanged,
        }
    }

    /// Server `i` begins to leave (lost or drained; its state already changed): its
    /// heirs hold its places from now on. The heirs of its first leave stay its
    /// heirs: no other loss's pick (`ClusterMap::holders`) ever moves.
    fn leave(&mut self, i: usize, heirs: &[NodeId], meta_heirs: &[NodeId], domains: &[NodeId]) {
        let version = self.version;
        if self.servers[i].lost_at == 0 {
            let keep =
                |&h: &NodeId| h != i as NodeId && self.server(h).is_some_and(|e| !e.state.gone());
            let heirs: Vec<NodeId> = heirs.iter().copied().filter(keep).collect();
            let meta_heirs: Vec<NodeId> = meta_heirs.iter().copied().filter(keep).collect();
            let entry = &mut self.servers[i];
            entry.heirs = heirs;
            entry.meta_heirs = meta_heirs;
            entry.domains = domains.to_vec();
            entry.lost_at = version;
        }
        // A server being drained that is lost meanwhile left when its drain began:
        // its heirs hold its places since.
        if !self.servers[i].leaving {
            self.servers[i].left_at = version;
        }
    }

    /// Whether every heir of server `i` that is not gone rebuilt since `i` began to
    /// leave.
    fn rebuilt_heirs(&self, i: usize) -> bool {
        let e = &self.servers[i];
        e.heirs.iter().all(|&h| {
            self.server(h)
                .is_none_or(|he| he.state.gone() || he.rebuilt_at >= e.left_at)
        })
    }

    /// Whether the map names server `i` the primary, or the copy that served last,
    /// of a metadata group other than its own.
    fn holds_another_group(&self, i: usize) -> bool {
        (0..self.servers.len()).any(|g| g != i && (self.primary(g) == i || self.store(g) == i))
    }

    /// Group `group`, when the map names server `i` its primary and `i` has not
    /// served it yet (a `Serve` or a `Yield` of `i` applies only then).
    fn unserved_primary(&self, group: NodeId, i: usize) -> Option<usize> {
        usize::try_from(group)
            .ok()
            .filter(|&g| g < self.servers.len())
            .filter(|&g| self.servers[g].unserved && self.primary(g) == i)
    }

    /// The server whose copy of metadata group `g` served it last, and so holds
    /// every change acknowledged for it: its primary, unless the map names a primary
    /// that has not served yet ([`ServerEntry::unserved`]). A server whose own store
    /// no longer is its group's (another server's copy served it) marks that store
    /// superseded; a copy stops being the group's store only when another served.
    pub fn store(&self, g: usize) -> usize {
        match self.servers.get(g) {
            Some(e) if e.unserved => e
                .served_by
                .and_then(|l| usize::try_from(l).ok())
                .filter(|&l| l < self.servers.len())
                .unwrap_or(g),
            _ => self.primary(g),
        }
    }

    /// The server whose copy of metadata group `g` is its primary: `g` itself unless
    /// a [`Command::Lead`] moved the group.
    pub fn primary(&self, g: usize) -> usize {
        self.servers
            .get(g)
            .and_then(|e| e.led_by)
            .and_then(|l| usize::try_from(l).ok())
            .filter(|&l| l < self.servers.len())
            .unwrap_or(g)
    }

    /// The state part of `Renew` on server `i`.
    fn renew(&mut self, i: usize, incarnation: u64, storage: u64) -> Applied {
        let entry = &mut self.servers[i];
        // A refused renewal records nothing, its storage directory's id neither: a
        // new disk seen while an evicted server is refused is still a new disk when
        // it renews once down (recorded now, it would come back as an old one, with
        // nothing refilled, and named for the groups it led).
        let refused = entry.state == State::Retired || (entry.evicted && entry.state.serving());
        if refused {
            return Applied::Refused;
        }
        let replaced = storage != 0 && entry.storage != 0 && entry.storage != storage;
        if storage != 0 {
            entry.storage = storage;
        }
        if replaced {
            // A new disk: nothing it held is there. It comes back recovering, leads no
            // group until a standby took each over and it caught up, and copies every
            // datafile it holds a copy of. The records it kept of what others missed
            // went with its disk: each server not in every chain now copies whole too.
            entry.incarnation = incarnation;
            let was = entry.state;
            if was != State::Recovering {
                self.rejoin(i);
            } else {
                // Still recovering: a new map all the same (its `fresh` changed).
                self.version += 1;
                self.servers[i].since = self.version;
            }
            self.servers[i].fresh = true;
            self.servers[i].refill = true;
            // `renewed` is still that of its last renewal before this one.
            let renewed = self.servers[i].renewed;
            for (j, e) in self.servers.iter_mut().enumerate() {
                if j == i {
                    continue;
                }
                e.spared_by.retain(|&s| s != i as NodeId);
                if matches!(e.state, State::Down | State::Lost | State::Recovering) {
                    // It lost nothing with this disk only if this server served
                    // nothing since it went out.
                    let quiet = e
                        .quiet
                        .iter()
                        .any(|&(s, u)| s == i as NodeId && renewed <= u);
                    if quiet {
                        e.spared_by.push(i as NodeId);
                    } else {
                        e.refill = true;
                    }
                }
            }
            return Applied::Granted;
        }
        let entry = &mut self.servers[i];
        debug_assert!(!entry.evicted || !entry.state.serving(), "refused above");
        match entry.state {
            // Refused above, as an evicted server is until its lease has run out and
            // it is down (`Evict`).
            State::Retired => Applied::Refused,
            State::Lost => {
                // Back after its copies went to its heirs: nobody kept records of
                // what it missed since, so it copies every datafile whole, and takes
                // its place back in the chains (its heirs leave them).
                entry.incarnation = incarnation;
                entry.refill = true;
                self.rejoin(i);
                Applied::Granted
            }
            State::Down => {
                // Back: it missed changes, so it catches up before it is up again.
                entry.incarnation = incarnation;
                self.rejoin(i);
                Applied::Granted
            }
            State::Up | State::Recovering | State::Draining => {
                if entry.incarnation == 0 || entry.incarnation == incarnation {
                    // First sight (record it) or the same process: nothing changes.
                    entry.incarnation = incarnation;
                } else if entry.state == State::Recovering {
                    // Restarted while catching up: still catching up, now as the new process
                    // (only its `CaughtUp` counts).
                    entry.incarnation = incarnation;
                } else {
                    // Restarted: whatever it held in memory is gone, and it may have missed
                    // writes while it was away, so it catches up like one back from `Down`.
                    entry.incarnation = incarnation;
                    self.rejoin(i);
                }
                Applied::Granted
            }
        }
    }

    /// Server `i` comes back: `Recovering`, joined now.
    /// [`Command::Grow`]: new entries for the servers past the map's, down since
    /// this version (a new map), holding nothing (`fresh`), never lost, left or
    /// seen.
    fn grow(&mut self, servers: NodeId) -> Applied {
        let Ok(n) = usize::try_from(servers) else {
            return Applied::Unchanged;
        };
        if n <= self.servers.len() {
            return Applied::Unchanged;
        }
        self.version += 1;
        let mut entry = Map::new(1).servers.remove(0);
        entry.state = State::Down;
        entry.since = self.version;
        // Nothing on it, as on a new disk; `joined` 0 tells it from one
        // (`MapServer::added`).
        entry.fresh = true;
        entry.grown = true;
        self.servers.resize(n, entry);
        Applied::Changed
    }

    fn rejoin(&mut self, i: usize) {
        let was_in = matches!(self.servers[i].state, State::Up | State::Draining);
        self.enter(i, State::Recovering);
        let entry = &mut self.servers[i];
        entry.joined = self.version;
        if was_in {
            // Restarted while the map had it in: its absence began without a
            // `Down`, so nobody is known to have been quiet since.
            entry.quiet.clear();
            entry.spared_by.clear();
        }
    }

    /// The servers but `i` on a replaced disk that have not caught up since
    /// ([`ServerEntry::fresh`]).
    fn fresh_but(&self, i: usize) -> Vec<NodeId> {
        self.servers
            .iter()
            .enumerate()
            .filter(|&(j, e)| j != i && e.fresh)
            .map(|(j, _)| j as NodeId)
            .collect()
    }

    /// What [`ServerEntry::quiet`] of server `i` becomes as it goes down, with
    /// `lapsed` the leader's view when it decided: from `up` or `draining`, the
    /// servers of `lapsed` that have had no renewal granted since; from
    /// `recovering` (its absence goes on), those of its earlier list still quiet.
    fn quiet_since_out(&self, i: usize, lapsed: &[(NodeId, u64)]) -> Vec<(NodeId, u64)> {
        let still = |&(s, u): &(NodeId, u64)| {
            s != i as NodeId && self.server(s).is_some_and(|e| e.renewed <= u)
        };
        let mut quiet: Vec<(NodeId, u64)> = if self.servers[i].state == State::Recovering {
            self.servers[i]
                .quiet
                .iter()
                .copied()
                .filter(still)
                .collect()
        } else {
            lapsed.iter().copied().filter(still).collect()
        };
        quiet.sort_unstable();
        quiet.dedup_by_key(|q| q.0);
        quiet
    }

    /// Moves server `i` from `from` to `to`, or changes nothing if it is not in `from`.
    fn transition(&mut self, i: usize, from: State, to: State) -> Applied {
        if self.servers[i].state == from {
            self.enter(i, to);
            Applied::Changed
        } else {
            Applied::Unchanged
        }
    }

    /// Server `i` enters `state`: a new map version.
    fn enter(&mut self, i: usize, state: State) {
        debug_assert_ne!(self.servers[i].state, state, "a change of state changes it");
        self.version += 1;
        let entry = &mut self.servers[i];
        entry.state = state;
        entry.since = self.version;
        // An eviction lasts until the server stops serving.
        entry.evicted &= state.serving();
    }
}

#[cfg(test)]
mod tests;
