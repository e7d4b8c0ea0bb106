//! What the kernel sees of pvfs objects: inode numbers (handles, with the root as
//! inode 1), `FileAttr` from pvfs attributes, times, and the mode-bit check the mount
//! needs where the kernel cannot make it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo, TimeOrNow};
use pvfs_client::{Attr, DirEntry, NodeKind, ObjKind, Timespec};
use pvfs_proto::ObjDetail;
use pvfs_proto::{Creds, Handle};

/// Preferred I/O size reported for regular files (`st_blksize`): the largest FUSE
/// request, so `cp`, stdio and friends move data in 1 MiB pieces.
pub(crate) const FILE_BLKSIZE: u32 = 1 << 20;

/// The inode number of `handle`. FUSE's root is inode 1, so the root handle and
/// handle 1 (if it exists at all) trade places: a bijection.
pub(crate) fn ino_of(root: Handle, handle: Handle) -> INodeNo {
    INodeNo(if handle == root {
        1
    } else if handle == 1 {
        root
    } else {
        handle
    })
}

/// The handle behind inode `ino` (inverse of [`ino_of`]).
pub(crate) fn handle_of(root: Handle, ino: INodeNo) -> Handle {
    if ino.0 == 1 {
        root
    } else if ino.0 == root {
        1
    } else {
        ino.0
    }
}

/// The FUSE file type of a pvfs object kind.
pub(crate) fn file_type(kind: ObjKind) -> FileType {
    match kind {
        ObjKind::Dir => FileType::Directory,
        ObjKind::File => FileType::RegularFile,
        ObjKind::Symlink => FileType::Symlink,
        ObjKind::Node(NodeKind::Fifo) => FileType::NamedPipe,
        ObjKind::Node(NodeKind::CharDev) => FileType::CharDevice,
        ObjKind::Node(NodeKind::BlockDev) => FileType::BlockDevice,
        ObjKind::Node(NodeKind::Socket) => FileType::Socket,
    }
}

/// A pvfs time as a `SystemTime` (times before the epoch included).
pub(crate) fn system_time(t: Timespec) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(t.nsecs.min(999_999_999)));
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs()) + nanos
    }
}

/// A time from `setattr` (a given time, or "now" as the mount's clock says).
pub(crate) fn timespec(t: TimeOrNow) -> Timespec {
    match t {
        TimeOrNow::Now => Timespec::now(),
        TimeOrNow::SpecificTime(st) => match st.duration_since(UNIX_EPOCH) {
            Ok(d) => Timespec {
                secs: d.as_secs() as i64,
                nsecs: d.subsec_nanos(),
            },
            Err(e) => {
                // Before the epoch: whole seconds down, nanoseconds up.
                let d = e.duration();
                let mut secs = -(d.as_secs() as i64);
                let mut nsecs = d.subsec_nanos();
                if nsecs > 0 {
                    secs -= 1;
                    nsecs = 1_000_000_000 - nsecs;
                }
                Timespec { secs, nsecs }
            }
        },
    }
}

/// The kernel's view of `attr`. `orphan` marks a file whose last name is gone but
/// which is still open here (link count 0); a file another client unlinked while it
/// was open has a count of 0 from its server.
pub(crate) fn file_attr(root: Handle, attr: &Attr, orphan: bool) -> FileAttr {
    let kind = attr.kind();
    FileAttr {
        ino: ino_of(root, attr.handle),
        size: attr.size,
        blocks: attr.blocks,
        atime: system_time(attr.atime),
        mtime: system_time(attr.mtime),
        ctime: system_time(attr.ctime),
        crtime: system_time(attr.ctime),
        kind: file_type(kind),
        perm: (attr.mode & 0o7777) as u16,
        nlink: if orphan || (attr.nlink == 0 && !attr.is_dir()) {
            0
        } else {
            attr.nlink.max(1)
        },
        uid: attr.uid,
        gid: attr.gid,
        rdev: match attr.detail {
            // The kernel's encoding of a device number fits 32 bits.
            ObjDetail::Node { rdev, .. } => u32::try_from(rdev).unwrap_or(0),
            _ => 0,
        },
        blksize: if kind == ObjKind::File {
            FILE_BLKSIZE
        } else {
            4096
        },
        flags: 0,
    }
}

/// Stand-in attributes for a directory entry whose own attributes could not be
/// fetched (its server is down): listed with a zero cache time, so any `stat` of it
/// asks again and gets the real error.
pub(crate) fn placeholder(root: Handle, entry: &DirEntry) -> FileAttr {
    bare(ino_of(root, entry.handle), file_type(entry.kind), 1)
}

/// The answer to a lookup of a name that does not exist: inode 0, which the kernel
/// keeps as a negative entry for the entry cache time (a create through this mount
/// replaces it; another client's, through the change feeds, drops it).
pub(crate) fn negative() -> FileAttr {
    bare(INodeNo(0), FileType::RegularFile, 0)
}

/// Attributes that say nothing but the inode, its type and link count.
fn bare(ino: INodeNo, kind: FileType, nlink: u32) -> FileAttr {
    FileAttr {
        ino,
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm: 0,
        nlink,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// Read, write and execute/search bits of an access request.
pub(crate) const MAY_READ: u32 = pvfs_proto::access::MAY_READ;
/// See [`MAY_READ`].
pub(crate) const MAY_WRITE: u32 = pvfs_proto::access::MAY_WRITE;

/// Whether `creds` may access an object with attributes `attr` for `want` (a mask
/// of [`MAY_READ`], [`MAY_WRITE`], 1 for execute), by the shared POSIX rules
/// (`pvfs_proto::access`). Used where the kernel could not check: an `O_CREAT` open
/// that found the file created meanwhile by someone else.
pub(crate) fn may_access(attr: &Attr, creds: &Creds, want: u32) -> bool {
    pvfs_proto::access::allows(attr, creds, want)
}

/// Whether `mode` has bits a write by someone else than root must clear: set-user-ID,
/// and set-group-ID together with group execute (as Linux's `should_remove_suid`).
pub(crate) fn privileged(mode: u32) -> bool {
    mode & libc::S_ISUID != 0
        || mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_are_a_bijection() {
        let root = 1 << 40;
        for h in [root, 1, 2, (1 << 40) + 7, 3 << 40] {
            assert_eq!(handle_of(root, ino_of(root, h)), h);
        }
        assert_eq!(ino_of(root, root), INodeNo::ROOT);
        // A root handle of 1 maps to itself.
        assert_eq!(ino_of(1, 1), INodeNo::ROOT);
        assert_eq!(handle_of(1, INodeNo::ROOT), 1);
    }

    #[test]
    fn times_round_trip() {
        for t in [
            Timespec { secs: 0, nsecs: 0 },
            Timespec {
                secs: 1_700_000_000,
                nsecs: 123_456_789,
            },
            Timespec {
                secs: -5,
                nsecs: 250_000_000,
            },
        ] {
            assert_eq!(timespec(TimeOrNow::SpecificTime(system_time(t))), t);
        }
    }
}
