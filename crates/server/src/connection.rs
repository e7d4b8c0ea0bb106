//! One client connection: read frames, start a handler per request, route bulk data
//! frames to the handler of their request, send answers.
//!
//! A malformed body gets an error answer and the connection keeps serving; a
//! malformed header (bad magic, unknown version, oversized lengths) gets an error
//! answer when a request id can be read, then the connection is closed, because the
//! frame boundary is lost. Limits: at most [`MAX_INFLIGHT`] requests per connection
//! and [`STREAM_QUEUE`] queued data frames per request, every frame's body and data
//! counted against the receive-buffer budget before they are read (`crate::budget`),
//! and a connection with nothing to do closed after `[timeouts] idle`, so no client
//! can make the server buffer without bound or hold it for nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use pvfs_proto::frame::{peek_request_id, FrameError, FrameHeader, FrameKind};
use pvfs_proto::{decode, encode, Errno, Flow, RequestBody, Response};
use pvfs_transport::frames::{check_tag, read_header_within, read_payload};
use pvfs_transport::{Conn, FrameWriter};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::budget;
use crate::ctx::{Ctx, Inflight};
use crate::dispatch;
use crate::limits::Admitted;
use crate::reply::{Data, Reply};
use crate::session::Session;

/// Requests handled at once per connection.
pub const MAX_INFLIGHT: usize = 256;
/// Data frames queued per streaming request.
pub const STREAM_QUEUE: usize = 4;

/// Serves one connection until the peer closes it, it breaks, or `stop` fires.
pub async fn serve(
    ctx: Arc<Ctx>,
    promoted: Arc<crate::promote::Promoted>,
    conn: Conn,
    mut stop: tokio::sync::watch::Receiver<bool>,
    (handshake_slot, admitted): (OwnedSemaphorePermit, Admitted),
) {
    // TLS first when the file system runs over it (within the handshake's time).
    let conn = match &ctx.tls {
        None => conn,
        Some(tls) => {
            let peer = conn.peer.clone();
            let accepted = tokio::select! {
                a = tokio::time::timeout(ctx.config.timeouts.request, tls.accept(conn)) => a,
                _ = stop.changed() => return,
            };
            match accepted {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    refused(&ctx, &peer, &e.to_string());
                    return;
                }
                Err(_) => {
                    refused(&ctx, &peer, "no TLS handshake within the request timeout");
                    return;
                }
            }
        }
    };
    let peer = conn.peer;
    let fd = conn.fd;
    let mut raw_read = conn.read;
    let mut w = conn.write;
    // Nothing but the handshake is read until it succeeds, straight from the socket
    // (it reads exactly its messages), so a connection that never proves itself costs
    // no read buffer.
    let peer_ip = peer.parse::<std::net::SocketAddr>().ok().map(|a| a.ip());
    // A proven client takes one of the server's connection slots before it is let in
    // (a clear refusal when none is left).
    let take_slot = |_: &pvfs_auth::Identity| {
        ctx.connections.clone().try_acquire_owned().map_err(|_| {
            (
                Errno::EAGAIN,
                format!(
                    "server {} serves its limit of {} connections; try again later",
                    ctx.info.name,
                    ctx.connections_total()
                ),
            )
        })
    };
    let handshake = tokio::time::timeout(
        ctx.config.timeouts.request,
        pvfs_auth::handshake::server(&mut raw_read, &mut w, &ctx.policy, peer_ip, take_slot),
    );
    let opened = tokio::select! {
        opened = handshake => opened,
        _ = stop.changed() => return,
    };
    let (opened, _slot) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(e)) => {
            refused(&ctx, &peer, &e.to_string());
            return;
        }
        Err(_) => {
            refused(&ctx, &peer, "no handshake within the request timeout");
            return;
        }
    };
    drop(handshake_slot);
    let session = Arc::new(Session {
        identity: opened.identity,
        peer: peer.clone(),
        origin: crate::feed::origin_of(&opened.client),
        closed: std::sync::atomic::AtomicBool::new(false),
        client: opened.client,
        server: opened.server,
    });
    tracing::debug!(%peer, client = %session.client, identity = ?session.identity, "connection opened");
    ctx.metrics.connections_accepted.inc();
    // Counted open until this function returns, however it returns.
    struct Open<'a>(&'a crate::metrics::Metrics);
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            self.0.connections.dec();
        }
    }
    ctx.metrics.connections.inc();
    let _open = Open(&ctx.metrics);
    let writer = Arc::new(FrameWriter::new(w, fd, Some(opened.macs.send)));
    let mut recv_mac = Some(opened.macs.recv);
    let mut r = BufReader::with_capacity(64 * 1024, raw_read);
    // Ordered: when the connection ends, the streams' requests are woken in the
    // order of their ids, not in one a random hash picks (a simulation's run must
    // follow from its seed).
    let mut streams: BTreeMap<u64, mpsc::Sender<Data>> = BTreeMap::new();
    let slots = Arc::new(Semaphore::new(MAX_INFLIGHT));
    loop {
        // Wait for the next frame's first byte (without consuming anything, so the
        // wait can end at any time); a connection with no request in flight that
        // stays silent for the idle timeout is closed.
        let idle = ctx.config.timeouts.idle;
        let arrived = loop {
            tokio::select! {
                ready = r.fill_buf() => break matches!(ready, Ok(b) if !b.is_empty()),
                _ = tokio::time::sleep(idle) => {
                    if slots.available_permits() == MAX_INFLIGHT && streams.is_empty() {
                        tracing::debug!(%peer, "closing a connection idle for {idle:?}");
                        break false;
                    }
                }
                _ = stop.changed() => break false,
            }
        };
        if !arrived {
            break;
        }
        let raw = read_header_within(&mut r, Some(ctx.config.timeouts.request)).await;
        let raw = match raw {
            Ok(Some(raw)) => raw,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(%peer, "connection read failed: {e}");
                break;
            }
        };
        let header = match FrameHeader::decode(&raw) {
            Ok(h) => h,
            Err(e) => {
                refuse_header(&ctx, &writer, &raw, &e, &peer).await;
                break;
            }
        };
        // The frame's body and data wait for their share of the buffer budget before
        // anything is read or allocated (bounded memory whatever the clients send;
        // TCP pushes back meanwhile).
        let bytes = u64::from(header.body_len) + u64::from(header.data_len);
        let budget = match admitted
            .hold(&ctx.budget, budget::units(bytes.max(1)))
            .await
        {
            Some(held) => held,
            None => {
                if let Some(dropped) = ctx.log_limit.allow(&format!("budget {}", host_of(&peer))) {
                    tracing::warn!(%peer, dropped, "receive buffers held without progress past the request timeout; closing");
                }
                break;
            }
        };
        // Once a frame has begun, the rest of it must arrive within the deadline.
        let payload = tokio::time::timeout(
            ctx.config.timeouts.request,
            read_payload(&mut r, header, &ctx.pool),
        )
        .await;
        let frame = match payload {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => {
                tracing::debug!(%peer, "connection read failed: {e}");
                break;
            }
            Err(_) => {
                if let Some(dropped) = ctx.log_limit.allow(&format!("payload {}", host_of(&peer))) {
                    tracing::warn!(%peer, dropped, "frame payload not received in time; closing");
                }
                break;
            }
        };
        if let Err(e) = check_tag(&mut recv_mac, &header, &frame.body, &frame.tag) {
            if let Some(dropped) = ctx.log_limit.allow(&format!("mac {}", host_of(&peer))) {
                tracing::warn!(%peer, client = %session.client, dropped, "closing the connection: {e}");
            }
            break;
        }
        match header.kind {
            FrameKind::Request => {
                let body: RequestBody = match decode(&frame.body) {
                    Ok(b) => b,
                    Err(e) => {
                        let reply = Reply::new(
                            writer.clone(),
                            header.request_id,
                            ctx.config.timeouts.request,
                        );
                        let resp =
                            Response::error(Errno::EBADMSG, format!("undecodable request: {e}"));
                        if reply.response(&resp, &[], true).await.is_err() {
                            break;
                        }
                        continue;
                    }
                };
                let stream = if body.request.flow() == Flow::DataIn && !header.is_end() {
                    let (tx, rx) = mpsc::channel(STREAM_QUEUE);
                    streams.insert(header.request_id, tx);
                    Some(rx)
                } else {
                    None
                };
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    break;
                };
                let reply = Reply::new(
                    writer.clone(),
                    header.request_id,
                    ctx.config.timeouts.request,
                );
                // A group's request is served by the context of the group the
                // connection was opened for (`crate::promote`).
                let ctx = promoted.serving(&ctx, &session.server, &body.request);
                let session = session.clone();
                let guard = Inflight::enter(&ctx);
                tokio::spawn(async move {
                    let data = Data::new(frame.data, header.is_end(), budget);
                    dispatch::dispatch(&ctx, &reply, &session, body, data, stream).await;
                    drop(permit);
                    drop(guard);
                });
            }
            FrameKind::Data => {
                let end = header.is_end();
                if let Some(tx) = streams.get(&header.request_id) {
                    // A send error means the handler finished early (an error was
                    // answered); the rest of its data is dropped.
                    let data = Data::new(frame.data, end, budget);
                    if tx.send(data).await.is_err() || end {
                        streams.remove(&header.request_id);
                    }
                }
            }
            FrameKind::Response | FrameKind::Handshake => {
                if let Some(dropped) = ctx.log_limit.allow(&format!("kind {}", host_of(&peer))) {
                    tracing::warn!(%peer, kind = ?header.kind, dropped, "client sent a frame only servers send; closing");
                }
                break;
            }
        }
    }
    // No more requests are read. Handlers still running keep the sending half (their
    // `Reply`) and answer; the connection closes when the last of them is done.
    // A mount that went (unmounted, killed) holds no change up any more.
    session
        .closed
        .store(true, std::sync::atomic::Ordering::Release);
    ctx.feed.disconnected(session.origin);
}

/// Logs a refused handshake, at most one line per client host per interval.
fn refused(ctx: &Ctx, peer: &str, why: &str) {
    ctx.metrics.handshake_failures.inc();
    if let Some(dropped) = ctx.log_limit.allow(&format!("handshake {}", host_of(peer))) {
        if dropped > 0 {
            tracing::warn!(%peer, dropped, "refused a connection: {why} (and {dropped} more from this host since the last such line)");
        } else {
            tracing::warn!(%peer, "refused a connection: {why}");
        }
    }
}

/// The host part of a peer address ("1.2.3.4:567" -> "1.2.3.4").
fn host_of(peer: &str) -> &str {
    match peer.parse::<std::net::SocketAddr>() {
        Ok(_) => peer.rsplit_once(':').map_or(peer, |(h, _)| h),
        Err(_) => peer,
    }
}

async fn refuse_header(
    ctx: &Ctx,
    writer: &FrameWriter,
    raw: &[u8; pvfs_proto::frame::HEADER_LEN],
    e: &FrameError,
    peer: &str,
) {
    if let Some(dropped) = ctx.log_limit.allow(&format!("frame {}", host_of(peer))) {
        tracing::warn!(%peer, dropped, "refusing frame: {e}");
    }
    if matches!(e, FrameError::BadMagic(_)) {
        return; // Not our protocol: nothing sensible to answer.
    }
    let errno = match e {
        FrameError::Version(_) => Errno::EPROTO,
        FrameError::TooLarge { .. } => Errno::E2BIG,
        _ => Errno::EBADMSG,
    };
    let resp = Response::error(errno, e.to_string());
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        writer.send(
            FrameKind::Response,
            peek_request_id(raw),
            true,
            &encode(&resp),
            &[],
        ),
    )
    .await;
}
