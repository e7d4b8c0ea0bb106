/*
 * pvfs.h: the C API of pvfs, a parallel file system (libpvfs.so / libpvfs.a).
 *
 * Link with -lpvfs (pkg-config --cflags --libs pvfs). Call pvfs_init() first. Paths are
 * paths inside the pvfs file system ("/dir/file"). Every function is thread-safe and,
 * on failure, returns -1 (or NULL) and sets errno; pvfs_last_error() describes it.
 * Overview, descriptor semantics, formats and message-count guarantees: docs/capi.md.
 */

#ifndef PVFS_H
#define PVFS_H

/* Generated from crates/capi by cbindgen: do not edit (PVFS_UPDATE_HEADER=1 cargo test -p pvfs-capi --test header). */

#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
/** An open directory stream (pvfs_opendir); opaque. */
typedef struct pvfs_dir PVFS_DIR;

/**
 * statlite mask bit: the size (`st_size`). For a regular file it costs one request
 * per data server of the file; without it no data server is contacted.
 */
#define PVFS_SLITE_SIZE 1

/**
 * statlite mask bit: `st_blocks` (what the data servers allocate for the file; asked
 * with the size, in the same requests, so it costs the same).
 */
#define PVFS_SLITE_BLOCKS 2

/**
 * statlite mask bit: `st_atim`, as the metadata server stores it (lazy: reads do
 * not update it).
 */
#define PVFS_SLITE_ATIME 4

/**
 * statlite mask bit: `st_mtim`. Without `PVFS_SLITE_SIZE` it is the metadata
 * server's copy, which libpvfs brings up to date when a descriptor that wrote is
 * closed or fsynced (lazy); with `PVFS_SLITE_SIZE` it also accounts for the data
 * servers' modification times (exact).
 */
#define PVFS_SLITE_MTIME 8

/**
 * statlite mask bit: `st_ctim` (the last attribute change on the metadata server).
 */
#define PVFS_SLITE_CTIME 16

/**
 * Every statlite mask bit: what `pvfs_stat` returns.
 */
#define PVFS_SLITE_ALL 31

/**
 * A buffer of this many bytes holds any group handle `pvfs_openg` makes (a layout
 * of 4096 datafiles); a handle for a file striped over `c` servers takes
 * `85 + 12 * c` bytes.
 */
#define PVFS_GROUP_HANDLE_MAX 229485

/**
 * Servers whose request counts `struct pvfs_stats` reports one by one.
 */
#define PVFS_STATS_MAX_SERVERS 64

/**
 * Longest entry name, in bytes, without the terminating NUL.
 */
#define PVFS_NAME_MAX 255

/**
 * An open directory stream (`pvfs_opendir`); opaque.
 */
struct pvfs_dir;

/**
 * The fields of `struct stat` plus a mask (`struct stat_lite` of the POSIX extensions
 * paper, Vilayannur et al., 2008). The field names match glibc's, so `sl.st_mtime` (a
 * macro for `st_mtim.tv_sec`) works. Fields other than the five lazy ones (size,
 * blocks, atime, mtime, ctime) are always filled in.
 */
struct pvfs_stat_lite {
  /**
   * The file system's id (the fsid of the configuration, truncated to `dev_t`).
   */
  dev_t st_dev;
  /**
   * The object's 64-bit handle.
   */
  ino_t st_ino;
  /**
   * File type and permission bits, as `st_mode` of `struct stat`.
   */
  mode_t st_mode;
  /**
   * Link count.
   */
  nlink_t st_nlink;
  /**
   * Owner.
   */
  uid_t st_uid;
  /**
   * Group.
   */
  gid_t st_gid;
  /**
   * Always 0.
   */
  dev_t st_rdev;
  /**
   * Size in bytes; valid only with `PVFS_SLITE_SIZE` in `st_litemask`.
   */
  off_t st_size;
  /**
   * Preferred I/O size: the stripe size of a regular file.
   */
  blksize_t st_blksize;
  /**
   * 512-byte blocks allocated on the data servers; valid only with
   * `PVFS_SLITE_BLOCKS`.
   */
  blkcnt_t st_blocks;
  /**
   * Last access; valid only with `PVFS_SLITE_ATIME`.
   */
  struct timespec st_atim;
  /**
   * Last modification; valid only with `PVFS_SLITE_MTIME`.
   */
  struct timespec st_mtim;
  /**
   * Last attribute change; valid only with `PVFS_SLITE_CTIME`.
   */
  struct timespec st_ctim;
  /**
   * On input, the `PVFS_SLITE_*` bits wanted; on output, the bits whose fields are
   * valid (a subset of those wanted).
   */
  unsigned long st_litemask;
};

/**
 * One entry from `pvfs_getdents_plus`/`pvfs_getdents_plus_lite`: the name, the type
 * and the attributes fetched with it (`struct dirent_plus` of the POSIX extensions
 * paper, Vilayannur et al., 2008). If the attributes could not be fetched (e.g. the
 * object was removed meanwhile), `d_errno` holds why and `d_stat.st_litemask` is 0;
 * `d_ino`, `d_type` and `d_name` are valid in any case.
 */
struct pvfs_dirent_plus {
  /**
   * The object's handle.
   */
  ino_t d_ino;
  /**
   * `DT_REG`, `DT_DIR` or `DT_LNK`.
   */
  unsigned char d_type;
  /**
   * The name, NUL-terminated.
   */
  char d_name[256];
  /**
   * 0, or the errno of the failed attribute fetch for this entry.
   */
  int d_errno;
  /**
   * The attributes; `d_stat.st_litemask` tells which lazy fields are valid.
   */
  struct pvfs_stat_lite d_stat;
};

/**
 * One directory entry from `pvfs_readdir`.
 */
struct pvfs_dirent {
  /**
   * The object's handle (`st_ino`).
   */
  ino_t d_ino;
  /**
   * `DT_REG`, `DT_DIR` or `DT_LNK`.
   */
  unsigned char d_type;
  /**
   * The name, NUL-terminated.
   */
  char d_name[256];
};

/**
 * Layout hints for `pvfs_open_layout` (used only when the call creates the file).
 * A field left at its "default" value takes the parent directory's default layout,
 * else the file system's.
 */
struct pvfs_layout_hint {
  /**
   * Bytes per stripe unit (512 B .. 1 GiB); 0 = default.
   */
  uint64_t stripe_size;
  /**
   * Number of data servers to stripe over; 0 or -1 = default.
   */
  int32_t stripe_count;
  /**
   * Index, among the data servers, of the server holding the first stripe unit;
   * -1 = chosen by the metadata server (round-robin).
   */
  int32_t first_server;
  /**
   * Copies of every stripe unit (1 .. 3); 0 or -1 = default.
   */
  int32_t replicas;
};

/**
 * One region of a file for `pvfs_readx`/`pvfs_writex`: `xtv_len` bytes from byte
 * `xtv_off` of the file.
 */
struct pvfs_xtvec {
  /**
   * Offset of the region from the start of the file (>= 0).
   */
  off_t xtv_off;
  /**
   * Length of the region in bytes.
   */
  size_t xtv_len;
};

/**
 * Space and objects of the whole file system (`pvfs_statfs`), summed over the
 * servers that answered.
 */
struct pvfs_statfs {
  /**
   * The file system's id.
   */
  uint64_t f_fsid;
  /**
   * Bytes of storage of the data servers that answered.
   */
  uint64_t f_total_bytes;
  /**
   * Free bytes.
   */
  uint64_t f_free_bytes;
  /**
   * Bytes available to unprivileged users.
   */
  uint64_t f_avail_bytes;
  /**
   * Metadata objects (files, directories, symlinks, directory shards).
   */
  uint64_t f_objects;
  /**
   * Datafiles.
   */
  uint64_t f_datafiles;
  /**
   * Servers in the configuration.
   */
  uint32_t f_servers;
  /**
   * Servers that answered.
   */
  uint32_t f_servers_up;
  /**
   * Default stripe size of new files.
   */
  uint64_t f_stripe_size;
  /**
   * Default stripe count of new files.
   */
  uint32_t f_stripe_count;
  /**
   * Longest entry name.
   */
  uint32_t f_namemax;
};

/**
 * Requests sent to the servers by this process since `pvfs_init` or the last
 * `pvfs_stats_reset` (see `pvfs_stats`).
 */
struct pvfs_stats {
  /**
   * Requests to any server.
   */
  uint64_t total;
  /**
   * Requests handled by the metadata role (lookups, attributes, directory
   * operations, creates, removes, statfs, ping).
   */
  uint64_t meta_requests;
  /**
   * Requests handled by the data role (Read, Write, GetSizes, Truncate, Fsync,
   * RemoveDatafiles).
   */
  uint64_t data_requests;
  /**
   * Number of servers in the configuration.
   */
  uint32_t nservers;
  /**
   * Requests to each server, in configuration order (the first
   * `PVFS_STATS_MAX_SERVERS` servers).
   */
  uint64_t per_server[PVFS_STATS_MAX_SERVERS];
};

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * `getdents_plus` of the POSIX extensions paper (Vilayannur et al., 2008): reads up to
 * `count` entries of the directory open as `fd` into the array `buf`, each with all
 * its attributes (`d_stat.st_litemask` = `PVFS_SLITE_ALL`, sizes included) and a
 * per-entry `d_errno`. The first call (or the first after `pvfs_lseek(fd, 0,
 * SEEK_SET)`) fetches the whole listing with the two-phase algorithm: one ReadDir per
 * directory shard, one ListAttr per metadata server, one GetSizes per data server (1 +
 * 2m message pairs, plus shards, for m servers — not one per entry); later calls
 * continue from the descriptor's position without any request. "." and ".." are not
 * listed. Returns the number of entries stored (0 at the end), or -1 with errno:
 * EBADF, ENOTDIR, EFAULT, EINVAL (`count` 0), EIO/EHOSTDOWN/ETIMEDOUT.
 *
 * # Safety
 * `buf` is NULL or writable for `count` `struct pvfs_dirent_plus`.
 */
int pvfs_getdents_plus(int fd, struct pvfs_dirent_plus *buf, unsigned int count);

/**
 * `getdents_plus_lite` of the POSIX extensions paper (Vilayannur et al., 2008):
 * `pvfs_getdents_plus` fetching only the lazy attributes in `lite_mask`
 * (`PVFS_SLITE_*`): without `PVFS_SLITE_SIZE` and `PVFS_SLITE_BLOCKS` the data servers
 * are not contacted at all (phase 2 is skipped). Each entry's `d_stat.st_litemask`
 * tells which lazy fields are valid. A listing fetched without sizes is fetched again
 * if a later call on the same descriptor asks for them.
 *
 * # Safety
 * As `pvfs_getdents_plus`.
 */
int pvfs_getdents_plus_lite(int fd,
                            unsigned long lite_mask,
                            struct pvfs_dirent_plus *buf,
                            unsigned int count);

/**
 * `opendir(3)`: opens directory `path` as a stream for `pvfs_readdir` (its
 * descriptor is `pvfs_dirfd`). Costs the path's lookups. Returns the stream, or NULL
 * with errno: ENOENT, ENOTDIR, EACCES, EFAULT, EMFILE, EIO.
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string.
 */
struct pvfs_dir *pvfs_opendir(const char *path);

/**
 * `readdir(3)`: the next entry of the stream, or NULL at the end (errno unchanged)
 * or on error (errno set: EBADF, EIO/EHOSTDOWN/ETIMEDOUT). The first call fetches
 * the names (one ReadDir per shard); the entry is overwritten by the next call on
 * the same stream. "." and ".." are not listed.
 *
 * # Safety
 * `dir` is NULL or a stream from `pvfs_opendir` not yet closed, used by one thread
 * at a time.
 */
struct pvfs_dirent *pvfs_readdir(struct pvfs_dir *dir);

/**
 * `rewinddir(3)`: back to the first entry; the next read fetches the listing again.
 *
 * # Safety
 * As `pvfs_readdir`.
 */
void pvfs_rewinddir(struct pvfs_dir *dir);

/**
 * `dirfd(3)`: the stream's descriptor (usable with `pvfs_getdents_plus`,
 * `pvfs_fstat`, `pvfs_lseek`), or -1 with errno EINVAL for NULL.
 *
 * # Safety
 * As `pvfs_readdir`.
 */
int pvfs_dirfd(struct pvfs_dir *dir);

/**
 * `closedir(3)`: closes the stream and its descriptor and frees it. Returns 0, or -1
 * with errno EBADF.
 *
 * # Safety
 * `dir` is NULL or a stream from `pvfs_opendir` not yet closed; it must not be used
 * afterwards.
 */
int pvfs_closedir(struct pvfs_dir *dir);

/**
 * Opens or creates `path` (an absolute path inside the pvfs file system; a
 * relative path is taken from its root) and returns a new descriptor, as
 * `open(2)`: O_RDONLY/O_WRONLY/O_RDWR are enforced (reading a write-only descriptor
 * is EBADF), O_CREAT (with `mode` & ~umask), O_EXCL, O_TRUNC, O_APPEND and
 * O_DIRECTORY are honoured, other flags are ignored. A directory opens read-only and
 * its descriptor serves `pvfs_getdents_plus`. Costs one lookup per path component
 * (plus one create with O_CREAT); no data server is contacted (except by O_TRUNC).
 * Returns the descriptor, or -1 with errno: ENOENT, EEXIST, EISDIR, ENOTDIR,
 * EACCES, ELOOP, ENAMETOOLONG, EINVAL, EFAULT, EMFILE, ENXIO (not initialized),
 * EHOSTDOWN/ETIMEDOUT/EIO (a server is unreachable).
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string.
 */
int pvfs_open(const char *path, int flags, mode_t mode);

/**
 * `pvfs_open` with layout hints for a file this call creates (ignored when the file
 * exists): stripe size, stripe count and first data server; NULL `hint` or default
 * fields take the parent directory's default layout, else the file system's.
 * Errors as `pvfs_open`, and EINVAL for a layout the servers refuse.
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string; `hint` is NULL or points to a
 * `struct pvfs_layout_hint`.
 */
int pvfs_open_layout(const char *path, int flags, mode_t mode, const struct pvfs_layout_hint *hint);

/**
 * `creat(2)`: `pvfs_open(path, O_CREAT | O_WRONLY | O_TRUNC, mode)`.
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string.
 */
int pvfs_creat(const char *path, mode_t mode);

/**
 * Closes a pvfs descriptor. If it wrote, the file's modification time on the
 * metadata server is brought up to date (one request; its failure is not reported,
 * as PVFS2 flushes timestamps lazily). The process's record locks on the file and
 * the descriptor's OFD locks and flocks are released (a request only if it holds
 * any). Returns 0, or -1 with errno EBADF.
 */
int pvfs_close(int fd);

/**
 * Reads up to `n` bytes at the descriptor's position (in its partition, if one is
 * set) and advances it. One request per data server holding some of the bytes.
 * Returns the bytes read (0 at the end of the file; holes read as zeros), or -1 with
 * errno: EBADF (not open for reading), EISDIR, EFAULT, EINVAL, EIO/EHOSTDOWN/
 * ETIMEDOUT.
 *
 * # Safety
 * `buf` is NULL or valid for writes of `n` bytes.
 */
ssize_t pvfs_read(int fd, void *buf, size_t n);

/**
 * Writes `n` bytes at the descriptor's position (at the end of the file with
 * O_APPEND, atomically against other clients' appends; in its partition, if one
 * is set) and advances it. One request per data
 * server receiving some of the bytes. Returns `n`, or -1 with errno: EBADF (not open
 * for writing), EISDIR, EFAULT, EFBIG, ENOSPC, EIO/EHOSTDOWN/ETIMEDOUT.
 *
 * # Safety
 * `buf` is NULL or valid for reads of `n` bytes.
 */
ssize_t pvfs_write(int fd, const void *buf, size_t n);

/**
 * Reads up to `n` bytes at `offset` (a position in the partition, if one is set)
 * without using or changing the descriptor's position. As `pvfs_read`, and EINVAL
 * for a negative offset.
 *
 * # Safety
 * `buf` is NULL or valid for writes of `n` bytes.
 */
ssize_t pvfs_pread(int fd, void *buf, size_t n, off_t offset);

/**
 * Writes `n` bytes at `offset` (a position in the partition, if one is set; O_APPEND
 * does not apply) without using or changing the descriptor's position. As
 * `pvfs_write`, and EINVAL for a negative offset.
 *
 * # Safety
 * `buf` is NULL or valid for reads of `n` bytes.
 */
ssize_t pvfs_pwrite(int fd, const void *buf, size_t n, off_t offset);

/**
 * `readv(2)`: reads into `iovcnt` memory regions (at most 1024) from the contiguous
 * bytes at the descriptor's position, in one call (one request per data server).
 * Returns bytes read, or -1 with errno as `pvfs_read`.
 *
 * # Safety
 * `iov` is NULL or valid for `iovcnt` elements describing writable memory.
 */
ssize_t pvfs_readv(int fd, const struct iovec *iov, int iovcnt);

/**
 * `writev(2)`: writes `iovcnt` memory regions (at most 1024) as contiguous bytes at
 * the descriptor's position, in one call. Returns bytes written, or -1 with errno as
 * `pvfs_write`.
 *
 * # Safety
 * `iov` is NULL or valid for `iovcnt` elements describing readable memory.
 */
ssize_t pvfs_writev(int fd, const struct iovec *iov, int iovcnt);

/**
 * `preadv(2)`: `pvfs_readv` at `offset`, position unchanged.
 *
 * # Safety
 * As `pvfs_readv`.
 */
ssize_t pvfs_preadv(int fd, const struct iovec *iov, int iovcnt, off_t offset);

/**
 * `pwritev(2)`: `pvfs_writev` at `offset`, position unchanged.
 *
 * # Safety
 * As `pvfs_writev`.
 */
ssize_t pvfs_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset);

/**
 * `readx` of the POSIX extensions paper (Vilayannur et al., 2008): reads the file
 * regions `xtv` (offsets from the start of the file, in any order, partition and
 * position ignored) into the memory regions `iov`. Counts and individual sizes of the
 * two vectors need not match, only their totals (else EINVAL). The whole list travels
 * in one request per data server holding some of the bytes, whatever the number of
 * regions. Returns the bytes of the regions that lie before the end of the file (the
 * rest read as zeros), or -1 with the first error: EBADF, EISDIR, EINVAL, EFAULT,
 * EIO/EHOSTDOWN/ETIMEDOUT.
 *
 * # Safety
 * `iov` is NULL or valid for `iov_count` elements describing writable memory; `xtv`
 * is NULL or valid for `xtv_count` elements.
 */
ssize_t pvfs_readx(int fd,
                   const struct iovec *iov,
                   size_t iov_count,
                   const struct pvfs_xtvec *xtv,
                   size_t xtv_count);

/**
 * `writex` of the POSIX extensions paper (Vilayannur et al., 2008): writes the memory
 * regions `iov` to the file regions `xtv` (offsets from the start of the file, in any
 * order, partition, position and O_APPEND ignored); totals must match (else EINVAL).
 * One request per data server receiving some of the bytes, whatever the number of
 * regions. Overlapping regions are written in list order. Returns the bytes written,
 * or -1 with the first error: EBADF, EISDIR, EINVAL, EFAULT, EFBIG, ENOSPC,
 * EIO/EHOSTDOWN/ETIMEDOUT.
 *
 * # Safety
 * `iov` is NULL or valid for `iov_count` elements describing readable memory; `xtv`
 * is NULL or valid for `xtv_count` elements.
 */
ssize_t pvfs_writex(int fd,
                    const struct iovec *iov,
                    size_t iov_count,
                    const struct pvfs_xtvec *xtv,
                    size_t xtv_count);

/**
 * `lseek(2)`: SEEK_SET, SEEK_CUR or SEEK_END (the end costs one attribute request
 * and one request per data server). With a partition set, positions count the
 * partition's bytes. On a directory descriptor the position is an entry index
 * (SEEK_SET/SEEK_CUR; seeking to 0 rewinds and refetches the listing). Returns the
 * new position, or -1 with errno: EBADF, EINVAL (bad whence or a negative result),
 * EOVERFLOW.
 */
off_t pvfs_lseek(int fd, off_t offset, int whence);

/**
 * `fsync(2)`: if this descriptor wrote, records the modification time on the metadata
 * server; then makes every byte written to the file durable on its data servers (one
 * request per data server) and every metadata change acknowledged so far durable on
 * every metadata server (the file's name, its attributes). For a directory, the
 * metadata part. Returns 0, or -1 with errno: EBADF, EIO/EHOSTDOWN/ETIMEDOUT.
 */
int pvfs_fsync(int fd);

/**
 * `ftruncate(2)`: sets the file's size (the whole file's, even with a partition
 * set), cutting or extending with a hole. Returns 0, or -1 with errno: EBADF, EINVAL
 * (negative length, a directory, or not open for writing), EFBIG, EIO.
 */
int pvfs_ftruncate(int fd, off_t length);

/**
 * `fallocate(2)`: on the whole file's bytes `offset .. offset + len` (a partition
 * does not apply), `mode` 0 allocates them on the data servers, extending the file
 * when they reach past its end; `FALLOC_FL_KEEP_SIZE` allocates without changing the
 * size; `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE` deallocates them (they read as
 * zeros); `FALLOC_FL_ZERO_RANGE`, with or without `FALLOC_FL_KEEP_SIZE`, zeroes
 * them. One request per data server holding part of the range, in parallel.
 * Returns 0, or -1 with errno: EBADF (not open for writing), EINVAL (negative
 * offset, length not positive), EOPNOTSUPP (another mode, or one the data servers'
 * file systems do not support), EISDIR, EFBIG, ENOSPC, EIO/EHOSTDOWN/ETIMEDOUT.
 */
int pvfs_fallocate(int fd, int mode, off_t offset, off_t len);

/**
 * The partitioned-file interface of the PVFS paper (Carns et al., 2000): after this
 * call, `pvfs_read`, `pvfs_write`, `pvfs_pread`, `pvfs_pwrite` and `pvfs_lseek` on
 * `fd` see only the partition: blocks of `gsize` bytes, the first at file offset
 * `offset`, one every `stride` bytes, concatenated (position 0 is byte `offset` of the
 * file). One request per data server per call, whatever the number of blocks touched.
 * `gsize` 0 removes the partition. Either way the position is reset to 0. Returns 0,
 * or -1 with errno: EBADF, EISDIR, EINVAL (negative values, or `stride < gsize`).
 */
int pvfs_set_partition(int fd, off_t offset, off_t gsize, off_t stride);

/**
 * The layout of the open file `fd`: stripe size, stripe count, and the index among
 * the data servers of the server holding the first stripe unit. Sends no request.
 * Returns 0, or -1 with errno: EBADF, EISDIR, EFAULT.
 *
 * # Safety
 * `hint` is NULL or points to a writable `struct pvfs_layout_hint`.
 */
int pvfs_get_layout(int fd, struct pvfs_layout_hint *hint);

/**
 * `openg` of the POSIX extensions paper (Vilayannur et al., 2008): opens or creates
 * `path` like `pvfs_open(path, flags, mode)` (same requests, same errors) and stores a
 * group handle for the file in `handle`, setting `*handle_len` to its length. No
 * descriptor is made; pass the handle to `pvfs_openfh` (in this or any process of any
 * host using the same configuration). The handle carries the access mode and O_APPEND,
 * which `pvfs_openfh` enforces. A buffer of `PVFS_GROUP_HANDLE_MAX` bytes always
 * suffices; if `handle` is NULL or `*handle_len` is too small, the call fails with
 * ERANGE and sets `*handle_len` to the size needed (the file is opened or created all
 * the same, so call again without O_EXCL). Returns 0, or -1 with errno: as
 * `pvfs_open`, and ERANGE, EISDIR (a directory), EACCES (no permission for the access
 * mode).
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string; `handle_len` is NULL or points to a
 * readable and writable `size_t`; `handle` is NULL or writable for `*handle_len`
 * bytes.
 */
int pvfs_openg(const char *path, void *handle, size_t *handle_len, int flags, int mode);

/**
 * `openfh` of the POSIX extensions paper (Vilayannur et al., 2008): a new descriptor
 * for the file a group handle from `pvfs_openg` names, opened with the handle's access
 * mode (a read-only handle gives a descriptor that cannot write: EBADF) and O_APPEND.
 * Checks the handle's length, checksum and fsid locally and sends no request at all,
 * whatever the number of processes doing it (the data servers check the capabilities
 * it carries at each read and write). Returns the descriptor, or -1 with errno:
 * EBADMSG (a damaged handle), EXDEV (another file system), EFAULT, EMFILE, ENXIO.
 *
 * # Safety
 * `handle` is NULL or readable for `handle_len` bytes.
 */
int pvfs_openfh(const void *handle, size_t handle_len);

/**
 * Initializes the library with the file system described by the configuration file
 * `config_path` (NULL or "": the file named by `$PVFS_CONFIG`). No server is
 * contacted yet: connections are made on first use. Later calls only count (each
 * needs its own `pvfs_finalize`); one naming another configuration file fails with
 * EBUSY (NULL is accepted).
 * In a forked child, call it again before using pvfs (descriptors opened by the
 * parent are not usable in the child).
 * Returns 0, or -1 with errno: ENOENT/EACCES (file), EINVAL (no path, or an invalid
 * configuration; `pvfs_last_error` says where), EBUSY.
 *
 * # Safety
 * `config_path` is NULL or a NUL-terminated string.
 */
int pvfs_init(const char *config_path);

/**
 * Undoes one `pvfs_init`. The last one closes every pvfs descriptor still open
 * (without the mtime update of `pvfs_close`), releases every lock still held, drops
 * the connections and stops the client's threads. Returns 0, or -1 with errno ENXIO if the library is not
 * initialized.
 */
int pvfs_finalize(void);

/**
 * A human-readable description of the calling thread's last failed pvfs call (for
 * messages; errno is what programs should act on). Never NULL; valid until the
 * thread's next failing call.
 */
const char *pvfs_last_error(void);

/**
 * Takes, tests or releases an advisory byte-range lock on pvfs descriptor `fd`, as
 * `fcntl(fd, cmd, lock)` does on Linux; the lock holds across every client of the
 * file system. `cmd`: F_GETLK, F_SETLK, F_SETLKW (record locks, owned by the
 * process; released when the process closes any pvfs descriptor of the file) or
 * F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW (owned by the descriptor; released by its
 * `pvfs_close`). `lock->l_whence` may be SEEK_SET, SEEK_CUR or SEEK_END (one request
 * per data server for the size). F_SETLKW waits until the lock is granted; a
 * signal whose handler lacks SA_RESTART ends the wait with EINTR (signals are held
 * back on the calling thread meanwhile and delivered when it ends). F_GETLK stores
 * the lock in the way (with `l_pid` its process when another process of this
 * client holds it, 0 for another client's, -1 for an OFD lock or flock), or sets
 * `l_type` to F_UNLCK. Returns 0, or -1 with errno: EBADF (not a pvfs descriptor, or
 * a read lock on a descriptor not open for reading, a write lock on one not open
 * for writing), EINVAL (bad command, type or range; `l_pid` not 0 for F_OFD_*),
 * EFAULT (NULL `lock`), EAGAIN (F_SETLK: another owner's lock is in the way),
 * EDEADLK (F_SETLKW would deadlock, possibly through other clients), EINTR,
 * EACCES (no read, resp. write, permission on the file), ENOLCK (a lock of this
 * owner on the file was lost: its server restarted and it could not be reclaimed,
 * or this client could not renew its lease; reported once), EHOSTDOWN/ETIMEDOUT/EIO.
 *
 * # Safety
 * `lock` is NULL or points to a `struct flock`.
 */
int pvfs_fcntl_lock(int fd, int cmd, struct flock *lock);

/**
 * `flock(2)` on pvfs descriptor `fd`: LOCK_SH, LOCK_EX or LOCK_UN, with LOCK_NB not
 * to wait. A whole-file lock owned by the descriptor (released by its
 * `pvfs_close`), held across every client of the file system. pvfs keeps it as a
 * byte-range lock over the whole file, so it conflicts with `fcntl` locks on the
 * file (as NFS does; docs/locks.md). Returns 0, or -1 with errno: EBADF, EINVAL,
 * EWOULDBLOCK (LOCK_NB and another owner's lock is in the way), EINTR, EACCES (no
 * read, for LOCK_SH, or write, for LOCK_EX, permission on the file), ENOLCK,
 * EHOSTDOWN/ETIMEDOUT/EIO.
 */
int pvfs_flock(int fd, int op);

/**
 * `stat(2)`: attributes of what `path` names (a final symlink followed), with a
 * regular file's size and mtime from its data servers (one request per data server
 * after the lookups). `st_ino` is the pvfs handle, `st_blksize` the stripe size,
 * `st_blocks` the 512-byte blocks the data servers allocate for it (holes take none).
 * Returns 0, or -1 with errno:
 * ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG, EFAULT, EIO/EHOSTDOWN/ETIMEDOUT.
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string; `st` is NULL or a writable `struct stat`.
 */
int pvfs_stat(const char *path, struct stat *st);

/**
 * `lstat(2)`: as `pvfs_stat`, but a final symlink is described itself.
 *
 * # Safety
 * As `pvfs_stat`.
 */
int pvfs_lstat(const char *path, struct stat *st);

/**
 * `fstat(2)` of a pvfs descriptor: one attribute request, plus one per data server
 * for a regular file. Returns 0, or -1 with errno: EBADF, EFAULT, ENOENT/ESTALE (the
 * object was removed), EIO.
 *
 * # Safety
 * `st` is NULL or a writable `struct stat`.
 */
int pvfs_fstat(int fd, struct stat *st);

/**
 * `statlite` of the POSIX extensions paper (Vilayannur et al., 2008): like
 * `pvfs_stat`, but only the lazy fields asked for in `sl->st_litemask` (`PVFS_SLITE_*`
 * bits) are fetched; on return `st_litemask` holds the bits whose fields are valid.
 * Without `PVFS_SLITE_SIZE` and `PVFS_SLITE_BLOCKS` no data server is contacted (only
 * the lookups of the path are sent); the mtime is then the metadata server's lazy copy
 * (see `PVFS_SLITE_MTIME`). Non-lazy fields (ino, mode, nlink, uid, gid, blksize) are
 * always filled in; a directory's nlink, mtime and ctime are exact when
 * `PVFS_SLITE_MTIME` or `PVFS_SLITE_CTIME` is asked (its other shards' servers are
 * asked then), its owner's shard's only otherwise. Returns 0, or -1 with errno as
 * `pvfs_stat`.
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string; `sl` is NULL or a readable and
 * writable `struct pvfs_stat_lite`.
 */
int pvfs_statlite(const char *path, struct pvfs_stat_lite *sl);

/**
 * `lstatlite` of the POSIX extensions paper (Vilayannur et al., 2008): `pvfs_statlite`
 * without following a final symlink.
 *
 * # Safety
 * As `pvfs_statlite`.
 */
int pvfs_lstatlite(const char *path, struct pvfs_stat_lite *sl);

/**
 * `fstatlite` of the POSIX extensions paper (Vilayannur et al., 2008): `pvfs_statlite`
 * of a descriptor. One attribute request to the metadata server, plus one per data
 * server only if the size or blocks are asked for. Returns 0, or -1 with errno as
 * `pvfs_fstat`.
 *
 * # Safety
 * `sl` is NULL or a readable and writable `struct pvfs_stat_lite`.
 */
int pvfs_fstatlite(int fd, struct pvfs_stat_lite *sl);

/**
 * `mkdir(2)` with `mode` & ~umask; the new directory has the file system's shard
 * count and inherits its parent's default layout. Returns 0, or -1 with errno:
 * EEXIST, ENOENT, ENOTDIR, EACCES, ENAMETOOLONG, EFAULT, EIO.
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string.
 */
int pvfs_mkdir(const char *path, mode_t mode);

/**
 * `rmdir(2)`: removes an empty directory. Returns 0, or -1 with errno: ENOTEMPTY,
 * ENOENT, ENOTDIR, EBUSY (the root), EACCES, EFAULT, EIO.
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string.
 */
int pvfs_rmdir(const char *path);

/**
 * `unlink(2)`: removes a name of a file, symlink or special file; the object (and a
 * file's datafiles) goes with its last name. Descriptors still open on a file that
 * lost its last name then fail (ENOENT/ESTALE): libpvfs does not keep unlinked files
 * alive. Returns 0, or -1 with errno: ENOENT, EISDIR, ENOTDIR, EACCES, EFAULT, EIO.
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string.
 */
int pvfs_unlink(const char *path);

/**
 * `link(2)`: gives what `oldpath` names (not a directory; a symlink is linked itself)
 * the new name `newpath`, anywhere in the file system. Returns 0, or -1 with errno:
 * EEXIST, ENOENT, ENOTDIR, EPERM (a directory, or a file the caller neither owns nor
 * may read and write), EACCES, EMLINK, EFAULT, EIO.
 *
 * # Safety
 * `oldpath` and `newpath` are NULL or NUL-terminated strings.
 */
int pvfs_link(const char *oldpath, const char *newpath);

/**
 * `rename(2)`: moves `from` to `to`, replacing a file by a file or a directory by an
 * empty directory. Returns 0, or -1 with errno: ENOENT, EEXIST/ENOTEMPTY, EISDIR,
 * ENOTDIR, EINVAL (a directory into itself), EBUSY, EFAULT, EIO.
 *
 * # Safety
 * `from` and `to` are NULL or NUL-terminated strings.
 */
int pvfs_rename(const char *from, const char *to);

/**
 * `symlink(2)`: creates `linkpath` pointing to `target` (stored verbatim; an absolute
 * target is resolved from the pvfs root). Returns 0, or -1 with errno: EEXIST,
 * ENOENT, ENOTDIR, ENAMETOOLONG, EFAULT, EIO.
 *
 * # Safety
 * `target` and `linkpath` are NULL or NUL-terminated strings.
 */
int pvfs_symlink(const char *target, const char *linkpath);

/**
 * `readlink(2)`: copies the target of symlink `path` into `buf` (at most `bufsiz`
 * bytes, truncated, no terminating NUL). Returns the bytes copied, or -1 with errno:
 * EINVAL (not a symlink, or `bufsiz` 0), ENOENT, EFAULT, EIO.
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string; `buf` is NULL or writable for `bufsiz`
 * bytes.
 */
ssize_t pvfs_readlink(const char *path, char *buf, size_t bufsiz);

/**
 * `truncate(2)`: sets the size of file `path`. Returns 0, or -1 with errno: ENOENT,
 * EISDIR, EINVAL (negative length), EFBIG, EFAULT, EIO.
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string.
 */
int pvfs_truncate(const char *path, off_t length);

/**
 * `chmod(2)`: sets the permission bits (07777) of what `path` names. Returns 0, or
 * -1 with errno: EPERM (not the owner), ENOENT, EFAULT, EIO.
 *
 * # Safety
 * `path` is NULL or a NUL-terminated string.
 */
int pvfs_chmod(const char *path, mode_t mode);

/**
 * Space and objects of the file system, asking every server at once (servers that
 * do not answer within the request timeout are left out of the sums and counted in
 * `f_servers - f_servers_up`). Returns 0, or -1 with errno: EFAULT, or the error of
 * the first server if none answered.
 *
 * # Safety
 * `st` is NULL or a writable `struct pvfs_statfs`.
 */
int pvfs_statfs(struct pvfs_statfs *st);

/**
 * Requests this process has sent to any server since `pvfs_init` or the last
 * `pvfs_stats_reset`; 0 if the library is not initialized.
 */
uint64_t pvfs_requests_sent(void);

/**
 * Requests of operation `op` sent since `pvfs_init` or the last `pvfs_stats_reset`.
 * `op` is a protocol operation name: "Lookup", "GetAttr", "ListAttr", "SetAttr",
 * "Create", "Unlink", "LinkEntry", "Rename", "ReadDir", "SealDir", "SetParent",
 * "SetDirLayout", "RemoveObject", "Read", "Write", "GetSizes", "Truncate",
 * "RemoveDatafiles", "Fsync", "Sync", "StatFs", "Ping", "GetXattr", "SetXattr",
 * "ListXattr", "RemoveXattr"; "data" sums the data-role operations and "meta" the
 * others. Returns 0 for an unknown name, a NULL `op`, or an uninitialized library.
 *
 * # Safety
 * `op` is NULL or a NUL-terminated string.
 */
uint64_t pvfs_requests_for(const char *op);

/**
 * Fills `st` with the request counts since `pvfs_init` or the last
 * `pvfs_stats_reset`. Returns 0, or -1 with errno EFAULT (NULL) or ENXIO (not
 * initialized).
 *
 * # Safety
 * `st` is NULL or points to a writable `struct pvfs_stats`.
 */
int pvfs_stats(struct pvfs_stats *st);

/**
 * Sets every count `pvfs_requests_sent`, `pvfs_requests_for` and `pvfs_stats`
 * report back to 0. Returns 0, or -1 with errno ENXIO (not initialized).
 */
int pvfs_stats_reset(void);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* PVFS_H */
