//! Datafiles with more than one copy (`docs/replication.md`, "Data: chains"): the
//! cluster map this client routes by, which copy a request goes to under it (a
//! change to the head of the datafile's chain, a read to any copy that is up), and
//! waiting out a failover: a copy that fails or refuses with a map error is asked
//! again under a newer map, until the authority has moved its role elsewhere.

use std::sync::Arc;
use std::time::Duration;

use pvfs_proto::layout::Datafile;
use pvfs_proto::map::{ClusterMap, Copies, ServerState};
use pvfs_proto::{req, Creds, Errno, ErrorKind, Request, Response, Scope};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::pool::{unexpected, Pool};

/// Which copy a request needs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pick {
    /// The head of the chain (writes, truncates, fallocates).
    Head,
    /// Any copy that is up; `spread` picks among them (reads of one client spread
    /// over the copies by datafile).
    Read { spread: usize },
}

impl Pool {
    /// The cluster map this client routes by: the cached one, or one fetched from
    /// the servers; with `newer_than`, one fetched again (a server said the cached
    /// one is stale, or a copy failed).
    pub(crate) async fn cluster_map(
        &self,
        creds: &Creds,
        newer_than: Option<u64>,
    ) -> Result<Arc<ClusterMap>> {
        if newer_than.is_none() {
            if let Some(m) = self.maps.lock().unwrap_or_else(|e| e.into_inner()).clone() {
                return Ok(m);
            }
        }
        let fetched = Arc::new(self.fetch_map(creds).await?);
        let mut cached = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        // Versions only grow: keep the newer of the two.
        if cached.as_ref().is_none_or(|c| c.version <= fetched.version) {
            *cached = Some(fetched.clone());
        }
        Ok(cached.clone().unwrap_or(fetched))
    }

    /// Asks the authority's members first (they know a new map first), then the
    /// other servers, for the newest map they know.
    pub(crate) async fn fetch_map(&self, creds: &Creds) -> Result<ClusterMap> {
        let r = &self.config().replication;
        if r.authority.is_empty() {
            return Err(Error::new(
                Errno::EOPNOTSUPP,
                "this file system has no authority ([replication] authority in its configuration)",
            ));
        }
        let others = (0..self.config().servers.len()).filter(|i| !r.authority.contains(i));
        let mut last = Error::new(Errno::EHOSTDOWN, "no server answered");
        // A live server answers at once: one that is stopped (`SIGSTOP`) or cut off
        // must not hold the question up for a whole request timeout while the map
        // it would tell is the one that replaces it.
        let per_server = (r.lease / 2).max(Duration::from_millis(250));
        // The server that answered last is asked first: one that stopped answering
        // costs one deadline, not one per question.
        let last_source = self.map_source.load(std::sync::atomic::Ordering::Relaxed);
        let order: Vec<usize> = std::iter::once(last_source)
            .filter(|&i| i < self.config().servers.len())
            .chain(
                r.authority
                    .iter()
                    .copied()
                    .chain(others)
                    .filter(|&i| i != last_source),
            )
            .collect();
        for i in order {
            let asked = self.rpc(i, creds, Request::GetMap(req::GetMap {}));
            match tokio::time::timeout(per_server, asked).await {
                Ok(Ok(Response::Map { map })) => {
                    self.map_source
                        .store(i, std::sync::atomic::Ordering::Relaxed);
                    return Ok(map);
                }
                Ok(Ok(other)) => last = unexpected("GetMap", &other),
                Ok(Err(e)) => last = e,
                Err(_) => {
                    last = Error::new(
                        Errno::ETIMEDOUT,
                        format!("{} did not tell its cluster map in time", self.name(i)),
                    )
                }
            }
        }
        Err(last)
    }

    /// The newest cluster map any server tells, every server asked at once, each
    /// within half a lease: a server that has just woken (`SIGCONT`, a network back)
    /// still tells the map it went to sleep with, which may call up a server the
    /// others know is down.
    pub(crate) async fn newest_map(&self, creds: &Creds) -> Result<ClusterMap> {
        let per_server = (self.config().replication.lease / 2).max(Duration::from_millis(250));
        let asks = (0..self.config().servers.len()).map(|i| async move {
            let asked = self.rpc(i, creds, Request::GetMap(req::GetMap {}));
            match tokio::time::timeout(per_server, asked).await {
                Ok(Ok(Response::Map { map })) => Some(map),
                _ => None,
            }
        });
        let newest = futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            // Of the newest, one whose server knows the authority's leader.
            .max_by_key(|m| (m.version, m.leader.is_some()));
        match newest {
            Some(map) => Ok(map),
            None => self.fetch_map(creds).await,
        }
    }
}

impl Pool {
    /// Runs `call`, sent under map version `seen`; after half a lease without an
    /// answer, asks the map again every [`WATCH_EVERY`] and gives up on the call
    /// with the error `gone` makes of the first newer map it finds it in (`None`:
    /// the call may still be answered, keep waiting).
    pub(crate) async fn watch_map<T>(
        &self,
        creds: &Creds,
        seen: u64,
        call: impl std::future::Future<Output = Result<T>>,
        gone: impl Fn(&ClusterMap) -> Option<Error>,
    ) -> Result<T> {
        tokio::pin!(call);
        let quiet = self.config().replication.lease / 2;
        tokio::select! {
            r = &mut call => return r,
            () = tokio::time::sleep(quiet) => {}
        }
        loop {
            tokio::select! {
                r = &mut call => return r,
                () = tokio::time::sleep(WATCH_EVERY) => {
                    let Ok(now) = self.cluster_map(creds, Some(seen)).await else {
                        continue;
                    };
                    if now.version > seen {
                        if let Some(e) = gone(&now) {
                            return Err(e);
                        }
                    }
                }
            }
        }
    }

    /// Sends `request` to `server` and answers it, or None once the cluster map
    /// calls the server down (or lost, or retired) within the failover wait: for
    /// requests every server answers for its own part that have nothing to do on a
    /// dead one ([`Pool::down_in_map`]). The map is watched while the request is out,
    /// so a server cut off the network (which neither answers nor refuses) holds the
    /// caller up no longer than the map takes to call it down. A request that goes to
    /// a metadata group wherever it is served ([`Pool::rpc`]) is simply sent: a
    /// group is never down while a copy of it serves.
    pub(crate) async fn rpc_unless_down(
        &self,
        server: usize,
        creds: &Creds,
        request: Request,
    ) -> Result<Option<Response>> {
        if self.groups_move && request.scope() == Scope::Group {
            return self.rpc(server, creds, request).await.map(Some);
        }
        let map = if self.config().replication.authority.is_empty() {
            None
        } else {
            self.cluster_map(creds, None).await.ok()
        };
        if map.as_ref().is_some_and(|m| gone(m.state(server as u32))) {
            return Ok(None);
        }
        let call = self.rpc(server, creds, request);
        let r = match map {
            Some(map) => {
                self.watch_map(creds, map.version, call, |now| {
                    gone(now.state(server as u32)).then(|| {
                        Error::of_kind(
                            ErrorKind::Map,
                            Errno::EAGAIN,
                            format!(
                                "{} is down under cluster map version {} and did not answer",
                                self.name(server),
                                now.version
                            ),
                        )
                    })
                })
                .await
            }
            None => call.await,
        };
        match r {
            Ok(answer) => Ok(Some(answer)),
            Err(e) => self.down_in_map(creds, server, e).await.map(|()| None),
        }
    }

    /// After a request to `server` failed with `e`: Ok once the cluster map calls
    /// the server down (or lost, or retired), within the failover wait, for
    /// requests every server answers for its own part that have nothing to do on a
    /// dead one (`Sync`: it acknowledged nothing since its death, and what it did
    /// before is in its kernel's page cache, as after `kill -9`); `e` otherwise, and
    /// at once without an authority or for an error a failover does not explain.
    pub(crate) async fn down_in_map(&self, creds: &Creds, server: usize, e: Error) -> Result<()> {
        if self.config().replication.authority.is_empty() || !worth_another_copy(&e) {
            return Err(e);
        }
        let mut wait = FailoverWait::new(self);
        let mut seen = 0;
        loop {
            if let Ok(map) = self.cluster_map(creds, Some(seen)).await {
                seen = map.version;
                wait.saw(seen);
                if gone(map.state(server as u32)) {
                    return Ok(());
                }
            }
            if !wait.room() {
                return Err(e);
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

/// Whether a server in `state` has left the file system for now (down, lost or
/// retired): it acknowledged nothing since, and answers nothing.
fn gone(state: Option<ServerState>) -> bool {
    matches!(
        state,
        Some(ServerState::Down | ServerState::Lost | ServerState::Retired)
    )
}

/// How long a request to a datafile with copies keeps trying while its chain fails
/// over: the authority marks a silent server down within a lease (plus an election,
/// when it led the authority: `docs/replication.md`, "The 5 s pause"), so two leases
/// and the request timeout cover it with room to spare.
pub(crate) fn failover_wait(pool: &Pool) -> Duration {
    let c = pool.config();
    c.replication.lease * 2 + c.timeouts.request + Duration::from_secs(2)
}

/// The most failover waits one request waits in all, however many times the
/// cluster map moves on meanwhile: faults one after the other (a copy cut off,
/// then the chain's head killed, then the other copy) each get their wait, and a
/// cluster whose map never settles still answers within a bound.
pub(crate) const FAILOVER_WAITS: u32 = 3;

/// How long a request keeps trying while copies or metadata groups fail over: a
/// [`failover_wait`] since the newest cluster map it saw came (each new version is
/// the authority acting on a fault), within [`FAILOVER_WAITS`] of them since it
/// began.
pub(crate) struct FailoverWait {
    /// One wait.
    wait: Duration,
    /// When the request gives up whatever the map does.
    last: Instant,
    /// When it gives up unless a newer map comes first.
    deadline: Instant,
    /// The newest map version seen.
    version: u64,
}

impl FailoverWait {
    /// The wait of a request starting now.
    pub(crate) fn new(pool: &Pool) -> FailoverWait {
        let wait = failover_wait(pool);
        let now = Instant::now();
        FailoverWait {
            wait,
            last: now + wait * FAILOVER_WAITS,
            deadline: now + wait,
            version: 0,
        }
    }

    /// Notes a cluster map the request saw: a newer one than any before restarts
    /// the wait (the first one seen only sets the version to compare with).
    pub(crate) fn saw(&mut self, version: u64) {
        if version > self.version {
            if self.version != 0 {
                self.deadline = (Instant::now() + self.wait).min(self.last);
            }
            self.version = version;
        }
        debug_assert!(self.deadline <= self.last, "the wait is bounded");
    }

    /// Whether another try, after [`RETRY_PAUSE`], still comes before the deadline.
    pub(crate) fn room(&self) -> bool {
        Instant::now() + RETRY_PAUSE < self.deadline
    }
}

/// Whether a request to a copy that failed so may succeed under a newer map or on
/// another copy.
pub(crate) fn worth_another_copy(e: &Error) -> bool {
    matches!(
        e.kind,
        ErrorKind::Map | ErrorKind::Unreachable | ErrorKind::Busy
    ) || matches!(
        e.errno,
        Errno::EIO | Errno::EHOSTDOWN | Errno::ECONNREFUSED | Errno::ECONNRESET
    )
}

/// How often a request unanswered for half a lease asks the map again.
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(250);

/// Pause between two tries of a request whose copy failed, while the map has not
/// changed yet.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Where the tries of one request to datafile `df` go: toward the copy `pick`
/// names under the newest map, again under a newer map while copies fail over,
/// for at most [`failover_wait`]. With one copy, its only server, once (as without
/// replication). Use: `loop { let r = match route.target() { Ok((server, copies))
/// => send(server, copies).await, Err(e) => Err(e) }; match r { Err(e) if
/// route.again(&e).await => {}, other => break other } }`.
pub(crate) struct Route<'a> {
    pool: &'a Pool,
    creds: &'a Creds,
    df: Datafile,
    servers: Vec<u32>,
    pick: Pick,
    wait: FailoverWait,
    /// None for a datafile with one copy.
    map: Option<Arc<ClusterMap>>,
}

impl<'a> Route<'a> {
    /// The route of a request to datafile `df` of a layout with `replicas` copies.
    pub(crate) async fn new(
        pool: &'a Pool,
        creds: &'a Creds,
        df: &Datafile,
        replicas: u32,
        pick: Pick,
    ) -> Result<Route<'a>> {
        // One copy (every file today): nothing to look up or allocate on the data
        // path; the route is the datafile's server, once.
        let mut wait = FailoverWait::new(pool);
        let (map, servers) = if replicas > 1 {
            let map = pool.cluster_map(creds, None).await?;
            wait.saw(map.version);
            (Some(map), df.replicas().take(replicas as usize).collect())
        } else {
            (None, Vec::new())
        };
        Ok(Route {
            pool,
            creds,
            df: *df,
            servers,
            pick,
            wait,
            map,
        })
    }

    /// The server to send the next try to, and the copies it carries.
    pub(crate) fn target(&self) -> Result<(usize, Copies)> {
        let Some(map) = &self.map else {
            return Ok((self.df.server as usize, Copies::default()));
        };
        let servers = &self.servers;
        let target = match self.pick {
            Pick::Head => map.head(self.df.handle, servers),
            Pick::Read { spread } => {
                // A copy on a server this client's configuration lacks (one added
                // since it read it) is left out while another may serve.
                let mut up = map.readable(self.df.handle, servers);
                let known = self.pool.config().servers.len();
                if up.iter().any(|&s| (s as usize) < known) {
                    up.retain(|&s| (s as usize) < known);
                }
                (!up.is_empty()).then(|| up[spread % up.len()])
            }
        };
        match target {
            Some(server) => Ok((
                server as usize,
                Copies {
                    servers: servers.clone(),
                    map: map.version,
                    hop: 0,
                },
            )),
            None => Err(Error::of_kind(
                ErrorKind::Map,
                Errno::EHOSTDOWN,
                format!(
                    "no copy of datafile {:#x} is up under cluster map version {} (copies on {servers:?})",
                    self.df.handle, map.version
                ),
            )),
        }
    }

    /// The servers of every copy in the chain under the newest map (up, draining
    /// or recovering: each holds the datafile's latest bytes or is taking them),
    /// for a request each copy answers for its own (fsync); with one copy, its
    /// server.
    pub(crate) fn members(&self) -> Vec<usize> {
        match &self.map {
            None => vec![self.df.server as usize],
            Some(map) => map
                .chain(self.df.handle, &self.servers)
                .into_iter()
                .map(|s| s as usize)
                .collect(),
        }
    }

    /// Runs `call`, a try sent to `server`, giving up on it with a map error once
    /// the server has left the copies this route may use ([`Pool::watch_map`]). A
    /// copy that stopped answering (`SIGSTOP`, a cut network) then holds the request
    /// up only until the authority replaced it, not for the whole request timeout.
    pub(crate) async fn watch<T>(
        &self,
        server: usize,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(map) = &self.map else {
            return call.await;
        };
        self.pool
            .watch_map(self.creds, map.version, call, |now| {
                let usable = match self.pick {
                    Pick::Head => now.chain(self.df.handle, &self.servers),
                    Pick::Read { .. } => now.readable(self.df.handle, &self.servers),
                };
                (!usable.contains(&(server as u32))).then(|| {
                    Error::of_kind(
                        ErrorKind::Map,
                        Errno::EAGAIN,
                        format!(
                            "{} left the copies of datafile {:#x} under cluster map version {} while it did not answer",
                            self.pool.name(server),
                            self.df.handle,
                            now.version
                        ),
                    )
                })
            })
            .await
    }

    /// Whether to try again after `e`: for a datafile with copies, when another copy
    /// or a newer map may do, within the failover wait ([`FailoverWait`]); then waits a moment and
    /// fetches the map again.
    pub(crate) async fn again(&mut self, e: &Error) -> bool {
        let Some(map) = &self.map else {
            return false;
        };
        if !worth_another_copy(e) || !self.wait.room() {
            return false;
        }
        tracing::debug!(
            handle = self.df.handle,
            "copy failed, asking the map again: {e}"
        );
        tokio::time::sleep(RETRY_PAUSE).await;
        // The server that failed may be the one asked for the map: any answer will
        // do, the next try asks again.
        if let Ok(newer) = self.pool.cluster_map(self.creds, Some(map.version)).await {
            self.wait.saw(newer.version);
            self.map = Some(newer);
        }
        true
    }
}
