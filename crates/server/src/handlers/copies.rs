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
use crate::error::OpResult;
use crate::handlers::datafiles::check_handles;
use crate::handlers::write::passed_on;

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
    chain::place(&ctx.lease, ctx.me as u32, copies, role).map(Some)
}

/// Applies a change of `handle` here (`work`, on the storage's thread; answered with
/// the datafile's stat after it) and, with more than one copy, passes
/// `onward(copies one hop further)` to the next copy, holding the whole datafile
/// meanwhile; answers once the rest of the chain has it.
pub async fn change(
    ctx: &Arc<Ctx>,
    handle: Handle,
    place: Option<chain::Place>,
    copies: &Copies,
    onward: impl FnOnce(Copies) -> Request,
    work: impl FnOnce(&dyn DataBackend) -> Result<(), StorageError> + Send + 'static,
) -> OpResult<Response> {
    let next = place.as_ref().and_then(chain::Place::next);
    let _held = match next {
        Some(_) => {
            let limit = ctx.config.timeouts.request;
            Some(ctx.chain_locks.lock(handle, 0, u64::MAX, limit).await?)
        }
        None => None,
    };
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
        let mut call = ctx
            .peers
            .start_stream(next as usize, request, &[], true)
            .await
            .map_err(|e| passed_on(ctx, next, e))?;
        ctx.peers
            .answer(next as usize, &mut call)
            .await
            .map_err(|e| passed_on(ctx, next, e))?;
    }
    Ok(Response::Written {
        bytes: 0,
        stat,
        verifier: ctx.data.verifier(),
    })
}
