//! Server-to-server calls (a metadata server asking a data server for pre-created
//! datafile handles). One multiplexed connection per peer, made on first use and
//! remade after a failure; every call has the configured deadline. The authority's
//! messages and the metadata changes shipped to standbys have connections of their
//! own ([`Lane`]), remade when a call on them goes unanswered in time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pvfs_config::Config;
use pvfs_proto::map::ClusterMap;
use pvfs_proto::{
    decode, encode, Creds, Effect, Errno, ErrorKind, Request, RequestBody, Response, RetryKey,
    Scope,
};
use pvfs_transport::{connect_mux, BufPool, MuxConn, Target};
use tokio::sync::Mutex;

use crate::error::{OpError, OpResult};
use crate::session::Caller;

/// A connection to a peer and when it was last used.
type Used = (Arc<MuxConn>, tokio::time::Instant);

/// Connections to the other servers of the file system.
pub struct Peers {
    config: Config,
    conns: Vec<Mutex<Option<Used>>>,
    /// Per lane and server, a connection of its own for small, urgent messages
    /// ([`Lane`]): they never wait behind bulk data, and a connection that left
    /// one unanswered in time is remade ([`Peers::call_on`]).
    lanes: [Vec<Mutex<Option<Used>>>; 2],
    /// Per server, the connection to the standby serving its metadata group when
    /// one took it over, and which server that is.
    group_conns: Vec<Mutex<Option<(usize, Used)>>>,
    /// Per server, the server serving its metadata group when not itself (from the
    /// newest map: [`Peers::route`]).
    routes: std::sync::RwLock<Vec<Option<usize>>>,
    pool: BufPool,
    proof: pvfs_auth::ClientProof,
    tls: Option<pvfs_transport::tls::TlsClient>,
    name: String,
    /// How to reach the others (TCP or Unix sockets; a simulated network in tests).
    transport: Arc<dyn pvfs_transport::Transport>,
    /// This server's id as a client of the others, for the retry keys of its calls.
    client_id: u64,
    /// The next retry key's sequence number.
    next_seq: AtomicU64,
}

impl Peers {
    /// No connections yet; they are made on first use and prove themselves with
    /// `keys`, the file system's node key.
    pub fn new(
        config: &Config,
        pool: BufPool,
        keys: Arc<pvfs_auth::KeyRing>,
        (tls, transport): (
            Option<pvfs_transport::tls::TlsClient>,
            Arc<dyn pvfs_transport::Transport>,
        ),
    ) -> Peers {
        Peers {
            transport,
            config: config.clone(),
            conns: config.servers.iter().map(|_| Mutex::new(None)).collect(),
            lanes: [(); 2].map(|()| config.servers.iter().map(|_| Mutex::new(None)).collect()),
            group_conns: config.servers.iter().map(|_| Mutex::new(None)).collect(),
            routes: std::sync::RwLock::new(vec![None; config.servers.len()]),
            pool,
            proof: pvfs_auth::ClientProof::Key(keys),
            tls,
            name: format!("pvfs-server@{}", pvfs_transport::session::client_name()),
            client_id: crate::random::random_u64(),
            next_seq: AtomicU64::new(1),
        }
    }

    /// Routes the metadata groups' calls as `map` says (`crate::promote`): to the
    /// group's primary ([`ClusterMap::primary`], as clients route), else, while
    /// nobody serves the group (its primary down, or with a new disk that holds
    /// nothing of it), to the group's own server, which answers with a map error
    /// until the group is served again.
    pub fn route(&self, map: &ClusterMap) {
        let routes: Vec<Option<usize>> = (0..self.conns.len())
            .map(|g| {
                map.primary(g as u32)
                    .map(|l| l as usize)
                    .filter(|&l| l != g && l < self.conns.len())
            })
            .collect();
        *self.routes.write().unwrap_or_else(|e| e.into_inner()) = routes;
    }

    /// The connection for a request of `scope` to server `idx`: a group's request
    /// goes to the server serving the group now.
    async fn conn_for(&self, idx: usize, scope: Scope) -> OpResult<Arc<MuxConn>> {
        let via = match scope {
            Scope::Server => None,
            Scope::Group => self
                .routes
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(idx)
                .copied()
                .flatten(),
        };
        let Some(via) = via else {
            return self.conn(idx).await;
        };
        let mut slot = self.group_conns[idx].lock().await;
        let mut used = slot.take().filter(|(at, _)| *at == via).map(|(_, u)| u);
        let dialed = self.reuse_or_dial(&mut used, idx, via).await;
        *slot = used.map(|u| (via, u));
        dialed.map_err(|e| {
            // A server the map named the group's primary that does not answer to
            // the group's name (it has not taken the group over yet, or no longer
            // serves it: a new disk, a map newer than this server's routes): a map
            // error, waited out as clients do, not the caller's failure.
            if e.errno == Errno::ESTALE && e.kind != ErrorKind::Map {
                OpError::map(format!(
                    "{} does not serve the metadata of {}: {e}",
                    self.config.servers[via].name, self.config.servers[idx].name
                ))
            } else {
                e
            }
        })
    }

    async fn conn(&self, idx: usize) -> OpResult<Arc<MuxConn>> {
        let mut slot = self.conns[idx].lock().await;
        self.reuse_or_dial(&mut slot, idx, idx).await
    }

    /// The connection in `slot` if it is still good, else a new one to the server
    /// at `via` naming server `idx` (itself, or the group `via` serves).
    async fn reuse_or_dial(
        &self,
        slot: &mut Option<Used>,
        idx: usize,
        via: usize,
    ) -> OpResult<Arc<MuxConn>> {
        let now = tokio::time::Instant::now();
        if let Some((c, used)) = slot.as_mut() {
            // Replaced when unused for half the idle timeout, before the other server
            // closes it (as clients do).
            let stale = now.duration_since(*used) > self.config.timeouts.idle / 2;
            if c.closed().is_none() {
                if !stale || c.in_flight() > 0 {
                    *used = now;
                    return Ok(c.clone());
                }
                c.shutdown("idle");
            }
        }
        let server = &self.config.servers[idx];
        let target = Target {
            addr: &self.config.servers[via].address,
            server: &server.name,
            fsid: self.config.fsid,
            via: &*self.transport,
        };
        let (mux, _) = connect_mux(
            &target,
            &self.proof,
            self.tls.as_ref(),
            &self.name,
            self.config.timeouts.connect,
            self.config.timeouts.request,
            self.pool.clone(),
        )
        .await?;
        *slot = Some((mux.clone(), now));
        Ok(mux)
    }

    /// How long a request to another server may take (`[timeouts] request`).
    pub fn request_timeout(&self) -> std::time::Duration {
        self.config.timeouts.request
    }

    /// Sends `request` to server `idx` and returns its single-frame answer.
    pub async fn call(&self, idx: usize, request: Request) -> OpResult<Response> {
        let server = Caller {
            creds: Creds::default(),
            trusted: true,
            origin: 0,
        };
        self.call_as(idx, &server, request, None).await
    }

    /// [`Peers::call`] as a step of `caller`'s request: for its user (a server holds
    /// the key, so the other server takes the user as given and checks what that
    /// user may do) and its client (whose change feeds then leave out what the step
    /// changes, as they leave out the client's own requests). A
    /// mutation is retried while the connection breaks or is refused, until the
    /// request deadline, as clients do; one that must happen once carries `retry`
    /// (derived from the request it is a step of, so a retried request repeats the
    /// step under the same key) or a key of its own.
    pub async fn call_as(
        &self,
        idx: usize,
        caller: &Caller,
        request: Request,
        retry: Option<RetryKey>,
    ) -> OpResult<Response> {
        self.known(idx)?;
        let effect = request.effect();
        let scope = request.scope();
        let retry = match effect {
            Effect::Once => retry.or_else(|| {
                Some(RetryKey {
                    client: self.client_id,
                    seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
                })
            }),
            _ => None,
        };
        let body = encode(&RequestBody {
            creds: caller.creds.clone(),
            request,
            retry,
            origin: caller.origin,
        });
        let deadline = tokio::time::Instant::now() + self.config.timeouts.request;
        loop {
            match self.call_once(idx, scope, &body).await {
                // A group moving to another server (its primary fenced, the map
                // changing) is waited out like a broken connection.
                Err(e)
                    if (effect != Effect::None
                        && matches!(e.errno, Errno::EIO | Errno::EHOSTDOWN)
                        || scope == Scope::Group && e.kind == ErrorKind::Map)
                        && tokio::time::Instant::now() + RETRY_PAUSE < deadline =>
                {
                    tracing::debug!(peer = %self.config.servers[idx].name, "retrying after: {e}");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                other => return other,
            }
        }
    }

    /// One attempt of a call that must be answered within `deadline` (the
    /// authority's messages, which have deadlines of their own and are resent by
    /// their senders): ETIMEDOUT after it.
    pub async fn call_within(
        &self,
        idx: usize,
        request: Request,
        deadline: std::time::Duration,
    ) -> OpResult<Response> {
        let scope = request.scope();
        let body = self.server_body(idx, request)?;
        tokio::time::timeout(deadline, self.call_once(idx, scope, &body))
            .await
            .unwrap_or_else(|_| Err(self.late(idx)))
    }

    /// [`Peers::call_within`] on the connection kept for `lane`. A call left
    /// unanswered in time shuts that connection down, so the next one goes out on
    /// a new connection: a write stuck on a connection (a lost packet resent after
    /// a growing backoff, a peer that stopped reading) holds back everything sent
    /// after it on that connection, and a lease renewed, or a metadata change
    /// shipped, behind it would lapse or be given up while the network is fine.
    /// The other calls on it then fail and are resent by their senders, as after
    /// any broken connection.
    pub async fn call_on(
        &self,
        lane: Lane,
        idx: usize,
        request: Request,
        deadline: std::time::Duration,
    ) -> OpResult<Response> {
        let body = self.server_body(idx, request)?;
        let until = tokio::time::Instant::now() + deadline;
        let dial = async {
            let mut slot = self.lanes[lane as usize][idx].lock().await;
            self.reuse_or_dial(&mut slot, idx, idx).await
        };
        let conn = tokio::time::timeout_at(until, dial)
            .await
            .map_err(|_| self.late(idx))??;
        let answer = tokio::time::timeout_at(until, async {
            let mut call = conn.call(&body, &[], true).await?;
            let frame = call.recv().await?;
            self.response(idx, &frame.body)
        })
        .await;
        answer.unwrap_or_else(|_| {
            conn.shutdown("a call was not answered in time");
            Err(self.late(idx))
        })
    }

    /// Starts `request` at server `idx` with the first of its data (`end`: no more
    /// follows), for a change passed down a chain of copies: the rest of the data
    /// goes with `Call::send_data`, the answer comes from [`Peers::answer`].
    pub async fn start_stream(
        &self,
        idx: usize,
        request: Request,
        data: &[&[u8]],
        end: bool,
    ) -> OpResult<pvfs_transport::mux::Call> {
        let body = self.server_body(idx, request)?;
        let conn = self.conn(idx).await?;
        Ok(conn.call(&body, data, end).await?)
    }

    /// The single-frame answer to a call [`Peers::start_stream`] started, within the
    /// request timeout.
    pub async fn answer(
        &self,
        idx: usize,
        call: &mut pvfs_transport::mux::Call,
    ) -> OpResult<Response> {
        let frame = call.recv_within(self.config.timeouts.request).await?;
        self.response(idx, &frame.body)
    }

    /// The body of `request` for server `idx`, sent as this server itself (no user,
    /// no retry key).
    fn server_body(&self, idx: usize, request: Request) -> OpResult<Vec<u8>> {
        self.known(idx)?;
        Ok(encode(&RequestBody {
            creds: Creds::default(),
            request,
            retry: None,
            origin: 0,
        }))
    }

    /// Checks server `idx` is in this server's configuration: a layout or a map
    /// from servers with a longer one (servers added, not every server restarted
    /// with the new configuration yet) may name one that is not.
    fn known(&self, idx: usize) -> OpResult<()> {
        if idx < self.conns.len() {
            return Ok(());
        }
        Err(OpError::invalid(
            Errno::EIO,
            format!(
                "server index {idx} is not in this server's configuration ({} servers): \
                 every server needs the configuration with the servers added",
                self.conns.len()
            ),
        ))
    }

    /// One attempt of a call.
    async fn call_once(&self, idx: usize, scope: Scope, body: &[u8]) -> OpResult<Response> {
        let conn = self.conn_for(idx, scope).await?;
        let mut call = conn.call(body, &[], true).await?;
        let frame = call.recv().await?;
        self.response(idx, &frame.body)
    }

    /// Server `idx` did not answer a call within its deadline.
    fn late(&self, idx: usize) -> OpError {
        OpError::busy(
            Errno::ETIMEDOUT,
            format!("{} did not answer in time", self.config.servers[idx].name),
        )
    }

    /// Server `idx`'s answer in `body`: its response, or its error.
    pub fn response(&self, idx: usize, body: &[u8]) -> OpResult<Response> {
        let response: Response = decode(body).map_err(|e| {
            OpError::internal(
                Errno::EPROTO,
                format!("bad answer from {}: {e}", self.config.servers[idx].name),
            )
        })?;
        match response {
            Response::Error {
                errno,
                kind,
                message,
            } => Err(OpError::of_kind(kind, Errno(errno), message)),
            other => Ok(other),
        }
    }
}

/// Connections kept apart from the one that carries everything else to a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// The authority's messages: lease renewals, raft.
    Authority = 0,
    /// A metadata group's changes shipped to its standbys.
    Shipping = 1,
}

/// The pause between two attempts of a mutation whose connection broke.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);
