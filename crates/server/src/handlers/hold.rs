//! `Hold`: the caller's client has an object of this server open, so it outlives
//! its last name until the client lets go (`crate::holds`).

use pvfs_proto::{req, Changed, Errno, Response};

use crate::error::{OpError, OpResult};
use crate::handlers::local_object;
use crate::op::{Access, Answer, Cx, Handler};

/// A caller without the key shows a capability on the object (as for a lock:
/// knowing a handle is not enough). The hold is registered first and the object
/// checked after, so an object answered as held is never deleted under it; one
/// that is gone is ESTALE (the kernel then looks its name up again). The answer
/// renews the client's lease and names it (a new id tells the client the server
/// forgot its holds: a restart, and it holds again), and carries the file's
/// attributes, which an open needs anyway.
impl Handler for req::Hold {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, caller) = (cx.ctx, cx.caller);
        ctx.require_meta()?;
        ctx.require_local(self.handle)?;
        if caller.origin == 0 {
            return Err(OpError::invalid(
                Errno::EINVAL,
                "a hold needs a client that names itself",
            ));
        }
        if !caller.trusted {
            ctx.caps
                .check(self.proof.as_ref(), self.handle, 0, caller, true)?;
        }
        let client = (caller.lock_who(), caller.origin);
        let lease = ctx.locks.touch_client(client.0, client.1);
        ctx.holds.hold(client, self.handle, self.gen)?;
        let attr = match local_object(ctx, self.handle) {
            Ok(a) if a.is_dir() => Err(OpError::posix(
                Errno::EISDIR,
                format!("{:#x} is a directory: only files are held", self.handle),
            )),
            Ok(a) => Ok(a),
            Err(e) if e.errno == Errno::ENOENT => Err(OpError::posix(
                Errno::ESTALE,
                format!("object {:#x} is gone", self.handle),
            )),
            Err(e) => Err(e),
        };
        let attr = attr.inspect_err(|_| {
            ctx.holds.unhold(client, self.handle, self.gen);
        })?;
        // Registered before the mark is checked: a restart after this answer keeps
        // what may be held for a lease (`crate::holds`).
        if let Err(e) = ctx.locks.ensure_marked(ctx.exec).await {
            ctx.holds.unhold(client, self.handle, self.gen);
            return Err(e);
        }
        Ok(Response::Held {
            lease,
            grace: ctx.locks.grace_end().is_some(),
            attr,
        }
        .into())
    }
}
