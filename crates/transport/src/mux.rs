//! A multiplexed client connection: many requests in flight on one stream.
//!
//! Each request gets an id; one reader task per connection routes every incoming
//! frame to the request it belongs to through a small bounded channel (so a slow
//! consumer slows its connection instead of growing memory). When the connection
//! breaks, every waiting request learns it at once.
//!
//! A request started with [`MuxConn::call_direct`] receives the bulk data of its
//! answer straight from the socket into its own memory: the reader task reads the
//! frame's header and body, then lends the stream to the request ([`Direct`]) and
//! waits until the request has read the data. This saves a copy of every byte read.
//! A request that gives up halfway through a frame costs the connection (the stream
//! position is lost), never memory safety.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pvfs_proto::frame::{FrameHeader, FrameKind};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::{mpsc, oneshot, OwnedMutexGuard};

use crate::buf::BufPool;
use crate::frames::{check_tag, read_data, read_raw_header, skip, Frame, FrameWriter};
use crate::stream::{BoxRead, Conn};
use crate::TransportError;

/// Frames buffered per request before the reader waits for the consumer.
const CALL_QUEUE: usize = 8;

type Stream = BufReader<BoxRead>;

/// What the reader task hands a request.
pub enum Incoming {
    /// A whole frame.
    Frame(Frame),
    /// A frame whose data is still in the socket, for the request to read itself.
    Direct(Direct),
}

struct Sink {
    tx: mpsc::Sender<Incoming>,
    direct: bool,
}

struct State {
    pending: BTreeMap<u64, Sink>,
    closed: Option<String>,
}

/// One connection to a server, shared by every task of a client.
pub struct MuxConn {
    writer: FrameWriter,
    state: Mutex<State>,
    next_id: AtomicU64,
    peer: String,
    io_timeout: Duration,
    pool: BufPool,
}

impl MuxConn {
    /// Takes over an established connection and starts its reader task.
    /// `io_timeout` bounds every wait for the peer (sending a frame, or the next
    /// frame of an answer). `macs` are the session's frame MACs (from the handshake);
    /// `None` only for a connection that needs none (tests of the transport itself).
    pub fn start(
        conn: Conn,
        pool: BufPool,
        io_timeout: Duration,
        macs: Option<pvfs_auth::SessionMacs>,
    ) -> Arc<MuxConn> {
        let (send_mac, recv_mac) = match macs {
            Some(m) => (Some(m.send), Some(m.recv)),
            None => (None, None),
        };
        let mux = Arc::new(MuxConn {
            writer: FrameWriter::new(conn.write, conn.fd, send_mac),
            state: Mutex::new(State {
                pending: BTreeMap::new(),
                closed: None,
            }),
            next_id: AtomicU64::new(1),
            peer: conn.peer,
            io_timeout,
            pool,
        });
        let reader = mux.clone();
        let stream = Arc::new(tokio::sync::Mutex::new(BufReader::with_capacity(
            64 * 1024,
            conn.read,
        )));
        tokio::spawn(async move {
            let why = reader.read_loop(stream, recv_mac).await;
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

    /// Requests waiting for (the rest of) their answers.
    pub fn in_flight(&self) -> usize {
        self.lock().pending.len()
    }

    /// Closes the connection (the server sees it end at once); requests still waiting
    /// fail.
    pub fn shutdown(&self, why: &str) {
        self.writer.abort();
        self.close(why.to_string());
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
        self.start_call(body, data, end, false).await
    }

    /// Like [`MuxConn::call`], but the answer's bulk data is delivered as
    /// [`Incoming::Direct`] for the caller to read into its own memory.
    pub async fn call_direct(self: &Arc<Self>, body: &[u8]) -> Result<Call, TransportError> {
        self.start_call(body, &[], true, true).await
    }

    async fn start_call(
        self: &Arc<Self>,
        body: &[u8],
        data: &[&[u8]],
        end: bool,
        direct: bool,
    ) -> Result<Call, TransportError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(CALL_QUEUE);
        {
            let mut st = self.lock();
            if let Some(why) = &st.closed {
                return Err(TransportError::Closed(why.clone()));
            }
            st.pending.insert(id, Sink { tx, direct });
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
        let sent =
            tokio::time::timeout(self.io_timeout, self.writer.send(kind, id, end, body, data))
                .await;
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                self.close(format!("send to {} failed: {e}", self.peer));
                Err(e)
            }
            Err(_) => {
                let what = format!("sending to {}", self.peer);
                // A half-written frame leaves the stream unusable.
                self.writer.abort();
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

    async fn read_loop(
        &self,
        stream: Arc<tokio::sync::Mutex<Stream>>,
        mut mac: Option<pvfs_auth::FrameMac>,
    ) -> String {
        loop {
            let mut r = stream.clone().lock_owned().await;
            let raw = match read_raw_header(&mut *r).await {
                Ok(Some(raw)) => raw,
                Ok(None) => return format!("{} closed the connection", self.peer),
                Err(e) => return format!("reading from {}: {e}", self.peer),
            };
            let header = match FrameHeader::decode(&raw) {
                Ok(h) => h,
                Err(e) => return format!("bad frame from {}: {e}", self.peer),
            };
            if matches!(header.kind, FrameKind::Request | FrameKind::Handshake) {
                return format!("{} sent a {:?} frame to a client", self.peer, header.kind);
            }
            // Body and tag first: every frame is authenticated before anything in it is
            // used, including frames nobody waits for (the sequence must advance).
            let mut body = vec![0u8; header.body_len as usize + header.tag_len as usize];
            if let Err(e) = r.read_exact(&mut body).await {
                return format!("reading from {}: {e}", self.peer);
            }
            let tag = body.split_off(header.body_len as usize);
            if let Err(e) = check_tag(&mut mac, &header, &body, &tag) {
                return format!("from {}: {e}", self.peer);
            }
            let sink = self
                .lock()
                .pending
                .get(&header.request_id)
                .map(|s| (s.tx.clone(), s.direct));
            let Some((sink, direct)) = sink else {
                // The caller gave up on this request; drop the rest of its answer.
                if let Err(e) = skip(&mut *r, u64::from(header.data_len)).await {
                    return format!("reading from {}: {e}", self.peer);
                }
                continue;
            };
            let end = header.is_end();
            if direct && header.data_len > 0 {
                let (done_tx, done_rx) = oneshot::channel();
                let lent = Direct {
                    header,
                    body,
                    stream: Some(r),
                    left: header.data_len as usize,
                    done: Some(done_tx),
                    timeout: self.io_timeout,
                };
                if sink.send(Incoming::Direct(lent)).await.is_err() {
                    return format!("a request abandoned a frame from {}", self.peer);
                }
                // The request reads the data; the stream comes back when it is done.
                match done_rx.await {
                    Ok(()) => {}
                    Err(_) => {
                        return format!("a request stopped reading a frame from {}", self.peer)
                    }
                }
            } else {
                let data = match read_data(&mut *r, header.data_len as usize, &self.pool).await {
                    Ok(d) => d,
                    Err(e) => return format!("reading from {}: {e}", self.peer),
                };
                drop(r);
                let frame = Frame {
                    header,
                    body,
                    tag,
                    data,
                };
                // A closed receiver means the caller went away; that is not an error.
                let _ = sink.send(Incoming::Frame(frame)).await;
            }
            if end {
                self.lock().pending.remove(&header.request_id);
            }
        }
    }
}

/// A received frame whose bulk data is still in the socket. Read it all with
/// [`Direct::read`], then [`Direct::finish`]; dropping it earlier closes the
/// connection.
pub struct Direct {
    /// The frame's header.
    pub header: FrameHeader,
    /// The frame's body.
    pub body: Vec<u8>,
    stream: Option<OwnedMutexGuard<Stream>>,
    left: usize,
    done: Option<oneshot::Sender<()>>,
    timeout: Duration,
}

impl Direct {
    /// Data bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.left
    }

    /// Reads the next `dst.len()` bytes of the frame's data into `dst`.
    pub async fn read(&mut self, dst: &mut [u8]) -> Result<(), TransportError> {
        assert!(dst.len() <= self.left, "read past the frame's data");
        let Some(stream) = self.stream.as_mut() else {
            return Err(TransportError::Closed("frame already finished".into()));
        };
        match tokio::time::timeout(self.timeout, read_bypassing(stream, dst)).await {
            Ok(Ok(_)) => {
                self.left -= dst.len();
                Ok(())
            }
            Ok(Err(e)) => Err(TransportError::Io(e)),
            Err(_) => Err(TransportError::Timeout {
                what: "receiving frame data".into(),
            }),
        }
    }

    /// Returns the stream to the connection once every data byte was read.
    pub fn finish(mut self) -> Result<(), TransportError> {
        if self.left != 0 {
            return Err(TransportError::Closed(format!(
                "{} bytes of frame data left unread",
                self.left
            )));
        }
        self.stream = None;
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
        Ok(())
    }

    /// Reads the rest of the data into a pooled buffer (for callers that want a
    /// whole [`Frame`]).
    pub async fn into_frame(mut self, pool: &BufPool) -> Result<Frame, TransportError> {
        let mut data = pool.get(self.left);
        self.read(&mut data).await?;
        let header = self.header;
        let body = std::mem::take(&mut self.body);
        self.finish()?;
        Ok(Frame {
            header,
            body,
            tag: Vec::new(),
            data,
        })
    }
}

/// Reads exactly `dst.len()` bytes: first what the reader has buffered, then straight
/// from the socket into `dst`. `BufReader::read_exact` would refill its 64 KiB buffer
/// whenever less than that is wanted, and striped data arrives as pieces of one stripe
/// each (64 KiB by default): most bytes were copied twice (a profile of 4 readers on
/// the FUSE mount showed that copy at 12-15% of the client's CPU).
async fn read_bypassing(stream: &mut Stream, dst: &mut [u8]) -> std::io::Result<()> {
    let buffered = stream.buffer();
    let n = buffered.len().min(dst.len());
    dst[..n].copy_from_slice(&buffered[..n]);
    stream.consume(n);
    if n < dst.len() {
        // The buffer is empty now: reading past it keeps the stream in order.
        stream.get_mut().read_exact(&mut dst[n..]).await?;
    }
    Ok(())
}

/// One request in flight: send more data, receive answer frames.
pub struct Call {
    conn: Arc<MuxConn>,
    id: u64,
    rx: mpsc::Receiver<Incoming>,
}

impl Call {
    /// The request id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Sends a further data frame of this request.
    pub async fn send_data(&self, data: &[&[u8]], end: bool) -> Result<(), TransportError> {
        self.conn
            .send(FrameKind::Data, self.id, end, &[], data)
            .await
    }

    /// Waits for the next frame of the answer, at most the connection's I/O timeout.
    pub async fn recv_incoming(&mut self) -> Result<Incoming, TransportError> {
        self.recv_incoming_within(self.conn.io_timeout).await
    }

    /// Waits for the next frame of the answer, at most `timeout` (for requests whose
    /// answer may take longer than the connection's I/O timeout, like fsync).
    pub async fn recv_incoming_within(
        &mut self,
        timeout: Duration,
    ) -> Result<Incoming, TransportError> {
        match tokio::time::timeout(timeout, self.rx.recv()).await {
            Ok(Some(incoming)) => Ok(incoming),
            Ok(None) => Err(TransportError::Closed(self.conn.closed().unwrap_or_else(
                || format!("{} ended the answer early", self.conn.peer),
            ))),
            Err(_) => Err(TransportError::Timeout {
                what: format!("waiting for {}", self.conn.peer),
            }),
        }
    }

    /// Waits for the next whole frame of the answer.
    pub async fn recv(&mut self) -> Result<Frame, TransportError> {
        self.recv_within(self.conn.io_timeout).await
    }

    /// Waits for the next whole frame of the answer, at most `timeout`.
    pub async fn recv_within(&mut self, timeout: Duration) -> Result<Frame, TransportError> {
        match self.recv_incoming_within(timeout).await? {
            Incoming::Frame(f) => Ok(f),
            Incoming::Direct(d) => d.into_frame(&self.conn.pool).await,
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.conn.lock().pending.remove(&self.id);
    }
}
