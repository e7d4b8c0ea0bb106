//! File locks through the mount (`docs/locks.md`): the kernel sends `fcntl` record
//! locks, OFD locks and `flock` (negotiated with `FUSE_POSIX_LOCKS` and
//! `FUSE_FLOCK_LOCKS`) as FUSE lock requests, and the mount takes them on the
//! servers through the client library, so they hold across every client.
//!
//! - **Owners** are the kernel's lock owners: a process's file table for POSIX
//!   locks, the open file for OFD locks and `flock`. FUSE does not say which kind a
//!   request is (`fuser` drops `FUSE_LK_FLOCK`), so every lock taken through the
//!   mount is sent as a POSIX lock: a `flock` is a whole-file lock of its open file
//!   (as NFS does it; it then conflicts with `fcntl` locks), and a wait of any kind
//!   that would close a cycle fails with EDEADLK rather than hang.
//! - **Release**: the kernel sends a flush with the closing process's owner at every
//!   `close`; its locks on the file go then (POSIX). At the last close of an open
//!   file (release) every owner that locked through it lets go, which ends OFD locks
//!   and `flock`s.
//! - **Coherence**: a granted lock drops what the mount and the kernel cached of the
//!   file (read-ahead, page cache, attributes), so data other clients wrote under the
//!   lock is read; an unlock first sends this mount's background writes of the file.
//! - **Interruption**: `fuser` answers the kernel's interrupt requests with ENOSYS, so
//!   a process killed or signalled while it waits in F_SETLKW would wait on. The
//!   mount looks at the waiting thread's pending signals every
//!   [`pvfs_client::locks::POLL`] (`/proc/TID/status`, a local read) and ends the wait
//!   with EINTR when one would interrupt it; the kernel then restarts the call or
//!   lets the process die.

use fuser::{Errno, INodeNo};
use pvfs_client::locks::{conflict_pid, LockKind, LockRequest};
use pvfs_client::LockType;
use pvfs_proto::locks::TO_EOF;
use pvfs_proto::{Creds, Handle};

use crate::errors::{errno, OpResult};
use crate::inner::Inner;

/// The largest file offset the kernel takes in a lock reply (`OFFSET_MAX`).
const OFFSET_MAX: u64 = i64::MAX as u64;

/// A lock range's end as the kernel sends it (`OFFSET_MAX`: to the end of the file).
fn end_from_kernel(end: u64) -> u64 {
    if end >= OFFSET_MAX {
        TO_EOF
    } else {
        end
    }
}

/// The lock type of a FUSE `typ`, None for `F_UNLCK`.
fn lock_type(typ: i32) -> OpResult<Option<LockType>> {
    match typ {
        libc::F_RDLCK => Ok(Some(LockType::Read)),
        libc::F_WRLCK => Ok(Some(LockType::Write)),
        libc::F_UNLCK => Ok(None),
        _ => Err(Errno::EINVAL),
    }
}

/// Whether thread `tid` has a signal pending that would interrupt it (delivered,
/// not blocked, not ignored), from `/proc/TID/status`. A thread that is gone counts
/// as interrupted.
pub(crate) fn signal_pending(tid: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return true;
    };
    let mask = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let pending = mask("SigPnd:") | mask("ShdPnd:");
    pending & !mask("SigBlk:") & !mask("SigIgn:") != 0
}

/// What a lock request through the mount carries.
pub(crate) struct KernelLock {
    /// The file handle (open file or directory stream) it came through.
    pub fh: u64,
    /// The inode.
    pub ino: INodeNo,
    /// The kernel's lock owner.
    pub owner: u64,
    /// First byte.
    pub start: u64,
    /// Last byte (`OFFSET_MAX` or more: to the end of the file).
    pub end: u64,
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub typ: i32,
    /// The process (thread group) asking.
    pub pid: u32,
    /// The thread waiting (for the signal check).
    pub tid: u32,
}

impl KernelLock {
    /// What a getlk or setlk request of `req` carries.
    pub(crate) fn new(
        req: &fuser::Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        owner: fuser::LockOwner,
        (start, end): (u64, u64),
        typ: i32,
        pid: u32,
    ) -> KernelLock {
        KernelLock {
            fh: fh.0,
            ino,
            owner: owner.0,
            start,
            end,
            typ,
            pid,
            tid: req.pid(),
        }
    }
}

impl Inner {
    /// F_GETLK: the lock in the way as the kernel wants it (start, end, type, pid),
    /// `F_UNLCK` when there is none.
    pub(crate) async fn getlk(
        &self,
        creds: Creds,
        k: KernelLock,
    ) -> OpResult<(u64, u64, i32, u32)> {
        let handle = self.handle(k.ino);
        let typ = lock_type(k.typ)?.ok_or(Errno::EINVAL)?;
        let end = end_from_kernel(k.end);
        let found = self
            .client
            .with_creds(creds)
            .test_lock(handle, k.owner, typ, k.start, end)
            .await
            .map_err(errno)?;
        Ok(match found {
            None => (k.start, k.end, libc::F_UNLCK, 0),
            Some(c) => (
                c.start,
                c.end.min(OFFSET_MAX),
                c.typ.to_fcntl(),
                u32::try_from(conflict_pid(&c)).unwrap_or(0),
            ),
        })
    }

    /// F_SETLK, F_SETLKW, `flock`: takes or releases a lock on the servers. A waiting
    /// request ends with EINTR when the waiting thread gets a signal.
    pub(crate) async fn setlk(&self, creds: Creds, k: KernelLock, wait: bool) -> OpResult<()> {
        let handle = self.handle(k.ino);
        let end = end_from_kernel(k.end);
        if k.start > end {
            return Err(Errno::EINVAL);
        }
        let client = self.client.with_creds(creds);
        let Some(typ) = lock_type(k.typ)? else {
            // Writes made under the lock reach the servers before it is released.
            self.settle(handle).await?;
            return client
                .unlock(handle, k.owner, k.start, end)
                .await
                .map_err(errno);
        };
        self.tables.note_lock_owner(k.fh, k.owner);
        let req = LockRequest {
            handle,
            owner: k.owner,
            kind: LockKind::Posix,
            typ,
            start: k.start,
            end,
            pid: k.pid,
            wait,
        };
        let tid = k.tid;
        let mut interrupted = move || tid != 0 && signal_pending(tid);
        client.lock(&req, &mut interrupted).await.map_err(errno)?;
        self.drop_cached(k.ino, handle).await;
        Ok(())
    }

    /// After a lock is granted: forgets what the mount read ahead and has the kernel
    /// drop its cached pages and attributes of the file, so what other clients wrote
    /// before they unlocked is read from the servers.
    async fn drop_cached(&self, ino: INodeNo, handle: Handle) {
        self.tables.note_write(handle);
        let Some(notifier) = self.notifier.get().cloned() else {
            return;
        };
        // The kernel may wait for pages being read: not on a runtime thread.
        let dropped = tokio::task::spawn_blocking(move || notifier.inval_inode(ino, 0, 0)).await;
        if let Ok(Err(e)) = dropped {
            // ENOENT: the kernel has no such inode cached, nothing to drop.
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::debug!("dropping cached pages of {handle:#x}: {e}");
            }
        }
    }

    /// Whether a close (flush) of `ino` by lock owner `owner` has locks to release.
    pub(crate) fn close_releases(&self, ino: INodeNo, owner: u64) -> bool {
        self.client.may_hold_locks(self.handle(ino), owner)
    }

    /// Releases the locks `owner` holds on `ino` (a close: POSIX locks end at any
    /// close of the file by their process), after this mount's writes of it.
    pub(crate) async fn release_owner(&self, ino: INodeNo, owner: u64) -> OpResult<()> {
        let handle = self.handle(ino);
        if !self.client.may_hold_locks(handle, owner) {
            return Ok(());
        }
        self.settle(handle).await?;
        self.client
            .release_locks(handle, owner)
            .await
            .map_err(errno)
    }

    /// Releases the locks of every owner that locked through file handle `fh` (its
    /// last close: OFD locks and `flock`s end), and of `owner` if the kernel named
    /// one.
    pub(crate) async fn release_fh_locks(&self, ino: INodeNo, fh: u64, owner: Option<u64>) {
        let mut owners = self.tables.take_lock_owners(fh);
        owners.extend(owner);
        owners.sort_unstable();
        owners.dedup();
        for o in owners {
            if let Err(e) = self.release_owner(ino, o).await {
                tracing::warn!("releasing locks at close: {e:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_ranges_and_types() {
        assert_eq!(end_from_kernel(OFFSET_MAX), TO_EOF);
        assert_eq!(end_from_kernel(9), 9);
        assert_eq!(lock_type(libc::F_UNLCK), Ok(None));
        assert_eq!(lock_type(libc::F_WRLCK), Ok(Some(LockType::Write)));
        assert_eq!(lock_type(7), Err(Errno::EINVAL));
    }

    #[test]
    fn own_thread_has_no_signal_pending_and_a_gone_one_counts() {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        assert!(!signal_pending(tid));
        assert!(signal_pending(u32::MAX - 1));
    }
}
