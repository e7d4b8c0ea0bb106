//! Capabilities: what a metadata server grants a user on one object, for a while,
//! sealed with a key only servers hold, so that another server (a data server, which
//! holds no modes; the owner of an object, for a step the entry's server authorized)
//! can check it without asking anyone (OrangeFS's signed capabilities).
//!
//! A capability names one handle, the rights granted on it, the user (uid) it was
//! granted to, and when it expires (seconds since the epoch). The seal is a MAC the
//! servers compute with `pvfs-auth` over these fields and the fsid; clients carry
//! capabilities without being able to make or change one.

use crate::types::Handle;
use crate::wire_struct;

/// Rights a capability can grant (a bit set).
pub mod rights {
    /// Read the data (datafiles) of a file.
    pub const READ: u32 = 1;
    /// Write or truncate the data of a file.
    pub const WRITE: u32 = 2;
    /// Remove the object (RemoveObject at its owner, RemoveDatafiles, SealDir): the
    /// caller removed or may remove its last name.
    pub const REMOVE: u32 = 4;
    /// Give the object a new name or a directory a new parent (LinkEntry,
    /// SetParent): the caller may move it from where it is.
    pub const MOVE: u32 = 8;
    /// Get rights on the object at its owner (GetAttr with rights): the caller looked
    /// its name up, with search permission on the directory.
    pub const VISIT: u32 = 16;
    /// Every right.
    pub const ALL: u32 = READ | WRITE | REMOVE | MOVE | VISIT;
    /// Asked with MOVE, never granted: the object goes to another directory (a
    /// directory then needs write permission on itself, for its "..").
    pub const REPARENT: u32 = 32;

    /// The names of the rights in `r`, for messages.
    pub fn describe(r: u32) -> String {
        let names = [
            (READ, "read"),
            (WRITE, "write"),
            (REMOVE, "remove"),
            (MOVE, "move"),
            (VISIT, "visit"),
        ];
        let v: Vec<&str> = names
            .iter()
            .filter(|(b, _)| r & b != 0)
            .map(|(_, n)| *n)
            .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join("+")
        }
    }
}

/// Bytes of a capability's seal.
pub const CAP_MAC_LEN: usize = 16;

/// One capability (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Capability {
    /// The object it is for.
    pub handle: Handle,
    /// What it allows ([`rights`]).
    pub rights: u32,
    /// Whom it was granted to.
    pub uid: u32,
    /// Seconds since the epoch after which it is refused.
    pub expires: u64,
    /// The servers' seal ([`CAP_MAC_LEN`] bytes).
    pub mac: Vec<u8>,
}
wire_struct!(Capability {
    handle: Handle,
    rights: u32,
    uid: u32,
    expires: u64,
    mac: Vec<u8>,
});

impl Capability {
    /// The bytes the seal covers, with the file system's id and, for a datafile with
    /// more than one copy, the servers of its copies in chain order (empty for
    /// anything else): a capability for such a datafile is good only with the
    /// copies it was granted for, so a writer cannot leave one out.
    pub fn sealed_bytes(&self, fsid: u64, copies: &[u32]) -> Vec<u8> {
        let mut b = Vec::with_capacity(48 + 4 * copies.len());
        b.extend_from_slice(b"pvfs capability 1");
        b.extend_from_slice(&fsid.to_le_bytes());
        b.extend_from_slice(&self.handle.to_le_bytes());
        b.extend_from_slice(&self.rights.to_le_bytes());
        b.extend_from_slice(&self.uid.to_le_bytes());
        b.extend_from_slice(&self.expires.to_le_bytes());
        if !copies.is_empty() {
            b.extend_from_slice(b"copies");
            for s in copies {
                b.extend_from_slice(&s.to_le_bytes());
            }
        }
        b
    }

    /// Whether it grants every right in `want`.
    pub fn allows(&self, want: u32) -> bool {
        self.rights & want == want
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};

    #[test]
    fn round_trip_and_sealed_bytes_cover_every_field() {
        let c = Capability {
            handle: 7,
            rights: rights::READ | rights::WRITE,
            uid: 1000,
            expires: 99,
            mac: vec![1; CAP_MAC_LEN],
        };
        assert_eq!(decode::<Capability>(&encode(&c)).unwrap(), c);
        assert!(c.allows(rights::READ));
        assert!(!c.allows(rights::READ | rights::REMOVE));
        let base = c.sealed_bytes(1, &[]);
        for changed in [
            Capability {
                handle: 8,
                ..c.clone()
            },
            Capability {
                rights: rights::READ,
                ..c.clone()
            },
            Capability {
                uid: 0,
                ..c.clone()
            },
            Capability {
                expires: 100,
                ..c.clone()
            },
        ] {
            assert_ne!(changed.sealed_bytes(1, &[]), base);
        }
        assert_ne!(c.sealed_bytes(2, &[]), base);
        assert_ne!(c.sealed_bytes(1, &[0, 1]), base);
        assert_ne!(c.sealed_bytes(1, &[0, 1]), c.sealed_bytes(1, &[1, 0]));
        assert_eq!(rights::describe(rights::READ | rights::MOVE), "read+move");
    }
}
