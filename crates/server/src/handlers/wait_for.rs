//! `WaitFor` (between servers): records at the coordinating metadata server that a
//! POSIX lock owner waits for others, refusing with EDEADLK a wait that would close
//! a cycle (`crate::waitfor`).

use pvfs_proto::{req, Changed, Errno};

use crate::error::{OpError, OpResult};
use crate::op::{done, Access, Answer, Cx, Handler};

/// Most blockers one wait may name.
pub const MAX_BLOCKERS: usize = 4096;

impl Handler for req::WaitFor {
    fn access(&self) -> Access<'_> {
        Access::Peer
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        if ctx.config.meta_servers().first() != Some(&ctx.me) {
            return Err(OpError::not_here(
                Errno::EINVAL,
                format!("{} does not coordinate deadlock detection", ctx.info.name),
            ));
        }
        if self.blockers.len() > MAX_BLOCKERS {
            return Err(OpError::invalid(
                Errno::E2BIG,
                format!(
                    "a wait for {} owners (limit {MAX_BLOCKERS})",
                    self.blockers.len()
                ),
            ));
        }
        ctx.wait_graph
            .wait_for(self.waiter, &self.blockers, self.server, self.handle)?;
        done()
    }
}
