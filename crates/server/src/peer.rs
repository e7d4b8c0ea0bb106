//! Server-to-server calls (a metadata server asking a data server for pre-created
//! datafile handles). One multiplexed connection per peer, made on first use and
//! remade after a failure; every call has the configured deadline.

use std::sync::Arc;

use pvfs_config::Config;
use pvfs_proto::{decode, encode, Creds, Errno, Request, RequestBody, Response};
use pvfs_transport::{AutoTransport, BufPool, MuxConn, Transport};
use tokio::sync::Mutex;

use crate::error::{OpError, OpResult};

/// Connections to the other servers of the file system.
pub struct Peers {
    config: Config,
    conns: Vec<Mutex<Option<Arc<MuxConn>>>>,
    pool: BufPool,
}

impl Peers {
    /// No connections yet; they are made on first use.
    pub fn new(config: &Config, pool: BufPool) -> Peers {
        Peers {
            config: config.clone(),
            conns: config.servers.iter().map(|_| Mutex::new(None)).collect(),
            pool,
        }
    }

    async fn conn(&self, idx: usize) -> OpResult<Arc<MuxConn>> {
        let mut slot = self.conns[idx].lock().await;
        if let Some(c) = slot.as_ref() {
            if c.closed().is_none() {
                return Ok(c.clone());
            }
        }
        let server = &self.config.servers[idx];
        let conn = AutoTransport
            .connect(&server.address, self.config.timeouts.connect)
            .await?;
        let mux = MuxConn::start(conn, self.pool.clone(), self.config.timeouts.request);
        *slot = Some(mux.clone());
        Ok(mux)
    }

    /// Sends `request` to server `idx` and returns its single-frame answer.
    pub async fn call(&self, idx: usize, request: Request) -> OpResult<Response> {
        let body = encode(&RequestBody {
            creds: Creds::default(),
            request,
            retry: None,
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
