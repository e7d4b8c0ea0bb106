//! `GetXattr`, `SetXattr`, `ListXattr`, `RemoveXattr`: extended attributes of an
//! object, stored next to it on its metadata server, with Linux's rules for who may
//! use which namespace: `user.` needs read (write) permission on a file or directory
//! (ENODATA to read, EPERM to write on other kinds; in a sticky directory only its
//! owner writes), `trusted.` is root's (hidden from others), `security.` is read by
//! anyone and written by root, the POSIX ACLs of `system.` are kept with the object
//! (`acl`), anything else is EOPNOTSUPP.

use std::sync::Arc;

use pvfs_proto::access::{self, MAY_READ, MAY_WRITE};
use pvfs_proto::message::{XATTR_CREATE, XATTR_NAME_MAX, XATTR_REPLACE, XATTR_SIZE_MAX};
use pvfs_proto::{Attr, Creds, Errno, Handle, ObjDetail, Response, RetryKey, Timespec};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::{acl, no_object};
use crate::replay::{remember, replayed};
use crate::session::Caller;

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
pub fn get(ctx: &Ctx, caller: &Caller, handle: Handle, name: &str) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    check_name(name)?;
    let view = ctx.meta.read()?;
    let attr = view.get_object(handle)?.ok_or_else(|| no_object(handle))?;
    if acl::is_acl(name) {
        return acl::get(&attr, name);
    }
    may_use(&attr, &caller.creds, name, false)?;
    let value = view.get_xattr(handle, name)?.ok_or_else(|| no_attr(name))?;
    Ok(Response::Xattr { value })
}

/// The attribute names of `handle` (those of `trusted.` only for root).
pub fn list(ctx: &Ctx, caller: &Caller, handle: Handle) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    let view = ctx.meta.read()?;
    let attr = view.get_object(handle)?.ok_or_else(|| no_object(handle))?;
    let mut names = acl::names(&attr);
    names.extend(view.list_xattrs(handle)?);
    if caller.creds.uid != 0 {
        names.retain(|n| !n.starts_with("trusted."));
    }
    Ok(Response::XattrNames { names })
}

/// Whether `creds` may read (or, with `write`, change) attribute `name` of `attr`.
fn may_use(attr: &Attr, creds: &Creds, name: &str, write: bool) -> OpResult<()> {
    let root = creds.uid == 0;
    let deny = |errno: Errno, why: &str| Err(OpError::new(errno, format!("{name}: {why}")));
    if name.starts_with("user.") {
        let plain = matches!(attr.detail, ObjDetail::File { .. } | ObjDetail::Dir { .. });
        if !plain {
            return if write {
                deny(
                    Errno::EPERM,
                    "user attributes only on files and directories",
                )
            } else {
                deny(Errno::ENODATA, "no such attribute")
            };
        }
        if write && attr.is_dir() && attr.mode & 0o1000 != 0 && !root && creds.uid != attr.uid {
            return deny(
                Errno::EPERM,
                "only the owner writes a sticky directory's attributes",
            );
        }
        let want = if write { MAY_WRITE } else { MAY_READ };
        return access::check(attr, creds, want)
            .map_err(|e| OpError::new(e, format!("{name}: permission denied")));
    }
    if name.starts_with("trusted.") {
        return match (root, write) {
            (true, _) => Ok(()),
            (false, false) => deny(Errno::ENODATA, "no such attribute"),
            (false, true) => deny(Errno::EPERM, "only root uses trusted attributes"),
        };
    }
    if name.starts_with("security.") {
        return if write && !root {
            deny(Errno::EPERM, "only root sets security attributes")
        } else {
            Ok(())
        };
    }
    deny(Errno::EOPNOTSUPP, "unsupported attribute namespace")
}

/// Sets attribute `name` of `handle`.
pub async fn set(
    ctx: &Arc<Ctx>,
    caller: &Caller,
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
    if acl::is_acl(&name) {
        return acl::set(ctx, caller, handle, name, Some(value), flags, retry).await;
    }
    let creds = caller.creds.clone();
    ctx.meta
        .write(move |t| {
            if replayed(t, retry)?.is_some() {
                return Ok(());
            }
            let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
            may_use(&attr, &creds, &name, true)?;
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
    caller: &Caller,
    handle: Handle,
    name: String,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    check_name(&name)?;
    if acl::is_acl(&name) {
        return acl::set(ctx, caller, handle, name, None, 0, retry).await;
    }
    let creds = caller.creds.clone();
    ctx.meta
        .write(move |t| {
            if replayed(t, retry)?.is_some() {
                return Ok(());
            }
            let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
            may_use(&attr, &creds, &name, true)?;
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
