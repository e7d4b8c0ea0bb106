//! Byte-range locks: the types the lock requests carry and the range arithmetic that
//! servers (their lock tables) and clients (their record of what they hold, for
//! reclaims) share, so both cut, merge and compare ranges the same way.
//!
//! A range is `start ..= end` in bytes, `end` inclusive; [`TO_EOF`] as `end` means
//! "to the end of the file, however far it grows" (`l_len` 0 in `struct flock`). Locks
//! belong to an *owner*: a process for POSIX record locks, an open file description
//! for OFD locks and `flock`. An owner's locks never conflict with each other; a new
//! lock of an owner replaces what the owner held in its range (upgrade, downgrade,
//! split), and neighbouring or overlapping locks of one owner and one type merge, as
//! POSIX says (`docs/locks.md`).

use crate::codec::{DecodeError, Reader, Wire};
use crate::wire_struct;

/// The `end` of a range that reaches to the end of the file, whatever its size.
pub const TO_EOF: u64 = u64::MAX;

/// `Lock` flag: wait for the lock (F_SETLKW, `flock` without LOCK_NB).
pub const LOCK_WAIT: u32 = 1;
/// `Lock` flag: a lock held before the server restarted, taken again in its grace period.
pub const LOCK_RECLAIM: u32 = 2;
/// `Lock` flag: a POSIX record lock (per process): a wait is checked for deadlocks.
/// Without it the lock is an OFD lock or a `flock` (per open file description),
/// whose waits are not checked, as on Linux.
pub const LOCK_POSIX: u32 = 4;
/// `Lock` and `Unlock` flag: an appender's lock, kept apart from the locks programs
/// take (it never conflicts with them, and `TestLock` does not see it): while a
/// client holds it on a whole file, no other appender writes, so it reads the end
/// of the file and writes there (`O_APPEND` between clients, `docs/locks.md`).
pub const LOCK_APPEND: u32 = 8;
/// Every `Lock` flag (others are refused).
pub const LOCK_FLAGS: u32 = LOCK_WAIT | LOCK_RECLAIM | LOCK_POSIX | LOCK_APPEND;

/// Shared (read) or exclusive (write).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockType {
    /// Shared: many owners may hold read locks on the same bytes (F_RDLCK, LOCK_SH).
    Read,
    /// Exclusive: no other owner may hold any lock on the bytes (F_WRLCK, LOCK_EX).
    Write,
}

impl LockType {
    /// Whether a lock of this type and one of `other` held by another owner on the
    /// same bytes exclude each other (anything with a write lock).
    pub fn conflicts(self, other: LockType) -> bool {
        self == LockType::Write || other == LockType::Write
    }

    /// `F_RDLCK` or `F_WRLCK`.
    pub fn to_fcntl(self) -> i32 {
        match self {
            LockType::Read => libc::F_RDLCK,
            LockType::Write => libc::F_WRLCK,
        }
    }
}

impl Wire for LockType {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(match self {
            LockType::Read => 1,
            LockType::Write => 2,
        });
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            1 => Ok(LockType::Read),
            2 => Ok(LockType::Write),
            t => Err(DecodeError::UnknownTag {
                what: "lock type",
                tag: u32::from(t),
            }),
        }
    }
}

/// Who holds a lock, as a client names it: the client (its random id) and the owner
/// within it (a process, an open file description). The server adds who the
/// connection proved to be ([`LockKey`]), so no client acts on another's locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockOwner {
    /// The client's random id (the same for all its requests and leases).
    pub client: u64,
    /// The owner within the client.
    pub owner: u64,
}
wire_struct!(LockOwner {
    client: u64,
    owner: u64,
});

/// A lock owner as servers know it: the authenticated identity of the connection
/// that named it (`who`: 0 for a node holding the file system's key, `1 << 32 | uid`
/// for a user proven by MUNGE), then the client's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    /// The connection's proven identity.
    pub who: u64,
    /// The client's random id.
    pub client: u64,
    /// The owner within the client.
    pub owner: u64,
}
wire_struct!(LockKey {
    who: u64,
    client: u64,
    owner: u64,
});

impl LockKey {
    /// The key of `owner` on a connection proven as `who`.
    pub fn new(who: u64, owner: LockOwner) -> LockKey {
        LockKey {
            who,
            client: owner.client,
            owner: owner.owner,
        }
    }

    /// The `who` of a key-holding node.
    pub const TRUSTED: u64 = 0;

    /// The `who` of user `uid` proven by MUNGE.
    pub fn user(uid: u32) -> u64 {
        1 << 32 | u64::from(uid)
    }
}

/// The lock that stands in the way, answered to `TestLock` (F_GETLK).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockConflict {
    /// Its type.
    pub typ: LockType,
    /// Its first byte.
    pub start: u64,
    /// Its last byte ([`TO_EOF`]: to the end of the file).
    pub end: u64,
    /// The process that took it, as its client said (meaningful on that client only).
    pub pid: u32,
    /// A POSIX record lock (else an OFD lock or `flock`, which have no process).
    pub posix: bool,
    /// Held by the client that asks (another process or description of it), so its
    /// `pid` means something there; another client's process ids do not.
    pub same_client: bool,
}
wire_struct!(LockConflict {
    typ: LockType,
    start: u64,
    end: u64,
    pid: u32,
    posix: bool,
    same_client: bool,
});

/// One lock of one owner on a range of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment<O> {
    /// Who holds it.
    pub owner: O,
    /// Shared or exclusive.
    pub typ: LockType,
    /// First byte.
    pub start: u64,
    /// Last byte, inclusive ([`TO_EOF`]: to the end of the file).
    pub end: u64,
    /// The process that took it (for F_GETLK).
    pub pid: u32,
    /// A POSIX record lock (else OFD or `flock`).
    pub posix: bool,
}

/// Whether ranges `a` and `b` (inclusive) share a byte.
pub fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// Whether ranges `a` and `b` touch without a gap (overlap or are adjacent).
fn touches(a: (u64, u64), b: (u64, u64)) -> bool {
    overlaps(a, b) || a.1.checked_add(1) == Some(b.0) || b.1.checked_add(1) == Some(a.0)
}

/// The first lock in `segs` that keeps `owner` from taking `typ` on `start ..= end`.
pub fn conflict<'a, O: PartialEq>(
    segs: &'a [Segment<O>],
    owner: &O,
    typ: LockType,
    start: u64,
    end: u64,
) -> Option<&'a Segment<O>> {
    segs.iter().find(|s| {
        s.owner != *owner && s.typ.conflicts(typ) && overlaps((s.start, s.end), (start, end))
    })
}

/// Sets what `owner` holds on `start ..= end`: a lock of `typ` (replacing the owner's
/// locks there, merged with its touching locks of the same type), or nothing
/// (`typ` None: an unlock, which may split a lock in two). Other owners' locks are
/// untouched: the caller checks conflicts first ([`conflict`]).
pub fn set<O: PartialEq + Clone>(
    segs: &mut Vec<Segment<O>>,
    owner: &O,
    typ: Option<LockType>,
    start: u64,
    end: u64,
    pid: u32,
    posix: bool,
) {
    debug_assert!(start <= end, "a lock range ends before it starts");
    let (mut lo, mut hi) = (start, end);
    let mut kept = Vec::with_capacity(segs.len() + 2);
    for s in segs.drain(..) {
        if s.owner != *owner || !touches((s.start, s.end), (start, end)) {
            kept.push(s);
            continue;
        }
        if Some(s.typ) == typ {
            // Same type, touching: merge into the new lock.
            lo = lo.min(s.start);
            hi = hi.max(s.end);
            continue;
        }
        if !overlaps((s.start, s.end), (start, end)) {
            // Adjacent, of another type (or an unlock next to it): stays as is.
            kept.push(s);
            continue;
        }
        // Overlapping, another type or an unlock: keep what lies outside the range.
        if s.start < start {
            kept.push(Segment {
                end: start - 1,
                ..s.clone()
            });
        }
        if s.end > end {
            kept.push(Segment {
                start: end + 1,
                ..s
            });
        }
    }
    if let Some(typ) = typ {
        kept.push(Segment {
            owner: owner.clone(),
            typ,
            start: lo,
            end: hi,
            pid,
            posix,
        });
    }
    *segs = kept;
}

/// The locks `owner` holds in `segs`.
pub fn held_by<'a, O: PartialEq>(
    segs: &'a [Segment<O>],
    owner: &'a O,
) -> impl Iterator<Item = &'a Segment<O>> + 'a {
    segs.iter().filter(move |s| s.owner == *owner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seg(owner: u8, typ: LockType, start: u64, end: u64) -> Segment<u8> {
        Segment {
            owner,
            typ,
            start,
            end,
            pid: 0,
            posix: true,
        }
    }

    fn sorted(mut v: Vec<Segment<u8>>) -> Vec<(u8, LockType, u64, u64)> {
        v.sort_by_key(|s| (s.owner, s.start));
        v.into_iter()
            .map(|s| (s.owner, s.typ, s.start, s.end))
            .collect()
    }

    use LockType::{Read as R, Write as W};

    #[test]
    fn merge_split_upgrade_unlock() {
        let mut v = Vec::new();
        set(&mut v, &1, Some(R), 0, 9, 0, true);
        set(&mut v, &1, Some(R), 10, 19, 0, true);
        assert_eq!(sorted(v.clone()), vec![(1, R, 0, 19)], "adjacent merge");
        set(&mut v, &1, Some(W), 5, 7, 0, true);
        assert_eq!(
            sorted(v.clone()),
            vec![(1, R, 0, 4), (1, W, 5, 7), (1, R, 8, 19)],
            "upgrade of a middle piece splits"
        );
        set(&mut v, &1, None, 0, 5, 0, true);
        assert_eq!(sorted(v.clone()), vec![(1, W, 6, 7), (1, R, 8, 19)]);
        set(&mut v, &1, Some(R), 6, 7, 0, true);
        assert_eq!(sorted(v.clone()), vec![(1, R, 6, 19)], "downgrade merges");
        set(&mut v, &2, Some(R), 0, TO_EOF, 0, true);
        set(&mut v, &1, None, 0, TO_EOF, 0, true);
        assert_eq!(sorted(v.clone()), vec![(2, R, 0, TO_EOF)]);
        set(&mut v, &2, None, 100, TO_EOF, 0, true);
        assert_eq!(sorted(v), vec![(2, R, 0, 99)]);
    }

    #[test]
    fn conflicts_only_between_owners_and_with_writes() {
        let v = vec![seg(1, R, 0, 9), seg(2, W, 20, TO_EOF)];
        assert!(conflict(&v, &3, R, 5, 5).is_none());
        assert_eq!(conflict(&v, &3, W, 5, 5).map(|s| s.owner), Some(1));
        assert!(conflict(&v, &1, W, 0, 19).is_none());
        assert_eq!(conflict(&v, &1, R, 0, 20).map(|s| s.owner), Some(2));
        assert_eq!(
            conflict(&v, &3, R, u64::MAX, u64::MAX).map(|s| s.owner),
            Some(2)
        );
    }

    /// A byte map of 0..64: per byte, per owner, the lock type.
    type Model = [[Option<LockType>; 3]; 64];

    fn model_of(v: &[Segment<u8>]) -> Model {
        let mut m = [[None; 3]; 64];
        for s in v {
            for b in s.start..=s.end.min(63) {
                assert!(
                    m[b as usize][s.owner as usize].is_none(),
                    "overlap of one owner"
                );
                m[b as usize][s.owner as usize] = Some(s.typ);
            }
        }
        m
    }

    proptest! {
        /// Any sequence of locks and unlocks leaves exactly the bytes a byte-by-byte
        /// model has, in segments that never overlap and never touch with the same type.
        #[test]
        fn matches_a_byte_model(ops in proptest::collection::vec(
            (0u8..3, 0u8..3, 0u64..64, 0u64..64), 1..40)) {
            let mut v: Vec<Segment<u8>> = Vec::new();
            let mut m: Model = [[None; 3]; 64];
            for (owner, t, a, b) in ops {
                let (start, end) = (a.min(b), a.max(b));
                let typ = match t { 0 => None, 1 => Some(R), _ => Some(W) };
                set(&mut v, &owner, typ, start, end, 0, true);
                for x in start..=end {
                    m[x as usize][owner as usize] = typ;
                }
                prop_assert_eq!(model_of(&v), m);
                for s in &v {
                    for o in &v {
                        if std::ptr::eq(s, o) || s.owner != o.owner { continue; }
                        prop_assert!(!(s.typ == o.typ && touches((s.start, s.end), (o.start, o.end))));
                    }
                }
            }
        }
    }
}
