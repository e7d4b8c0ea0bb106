//! A metadata primary ships its store to its group's standbys (`docs/replication.md`,
//! "Metadata: a primary and standbys"): a whole copy of the database file, read while
//! commits go on, then every record its redo log writes, in order. A mutation is
//! answered only once every standby the map keeps in the group holds its record
//! (`pvfs_storage::Replicator`), so with two copies an acknowledged change is on two
//! servers.
//!
//! One task per standby ([`Shipping::run`]) does the copying and the sending; the
//! records wait in that standby's queue, bounded by [`QUEUE_BYTES`] (past it, a copy
//! under way starts over).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pvfs_proto::map::{ClusterMap, Held, ServerState};
use pvfs_proto::{ReplicateStep, Request, Response};
use pvfs_storage::{LogShipper, RecordTap, ReplicatedFuture, Replicator, StorageError};
use tokio::sync::Notify;

use crate::error::{OpError, OpResult};
use crate::lease::Lease;
use crate::peer::{Lane, Peers};

/// Bytes of the copy in one `Replicate` step, and most bytes of records in one.
const STEP_BYTES: usize = 1 << 20;
/// Batches of records sent to one standby before their answers.
const IN_FLIGHT: usize = 4;
/// Most bytes of records one standby's queue holds.
const QUEUE_BYTES: usize = 64 << 20;
/// How often a wait looks at the map again when nothing else woke it.
const LOOK_EVERY: Duration = Duration::from_millis(50);
/// How long a standby goes without a step before it is asked whether it still
/// follows.
const PROBE_EVERY: Duration = Duration::from_millis(250);

/// Where one standby stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// It needs a copy; no records are kept for it.
    NeedCopy,
    /// A copy is under way; records from `from` on are kept for it.
    Copying { from: u64 },
    /// It holds a whole copy and every record through `held`.
    Following { held: u64 },
}

/// One standby of the group.
struct Follower {
    server: u32,
    phase: Phase,
    /// Records not yet confirmed by it, in order, and their bytes.
    queue: VecDeque<(u64, Arc<[u8]>)>,
    queued: usize,
    /// Bytes sent of the copy under way, and its length.
    copied: (u64, u64),
    /// It was evicted for not confirming a change and has not confirmed every
    /// change since (nor taken a new copy): changes are answered without it once
    /// the map calls it down, so it is no second copy of the group whatever its
    /// phase says.
    evicted: bool,
}

/// What the tasks and the store's callbacks share.
struct State {
    /// The store's log, once attached, and its generation.
    log: Option<LogShipper>,
    epoch: u64,
    /// The number of the next record the log writes.
    next: u64,
    followers: Vec<Follower>,
}

/// The shipping of this server's metadata store to its standbys.
pub struct Shipping {
    group: u32,
    /// Whether this server leads the group: only its primary ships it (a server
    /// back from down whose group another took over ships nothing).
    fence: Arc<crate::fence::Fence>,
    /// The servers it may ship to, this one first: the group's members and every
    /// other metadata server, which joins the group as the heir of a lost member.
    members: Vec<u32>,
    /// The group's members as the configuration lists them (`Config::meta_group`):
    /// the map says who holds their places now.
    listed: Vec<u32>,
    lease: Arc<Lease>,
    peers: Arc<Peers>,
    /// How long a mutation waits for its standbys before it is answered without
    /// the ones that did not confirm it, and how long one step may take.
    patience: Duration,
    state: Mutex<State>,
    /// Woken when a record is written, a standby confirms, or the log changes.
    changed: Notify,
    /// Rate limit of the warnings about standbys left behind.
    log_limit: crate::ratelimit::LogLimit,
    /// When each standby was last evicted for not confirming a change.
    evictions: Mutex<std::collections::HashMap<u32, tokio::time::Instant>>,
    /// When each standby last answered a step.
    stepped: Mutex<std::collections::HashMap<u32, tokio::time::Instant>>,
    /// The authority's lease: an evicted standby is down within one.
    lease_time: Duration,
    /// Where the reads of a copy run (the server's blocking work).
    exec: crate::exec::Exec,
    /// A test's file that holds the shipping of records while it exists (probes
    /// go on: the standby still follows, it just gets nothing new;
    /// `PVFS_FAULTS=hold-shipping:PATH`).
    held: std::sync::OnceLock<std::path::PathBuf>,
}

impl Shipping {
    /// The shipping of metadata group `group` (configured members `listed`) from
    /// this server (`members[0]`) to those of `members[1..]` that hold a place in
    /// the group, while `fence` says this server leads the group.
    pub fn new(
        group: u32,
        (listed, members): (Vec<u32>, Vec<u32>),
        lease: Arc<Lease>,
        peers: Arc<Peers>,
        fence: Arc<crate::fence::Fence>,
        (patience, lease_time): (Duration, Duration),
        exec: crate::exec::Exec,
    ) -> Arc<Shipping> {
        assert!(members.len() > 1, "a group with standbys");
        Arc::new(Shipping {
            group,
            fence,
            members: members.clone(),
            listed,
            lease,
            peers,
            patience,
            state: Mutex::new(State {
                log: None,
                epoch: 0,
                next: 0,
                followers: members[1..]
                    .iter()
                    .map(|&server| Follower {
                        server,
                        phase: Phase::NeedCopy,
                        queue: VecDeque::new(),
                        queued: 0,
                        copied: (0, 0),
                        evicted: false,
                    })
                    .collect(),
            }),
            changed: Notify::new(),
            log_limit: crate::ratelimit::LogLimit::new(Duration::from_secs(10)),
            evictions: Mutex::default(),
            stepped: Mutex::default(),
            lease_time,
            exec,
            held: std::sync::OnceLock::new(),
        })
    }

    /// Holds the shipping of records while `path` exists (a test's fault).
    pub fn held_by_test(&self, path: std::path::PathBuf) {
        let _ = self.held.set(path);
    }
}

impl Shipping {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether standby `server` is in the group under `map` (holds a place in it,
    /// and is up, recovering or draining): a mutation waits for it.
    fn kept(&self, map: &ClusterMap, server: u32) -> bool {
        map.state(server).is_some_and(ServerState::serving)
            && map.holds_of(Held::Meta, &self.listed, server)
    }

    /// The servers a primary of metadata group `g` of `config` may ship to, `me`
    /// first: the group's members and every other metadata server (an heir of a
    /// lost member joins the group); with the group's members as listed.
    pub fn candidates(config: &pvfs_config::Config, me: u32, g: usize) -> (Vec<u32>, Vec<u32>) {
        let listed = config.meta_group(g);
        let others = config
            .meta_servers()
            .into_iter()
            .map(|s| s as u32)
            .filter(|&s| s != me);
        let members = std::iter::once(me).chain(others).collect();
        (listed, members)
    }

    /// Starts one shipping task per standby; they run until aborted.
    pub fn spawn(self: &Arc<Self>) -> Vec<tokio::task::JoinHandle<()>> {
        (0..self.members.len() - 1)
            .map(|slot| tokio::spawn(self.clone().run(slot)))
            .collect()
    }

    /// Ships to the standby at `slot` of the group until the task is dropped:
    /// copies when it needs a copy, then sends the records as they come.
    async fn run(self: Arc<Self>, slot: usize) {
        let server = self.members[slot + 1];
        loop {
            if !self.ships_to(server) {
                self.drop_follower(slot);
                tokio::time::sleep(LOOK_EVERY * 2).await;
                continue;
            }
            let phase = self.lock().followers[slot].phase;
            let step = match phase {
                Phase::NeedCopy | Phase::Copying { .. } => self.copy(slot, server).await,
                Phase::Following { .. } => self.follow(slot, server).await,
            };
            match step {
                // The standby holds what it confirmed and skips what it holds: a
                // connection that broke or stalled costs a resend from there, not
                // a new copy.
                Err(e) if matches!(phase, Phase::Following { .. }) && link_failed(&e) => {
                    tracing::debug!(standby = server, "metadata records sent again: {e}");
                    tokio::time::sleep(LOOK_EVERY).await;
                }
                Err(e) => {
                    tracing::debug!(standby = server, "metadata shipping starts over: {e}");
                    self.drop_follower(slot);
                    tokio::time::sleep(LOOK_EVERY * 4).await;
                }
                Ok(()) => {}
            }
        }
    }

    /// Forgets what standby `slot` had: it needs a new copy.
    fn drop_follower(&self, slot: usize) {
        let mut st = self.lock();
        let f = &mut st.followers[slot];
        if f.phase != Phase::NeedCopy {
            f.phase = Phase::NeedCopy;
            f.queue.clear();
            f.queued = 0;
            drop(st);
            self.changed.notify_waiters();
        }
    }

    /// Sends one step of a copy to the standby; its answer's record number.
    async fn step(&self, server: u32, epoch: u64, step: ReplicateStep) -> OpResult<u64> {
        let answer = self
            .peers
            .call_within(server as usize, self.request(epoch, step), self.patience)
            .await?;
        self.answered(server, answer)
    }

    /// Sends a batch of records to the standby on the connection kept for them,
    /// within a quarter of the patience: a batch stuck on its connection is sent
    /// again on a new one well before the standby would be evicted for it (the
    /// standby skips the records it holds); its answer's record number.
    async fn send_records(&self, server: u32, epoch: u64, records: Vec<u8>) -> OpResult<u64> {
        if let Some(path) = self.held.get().filter(|_| !records.is_empty()) {
            let what = "records shipped to a standby";
            crate::seam::hold_while(path, Duration::from_secs(60), what).await;
        }
        let request = self.request(epoch, ReplicateStep::Records { records });
        let answer = self
            .peers
            .call_on(Lane::Shipping, server as usize, request, self.patience / 4)
            .await?;
        self.answered(server, answer)
    }

    /// The request carrying `step` of this group's copy under `epoch`.
    fn request(&self, epoch: u64, step: ReplicateStep) -> Request {
        Request::Replicate(pvfs_proto::req::Replicate {
            group: self.group,
            epoch,
            step,
        })
    }

    /// Standby `server`'s answer to a step: the number of the last record it holds.
    fn answered(&self, server: u32, answer: Response) -> OpResult<u64> {
        match answer {
            Response::Replicated { through } => {
                self.stepped
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(server, tokio::time::Instant::now());
                Ok(through)
            }
            other => Err(OpError::internal(
                pvfs_proto::Errno::EPROTO,
                format!("answer {} to Replicate", other.op_name()),
            )),
        }
    }

    /// Gives standby `slot` a whole copy of the store: the file read a step at a
    /// time while commits go on, then told to replay the records kept from the
    /// copy's start (`pvfs_storage::LogShipper::read_committed`).
    async fn copy(&self, slot: usize, server: u32) -> OpResult<()> {
        let (log, epoch, from) = {
            let mut st = self.lock();
            let Some(log) = st.log.clone() else {
                return Err(OpError::busy(
                    pvfs_proto::Errno::EAGAIN,
                    "no store attached",
                ));
            };
            let (epoch, from) = (st.epoch, st.next);
            let f = &mut st.followers[slot];
            f.phase = Phase::Copying { from };
            f.queue.clear();
            f.queued = 0;
            f.copied = (0, 0);
            (log, epoch, from)
        };
        let len = log.committed_len();
        self.step(server, epoch, ReplicateStep::Begin { len })
            .await?;
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(STEP_BYTES as u64) as usize;
            let reader = log.clone();
            let data = self
                .exec
                .spawn(move || {
                    let mut buf = vec![0u8; n];
                    reader.read_committed(at, &mut buf).map(|()| buf)
                })
                .await
                .map_err(|e| OpError::internal(pvfs_proto::Errno::EIO, e.to_string()))?
                .map_err(|e| OpError::from(StorageError::Io(Arc::new(e))))?;
            self.step(server, epoch, ReplicateStep::Chunk { offset: at, data })
                .await?;
            at += n as u64;
            // A new log meanwhile (a reopen) or too many records kept: start over.
            let mut st = self.lock();
            if st.epoch != epoch || st.followers[slot].phase != (Phase::Copying { from }) {
                return Err(OpError::changed("the copy was overtaken"));
            }
            st.followers[slot].copied = (at, len);
        }
        let held = self
            .step(server, epoch, ReplicateStep::End { next: from })
            .await?;
        let mut st = self.lock();
        if st.epoch != epoch || st.followers[slot].phase != (Phase::Copying { from }) {
            return Err(OpError::changed("the copy was overtaken"));
        }
        st.followers[slot].phase = Phase::Following { held };
        st.followers[slot].evicted = false;
        drop(st);
        self.changed.notify_waiters();
        tracing::info!(
            group = self.group,
            standby = server,
            bytes = len,
            "metadata standby has a whole copy"
        );
        Ok(())
    }

    /// Sends standby `slot` the records kept for it as they come, up to
    /// [`IN_FLIGHT`] batches before their answers (the standby applies them in
    /// order whatever order they arrive in), and notes what it confirms. Returns
    /// when the standby must start over, or this server no longer ships to it.
    async fn follow(&self, slot: usize, server: u32) -> OpResult<()> {
        let (epoch, mut sent) = {
            let st = self.lock();
            match st.followers[slot].phase {
                Phase::Following { held } => (st.epoch, held),
                _ => return Ok(()),
            }
        };
        let mut in_flight = futures::stream::FuturesUnordered::new();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.ships_to(server) {
                return Ok(());
            }
            // The next batch after what was sent, if there is room for it.
            let batch = {
                let st = self.lock();
                if st.epoch != epoch || !matches!(st.followers[slot].phase, Phase::Following { .. })
                {
                    return Ok(());
                }
                let mut batch = Vec::new();
                let mut last = sent;
                if in_flight.len() < IN_FLIGHT {
                    for (seq, rec) in &st.followers[slot].queue {
                        if *seq <= sent {
                            continue;
                        }
                        // Records stay in order and back to back: the batch ends at
                        // the first one that does not fit (a larger one goes alone).
                        if !batch.is_empty() && batch.len() + rec.len() > STEP_BYTES {
                            break;
                        }
                        batch.extend_from_slice(rec);
                        last = *seq;
                    }
                }
                (!batch.is_empty()).then_some((batch, last))
            };
            if let Some((records, last)) = batch {
                sent = last;
                in_flight.push(self.send_records(server, epoch, records));
                continue;
            }
            tokio::select! {
                Some(answer) = futures::StreamExt::next(&mut in_flight) => {
                    self.confirmed(slot, epoch, answer?)?;
                }
                () = &mut notified => {}
                () = tokio::time::sleep(PROBE_EVERY), if in_flight.is_empty() => {
                    // Nothing for a while: an empty step asks whether the standby
                    // still follows (one restarted meanwhile answers that it needs
                    // a copy, even while no change comes).
                    let through = self.send_records(server, epoch, Vec::new()).await?;
                    self.confirmed(slot, epoch, through)?;
                }
            }
        }
    }

    /// Whether this server ships to standby `server` now: it leads the group, holds
    /// a lease and the map keeps the standby in the group.
    /// The group's standbys and where each stands, while this server serves the
    /// group (for `pvfs status`); None otherwise.
    pub fn report(&self) -> Option<pvfs_proto::message::GroupCopies> {
        let map = self.lease.map().ok()?;
        if !self.fence.holds(&self.lease) {
            return None;
        }
        let st = self.lock();
        let standbys = st
            .followers
            .iter()
            .filter(|f| map.holds_of(Held::Meta, &self.listed, f.server))
            .map(|f| {
                let following = matches!(f.phase, Phase::Following { .. })
                    && !f.evicted
                    && self.kept(&map, f.server);
                let (copied, total) = match f.phase {
                    Phase::Copying { .. } => f.copied,
                    _ => (0, 0),
                };
                pvfs_proto::message::StandbyCopy {
                    server: f.server,
                    following,
                    copied,
                    total,
                }
            })
            .collect();
        Some(pvfs_proto::message::GroupCopies {
            group: self.group,
            standbys,
        })
    }

    fn ships_to(&self, server: u32) -> bool {
        self.fence.holds(&self.lease) && self.lease.map().is_ok_and(|m| self.kept(&m, server))
    }

    /// Standby `slot` holds every record through `through` of log generation
    /// `epoch`: they leave its queue, and the changes waiting for them may go.
    fn confirmed(&self, slot: usize, epoch: u64, through: u64) -> OpResult<()> {
        let mut st = self.lock();
        if st.epoch != epoch {
            return Err(OpError::changed("a new log"));
        }
        let f = &mut st.followers[slot];
        if let Phase::Following { held } = &mut f.phase {
            *held = (*held).max(through);
        }
        while f.queue.front().is_some_and(|(seq, _)| *seq <= through) {
            if let Some((_, rec)) = f.queue.pop_front() {
                f.queued -= rec.len();
            }
        }
        // Holding every change written so far, it lacks nothing answered without
        // it (an eviction the authority did not commit leaves it in the group).
        if f.queue.is_empty() && matches!(f.phase, Phase::Following { .. }) {
            f.evicted = false;
        }
        drop(st);
        self.changed.notify_waiters();
        Ok(())
    }

    /// Whether every standby the map keeps holds record `seq` (a standby the map
    /// calls down is not waited for). Not while this server holds no lease (one just
    /// started waits for its first).
    fn holds_everywhere(&self, seq: u64) -> bool {
        if !self.lease.valid() {
            return false;
        }
        let Ok(map) = self.lease.map() else {
            return false;
        };
        let st = self.lock();
        st.followers.iter().all(|f| {
            !self.kept(&map, f.server)
                || matches!(f.phase, Phase::Following { held } if held >= seq)
        })
    }

    /// Asks the authority to evict the standbys the map keeps that do not hold
    /// record `seq` after the patience (each at most once per patience), but for a
    /// copy under way that moves on; whether there was any to evict.
    async fn evict_behind(&self, seq: u64) -> bool {
        // Only the group's primary, holding a lease, may say its standby lags.
        if !self.fence.holds(&self.lease) {
            return false;
        }
        let Ok(map) = self.lease.map() else {
            return false;
        };
        // A copy under way that moves on (its last step answered within the
        // patience) is left to finish: its standby does not follow until it is whole
        // (so it cannot take the group over), and a large store takes longer than
        // one change may wait.
        let moving = |server: u32| {
            let stepped = self.stepped.lock().unwrap_or_else(|e| e.into_inner());
            stepped
                .get(&server)
                .is_some_and(|&at| at.elapsed() < self.patience)
        };
        let behind: Vec<u32> = {
            let st = self.lock();
            st.followers
                .iter()
                .filter(|f| self.kept(&map, f.server))
                .filter(|f| match f.phase {
                    Phase::Following { held } => held < seq,
                    Phase::Copying { .. } => !moving(f.server),
                    Phase::NeedCopy => true,
                })
                .map(|f| f.server)
                .collect()
        };
        if behind.is_empty() {
            return false;
        }
        for server in behind {
            {
                let mut last = self.evictions.lock().unwrap_or_else(|e| e.into_inner());
                let now = tokio::time::Instant::now();
                if last
                    .get(&server)
                    .is_some_and(|&at| now < at + self.patience)
                {
                    continue;
                }
                last.insert(server, now);
            }
            for f in self
                .lock()
                .followers
                .iter_mut()
                .filter(|f| f.server == server)
            {
                f.evicted = true;
            }
            match self.lease.propose_evict(server).await {
                Ok(()) => tracing::warn!(
                    standby = server,
                    "a metadata standby did not confirm a change in {:?}: evicted, it gets a new copy when back",
                    self.patience
                ),
                Err(e) => tracing::warn!(standby = server, "could not evict a metadata standby that did not confirm a change: {e}"),
            }
        }
        true
    }

    /// Tells of the standbys that do not hold record `seq` after the patience: the
    /// change is answered without them. They keep the records they lack queued (a
    /// copy under way goes on), so they catch up once they answer again; only one
    /// that falls [`QUEUE_BYTES`] behind starts over with a new copy.
    fn left_behind(&self, seq: u64) {
        let behind: Vec<u32> = {
            let st = self.lock();
            st.followers
                .iter()
                .filter(|f| !matches!(f.phase, Phase::Following { held } if held >= seq))
                .map(|f| f.server)
                .collect()
        };
        if let Some(dropped) = self.log_limit.allow("left behind") {
            tracing::warn!(
                ?behind,
                seq,
                dropped,
                "metadata standbys did not confirm a change in {:?}; answered without them",
                self.patience
            );
        }
    }
}

impl RecordTap for Shipping {
    fn written(&self, seq: u64, record: Arc<[u8]>) {
        let mut st = self.lock();
        debug_assert!(st.next == 0 || seq == st.next, "records come in order");
        st.next = seq + 1;
        for f in &mut st.followers {
            if f.phase == Phase::NeedCopy {
                continue;
            }
            if f.queued + record.len() > QUEUE_BYTES {
                // It fell too far behind: it gets a new copy.
                f.phase = Phase::NeedCopy;
                f.queue.clear();
                f.queued = 0;
                continue;
            }
            f.queued += record.len();
            f.queue.push_back((seq, record.clone()));
        }
        drop(st);
        self.changed.notify_waiters();
    }
}

impl Replicator for Shipping {
    fn attach(self: Arc<Self>, log: LogShipper) {
        // Every standby starts over. The tap is set without this lock held: the log
        // calls `written` under its own lock, so this one is only ever taken inside
        // that one, never around it.
        {
            let mut st = self.lock();
            st.log = None;
            st.next = 0;
            st.epoch = crate::random::random_u64() | 1;
            for f in &mut st.followers {
                f.phase = Phase::NeedCopy;
                f.queue.clear();
                f.queued = 0;
            }
        }
        let first = log.tap(Some(self.clone()));
        {
            let mut st = self.lock();
            if st.next == 0 {
                st.next = first;
            }
            st.log = Some(log);
        }
        self.changed.notify_waiters();
    }

    fn replicated(self: Arc<Self>, seq: u64) -> ReplicatedFuture {
        let me = self;
        Box::pin(async move {
            let start = tokio::time::Instant::now();
            // Past the patience, the standbys that lack the change are evicted: the
            // map calls them down within a lease, and the change is then answered
            // without them (they get a new copy when back). A copy that misses an
            // acknowledged change is never left in the group to take it over.
            let evict_at = start + me.patience;
            let give_up_at = evict_at + me.lease_time * 2;
            let mut evicted = false;
            loop {
                let notified = me.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                // A server that does not lead its group (back from down, its group
                // taken over) ships nothing and waits for no one: its store is not
                // the group's, and the group's requests are refused by its fence.
                if !me.fence.leads() || me.holds_everywhere(seq) {
                    return;
                }
                let now = tokio::time::Instant::now();
                if now >= give_up_at {
                    // The change is committed here: answering it as failed would
                    // make callers undo what stays done (and a primary that lost its
                    // lease meanwhile is refused the answer by its fence).
                    me.left_behind(seq);
                    return;
                }
                if now >= evict_at && !evicted {
                    evicted = true;
                    if !me.evict_behind(seq).await {
                        // Only copies under way lack it: answered without them.
                        me.left_behind(seq);
                        return;
                    }
                    continue;
                }
                let _ = tokio::time::timeout(LOOK_EVERY, notified).await;
            }
        })
    }
}

/// Whether a step failed on the way (a connection that broke, could not be made or
/// did not answer in time) rather than at the standby, which answered.
fn link_failed(e: &OpError) -> bool {
    e.kind == pvfs_proto::ErrorKind::Unreachable || e.errno == pvfs_proto::Errno::ETIMEDOUT
}
