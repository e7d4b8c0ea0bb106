//! `RemoveObject`: deletes an object kept at zero links (a file unlinked while it
//! was open) once it is closed.

use pvfs_proto::{req, rights, Changed, Response};

use crate::error::OpResult;
use crate::feed::object;
use crate::lifetime;
use crate::op::{Access, Answer, Cx, Handler, Tickets};

/// Deletes object `handle`, which must have no link left (EBUSY otherwise), and
/// returns what it was (a file's layout tells the client which datafiles to delete,
/// with REMOVE tickets for them). A caller without the key shows a REMOVE ticket for
/// `handle` (from the unlink that took its last link).
impl Handler for req::RemoveObject {
    fn access(&self) -> Access<'_> {
        Access::Ticket {
            tickets: Tickets::One(self.ticket.as_ref(), self.handle),
            rights: rights::REMOVE,
        }
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.handle)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handle) = (cx.ctx, self.handle);
        ctx.require_meta()?;
        ctx.require_local(handle)?;
        ctx.refuse_root(handle)?;
        let claims = crate::holds::Claims::new(&ctx.holds);
        let owner = (ctx.caps.clone(), claims.clone());
        let uid = cx.caller.creds.uid;
        let removed = cx
            .once
            .commit(&ctx.meta, move |t| {
                let (detail, tickets) =
                    lifetime::remove_unlinked(t, (&owner.0, &owner.1), handle, uid)?;
                Ok(Response::Removed { detail, tickets })
            })
            .await?;
        Ok(removed.into())
    }
}
