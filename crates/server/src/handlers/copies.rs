//! Changes of a datafile with more than one copy that fit one frame (truncate,
//! fallocate): checked against this server's place in the chain, held on the whole
//! datafile while they pass down it, applied here, then passed to the next copy
//! (`docs/replication.md`, "Data: chains"). Writes stream, so `write.rs` does the
//! same with its data.

use std::sync::Arc;

use pvfs_proto::map::Copies;
use pvfs_proto::{Handle, Request, Response};
use pvfs_storage::{DataBackend, StorageError};

use crate::chain::{self, Role};
use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::datafiles::check_handles;

/// Checks where a change of `handle` may be made: a datafile with one copy here
/// (`check_handles`), or this server's place in the chain of `copies` (the head for
/// a client's change, the member at the request's hop for a forwarded one).
pub fn check_place(ctx: &Ctx, handle: Handle, copies: &Copies) -> OpResult<Option<chain::Place>> {
    if !copies.replicated() {
        check_handles(ctx, &[handle])?;
        return Ok(None);
    }
    let role = if copies.hop == 0 {
        Role::Head
    } else {
        Role::Member
    };
    chain::place(&ctx.lease, ctx.me as u32, handle, copies, role).map(Some)
}

/// Records the bytes `start .. end` of datafile `handle` as missed by every server
/// holding a copy (`copies`, as the map has them) that is out of the chain of
/// `place` (down).
pub fn record_missed(
    ctx: &Ctx,
    place: &chain::Place,
    copies: &Copies,
    handle: Handle,
    start: u64,
    end: u64,
) {
    // Every copy in the chain (the usual case): nothing to record, nothing to
    // allocate on the write's path (while a server is drained, its heirs hold
    // places beside it, and while a server handed places (`pvfs rebalance`) has
    // not rebuilt them, the servers that handed them hold them beside it: the
    // count says nothing then).
    let beside = || {
        place
            .map
            .servers
            .iter()
            .any(|e| e.leaving || e.hands.iter().any(|h| e.rebuilt_at < h.at))
    };
    if place.chain.len() == copies.servers.len() && !beside() {
        return;
    }
    let absent = place.map.absent(handle, &copies.servers, &place.chain);
    ctx.missed
        .record(&absent, handle, &copies.servers, start, end);
}

/// Notes a change of bytes `start .. end` of datafile `handle` that this copy applies
/// before the rest of its chain has it, until the chain answers
/// (`crate::unfinished`): a write and the changes of [`change`] alike.
pub fn note(
    ctx: &Ctx,
    handle: Handle,
    copies: &Copies,
    start: u64,
    end: u64,
) -> OpResult<crate::unfinished::Ticket> {
    ctx.unfinished
        .begin(handle, &copies.servers, start, end)
        .map_err(|e| StorageError::Io(Arc::new(e)).into())
}

/// Applies a change of `handle` here (`work`, on the storage's thread; answered with
/// the datafile's stat after it) and, with more than one copy, passes
/// `onward(copies one hop further)` to the next copy, holding the whole datafile
/// meanwhile; answers once the rest of the chain has it. Copies out of the chain
/// get `missed` (the local bytes the change may alter) recorded.
#[allow(clippy::too_many_arguments)]
pub async fn change(
    ctx: &Arc<Ctx>,
    handle: Handle,
    place: Option<chain::Place>,
    copies: &Copies,
    missed: (u64, u64),
    onward: impl FnOnce(Copies) -> Request,
    work: impl FnOnce(&dyn DataBackend) -> Result<(), StorageError> + Send + 'static,
) -> OpResult<Response> {
    let _admitted = copies
        .replicated()
        .then(|| ctx.admissions.admit(copies.map));
    if copies.replicated() {
        // Placed before it was admitted: the map must still be the one it was placed
        // under, or a returning server may already have asked for its records.
        chain::check_map(&ctx.lease, copies.map)?;
    }
    let next = place.as_ref().and_then(chain::Place::next);
    let _held = match &place {
        Some(p) => {
            let limit = ctx.config.timeouts.request;
            let held = ctx.chain_locks.lock(handle, 0, u64::MAX, limit).await?;
            record_missed(ctx, p, copies, handle, missed.0, missed.1);
            Some(held)
        }
        None => None,
    };
    let ticket = next
        .map(|_| note(ctx, handle, copies, missed.0, missed.1))
        .transpose()?;
    let data = ctx.data.clone();
    let stat = ctx
        .blocking(move || {
            work(&*data)?;
            Ok(data.stat(handle)?)
        })
        .await?;
    if let Some(next) = next {
        let request = onward(Copies {
            hop: copies.hop + 1,
            ..copies.clone()
        });
        let servers = &copies.servers;
        let passed = async {
            let mut call = ctx
                .peers
                .start_stream(next as usize, request, &[], true)
                .await?;
            ctx.peers.answer(next as usize, &mut call).await
        };
        if let Err(e) = chain::watch_next(&ctx.lease, handle, servers, next, passed).await {
            // Applied here, cut short further down the chain.
            drop(ticket);
            crate::catchup::settle_soon(ctx);
            return Err(passed_on(ctx, next, e));
        }
    }
    if let Some(t) = ticket {
        t.finished();
    }
    Ok(Response::Written {
        bytes: 0,
        stat,
        verifier: ctx.data.verifier(),
    })
}

/// The error a change gets when the next copy of its chain did not take it: the
/// sender fetches the cluster map and sends it again (the authority marks a dead
/// copy down within a lease, and the chain then leaves it out).
pub fn passed_on(ctx: &crate::ctx::Ctx, next: u32, e: OpError) -> OpError {
    let name = ctx
        .config
        .servers
        .get(next as usize)
        .map_or("?", |s| s.name.as_str());
    if e.kind == pvfs_proto::ErrorKind::Map {
        return e;
    }
    chain::map_error(format!("the next copy ({name}) did not take it: {e}"))
}
