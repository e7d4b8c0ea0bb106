//! `RemoveDatafiles`: deletes the datafiles of a removed file.

use pvfs_proto::{req, rights, Changed};

use crate::error::OpResult;
use crate::handlers::datafiles::check_handles;
use crate::op::{done, Access, Answer, Cx, Handler, Tickets};

/// A caller without the key shows a REMOVE ticket for each datafile (from the removal
/// of the file they belonged to). Removing one that is gone already is no error, so a
/// retry is harmless.
impl Handler for req::RemoveDatafiles {
    fn access(&self) -> Access<'_> {
        Access::Ticket {
            tickets: Tickets::Each(&self.tickets, &self.handles),
            rights: rights::REMOVE,
        }
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handles) = (cx.ctx, self.handles);
        check_handles(ctx, &handles)?;
        let data = ctx.data.clone();
        ctx.blocking(move || handles.iter().try_for_each(|&h| Ok(data.remove(h)?)))
            .await?;
        done()
    }
}
