//! `GetAttr`: the attributes of one object stored here, with capabilities.

use pvfs_proto::{req, rights, Changed, Response};

use crate::error::OpResult;
use crate::handlers::{answered, grant, no_object};
use crate::op::{Access, Answer, Cx, Handler};

/// Attributes of one object, with the rights of `want` the caller may have. A caller
/// that does not hold the key must show `proof`: a VISIT capability from the lookup
/// of the object's name, or any capability it was granted on the object (a renewal;
/// expired ones count), so that knowing a handle is not enough to be granted access.
impl Handler for req::GetAttr {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, caller, handle, want) = (cx.ctx, cx.caller, self.handle, self.want);
        ctx.require_meta()?;
        ctx.require_local(handle)?;
        let mut attr = answered(&ctx.meta.read()?, handle)?.ok_or_else(|| no_object(handle))?;
        if want == 0 {
            return Ok(Response::Attr {
                attr,
                caps: Vec::new(),
            }
            .into());
        }
        if !caller.trusted {
            ctx.caps
                .check(self.proof.as_ref(), handle, 0, caller, true)?;
        }
        let granted = grant::decide(caller, None, &attr, want & !(rights::REMOVE | rights::MOVE))?;
        let caps = grant::issue(ctx, caller, &mut attr, granted).await?;
        Ok(Response::Attr { attr, caps }.into())
    }
}
