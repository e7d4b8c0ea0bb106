//! pvfs FUSE mount: the POSIX path for unmodified programs, the role of
//! PVFS2's kernel module and client daemon.
//!
//! [`serve`] mounts a pvfs file system with `fuser` (mount(2) as root, `fusermount3`
//! otherwise) and answers the kernel until the mount goes away or the process gets
//! SIGTERM/SIGINT/SIGHUP, which unmount it cleanly. [`unmount`] takes a mount away,
//! also when its daemon is dead or hung.
//!
//! How requests flow: several FUSE threads (`clone_fd`) read requests; each callback
//! hands its reply object to a task on a tokio runtime owned by the mount
//! ([`fs`]), so a slow or dead server never blocks a FUSE thread, and every task is
//! bounded by a watchdog besides the client's own deadlines. The work itself
//! ([`ops`]) is done with the shared client library, acting with the credentials of
//! the calling process ([`creds`]); the kernel checks mode bits
//! (`default_permissions`) and the servers enforce ownership rules.
//!
//! The modules form layers, each using only those before it: the options and the
//! errno mapping ([`options`], [`errors`]); the shared state ([`inner`], with the
//! tables of [`state`] and the read-ahead, background writes and small files they
//! hold); the operations ([`ops`], one file per concern); the `fuser` callbacks
//! ([`fs`]); mounting and unmounting ([`mount`], with the change feeds of [`feed`]).
//!
//! Inode numbers are pvfs handles (the root directory is FUSE's inode 1); handles
//! are never reused, so the kernel's inode cache never names the wrong object.
//! Open files, files unlinked while open, and directory streams are tracked in
//! [`state`]. File locks go to the servers ([`ops::locks`], `docs/locks.md`). Semantics
//! and limits are documented in `docs/fuse.md`.

mod attr;
mod busy;
mod creds;
mod errors;
mod feed;
mod fs;
mod inner;
mod mount;
mod ops;
mod options;
mod readahead;
mod smallfiles;
mod state;
mod writebehind;
mod xattr;

pub use mount::{serve, unmount, Error, Unmounted};
pub use options::MountOptions;
pub use xattr::LAYOUT_XATTR;
