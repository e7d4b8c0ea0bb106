//! `Fallocate`: fallocate(2) on one datafile's share of a file range.

use std::sync::Arc;

use pvfs_proto::message::falloc;
use pvfs_proto::{Handle, Response, Stripe};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::datafiles::check_handles;
use crate::handlers::write::check_stripe;

/// The file bytes `offset .. offset + len` that datafile `index` holds form one run
/// of local bytes (a datafile's stripe units follow each other locally): from its
/// share of a file of `offset` bytes to its share of a file of `offset + len` bytes.
/// That run gets fallocate(2) with `mode`; without `KEEP_SIZE` the datafile's local
/// size then reaches the run's end, which gives the file its new size on the
/// datafile holding its last byte.
pub async fn handle(
    ctx: &Arc<Ctx>,
    handle: Handle,
    stripe: Stripe,
    index: u32,
    offset: u64,
    len: u64,
    mode: u32,
) -> OpResult<Response> {
    check_handles(ctx, &[handle])?;
    check_stripe(stripe, index)?;
    falloc::check(mode, offset, len).map_err(|(e, why)| OpError::new(e, why))?;
    let start = stripe.local_size(u64::from(index), offset);
    let end = stripe.local_size(u64::from(index), offset + len);
    if end > start {
        let data = ctx.data.clone();
        ctx.blocking(move || Ok(data.fallocate(handle, mode, start, end - start)?))
            .await?;
    }
    Ok(Response::Done {})
}
