//! The objects of a file system as they appear on the wire: handles, attributes,
//! directory entries, credentials.

use crate::codec::{DecodeError, Reader, Wire};
use crate::layout::{Layout, LayoutSpec};
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
        crate::clock::now()
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
    /// [`Attr::device`].
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

/// What only one kind of object has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjDetail {
    /// A directory: its parent, its shard count, its default layout for new files.
    Dir {
        /// The parent directory (the root is its own parent).
        parent: Handle,
        /// Number of dirdata shards; fixed at mkdir.
        shards: u32,
        /// Layout given to new files created in it, unless they ask for another.
        default_layout: Option<LayoutSpec>,
        /// When its mtime was last set explicitly (utimes; zero: never): entry
        /// changes before then do not move the mtime ([`Attr::merge_shard`]).
        mtime_set: Timespec,
    },
    /// A regular file: where its data lives.
    File {
        /// Stripe size, datafiles and their servers (fixed at create), and how many
        /// of the datafiles may hold bytes (grows with the file).
        layout: Layout,
    },
    /// A symbolic link: its target.
    Symlink {
        /// The path it points to, verbatim.
        target: String,
    },
    /// A FIFO, socket or device node.
    Node {
        /// Which kind of special file.
        kind: NodeKind,
        /// The device number (`st_rdev`) of a device node; 0 otherwise.
        rdev: u64,
    },
}

impl Wire for ObjDetail {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            ObjDetail::Dir {
                parent,
                shards,
                default_layout,
                mtime_set,
            } => {
                out.push(5);
                parent.put(out);
                shards.put(out);
                default_layout.put(out);
                mtime_set.put(out);
            }
            ObjDetail::File { layout } => {
                out.push(2);
                layout.put(out);
            }
            ObjDetail::Symlink { target } => {
                out.push(3);
                target.put(out);
            }
            ObjDetail::Node { kind, rdev } => {
                out.push(4);
                kind.put(out);
                rdev.put(out);
            }
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            // A directory as stores written before `mtime_set` hold it.
            1 => Ok(ObjDetail::Dir {
                parent: Wire::get(r)?,
                shards: Wire::get(r)?,
                default_layout: Wire::get(r)?,
                mtime_set: Timespec::default(),
            }),
            5 => Ok(ObjDetail::Dir {
                parent: Wire::get(r)?,
                shards: Wire::get(r)?,
                default_layout: Wire::get(r)?,
                mtime_set: Wire::get(r)?,
            }),
            2 => Ok(ObjDetail::File {
                layout: Wire::get(r)?,
            }),
            3 => Ok(ObjDetail::Symlink {
                target: Wire::get(r)?,
            }),
            4 => Ok(ObjDetail::Node {
                kind: Wire::get(r)?,
                rdev: Wire::get(r)?,
            }),
            t => Err(DecodeError::UnknownTag {
                what: "object detail",
                tag: u32::from(t),
            }),
        }
    }
}

/// The attributes of an object as its metadata server stores them.
///
/// A file's size is not stored here: it is computed from its datafiles (as in PVFS2), so
/// `size` is 0 in a file's stored attributes and filled in by the client, and so is
/// `blocks`, which is not encoded at all (neither on the wire nor on disk).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// The object's handle.
    pub handle: Handle,
    /// Permission bits (07777); the file type comes from `detail`.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Link count.
    pub nlink: u32,
    /// Bytes: a file's logical size (computed), a symlink's target length, a
    /// directory's nominal size.
    pub size: u64,
    /// Last access.
    pub atime: Timespec,
    /// Last data modification.
    pub mtime: Timespec,
    /// Last attribute change.
    pub ctime: Timespec,
    /// Kind-specific attributes.
    pub detail: ObjDetail,
    /// 512-byte blocks the object occupies (`st_blocks`): for a file, what its
    /// datafiles allocate on the data servers, filled in by the client with the size
    /// (0 until then); for anything else [`Attr::nominal_blocks`]. Not encoded: a
    /// decoded `Attr` gets the nominal value.
    pub blocks: u64,
    /// POSIX ACLs beyond the permission bits (`crate::acl`); none for most objects.
    pub acl: Option<Box<crate::acl::Acl>>,
}

impl Wire for Attr {
    const MIN_SIZE: usize = 8
        + 4 * 4
        + 8
        + 3 * <Timespec as Wire>::MIN_SIZE
        + <ObjDetail as Wire>::MIN_SIZE
        + <Option<Box<crate::acl::Acl>> as Wire>::MIN_SIZE;
    fn put(&self, out: &mut Vec<u8>) {
        self.handle.put(out);
        self.mode.put(out);
        self.uid.put(out);
        self.gid.put(out);
        self.nlink.put(out);
        self.size.put(out);
        self.atime.put(out);
        self.mtime.put(out);
        self.ctime.put(out);
        self.detail.put(out);
        self.acl.put(out);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut a = Attr {
            handle: Wire::get(r)?,
            mode: Wire::get(r)?,
            uid: Wire::get(r)?,
            gid: Wire::get(r)?,
            nlink: Wire::get(r)?,
            size: Wire::get(r)?,
            atime: Wire::get(r)?,
            mtime: Wire::get(r)?,
            ctime: Wire::get(r)?,
            detail: Wire::get(r)?,
            blocks: 0,
            acl: Wire::get(r)?,
        };
        a.blocks = a.nominal_blocks();
        Ok(a)
    }
}

impl Attr {
    /// Merges one dirdata shard's [`ShardStat`] into a directory's attributes. An
    /// entry change moves the ctime forward, and the mtime too unless the mtime was
    /// set explicitly after it (utimes, `tar x`, `rsync -a` restoring a directory's
    /// time stay as set); each subdirectory adds a link. Shards merge in any order
    /// with the same result.
    pub fn merge_shard(&mut self, s: &ShardStat) {
        let set = match &self.detail {
            ObjDetail::Dir { mtime_set, .. } => *mtime_set,
            _ => Timespec::default(),
        };
        if s.changed > set {
            self.mtime = self.mtime.max(s.changed);
        }
        self.ctime = self.ctime.max(s.changed);
        self.nlink = self
            .nlink
            .saturating_add(u32::try_from(s.subdirs).unwrap_or(u32::MAX));
    }

    /// Whether the object is a directory.
    pub fn is_dir(&self) -> bool {
        matches!(self.detail, ObjDetail::Dir { .. })
    }

    /// The kind of the object.
    pub fn kind(&self) -> ObjKind {
        match self.detail {
            ObjDetail::Dir { .. } => ObjKind::Dir,
            ObjDetail::File { .. } => ObjKind::File,
            ObjDetail::Symlink { .. } => ObjKind::Symlink,
            ObjDetail::Node { kind, .. } => ObjKind::Node(kind),
        }
    }

    /// The device number of a device node as (major, minor); (0, 0) for anything
    /// else. `rdev` is stored in Linux's 32-bit encoding (what FUSE carries): minor
    /// bits 0-7 and 20-31, major bits 8-19.
    pub fn device(&self) -> (u32, u32) {
        match self.detail {
            ObjDetail::Node { rdev, .. } => {
                let r = rdev as u32;
                ((r >> 8) & 0xfff, (r & 0xff) | ((r >> 12) & 0xfff00))
            }
            _ => (0, 0),
        }
    }

    /// `st_mode`: the type bits and the permission bits.
    pub fn st_mode(&self) -> u32 {
        self.kind().mode_bits() | (self.mode & 0o7777)
    }

    /// The blocks an object occupies when nothing else is known: a directory its
    /// nominal size (4096 bytes: 8 blocks, as a local file system's one block);
    /// symlinks, special files and files not yet sized 0 (a symlink's target lives in
    /// its metadata record, like a local file system's inline "fast" symlink).
    pub fn nominal_blocks(&self) -> u64 {
        match self.detail {
            ObjDetail::Dir { .. } => self.size.div_ceil(512),
            _ => 0,
        }
    }

    /// The file's layout, if it is a regular file.
    pub fn layout(&self) -> Option<&Layout> {
        match &self.detail {
            ObjDetail::File { layout } => Some(layout),
            _ => None,
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
/// with every shard's ([`Attr::merge_shard`]), so a create costs no message to the
/// directory's owner.
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
    use crate::codec::{decode, encode};

    #[test]
    fn attr_round_trip() {
        let a = Attr {
            handle: 42,
            mode: 0o755,
            uid: 1,
            gid: 2,
            nlink: 2,
            size: 4096,
            atime: Timespec { secs: 1, nsecs: 2 },
            mtime: Timespec::now(),
            ctime: Timespec::default(),
            detail: ObjDetail::Dir {
                parent: 1,
                shards: 4,
                default_layout: Some(LayoutSpec {
                    stripe_size: Some(65536),
                    stripe_count: None,
                    base: None,
                }),
                mtime_set: Timespec { secs: 3, nsecs: 4 },
            },
            blocks: 8,
            acl: None,
        };
        assert_eq!(decode::<Attr>(&encode(&a)).unwrap(), a);
        assert_eq!(a.st_mode(), 0o040755);
    }

    #[test]
    fn directories_stored_before_mtime_set_still_decode() {
        // Tag 1: parent, shards, no default layout; no mtime_set.
        let mut old = vec![1u8];
        old.extend_from_slice(&7u64.to_le_bytes());
        old.extend_from_slice(&3u32.to_le_bytes());
        old.push(0);
        assert_eq!(
            decode::<ObjDetail>(&old).unwrap(),
            ObjDetail::Dir {
                parent: 7,
                shards: 3,
                default_layout: None,
                mtime_set: Timespec::default(),
            }
        );
    }

    #[test]
    fn shards_merge_in_any_order_and_respect_explicit_times() {
        let t = |secs| Timespec { secs, nsecs: 0 };
        let dir = |mtime, ctime, set| Attr {
            handle: 9,
            mode: 0o755,
            uid: 0,
            gid: 0,
            nlink: 2,
            size: 4096,
            atime: t(0),
            mtime: t(mtime),
            ctime: t(ctime),
            detail: ObjDetail::Dir {
                parent: 1,
                shards: 3,
                default_layout: None,
                mtime_set: t(set),
            },
            blocks: 8,
            acl: None,
        };
        let s = |changed, subdirs| ShardStat {
            changed: t(changed),
            subdirs,
        };
        let shards = [s(20, 1), s(40, 0), s(30, 2)];
        let merged = |mut a: Attr, order: &[usize]| {
            for &i in order {
                a.merge_shard(&shards[i]);
            }
            (a.mtime.secs, a.ctime.secs, a.nlink)
        };
        // A chmod at 50 (ctime) does not hide the entry changes from the mtime.
        for order in [[0, 1, 2], [2, 1, 0], [1, 0, 2]] {
            assert_eq!(merged(dir(10, 50, 0), &order), (40, 50, 5));
        }
        // utimes at 35 set the mtime to 5: only the later change (40) counts.
        assert_eq!(merged(dir(5, 35, 35), &[0, 1, 2]), (40, 40, 5));
        // utimes at 45: the mtime stays as set, the ctime is the newest change.
        assert_eq!(merged(dir(5, 45, 45), &[2, 0, 1]), (5, 45, 5));
    }

    #[test]
    fn special_files_round_trip_with_their_type_and_device() {
        for (kind, bits, dtype) in [
            (NodeKind::Fifo, 0o010000, 1),
            (NodeKind::CharDev, 0o020000, 2),
            (NodeKind::BlockDev, 0o060000, 6),
            (NodeKind::Socket, 0o140000, 12),
        ] {
            let rdev = NodeKind::encode_device(259, 70000);
            let a = Attr {
                handle: 7,
                mode: 0o640,
                uid: 0,
                gid: 0,
                nlink: 1,
                size: 0,
                atime: Timespec::default(),
                mtime: Timespec::default(),
                ctime: Timespec::default(),
                detail: ObjDetail::Node { kind, rdev },
                blocks: 0,
                acl: None,
            };
            assert_eq!(decode::<Attr>(&encode(&a)).unwrap(), a);
            assert_eq!(a.st_mode(), bits | 0o640);
            assert_eq!(NodeKind::from_mode(a.st_mode()), Some(kind));
            assert_eq!(a.kind().d_type(), dtype);
            assert_eq!(decode::<ObjKind>(&encode(&a.kind())).unwrap(), a.kind());
            assert_eq!(a.device(), (259, 70000));
        }
        assert_eq!(NodeKind::from_mode(0o100644), None);
        assert!(decode::<ObjKind>(&[8]).is_err());
    }

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
