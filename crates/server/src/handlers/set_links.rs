//! `SetLinks`: fsck's repair of a link count (`crate::lifetime` decides whether the
//! object lives).

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::feed::object;
use crate::lifetime;
use crate::op::{Access, Answer, Cx, Handler};

/// Sets `handle`'s link count to `links` if it is `expect`; answers what became of
/// it, recorded for a retry.
impl Handler for req::SetLinks {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.handle)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        let req::SetLinks {
            handle,
            links,
            expect,
        } = self;
        ctx.require_meta()?;
        ctx.require_local(handle)?;
        if links == 0 {
            ctx.refuse_root(handle)?;
        }
        let uid = cx.caller.creds.uid;
        let claims = crate::holds::Claims::forced(&ctx.holds);
        let owner = (ctx.caps.clone(), claims.clone());
        let answer = cx
            .once
            .commit(&ctx.meta, move |t| {
                let (left, tickets) =
                    lifetime::set_links(t, (&owner.0, &owner.1), handle, links, expect, uid)?;
                Ok(Response::Dropped { left, tickets })
            })
            .await?;
        Ok(answer.into())
    }
}
