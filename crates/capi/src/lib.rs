//! libpvfs: the C API of pvfs (`libpvfs.so`, `libpvfs.a`, `include/pvfs.h`).
//!
//! HPC applications and I/O libraries are written in C; this crate gives them the
//! native pvfs API of the PVFS paper (Carns et al., 2000: open/read/write with layout
//! hints, the partitioned-file interface) and the POSIX HPC I/O extensions that the
//! POSIX extensions paper (Vilayannur et al., 2008) built into PVFS2:
//! group opens (`pvfs_openg`/`pvfs_openfh`), lazy attributes
//! (`pvfs_statlite`/`pvfs_lstatlite`/`pvfs_fstatlite`), noncontiguous I/O
//! (`pvfs_readx`/`pvfs_writex`) and bulk metadata
//! (`pvfs_getdents_plus`/`pvfs_getdents_plus_lite`), plus request counters so programs
//! can see what each call costs (`pvfs_stats`), and advisory locks that hold across
//! every client (`pvfs_fcntl_lock`, `pvfs_flock`).
//!
//! Everything goes through `pvfs-client` (no interface re-implements client logic;
//! ARCHITECTURE.md): one blocking client per process, shared by all threads. Functions
//! return -1 (or NULL) and set `errno` like libc; no panic crosses into C. The header
//! is generated from this crate by cbindgen (`tests/header.rs` keeps the committed copy
//! in step); `docs/capi.md` describes the API as a whole.

mod attrs;
mod counts;
mod dir;
mod file;
mod group;
mod init;
mod locks;
mod meta;
mod state;
mod stats;
mod types;

pub use dir::*;
pub use file::*;
pub use group::*;
pub use init::*;
pub use locks::*;
pub use meta::*;
pub use stats::*;
pub use types::*;
