//! `Unlock`: releases what the owner holds on a range of an object (which may split
//! a lock), and grants what waited for it. Only the caller's own locks: the owner is
//! keyed by the connection's proven identity (`crate::locks`).

use pvfs_proto::{req, Changed, LockKey};

use crate::error::OpResult;
use crate::handlers::lock::check_range;
use crate::op::{done, Access, Answer, Cx, Handler};

impl Handler for req::Unlock {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        ctx.require_meta()?;
        ctx.require_local(self.handle)?;
        check_range(self.start, self.end)?;
        let key = LockKey::new(cx.caller.lock_who(), self.owner);
        ctx.locks.unlock(self.handle, &key, self.start, self.end);
        ctx.locks.edges_settled(self.handle).await;
        done()
    }
}
