//! `Write`: receives the stream of bytes a request puts on one datafile and writes it
//! in place, chunk by chunk, as it arrives (bounded memory whatever the request size).

use pvfs_proto::layout::{local_runs, PieceCursor};
use pvfs_proto::{req, rights, Changed, Errno, Regions, Response, Stripe};

use pvfs_proto::map::Copies;
use pvfs_proto::Request;

use crate::chain;
use crate::error::{OpError, OpResult};
use crate::feed::object;
use crate::handlers::copies;
use crate::op::{Access, Answer, Cx, Handler};

/// Writes the bytes of `regions` held by datafile `index`: the data that came with
/// the request frame, then the data frames that follow it. Writing the same bytes
/// to the same places again leaves what writing them once left.
impl Handler for req::Write {
    fn access(&self) -> Access<'_> {
        // Passed down a chain of copies: between servers; from a client: its right.
        if self.copies.hop > 0 {
            return Access::Peer;
        }
        Access::Capability {
            cap: self.cap.as_ref(),
            handle: self.handle,
            rights: rights::WRITE,
            copies: &self.copies.servers,
        }
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.handle)]
    }

    // Others' caches learn of a write from the feed without holding it up.
    const AWAITS_CACHES: bool = false;

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx.clone();
        let written = write(cx, self).await;
        if written.is_err() {
            // Applied here but cut short further down the chain, maybe.
            crate::catchup::settle_soon(&ctx);
        }
        written.map(Answer::Reply)
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
        copies,
        ..
    } = r;
    let ctx = cx.ctx;
    let first = cx.input.first;
    let mut stream = cx.input.rest;
    ctx.require_data()?;
    // Admitted under the sender's map until answered (`crate::missed`).
    let _admitted = copies
        .replicated()
        .then(|| ctx.admissions.admit(copies.map));
    let place = if copies.replicated() {
        copies::check_place(ctx, handle, &copies)?
    } else {
        ctx.require_local(handle)?;
        None
    };
    check_stripe(stripe, index)?;
    check_regions(&regions, stripe)?;
    let expected = stripe.bytes_on(u64::from(index), &regions);
    let mut end = stream.is_none() || first.end;
    // Every copy holds the bytes it writes until the tail has them: the head so that
    // overlapping writes pass the chain one after the other, each so that a read of
    // those bytes here waits until they are acknowledged (a reader never sees bytes
    // a later read from the tail would not), and the tail so that a copy it is
    // catching up with from another (`crate::catchup`) does not land between.
    // Copies out of the chain get the range recorded as missed.
    let (lo, hi) = local_span(stripe, index, &regions);
    let _held = match &place {
        Some(p) => {
            let limit = ctx.config.timeouts.request;
            let held = ctx.chain_locks.lock(handle, lo, hi, limit).await?;
            copies::record_missed(ctx, p, &copies, handle, lo, hi);
            Some(held)
        }
        None => None,
    };
    let mut forward = match place.as_ref().and_then(chain::Place::next) {
        Some(next) => {
            let onward = req::Write {
                handle,
                stripe,
                index,
                regions: regions.clone(),
                sync,
                cap: None,
                copies: Copies {
                    hop: copies.hop + 1,
                    ..copies.clone()
                },
            };
            let call = ctx
                .peers
                .start_stream(next as usize, Request::Write(onward), &[&first.buf], end)
                .await
                .map_err(|e| copies::passed_on(ctx, next, e))?;
            Some((next, call))
        }
        None => None,
    };
    // Applied here before the rest of the chain has it: noted until its answer.
    let ticket = forward
        .as_ref()
        .map(|_| copies::note(ctx, handle, &copies, lo, hi))
        .transpose()?;
    let mut cursor = PieceCursor::new(stripe.pieces(u64::from(index), &regions));
    let mut received = 0u64;
    let mut chunk = first;
    let mut first_chunk = true;
    let mut pieces = Vec::new();
    // The datafile's size and times after the last chunk, for the answer.
    let mut after = None;
    loop {
        if !chunk.buf.is_empty() {
            let n = chunk.buf.len() as u64;
            ctx.metrics.bytes_written.inc_by(n);
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
            // The next copy gets the chunk before this one writes it (the first went
            // with the request).
            if let (Some((next, call)), false) = (forward.as_ref(), first_chunk) {
                let sent = async { Ok(call.send_data(&[&chunk.buf], end).await?) };
                chain::watch_next(&ctx.lease, handle, &copies.servers, *next, sent)
                    .await
                    .map_err(|e| copies::passed_on(ctx, *next, e))?;
            }
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
        first_chunk = false;
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
        let missed = place.is_some().then(|| ctx.missed.clone());
        ctx.blocking(move || {
            data.sync(handle)?;
            // The record of what absent copies missed is as durable as the bytes.
            Ok(missed.map(|m| m.flush_or_fail()).transpose()?)
        })
        .await?;
    }
    // Acknowledged only once the rest of the chain has it.
    if let Some((next, mut call)) = forward.take() {
        let answer = ctx.peers.answer(next as usize, &mut call);
        match chain::watch_next(&ctx.lease, handle, &copies.servers, next, answer).await {
            Ok(Response::Written { .. }) => {
                if let Some(t) = ticket {
                    t.finished();
                }
            }
            Ok(other) => {
                return Err(OpError::internal(
                    Errno::EPROTO,
                    format!("the next copy answered a write with {}", other.op_name()),
                ))
            }
            Err(e) => return Err(copies::passed_on(ctx, next, e)),
        }
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

/// The lowest and highest local byte (exclusive) of datafile `index` that
/// `regions` touch: the span a head holds while it passes the change down.
pub fn local_span(stripe: Stripe, index: u32, regions: &Regions) -> (u64, u64) {
    let (lo, hi) = stripe
        .pieces(u64::from(index), regions)
        .fold((u64::MAX, 0), |(lo, hi), p| {
            (lo.min(p.local), hi.max(p.local + p.len))
        });
    // No piece: the empty span at 0.
    if lo > hi {
        (0, 0)
    } else {
        (lo, hi)
    }
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
