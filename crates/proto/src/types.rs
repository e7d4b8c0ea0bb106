//! The objects of a file system as they appear on the wire: handles, times, object
//! kinds, attribute changes, directory entries, credentials, server roles. The
//! attributes themselves, which carry layouts and ACLs, are in `crate::attr`.

use crate::codec::{DecodeError, Reader, Wire};
use crate::wire_struct;

/// A 64-bit object handle, unique within a file system; 0 is never a valid handle.
pub type Handle = u64;

/// Longest name of one directory entry, in bytes (as Linux NAME_MAX).
pub const NAME_MAX: usize = 255;
/// Longest symlink target, in bytes (as Linux PATH_MAX).
pub const PATH_MAX: usize = 4096;

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timespec {
    /// Whole seconds since 1970-01-01 UTC.
    pub secs: i64,
    /// Nanoseconds, below 1e9.
    pub nsecs: u32,
}
wire_struct!(Timespec {
    secs: i64,
    nsecs: u32
});

impl Timespec {
    /// The current wall-clock time ([`crate::clock::now`]).
    pub fn now() -> Timespec {
        let d = crate::clock::now();
        Timespec {
            secs: d.as_secs() as i64,
            nsecs: d.subsec_nanos(),
        }
    }

    /// Converts a `SystemTime` (before the epoch clamps to the epoch).
    pub fn from_system(t: std::time::SystemTime) -> Timespec {
        let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timespec {
            secs: d.as_secs() as i64,
            nsecs: d.subsec_nanos(),
        }
    }
}

/// The kind of a namespace object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjKind {
    /// A directory (its entries live in dirdata shards).
    Dir,
    /// A regular file (a metafile with a layout; data in datafiles).
    File,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device node: metadata only, no data in pvfs.
    Node(NodeKind),
}

/// The kind of a special file (`mknod`): pvfs records it; the local kernel of whoever
/// opens it gives it meaning (a pipe, a device of that machine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A named pipe (`mkfifo`).
    Fifo,
    /// A character device.
    CharDev,
    /// A block device.
    BlockDev,
    /// A Unix-domain socket's name.
    Socket,
}

impl NodeKind {
    /// The kind named by the `S_IFMT` bits of `mode`, if it is a special file.
    pub fn from_mode(mode: u32) -> Option<NodeKind> {
        match mode & 0o170000 {
            0o010000 => Some(NodeKind::Fifo),
            0o020000 => Some(NodeKind::CharDev),
            0o060000 => Some(NodeKind::BlockDev),
            0o140000 => Some(NodeKind::Socket),
            _ => None,
        }
    }

    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            NodeKind::Fifo => 0o010000,
            NodeKind::CharDev => 0o020000,
            NodeKind::BlockDev => 0o060000,
            NodeKind::Socket => 0o140000,
        }
    }

    /// A device number in the encoding `rdev` is stored in (Linux's 32-bit one, what
    /// FUSE carries): minor bits 0-7 and 20-31, major bits 8-19. Inverse of
    /// [`crate::attr::Attr::device`].
    pub fn encode_device(major: u32, minor: u32) -> u64 {
        u64::from((minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12))
    }

    /// Whether this kind has a device number.
    pub fn is_device(self) -> bool {
        matches!(self, NodeKind::CharDev | NodeKind::BlockDev)
    }

    fn tag(self) -> u8 {
        match self {
            NodeKind::Fifo => 4,
            NodeKind::CharDev => 5,
            NodeKind::BlockDev => 6,
            NodeKind::Socket => 7,
        }
    }

    fn from_tag(t: u8) -> Option<NodeKind> {
        match t {
            4 => Some(NodeKind::Fifo),
            5 => Some(NodeKind::CharDev),
            6 => Some(NodeKind::BlockDev),
            7 => Some(NodeKind::Socket),
            _ => None,
        }
    }
}

impl Wire for NodeKind {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(self.tag());
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let t = u8::get(r)?;
        NodeKind::from_tag(t).ok_or(DecodeError::UnknownTag {
            what: "node kind",
            tag: u32::from(t),
        })
    }
}

impl ObjKind {
    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            ObjKind::Dir => 0o040000,
            ObjKind::File => 0o100000,
            ObjKind::Symlink => 0o120000,
            ObjKind::Node(k) => k.mode_bits(),
        }
    }

    /// The `d_type` of a directory entry of this kind (Linux's `DT_*` numbering,
    /// as errnos are Linux's).
    pub fn d_type(self) -> u8 {
        match self {
            ObjKind::Dir => 4,
            ObjKind::File => 8,
            ObjKind::Symlink => 10,
            ObjKind::Node(NodeKind::Fifo) => 1,
            ObjKind::Node(NodeKind::CharDev) => 2,
            ObjKind::Node(NodeKind::BlockDev) => 6,
            ObjKind::Node(NodeKind::Socket) => 12,
        }
    }

    /// A one-word name for listings.
    pub fn name(self) -> &'static str {
        match self {
            ObjKind::Dir => "dir",
            ObjKind::File => "file",
            ObjKind::Symlink => "symlink",
            ObjKind::Node(NodeKind::Fifo) => "fifo",
            ObjKind::Node(NodeKind::CharDev) => "chardev",
            ObjKind::Node(NodeKind::BlockDev) => "blockdev",
            ObjKind::Node(NodeKind::Socket) => "socket",
        }
    }
}

impl Wire for ObjKind {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(match self {
            ObjKind::Dir => 1,
            ObjKind::File => 2,
            ObjKind::Symlink => 3,
            ObjKind::Node(k) => k.tag(),
        });
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            1 => Ok(ObjKind::Dir),
            2 => Ok(ObjKind::File),
            3 => Ok(ObjKind::Symlink),
            t => NodeKind::from_tag(t)
                .map(ObjKind::Node)
                .ok_or(DecodeError::UnknownTag {
                    what: "object kind",
                    tag: u32::from(t),
                }),
        }
    }
}

/// Attribute changes requested by `SetAttr`; `None` leaves a field alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New access time.
    pub atime: Option<Timespec>,
    /// New modification time.
    pub mtime: Option<Timespec>,
    /// The times given are "now" (utimensat's `UTIME_NOW`, `touch`): allowed to
    /// anyone who may write the object, where explicit times need its owner.
    pub now: bool,
}
wire_struct!(SetAttr {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    atime: Option<Timespec>,
    mtime: Option<Timespec>,
    now: bool,
});

/// One name in a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name (no slash, not "." or "..").
    pub name: String,
    /// The object it names.
    pub handle: Handle,
    /// The kind of that object (so `ls` needs no getattr).
    pub kind: ObjKind,
}
wire_struct!(DirEntry {
    name: String,
    handle: Handle,
    kind: ObjKind,
});

/// What one dirdata shard adds to its directory's attributes: when an entry was last
/// added or removed there, and how many of its entries are directories. A directory's
/// mtime and ctime and its link count (2 + subdirectories) are its object's, merged
/// with every shard's ([`crate::attr::Attr::merge_shard`]), so a create costs no
/// message to the directory's owner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardStat {
    /// When an entry was last added, removed or replaced in the shard (zero: never,
    /// or not since the store recorded it).
    pub changed: Timespec,
    /// Entries of the shard that name directories.
    pub subdirs: u64,
}
wire_struct!(ShardStat {
    changed: Timespec,
    subdirs: u64,
});

/// Who is asking: carried in every request so servers can check permissions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Creds {
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}
wire_struct!(Creds {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
});

impl Creds {
    /// The credentials of the calling process: effective uid and gid, and its
    /// supplementary groups.
    pub fn current() -> Creds {
        // SAFETY: geteuid/getegid have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        // SAFETY: getgroups(0, null) returns the count without writing.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        let mut groups = vec![0 as libc::gid_t; n.max(0) as usize];
        if n > 0 {
            // SAFETY: `groups` holds n entries.
            let got = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
            groups.truncate(got.max(0) as usize);
        }
        groups.retain(|&g| g != gid);
        Creds { uid, gid, groups }
    }
}

/// Checks a single path component: non-empty, no '/', no NUL, not "." or "..",
/// at most [`NAME_MAX`] bytes.
pub fn check_name(name: &str) -> Result<(), crate::Errno> {
    if name.len() > NAME_MAX {
        return Err(crate::Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(crate::Errno::EINVAL);
    }
    Ok(())
}

/// Which roles a server plays (a bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Roles(pub u8);

impl Roles {
    /// Holds metadata: directories, metafiles, symlinks.
    pub const META: Roles = Roles(1);
    /// Holds datafiles.
    pub const DATA: Roles = Roles(2);

    /// Whether every role of `other` is in `self`.
    pub fn contains(self, other: Roles) -> bool {
        self.0 & other.0 == other.0
    }

    /// Human names, e.g. "meta+data".
    pub fn describe(self) -> String {
        let mut v = Vec::new();
        if self.contains(Roles::META) {
            v.push("meta");
        }
        if self.contains(Roles::DATA) {
            v.push("data");
        }
        v.join("+")
    }
}

impl std::ops::BitOr for Roles {
    type Output = Roles;
    fn bitor(self, rhs: Roles) -> Roles {
        Roles(self.0 | rhs.0)
    }
}

impl Wire for Roles {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(self.0);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Roles(u8::get(r)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("a").is_ok());
        assert_eq!(check_name(""), Err(crate::Errno::EINVAL));
        assert_eq!(check_name(".."), Err(crate::Errno::EINVAL));
        assert_eq!(check_name("a/b"), Err(crate::Errno::EINVAL));
        assert_eq!(
            check_name(&"x".repeat(256)),
            Err(crate::Errno::ENAMETOOLONG)
        );
        assert!(check_name(&"x".repeat(255)).is_ok());
    }
}

/// The dirdata shard of a directory holding entry `name`: FNV-1a 64 of the name's
/// bytes modulo the shard count. Every client must compute the same value, so this
/// function is part of the protocol and must never change for a protocol version.
pub fn name_shard(name: &str, shards: u32) -> u32 {
    assert!(shards > 0, "a directory has at least one shard");
    (fnv1a64(name.as_bytes()) % u64::from(shards)) as u32
}

/// FNV-1a, 64 bits (Fowler, Noll and Vo): a fast, stable hash of bytes.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod shard_tests {
    use super::name_shard;

    #[test]
    fn shard_is_stable_and_spread() {
        // Fixed values: changing the hash would strand existing entries.
        assert_eq!(name_shard("", 7), (0xcbf2_9ce4_8422_2325u64 % 7) as u32);
        assert_eq!(name_shard("a", 1), 0);
        let mut counts = [0u32; 4];
        for i in 0..4000 {
            counts[name_shard(&format!("file{i}"), 4) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
    }
}
