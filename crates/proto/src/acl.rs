//! POSIX ACLs (the access and default ACLs of `setfacl`/`getfacl`), as Linux has them:
//! the entries, their on-the-wire form in the `system.posix_acl_access` and
//! `system.posix_acl_default` extended attributes, the permission check, and what
//! `chmod` and a create in a directory with a default ACL do to them. Servers and
//! clients share these functions, as they share [`crate::access`].
//!
//! An object keeps an access ACL only when it says more than its permission bits
//! (named users or groups, or a mask): the bits then mirror the owner, mask and other
//! entries, so `ls -l` shows the mask as the group bits, as on Linux.

use crate::codec::{DecodeError, Reader, Wire};
use crate::types::Creds;
use crate::wire_struct;
use crate::Errno;

/// The extended attribute holding an object's access ACL.
pub const XATTR_ACCESS: &str = "system.posix_acl_access";
/// The extended attribute holding a directory's default ACL.
pub const XATTR_DEFAULT: &str = "system.posix_acl_default";

/// Entry tag: the owner (`user::`).
pub const USER_OBJ: u16 = 0x01;
/// Entry tag: a named user (`user:ID:`).
pub const USER: u16 = 0x02;
/// Entry tag: the owning group (`group::`).
pub const GROUP_OBJ: u16 = 0x04;
/// Entry tag: a named group (`group:ID:`).
pub const GROUP: u16 = 0x08;
/// Entry tag: the mask, the most any group class entry grants (`mask::`).
pub const MASK: u16 = 0x10;
/// Entry tag: everyone else (`other::`).
pub const OTHER: u16 = 0x20;
/// The id of entries that name nobody (owner, owning group, mask, other).
pub const UNDEFINED_ID: u32 = u32::MAX;
/// Version in the header of Linux's ACL extended attribute value.
const XATTR_VERSION: u32 = 2;
/// Most entries an ACL may have (a value of at most 64 KiB: 8 bytes each).
pub const MAX_ENTRIES: usize = 8191;

/// One entry of an ACL: a tag, the permission bits (read 4, write 2, execute 1) and
/// the user or group id of a named entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclEntry {
    /// One of [`USER_OBJ`], [`USER`], [`GROUP_OBJ`], [`GROUP`], [`MASK`], [`OTHER`].
    pub tag: u16,
    /// Permission bits, 0-7.
    pub perm: u16,
    /// The uid or gid of a [`USER`] or [`GROUP`] entry, [`UNDEFINED_ID`] otherwise.
    pub id: u32,
}
wire_struct!(AclEntry {
    tag: u16,
    perm: u16,
    id: u32,
});

/// An object's ACLs, kept with its attributes (`Attr::acl`), so every server and
/// client that checks a permission has them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acl {
    /// The access ACL, every entry, in order; empty when the permission bits say
    /// everything.
    pub access: Vec<AclEntry>,
    /// A directory's default ACL, every entry, in order: given to what is created in
    /// it. Empty when it has none.
    pub default: Vec<AclEntry>,
}
wire_struct!(Acl {
    access: Vec<AclEntry>,
    default: Vec<AclEntry>,
});

impl Acl {
    /// Whether it holds nothing (no ACL beyond the permission bits).
    pub fn is_empty(&self) -> bool {
        self.access.is_empty() && self.default.is_empty()
    }
}

fn base(tag: u16, perm: u32) -> AclEntry {
    AclEntry {
        tag,
        perm: (perm & 7) as u16,
        id: UNDEFINED_ID,
    }
}

/// The ACL that says what permission bits `mode` say (owner, owning group, other).
pub fn from_mode(mode: u32) -> Vec<AclEntry> {
    vec![
        base(USER_OBJ, mode >> 6),
        base(GROUP_OBJ, mode >> 3),
        base(OTHER, mode),
    ]
}

/// Checks an ACL as Linux does (`posix_acl_valid`): one owner, owning group and other
/// entry, named entries with distinct ids, a mask when there is a named entry, in
/// order (by tag, then id), permission bits 0-7. EINVAL otherwise.
pub fn validate(entries: &[AclEntry]) -> Result<(), Errno> {
    let (mut user_obj, mut group_obj, mut mask, mut other, mut named) = (0, 0, 0, 0, 0);
    let mut prev: Option<(u16, u32)> = None;
    for e in entries {
        if e.perm & !7 != 0 {
            return Err(Errno::EINVAL);
        }
        match e.tag {
            USER_OBJ => user_obj += 1,
            GROUP_OBJ => group_obj += 1,
            MASK => mask += 1,
            OTHER => other += 1,
            USER | GROUP => {
                named += 1;
                if e.id == UNDEFINED_ID {
                    return Err(Errno::EINVAL);
                }
            }
            _ => return Err(Errno::EINVAL),
        }
        let key = (
            e.tag,
            if matches!(e.tag, USER | GROUP) {
                e.id
            } else {
                0
            },
        );
        if prev.is_some_and(|p| p >= key) {
            return Err(Errno::EINVAL);
        }
        prev = Some(key);
    }
    let ok =
        user_obj == 1 && group_obj == 1 && other == 1 && mask <= 1 && (named == 0 || mask == 1);
    if ok {
        Ok(())
    } else {
        Err(Errno::EINVAL)
    }
}

/// Whether an ACL says no more than permission bits (owner, owning group, other).
pub fn is_minimal(entries: &[AclEntry]) -> bool {
    entries.len() == 3
}

/// The permission bits an ACL shows: the owner's, the mask's (or the owning group's
/// without a mask), other's.
pub fn mode_bits(entries: &[AclEntry]) -> u32 {
    let perm = |tag: u16| {
        entries
            .iter()
            .find(|e| e.tag == tag)
            .map(|e| u32::from(e.perm))
    };
    let group = perm(MASK).or(perm(GROUP_OBJ)).unwrap_or(0);
    (perm(USER_OBJ).unwrap_or(0) << 6) | (group << 3) | perm(OTHER).unwrap_or(0)
}

/// `chmod` of an object with ACL `entries` to permission bits `mode`: the owner's,
/// the mask's (or the owning group's without a mask) and other's entries take the
/// new bits (Linux's `posix_acl_chmod`).
pub fn chmod(entries: &mut [AclEntry], mode: u32) {
    let has_mask = entries.iter().any(|e| e.tag == MASK);
    for e in entries.iter_mut() {
        match e.tag {
            USER_OBJ => e.perm = ((mode >> 6) & 7) as u16,
            MASK => e.perm = ((mode >> 3) & 7) as u16,
            GROUP_OBJ if !has_mask => e.perm = ((mode >> 3) & 7) as u16,
            OTHER => e.perm = (mode & 7) as u16,
            _ => {}
        }
    }
}

/// What an object created with permission bits `mode` (07777) in a directory with
/// default ACL `default` gets: its access ACL (none when it says no more than the
/// bits) and its bits, each narrowed by the other as Linux's `posix_acl_create` does.
/// The umask does not apply then.
pub fn inherit(default: &[AclEntry], mode: u32) -> (Vec<AclEntry>, u32) {
    let mut acl = default.to_vec();
    let mut mode = mode;
    let has_mask = acl.iter().any(|e| e.tag == MASK);
    for e in acl.iter_mut() {
        let p = u32::from(e.perm);
        match e.tag {
            USER_OBJ => {
                let p = p & (mode >> 6);
                e.perm = p as u16;
                mode &= (p << 6) | !0o700;
            }
            OTHER => {
                let p = p & mode;
                e.perm = p as u16;
                mode &= p | !0o007;
            }
            MASK => {
                let p = p & (mode >> 3);
                e.perm = p as u16;
                mode &= (p << 3) | !0o070;
            }
            GROUP_OBJ if !has_mask => {
                let p = p & (mode >> 3);
                e.perm = p as u16;
                mode &= (p << 3) | !0o070;
            }
            _ => {}
        }
    }
    if is_minimal(&acl) {
        acl.clear();
    }
    (acl, mode)
}

/// Whether `creds` (not root: root's rules are the caller's) may do `want` (a mix of
/// `access::MAY_*` bits) to an object owned by `uid`/`gid` with access ACL `entries`
/// (Linux's `posix_acl_permission`): the owner entry for the owner; else a named
/// user entry, within the mask; else any group class entry that matches the
/// caller's groups and grants it all, within the mask (EACCES if some match and none
/// does); else other's.
pub fn permits(entries: &[AclEntry], uid: u32, gid: u32, creds: &Creds, want: u32) -> bool {
    let mask = entries
        .iter()
        .find(|e| e.tag == MASK)
        .map_or(7, |e| u32::from(e.perm));
    let grants = |perm: u16, masked: bool| {
        let p = u32::from(perm) & if masked { mask } else { 7 };
        p & want == want
    };
    let in_group = |g: u32| creds.gid == g || creds.groups.contains(&g);
    let mut group_found = false;
    for e in entries {
        match e.tag {
            USER_OBJ if creds.uid == uid => return grants(e.perm, false),
            USER if creds.uid == e.id => return grants(e.perm, true),
            GROUP_OBJ if in_group(gid) => {
                group_found = true;
                if grants(e.perm, true) {
                    return true;
                }
            }
            GROUP if in_group(e.id) => {
                group_found = true;
                if grants(e.perm, true) {
                    return true;
                }
            }
            OTHER if !group_found => return grants(e.perm, false),
            _ => {}
        }
    }
    false
}

/// The entries of ACL attribute `name` ([`XATTR_ACCESS`] or [`XATTR_DEFAULT`]) in
/// `acl` (empty: none).
pub fn named<'a>(acl: Option<&'a Acl>, name: &str) -> &'a [AclEntry] {
    match acl {
        Some(a) if name == XATTR_ACCESS => &a.access,
        Some(a) => &a.default,
        None => &[],
    }
}

/// An ACL in the form of Linux's `system.posix_acl_*` extended attribute values:
/// version 2 (u32), then each entry's tag (u16), permissions (u16) and id (u32), all
/// little-endian.
pub fn to_xattr(entries: &[AclEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 8 * entries.len());
    out.extend_from_slice(&XATTR_VERSION.to_le_bytes());
    for e in entries {
        out.extend_from_slice(&e.tag.to_le_bytes());
        out.extend_from_slice(&e.perm.to_le_bytes());
        out.extend_from_slice(&e.id.to_le_bytes());
    }
    out
}

/// Parses and checks ([`validate`]) an extended attribute value in Linux's form
/// ([`to_xattr`]); EINVAL for anything else (EOPNOTSUPP for another version, as
/// Linux).
pub fn from_xattr(value: &[u8]) -> Result<Vec<AclEntry>, Errno> {
    if value.len() < 4 || !(value.len() - 4).is_multiple_of(8) {
        return Err(Errno::EINVAL);
    }
    let version = u32::from_le_bytes([value[0], value[1], value[2], value[3]]);
    if version != XATTR_VERSION {
        return Err(Errno::EOPNOTSUPP);
    }
    let n = (value.len() - 4) / 8;
    if n > MAX_ENTRIES {
        return Err(Errno::EINVAL);
    }
    let entries: Vec<AclEntry> = value[4..]
        .chunks_exact(8)
        .map(|c| {
            let tag = u16::from_le_bytes([c[0], c[1]]);
            AclEntry {
                tag,
                perm: u16::from_le_bytes([c[2], c[3]]),
                // Entries that name nobody may carry anything there.
                id: if matches!(tag, USER | GROUP) {
                    u32::from_le_bytes([c[4], c[5], c[6], c[7]])
                } else {
                    UNDEFINED_ID
                },
            }
        })
        .collect();
    validate(&entries)?;
    Ok(entries)
}

/// Decodes an optional boxed ACL (the form `Attr` carries).
impl Wire for Box<Acl> {
    const MIN_SIZE: usize = Acl::MIN_SIZE;
    fn put(&self, out: &mut Vec<u8>) {
        (**self).put(out);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Box::new(Acl::get(r)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `permits` is asked for, in the rwx bits of an entry's `perm` (the values
    /// of `access::MAY_READ` and `access::MAY_WRITE`, which build on this module).
    const MAY_READ: u32 = 4;
    const MAY_WRITE: u32 = 2;

    fn e(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }

    fn creds(uid: u32, gid: u32, groups: &[u32]) -> Creds {
        Creds {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    fn acl() -> Vec<AclEntry> {
        vec![
            e(USER_OBJ, 6, UNDEFINED_ID),
            e(USER, 6, 1001),
            e(USER, 0, 1002),
            e(GROUP_OBJ, 4, UNDEFINED_ID),
            e(GROUP, 6, 50),
            e(MASK, 4, UNDEFINED_ID),
            e(OTHER, 4, UNDEFINED_ID),
        ]
    }

    #[test]
    fn xattr_form_round_trips_and_bad_ones_are_refused() {
        let a = acl();
        validate(&a).unwrap();
        assert_eq!(from_xattr(&to_xattr(&a)).unwrap(), a);
        let mut unsorted = a.clone();
        unsorted.swap(1, 2);
        assert_eq!(from_xattr(&to_xattr(&unsorted)), Err(Errno::EINVAL));
        let no_mask: Vec<AclEntry> = a.iter().copied().filter(|x| x.tag != MASK).collect();
        assert_eq!(validate(&no_mask), Err(Errno::EINVAL));
        assert_eq!(validate(&from_mode(0o640)), Ok(()));
        assert_eq!(from_xattr(&[2, 0, 0]), Err(Errno::EINVAL));
        let mut v1 = to_xattr(&a);
        v1[0] = 1;
        assert_eq!(from_xattr(&v1), Err(Errno::EOPNOTSUPP));
        let mut dup = a.clone();
        dup[2].id = 1001;
        assert_eq!(validate(&dup), Err(Errno::EINVAL));
    }

    #[test]
    fn permission_follows_the_posix_algorithm() {
        let a = acl();
        let (owner, group) = (1000, 100);
        let ok = |c: Creds, want| permits(&a, owner, group, &c, want);
        // The owner entry for the owner, unmasked.
        assert!(ok(creds(1000, 1, &[]), MAY_READ | MAY_WRITE));
        // A named user within the mask (rw- & r-- = r--).
        assert!(ok(creds(1001, 1, &[]), MAY_READ));
        assert!(!ok(creds(1001, 1, &[]), MAY_WRITE));
        // A named user with nothing is refused although other may read.
        assert!(!ok(creds(1002, 1, &[]), MAY_READ));
        // A group member: any matching group entry that grants it.
        assert!(ok(creds(2000, 1, &[50]), MAY_READ));
        assert!(!ok(creds(2000, 1, &[50]), MAY_WRITE));
        // A member of a group whose entries do not grant it: refused, not other.
        let b = vec![
            e(USER_OBJ, 6, UNDEFINED_ID),
            e(GROUP_OBJ, 0, UNDEFINED_ID),
            e(OTHER, 4, UNDEFINED_ID),
        ];
        assert!(!permits(&b, owner, group, &creds(2000, 100, &[]), MAY_READ));
        assert!(permits(&b, owner, group, &creds(2000, 7, &[]), MAY_READ));
    }

    #[test]
    fn chmod_and_inheritance_keep_bits_and_entries_in_step() {
        let mut a = acl();
        chmod(&mut a, 0o751);
        assert_eq!(mode_bits(&a), 0o751);
        assert_eq!(
            a[3],
            e(GROUP_OBJ, 4, UNDEFINED_ID),
            "the owning group keeps its own"
        );
        // A file created 0666 where the default ACL grants the group rw- via a mask.
        let (acc, mode) = inherit(&acl(), 0o666);
        assert_eq!(mode, 0o644);
        assert_eq!(mode_bits(&acc), 0o644);
        assert!(acc.iter().any(|x| x.tag == USER && x.id == 1001));
        // A minimal default ACL gives bits only.
        let (acc, mode) = inherit(&from_mode(0o750), 0o777);
        assert!(acc.is_empty());
        assert_eq!(mode, 0o750);
    }
}
