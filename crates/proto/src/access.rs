//! POSIX permission rules, in one place: the servers decide with them, and every
//! interface that answers before asking a server (the preload library, the C library)
//! uses the same functions, so each caller gets the answer the kernel would give it.
//!
//! Root (uid 0) may read and write anything and search any directory, and execute a
//! file only when some execute bit is set (as Linux's capability rules give root).
//! Everyone else gets the owner, group or other bits, in that order: the first class
//! the caller falls in decides, even when a later one would allow more.

use crate::attr::Attr;
use crate::types::{Creds, SetAttr};
use crate::Errno;

/// Execute a file, search a directory.
pub const MAY_EXEC: u32 = 1;
/// Write a file, add or remove names in a directory.
pub const MAY_WRITE: u32 = 2;
/// Read a file, list a directory.
pub const MAY_READ: u32 = 4;

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;

/// Whether `creds` is in group `gid` (primary or supplementary).
pub fn in_group(creds: &Creds, gid: u32) -> bool {
    creds.gid == gid || creds.groups.contains(&gid)
}

/// Whether `creds` may do `want` (a mix of [`MAY_READ`], [`MAY_WRITE`], [`MAY_EXEC`])
/// to an object with permission bits `mode`, owner `uid` and group `gid`.
pub fn permitted(mode: u32, uid: u32, gid: u32, is_dir: bool, creds: &Creds, want: u32) -> bool {
    if creds.uid == 0 {
        return want & MAY_EXEC == 0 || is_dir || mode & 0o111 != 0;
    }
    let bits = if creds.uid == uid {
        (mode >> 6) & 7
    } else if in_group(creds, gid) {
        (mode >> 3) & 7
    } else {
        mode & 7
    };
    bits & want == want
}

/// Whether `creds` may do `want` to an object with attributes `attr`: [`permitted`],
/// or with an access ACL the POSIX ACL rules (`crate::acl::permits`; root's rules
/// stay root's).
pub fn allows(attr: &Attr, creds: &Creds, want: u32) -> bool {
    let acl = attr
        .acl
        .as_deref()
        .map(|a| a.access.as_slice())
        .filter(|a| !a.is_empty());
    match acl {
        Some(entries) if creds.uid != 0 => {
            crate::acl::permits(entries, attr.uid, attr.gid, creds, want)
        }
        _ => permitted(attr.mode, attr.uid, attr.gid, attr.is_dir(), creds, want),
    }
}

/// [`allows`], as a result; EACCES when not.
pub fn check(attr: &Attr, creds: &Creds, want: u32) -> Result<(), Errno> {
    if allows(attr, creds, want) {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// Whether `creds` may remove (unlink, rmdir, rename away or over) an entry of
/// directory `dir` that names an object owned by `victim_uid`: write and search
/// permission on the directory (EACCES), and in a sticky directory only the owner of
/// the directory or of the object, or root (EPERM, as Linux answers).
pub fn may_delete(dir: &Attr, victim_uid: u32, creds: &Creds) -> Result<(), Errno> {
    check(dir, creds, MAY_WRITE | MAY_EXEC)?;
    if dir.mode & S_ISVTX != 0 && creds.uid != 0 && creds.uid != dir.uid && creds.uid != victim_uid
    {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// Whether `creds` may give object `obj` another name (link(2)): never a directory
/// (EPERM); otherwise, as Linux with protected hard links, root, the owner, or someone
/// who may read and write a regular file that is neither set-user-ID nor executable
/// set-group-ID (EPERM otherwise).
pub fn may_link(obj: &Attr, creds: &Creds) -> Result<(), Errno> {
    if obj.is_dir() {
        return Err(Errno::EPERM);
    }
    if creds.uid == 0 || creds.uid == obj.uid {
        return Ok(());
    }
    let safe_source = matches!(obj.detail, crate::attr::ObjDetail::File { .. })
        && obj.mode & S_ISUID == 0
        && obj.mode & (S_ISGID | 0o010) != (S_ISGID | 0o010);
    if safe_source && check(obj, creds, MAY_READ | MAY_WRITE).is_ok() {
        return Ok(());
    }
    Err(Errno::EPERM)
}

/// Whether `creds` may change what `set` changes of an object: chmod by the owner or
/// root; chown to another owner by root only; chgrp by root, or by the owner to a
/// group it is in; explicit times by the owner or root; times set to now (`set.now`)
/// also by anyone who may write the object (EPERM, or EACCES for the last, as Linux).
pub fn may_setattr(attr: &Attr, set: &SetAttr, creds: &Creds) -> Result<(), Errno> {
    if creds.uid == 0 {
        return Ok(());
    }
    let owner = creds.uid == attr.uid;
    if set.mode.is_some() && !owner {
        return Err(Errno::EPERM);
    }
    // Naming the owner it has is a no-op the owner may do; anything else is root's.
    if set.uid.is_some_and(|u| !(owner && u == attr.uid)) {
        return Err(Errno::EPERM);
    }
    if set
        .gid
        .is_some_and(|g| !(owner && (g == attr.gid || in_group(creds, g))))
    {
        return Err(Errno::EPERM);
    }
    if set.atime.is_some() || set.mtime.is_some() {
        if set.now {
            if !owner && check(attr, creds, MAY_WRITE).is_err() {
                return Err(Errno::EACCES);
            }
        } else if !owner {
            return Err(Errno::EPERM);
        }
    }
    Ok(())
}

/// The permission bits after a change of `set` by `creds` (see [`may_setattr`]): a
/// mode set by someone who is not root and not in the object's group loses its
/// set-group-ID bit; a change of owner or group of a non-directory drops set-user-ID,
/// and set-group-ID when the group may execute (the kernel's rules).
pub fn mode_after_setattr(attr: &Attr, set: &SetAttr, creds: &Creds) -> u32 {
    let gid = set.gid.unwrap_or(attr.gid);
    let mut mode = set.mode.map_or(attr.mode, |m| m & 0o7777);
    if set.mode.is_some() && creds.uid != 0 && !in_group(creds, gid) {
        mode &= !S_ISGID;
    }
    if (set.uid.is_some() || set.gid.is_some()) && !attr.is_dir() {
        mode &= !S_ISUID;
        if mode & 0o010 != 0 {
            mode &= !S_ISGID;
        }
    }
    mode
}

/// The permission bits of a file after it is written by `creds`: set-user-ID and
/// (with group execute) set-group-ID are dropped unless `creds` is root.
pub fn mode_after_write(mode: u32, creds: &Creds) -> u32 {
    if creds.uid == 0 {
        return mode;
    }
    let mut m = mode & !S_ISUID;
    if m & 0o010 != 0 {
        m &= !S_ISGID;
    }
    m
}

/// Whether a write by `creds` changes the mode (see [`mode_after_write`]).
pub fn write_drops_privileges(mode: u32, creds: &Creds) -> bool {
    mode_after_write(mode, creds) != mode
}

/// The group and mode of a new object made by `creds` in directory `parent`: the
/// parent's group when it is set-group-ID (and directories inherit the bit), else the
/// caller's; a non-root caller outside the new object's group loses set-group-ID on
/// a file (the BSD group rule Linux follows).
pub fn new_object_group(parent: &Attr, creds: &Creds, mode: u32, is_dir: bool) -> (u32, u32) {
    let mut mode = mode & 0o7777;
    let gid = if parent.mode & S_ISGID != 0 {
        if is_dir {
            mode |= S_ISGID;
        }
        parent.gid
    } else {
        creds.gid
    };
    if !is_dir && mode & S_ISGID != 0 && creds.uid != 0 && !in_group(creds, gid) {
        mode &= !S_ISGID;
    }
    (gid, mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::ObjDetail;
    use crate::types::Timespec;

    fn creds(uid: u32, gid: u32, groups: &[u32]) -> Creds {
        Creds {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    fn obj(mode: u32, uid: u32, gid: u32, dir: bool) -> Attr {
        Attr {
            handle: 1,
            mode,
            uid,
            gid,
            nlink: 1,
            size: 0,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            detail: if dir {
                ObjDetail::Dir {
                    parent: 1,
                    shards: 1,
                    default_layout: None,
                    mtime_set: Timespec::default(),
                }
            } else {
                ObjDetail::Symlink { target: "x".into() }
            },
            blocks: 0,
            acl: None,
        }
    }

    #[test]
    fn classes_decide_in_order_and_root_is_special() {
        let f = obj(0o604, 10, 20, false);
        assert!(check(&f, &creds(10, 1, &[]), MAY_READ | MAY_WRITE).is_ok());
        // The group class decides for a member, even though "other" could read.
        assert_eq!(check(&f, &creds(11, 20, &[]), MAY_READ), Err(Errno::EACCES));
        assert_eq!(
            check(&f, &creds(11, 1, &[20]), MAY_READ),
            Err(Errno::EACCES)
        );
        assert!(check(&f, &creds(11, 1, &[]), MAY_READ).is_ok());
        assert_eq!(check(&f, &creds(11, 1, &[]), MAY_WRITE), Err(Errno::EACCES));
        // Root reads and writes anything, executes only what someone may execute.
        assert!(check(
            &obj(0, 10, 20, false),
            &creds(0, 0, &[]),
            MAY_READ | MAY_WRITE
        )
        .is_ok());
        assert_eq!(
            check(&obj(0o644, 10, 20, false), &creds(0, 0, &[]), MAY_EXEC),
            Err(Errno::EACCES)
        );
        assert!(check(&obj(0o010, 10, 20, false), &creds(0, 0, &[]), MAY_EXEC).is_ok());
        assert!(check(&obj(0, 10, 20, true), &creds(0, 0, &[]), MAY_EXEC).is_ok());
    }

    #[test]
    fn sticky_directories_protect_other_users_names() {
        let tmp = obj(0o1777, 0, 0, true);
        let alice = creds(1000, 1000, &[]);
        assert!(may_delete(&tmp, 1000, &alice).is_ok());
        assert_eq!(may_delete(&tmp, 1001, &alice), Err(Errno::EPERM));
        assert!(may_delete(&tmp, 1001, &creds(0, 0, &[])).is_ok());
        let owned = obj(0o1777, 1000, 0, true);
        assert!(may_delete(&owned, 1001, &alice).is_ok());
        let closed = obj(0o755, 0, 0, true);
        assert_eq!(may_delete(&closed, 1000, &alice), Err(Errno::EACCES));
    }

    #[test]
    fn hard_links_follow_linux_protected_hardlinks() {
        let file = |mode: u32| Attr {
            detail: ObjDetail::File {
                layout: crate::layout::Layout {
                    stripe_size: 65536,
                    replicas: 1,
                    datafiles: vec![],
                    width: 1,
                },
            },
            ..obj(mode, 1000, 100, false)
        };
        let other = creds(1001, 1001, &[]);
        assert!(may_link(&file(0o600), &creds(1000, 1, &[])).is_ok());
        assert!(may_link(&file(0o600), &creds(0, 0, &[])).is_ok());
        assert!(may_link(&file(0o666), &other).is_ok());
        assert_eq!(may_link(&file(0o644), &other), Err(Errno::EPERM));
        assert_eq!(may_link(&file(0o4666), &other), Err(Errno::EPERM));
        assert_eq!(may_link(&file(0o2676), &other), Err(Errno::EPERM));
        assert!(may_link(&file(0o2666), &other).is_ok());
        // Someone else's symlink: not a regular file.
        assert_eq!(
            may_link(&obj(0o777, 1000, 100, false), &other),
            Err(Errno::EPERM)
        );
        assert_eq!(
            may_link(&obj(0o777, 1000, 100, true), &creds(0, 0, &[])),
            Err(Errno::EPERM)
        );
    }

    #[test]
    fn setattr_follows_the_ownership_rules() {
        let f = obj(0o6755, 1000, 100, false);
        let owner = creds(1000, 100, &[27]);
        let other = creds(1001, 100, &[]);
        let chmod = SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        assert!(may_setattr(&f, &chmod, &owner).is_ok());
        assert_eq!(may_setattr(&f, &chmod, &other), Err(Errno::EPERM));
        let chown = SetAttr {
            uid: Some(1001),
            ..Default::default()
        };
        assert_eq!(may_setattr(&f, &chown, &owner), Err(Errno::EPERM));
        assert!(may_setattr(&f, &chown, &creds(0, 0, &[])).is_ok());
        let chgrp = |g| SetAttr {
            gid: Some(g),
            ..Default::default()
        };
        assert!(may_setattr(&f, &chgrp(27), &owner).is_ok());
        assert!(may_setattr(&f, &chgrp(100), &owner).is_ok());
        assert_eq!(may_setattr(&f, &chgrp(28), &owner), Err(Errno::EPERM));
        assert_eq!(may_setattr(&f, &chgrp(100), &other), Err(Errno::EPERM));
        let now = SetAttr {
            atime: Some(Timespec::default()),
            mtime: Some(Timespec::default()),
            now: true,
            ..Default::default()
        };
        let writable = obj(0o666, 1000, 100, false);
        assert!(may_setattr(&writable, &now, &other).is_ok());
        assert_eq!(may_setattr(&f, &now, &other), Err(Errno::EACCES));
        let explicit = SetAttr { now: false, ..now };
        assert_eq!(may_setattr(&writable, &explicit, &other), Err(Errno::EPERM));
        // chown drops set-user-ID (and set-group-ID with group execute), even by root.
        assert_eq!(mode_after_setattr(&f, &chown, &creds(0, 0, &[])), 0o0755);
        // chmod g+s by someone outside the group keeps the rest but not the bit.
        let sgid = SetAttr {
            mode: Some(0o2755),
            ..Default::default()
        };
        assert_eq!(
            mode_after_setattr(&obj(0o755, 1000, 50, false), &sgid, &owner),
            0o755
        );
        assert_eq!(
            mode_after_setattr(&obj(0o755, 1000, 27, false), &sgid, &owner),
            0o2755
        );
    }

    #[test]
    fn writes_drop_privileges_and_new_objects_take_setgid_groups() {
        let alice = creds(1000, 1000, &[]);
        assert_eq!(mode_after_write(0o6755, &alice), 0o0755);
        assert_eq!(mode_after_write(0o6745, &alice), 0o2745);
        assert_eq!(mode_after_write(0o6755, &creds(0, 0, &[])), 0o6755);
        assert!(!write_drops_privileges(0o755, &alice));
        let shared = obj(0o2775, 0, 500, true);
        assert_eq!(
            new_object_group(&shared, &alice, 0o755, true),
            (500, 0o2755)
        );
        assert_eq!(
            new_object_group(&shared, &alice, 0o2755, false),
            (500, 0o755)
        );
        let plain = obj(0o755, 0, 0, true);
        assert_eq!(
            new_object_group(&plain, &alice, 0o644, false),
            (1000, 0o644)
        );
    }
}
