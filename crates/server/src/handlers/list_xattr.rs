//! `ListXattr`: the names of an object's extended attributes (those of `trusted.`
//! only for root).

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::handlers::{acl, no_object};
use crate::op::{Access, Answer, Cx, Handler};

impl Handler for req::ListXattr {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handle) = (cx.ctx, self.handle);
        ctx.require_meta()?;
        ctx.require_local(handle)?;
        let view = ctx.meta.read()?;
        let attr = view.get_object(handle)?.ok_or_else(|| no_object(handle))?;
        let mut names = acl::names(&attr);
        names.extend(view.list_xattrs(handle)?);
        if cx.caller.creds.uid != 0 {
            names.retain(|n| !n.starts_with("trusted."));
        }
        Ok(Response::XattrNames { names }.into())
    }
}
