//! `GetXattr`, `SetXattr`, `ListXattr`, `RemoveXattr`: extended attributes of an
//! object, stored next to it on its metadata server.

use std::sync::Arc;

use pvfs_proto::message::{XATTR_CREATE, XATTR_NAME_MAX, XATTR_REPLACE, XATTR_SIZE_MAX};
use pvfs_proto::{Creds, Errno, Handle, Response, RetryKey, Timespec};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::no_object;
use crate::replay::{remember, replayed};

fn check_name(name: &str) -> OpResult<()> {
    if name.is_empty() || name.contains('\0') {
        return Err(OpError::new(Errno::EINVAL, "invalid attribute name"));
    }
    if name.len() > XATTR_NAME_MAX {
        return Err(OpError::new(Errno::ERANGE, "attribute name too long"));
    }
    Ok(())
}

fn no_attr(name: &str) -> OpError {
    OpError::new(Errno::ENODATA, format!("no attribute {name:?}"))
}

/// The value of attribute `name` of `handle`.
pub fn get(ctx: &Ctx, handle: Handle, name: &str) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    check_name(name)?;
    let view = ctx.meta.read()?;
    if view.get_object(handle)?.is_none() {
        return Err(no_object(handle));
    }
    let value = view.get_xattr(handle, name)?.ok_or_else(|| no_attr(name))?;
    Ok(Response::Xattr { value })
}

/// The attribute names of `handle`.
pub fn list(ctx: &Ctx, handle: Handle) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    let view = ctx.meta.read()?;
    if view.get_object(handle)?.is_none() {
        return Err(no_object(handle));
    }
    Ok(Response::XattrNames {
        names: view.list_xattrs(handle)?,
    })
}

/// Sets attribute `name` of `handle` (owner or root; the mount checks mode bits).
pub async fn set(
    ctx: &Arc<Ctx>,
    creds: &Creds,
    handle: Handle,
    name: String,
    value: Vec<u8>,
    flags: u32,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    check_name(&name)?;
    if value.len() > XATTR_SIZE_MAX {
        return Err(OpError::new(Errno::E2BIG, "attribute value too large"));
    }
    if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 || flags == XATTR_CREATE | XATTR_REPLACE {
        return Err(OpError::new(
            Errno::EINVAL,
            format!("bad setxattr flags {flags:#x}"),
        ));
    }
    let uid = creds.uid;
    ctx.meta
        .write(move |t| {
            if replayed(t, retry)?.is_some() {
                return Ok(());
            }
            let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
            check_owner(uid, attr.uid)?;
            let exists = t.get_xattr(handle, &name)?.is_some();
            if exists && flags & XATTR_CREATE != 0 {
                return Err(
                    OpError::new(Errno::EEXIST, format!("attribute {name:?} exists")).into(),
                );
            }
            if !exists && flags & XATTR_REPLACE != 0 {
                return Err(no_attr(&name).into());
            }
            t.set_xattr(handle, &name, &value);
            attr.ctime = Timespec::now();
            t.put_object(&attr);
            remember(t, retry, &Response::Done {});
            Ok(())
        })
        .await?;
    Ok(Response::Done {})
}

/// Removes attribute `name` of `handle`.
pub async fn remove(
    ctx: &Arc<Ctx>,
    creds: &Creds,
    handle: Handle,
    name: String,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    check_name(&name)?;
    let uid = creds.uid;
    ctx.meta
        .write(move |t| {
            if replayed(t, retry)?.is_some() {
                return Ok(());
            }
            let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
            check_owner(uid, attr.uid)?;
            if t.get_xattr(handle, &name)?.is_none() {
                return Err(no_attr(&name).into());
            }
            t.remove_xattr(handle, &name);
            attr.ctime = Timespec::now();
            t.put_object(&attr);
            remember(t, retry, &Response::Done {});
            Ok(())
        })
        .await?;
    Ok(Response::Done {})
}

fn check_owner(uid: u32, owner: u32) -> Result<(), OpError> {
    if uid == 0 || uid == owner {
        Ok(())
    } else {
        Err(OpError::new(
            Errno::EPERM,
            "only the owner or root may change attributes",
        ))
    }
}
