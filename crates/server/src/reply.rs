//! Where a handler's answer goes ([`Reply`]: the connection's sending half and the
//! request's id), and the bulk data a request brought ([`Data`]).

use std::sync::Arc;

use pvfs_proto::encode;
use pvfs_proto::frame::FrameKind;
use pvfs_proto::Response;
use pvfs_transport::{FrameWriter, PooledBuf, TransportError};

use crate::budget::Held;

/// Received bulk data, holding its frame's share of the server's buffer budget until
/// dropped (that is, until the bytes are on disk, or the request is answered).
pub struct Data {
    /// The bytes.
    pub buf: PooledBuf,
    /// Whether the frame was the last of its request.
    pub end: bool,
    _budget: Option<Held>,
}

impl Data {
    /// Data received in a frame, holding `budget` until dropped.
    pub fn new(buf: PooledBuf, end: bool, budget: Held) -> Data {
        Data {
            buf,
            end,
            _budget: Some(budget),
        }
    }

    /// Data that holds no share of the receive budget (made in this process, not
    /// received: `crate::local`).
    pub fn unbudgeted(buf: PooledBuf, end: bool) -> Data {
        Data {
            buf,
            end,
            _budget: None,
        }
    }
}

/// Where a handler sends its answer.
#[derive(Clone)]
pub struct Reply {
    writer: Arc<FrameWriter>,
    id: u64,
    timeout: std::time::Duration,
}

impl Reply {
    /// Where the answer to request `id` goes, on the connection `writer` sends on; a
    /// frame not taken within `timeout` drops the connection.
    pub fn new(writer: Arc<FrameWriter>, id: u64, timeout: std::time::Duration) -> Reply {
        Reply {
            writer,
            id,
            timeout,
        }
    }

    /// Sends a response frame, optionally with data.
    pub async fn response(
        &self,
        response: &Response,
        data: &[&[u8]],
        end: bool,
    ) -> Result<(), TransportError> {
        self.send(FrameKind::Response, &encode(response), data, end)
            .await
    }

    /// Sends a data frame.
    pub async fn data(&self, data: &[&[u8]], end: bool) -> Result<(), TransportError> {
        self.send(FrameKind::Data, &[], data, end).await
    }

    /// Sends a frame; a client that does not take it within the deadline loses its
    /// connection (a slow reader cannot pin a handler forever).
    async fn send(
        &self,
        kind: FrameKind,
        body: &[u8],
        data: &[&[u8]],
        end: bool,
    ) -> Result<(), TransportError> {
        let send = self.writer.send(kind, self.id, end, body, data);
        match tokio::time::timeout(self.timeout, send).await {
            Ok(r) => r,
            Err(_) => {
                self.writer.abort();
                Err(TransportError::Timeout {
                    what: "sending an answer".into(),
                })
            }
        }
    }

    /// Drops the connection without answering (fault injection: a lost reply).
    pub fn abort(&self) {
        self.writer.abort();
    }

    /// Whether file data can be sent without a copy through user space.
    pub fn can_send_file(&self) -> bool {
        self.writer.can_send_file()
    }

    /// The request this reply answers.
    pub fn request_id(&self) -> u64 {
        self.id
    }

    /// Runs `f` on a blocking thread with the connection's sending half, to send
    /// frames straight from files (see [`FrameWriter::send_blocking`]).
    pub async fn send_blocking<T, F>(&self, f: F) -> Result<T, TransportError>
    where
        F: FnOnce(&mut pvfs_transport::BlockingFrames) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.writer.send_blocking(self.timeout, f).await
    }

    /// Sends a frame (a response with `response`, else a data frame) whose data is
    /// the byte ranges `runs` of `file`, with `sendfile`.
    pub async fn file_data(
        &self,
        response: Option<&Response>,
        file: Arc<std::fs::File>,
        runs: Vec<(u64, u64)>,
        end: bool,
        timeout: std::time::Duration,
    ) -> Result<(), TransportError> {
        let (kind, body) = match response {
            Some(r) => (FrameKind::Response, encode(r)),
            None => (FrameKind::Data, Vec::new()),
        };
        self.writer
            .send_file(kind, self.id, end, body, file, runs, timeout)
            .await
    }
}
