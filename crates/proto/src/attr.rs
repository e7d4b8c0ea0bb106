//! An object's attributes as its metadata server stores them and the wire carries
//! them: what every object has ([`Attr`]) and what only one kind has ([`ObjDetail`]:
//! a directory's shards and default layout, a file's layout, a symlink's target, a
//! special file's device).

use crate::codec::{DecodeError, Reader, Wire};
use crate::layout::{Layout, LayoutSpec};
use crate::types::{Handle, NodeKind, ObjKind, ShardStat, Timespec};

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
                // Without a default layout, tag 5 says it all (and stays what stores
                // written before tag 6 hold); with one, tag 6 carries its count.
                out.push(if default_layout.is_some() { 6 } else { 5 });
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
                default_layout: get_old_spec(r)?,
                mtime_set: Timespec::default(),
            }),
            // ... and before a default layout could name copies.
            5 => Ok(ObjDetail::Dir {
                parent: Wire::get(r)?,
                shards: Wire::get(r)?,
                default_layout: get_old_spec(r)?,
                mtime_set: Wire::get(r)?,
            }),
            6 => {
                let parent = Wire::get(r)?;
                let shards = Wire::get(r)?;
                let Some(spec) = Wire::get(r)? else {
                    // Written as tag 5: one form per value.
                    return Err(DecodeError::Invalid {
                        what: "directory detail",
                        why: "tag 6 without a default layout".into(),
                    });
                };
                Ok(ObjDetail::Dir {
                    parent,
                    shards,
                    default_layout: Some(spec),
                    mtime_set: Wire::get(r)?,
                })
            }
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

/// A directory's default layout as stores written before it could name copies hold
/// it: absent, or present with three fields.
fn get_old_spec(r: &mut Reader<'_>) -> Result<Option<LayoutSpec>, DecodeError> {
    match u8::get(r)? {
        0 => Ok(None),
        1 => LayoutSpec::get_without_replicas(r).map(Some),
        t => Err(DecodeError::UnknownTag {
            what: "option",
            tag: u32::from(t),
        }),
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
                    replicas: None,
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
}
