//! Copying a datafile's bytes from another copy (`docs/replication.md`,
//! "Self-healing"): what catch-up (`crate::catchup`) and refill (`crate::refill`)
//! do for each range or datafile. Each step is taken holding this server's copy of
//! the datafile (`RangeLocks`, which every copy takes while it applies a change): a
//! change that reached the source before the step is in the bytes copied, or lands
//! here after them; one that reached this copy first (it was ahead in the chain) was
//! held here until the source had it.

use std::sync::Arc;

use pvfs_proto::map::Copies;
use pvfs_proto::{req, Errno, ErrorKind, FrameKind, Handle, Regions, Request, Response, Stripe};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};

/// Bytes copied per step (each under the datafile's lock here).
const STEP: u64 = 4 << 20;

/// How many times one copy goes on under a newer map (another heir's report, a
/// server back) before it gives up.
const MAP_MOVES: u32 = 8;

/// How long a copy refused for another map version waits for this server's map.
const MAP_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// The copy of datafile `handle` (copies on `copies`) to copy from: `prefer` when
/// it may serve reads under `map`, else the first other copy that may; None when
/// no copy but `me`'s is readable.
pub fn source(
    map: &pvfs_proto::map::ClusterMap,
    handle: Handle,
    copies: &[u32],
    me: u32,
    prefer: Option<u32>,
) -> Option<usize> {
    let readable = map.readable(handle, copies);
    prefer
        .filter(|p| readable.contains(p))
        .or_else(|| readable.iter().copied().find(|&c| c != me))
        .map(|c| c as usize)
}

/// Which size a copied range leaves this server's copy with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// The source's: it holds every change (a truncate this copy missed shortens
    /// it, a write that extended the datafile lengthens it).
    Source,
    /// The longer of the two: the source missed writes this copy holds (only
    /// writes, ranges that end: a missed truncate reaches the end).
    Longer,
}

/// Makes this server's copy of datafile `handle` (whose copies are on `copies`) hold
/// what `source`'s holds in `ranges` (`start, end` pairs; an end of `u64::MAX`
/// reaches the end of the source's copy), with the size `size` says, a step at a
/// time under the datafile's lock here, paced by `[replication]
/// rebuild_bandwidth`; the bytes copied.
pub async fn copy_ranges(
    ctx: &Arc<Ctx>,
    (source, size_from): (usize, Size),
    handle: Handle,
    copies: &[u32],
    version: u64,
    ranges: &[u64],
) -> OpResult<u64> {
    let mut copies = Copies {
        servers: copies.to_vec(),
        map: version,
        hop: 1,
    };
    let limit = ctx.config.timeouts.request;
    let mut bytes = 0;
    // Steps the source refused for another map version: the copy goes on under the
    // newest map while the source still serves reads and this server holds a copy.
    let mut moved = 0;
    for pair in ranges.chunks_exact(2) {
        let (start, end) = (pair[0], pair[1]);
        let mut at = start;
        while at < end {
            let step_end = end.min(at.saturating_add(STEP));
            let began = tokio::time::Instant::now();
            let held = ctx.chain_locks.lock(handle, 0, u64::MAX, limit).await?;
            let read = read_from(ctx, source, handle, &copies, at, step_end - at).await;
            let (size, data) = match read {
                Err(e) if e.kind == ErrorKind::Map && moved < MAP_MOVES => {
                    drop(held);
                    moved += 1;
                    tokio::time::sleep(MAP_WAIT).await;
                    let map = ctx.lease.map()?;
                    let me = ctx.me as u32;
                    if !map
                        .readable(handle, &copies.servers)
                        .contains(&(source as u32))
                        || !map.holds(handle, &copies.servers, me)
                    {
                        return Err(e);
                    }
                    copies.map = map.version;
                    continue;
                }
                r => r?,
            };
            let got = data.len() as u64;
            bytes += got;
            let store = ctx.data.clone();
            ctx.blocking(move || {
                if !data.is_empty() {
                    store.write_at(handle, at, &data)?;
                }
                // The source's size is the datafile's: a truncate missed here
                // shortens this copy, one that extended it lengthens it.
                let here = store.stat(handle)?.size;
                if here != size && (size_from == Size::Source || here < size) {
                    store.truncate(handle, size)?;
                }
                Ok(())
            })
            .await?;
            drop(held);
            ctx.copy_pace.spent(got, began).await;
            if at + got >= size {
                break;
            }
            at = step_end;
        }
    }
    Ok(bytes)
}

/// Whether this server's copy of datafile `handle` and `source`'s hold the same
/// size and the same bytes in `ranges` (`start, end` pairs, an end of `u64::MAX`
/// reaching the end), compared a step at a time under the datafile's lock here.
pub async fn copies_agree(
    ctx: &Arc<Ctx>,
    source: usize,
    handle: Handle,
    copies: &[u32],
    version: u64,
    ranges: &[u64],
) -> OpResult<bool> {
    let copies = Copies {
        servers: copies.to_vec(),
        map: version,
        hop: 1,
    };
    let limit = ctx.config.timeouts.request;
    for pair in ranges.chunks_exact(2) {
        let (start, end) = (pair[0], pair[1]);
        let mut at = start;
        while at < end {
            let step_end = end.min(at.saturating_add(STEP));
            let held = ctx.chain_locks.lock(handle, 0, u64::MAX, limit).await?;
            let (size, theirs) = read_from(ctx, source, handle, &copies, at, step_end - at).await?;
            let store = ctx.data.clone();
            let len = theirs.len();
            let (here, ours) = ctx
                .blocking(move || {
                    let here = store.stat(handle)?.size;
                    let mut buf = vec![0u8; len];
                    let n = store.read_at(handle, at, &mut buf)?;
                    buf.truncate(n);
                    Ok((here, buf))
                })
                .await?;
            drop(held);
            if here != size || ours != theirs {
                return Ok(false);
            }
            if at + theirs.len() as u64 >= size {
                break;
            }
            at = step_end;
        }
    }
    Ok(true)
}

/// Reads bytes `offset .. offset + len` of datafile `handle`'s copy on server `s`
/// (as far as it reaches); its size and the bytes.
async fn read_from(
    ctx: &Arc<Ctx>,
    s: usize,
    handle: Handle,
    copies: &Copies,
    offset: u64,
    len: u64,
) -> OpResult<(u64, Vec<u8>)> {
    // One datafile in the stripe: local offsets are the request's.
    let request = Request::Read(req::Read {
        handle,
        stripe: Stripe {
            size: pvfs_proto::layout::MAX_STRIPE_SIZE,
            count: 1,
        },
        index: 0,
        regions: Regions::contig(offset, len),
        cap: None,
        copies: copies.clone(),
    });
    let timeout = ctx.config.timeouts.request;
    let mut call = ctx.peers.start_stream(s, request, &[], true).await?;
    let mut size = None;
    let mut out = Vec::new();
    loop {
        let frame = call.recv_within(timeout).await?;
        if frame.header.kind == FrameKind::Response {
            match ctx.peers.response(s, &frame.body)? {
                Response::ReadStart { local_size } if size.is_none() => size = Some(local_size),
                other => {
                    return Err(OpError::internal(
                        Errno::EPROTO,
                        format!("a read answered with {}", other.op_name()),
                    ))
                }
            }
        }
        let Some(size) = size else {
            return Err(OpError::internal(
                Errno::EPROTO,
                "read data before its start",
            ));
        };
        if out.len() as u64 + frame.data.len() as u64 > len {
            return Err(OpError::internal(
                Errno::EPROTO,
                "a read sent more than was asked",
            ));
        }
        out.extend_from_slice(&frame.data);
        if frame.header.is_end() {
            let want = size.saturating_sub(offset).min(len);
            if out.len() as u64 != want {
                return Err(OpError::internal(
                    Errno::EPROTO,
                    format!("a read sent {} bytes of {want}", out.len()),
                ));
            }
            return Ok((size, out));
        }
    }
}
