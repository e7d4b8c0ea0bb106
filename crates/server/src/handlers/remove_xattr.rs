//! `RemoveXattr`: removes an extended attribute (ENODATA if absent).

use pvfs_proto::{req, Changed, Response, Timespec};

use crate::error::OpResult;
use crate::feed::object;
use crate::handlers::xattr::{check_name, may_use, no_attr};
use crate::handlers::{acl, no_object};
use crate::op::{Access, Answer, Cx, Handler};

/// A retry is answered from the record (it must not fail with ENODATA).
impl Handler for req::RemoveXattr {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.handle)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handle, name) = (cx.ctx, self.handle, self.name);
        ctx.require_meta()?;
        ctx.require_local(handle)?;
        check_name(&name)?;
        if acl::is_acl(&name) {
            return acl::set(&cx, handle, name, None, 0).await;
        }
        let creds = cx.caller.creds.clone();
        let answer = cx
            .once
            .commit(&ctx.meta, move |t| {
                let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
                may_use(&attr, &creds, &name, true)?;
                if t.get_xattr(handle, &name)?.is_none() {
                    return Err(no_attr(&name));
                }
                t.remove_xattr(handle, &name);
                attr.ctime = Timespec::now();
                t.put_object(&attr);
                Ok(Response::Done {})
            })
            .await?;
        Ok(answer.into())
    }
}
