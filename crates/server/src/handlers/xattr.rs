//! What `GetXattr`, `SetXattr`, `ListXattr` and `RemoveXattr` share: extended
//! attributes of an object, stored next to it on its metadata server, with Linux's
//! rules for who may
//! use which namespace: `user.` needs read (write) permission on a file or directory
//! (ENODATA to read, EPERM to write on other kinds; in a sticky directory only its
//! owner writes), `trusted.` is root's (hidden from others), `security.` is read by
//! anyone and written by root, the POSIX ACLs of `system.` are kept with the object
//! (`acl`), anything else is EOPNOTSUPP.

use pvfs_proto::access::{self, MAY_READ, MAY_WRITE};
use pvfs_proto::message::XATTR_NAME_MAX;
use pvfs_proto::{Attr, Creds, Errno, ObjDetail};

use crate::error::{OpError, OpResult};

/// Fails unless `name` may name an attribute.
pub(crate) fn check_name(name: &str) -> OpResult<()> {
    if name.is_empty() || name.contains('\0') {
        return Err(OpError::invalid(Errno::EINVAL, "invalid attribute name"));
    }
    if name.len() > XATTR_NAME_MAX {
        return Err(OpError::invalid(Errno::ERANGE, "attribute name too long"));
    }
    Ok(())
}

/// The error for an attribute an object does not have.
pub(crate) fn no_attr(name: &str) -> OpError {
    OpError::posix(Errno::ENODATA, format!("no attribute {name:?}"))
}

/// Whether `creds` may read (or, with `write`, change) attribute `name` of `attr`.
pub(crate) fn may_use(attr: &Attr, creds: &Creds, name: &str, write: bool) -> OpResult<()> {
    let root = creds.uid == 0;
    let deny = |errno: Errno, why: &str| {
        let kind = if errno == Errno::ENODATA || errno == Errno::EOPNOTSUPP {
            OpError::posix
        } else {
            OpError::denied
        };
        Err(kind(errno, format!("{name}: {why}")))
    };
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
            .map_err(|e| OpError::denied(e, format!("{name}: permission denied")));
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
