//! POSIX ACLs through their extended attributes (`system.posix_acl_access`,
//! `system.posix_acl_default`): kept with the object's attributes (`Attr::acl`), so
//! every permission check on every server sees them. Who may set them, what a set
//! does to the permission bits and which values are refused are Linux's rules
//! (`pvfs_proto::acl`).

use pvfs_proto::access;
use pvfs_proto::acl::{self, Acl, AclEntry, XATTR_ACCESS, XATTR_DEFAULT};
use pvfs_proto::message::{XATTR_CREATE, XATTR_REPLACE};
use pvfs_proto::{Attr, Creds, Errno, Handle, Response, Timespec};
use pvfs_storage::MetaTxn;

use crate::error::{OpError, OpResult};
use crate::handlers::no_object;
use crate::op::{Answer, Cx};

/// Whether `name` is one of the ACL attributes.
pub fn is_acl(name: &str) -> bool {
    name == XATTR_ACCESS || name == XATTR_DEFAULT
}

/// The entries attribute `name` names in `attr` (empty: none).
fn entries<'a>(attr: &'a Attr, name: &str) -> &'a [AclEntry] {
    acl::named(attr.acl.as_deref(), name)
}

/// The ACL attribute names `attr` has (for `ListXattr`).
pub fn names(attr: &Attr) -> Vec<String> {
    [XATTR_ACCESS, XATTR_DEFAULT]
        .into_iter()
        .filter(|n| !entries(attr, n).is_empty())
        .map(str::to_string)
        .collect()
}

/// The value of ACL attribute `name` of `attr`, as Linux writes it (ENODATA if it
/// has none). Anyone who reached the object may read it, as on Linux.
pub fn get(attr: &Attr, name: &str) -> OpResult<Response> {
    let e = entries(attr, name);
    if e.is_empty() {
        return Err(OpError::posix(Errno::ENODATA, format!("no {name}")));
    }
    Ok(Response::Xattr {
        value: acl::to_xattr(e),
    })
}

/// Sets (`value` Some) or removes ACL attribute `name` of `handle`: only its owner or
/// root (EPERM); a default ACL only on a directory (EACCES); a value that is not a
/// valid ACL is EINVAL. An access ACL sets the permission bits it shows (the mask as
/// the group bits) and is kept only if it says more than they do; a caller outside
/// the object's group who is not root clears set-group-ID with it, as Linux.
/// Removing the access ACL leaves the bits as they are. Directories' permissions are
/// what other servers cache: the change is announced before the answer. The
/// request's answer is recorded with the change (`cx.once`).
pub async fn set(
    cx: &Cx<'_>,
    handle: Handle,
    name: String,
    value: Option<Vec<u8>>,
    flags: u32,
) -> OpResult<Answer> {
    let ctx = cx.ctx;
    // An empty default ACL (the header alone) removes it, as setfacl -k writes.
    let parsed = match &value {
        Some(v) if name == XATTR_DEFAULT && v.len() == 4 => None,
        Some(v) => Some(
            acl::from_xattr(v)
                .map_err(|e| OpError::invalid(e, format!("{name}: not a valid ACL")))?,
        ),
        None => None,
    };
    let removing = value.is_none();
    let creds = cx.caller.creds.clone();
    let answer = cx
        .once
        .commit(&ctx.meta, move |t| {
            let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
            change(t, &mut attr, &creds, (&name, parsed, removing, flags))?;
            Ok(Response::Done {})
        })
        .await?;
    // Directories' permissions are what other servers cache (announced for a retry
    // too: the first attempt may have stopped before it announced).
    if ctx
        .meta
        .read()?
        .get_object(handle)?
        .is_some_and(|a| a.is_dir())
    {
        crate::perms::announce_change(ctx, handle).await;
    }
    Ok(answer.into())
}

/// One ACL change in a commit (see [`set`]).
fn change(
    t: &mut MetaTxn<'_>,
    attr: &mut Attr,
    creds: &Creds,
    (name, parsed, removing, flags): (&str, Option<Vec<AclEntry>>, bool, u32),
) -> OpResult<()> {
    let handle = attr.handle;
    if creds.uid != 0 && creds.uid != attr.uid {
        return Err(OpError::denied(
            Errno::EPERM,
            format!("{name}: only the owner of {handle:#x} sets its ACLs"),
        ));
    }
    if name == XATTR_DEFAULT && !attr.is_dir() {
        return Err(OpError::posix(
            Errno::EACCES,
            format!("{name}: only directories have a default ACL"),
        ));
    }
    let exists = !entries(attr, name).is_empty();
    if removing && !exists {
        return Err(OpError::posix(Errno::ENODATA, format!("no {name}")));
    }
    if !removing && exists && flags & XATTR_CREATE != 0 {
        return Err(OpError::posix(Errno::EEXIST, format!("{name} exists")));
    }
    if !removing && !exists && flags & XATTR_REPLACE != 0 {
        return Err(OpError::posix(Errno::ENODATA, format!("no {name}")));
    }
    let mut acl: Acl = attr.acl.take().map(|b| *b).unwrap_or_default();
    match (name == XATTR_ACCESS, parsed) {
        (true, Some(e)) => {
            attr.mode = (attr.mode & !0o777) | acl::mode_bits(&e);
            if creds.uid != 0 && !access::in_group(creds, attr.gid) {
                attr.mode &= !0o2000;
            }
            acl.access = if acl::is_minimal(&e) { Vec::new() } else { e };
        }
        (true, None) => acl.access.clear(),
        (false, e) => acl.default = e.unwrap_or_default(),
    }
    attr.acl = (!acl.is_empty()).then(|| Box::new(acl));
    attr.ctime = Timespec::now();
    t.put_object(attr);
    Ok(())
}

/// What a chmod to `mode` does to `attr`'s access ACL: its owner, mask (or owning
/// group) and other entries take the new bits.
pub fn chmod(attr: &mut Attr, mode: u32) {
    if let Some(a) = attr.acl.as_deref_mut() {
        acl::chmod(&mut a.access, mode);
    }
}

/// The whole of `Acl`, for a test of what a set leaves.
#[cfg(test)]
fn acl_of(attr: &Attr) -> Acl {
    attr.acl.as_deref().cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvfs_proto::acl::{from_mode, MASK, UNDEFINED_ID, USER};

    fn dir() -> Attr {
        Attr {
            handle: 5,
            mode: 0o2755,
            uid: 1000,
            gid: 100,
            nlink: 2,
            size: 4096,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            detail: pvfs_proto::ObjDetail::Dir {
                parent: 1,
                shards: 1,
                default_layout: None,
                mtime_set: Timespec::default(),
            },
            blocks: 8,
            acl: None,
        }
    }

    #[test]
    fn names_show_only_what_is_there() {
        let mut a = dir();
        assert!(names(&a).is_empty());
        a.acl = Some(Box::new(Acl {
            access: Vec::new(),
            default: from_mode(0o750),
        }));
        assert_eq!(names(&a), vec![XATTR_DEFAULT.to_string()]);
        assert_eq!(acl_of(&a).default, from_mode(0o750));
        let mut e = from_mode(0o750);
        e.insert(
            1,
            AclEntry {
                tag: USER,
                perm: 7,
                id: 7,
            },
        );
        e.insert(
            3,
            AclEntry {
                tag: MASK,
                perm: 5,
                id: UNDEFINED_ID,
            },
        );
        a.acl.as_deref_mut().unwrap().access = e;
        chmod(&mut a, 0o700);
        assert_eq!(acl::mode_bits(&acl_of(&a).access), 0o700);
    }
}
