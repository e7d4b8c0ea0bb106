//! `Write`: receives the stream of bytes a request puts on one datafile and writes it
//! in place, chunk by chunk, as it arrives (bounded memory whatever the request size).

use pvfs_proto::layout::{local_runs, PieceCursor};
use pvfs_proto::{req, rights, Changed, Errno, Regions, Response, Stripe};

use crate::error::{OpError, OpResult};
use crate::feed::object;
use crate::op::{Access, Answer, Cx, Handler};

/// Writes the bytes of `regions` held by datafile `index`: the data that came with
/// the request frame, then the data frames that follow it. Writing the same bytes
/// to the same places again leaves what writing them once left.
impl Handler for req::Write {
    fn access(&self) -> Access<'_> {
        Access::Capability {
            cap: self.cap.as_ref(),
            handle: self.handle,
            rights: rights::WRITE,
        }
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.handle)]
    }

    // Others' caches learn of a write from the feed without holding it up.
    const AWAITS_CACHES: bool = false;

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        write(cx, self).await.map(Answer::Reply)
    }
}

/// Handles `Write`.
async fn write(cx: Cx<'_>, r: req::Write) -> OpResult<Response> {
    let req::Write {
        handle,
        stripe,
        index,
        regions,
        sync,
        ..
    } = r;
    let ctx = cx.ctx;
    let first = cx.input.first;
    let mut stream = cx.input.rest;
    ctx.require_data()?;
    ctx.require_local(handle)?;
    check_stripe(stripe, index)?;
    check_regions(&regions, stripe)?;
    let expected = stripe.bytes_on(u64::from(index), &regions);
    let mut cursor = PieceCursor::new(stripe.pieces(u64::from(index), &regions));
    let mut received = 0u64;
    let mut end = stream.is_none() || first.end;
    let mut chunk = first;
    let mut pieces = Vec::new();
    // The datafile's size and times after the last chunk, for the answer.
    let mut after = None;
    loop {
        if !chunk.buf.is_empty() {
            let n = chunk.buf.len() as u64;
            if received + n > expected {
                return Err(OpError::invalid(
                    Errno::EINVAL,
                    format!("write carries more than the {expected} bytes its regions describe"),
                ));
            }
            pieces.clear();
            let covered = cursor.take(n, &mut pieces);
            debug_assert_eq!(covered, n, "regions cover the announced bytes");
            received += n;
            let runs = local_runs(&pieces);
            let data = ctx.data.clone();
            let last = end;
            // The chunk (and its share of the buffer budget) is released once written.
            // A small chunk into an open datafile is written right here (`crate::inline`).
            let inline = if ctx.inline.allows(chunk.buf.len()) {
                ctx.inline
                    .run(|| data.write_runs_if_open(handle, &runs, &chunk.buf))
            } else {
                None
            };
            after = match inline {
                Some(stat) => Some(stat?),
                None => {
                    ctx.blocking(move || {
                        let mut at = 0usize;
                        for (off, len) in runs {
                            let len = len as usize;
                            data.write_at(handle, off, &chunk.buf[at..at + len])?;
                            at += len;
                        }
                        Ok(if last { Some(data.stat(handle)?) } else { None })
                    })
                    .await?
                }
            };
        }
        if end {
            break;
        }
        let Some(rx) = stream.as_mut() else { break };
        match tokio::time::timeout(ctx.config.timeouts.request, rx.recv()).await {
            Ok(Some(next)) => {
                end = next.end;
                chunk = next;
            }
            Ok(None) => return Err(OpError::invalid(Errno::EPROTO, "write stream ended early")),
            Err(_) => {
                return Err(OpError::of_kind(
                    pvfs_proto::ErrorKind::Unreachable,
                    Errno::ETIMEDOUT,
                    "write stream stalled past the request timeout",
                ))
            }
        }
    }
    if received != expected {
        return Err(OpError::invalid(
            Errno::EINVAL,
            format!("write carried {received} bytes, its regions describe {expected}"),
        ));
    }
    if sync || ctx.config.defaults.sync_writes {
        let data = ctx.data.clone();
        ctx.blocking(move || Ok(data.sync(handle)?)).await?;
    }
    let stat = match after {
        Some(st) => st,
        None => {
            let data = ctx.data.clone();
            ctx.blocking(move || Ok(data.stat(handle)?)).await?
        }
    };
    Ok(Response::Written {
        bytes: received,
        stat,
        verifier: ctx.data.verifier(),
    })
}

/// Checks the region description a data request carries: bytes within the largest
/// file, sane strides, and few enough pieces on its stripe that walking them is cheap
/// (a hostile description of a terabyte in 1-byte blocks is refused, not walked).
pub fn check_regions(regions: &Regions, stripe: Stripe) -> OpResult<()> {
    regions.validate_for(stripe.size).map_err(|e| {
        OpError::invalid(
            e,
            format!(
                "regions of {} bytes in {} pieces or more (limit {})",
                regions.total_len(),
                regions.piece_bound(stripe.size),
                pvfs_proto::regions::MAX_PIECES
            ),
        )
    })
}

/// Checks the stripe geometry a data request carries.
pub fn check_stripe(stripe: Stripe, index: u32) -> OpResult<()> {
    if pvfs_proto::layout::check_stripe_size(stripe.size).is_err()
        || stripe.count == 0
        || stripe.count > u64::from(pvfs_proto::layout::MAX_STRIPE_COUNT)
        || u64::from(index) >= stripe.count
    {
        return Err(OpError::invalid(
            Errno::EINVAL,
            format!(
                "bad stripe: size {} count {} index {index}",
                stripe.size, stripe.count
            ),
        ));
    }
    Ok(())
}
