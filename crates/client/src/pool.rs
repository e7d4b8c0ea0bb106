//! Connections to the servers: one multiplexed connection per server, made on first
//! use, remade after a failure, with deadlines on everything; a server that just
//! refused a connection is reported down at once for a short while instead of being
//! retried by every call. Counts every request sent, per server and per operation.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use pvfs_auth::{ClientProof, KeyRing, Munge};
use pvfs_config::Config;
use pvfs_proto::{decode, encode, Creds, Effect, Errno, Request, RequestBody, Response, Scope};
use pvfs_transport::{connect_mux, BufPool, Call, Frame, MuxConn, Target, Transport};

use crate::error::{Error, Result};

/// Bytes per data frame of a read's answer (and per buffer of the pool).
pub const CHUNK: usize = 4 << 20;
/// Bytes per data frame of a write. Smaller than [`CHUNK`]: a data server writes a
/// frame once all of it has arrived, so with 1 MiB frames it writes one while the
/// next arrives, and the bytes are still in the CPU's cache when it copies them
/// (faster for large calls: `docs/benchmarks.md`, writes in 1 MiB frames).
pub const WRITE_CHUNK: usize = 1 << 20;
/// How long a server that refused a connection is reported down without retrying.
const DOWN_BACKOFF: Duration = Duration::from_millis(500);
/// Pause between retries of a mutation whose server is unreachable.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

struct Slot {
    conn: tokio::sync::Mutex<Option<Arc<MuxConn>>>,
    /// The server the connection goes to: the slot's own, or (a slot of a metadata
    /// group's requests) the standby serving the group now.
    at: Mutex<usize>,
    down_until: Mutex<Option<(Instant, String)>>,
    /// When the connection was last used.
    used: Mutex<Instant>,
    /// When a request to it last went unanswered within its deadline (cleared by
    /// its next answer): requests that may be left out skip it meanwhile.
    silent_since: Mutex<Option<Instant>>,
}

/// Requests sent by this client, for tests and `pvfs_stats`, so that the message
/// counts docs/capi.md promises can be checked.
#[derive(Default)]
pub struct Stats {
    total: AtomicU64,
    per_server: Vec<AtomicU64>,
    per_op: Mutex<BTreeMap<&'static str, u64>>,
}

impl Stats {
    fn count(&self, server: usize, op: &'static str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = self.per_server.get(server) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut m) = self.per_op.lock() {
            *m.entry(op).or_default() += 1;
        }
    }

    /// Requests sent to any server.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Requests sent to each server, in configuration order.
    pub fn per_server(&self) -> Vec<u64> {
        self.per_server
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// Requests sent per operation name.
    pub fn per_op(&self) -> BTreeMap<&'static str, u64> {
        self.per_op.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// How this client proves itself to the servers, decided once per client.
pub(crate) enum Auth {
    /// With the key.
    Key(ClientProof),
    /// With MUNGE, because the key could not be read (why).
    Munge(ClientProof, String),
    /// It cannot; why, and what to do about it.
    Unavailable(String),
}

impl Auth {
    /// With the file system's key if this process can read it; otherwise with a MUNGE
    /// credential of its user; otherwise not at all (every request then fails with
    /// ENOKEY, saying why and what to do).
    pub fn for_config(config: &Config) -> Auth {
        let key_path = &config.security.key;
        let unreadable = match KeyRing::load(key_path) {
            Ok(ring) => return Auth::Key(ClientProof::Key(Arc::new(ring))),
            Err(e) if e.is_unreadable() => e,
            Err(e) => return Auth::Unavailable(e.to_string()),
        };
        match Munge::open(config.security.munge_socket.as_deref()) {
            Ok(munge) => Auth::Munge(
                ClientProof::Munge {
                    munge,
                    // Only the user the servers run as may open our credentials: from
                    // the configuration, whatever this process can see of the key
                    // file (a key in a directory it cannot enter is no reason to let
                    // anyone open them).
                    decoder_uid: Some(config.security.server_uid),
                },
                unreadable.to_string(),
            ),
            Err(e) => Auth::Unavailable(format!(
                "{unreadable}, and {e}: run as a user who can read the key, use a pvfs \
                 mount, or set up MUNGE (docs/security.md)"
            )),
        }
    }
}

impl Pool {
    /// Whether this client proves itself with the key (servers then take the users it
    /// acts for as given, and need no capability to show it may reach an object).
    pub fn holds_key(&self) -> bool {
        matches!(self.auth, Auth::Key(_))
    }
}

/// The connections of one client.
pub(crate) struct Pool {
    /// What this client changed on data servers and has not fsynced since.
    pub(crate) unsynced: Unsynced,
    config: Config,
    /// How connections are made (TCP or Unix sockets; a simulated network in tests).
    transport: Arc<dyn Transport>,
    auth: Auth,
    /// TLS under every connection, or why it cannot be set up (`[security] tls`).
    tls: Option<std::result::Result<pvfs_transport::tls::TlsClient, String>>,
    name: String,
    slots: Vec<Slot>,
    /// Per server, the connection for its metadata group's requests while another
    /// server serves the group (`crate::failover`).
    group_slots: Vec<Slot>,
    /// Whether metadata groups have standbys that may take them over: their
    /// requests are routed by the cluster map.
    pub(crate) groups_move: bool,
    bufs: BufPool,
    pub stats: Stats,
    /// What this client counts for Prometheus.
    pub metrics: std::sync::Arc<crate::metrics::ClientMetrics>,
    /// This client's id in retry keys (random per client).
    client_id: u64,
    /// The next retry-key sequence number.
    pub(crate) next_seq: AtomicU64,
    /// The newest cluster map this client fetched: requests to datafiles with
    /// copies are routed by it (`crate::copies`).
    pub(crate) maps: Mutex<Option<Arc<pvfs_proto::map::ClusterMap>>>,
    /// The server that last told this client the cluster map (`usize::MAX`: none).
    pub(crate) map_source: AtomicUsize,
}

impl Pool {
    /// The file system's configuration.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub fn new(config: &Config, transport: Arc<dyn Transport>) -> Pool {
        let client_id = random_id();
        Pool {
            unsynced: Unsynced::default(),
            transport,
            config: config.clone(),
            auth: Auth::for_config(config),
            tls: config.security.tls.then(|| {
                pvfs_transport::tls::TlsClient::load(&config.security.tls_ca)
                    .map_err(|e| e.to_string())
            }),
            // Servers read the id after '#': a client is not fed back the changes it
            // caused itself (the servers' change feeds).
            name: format!(
                "{}#{client_id:016x}",
                pvfs_transport::session::client_name()
            ),
            slots: (0..config.servers.len()).map(Slot::new).collect(),
            group_slots: (0..config.servers.len()).map(Slot::new).collect(),
            groups_move: !config.replication.authority.is_empty()
                && config
                    .meta_servers()
                    .into_iter()
                    .any(|g| config.meta_group(g).len() > 1),
            bufs: BufPool::new(CHUNK, 16),
            stats: Stats {
                per_server: config.servers.iter().map(|_| AtomicU64::new(0)).collect(),
                ..Stats::default()
            },
            metrics: Default::default(),
            client_id,
            next_seq: AtomicU64::new(1),
            maps: Mutex::new(None),
            map_source: AtomicUsize::new(usize::MAX),
        }
    }

    /// This client's random id (retry keys, lock owners and leases).
    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    /// The name of server `server`, or `?` for an index the configuration does not have
    /// (a layout from a server may name one: it gets an error, never a panic).
    pub fn name(&self, server: usize) -> &str {
        self.config.servers.get(server).map_or("?", |s| &s.name)
    }

    /// The cluster map this pool holds, if it fetched one.
    pub(crate) fn cached_map(&self) -> Option<Arc<pvfs_proto::map::ClusterMap>> {
        self.maps.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The server a request of `scope` to `server` goes to now: a group's request
    /// to the server serving the group under the cached map.
    fn route(&self, server: usize, scope: Scope) -> usize {
        if scope == Scope::Server || !self.groups_move {
            return server;
        }
        self.cached_map()
            .and_then(|m| m.primary(server as u32))
            .map_or(server, |p| p as usize)
    }

    async fn conn(&self, server: usize, scope: Scope) -> Result<Arc<MuxConn>> {
        let at = self.route(server, scope);
        let slots = if at == server {
            &self.slots
        } else {
            &self.group_slots
        };
        let (Some(slot), Some(sc), Some(via)) = (
            slots.get(server),
            self.config.servers.get(server),
            self.config.servers.get(at),
        ) else {
            return Err(Error::new(
                Errno::EIO,
                format!(
                    "server index {server} is not in the configuration ({} servers): \
                     the file's layout names a server this client does not know (a server \
                     added since this client read its configuration: start it again with \
                     the new one; else pvfs fsck reports it)",
                    self.config.servers.len()
                ),
            ));
        };
        let mut guard = slot.conn.lock().await;
        {
            // A group that moved to another server: the old connection goes.
            let mut slot_at = slot.at.lock().unwrap_or_else(|e| e.into_inner());
            if *slot_at != at {
                if let Some(c) = guard.take() {
                    c.shutdown("the metadata group moved");
                }
                *slot_at = at;
                if let Ok(mut down) = slot.down_until.lock() {
                    *down = None;
                }
            }
        }
        // A connection unused for half the servers' idle timeout is replaced before the
        // server closes it, so no request races that close.
        let now = Instant::now();
        let stale = slot.used.lock().is_ok_and(|mut used| {
            let stale = now.duration_since(*used) > self.config.timeouts.idle / 2;
            *used = now;
            stale
        });
        if let Some(c) = guard.as_ref() {
            if c.closed().is_none() {
                if !stale || c.in_flight() > 0 {
                    return Ok(c.clone());
                }
                c.shutdown("idle");
            }
        }
        if let Ok(down) = slot.down_until.lock() {
            if let Some((until, why)) = down.as_ref() {
                if Instant::now() < *until {
                    return Err(Error::new(
                        Errno::EHOSTDOWN,
                        format!("server {} is down: {why}", self.name(server)),
                    ));
                }
            }
        }
        let proof = match &self.auth {
            Auth::Key(p) | Auth::Munge(p, _) => p,
            Auth::Unavailable(why) => return Err(Error::new(Errno::ENOKEY, why.clone())),
        };
        let tls = match &self.tls {
            None => None,
            Some(Ok(t)) => Some(t),
            Some(Err(why)) => return Err(Error::new(Errno::EKEYREJECTED, why.clone())),
        };
        let target = Target {
            addr: &via.address,
            server: &sc.name,
            fsid: self.config.fsid,
            via: &*self.transport,
        };
        match connect_mux(
            &target,
            proof,
            tls,
            &self.name,
            self.config.timeouts.connect,
            self.config.timeouts.request,
            self.bufs.clone(),
        )
        .await
        {
            Ok((mux, _welcome)) => {
                *guard = Some(mux.clone());
                if let Ok(mut down) = slot.down_until.lock() {
                    *down = None;
                }
                Ok(mux)
            }
            Err(e @ pvfs_transport::TransportError::Handshake { .. }) => {
                // Not a server that is down: one that will not have us (or is another
                // file system's). Said as it is, every time; a MUNGE failure with what
                // to do about it.
                match (&self.auth, e.errno()) {
                    (Auth::Munge(_, key), Errno::ENOKEY) => Err(Error::new(
                        Errno::ENOKEY,
                        format!(
                            "{key}, and MUNGE failed: {e}: run as a user who can read the key, \
                             use a pvfs mount, or set up MUNGE (docs/security.md)"
                        ),
                    )),
                    // A standby the map names the group's primary may not have
                    // taken the group over yet: a map error, waited out.
                    (_, Errno::ESTALE) if at != server => Err(Error::of_kind(
                        pvfs_proto::ErrorKind::Map,
                        Errno::EAGAIN,
                        format!(
                            "{} does not serve {}'s metadata yet: {e}",
                            via.name, sc.name
                        ),
                    )),
                    _ => Err(Error::new(e.errno(), e.to_string())),
                }
            }
            Err(e) => {
                if let Ok(mut down) = slot.down_until.lock() {
                    *down = Some((Instant::now() + DOWN_BACKOFF, e.to_string()));
                }
                Err(Error::transport(&sc.name, e))
            }
        }
    }

    /// Starts a request of `scope` on `server`: its first frame carries `body` and
    /// `data`. A metadata group's request goes to the server serving the group under
    /// the cached map.
    pub async fn start_in(
        &self,
        scope: Scope,
        server: usize,
        op: &'static str,
        body: &[u8],
        data: &[&[u8]],
        end: bool,
    ) -> Result<Call> {
        let conn = self.conn(server, scope).await?;
        self.stats.count(server, op);
        self.metrics.requests.count_only(op);
        conn.call(body, data, end)
            .await
            .map_err(|e| Error::transport(self.name(server), e))
    }

    /// Starts a request whose answer's data the caller reads into its own memory.
    pub async fn start_direct(&self, server: usize, op: &'static str, body: &[u8]) -> Result<Call> {
        let conn = self.conn(server, Scope::Server).await?;
        self.stats.count(server, op);
        self.metrics.requests.count_only(op);
        conn.call_direct(body)
            .await
            .map_err(|e| Error::transport(self.name(server), e))
    }

    /// Receives the next frame of a call.
    pub async fn recv(&self, server: usize, call: &mut Call) -> Result<Frame> {
        call.recv()
            .await
            .map_err(|e| Error::transport(self.name(server), e))
    }

    /// Sends one request with no bulk data and returns its one-frame answer
    /// (an error answer becomes `Err`).
    ///
    /// Retries happen only where they are safe, as the operation's [`Effect`] says.
    /// A request that changes nothing is retried once on a fresh connection when the
    /// connection broke (a restarted server). A mutation is retried while the
    /// connection breaks or is refused, until the request deadline, so a server that
    /// restarts quickly costs a moment, not an error: an idempotent one as it is, one
    /// that must happen once with a retry key (the server records its reply in the
    /// same commit, so a retry is answered, never redone).
    pub async fn rpc(&self, server: usize, creds: &Creds, request: Request) -> Result<Response> {
        if self.groups_move && request.scope() == Scope::Group {
            // Boxed: it asks the map through `rpc` itself.
            return Box::pin(self.group_rpc(server, creds, request)).await;
        }
        let op = request.op_name();
        let effect = request.effect();
        let retry = (effect == Effect::Once).then(|| self.next_retry_key());
        let body = encode(&RequestBody {
            creds: creds.clone(),
            request,
            retry,
            origin: 0,
        });
        let deadline = Instant::now() + self.config.timeouts.request;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.rpc_once(server, Scope::Server, op, &body).await {
                Err(e) if effect == Effect::None && attempt == 1 && e.errno == Errno::EIO => {
                    tracing::debug!(server = self.name(server), op, "retrying after: {e}");
                }
                Err(e)
                    if effect != Effect::None
                        && matches!(e.errno, Errno::EIO | Errno::EHOSTDOWN)
                        && Instant::now() + RETRY_PAUSE < deadline =>
                {
                    tracing::debug!(
                        server = self.name(server),
                        op,
                        attempt,
                        "retrying after: {e}"
                    );
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                other => return other,
            }
        }
    }

    /// One send of `body` and its answer (an error answer becomes `Err`).
    pub(crate) async fn rpc_once(
        &self,
        server: usize,
        scope: Scope,
        op: &'static str,
        body: &[u8],
    ) -> Result<Response> {
        let started = Instant::now();
        let mut call = self.start_in(scope, server, op, body, &[], true).await?;
        // An fsync may first write back much data: it has its own deadline class.
        let timeout = if op == "Fsync" || op == "Sync" {
            self.config.timeouts.sync
        } else {
            self.config.timeouts.request
        };
        let frame = call.recv_within(timeout).await;
        self.answered(server, &frame);
        let answer = frame
            .map_err(|e| Error::transport(self.name(server), e))
            .and_then(|frame| self.response(server, &frame));
        let errno = answer.as_ref().err().map(|e| e.errno.name());
        self.metrics.requests.timed(op, started.elapsed(), errno);
        answer
    }

    /// Notes how `server` answered a request: a timeout makes it silent (requests
    /// that may be left out skip it), an answer clears that.
    pub(crate) fn answered(
        &self,
        server: usize,
        frame: &std::result::Result<Frame, pvfs_transport::TransportError>,
    ) {
        if let Some(slot) = self.slots.get(server) {
            if let Ok(mut silent) = slot.silent_since.lock() {
                *silent = match frame {
                    Ok(_) => None,
                    Err(e) if e.errno() == Errno::ETIMEDOUT => Some(Instant::now()),
                    Err(_) => *silent,
                };
            }
        }
    }

    /// [`Pool::rpc`] for a request whose answer may be left out (it only refines
    /// another answer): a server that let a request time out within the last request
    /// timeout, and has not answered since, is not asked (ETIMEDOUT at once), so a
    /// hung server costs one deadline, not one per call.
    pub async fn rpc_optional(
        &self,
        server: usize,
        creds: &Creds,
        request: Request,
    ) -> Result<Response> {
        let silent = self
            .slots
            .get(server)
            .and_then(|s| s.silent_since.lock().ok().and_then(|g| *g));
        if silent.is_some_and(|at| at.elapsed() < self.config.timeouts.request) {
            return Err(Error::new(
                Errno::ETIMEDOUT,
                format!(
                    "server {} did not answer in time just now; not asked",
                    self.name(server)
                ),
            ));
        }
        self.rpc(server, creds, request).await
    }

    /// Decodes a response frame; an error answer becomes `Err`.
    pub fn response(&self, server: usize, frame: &Frame) -> Result<Response> {
        self.response_body(server, &frame.body)
    }

    /// Decodes a response body; an error answer becomes `Err`.
    pub fn response_body(&self, server: usize, body: &[u8]) -> Result<Response> {
        match decode::<Response>(body) {
            Ok(Response::Error {
                errno,
                kind,
                message,
            }) => Err(Error::of_kind(kind, Errno(errno), message)),
            Ok(r) => Ok(r),
            Err(e) => Err(Error::new(
                Errno::EPROTO,
                format!("server {}: undecodable answer: {e}", self.name(server)),
            )),
        }
    }
}

impl Slot {
    /// An empty slot for server `server`'s connection.
    fn new(server: usize) -> Slot {
        Slot {
            conn: tokio::sync::Mutex::new(None),
            at: Mutex::new(server),
            down_until: Mutex::new(None),
            used: Mutex::new(Instant::now()),
            silent_since: Mutex::new(None),
        }
    }
}

/// The write verifiers data servers gave this client's changes of datafiles it has
/// not fsynced since (the first of each: a change made before a power loss is what
/// may be lost). Bounded: past [`Unsynced::MAX`] datafiles, further ones are not
/// noted (their fsync then checks nothing, as before verifiers existed).
#[derive(Default)]
pub(crate) struct Unsynced(Mutex<BTreeMap<pvfs_proto::Handle, u64>>);

impl Unsynced {
    /// Most datafiles noted at once.
    pub(crate) const MAX: usize = 1 << 16;

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<pvfs_proto::Handle, u64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Datafile `h` was changed under `verifier` (its first change counts).
    pub(crate) fn note(&self, h: pvfs_proto::Handle, verifier: u64) {
        let mut m = self.map();
        if m.len() < Unsynced::MAX || m.contains_key(&h) {
            m.entry(h).or_insert(verifier);
        }
    }

    /// The verifier of `h`'s first unsynced change (0: none noted).
    pub(crate) fn get(&self, h: pvfs_proto::Handle) -> u64 {
        self.map().get(&h).copied().unwrap_or(0)
    }

    /// `h` was synced (or its loss reported) up to the change noted with `verifier`.
    pub(crate) fn synced(&self, h: pvfs_proto::Handle, verifier: u64) {
        let mut m = self.map();
        if m.get(&h) == Some(&verifier) {
            m.remove(&h);
        }
    }
}

/// A random 64-bit id.
fn random_id() -> u64 {
    pvfs_proto::clock::random_u64()
}

/// The error for an answer of the wrong kind.
pub(crate) fn unexpected(op: &str, got: &Response) -> Error {
    Error::new(
        Errno::EPROTO,
        format!("unexpected answer {} to {op}", got.op_name()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that cannot see the key file (a key in a directory it may not enter)
    /// still makes credentials only the servers' user may open: the restriction comes
    /// from the configuration, not from what the process can see.
    #[test]
    fn munge_credentials_are_for_the_servers_user_whatever_the_key_file_shows() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::generate(&pvfs_config::GenOptions::new(1, dir.path())).unwrap();
        config.security.key = dir.path().join("no-such-dir/pvfs.key");
        config.security.server_uid = 4242;
        match Auth::for_config(&config) {
            Auth::Munge(ClientProof::Munge { decoder_uid, .. }, why) => {
                assert_eq!(decoder_uid, Some(4242));
                assert!(why.contains("no-such-dir"), "{why}");
            }
            Auth::Unavailable(why) => {
                // No libmunge here: nothing is made, so nothing is unrestricted.
                assert!(why.contains("MUNGE"), "{why}");
            }
            Auth::Munge(..) | Auth::Key(_) => panic!("a key nobody can read was read"),
        }
    }
}
