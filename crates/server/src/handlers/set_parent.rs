//! `SetParent`: records a directory's new parent after it was renamed elsewhere.

use pvfs_proto::{req, rights, Changed, Response};

use crate::error::OpResult;
use crate::feed::object;
use crate::handlers::change_dir;
use crate::op::{Access, Answer, Cx, Handler, Tickets};

/// Sets the parent of directory `dir`; a caller without the key shows a MOVE ticket
/// for it (from the lookup of the name it was moved from).
impl Handler for req::SetParent {
    fn access(&self) -> Access<'_> {
        Access::Ticket {
            tickets: Tickets::One(self.ticket.as_ref(), self.dir),
            rights: rights::MOVE,
        }
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.dir)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, dir, new_parent) = (cx.ctx, self.dir, self.parent);
        ctx.require_meta()?;
        ctx.require_local(dir)?;
        let answer = cx
            .once
            .commit(&ctx.meta, move |t| {
                change_dir(t, dir, |_, parent, _| {
                    *parent = new_parent;
                    Ok(())
                })?;
                Ok(Response::Done {})
            })
            .await?;
        Ok(answer.into())
    }
}
