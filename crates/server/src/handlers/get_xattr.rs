//! `GetXattr`: the value of an extended attribute (`crate::handlers::xattr` says who
//! may read which).

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::handlers::xattr::{check_name, may_use, no_attr};
use crate::handlers::{acl, no_object};
use crate::op::{Access, Answer, Cx, Handler};

impl Handler for req::GetXattr {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handle, name) = (cx.ctx, self.handle, self.name);
        ctx.require_meta()?;
        ctx.require_local(handle)?;
        check_name(&name)?;
        let view = ctx.meta.read()?;
        let attr = view.get_object(handle)?.ok_or_else(|| no_object(handle))?;
        if acl::is_acl(&name) {
            return acl::get(&attr, &name).map(Answer::Reply);
        }
        may_use(&attr, &cx.caller.creds, &name, false)?;
        let value = view
            .get_xattr(handle, &name)?
            .ok_or_else(|| no_attr(&name))?;
        Ok(Response::Xattr { value }.into())
    }
}
