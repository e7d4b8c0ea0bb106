//! Attributes as C sees them: `struct stat` and `struct pvfs_stat_lite` from a
//! `pvfs_client::Attr`, and which lazy fields are valid.

use libc::{c_ulong, timespec};
use pvfs_client::{Attr, ObjKind, Timespec};

use crate::state::Global;
use crate::types::{
    empty_lite, pvfs_stat_lite, PVFS_SLITE_ALL, PVFS_SLITE_ATIME, PVFS_SLITE_BLOCKS,
    PVFS_SLITE_CTIME, PVFS_SLITE_MTIME, PVFS_SLITE_SIZE,
};

/// Whether a stat-lite mask needs the data servers (size or blocks).
pub(crate) fn wants_size(mask: c_ulong) -> bool {
    mask & (PVFS_SLITE_SIZE | PVFS_SLITE_BLOCKS) != 0
}

/// Whether a stat-lite mask needs more than the lookups for `attr`: a file's size or
/// blocks (its data servers), a directory's mtime or ctime (its other shards'
/// servers, which also give its exact link count).
pub(crate) fn wants_more(mask: c_ulong, attr: &Attr) -> bool {
    if attr.is_dir() {
        mask & (PVFS_SLITE_MTIME | PVFS_SLITE_CTIME) != 0
    } else {
        wants_size(mask)
    }
}

fn ts(t: Timespec) -> timespec {
    timespec {
        tv_sec: t.secs as libc::time_t,
        tv_nsec: t.nsecs as libc::c_long,
    }
}

/// `st_blksize`: a file's stripe size, else the file system's default stripe size.
fn blksize(g: &Global, attr: &Attr) -> u64 {
    attr.layout()
        .map(|l| l.stripe_size)
        .unwrap_or(g.client().config().defaults.stripe_size)
}

/// The `DT_*` type of an object kind.
pub(crate) fn dtype(kind: ObjKind) -> u8 {
    kind.d_type()
}

/// A `struct stat` from attributes whose size is known.
pub(crate) fn stat(g: &Global, attr: &Attr) -> libc::stat {
    // SAFETY: `struct stat` is plain integers; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_dev = g.client().config().fsid as libc::dev_t;
    st.st_ino = attr.handle as libc::ino_t;
    st.st_mode = attr.st_mode() as libc::mode_t;
    st.st_nlink = attr.nlink as libc::nlink_t;
    st.st_uid = attr.uid;
    st.st_gid = attr.gid;
    let (major, minor) = attr.device();
    st.st_rdev = libc::makedev(major, minor);
    st.st_size = attr.size.min(i64::MAX as u64) as libc::off_t;
    st.st_blksize = blksize(g, attr) as libc::blksize_t;
    st.st_blocks = attr.blocks as libc::blkcnt_t;
    let (a, m, c) = (ts(attr.atime), ts(attr.mtime), ts(attr.ctime));
    st.st_atime = a.tv_sec;
    st.st_atime_nsec = a.tv_nsec;
    st.st_mtime = m.tv_sec;
    st.st_mtime_nsec = m.tv_nsec;
    st.st_ctime = c.tv_sec;
    st.st_ctime_nsec = c.tv_nsec;
    st
}

/// A stat-lite from attributes for the fields `want` asks; `sized` tells whether the
/// size was fetched from the data servers (directories and symlinks always have
/// theirs).
pub(crate) fn lite(g: &Global, attr: &Attr, want: c_ulong, sized: bool) -> pvfs_stat_lite {
    let mut sl = empty_lite();
    sl.st_dev = g.client().config().fsid as libc::dev_t;
    sl.st_ino = attr.handle as libc::ino_t;
    sl.st_mode = attr.st_mode() as libc::mode_t;
    sl.st_nlink = attr.nlink as libc::nlink_t;
    sl.st_uid = attr.uid;
    sl.st_gid = attr.gid;
    sl.st_blksize = blksize(g, attr) as libc::blksize_t;
    let want = want & PVFS_SLITE_ALL;
    let mut valid = 0;
    let size_known = sized || attr.kind() != ObjKind::File;
    if size_known && want & PVFS_SLITE_SIZE != 0 {
        sl.st_size = attr.size.min(i64::MAX as u64) as libc::off_t;
        valid |= PVFS_SLITE_SIZE;
    }
    if size_known && want & PVFS_SLITE_BLOCKS != 0 {
        sl.st_blocks = attr.blocks as libc::blkcnt_t;
        valid |= PVFS_SLITE_BLOCKS;
    }
    if want & PVFS_SLITE_ATIME != 0 {
        sl.st_atim = ts(attr.atime);
        valid |= PVFS_SLITE_ATIME;
    }
    if want & PVFS_SLITE_MTIME != 0 {
        sl.st_mtim = ts(attr.mtime);
        valid |= PVFS_SLITE_MTIME;
    }
    if want & PVFS_SLITE_CTIME != 0 {
        sl.st_ctim = ts(attr.ctime);
        valid |= PVFS_SLITE_CTIME;
    }
    sl.st_litemask = valid;
    sl
}
