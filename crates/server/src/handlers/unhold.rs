//! `Unhold`: the caller's client closed objects it held; one left without a name
//! and without a holder is deleted now (`crate::holds`, `crate::orphans`).

use pvfs_proto::{req, Changed, Errno};

use crate::error::{OpError, OpResult};
use crate::op::{done, Access, Answer, Cx, Handler};
use crate::orphans;

/// Only the caller's own holds: they are keyed by the connection's proven identity
/// and the client's id. Answered once what it freed is deleted (its datafiles go in
/// the background).
impl Handler for req::Unhold {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        self.handles
            .iter()
            .map(|&h| crate::feed::object(h))
            .collect()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, caller) = (cx.ctx, cx.caller);
        ctx.require_meta()?;
        if self.handles.len() != self.gens.len() {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!(
                    "{} handles but {} generations",
                    self.handles.len(),
                    self.gens.len()
                ),
            ));
        }
        let client = (caller.lock_who(), caller.origin);
        let free: Vec<_> = self
            .handles
            .iter()
            .zip(&self.gens)
            .filter(|&(&h, &g)| ctx.is_local(h) && ctx.holds.unhold(client, h, g))
            .map(|(&h, _)| h)
            .collect();
        // Only objects without a name cost a commit.
        let read = ctx.meta.read()?;
        let mut nameless = Vec::new();
        for h in free {
            if read
                .get_object(h)?
                .is_some_and(|a| a.nlink == 0 && !a.is_dir())
            {
                nameless.push(h);
            }
        }
        drop(read);
        orphans::free(ctx, nameless).await;
        done()
    }
}
