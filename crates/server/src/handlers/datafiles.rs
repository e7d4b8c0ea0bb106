//! What the small datafile operations share: the check of the datafiles a request
//! names.

use pvfs_proto::{Errno, Handle};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};

/// Most datafiles one request may name.
pub const MAX_HANDLES: usize = 65536;

/// Fails unless this is a data server and `handles` are a bounded list of its own:
/// handles of its range or, in a file system whose files may have copies (it has an
/// authority), of any server's range (a copy keeps the handle of its datafile's
/// first server; `docs/replication.md`).
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
    if ctx.lease.configured() {
        return handles
            .iter()
            .try_for_each(|&h| match ctx.config.owner_of(h) {
                Some(_) => Ok(()),
                None => Err(OpError::no_server(format!(
                    "handle {h:#x} belongs to no server of this file system"
                ))),
            });
    }
    handles.iter().try_for_each(|&h| ctx.require_local(h))
}
