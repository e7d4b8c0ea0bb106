//! `DirStats`: what this server's shards add to directories' times and link counts.

use std::sync::Arc;

use pvfs_proto::{Errno, Handle, Response};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::getattr::MAX_LIST;

/// The shard records of `dirs` here, in request order (zeros for a directory with
/// no entry ever added here). They say when entries changed and how many are
/// directories, nothing about names, so any authenticated client may ask, as it may
/// ask for a directory's attributes.
pub fn handle(ctx: &Arc<Ctx>, dirs: &[Handle]) -> OpResult<Response> {
    ctx.require_meta()?;
    if dirs.len() > MAX_LIST {
        return Err(OpError::new(
            Errno::E2BIG,
            format!("DirStats of {} directories (limit {MAX_LIST})", dirs.len()),
        ));
    }
    let view = ctx.meta.read()?;
    let stats = dirs
        .iter()
        .map(|&d| view.shard_stat(d))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Response::ShardStats { stats })
}
