//! File I/O: reads (answered from read-ahead or the small files this mount wrote
//! when it can, without waiting), writes (write-through, or in the background with
//! `--write-behind`), fsync and fallocate.

use std::sync::Arc;

use fuser::{Errno, INodeNo};
use pvfs_client::SetAttr;
use pvfs_proto::Handle;
use pvfs_transport::PooledBuf;

use crate::attr::privileged;
use crate::errors::{errno, OpResult};
use crate::inner::Inner;
use crate::readahead::{self, Begun, ReadData, Wait, SKEW};
use crate::state::OpenFile;

/// Largest read served in one request (the kernel never asks for more).
const MAX_READ: u32 = 16 << 20;

/// Where a write goes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WriteAt {
    /// At the offset the kernel gave.
    Offset(u64),
    /// At the end of the file, atomically against every other client's appends (an
    /// `O_APPEND` open): `kernel` is where the kernel put it, the end it knew of.
    End { ino: INodeNo, kernel: u64 },
}

impl WriteAt {
    /// Where a write with open(2) `flags` at the kernel's `offset` goes.
    pub(crate) fn of(flags: i32, ino: INodeNo, offset: u64) -> WriteAt {
        if flags & libc::O_APPEND != 0 {
            WriteAt::End {
                ino,
                kernel: offset,
            }
        } else {
            WriteAt::Offset(offset)
        }
    }
}

/// How [`Inner::read_begin`] left a read.
pub(crate) enum ReadStart {
    /// Answered (or failed) at once.
    Done(OpResult<ReadData>),
    /// To finish with [`Inner::read_finish`] (these are its arguments).
    Wait(Arc<OpenFile>, Option<Wait>, u64, usize),
}

impl Inner {
    /// Begins a read without waiting (on a FUSE thread): data already fetched
    /// ahead answers at once, anything else goes on in [`Inner::read_finish`];
    /// read-ahead fetches start on `rt`.
    pub(crate) fn read_begin(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        rt: &tokio::runtime::Handle,
    ) -> ReadStart {
        let Some(of) = self.tables.file(fh) else {
            return ReadStart::Done(Err(Errno::EBADF));
        };
        let size = size.min(MAX_READ) as usize;
        if self.tables.busy_pending(of.handle).is_some() {
            // Writes of this mount still on their way: the read waits for them.
            return ReadStart::Wait(of, None, offset, size);
        }
        let Some(stream) = &of.stream else {
            // A small file this mount wrote: its contents are here.
            if self.coherent() {
                let kept = self.tables.small.read(of.handle, offset, size, |data| {
                    let mut buf = self.bufs.get(SKEW + data.len());
                    buf[SKEW..].copy_from_slice(data);
                    ReadData::Owned(buf, SKEW..SKEW + data.len())
                });
                if let Some(data) = kept {
                    return ReadStart::Done(Ok(data));
                }
            }
            return ReadStart::Wait(of, None, offset, size);
        };
        let writes = self.tables.writes(of.handle);
        match stream.begin(&of.file, &self.bufs, &self.budget, rt, writes, offset, size) {
            Begun::Ready(data) => ReadStart::Done(Ok(data)),
            Begun::Wait(w) => ReadStart::Wait(of.clone(), Some(w), offset, size),
        }
    }

    /// Finishes a read [`Inner::read_begin`] could not answer at once.
    pub(crate) async fn read_finish(
        &self,
        of: Arc<OpenFile>,
        wait: Option<Wait>,
        offset: u64,
        size: usize,
    ) -> OpResult<ReadData> {
        if let Some(p) = self.tables.busy_pending(of.handle) {
            p.drain().await;
        }
        match (&of.stream, wait) {
            (Some(stream), Some(w)) => stream.finish(w, &of.file, &self.bufs).await,
            _ => {
                // The kernel asks for whole pages: a read reaching past the size it
                // was told (current while the feeds run) stops there, so the data
                // servers beyond are not asked whether the file goes on.
                let size = match self.tables.size(of.handle) {
                    Some(known) if self.coherent() && offset < known => {
                        size.min(usize::try_from(known - offset).unwrap_or(usize::MAX))
                    }
                    _ => size,
                };
                readahead::direct(&of.file, &self.bufs, offset, size).await
            }
        }
    }

    /// Writes for a process of user `uid`: to the servers before it answers, or with
    /// `--write-behind` in the background (`writebehind.rs`). `at`: where the kernel
    /// put it, or the end of the file for an `O_APPEND` open.
    pub(crate) async fn write(
        self: &Arc<Self>,
        fh: u64,
        at: WriteAt,
        data: PooledBuf,
        uid: u32,
    ) -> OpResult<u32> {
        let of = self.tables.file(fh).ok_or(Errno::EBADF)?;
        let offset = match at {
            WriteAt::Offset(offset) if self.opts.write_behind => offset,
            // Appends are written through, after what this mount wrote before.
            WriteAt::End { .. } => {
                self.settle(of.handle).await?;
                return self.write_through(&of, at, &data, uid).await;
            }
            WriteAt::Offset(_) => return self.write_through(&of, at, &data, uid).await,
        };
        let n = u32::try_from(data.len()).map_err(|_| Errno::EIO)?;
        let pending = self.tables.pending(of.handle);
        if let Some(e) = pending.take_error() {
            return Err(e);
        }
        let end = offset.saturating_add(data.len() as u64);
        let id = pending.admit(offset, end).await;
        let Ok(permit) = self.write_budget.clone().acquire_owned().await else {
            pending.finish(id, Err(Errno::EIO));
            return Err(Errno::EIO);
        };
        self.tables.grow_size(of.handle, end);
        let inner = self.clone();
        tokio::spawn(async move {
            let written = inner.write_through(&of, at, &data, uid).await;
            pending.finish(id, written.map(|_| ()));
            drop(permit);
        });
        Ok(n)
    }

    /// A write-through write straight from the request's buffer (no copy): the
    /// caller waits on the FUSE thread.
    pub(crate) async fn write_now(
        &self,
        fh: u64,
        at: WriteAt,
        data: &[u8],
        uid: u32,
    ) -> OpResult<u32> {
        let of = self.tables.file(fh).ok_or(Errno::EBADF)?;
        self.write_through(&of, at, data, uid).await
    }

    /// A write that returns once the data servers have the data.
    async fn write_through(
        &self,
        of: &OpenFile,
        at: WriteAt,
        data: &[u8],
        uid: u32,
    ) -> OpResult<u32> {
        let followed = self.tables.small.begin_write(of.handle);
        let written = match at {
            WriteAt::Offset(offset) => of
                .file
                .write_at_stats(offset, data)
                .await
                .map(|(n, stats)| (offset, n, stats)),
            WriteAt::End { .. } => of.file.append_stats(data).await,
        };
        // Counted once the write is over, so read-ahead fetched before or during it
        // is not used after it (even if it failed part way).
        self.tables.note_write(of.handle);
        if followed {
            let whole = matches!(&written, Ok((_, n, _)) if *n == data.len());
            let landed = written.as_ref().map_or(0, |(offset, _, _)| *offset);
            self.tables
                .small
                .end_write(of.handle, whole.then_some((landed, data)));
        }
        let (offset, n, stats) = match written {
            Ok(w) => w,
            Err(e) => {
                self.tables.forget_file_attr(of.handle);
                return Err(errno(e));
            }
        };
        self.tables.note_datafile_stats(of.handle, &stats);
        self.tables
            .grow_size(of.handle, offset.saturating_add(n as u64));
        if let WriteAt::End { ino, kernel } = at {
            if offset != kernel {
                // Other clients appended since the kernel last heard the size: what
                // it holds of the file from there, and its size, are stale.
                self.drop_stale(ino, offset);
            }
        }
        if uid != 0 && self.tables.take_privileged(of.handle) {
            // A write the kernel did not see coming (direct I/O): clear set-user-ID
            // and set-group-ID here, as POSIX wants.
            self.kill_privileges(of.handle).await;
        }
        u32::try_from(n).map_err(|_| Errno::EIO)
    }

    /// Has the kernel drop its attributes of `ino` and its cached pages from
    /// `from` on, in the background (the write that calls it is still under way in
    /// the kernel).
    fn drop_stale(&self, ino: INodeNo, from: u64) {
        let Some(notifier) = self.notifier.get().cloned() else {
            return;
        };
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        tokio::task::spawn_blocking(move || {
            if let Err(e) = notifier.inval_inode(ino, from, 0) {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    tracing::debug!("dropping what the kernel holds of {ino:?}: {e}");
                }
            }
        });
    }

    /// Clears set-user-ID and set-group-ID of `handle` (as the mount).
    async fn kill_privileges(&self, handle: Handle) {
        let cleared = async {
            let attr = self.stat(handle).await?;
            if !privileged(attr.mode) {
                return Ok(());
            }
            let mut mode = attr.mode & !libc::S_ISUID;
            if mode & libc::S_IXGRP != 0 {
                mode &= !libc::S_ISGID;
            }
            let set = SetAttr {
                mode: Some(mode & 0o7777),
                mtime: Some(attr.mtime),
                ..SetAttr::default()
            };
            let attr = self
                .client
                .setattr_handle(handle, set)
                .await
                .map_err(errno)?;
            self.tables.note(&attr);
            Ok::<_, Errno>(())
        };
        if let Err(e) = cleared.await {
            // What is held of the file may be stale now.
            self.tables.forget_file_attr(handle);
            tracing::warn!("clearing set-user-ID of {handle:#x} after a write: {e:?}");
        }
    }

    /// A buffer for a write's data (copied out of the FUSE thread's buffer).
    pub(crate) fn write_buf(&self, data: &[u8]) -> PooledBuf {
        let mut buf = self.bufs.get(data.len());
        buf.copy_from_slice(data);
        buf
    }

    /// fsync of open file `fh`: its background writes, then its data made stable on the
    /// data servers.
    pub(crate) async fn fsync(&self, fh: u64) -> OpResult<()> {
        let of = self.tables.file(fh).ok_or(Errno::EBADF)?;
        self.settle(of.handle).await?;
        of.file.fsync().await.map_err(errno)
    }

    /// fallocate(2) on open file `fh` (the kernel checked it is open for writing and
    /// that the mode is one FUSE passes on; it drops its cached pages of a punched or
    /// zeroed range itself). Background writes go first, so a punch or zero is not
    /// overtaken by older data.
    pub(crate) async fn fallocate(
        &self,
        fh: u64,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> OpResult<()> {
        let of = self.tables.file(fh).ok_or(Errno::EBADF)?;
        let mode = u32::try_from(mode).map_err(|_| Errno::EOPNOTSUPP)?;
        if let Some(p) = self.tables.any_pending(of.handle) {
            p.drain().await;
        }
        self.tables.forget_file_attr(of.handle);
        let done = of.file.fallocate(mode, offset, len).await;
        // Punched and zeroed bytes change: read-ahead fetched before must not be used.
        self.tables.note_write(of.handle);
        done.map_err(errno)?;
        if mode & pvfs_client::falloc::KEEP_SIZE == 0 {
            self.tables.grow_size(of.handle, offset.saturating_add(len));
        }
        Ok(())
    }

    /// Waits for the background writes of `handle` (`--write-behind`) and reports a
    /// failure among them not reported yet.
    pub(crate) async fn settle(&self, handle: Handle) -> OpResult<()> {
        if !self.opts.write_behind {
            return Ok(());
        }
        let pending = self.tables.pending(handle);
        pending.drain().await;
        pending.take_error().map_or(Ok(()), Err)
    }
}
