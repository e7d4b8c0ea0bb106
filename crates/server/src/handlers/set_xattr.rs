//! `SetXattr`: sets an extended attribute (`crate::handlers::xattr` says who may
//! write which; the ACL attributes go to `crate::handlers::acl`).

use pvfs_proto::message::{XATTR_CREATE, XATTR_REPLACE, XATTR_SIZE_MAX};
use pvfs_proto::{req, Changed, Errno, Response, Timespec};

use crate::error::{OpError, OpResult};
use crate::feed::object;
use crate::handlers::xattr::{check_name, may_use, no_attr};
use crate::handlers::{acl, no_object};
use crate::op::{Access, Answer, Cx, Handler};

/// Sets attribute `name`; `flags` as setxattr(2). A retry is answered from the
/// record (a retried XATTR_CREATE must not fail with EEXIST).
impl Handler for req::SetXattr {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        vec![object(self.handle)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        let req::SetXattr {
            handle,
            name,
            value,
            flags,
        } = self;
        ctx.require_meta()?;
        ctx.require_local(handle)?;
        check_name(&name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(OpError::invalid(Errno::E2BIG, "attribute value too large"));
        }
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 || flags == XATTR_CREATE | XATTR_REPLACE {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!("bad setxattr flags {flags:#x}"),
            ));
        }
        if acl::is_acl(&name) {
            return acl::set(&cx, handle, name, Some(value), flags).await;
        }
        let creds = cx.caller.creds.clone();
        let answer = cx
            .once
            .commit(&ctx.meta, move |t| {
                let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
                may_use(&attr, &creds, &name, true)?;
                let exists = t.get_xattr(handle, &name)?.is_some();
                if exists && flags & XATTR_CREATE != 0 {
                    return Err(OpError::posix(
                        Errno::EEXIST,
                        format!("attribute {name:?} exists"),
                    ));
                }
                if !exists && flags & XATTR_REPLACE != 0 {
                    return Err(no_attr(&name));
                }
                t.set_xattr(handle, &name, &value);
                attr.ctime = Timespec::now();
                t.put_object(&attr);
                Ok(Response::Done {})
            })
            .await?;
        Ok(answer.into())
    }
}
