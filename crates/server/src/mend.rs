//! Mending a block whose bytes do not match their checksum
//! (`docs/storage-format.md`, "Checksums"; `docs/replication.md`, "Checked
//! copies"): a read, or a scrub, that meets one takes the block from another copy
//! of the datafile that may serve reads (`crate::copy::copy_ranges`, under the
//! datafile's lock here), and reads again. A datafile with no other copy cannot be
//! mended: its read fails with EIO, saying which bytes are damaged; unless the sums
//! are unsure since a reboot (a power loss may have kept a block's bytes and lost
//! its sum), when the block is summed again from its bytes as they are.

use std::sync::Arc;

use pvfs_proto::map::Copies;
use pvfs_proto::Handle;
use pvfs_storage::sums::SUM_BLOCK;

use crate::copy::{copy_ranges, source};
use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};

/// How a damaged block was dealt with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mended {
    /// Copied from the copy on this server.
    FromCopy(u32),
    /// Summed again from its bytes (unsure sums, no other copy).
    Resummed,
}

/// Mends the block at `offset` of datafile `handle` (its copies: `copies`), whose
/// read failed with `error`; the error back when it cannot be mended.
pub async fn mend(
    ctx: &Arc<Ctx>,
    handle: Handle,
    copies: &Copies,
    offset: u64,
    unsure: bool,
    error: OpError,
) -> OpResult<Mended> {
    let me = ctx.me as u32;
    if copies.replicated() {
        let map = ctx.lease.map()?;
        if let Some(from) = source(&map, handle, &copies.servers, me, None) {
            copy_ranges(
                ctx,
                (from, crate::copy::Size::Source),
                handle,
                &copies.servers,
                map.version,
                &[offset, offset.saturating_add(SUM_BLOCK)],
            )
            .await?;
            tracing::warn!(
                handle = format_args!("{handle:016x}"),
                offset,
                "{error}: copied again from server {from}"
            );
            return Ok(Mended::FromCopy(from as u32));
        }
    }
    if unsure {
        let data = ctx.data.clone();
        ctx.blocking(move || Ok(data.resum(handle, offset)?))
            .await?;
        tracing::warn!(
            handle = format_args!("{handle:016x}"),
            offset,
            "{error}: no other copy, so its bytes are taken as they are and summed again"
        );
        return Ok(Mended::Resummed);
    }
    tracing::error!(
        handle = format_args!("{handle:016x}"),
        offset,
        "{error}: no other copy to take it from"
    );
    Err(error)
}

/// Runs `attempt` (a read or a check of `len` bytes of datafile `handle`) until it
/// does not fail on a damaged block, mending each one it meets first: the error of
/// a block that cannot be mended, of a read between servers (another copy catching
/// up takes its bytes from elsewhere), or of blocks that keep failing once mended.
pub async fn mending<T, F, Fut>(
    ctx: &Arc<Ctx>,
    handle: Handle,
    copies: &Copies,
    len: u64,
    mut attempt: F,
) -> OpResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = OpResult<T>>,
{
    // Every block of it, and once more.
    for _ in 0..len / SUM_BLOCK + 2 {
        let error = match attempt().await {
            Ok(done) => return Ok(done),
            Err(e) => e,
        };
        let Some((_, offset, unsure)) = error.bad_block() else {
            return Err(error);
        };
        if copies.hop > 0 {
            return Err(error);
        }
        mend(ctx, handle, copies, offset, unsure, error).await?;
    }
    Err(OpError::internal(
        pvfs_proto::Errno::EIO,
        format!("datafile {handle:016x}: blocks mended kept failing their checksums"),
    ))
}
