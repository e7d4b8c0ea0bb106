//! Reading and writing whole frames on a byte stream.
//!
//! Readers check the header before reading anything else, so a hostile length can
//! never cause a large allocation; bulk data lands in pooled page-aligned buffers.
//! Writers send header, body and data with vectored writes (no gathering copy) and
//! serialize whole frames, so frames of concurrent requests never interleave.

use std::io::IoSlice;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pvfs_auth::{FrameMac, TAG_LEN};
use pvfs_proto::frame::{FrameHeader, FrameKind, HEADER_LEN};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::OwnedMutexGuard;

use crate::buf::{BufPool, PooledBuf};
use crate::stream::BoxWrite;
use crate::TransportError;

/// One received frame.
pub struct Frame {
    /// The checked header.
    pub header: FrameHeader,
    /// The encoded message (empty for data frames).
    pub body: Vec<u8>,
    /// The authentication tag (checked by the receiver before the body is used).
    pub tag: Vec<u8>,
    /// Bulk data.
    pub data: PooledBuf,
}

/// Reads the next raw header; `Ok(None)` on a clean end of stream between frames.
pub async fn read_raw_header<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Option<[u8; HEADER_LEN]>, TransportError> {
    read_header_within(r, None).await
}

/// Reads the next raw header, waiting as long as needed for its first byte but at
/// most `rest` (when given) for the others, so a peer that stops inside a header
/// cannot hold the connection forever.
pub async fn read_header_within<R: AsyncRead + Unpin>(
    r: &mut R,
    rest: Option<Duration>,
) -> Result<Option<[u8; HEADER_LEN]>, TransportError> {
    let mut raw = [0u8; HEADER_LEN];
    let mut got = 0;
    let mut deadline = None;
    while got < HEADER_LEN {
        let read = r.read(&mut raw[got..]);
        let n = match deadline {
            None => read.await,
            Some(at) => match tokio::time::timeout_at(at, read).await {
                Ok(n) => n,
                Err(_) => {
                    return Err(TransportError::Timeout {
                        what: format!(
                            "the rest of a frame header ({got} of {HEADER_LEN} bytes came)"
                        ),
                    })
                }
            },
        }
        .map_err(TransportError::Io)?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(TransportError::Closed(format!(
                "connection closed inside a frame header ({got} of {HEADER_LEN} bytes)"
            )));
        }
        got += n;
        if deadline.is_none() {
            deadline = rest.map(|d| tokio::time::Instant::now() + d);
        }
    }
    Ok(Some(raw))
}

/// Reads the body, tag and data announced by `header`.
pub async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut R,
    header: FrameHeader,
    pool: &BufPool,
) -> Result<Frame, TransportError> {
    let mut body = vec![0u8; header.body_len as usize];
    r.read_exact(&mut body).await.map_err(eof_inside)?;
    let mut tag = vec![0u8; header.tag_len as usize];
    r.read_exact(&mut tag).await.map_err(eof_inside)?;
    let data = read_data(r, header.data_len as usize, pool).await?;
    Ok(Frame {
        header,
        body,
        tag,
        data,
    })
}

/// Reads `len` bytes of a frame's data into a pooled buffer.
pub async fn read_data<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
    pool: &BufPool,
) -> Result<PooledBuf, TransportError> {
    let mut data = if len == 0 {
        PooledBuf::empty()
    } else {
        pool.get(len)
    };
    r.read_exact(&mut data).await.map_err(eof_inside)?;
    Ok(data)
}

/// Reads and discards `n` bytes (the payload of a frame nobody waits for).
pub async fn skip<R: AsyncRead + Unpin>(r: &mut R, mut n: u64) -> Result<(), TransportError> {
    let mut scratch = [0u8; 8192];
    while n > 0 {
        let want = n.min(scratch.len() as u64) as usize;
        let got = r
            .read(&mut scratch[..want])
            .await
            .map_err(TransportError::Io)?;
        if got == 0 {
            return Err(TransportError::Closed(
                "connection closed inside a frame".into(),
            ));
        }
        n -= got as u64;
    }
    Ok(())
}

fn eof_inside(e: std::io::Error) -> TransportError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        TransportError::Closed("connection closed inside a frame".into())
    } else {
        TransportError::Io(e)
    }
}

/// Checks a received frame's tag with the connection's MAC (`None`: a connection
/// without a session, which must send no tags). A failure means the connection can no
/// longer be trusted: the caller closes it.
pub fn check_tag(
    mac: &mut Option<FrameMac>,
    header: &FrameHeader,
    body: &[u8],
    tag: &[u8],
) -> Result<(), TransportError> {
    match mac {
        Some(m) => m
            .open(&header.encode(), body, tag)
            .map_err(|e| TransportError::Closed(e.to_string())),
        None if tag.is_empty() => Ok(()),
        None => Err(TransportError::Closed(
            "a tagged frame on a connection without a session".into(),
        )),
    }
}

/// Builds a header for a frame with these parts; a body or data beyond the protocol's
/// limits is refused (the caller answers E2BIG instead of sending it). `tagged`: the
/// frame carries a MAC.
pub fn header(
    kind: FrameKind,
    request_id: u64,
    end: bool,
    body: &[u8],
    data_len: usize,
    tagged: bool,
) -> Result<FrameHeader, TransportError> {
    use pvfs_proto::frame::{MAX_BODY, MAX_DATA};
    if body.len() > MAX_BODY as usize || data_len > MAX_DATA as usize {
        return Err(TransportError::Oversized(format!(
            "frame with a {}-byte body and {data_len} data bytes (limits {MAX_BODY} and {MAX_DATA})",
            body.len()
        )));
    }
    Ok(FrameHeader {
        kind,
        flags: if end { pvfs_proto::frame::FLAG_END } else { 0 },
        request_id,
        body_len: body.len() as u32,
        tag_len: if tagged { TAG_LEN as u16 } else { 0 },
        data_len: data_len as u32,
    })
}

/// The sending half of a connection and the MAC of the frames sent on it: one lock
/// covers both, so frames go out whole and in the order of their sequence numbers.
pub struct Sink {
    w: BoxWrite,
    mac: Option<FrameMac>,
}

impl Sink {
    /// The header and tag of a frame (the tag is the next in sequence, so the frame
    /// must be sent before any other).
    fn seal(
        &mut self,
        kind: FrameKind,
        request_id: u64,
        end: bool,
        body: &[u8],
        data_len: usize,
    ) -> Result<([u8; HEADER_LEN], Option<[u8; TAG_LEN]>), TransportError> {
        let h = header(kind, request_id, end, body, data_len, self.mac.is_some())?.encode();
        let tag = self.mac.as_mut().map(|mac| mac.seal(&h, body));
        Ok((h, tag))
    }

    /// Header, body and tag of a frame in one buffer, ready to send.
    fn head(
        &mut self,
        kind: FrameKind,
        request_id: u64,
        end: bool,
        body: &[u8],
        data_len: usize,
    ) -> Result<Vec<u8>, TransportError> {
        let (h, tag) = self.seal(kind, request_id, end, body, data_len)?;
        let mut head = Vec::with_capacity(HEADER_LEN + body.len() + TAG_LEN);
        head.extend_from_slice(&h);
        head.extend_from_slice(body);
        if let Some(tag) = &tag {
            head.extend_from_slice(tag);
        }
        Ok(head)
    }
}

/// Synchronous frame sending on a blocking thread, inside [`FrameWriter::send_blocking`].
pub struct BlockingFrames {
    sock: RawFd,
    sink: OwnedMutexGuard<Sink>,
    timeout: Duration,
    failed: bool,
}

impl BlockingFrames {
    /// Sends one frame without data (a response body alone).
    pub fn send(
        &mut self,
        kind: FrameKind,
        request_id: u64,
        end: bool,
        body: &[u8],
    ) -> Result<(), TransportError> {
        assert!(!self.failed, "no frame may follow a failed one");
        let sent = self
            .sink
            .head(kind, request_id, end, body, 0)
            .and_then(|head| crate::sendfile::write_all(self.sock, &head, false, self.timeout));
        if sent.is_err() {
            self.failed = true;
        }
        sent
    }

    /// Sends one frame whose data is the byte ranges `runs` of `file`, in order, with
    /// `sendfile` (no copy through user space); bytes the file no longer holds go as
    /// zeros, so the frame keeps the length its header announced. A failure leaves
    /// the frame half sent: the caller must stop, and the connection is aborted.
    pub fn send_file(
        &mut self,
        kind: FrameKind,
        request_id: u64,
        end: bool,
        body: &[u8],
        file: &std::fs::File,
        runs: &[(u64, u64)],
    ) -> Result<(), TransportError> {
        assert!(!self.failed, "no frame may follow a failed one");
        let data_len: u64 = runs.iter().map(|r| r.1).sum();
        let (sock, timeout) = (self.sock, self.timeout);
        let sent = self
            .sink
            .head(kind, request_id, end, body, data_len as usize)
            .and_then(|head| {
                crate::sendfile::write_all(sock, &head, data_len > 0, timeout)?;
                crate::sendfile::send_runs(sock, file, runs, timeout)
            });
        if sent.is_err() {
            self.failed = true;
        }
        sent
    }
}

/// The sending half of a connection, shared by every task that answers or asks on it.
pub struct FrameWriter {
    w: Arc<tokio::sync::Mutex<Sink>>,
    fd: Option<RawFd>,
    broken: AtomicBool,
}

impl FrameWriter {
    /// Wraps the sending half; `fd` is the socket's descriptor if it has one; `mac`
    /// tags every frame (the session's MAC for this direction).
    pub fn new(w: BoxWrite, fd: Option<RawFd>, mac: Option<FrameMac>) -> FrameWriter {
        FrameWriter {
            w: Arc::new(tokio::sync::Mutex::new(Sink { w, mac })),
            fd,
            broken: AtomicBool::new(false),
        }
    }

    /// Gives up on the connection after a frame could not be sent whole: later sends
    /// fail, and the socket is shut down so the peer sees the end at once instead of
    /// a stream that stopped inside a frame.
    pub fn abort(&self) {
        self.broken.store(true, Ordering::Release);
        if let Some(fd) = self.fd {
            // SAFETY: the socket stays open while self (owning the write half) lives;
            // shutdown does not close the descriptor.
            unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
        }
    }

    fn check(&self) -> Result<(), TransportError> {
        if self.broken.load(Ordering::Acquire) {
            Err(TransportError::Closed(
                "connection aborted after a failed send".into(),
            ))
        } else {
            Ok(())
        }
    }

    /// Whether [`FrameWriter::send_file`] can be used.
    pub fn can_send_file(&self) -> bool {
        self.fd.is_some()
    }

    /// Sends one frame whose data is taken straight from `file` (the byte ranges
    /// `runs`, in order) with `sendfile`, without copying it through user space. Bytes
    /// the file no longer holds (it shrank) are sent as zeros, so the frame keeps the
    /// length its header announced. Fails after `timeout` without progress.
    #[allow(clippy::too_many_arguments)]
    pub async fn send_file(
        &self,
        kind: FrameKind,
        request_id: u64,
        end: bool,
        body: Vec<u8>,
        file: Arc<std::fs::File>,
        runs: Vec<(u64, u64)>,
        timeout: Duration,
    ) -> Result<(), TransportError> {
        self.send_blocking(timeout, move |frames| {
            frames.send_file(kind, request_id, end, &body, &file, &runs)
        })
        .await?
    }

    /// Runs `f` on a blocking thread with this connection's sending half locked, so it
    /// can send frames whose data comes straight from files ([`BlockingFrames`]). One
    /// thread hop does the work around the frames too (a read handler measures the
    /// datafile and plans the frame there), where separate blocking calls cost one hop
    /// each. A send that fails inside `f` aborts the connection; `f`'s result (which
    /// saw that failure) is returned as it is.
    pub async fn send_blocking<T, F>(&self, timeout: Duration, f: F) -> Result<T, TransportError>
    where
        F: FnOnce(&mut BlockingFrames) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.check()?;
        let Some(sock) = self.fd else {
            return Err(TransportError::Io(std::io::Error::from(
                std::io::ErrorKind::Unsupported,
            )));
        };
        // The owned guard travels into the blocking thread: the socket (and its
        // descriptor) stays alive and exclusively ours until `f` is done.
        // (the guard keeps the socket, and its descriptor, alive and ours).
        let sink = self.w.clone().lock_owned().await;
        let ran = tokio::task::spawn_blocking(move || {
            let mut frames = BlockingFrames {
                sock,
                sink,
                timeout,
                failed: false,
            };
            let out = f(&mut frames);
            (out, frames.failed)
        })
        .await;
        match ran {
            Ok((out, failed)) => {
                if failed {
                    self.abort();
                }
                Ok(out)
            }
            Err(e) => {
                self.abort();
                Err(TransportError::Io(std::io::Error::other(e)))
            }
        }
    }

    /// Sends one whole frame: header, body, then the data slices in order.
    pub async fn send(
        &self,
        kind: FrameKind,
        request_id: u64,
        end: bool,
        body: &[u8],
        data: &[&[u8]],
    ) -> Result<(), TransportError> {
        let data_len: usize = data.iter().map(|d| d.len()).sum();
        self.check()?;
        let mut sink = self.w.lock().await;
        let (hdr, tag) = sink.seal(kind, request_id, end, body, data_len)?;
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(3 + data.len());
        slices.push(IoSlice::new(&hdr));
        if !body.is_empty() {
            slices.push(IoSlice::new(body));
        }
        if let Some(tag) = &tag {
            slices.push(IoSlice::new(tag));
        }
        slices.extend(
            data.iter()
                .filter(|d| !d.is_empty())
                .map(|d| IoSlice::new(d)),
        );
        let mut result = write_all_vectored(&mut sink.w, &mut slices).await;
        if result.is_ok() && (data_len == 0 || end) {
            result = sink.w.flush().await.map_err(TransportError::Io);
        }
        if result.is_err() {
            self.abort();
        }
        result
    }

    /// Sends raw bytes (tests use it to send malformed frames).
    pub async fn send_raw(&self, bytes: &[u8]) -> Result<(), TransportError> {
        let mut sink = self.w.lock().await;
        sink.w.write_all(bytes).await.map_err(TransportError::Io)?;
        sink.w.flush().await.map_err(TransportError::Io)
    }
}

async fn write_all_vectored<W: AsyncWrite + Unpin + ?Sized>(
    w: &mut W,
    mut slices: &mut [IoSlice<'_>],
) -> Result<(), TransportError> {
    // Writes at most IOV_MAX slices per call; the kernel rejects more.
    const IOV_MAX: usize = 1024;
    while !slices.is_empty() {
        let upto = slices.len().min(IOV_MAX);
        let n = w
            .write_vectored(&slices[..upto])
            .await
            .map_err(TransportError::Io)?;
        if n == 0 {
            return Err(TransportError::Closed("peer stopped reading".into()));
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}
