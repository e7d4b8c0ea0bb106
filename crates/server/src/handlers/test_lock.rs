//! `TestLock` (F_GETLK): the first lock of another owner that keeps the caller's
//! owner from taking a lock. The caller needs read or write permission on the object.

use pvfs_proto::access::{MAY_READ, MAY_WRITE};
use pvfs_proto::{req, Changed, LockKey, Response};

use crate::error::OpResult;
use crate::handlers::lock::{check_range, may_lock};
use crate::locks::LockAt;
use crate::op::{Access, Answer, Cx, Handler};

impl Handler for req::TestLock {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, caller, handle) = (cx.ctx, cx.caller, self.handle);
        check_range(self.start, self.end)?;
        may_lock(
            ctx,
            caller,
            handle,
            MAY_READ | MAY_WRITE,
            self.proof.as_ref(),
        )?;
        let key = LockKey::new(caller.lock_who(), self.owner);
        // In the grace period locks not yet reclaimed would be missed: wait it out
        // (bounded; the client asks again).
        if let Some(grace_end) = ctx.locks.grace_end() {
            let answer_at = tokio::time::Instant::now() + ctx.locks.answer_after;
            tokio::time::sleep_until(grace_end.min(answer_at)).await;
            if ctx.locks.grace_end().is_some() {
                return Ok(Response::LockWaiting {
                    lease: ctx.locks.touch(&key),
                    grace: true,
                }
                .into());
            }
        }
        Ok(Response::LockTest {
            conflict: ctx.locks.test(
                LockAt::program(handle),
                &key,
                self.typ,
                self.start,
                self.end,
            ),
        }
        .into())
    }
}
