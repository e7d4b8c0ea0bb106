//! `Read`: streams the bytes a request wants from one datafile, in stream order, in
//! chunks; the next chunk is read from disk while the previous one is being sent.

use std::sync::Arc;

use pvfs_proto::layout::{clip_pieces, local_runs, Piece, PieceCursor};
use pvfs_proto::{Handle, Regions, Response, Stripe};
use pvfs_transport::PooledBuf;

use crate::connection::Reply;
use crate::ctx::{Ctx, CHUNK};
use crate::error::OpResult;
use crate::handlers::write::check_stripe;

/// Answers a read: `ReadStart{local_size}` then the data, or an error frame.
pub async fn handle(
    ctx: &Arc<Ctx>,
    reply: &Reply,
    handle: Handle,
    stripe: Stripe,
    index: u32,
    regions: Regions,
) {
    if let Err(e) = run(ctx, reply, handle, stripe, index, regions).await {
        let _ = reply.response(&e.into_response(), &[], true).await;
    }
}

async fn run(
    ctx: &Arc<Ctx>,
    reply: &Reply,
    handle: Handle,
    stripe: Stripe,
    index: u32,
    regions: Regions,
) -> OpResult<()> {
    ctx.require_data()?;
    ctx.require_local(handle)?;
    check_stripe(stripe, index)?;
    let data = ctx.data.clone();
    let local_size = ctx.blocking(move || Ok(data.stat(handle)?.size)).await?;
    let idx = u64::from(index);
    let total: u64 = clip_pieces(stripe.pieces(idx, &regions), local_size)
        .map(|p| p.len)
        .sum();
    let start = Response::ReadStart { local_size };
    if total == 0 {
        // Everything asked for lies past this datafile's end.
        let _ = reply.response(&start, &[], true).await;
        return Ok(());
    }
    let mut cursor = PieceCursor::new(clip_pieces(stripe.pieces(idx, &regions), local_size));
    if reply.can_send_file() {
        let data = ctx.data.clone();
        if let Some(file) = ctx
            .blocking(move || Ok(data.file_for_send(handle)?))
            .await?
        {
            return send_zero_copy(ctx, reply, &start, file, &mut cursor, total).await;
        }
    }
    let mut remaining = total;
    let mut next = Some(spawn_chunk(ctx, handle, &mut cursor, &mut remaining));
    let mut first = true;
    while let Some(job) = next.take() {
        let buf = match job.await {
            Ok(r) => r?,
            Err(e) => {
                return Err(crate::error::OpError::new(
                    pvfs_proto::Errno::EIO,
                    format!("read task failed: {e}"),
                ))
            }
        };
        if remaining > 0 {
            next = Some(spawn_chunk(ctx, handle, &mut cursor, &mut remaining));
        }
        let end = next.is_none();
        let sent = if first {
            reply.response(&start, &[&buf], end).await
        } else {
            reply.data(&[&buf], end).await
        };
        first = false;
        if sent.is_err() {
            // The client is gone; nobody to tell.
            return Ok(());
        }
    }
    Ok(())
}

/// Sends the stream straight from the datafile with `sendfile`, chunk by chunk.
async fn send_zero_copy<I: Iterator<Item = Piece>>(
    ctx: &Arc<Ctx>,
    reply: &Reply,
    start: &Response,
    file: Arc<std::fs::File>,
    cursor: &mut PieceCursor<I>,
    total: u64,
) -> OpResult<()> {
    let mut remaining = total;
    let mut first = true;
    let mut pieces = Vec::new();
    while remaining > 0 {
        pieces.clear();
        let n = cursor.take((CHUNK as u64).min(remaining), &mut pieces);
        remaining -= n;
        let runs = local_runs(&pieces);
        let head = if first { Some(start) } else { None };
        first = false;
        let sent = reply
            .file_data(
                head,
                file.clone(),
                runs,
                remaining == 0,
                ctx.config.timeouts.request,
            )
            .await;
        if sent.is_err() {
            // The frame may be half sent: the connection is unusable and the client
            // sees it break; nothing more to say on it.
            return Ok(());
        }
    }
    Ok(())
}

type ChunkJob = tokio::task::JoinHandle<OpResult<PooledBuf>>;

/// Reads the next chunk of the stream on a blocking thread.
fn spawn_chunk<I: Iterator<Item = Piece>>(
    ctx: &Arc<Ctx>,
    handle: Handle,
    cursor: &mut PieceCursor<I>,
    remaining: &mut u64,
) -> ChunkJob {
    let mut pieces = Vec::new();
    let n = cursor.take((CHUNK as u64).min(*remaining), &mut pieces);
    *remaining -= n;
    let runs = local_runs(&pieces);
    let mut buf = ctx.pool.get(n as usize);
    let data = ctx.data.clone();
    tokio::task::spawn_blocking(move || {
        let mut at = 0usize;
        for (off, len) in runs {
            let len = len as usize;
            let dst = &mut buf[at..at + len];
            let got = data.read_at(handle, off, dst)?;
            // The datafile shrank since it was measured: the rest reads as zeros.
            dst[got..].fill(0);
            at += len;
        }
        Ok(buf)
    })
}
