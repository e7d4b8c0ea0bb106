//! Creating: mknod (FIFOs, sockets, devices and regular files), mkdir, symlink, and
//! create (a new regular file, opened).

use std::ffi::OsStr;
use std::path::Path;

use fuser::{Errno, FileAttr, FopenFlags};
use pvfs_client::{LayoutSpec, NodeKind, ObjKind};
use pvfs_proto::{Creds, Handle};

use crate::attr::{self, may_access};
use crate::errors::{errno, OpResult};
use crate::inner::Inner;
use crate::ops::names::new_name;

impl Inner {
    /// Makes `name` in `parent`: a FIFO, socket or device node, or an empty regular file.
    pub(crate) async fn mknod(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
        (mode, umask): (u32, u32),
        rdev: u32,
    ) -> OpResult<FileAttr> {
        let name = new_name(name)?;
        let pattr = self.dir_attr(parent).await?;
        if let Some(kind) = NodeKind::from_mode(mode) {
            // FIFOs, sockets and device nodes: metadata only (the kernel checked
            // CAP_MKNOD for devices; the server checks again).
            let (c, mode) = Self::inherit(&creds, &pattr, mode & 0o7777, false);
            let attr = self
                .caller(&c)
                .with_umask(umask)
                .mknod_under(&pattr, name, kind, mode, u64::from(rdev))
                .await
                .map_err(|e| self.failed_in(parent, e))?;
            self.tables
                .name_made(parent, name, attr.handle, attr.kind());
            self.tables
                .note_name(parent, name, attr.handle, attr.kind());
            self.tables.dir_changed(parent, attr.ctime, 0);
            return Ok(self.fattr(&attr));
        }
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            return Err(Errno::EINVAL);
        }
        let (c, mode) = Self::inherit(&creds, &pattr, mode & 0o7777, false);
        let file = self
            .caller(&c)
            .with_umask(umask)
            .create_under(&pattr, name, mode, LayoutSpec::default(), false)
            .await
            .map_err(|e| self.failed_in(parent, e))?;
        self.tables.note(file.attr());
        self.tables.fresh_datafiles(file.attr());
        self.tables
            .name_made(parent, name, file.handle(), ObjKind::File);
        self.tables
            .note_name(parent, name, file.handle(), ObjKind::File);
        self.tables.dir_changed(parent, file.attr().ctime, 0);
        Ok(self.fattr(file.attr()))
    }

    /// Makes directory `name` in `parent`.
    pub(crate) async fn mkdir(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
        (mode, umask): (u32, u32),
    ) -> OpResult<FileAttr> {
        let name = new_name(name)?;
        let pattr = self.dir_attr(parent).await?;
        let (c, mode) = Self::inherit(&creds, &pattr, mode & 0o7777, true);
        let attr = self
            .caller(&c)
            .with_umask(umask)
            .mkdir_under(&pattr, name, mode)
            .await
            .map_err(|e| self.failed_in(parent, e))?;
        self.tables.note_dir(&attr);
        self.tables.dir_changed(parent, attr.ctime, 1);
        self.tables
            .name_made(parent, name, attr.handle, ObjKind::Dir);
        if self.coherent() {
            self.tables.dir_made(attr.handle);
        }
        Ok(self.fattr(&attr))
    }

    /// Makes symlink `name` in `parent`, pointing to `target`.
    pub(crate) async fn symlink(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
        target: &Path,
    ) -> OpResult<FileAttr> {
        let name = new_name(name)?;
        let target = target.to_str().ok_or(Errno::EILSEQ)?;
        if target.len() >= pvfs_proto::types::PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let pattr = self.dir_attr(parent).await?;
        let (c, _) = Self::inherit(&creds, &pattr, 0, false);
        let attr = self
            .caller(&c)
            .symlink_at(parent, name, target)
            .await
            .map_err(|e| self.failed_in(parent, e))?;
        self.tables
            .name_made(parent, name, attr.handle, ObjKind::Symlink);
        self.tables
            .note_name(parent, name, attr.handle, ObjKind::Symlink);
        self.tables.dir_changed(parent, attr.ctime, 0);
        Ok(self.fattr(&attr))
    }

    /// Creates and opens regular file `name` in `parent` (open(2) with `O_CREAT`): its
    /// attributes, file handle and how the kernel serves it.
    pub(crate) async fn create(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
        (mode, umask): (u32, u32),
        flags: i32,
    ) -> OpResult<(FileAttr, u64, FopenFlags)> {
        let name = new_name(name)?;
        let pattr = self.dir_attr(parent).await?;
        let (c, mode) = Self::inherit(&creds, &pattr, mode & 0o7777, false);
        match self
            .caller(&c)
            .with_umask(umask)
            .create_under(&pattr, name, mode, LayoutSpec::default(), true)
            .await
        {
            Ok(file) => {
                let handle = file.handle();
                self.tables.note(file.attr());
                self.tables.fresh_datafiles(file.attr());
                self.tables.name_made(parent, name, handle, ObjKind::File);
                self.tables.note_name(parent, name, handle, ObjKind::File);
                self.tables.dir_changed(parent, file.attr().ctime, 0);
                let fattr = self.fattr(file.attr());
                // Data I/O acts as the mount (see the module documentation).
                let file = self
                    .client
                    .file_from_attr(file.attr().clone())
                    .map_err(errno)?;
                if !self.tables.begin_open(handle) {
                    self.client.unhold(handle).await;
                    return Err(Errno::ENOENT);
                }
                let (fh, how) = self.add_open(handle, file, flags);
                Ok((fattr, fh, how))
            }
            Err(e) if e.errno == pvfs_client::Errno::EEXIST && flags & libc::O_EXCL == 0 => {
                // Someone created it since the kernel looked: open it as open(2) would.
                self.tables.dir_unknown(parent);
                let attr = self
                    .caller(&creds)
                    .lookup(parent, name)
                    .await
                    .map_err(errno)?;
                match attr.kind() {
                    ObjKind::Dir => return Err(Errno::EISDIR),
                    ObjKind::Symlink | ObjKind::Node(_) => return Err(Errno::EEXIST),
                    ObjKind::File => {}
                }
                let mut want = match flags & libc::O_ACCMODE {
                    libc::O_RDONLY => attr::MAY_READ,
                    libc::O_WRONLY => attr::MAY_WRITE,
                    _ => attr::MAY_READ | attr::MAY_WRITE,
                };
                if flags & libc::O_TRUNC != 0 {
                    want |= attr::MAY_WRITE;
                }
                if !may_access(&attr, &creds, want) {
                    return Err(Errno::EACCES);
                }
                let (fh, how) = self.open(attr.handle, flags).await?;
                match self.getattr(attr.handle).await {
                    Ok(fattr) => Ok((fattr, fh, how)),
                    Err(e) => {
                        self.release(fh).await;
                        Err(e)
                    }
                }
            }
            Err(e) => Err(self.failed_in(parent, e)),
        }
    }
}
