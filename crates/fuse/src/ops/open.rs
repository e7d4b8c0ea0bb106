//! Opening and closing files: how the kernel is to serve an open (through its page
//! cache, or directly with the mount's read-ahead), flush at every close, release
//! at the last one.

use std::sync::atomic::Ordering;

use fuser::{Errno, FopenFlags, INodeNo};
use pvfs_proto::Handle;

use crate::attr::privileged;
use crate::errors::{gone, OpResult};
use crate::inner::Inner;
use crate::options::MountOptions;
use crate::readahead::ReadAhead;
use crate::state::OpenFile;

/// Read-ahead chunks fetched ahead of one reader (each one `--max-request`): two
/// keep one reader as fast as with more, which only take CPU from other readers
/// (`docs/benchmarks.md`).
const READ_AHEAD_WINDOW: usize = 2;

/// Whether the kernel should serve an open of a file of mode `mode` and `size`
/// bytes with `flags` without its page cache (direct I/O; reads then get the
/// mount's read-ahead). `direct_mmap`: the kernel can map such files shared
/// (`FUSE_DIRECT_IO_ALLOW_MMAP`, Linux 6.6); without it only write-only opens,
/// which cannot be mapped for reading, may go direct.
///
/// - `--direct-io`: always.
/// - Opened with `O_APPEND`: direct (where mapping allows it).
/// - Opened for writing: direct. Writes reach the servers before they return either
///   way (write-through), so filling cache pages on the way is pure cost (fresh
///   pages and one more copy of every byte); the kernel drops what other opens had
///   cached of the range written. Set-user-ID and set-group-ID files stay cached:
///   there the kernel clears those bits before a write.
/// - Opened read-only: the page cache for files up to `page_cache_max` bytes (small
///   files, read in small pieces by compilers and scripts, gain from the kernel's
///   read-ahead and cache), direct for larger ones (streams, which the page cache
///   slows down).
pub(crate) fn serves_direct(
    opts: &MountOptions,
    direct_mmap: bool,
    flags: i32,
    mode: u32,
    size: u64,
) -> bool {
    if opts.direct_io {
        return true;
    }
    if flags & libc::O_APPEND != 0 && (direct_mmap || flags & libc::O_ACCMODE == libc::O_WRONLY) {
        // The servers settle where an append lands, not the kernel: pages it filled
        // at the end it knew could be the wrong ones (with the page cache, the
        // mount has it drop them after such an append).
        return true;
    }
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => !privileged(mode),
        libc::O_RDONLY => direct_mmap && size > opts.page_cache_max,
        _ => direct_mmap && !privileged(mode),
    }
}

impl Inner {
    /// Opens file `handle` (registered by the caller): a new file handle, and how
    /// the kernel is to serve it.
    pub(super) fn add_open(
        &self,
        handle: Handle,
        file: pvfs_client::File,
        flags: i32,
    ) -> (u64, FopenFlags) {
        let attr = file.attr();
        // Opening asks for no size: the one the kernel was told last (it looked
        // the file up just before) tells a stream from a small file.
        let size = self.tables.size(handle).unwrap_or(attr.size);
        let direct_mmap = self.direct_mmap.load(Ordering::Relaxed);
        if !serves_direct(&self.opts, direct_mmap, flags, attr.mode, size) {
            let fh = self.tables.add_file(OpenFile {
                handle,
                file,
                stream: None,
            });
            // While other clients' changes reach the mount, the pages the kernel
            // holds are current: the feeds drop those another client changed.
            let keep = if self.coherent() {
                FopenFlags::FOPEN_KEEP_CACHE
            } else {
                FopenFlags::empty()
            };
            return (fh, keep);
        }
        let stream = (flags & libc::O_ACCMODE != libc::O_WRONLY).then(|| {
            ReadAhead::new(
                self.opts.max_request,
                READ_AHEAD_WINDOW,
                size,
                self.tables.writes(handle),
            )
        });
        let fh = self.tables.add_file(OpenFile {
            handle,
            file,
            stream,
        });
        (fh, FopenFlags::FOPEN_DIRECT_IO)
    }

    /// Opens `handle` with open(2) `flags` (the kernel checked access): a new file handle,
    /// and how the kernel serves it.
    pub(crate) async fn open(&self, handle: Handle, flags: i32) -> OpResult<(u64, FopenFlags)> {
        if !self.tables.begin_open(handle) {
            // Being removed: the kernel looks the name up again.
            return Err(Errno::ESTALE);
        }
        // Held first: another client's unlink then leaves the object to us. The
        // first hold answers the file's attributes.
        let fresh = match self.client.hold(handle).await {
            Ok(a) => a,
            Err(e) => {
                if self.tables.end_open(handle) {
                    self.tables.forget_layout(handle);
                }
                return Err(gone(e));
            }
        };
        let opened = async {
            // What the mount holds current (sizes included) before what the hold
            // answered (the metafile's attributes, without the datafiles' sizes).
            let known = self
                .coherent()
                .then(|| self.tables.file_attr(handle))
                .flatten()
                .or(fresh);
            let file = match known {
                Some(attr) => self.client.file_from_attr(attr)?,
                None => self.client.open_handle(handle).await?,
            };
            if flags & libc::O_TRUNC != 0 {
                if let Some(p) = self.tables.any_pending(handle) {
                    p.drain().await;
                }
                self.tables.forget_file_attr(handle);
                file.truncate(0).await?;
                self.tables.note_write(handle);
                self.tables.note_size(handle, 0);
                if let Some(p) = self.tables.any_pending(handle) {
                    p.truncated(0);
                }
            }
            Ok::<_, pvfs_client::Error>(file)
        }
        .await;
        match opened {
            Ok(file) => Ok(self.opened(handle, file, flags)),
            Err(e) => {
                if self.tables.end_open(handle) {
                    self.remove_orphan(handle).await;
                } else {
                    self.client.unhold(handle).await;
                }
                Err(gone(e))
            }
        }
    }

    /// Opens `handle` without waiting (on a FUSE thread) when no server need be
    /// asked: while the change feeds run, the file's attributes kept are current.
    /// None when it must go the general way ([`Inner::open`]).
    pub(crate) fn open_now(
        &self,
        handle: Handle,
        flags: i32,
    ) -> Option<OpResult<(u64, FopenFlags)>> {
        if flags & libc::O_TRUNC != 0 || !self.coherent() {
            return None;
        }
        let attr = self.tables.file_attr(handle)?;
        let file = self.client.file_from_attr(attr).ok()?;
        // Only a file this mount holds already opens without asking its server.
        if !self.client.hold_again(handle) {
            return None;
        }
        if !self.tables.begin_open(handle) {
            self.let_go_later(handle);
            return Some(Err(Errno::ESTALE));
        }
        Some(Ok(self.opened(handle, file, flags)))
    }

    /// Registers a file just opened: a new file handle, and how the kernel serves it.
    fn opened(&self, handle: Handle, file: pvfs_client::File, flags: i32) -> (u64, FopenFlags) {
        self.tables.note(file.attr());
        self.tables
            .set_privileged(handle, privileged(file.attr().mode));
        self.add_open(handle, file, flags)
    }

    /// Ends an open of `handle` (a close answered without waiting): the hold stays
    /// idle, or its `Unhold` goes in the background.
    pub(crate) fn let_go_later(&self, handle: Handle) {
        if let Some((server, gen)) = self.client.unhold_idle(handle) {
            let client = self.client.clone();
            tokio::spawn(async move { client.send_unhold(server, vec![handle], vec![gen]).await });
        }
    }

    /// Releases file handle `fh` without waiting (on a FUSE thread) when that takes no
    /// server: no background writes, no locks taken through it or by `owner`, not a
    /// file unlinked while open. None when it must go the general way
    /// ([`Inner::release`]); otherwise the handle closed, and whether it is an
    /// object an unlink that came in between left for this close to delete
    /// ([`Inner::remove_orphan`]; otherwise [`Inner::let_go_later`]).
    pub(crate) fn release_now(&self, fh: u64, owner: Option<u64>) -> Option<(Handle, bool)> {
        if self.opts.write_behind || self.tables.has_lock_owners(fh) {
            return None;
        }
        let handle = self.tables.file(fh)?.handle;
        if self.tables.is_orphan(handle)
            || owner.is_some_and(|o| self.client.may_hold_locks(handle, o))
        {
            return None;
        }
        let of = self.tables.remove_file(fh)?;
        Some((of.handle, self.tables.end_open(of.handle)))
    }

    /// A `close` of an open file (FUSE's flush): with `--write-behind` the file's
    /// background writes end here; the closing process's locks on it are released
    /// (POSIX: any close of the file by a process ends its locks).
    pub(crate) async fn flush(&self, fh: u64, ino: INodeNo, owner: u64) -> OpResult<()> {
        let of = self.tables.file(fh).ok_or(Errno::EBADF)?;
        self.settle(of.handle).await?;
        self.release_owner(ino, owner).await
    }

    /// The last close of open file `fh`: its background writes end, and an object unlinked
    /// while open goes.
    pub(crate) async fn release(&self, fh: u64) {
        if let Some(of) = self.tables.file(fh) {
            if let Err(e) = self.settle(of.handle).await {
                tracing::warn!(
                    "a write of {:#x} failed after it was answered: {e:?}",
                    of.handle
                );
            }
        }
        if let Some(of) = self.tables.remove_file(fh) {
            if self.tables.end_open(of.handle) {
                self.remove_orphan(of.handle).await;
            } else {
                self.client.unhold(of.handle).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_opens_bypass_the_page_cache() {
        let opts = MountOptions::default();
        let big = opts.page_cache_max + 1;
        let small = opts.page_cache_max;
        let direct = |mmap, flags, mode, size| serves_direct(&opts, mmap, flags, mode, size);
        assert!(direct(true, libc::O_RDONLY, 0o644, big), "a stream");
        assert!(!direct(true, libc::O_RDONLY, 0o644, small), "a small file");
        assert!(direct(true, libc::O_WRONLY, 0o644, 0));
        assert!(direct(true, libc::O_RDWR | libc::O_CREAT, 0o644, 0));
        assert!(
            !direct(true, libc::O_WRONLY, 0o4755, 0),
            "the kernel clears set-user-ID"
        );
        assert!(!direct(true, libc::O_RDWR, 0o2775, big), "and set-group-ID");
        // Without shared maps of direct files, only write-only opens go direct.
        assert!(!direct(false, libc::O_RDONLY, 0o644, big));
        assert!(!direct(false, libc::O_RDWR, 0o644, big));
        assert!(direct(false, libc::O_WRONLY, 0o644, big));
        let all = MountOptions {
            direct_io: true,
            ..MountOptions::default()
        };
        assert!(
            serves_direct(&all, false, libc::O_RDONLY, 0o4755, 0),
            "--direct-io"
        );
    }
}
