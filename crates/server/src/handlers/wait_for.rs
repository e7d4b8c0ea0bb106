//! `WaitFor` (between servers): records at the coordinating metadata server that a
//! POSIX lock owner waits for others, refusing with EDEADLK a wait that would close
//! a cycle (`crate::waitfor`).

use std::sync::Arc;

use pvfs_proto::{Errno, Handle, LockKey, Response};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};

/// Most blockers one wait may name.
pub const MAX_BLOCKERS: usize = 4096;

/// Handles `WaitFor`.
pub fn handle(
    ctx: &Arc<Ctx>,
    waiter: LockKey,
    blockers: &[LockKey],
    server: u32,
    handle: Handle,
) -> OpResult<Response> {
    if ctx.config.meta_servers().first() != Some(&ctx.me) {
        return Err(OpError::new(
            Errno::EINVAL,
            format!("{} does not coordinate deadlock detection", ctx.info.name),
        ));
    }
    if blockers.len() > MAX_BLOCKERS {
        return Err(OpError::new(
            Errno::E2BIG,
            format!(
                "a wait for {} owners (limit {MAX_BLOCKERS})",
                blockers.len()
            ),
        ));
    }
    ctx.wait_graph.wait_for(waiter, blockers, server, handle)?;
    Ok(Response::Done {})
}
