//! Filling the C structures `stat`, `statx`, `statfs` and `statvfs` from pvfs
//! attributes.
//!
//! pvfs objects get a device number of their own (major 0, like other virtual file
//! systems, minor derived from the fsid) so tools see a separate file system
//! (`cp`/`mv` compare devices, `find -xdev` stops), and the handle as inode number.
//! `st_blksize` is a file's stripe width (stripe size × datafiles), which makes
//! coreutils move data in requests that reach every data server.

use libc::{c_int, statfs, statvfs};
use pvfs_client::{Attr, FsStat};

use crate::proc::Proc;

/// `f_type` reported by statfs: PVFS2's super magic.
pub(crate) const PVFS_MAGIC: i64 = 0x2003_0528;
/// Block size reported by statfs.
const FS_BSIZE: u64 = 1 << 20;

/// The device number pvfs objects report.
pub(crate) fn dev(p: &Proc) -> u64 {
    libc::makedev(0, dev_minor(p))
}

fn dev_minor(p: &Proc) -> u32 {
    0xf0000 | (p.client().config().fsid as u32 & 0xffff)
}

/// `st_blksize` for `attr`.
pub(crate) fn blksize(attr: &Attr) -> u64 {
    match attr.layout() {
        Some(l) => (l.stripe_size * l.datafiles.len().max(1) as u64).clamp(4096, 16 << 20),
        None => 4096,
    }
}

/// Fills `st` from `attr`.
pub(crate) fn fill_stat(p: &Proc, attr: &Attr, st: &mut libc::stat) {
    // SAFETY: an all-zero stat is a valid value.
    *st = unsafe { std::mem::zeroed() };
    st.st_dev = dev(p);
    st.st_ino = attr.handle;
    st.st_mode = attr.st_mode();
    let (major, minor) = attr.device();
    st.st_rdev = libc::makedev(major, minor);
    st.st_nlink = u64::from(attr.nlink.max(1));
    st.st_uid = attr.uid;
    st.st_gid = attr.gid;
    st.st_size = attr.size as i64;
    st.st_blksize = blksize(attr) as i64;
    st.st_blocks = attr.blocks as i64;
    st.st_atime = attr.atime.secs;
    st.st_atime_nsec = i64::from(attr.atime.nsecs);
    st.st_mtime = attr.mtime.secs;
    st.st_mtime_nsec = i64::from(attr.mtime.nsecs);
    st.st_ctime = attr.ctime.secs;
    st.st_ctime_nsec = i64::from(attr.ctime.nsecs);
}

/// Fills `stx` from `attr` (the basic statistics; no birth time).
pub(crate) fn fill_statx(p: &Proc, attr: &Attr, stx: &mut libc::statx) {
    // SAFETY: an all-zero statx is a valid value.
    *stx = unsafe { std::mem::zeroed() };
    let ts = |t: pvfs_client::Timespec| {
        // SAFETY: an all-zero statx_timestamp is a valid value.
        let mut x: libc::statx_timestamp = unsafe { std::mem::zeroed() };
        x.tv_sec = t.secs;
        x.tv_nsec = t.nsecs;
        x
    };
    stx.stx_mask = libc::STATX_BASIC_STATS;
    stx.stx_blksize = blksize(attr) as u32;
    stx.stx_nlink = attr.nlink.max(1);
    stx.stx_uid = attr.uid;
    stx.stx_gid = attr.gid;
    stx.stx_mode = attr.st_mode() as u16;
    stx.stx_ino = attr.handle;
    stx.stx_size = attr.size;
    stx.stx_blocks = attr.blocks;
    stx.stx_atime = ts(attr.atime);
    stx.stx_mtime = ts(attr.mtime);
    stx.stx_ctime = ts(attr.ctime);
    stx.stx_dev_major = 0;
    stx.stx_dev_minor = dev_minor(p);
}

/// Fills `sf` from the file system's totals.
pub(crate) fn fill_statfs(fs: &FsStat, sf: &mut statfs) {
    // SAFETY: an all-zero statfs is a valid value.
    *sf = unsafe { std::mem::zeroed() };
    sf.f_type = PVFS_MAGIC;
    sf.f_bsize = FS_BSIZE as i64;
    sf.f_frsize = FS_BSIZE as i64;
    sf.f_blocks = fs.total_bytes / FS_BSIZE;
    sf.f_bfree = fs.free_bytes / FS_BSIZE;
    sf.f_bavail = fs.avail_bytes / FS_BSIZE;
    sf.f_files = fs.objects + fs.datafiles + (1 << 32);
    sf.f_ffree = 1 << 32;
    sf.f_namelen = pvfs_proto::types::NAME_MAX as i64;
}

/// Fills `sv` from the file system's totals.
pub(crate) fn fill_statvfs(fs: &FsStat, sv: &mut statvfs) {
    // SAFETY: an all-zero statvfs is a valid value.
    *sv = unsafe { std::mem::zeroed() };
    sv.f_bsize = FS_BSIZE;
    sv.f_frsize = FS_BSIZE;
    sv.f_blocks = fs.total_bytes / FS_BSIZE;
    sv.f_bfree = fs.free_bytes / FS_BSIZE;
    sv.f_bavail = fs.avail_bytes / FS_BSIZE;
    sv.f_files = fs.objects + fs.datafiles + (1 << 32);
    sv.f_ffree = 1 << 32;
    sv.f_favail = 1 << 32;
    sv.f_namemax = pvfs_proto::types::NAME_MAX as u64;
}

/// Whether `fs` heard from no server at all (statfs then fails).
pub(crate) fn no_answer(fs: &FsStat) -> Option<c_int> {
    if fs.servers.iter().any(|s| s.stat.is_ok()) {
        return None;
    }
    Some(
        fs.servers
            .iter()
            .find_map(|s| {
                s.stat
                    .as_ref()
                    .err()
                    .map(|e| crate::client_error::client_errno(e.clone()))
            })
            .unwrap_or(libc::EIO),
    )
}
