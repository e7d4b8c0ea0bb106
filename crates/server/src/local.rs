//! A server opened in the calling process, whose handlers are called directly: for
//! in-process tests of handlers (no processes, no sockets) and for tools that drive
//! a server's state machine themselves. Requests go through the same
//! [`crate::dispatch::handle`] as requests from a connection: the same access checks,
//! retry keys and change feed.

use std::path::Path;
use std::sync::Arc;

use pvfs_config::{Config, GenOptions};
use pvfs_proto::{Creds, RequestBody, Response, RetryKey};
use pvfs_transport::{BufPool, FrameWriter};

use crate::ctx::{Ctx, Faults};
use crate::error::OpResult;
use crate::op::Answer;
use crate::reply::{Data, Reply};
use crate::session::Session;
use crate::ServerError;

/// One server of a file system, opened in this process.
pub struct LocalServer {
    /// The server's state.
    pub ctx: Arc<Ctx>,
    session: Session,
    reply: Reply,
    /// The other end of where streamed answers go (kept open; nobody reads it).
    _sink: tokio::io::DuplexStream,
}

impl LocalServer {
    /// Generates a file system of `servers` servers storing under `dir` (each with
    /// both roles; key files written in `dir`) and its configuration.
    pub fn configure(dir: &Path, servers: usize) -> Result<Config, ServerError> {
        let mut opts = GenOptions::new(servers, dir.join("storage"));
        opts.base_port = 0;
        let mut config = Config::generate(&opts).map_err(|e| ServerError::Setup(e.to_string()))?;
        config.security.key = dir.join("pvfs.key");
        config.security.server_key = dir.join("pvfs-server.key");
        for (path, what) in [
            (&config.security.key, "node key"),
            (&config.security.server_key, "server key"),
        ] {
            let ring = pvfs_auth::KeyRing::generate()
                .map_err(|e| ServerError::Setup(format!("cannot make a key: {e}")))?;
            ring.write(path, what, true)?;
        }
        Ok(config)
    }

    /// Opens server `name` of `config` (storage made on first open).
    pub async fn open(config: Config, name: &str) -> Result<LocalServer, ServerError> {
        let ctx = crate::open(config, name, crate::Setup::local(Faults::default())).await?;
        let (sink, theirs) = tokio::io::duplex(1 << 20);
        let writer = Arc::new(FrameWriter::new(Box::new(theirs), None, None));
        let reply = Reply::new(writer, 1, ctx.config.timeouts.request);
        Ok(LocalServer {
            session: Session {
                identity: pvfs_auth::Identity::Trusted,
                peer: "in-process".into(),
                client: "in-process".into(),
                server: ctx.info.name.clone(),
                origin: 0,
                closed: std::sync::atomic::AtomicBool::new(false),
            },
            reply,
            ctx,
            _sink: sink,
        })
    }

    /// Handles `request` from a key-holding node acting for `creds`, with retry key
    /// `retry`, as if it came on a connection: the answer or the error.
    pub async fn call(
        &self,
        creds: Creds,
        request: pvfs_proto::Request,
        retry: Option<RetryKey>,
    ) -> OpResult<Response> {
        self.call_for(0, creds, request, retry).await
    }

    /// [`LocalServer::call`] as another server's step of a request by client
    /// `origin` (0: the connection's own).
    pub async fn call_for(
        &self,
        origin: u64,
        creds: Creds,
        request: pvfs_proto::Request,
        retry: Option<RetryKey>,
    ) -> OpResult<Response> {
        let body = RequestBody {
            creds,
            request,
            retry,
            origin,
        };
        let data = Data::unbudgeted(BufPool::new(4096, 1).get(0), true);
        match crate::dispatch::handle(&self.ctx, &self.reply, &self.session, body, data, None)
            .await?
        {
            Answer::Reply(r) => Ok(r),
            Answer::Streamed => Ok(Response::Done {}),
        }
    }

    /// A `Create` of `what` named `name` in `parent`, owned by root with mode 0755 and
    /// no umask: what an in-process test makes its objects with.
    pub fn create_request(
        parent: pvfs_proto::Handle,
        name: &str,
        what: pvfs_proto::CreateWhat,
    ) -> pvfs_proto::Request {
        pvfs_proto::Request::Create(pvfs_proto::req::Create {
            hold: 0,
            parent,
            name: name.into(),
            mode: 0o755,
            umask: 0,
            uid: 0,
            gid: 0,
            what,
        })
    }

    /// Closes the server's store (what a clean stop does).
    pub async fn close(&self) {
        self.ctx.meta.close().await;
    }
}
