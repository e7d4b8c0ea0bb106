//! `Read`: streams the bytes a request wants from one datafile, in stream order, in
//! frames of up to [`CHUNK`] bytes.
//!
//! The usual path is zero-copy: on a connection with a file descriptor (TCP, Unix
//! socket) and a backend that offers the datafile (`FileData`), the datafile is
//! opened and measured, `ReadStart` is written and the first frame is sent with
//! `sendfile` in one blocking call (`first_zero_copy`), and the later frames follow
//! the same way (`send_zero_copy`). Before each frame goes, the blocks it sends are
//! read into a pooled buffer and checked against their sums (`pvfs_storage::sums`):
//! the bytes sent never pass through the server's memory on their way out. A frame
//! with a damaged block is not sent until the block is mended from another copy
//! (`crate::mend`). Without a file to send from (a backend without files, such as
//! the fault injection wrapper of the tests) the bytes are copied: each chunk is
//! read, and checked, into a pooled buffer on a blocking thread while the previous
//! one is being sent.

use std::sync::Arc;

use pvfs_proto::frame::FrameKind;
use pvfs_proto::layout::{clip_pieces, local_runs, Piece, PieceCursor};
use pvfs_proto::map::Copies;
use pvfs_proto::{encode, req, rights, Changed, Handle, Regions, Response, Stripe};
use pvfs_transport::PooledBuf;

use crate::budget::CHUNK;
use crate::chain::{self, Role};
use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::write::{check_regions, check_stripe, local_span};
use crate::mend::mending;
use crate::op::{Access, Answer, Cx, Handler};
use crate::reply::Reply;

/// Answers a read: `ReadStart{local_size}` then the data, or an error frame.
impl Handler for req::Read {
    fn access(&self) -> Access<'_> {
        // A copy catching up from this one (`crate::catchup`): between servers.
        if self.copies.hop > 0 {
            return Access::Peer;
        }
        Access::Capability {
            cap: self.cap.as_ref(),
            handle: self.handle,
            rights: rights::READ,
            copies: &self.copies.servers,
        }
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let req::Read {
            handle,
            stripe,
            index,
            regions,
            copies,
            ..
        } = self;
        let ctx = cx.ctx;
        ctx.require_data()?;
        if copies.replicated() {
            // A copy catching up reads from the copy it chose (`crate::catchup`).
            let role = if copies.hop > 0 {
                Role::Source
            } else {
                Role::Reader
            };
            chain::place(&ctx.lease, ctx.me as u32, self.handle, &copies, role)?;
            check_stripe(stripe, index)?;
            check_regions(&regions, stripe)?;
            // Bytes on their way down the chain are read once the tail has them;
            // except by a copy catching up, which holds its own copy meanwhile (so
            // waiting here for a change that waits there would stall both), and
            // gets whatever changes are on their way again after this.
            if copies.hop == 0 {
                let (lo, hi) = local_span(stripe, index, &regions);
                let limit = ctx.config.timeouts.request;
                drop(ctx.chain_locks.lock(handle, lo, hi, limit).await?);
            }
        } else {
            ctx.require_local(handle)?;
        }
        stream(ctx, cx.reply, handle, stripe, index, regions, &copies).await?;
        Ok(Answer::Streamed)
    }
}

/// Sends the answer's frames.
async fn stream(
    ctx: &Arc<Ctx>,
    reply: &Reply,
    handle: Handle,
    stripe: Stripe,
    index: u32,
    regions: Regions,
    copies: &Copies,
) -> OpResult<()> {
    check_stripe(stripe, index)?;
    check_regions(&regions, stripe)?;
    let idx = u64::from(index);
    // A small read wholly in the page cache is answered right here (`crate::inline`).
    if let Some(answer) = read_inline(ctx, handle, stripe, idx, &regions) {
        let (start, buf) = answer?;
        ctx.metrics.bytes_read.inc_by(buf.len() as u64);
        // A send error means the client is gone: nobody to tell.
        let _ = reply.response(&start, &[&buf], true).await;
        return Ok(());
    }
    let (local_size, regions) = if reply.can_send_file() {
        match first_zero_copy(ctx, reply, handle, stripe, idx, regions).await? {
            First::Done => return Ok(()),
            First::More {
                file,
                local_size,
                sent,
                regions,
            } => {
                let mut cursor =
                    PieceCursor::new(clip_pieces(stripe.pieces(idx, &regions), local_size));
                let mut skipped = Vec::new();
                cursor.take(sent.done, &mut skipped);
                let left = sent.total - sent.done;
                return send_zero_copy(ctx, reply, file, &mut cursor, left, handle, copies).await;
            }
            First::NoFile {
                local_size,
                regions,
            } => (local_size, regions),
        }
    } else {
        let data = ctx.data.clone();
        let size = ctx.blocking(move || Ok(data.stat(handle)?.size)).await?;
        (size, regions)
    };
    let total: u64 = clip_pieces(stripe.pieces(idx, &regions), local_size)
        .map(|p| p.len)
        .sum();
    let start = Response::ReadStart { local_size };
    ctx.metrics.bytes_read.inc_by(total);
    if total == 0 {
        // Everything asked for lies past this datafile's end.
        let _ = reply.response(&start, &[], true).await;
        return Ok(());
    }
    let mut cursor = PieceCursor::new(clip_pieces(stripe.pieces(idx, &regions), local_size));
    let mut remaining = total;
    let mut next = Some(spawn_chunk(ctx, handle, &mut cursor, &mut remaining));
    let mut first = true;
    while let Some(job) = next.take() {
        let buf = chunk(ctx, handle, job, copies).await?;
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

/// The whole answer to a read of at most `inline::INLINE_MAX` bytes of an open
/// datafile, every one in the page cache, read on this thread; None when the read is
/// not such (it then takes the blocking path, from the start).
fn read_inline(
    ctx: &Ctx,
    handle: Handle,
    stripe: Stripe,
    idx: u64,
    regions: &Regions,
) -> Option<OpResult<(Response, PooledBuf)>> {
    let local_size = match ctx.data.stat_if_open(handle)? {
        Ok(st) => st.size,
        Err(e) => return Some(Err(e.into())),
    };
    let pieces: Vec<Piece> = clip_pieces(stripe.pieces(idx, regions), local_size).collect();
    let total: u64 = pieces.iter().map(|p| p.len).sum();
    let total = usize::try_from(total).ok()?;
    if !ctx.inline.allows(total) {
        return None;
    }
    let mut buf = ctx.pool.get(total);
    let runs = local_runs(&pieces);
    let read = ctx
        .inline
        .run(|| ctx.data.read_runs_if_cached(handle, &runs, &mut buf))?;
    Some(match read {
        Ok(()) => Ok((Response::ReadStart { local_size }, buf)),
        Err(e) => Err(e.into()),
    })
}

/// Bytes of a zero-copy stream: all of it, and how much the first frame carried.
struct Progress {
    total: u64,
    done: u64,
}

/// What the first, one-hop part of a zero-copy read did.
enum First {
    /// The whole answer is sent (or the connection broke: nobody to tell).
    Done,
    /// The first frame is sent; the rest of the stream follows from `file`.
    More {
        file: Arc<std::fs::File>,
        local_size: u64,
        sent: Progress,
        regions: Regions,
    },
    /// The backend has no file to send from: the datafile holds `local_size` bytes,
    /// to be read and sent through memory.
    NoFile { local_size: u64, regions: Regions },
}

/// Measures the datafile, answers `ReadStart` and sends the first chunk of the stream,
/// all in one blocking call (one thread hop where stat, open and send cost one each).
async fn first_zero_copy(
    ctx: &Arc<Ctx>,
    reply: &Reply,
    handle: Handle,
    stripe: Stripe,
    idx: u64,
    regions: Regions,
) -> OpResult<First> {
    let data = ctx.data.clone();
    let id = reply.request_id();
    let bytes_read = ctx.metrics.bytes_read.clone();
    let sent = reply
        .send_blocking(move |frames| -> OpResult<First> {
            let Some(file) = data.file_for_send(handle)? else {
                let local_size = data.stat(handle)?.size;
                if local_size > 0 {
                    return Ok(First::NoFile {
                        local_size,
                        regions,
                    });
                }
                let start = encode(&Response::ReadStart { local_size: 0 });
                let _ = frames.send(FrameKind::Response, id, true, &start);
                return Ok(First::Done);
            };
            let local_size = file
                .metadata()
                .map_err(pvfs_storage::StorageError::from)?
                .len();
            let total: u64 = clip_pieces(stripe.pieces(idx, &regions), local_size)
                .map(|p| p.len)
                .sum();
            bytes_read.inc_by(total);
            let mut pieces = Vec::new();
            let done = PieceCursor::new(clip_pieces(stripe.pieces(idx, &regions), local_size))
                .take((CHUNK as u64).min(total), &mut pieces);
            let start = encode(&Response::ReadStart { local_size });
            let end = done == total;
            let runs = local_runs(&pieces);
            match data.check_runs(handle, &runs) {
                Ok(()) => {}
                // Nothing sent yet: the path through memory mends the block.
                Err(pvfs_storage::StorageError::BadSum { .. }) => {
                    return Ok(First::NoFile {
                        local_size,
                        regions,
                    })
                }
                Err(e) => return Err(e.into()),
            }
            if frames
                .send_file(FrameKind::Response, id, end, &start, &file, &runs)
                .is_err()
                || end
            {
                return Ok(First::Done);
            }
            Ok(First::More {
                file,
                local_size,
                sent: Progress { total, done },
                regions,
            })
        })
        .await;
    match sent {
        Ok(first) => first,
        // The connection broke: nobody to answer.
        Err(_) => Ok(First::Done),
    }
}

/// Sends the rest of a stream straight from the datafile with `sendfile`, chunk by
/// chunk, each checked against its sums first (and mended if it must be).
async fn send_zero_copy<I: Iterator<Item = Piece>>(
    ctx: &Arc<Ctx>,
    reply: &Reply,
    file: Arc<std::fs::File>,
    cursor: &mut PieceCursor<I>,
    total: u64,
    handle: Handle,
    copies: &Copies,
) -> OpResult<()> {
    let mut remaining = total;
    let mut pieces = Vec::new();
    while remaining > 0 {
        pieces.clear();
        let n = cursor.take((CHUNK as u64).min(remaining), &mut pieces);
        remaining -= n;
        let runs = local_runs(&pieces);
        checked(ctx, handle, &runs, copies).await?;
        let sent = reply
            .file_data(
                None,
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

/// Checks the blocks of `runs` of datafile `handle` against their sums on a
/// blocking thread, mending a damaged one (`crate::mend`) and checking again.
async fn checked(
    ctx: &Arc<Ctx>,
    handle: Handle,
    runs: &[(u64, u64)],
    copies: &Copies,
) -> OpResult<()> {
    let len = runs.iter().map(|r| r.1).sum();
    mending(ctx, handle, copies, len, || {
        let data = ctx.data.clone();
        let todo = runs.to_vec();
        let check = ctx.spawn_work(move || data.check_runs(handle, &todo));
        async move { Ok(joined(check.await)??) }
    })
    .await
}

/// The outcome of a blocking task, or EIO when the task died.
fn joined<T>(r: Result<T, tokio::task::JoinError>) -> OpResult<T> {
    r.map_err(|e| OpError::internal(pvfs_proto::Errno::EIO, format!("read task failed: {e}")))
}

/// A chunk being read: its runs (to read again) and the read.
struct ChunkJob {
    runs: Vec<(u64, u64)>,
    len: usize,
    job: tokio::task::JoinHandle<OpResult<PooledBuf>>,
}

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
    read_runs(ctx, handle, local_runs(&pieces), n as usize)
}

/// Reads `runs` (`len` bytes in all) of datafile `handle` on a blocking thread.
fn read_runs(ctx: &Arc<Ctx>, handle: Handle, runs: Vec<(u64, u64)>, len: usize) -> ChunkJob {
    let mut buf = ctx.pool.get(len);
    let data = ctx.data.clone();
    let todo = runs.clone();
    let job = ctx.spawn_work(move || {
        let mut at = 0usize;
        for (off, len) in todo {
            let len = len as usize;
            let dst = &mut buf[at..at + len];
            let got = data.read_at(handle, off, dst)?;
            // The datafile shrank since it was measured: the rest reads as zeros.
            dst[got..].fill(0);
            at += len;
        }
        Ok(buf)
    });
    ChunkJob { runs, len, job }
}

/// The bytes of a chunk being read; a block that does not match its checksum is
/// mended (`crate::mend`) and the chunk read again.
async fn chunk(
    ctx: &Arc<Ctx>,
    handle: Handle,
    job: ChunkJob,
    copies: &Copies,
) -> OpResult<PooledBuf> {
    let ChunkJob { runs, len, job } = job;
    let mut first = Some(job);
    mending(ctx, handle, copies, len as u64, || {
        let job = first
            .take()
            .unwrap_or_else(|| read_runs(ctx, handle, runs.clone(), len).job);
        async move { joined(job.await)? }
    })
    .await
}
