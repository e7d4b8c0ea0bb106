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
        if let Some(from) = source(&map, &copies.servers, me, None) {
            copy_ranges(
                ctx,
                from,
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
