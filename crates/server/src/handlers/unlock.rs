//! `Unlock`: releases what the owner holds on a range of an object (which may split
//! a lock), and grants what waited for it. Only the caller's own locks: the owner is
//! keyed by the connection's proven identity (`crate::locks`).

use pvfs_proto::locks::LOCK_APPEND;
use pvfs_proto::{req, Changed, Errno, LockKey};

use crate::error::{OpError, OpResult};
use crate::handlers::lock::{check_range, lock_at};
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
        if self.flags & !LOCK_APPEND != 0 {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!("unknown unlock flags {:#x}", self.flags & !LOCK_APPEND),
            ));
        }
        let at = lock_at(self.handle, self.flags);
        let key = LockKey::new(cx.caller.lock_who(), self.owner);
        ctx.locks.unlock(at, &key, self.start, self.end);
        ctx.locks.edges_settled(at).await;
        done()
    }
}
