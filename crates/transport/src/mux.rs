//! A multiplexed client connection: many requests in flight on one stream.
//!
//! Each request gets an id; one reader task per connection routes every incoming
//! frame to the request it belongs to through a small bounded channel (so a slow
//! consumer slows its connection instead of growing memory). When the connection
//! breaks, every waiting request learns it at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pvfs_proto::frame::{FrameHeader, FrameKind};
use tokio::io::BufReader;
use tokio::sync::mpsc;

use crate::buf::BufPool;
use crate::frames::{read_payload, read_raw_header, skip, Frame, FrameWriter};
use crate::stream::{BoxRead, Conn};
use crate::TransportError;

/// Frames buffered per request before the reader waits for the consumer.
const CALL_QUEUE: usize = 8;

struct State {
    pending: HashMap<u64, mpsc::Sender<Frame>>,
    closed: Option<String>,
}

/// One connection to a server, shared by every task of a client.
pub struct MuxConn {
    writer: FrameWriter,
    state: Mutex<State>,
    next_id: AtomicU64,
    peer: String,
    io_timeout: Duration,
}

impl MuxConn {
    /// Takes over an established connection and starts its reader task.
    /// `io_timeout` bounds every wait for the peer (sending a frame, or the next
    /// frame of an answer).
    pub fn start(conn: Conn, pool: BufPool, io_timeout: Duration) -> Arc<MuxConn> {
        let mux = Arc::new(MuxConn {
            writer: FrameWriter::new(conn.write),
            state: Mutex::new(State {
                pending: HashMap::new(),
                closed: None,
            }),
            next_id: AtomicU64::new(1),
            peer: conn.peer,
            io_timeout,
        });
        let reader = mux.clone();
        tokio::spawn(async move {
            let why = reader.read_loop(conn.read, pool).await;
            reader.close(why);
        });
        mux
    }

    /// The peer's address.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Why the connection is closed, if it is.
    pub fn closed(&self) -> Option<String> {
        self.lock().closed.clone()
    }

    /// Starts a request: sends its first frame (body and optional first data) and
    /// returns the handle on which its answer arrives. With `end` false, more data
    /// frames follow through [`Call::send_data`].
    pub async fn call(
        self: &Arc<Self>,
        body: &[u8],
        data: &[&[u8]],
        end: bool,
    ) -> Result<Call, TransportError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(CALL_QUEUE);
        {
            let mut st = self.lock();
            if let Some(why) = &st.closed {
                return Err(TransportError::Closed(why.clone()));
            }
            st.pending.insert(id, tx);
        }
        let call = Call {
            conn: self.clone(),
            id,
            rx,
        };
        self.send(FrameKind::Request, id, end, body, data).await?;
        Ok(call)
    }

    async fn send(
        &self,
        kind: FrameKind,
        id: u64,
        end: bool,
        body: &[u8],
        data: &[&[u8]],
    ) -> Result<(), TransportError> {
        let sent = tokio::time::timeout(self.io_timeout, self.writer.send(kind, id, end, body, data)).await;
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                self.close(format!("send to {} failed: {e}", self.peer));
                Err(e)
            }
            Err(_) => {
                let what = format!("sending to {}", self.peer);
                // A half-written frame leaves the stream unusable.
                self.close(format!("timed out {what}"));
                Err(TransportError::Timeout { what })
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means another task panicked mid-update of a map whose
        // entries stay individually valid.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn close(&self, why: String) {
        let mut st = self.lock();
        if st.closed.is_none() {
            tracing::debug!(peer = %self.peer, %why, "connection closed");
            st.closed = Some(why);
        }
        // Dropping the senders wakes every waiting call.
        st.pending.clear();
    }

    async fn read_loop(&self, read: BoxRead, pool: BufPool) -> String {
        let mut r = BufReader::with_capacity(64 * 1024, read);
        loop {
            let raw = match read_raw_header(&mut r).await {
                Ok(Some(raw)) => raw,
                Ok(None) => return format!("{} closed the connection", self.peer),
                Err(e) => return format!("reading from {}: {e}", self.peer),
            };
            let header = match FrameHeader::decode(&raw) {
                Ok(h) => h,
                Err(e) => return format!("bad frame from {}: {e}", self.peer),
            };
            if header.kind == FrameKind::Request {
                return format!("{} sent a request frame to a client", self.peer);
            }
            let sink = self.lock().pending.get(&header.request_id).cloned();
            let Some(sink) = sink else {
                // The caller gave up on this request; drop the rest of its answer.
                if let Err(e) = skip(&mut r, header.payload_len() as u64).await {
                    return format!("reading from {}: {e}", self.peer);
                }
                continue;
            };
            let frame = match read_payload(&mut r, header, &pool).await {
                Ok(f) => f,
                Err(e) => return format!("reading from {}: {e}", self.peer),
            };
            let end = frame.header.is_end();
            // A closed receiver means the caller went away; that is not an error.
            let _ = sink.send(frame).await;
            if end {
                self.lock().pending.remove(&header.request_id);
            }
        }
    }
}

/// One request in flight: send more data, receive answer frames.
pub struct Call {
    conn: Arc<MuxConn>,
    id: u64,
    rx: mpsc::Receiver<Frame>,
}

impl Call {
    /// The request id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Sends a further data frame of this request.
    pub async fn send_data(&self, data: &[&[u8]], end: bool) -> Result<(), TransportError> {
        self.conn.send(FrameKind::Data, self.id, end, &[], data).await
    }

    /// Waits for the next frame of the answer, at most the connection's I/O timeout.
    pub async fn recv(&mut self) -> Result<Frame, TransportError> {
        match tokio::time::timeout(self.conn.io_timeout, self.rx.recv()).await {
            Ok(Some(frame)) => Ok(frame),
            Ok(None) => Err(TransportError::Closed(
                self.conn
                    .closed()
                    .unwrap_or_else(|| format!("{} ended the answer early", self.conn.peer)),
            )),
            Err(_) => Err(TransportError::Timeout {
                what: format!("waiting for {}", self.conn.peer),
            }),
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.conn.lock().pending.remove(&self.id);
    }
}
