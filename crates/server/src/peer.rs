//! Server-to-server calls (a metadata server asking a data server for pre-created
//! datafile handles). One multiplexed connection per peer, made on first use and
//! remade after a failure; every call has the configured deadline.

use std::sync::Arc;

use pvfs_config::Config;
use pvfs_proto::{decode, encode, Creds, Errno, Request, RequestBody, Response};
use pvfs_transport::{connect_mux, BufPool, MuxConn, Target};
use tokio::sync::Mutex;

use crate::error::{OpError, OpResult};

/// A connection to a peer and when it was last used.
type Used = (Arc<MuxConn>, std::time::Instant);

/// Connections to the other servers of the file system.
pub struct Peers {
    config: Config,
    conns: Vec<Mutex<Option<Used>>>,
    pool: BufPool,
    proof: pvfs_auth::ClientProof,
    tls: Option<pvfs_transport::tls::TlsClient>,
    name: String,
}

impl Peers {
    /// No connections yet; they are made on first use.
    /// No connections yet; they are made on first use and prove themselves with
    /// `keys`, the file system's node key.
    pub fn new(
        config: &Config,
        pool: BufPool,
        keys: Arc<pvfs_auth::KeyRing>,
        tls: Option<pvfs_transport::tls::TlsClient>,
    ) -> Peers {
        Peers {
            config: config.clone(),
            conns: config.servers.iter().map(|_| Mutex::new(None)).collect(),
            pool,
            proof: pvfs_auth::ClientProof::Key(keys),
            tls,
            name: format!("pvfs-server@{}", pvfs_transport::session::client_name()),
        }
    }

    async fn conn(&self, idx: usize) -> OpResult<Arc<MuxConn>> {
        let mut slot = self.conns[idx].lock().await;
        let now = std::time::Instant::now();
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
            addr: &server.address,
            server: &server.name,
            fsid: self.config.fsid,
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

    /// Sends `request` to server `idx` and returns its single-frame answer.
    pub async fn call(&self, idx: usize, request: Request) -> OpResult<Response> {
        self.call_as(idx, &Creds::default(), request, None).await
    }

    /// [`Peers::call`] acting for the user `creds` (a server holds the key, so the
    /// other server takes them as given and checks what that user may do), with the
    /// retry key `retry` for a mutation that must happen once.
    pub async fn call_as(
        &self,
        idx: usize,
        creds: &Creds,
        request: Request,
        retry: Option<pvfs_proto::RetryKey>,
    ) -> OpResult<Response> {
        let body = encode(&RequestBody {
            creds: creds.clone(),
            request,
            retry,
        });
        let conn = self.conn(idx).await?;
        let mut call = conn.call(&body, &[], true).await?;
        let frame = call.recv().await?;
        let response: Response = decode(&frame.body).map_err(|e| {
            OpError::new(
                Errno::EPROTO,
                format!("bad answer from {}: {e}", self.config.servers[idx].name),
            )
        })?;
        match response {
            Response::Error { errno, message } => Err(OpError::new(Errno(errno), message)),
            other => Ok(other),
        }
    }
}
