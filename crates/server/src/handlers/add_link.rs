//! `AddLink`: one more link on a local object, for a hard link another server is
//! about to put in place (`crate::lifetime`).

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::feed::object;
use crate::lifetime;
use crate::op::{Access, Answer, Cx, Handler};

/// Adds a link to `handle` if the user the sending server acts for may link it, and
/// answers its new attributes.
impl Handler for req::AddLink {
    fn access(&self) -> Access<'_> {
        Access::Peer
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.handle)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handle, moving) = (cx.ctx, self.handle, self.moving);
        ctx.require_meta()?;
        ctx.require_local(handle)?;
        let creds = cx.caller.creds.clone();
        let added = cx
            .once
            .commit(&ctx.meta, move |t| {
                let attr = lifetime::add_link(t, handle, &creds, moving)?;
                Ok(Response::Attr {
                    attr,
                    caps: Vec::new(),
                })
            })
            .await?;
        Ok(added.into())
    }
}
