//! `DropLink`: an object loses a link after one of its names went
//! (`crate::lifetime` decides whether it lives).

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::feed::object;
use crate::lifetime;
use crate::op::{Access, Answer, Cx, Handler};

/// Takes one link from `handle`, whose name the sending server removed (deleted at
/// zero unless `keep`); answers what became of it, recorded for a retry.
impl Handler for req::DropLink {
    fn access(&self) -> Access<'_> {
        Access::Peer
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.handle)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handle, keep) = (cx.ctx, self.handle, self.keep);
        ctx.require_meta()?;
        ctx.require_local(handle)?;
        ctx.refuse_root(handle)?;
        let uid = cx.caller.creds.uid;
        let claims = crate::holds::Claims::new(&ctx.holds);
        let owner = (ctx.caps.clone(), claims.clone());
        let answer = cx
            .once
            .commit(&ctx.meta, move |t| {
                let (left, tickets) =
                    lifetime::drop_link(t, (&owner.0, &owner.1), handle, keep, uid)?;
                Ok(Response::Dropped { left, tickets })
            })
            .await?;
        Ok(answer.into())
    }
}
