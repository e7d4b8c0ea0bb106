//! `CancelLock`: withdraws the caller's waiting lock request (a signal interrupted
//! the program waiting for it): a request waiting on it is answered EINTR; one
//! granted already stays granted (the client then holds the lock).

use pvfs_proto::{req, Changed, LockKey};

use crate::error::OpResult;
use crate::handlers::lock::check_range;
use crate::locks::{LockAt, Want};
use crate::op::{done, Access, Answer, Cx, Handler};

impl Handler for req::CancelLock {
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
        let want = Want {
            key: LockKey::new(cx.caller.lock_who(), self.owner),
            typ: self.typ,
            start: self.start,
            end: self.end,
            pid: 0,
            posix: false,
        };
        ctx.locks.cancel(LockAt::program(self.handle), &want);
        ctx.locks.edges_settled(LockAt::program(self.handle)).await;
        done()
    }
}
