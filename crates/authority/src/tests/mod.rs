//! Cluster tests: real openraft, real redb files in temporary directories, members
//! talking through an in-process [`Wire`] that can cut a member off.

mod cluster;
mod failover;
mod restart;
mod single;

use crate::{Authority, Map, NodeId, Params, Renewer, State, Wire, WireError, MARGIN};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Sends the crate's and openraft's logs to the test's output (`RUST_LOG=info`).
pub(crate) fn logs() {
    let filter = tracing_subscriber::EnvFilter::from_default_env();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// The in-process network: the members by id, and who is cut off.
#[derive(Default)]
pub(crate) struct Net {
    nodes: Mutex<HashMap<NodeId, Authority>>,
    cut: Mutex<HashSet<NodeId>>,
}

/// One sender's end of [`Net`].
struct TestWire {
    me: NodeId,
    net: Arc<Net>,
}

impl Net {
    /// The wire server `me` sends through.
    pub(crate) fn wire(self: &Arc<Self>, me: NodeId) -> Arc<dyn Wire> {
        Arc::new(TestWire {
            me,
            net: self.clone(),
        })
    }

    /// Cuts `n` off: every message from or to it is lost.
    pub(crate) fn cut(&self, n: NodeId) {
        self.cut.lock().unwrap().insert(n);
    }

    /// Reconnects `n`.
    pub(crate) fn heal(&self, n: NodeId) {
        self.cut.lock().unwrap().remove(&n);
    }

    fn is_cut(&self, a: NodeId, b: NodeId) -> bool {
        let cut = self.cut.lock().unwrap();
        cut.contains(&a) || cut.contains(&b)
    }

    fn node(&self, n: NodeId) -> Option<Authority> {
        self.nodes.lock().unwrap().get(&n).cloned()
    }
}

impl Wire for TestWire {
    fn call(
        &self,
        to: NodeId,
        body: Vec<u8>,
        deadline: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, WireError>> + Send>> {
        let (me, net) = (self.me, self.net.clone());
        Box::pin(async move {
            if net.is_cut(me, to) {
                return Err(WireError::Unreachable(format!("{me} -> {to} is cut")));
            }
            let Some(node) = net.node(to) else {
                return Err(WireError::Unreachable(format!("{to} is not running")));
            };
            let answer = tokio::time::timeout(deadline, node.handle(&body))
                .await
                .map_err(|_| WireError::Timeout)?;
            // Cut while the request was being answered: the answer is lost too.
            if net.is_cut(me, to) {
                return Err(WireError::Unreachable(format!("{to} -> {me} is cut")));
            }
            Ok(answer)
        })
    }
}

/// A test cluster: members in their own directories on one [`Net`].
pub(crate) struct Cluster {
    pub net: Arc<Net>,
    pub members: Vec<NodeId>,
    pub servers: usize,
    pub params: Params,
    _dir: tempfile::TempDir,
    dirs: Vec<PathBuf>,
}

impl Cluster {
    /// Starts `members` with a map of `servers` servers.
    pub(crate) async fn start(members: &[NodeId], servers: usize, params: Params) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let dirs = members
            .iter()
            .map(|m| dir.path().join(format!("m{m}")))
            .collect();
        let c = Cluster {
            net: Arc::new(Net::default()),
            members: members.to_vec(),
            servers,
            params,
            _dir: dir,
            dirs,
        };
        c.start_all().await;
        c
    }

    /// Starts every member (the lowest, which forms the cluster, last: the others are
    /// there to vote for it).
    pub(crate) async fn start_all(&self) {
        for (i, &m) in self.members.iter().enumerate().rev() {
            let a = Authority::start(
                m,
                self.members.clone(),
                self.servers,
                &self.dirs[i],
                self.net.wire(m),
                self.params.clone(),
                0,
            )
            .await
            .unwrap();
            self.net.nodes.lock().unwrap().insert(m, a);
        }
    }

    /// Member `n` loses its disk: shut down, its directory emptied, started again on
    /// a storage directory with id `disk`.
    pub(crate) async fn replace_disk(&self, n: NodeId, disk: u64) {
        let i = self.members.iter().position(|&m| m == n).unwrap();
        let a = self.net.nodes.lock().unwrap().remove(&n);
        if let Some(a) = a {
            a.shutdown().await;
        }
        std::fs::remove_dir_all(&self.dirs[i]).unwrap();
        std::fs::create_dir_all(&self.dirs[i]).unwrap();
        let a = Authority::start(
            n,
            self.members.clone(),
            self.servers,
            &self.dirs[i],
            self.net.wire(n),
            self.params.clone(),
            disk,
        )
        .await
        .unwrap();
        self.net.nodes.lock().unwrap().insert(n, a);
    }

    /// Shuts every member down and forgets them.
    pub(crate) async fn stop_all(&self) {
        for &m in &self.members {
            let a = self.net.nodes.lock().unwrap().remove(&m);
            if let Some(a) = a {
                a.shutdown().await;
            }
        }
    }

    /// Member `n`.
    pub(crate) fn node(&self, n: NodeId) -> Authority {
        self.net.node(n).unwrap()
    }

    /// Waits until the members not cut off agree on a leader (not cut off either) that
    /// knows it leads; its id.
    pub(crate) async fn leader(&self, within: Duration) -> NodeId {
        let deadline = Instant::now() + within;
        loop {
            if let Some(l) = self.agreed_leader() {
                return l;
            }
            assert!(Instant::now() < deadline, "no leader within {within:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn agreed_leader(&self) -> Option<NodeId> {
        let live: Vec<NodeId> = self
            .members
            .iter()
            .copied()
            .filter(|&m| !self.net.is_cut(m, m))
            .collect();
        let l = self.node(*live.first()?).leader()?;
        let all_agree = live.iter().all(|&m| self.node(m).leader() == Some(l));
        let knows = self.node(l).raft().metrics().borrow().state == openraft::ServerState::Leader;
        (all_agree && knows && live.contains(&l)).then_some(l)
    }

    /// A renewer for server `server`, sending from it.
    pub(crate) fn renewer(&self, server: NodeId, incarnation: u64) -> Renewer {
        self.renewer_on(server, incarnation, 0)
    }

    /// A renewer for server `server` on the storage directory with id `disk`.
    pub(crate) fn renewer_on(&self, server: NodeId, incarnation: u64, disk: u64) -> Renewer {
        Renewer::new(
            server,
            incarnation,
            disk,
            self.members.clone(),
            self.net.wire(server),
            self.params.clone(),
        )
    }

    /// Waits until `f` holds for member `n`'s map; the map.
    pub(crate) async fn wait_map(
        &self,
        n: NodeId,
        within: Duration,
        what: &str,
        f: impl Fn(&Map) -> bool,
    ) -> Map {
        let deadline = Instant::now() + within;
        loop {
            let map = self.node(n).map();
            if f(&map) {
                return map;
            }
            assert!(
                Instant::now() < deadline,
                "member {n}: not {what} within {within:?}: {map:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Cluster {
    /// Polls member `n`'s map until server `s` is in `state`, asserting that no look
    /// finished before `not_before` saw it; the map, and when the last look that did not
    /// see it began (the change came after that moment).
    pub(crate) async fn wait_state(
        &self,
        n: NodeId,
        s: usize,
        state: State,
        not_before: Instant,
        within: Duration,
    ) -> (Map, Instant) {
        let deadline = Instant::now() + within;
        let mut before = Instant::now();
        loop {
            let began = Instant::now();
            let map = self.node(n).map();
            let done = Instant::now();
            if map.servers[s].state == state {
                assert!(
                    done >= not_before,
                    "server {s} {state:?} {:?} too early",
                    not_before - done
                );
                return (map, before);
            }
            before = began;
            assert!(
                done < deadline,
                "server {s} not {state:?} within {within:?}: {map:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One granted lease, as the server saw it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant {
    /// When the answer arrived.
    pub got: Instant,
    /// Until when the lease holds.
    pub until: Instant,
}

/// A server renewing its lease every `lease / 4` (as servers do), retrying at once when a
/// renewal failed; every grant is recorded.
pub(crate) struct Renewing {
    pub grants: Arc<Mutex<Vec<Grant>>>,
    task: JoinHandle<()>,
}

impl Renewing {
    /// Starts renewing with `renewer`.
    pub(crate) fn start(renewer: Renewer, lease: Duration) -> Renewing {
        let grants = Arc::new(Mutex::new(Vec::new()));
        let g = grants.clone();
        let task = tokio::spawn(async move {
            loop {
                match renewer.renew().await {
                    Ok((until, _)) => {
                        g.lock().unwrap().push(Grant {
                            got: Instant::now(),
                            until,
                        });
                        tokio::time::sleep(lease / 4).await;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        Renewing { grants, task }
    }

    /// Stops renewing; the grants.
    pub(crate) fn stop(self) -> Vec<Grant> {
        self.task.abort();
        let g = self.grants.lock().unwrap().clone();
        g
    }
}

impl Drop for Renewing {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The longest stretch within `[from, to]` in which none of `grants` held a lease.
pub(crate) fn longest_lapse(grants: &[Grant], from: Instant, to: Instant) -> Duration {
    let mut covered = from;
    let mut longest = Duration::ZERO;
    for g in grants {
        if g.got > covered {
            longest = longest.max(g.got.min(to) - covered);
        }
        covered = covered.max(g.until);
        if covered >= to {
            return longest;
        }
    }
    longest.max(to.saturating_duration_since(covered))
}

/// The states of `map`'s servers.
pub(crate) fn states(map: &Map) -> Vec<State> {
    map.servers.iter().map(|s| s.state).collect()
}

/// A lease's length at the server: what a grant gives beyond its sending.
pub(crate) fn held(params: &Params) -> Duration {
    params.lease - MARGIN
}

#[test]
fn longest_lapse_counts_uncovered_time() {
    let t0 = Instant::now();
    let s = |ms| t0 + Duration::from_millis(ms);
    let g = |got, until| Grant {
        got: s(got),
        until: s(until),
    };
    // Covered [0, 100], gap to 150, covered to 400, gap to 500 (the end).
    let grants = [g(0, 100), g(150, 300), g(200, 400)];
    assert_eq!(
        longest_lapse(&grants, s(0), s(500)),
        Duration::from_millis(100)
    );
    assert_eq!(
        longest_lapse(&grants, s(0), s(400)),
        Duration::from_millis(50)
    );
    assert_eq!(longest_lapse(&[], s(0), s(10)), Duration::from_millis(10));
}
