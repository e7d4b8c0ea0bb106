//! The file system operations, as async methods of the mount's shared state
//! ([`Inner`](crate::inner::Inner)), one file per concern. Each returns what the
//! FUSE reply needs or an errno; `fs.rs` runs them on FUSE threads or as tasks.
//!
//! Whose credentials: namespace and attribute changes act as the calling process
//! (servers record the owner and enforce chmod/chown/utimes rules). Data I/O,
//! truncation and bookkeeping act as the mount itself, because the kernel has
//! already checked the caller's access (`default_permissions`) and POSIX lets a
//! writer do what the servers reserve for owners: set times to "now", clear
//! set-user-ID on write, truncate. Those few cases are retried as the mount only
//! when the request can only have come from such a kernel-approved path.

pub(crate) mod attrs;
pub(crate) mod create;
pub(crate) mod dirs;
pub(crate) mod io;
pub(crate) mod locks;
pub(crate) mod names;
pub(crate) mod open;
pub(crate) mod remove;
pub(crate) mod rename;
pub(crate) mod statfs;
pub(crate) mod xattrs;
