//! The C types and constants of `pvfs.h`: the structures the functions fill in or
//! take (stat-lite, dirent-plus, xtvec, layout hints, statistics, statfs) and the mask
//! bits. Every structure is `#[repr(C)]` and made of fixed-size C types, so the header
//! cbindgen writes from this file is the whole ABI.

#![allow(non_camel_case_types)]

use libc::{
    blkcnt_t, blksize_t, c_char, c_int, c_uchar, c_ulong, dev_t, gid_t, ino_t, mode_t, nlink_t,
    off_t, size_t, timespec, uid_t,
};

/// statlite mask bit: the size (`st_size`). For a regular file it costs one request
/// per data server of the file; without it no data server is contacted.
pub const PVFS_SLITE_SIZE: c_ulong = 0x1;
/// statlite mask bit: `st_blocks` (what the data servers allocate for the file; asked
/// with the size, in the same requests, so it costs the same).
pub const PVFS_SLITE_BLOCKS: c_ulong = 0x2;
/// statlite mask bit: `st_atim`, as the metadata server stores it (lazy: reads do
/// not update it).
pub const PVFS_SLITE_ATIME: c_ulong = 0x4;
/// statlite mask bit: `st_mtim`. Without `PVFS_SLITE_SIZE` it is the metadata
/// server's copy, which libpvfs brings up to date when a descriptor that wrote is
/// closed or fsynced (lazy); with `PVFS_SLITE_SIZE` it also accounts for the data
/// servers' modification times (exact).
pub const PVFS_SLITE_MTIME: c_ulong = 0x8;
/// statlite mask bit: `st_ctim` (the last attribute change on the metadata server).
pub const PVFS_SLITE_CTIME: c_ulong = 0x10;
/// Every statlite mask bit: what `pvfs_stat` returns.
pub const PVFS_SLITE_ALL: c_ulong = 0x1f;

/// A buffer of this many bytes holds any group handle `pvfs_openg` makes (a layout
/// of 4096 datafiles); a handle for a file striped over `c` servers takes
/// `85 + 12 * c` bytes.
pub const PVFS_GROUP_HANDLE_MAX: size_t = 229485;

/// Servers whose request counts `struct pvfs_stats` reports one by one.
pub const PVFS_STATS_MAX_SERVERS: usize = 64;

/// Longest entry name, in bytes, without the terminating NUL.
pub const PVFS_NAME_MAX: usize = 255;

/// One region of a file for `pvfs_readx`/`pvfs_writex`: `xtv_len` bytes from byte
/// `xtv_off` of the file.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct pvfs_xtvec {
    /// Offset of the region from the start of the file (>= 0).
    pub xtv_off: off_t,
    /// Length of the region in bytes.
    pub xtv_len: size_t,
}

/// The fields of `struct stat` plus a mask (`struct stat_lite` of the POSIX extensions
/// paper, Vilayannur et al., 2008). The field names match glibc's, so `sl.st_mtime` (a
/// macro for `st_mtim.tv_sec`) works. Fields other than the five lazy ones (size,
/// blocks, atime, mtime, ctime) are always filled in.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pvfs_stat_lite {
    /// The file system's id (the fsid of the configuration, truncated to `dev_t`).
    pub st_dev: dev_t,
    /// The object's 64-bit handle.
    pub st_ino: ino_t,
    /// File type and permission bits, as `st_mode` of `struct stat`.
    pub st_mode: mode_t,
    /// Link count.
    pub st_nlink: nlink_t,
    /// Owner.
    pub st_uid: uid_t,
    /// Group.
    pub st_gid: gid_t,
    /// Always 0.
    pub st_rdev: dev_t,
    /// Size in bytes; valid only with `PVFS_SLITE_SIZE` in `st_litemask`.
    pub st_size: off_t,
    /// Preferred I/O size: the stripe size of a regular file.
    pub st_blksize: blksize_t,
    /// 512-byte blocks allocated on the data servers; valid only with
    /// `PVFS_SLITE_BLOCKS`.
    pub st_blocks: blkcnt_t,
    /// Last access; valid only with `PVFS_SLITE_ATIME`.
    pub st_atim: timespec,
    /// Last modification; valid only with `PVFS_SLITE_MTIME`.
    pub st_mtim: timespec,
    /// Last attribute change; valid only with `PVFS_SLITE_CTIME`.
    pub st_ctim: timespec,
    /// On input, the `PVFS_SLITE_*` bits wanted; on output, the bits whose fields are
    /// valid (a subset of those wanted).
    pub st_litemask: c_ulong,
}

/// One directory entry from `pvfs_readdir`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pvfs_dirent {
    /// The object's handle (`st_ino`).
    pub d_ino: ino_t,
    /// `DT_REG`, `DT_DIR` or `DT_LNK`.
    pub d_type: c_uchar,
    /// The name, NUL-terminated.
    pub d_name: [c_char; 256],
}

/// One entry from `pvfs_getdents_plus`/`pvfs_getdents_plus_lite`: the name, the type
/// and the attributes fetched with it (`struct dirent_plus` of the POSIX extensions
/// paper, Vilayannur et al., 2008). If the attributes could not be fetched (e.g. the
/// object was removed meanwhile), `d_errno` holds why and `d_stat.st_litemask` is 0;
/// `d_ino`, `d_type` and `d_name` are valid in any case.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pvfs_dirent_plus {
    /// The object's handle.
    pub d_ino: ino_t,
    /// `DT_REG`, `DT_DIR` or `DT_LNK`.
    pub d_type: c_uchar,
    /// The name, NUL-terminated.
    pub d_name: [c_char; 256],
    /// 0, or the errno of the failed attribute fetch for this entry.
    pub d_errno: c_int,
    /// The attributes; `d_stat.st_litemask` tells which lazy fields are valid.
    pub d_stat: pvfs_stat_lite,
}

/// Layout hints for `pvfs_open_layout` (used only when the call creates the file).
/// A field left at its "default" value takes the parent directory's default layout,
/// else the file system's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct pvfs_layout_hint {
    /// Bytes per stripe unit (512 B .. 1 GiB); 0 = default.
    pub stripe_size: u64,
    /// Number of data servers to stripe over; 0 or -1 = default.
    pub stripe_count: i32,
    /// Index, among the data servers, of the server holding the first stripe unit;
    /// -1 = chosen by the metadata server (round-robin).
    pub first_server: i32,
    /// Copies of every stripe unit (1 .. 3); 0 or -1 = default.
    pub replicas: i32,
}

/// Requests sent to the servers by this process since `pvfs_init` or the last
/// `pvfs_stats_reset` (see `pvfs_stats`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pvfs_stats {
    /// Requests to any server.
    pub total: u64,
    /// Requests handled by the metadata role (lookups, attributes, directory
    /// operations, creates, removes, statfs, ping).
    pub meta_requests: u64,
    /// Requests handled by the data role (Read, Write, GetSizes, Truncate, Fsync,
    /// RemoveDatafiles).
    pub data_requests: u64,
    /// Number of servers in the configuration.
    pub nservers: u32,
    /// Requests to each server, in configuration order (the first
    /// `PVFS_STATS_MAX_SERVERS` servers).
    pub per_server: [u64; PVFS_STATS_MAX_SERVERS],
}

/// Space and objects of the whole file system (`pvfs_statfs`), summed over the
/// servers that answered.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct pvfs_statfs {
    /// The file system's id.
    pub f_fsid: u64,
    /// Bytes of storage of the data servers that answered.
    pub f_total_bytes: u64,
    /// Free bytes.
    pub f_free_bytes: u64,
    /// Bytes available to unprivileged users.
    pub f_avail_bytes: u64,
    /// Metadata objects (files, directories, symlinks, directory shards).
    pub f_objects: u64,
    /// Datafiles.
    pub f_datafiles: u64,
    /// Servers in the configuration.
    pub f_servers: u32,
    /// Servers that answered.
    pub f_servers_up: u32,
    /// Default stripe size of new files.
    pub f_stripe_size: u64,
    /// Default stripe count of new files.
    pub f_stripe_count: u32,
    /// Longest entry name.
    pub f_namemax: u32,
}

/// An open directory stream (`pvfs_opendir`); opaque.
pub struct pvfs_dir {
    pub(crate) fd: c_int,
    pub(crate) ent: pvfs_dirent,
}

/// A zeroed stat-lite (all fields 0, mask empty).
pub(crate) fn empty_lite() -> pvfs_stat_lite {
    let zero = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    pvfs_stat_lite {
        st_dev: 0,
        st_ino: 0,
        st_mode: 0,
        st_nlink: 0,
        st_uid: 0,
        st_gid: 0,
        st_rdev: 0,
        st_size: 0,
        st_blksize: 0,
        st_blocks: 0,
        st_atim: zero,
        st_mtim: zero,
        st_ctim: zero,
        st_litemask: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_the_client() {
        assert_eq!(PVFS_GROUP_HANDLE_MAX, pvfs_client::GROUP_HANDLE_MAX);
        assert_eq!(PVFS_NAME_MAX, pvfs_proto::types::NAME_MAX);
        assert_eq!(
            PVFS_SLITE_ALL,
            PVFS_SLITE_SIZE
                | PVFS_SLITE_BLOCKS
                | PVFS_SLITE_ATIME
                | PVFS_SLITE_MTIME
                | PVFS_SLITE_CTIME
        );
    }
}
