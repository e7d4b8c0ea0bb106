//! What the small datafile operations share: the check of the datafiles a request
//! names.

use pvfs_proto::{Errno, Handle};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};

/// Most datafiles one request may name.
pub const MAX_HANDLES: usize = 65536;

/// Fails unless this is a data server and `handles` are a bounded list of its own.
pub(crate) fn check_handles(ctx: &Ctx, handles: &[Handle]) -> OpResult<()> {
    ctx.require_data()?;
    if handles.len() > MAX_HANDLES {
        return Err(OpError::invalid(
            Errno::E2BIG,
            format!(
                "{} datafiles in one request (limit {MAX_HANDLES})",
                handles.len()
            ),
        ));
    }
    handles.iter().try_for_each(|&h| ctx.require_local(h))
}
