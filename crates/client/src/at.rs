//! Operations relative to directory handles, for interfaces that keep handles instead
//! of paths (the FUSE mount, the C library). They share their cores with the
//! path-based operations of `namespace.rs`; a directory handle costs no extra request
//! once its shard count is known (cached for good: shard counts are fixed at mkdir and
//! handles are never reused).

use pvfs_proto::layout::Layout;
use pvfs_proto::message::UnlinkWant;
use pvfs_proto::req;
use pvfs_proto::{
    rights, Attr, DirEntry, Errno, Handle, LayoutSpec, LinkDrop, ObjDetail, Remains, Request,
    Response, Timespec,
};

use crate::error::{Error, Result};
use crate::file::File;
use crate::namespace::{Dir, RenameMode, Unlinked};
use crate::pool::unexpected;
use crate::Client;

/// Entries kept in the shard-count cache before it is emptied (a memory bound).
const DIR_CACHE_MAX: usize = 1 << 20;

impl Client {
    /// Records a directory's shard count.
    pub(crate) fn remember_dir(&self, attr: &Attr) {
        if let ObjDetail::Dir { shards, .. } = attr.detail {
            if let Ok(mut m) = self.inner.dir_shards.lock() {
                if m.len() >= DIR_CACHE_MAX {
                    m.clear();
                }
                m.insert(attr.handle, shards);
            }
        }
    }

    /// The directory with handle `handle` (its shard count from the cache, else asked).
    pub(crate) async fn dir(&self, handle: Handle) -> Result<Dir> {
        let cached = self
            .inner
            .dir_shards
            .lock()
            .ok()
            .and_then(|m| m.get(&handle).copied());
        match cached {
            Some(shards) => Ok(Dir {
                handle,
                shards,
                attr: None,
            }),
            None => Dir::from_attr(self.getattr(handle).await?),
        }
    }

    /// Looks `name` up in directory `dir`; a file's size is filled in.
    pub async fn lookup(&self, dir: Handle, name: &str) -> Result<Attr> {
        let mut attr = self.lookup_lite(dir, name).await?;
        self.fill_size(&mut attr).await?;
        Ok(attr)
    }

    /// Looks `name` up in directory `dir` without asking data servers for sizes.
    pub async fn lookup_lite(&self, dir: Handle, name: &str) -> Result<Attr> {
        if name.len() > pvfs_proto::types::NAME_MAX {
            return Err(Error::at(Errno::ENAMETOOLONG, name));
        }
        let d = self.dir(dir).await?;
        Ok(self.lookup_in(&d, name).await?.1)
    }

    /// Attributes of object `handle` with a file's size and mtime from its datafiles.
    pub async fn stat_handle(&self, handle: Handle) -> Result<Attr> {
        let mut attr = self.getattr(handle).await?;
        self.fill_size(&mut attr).await?;
        Ok(attr)
    }

    /// Like [`Client::stat_handle`] for a regular file whose layout the caller
    /// already knows (its datafiles never change; its width only grows): the metadata
    /// server and the data servers
    /// are asked at the same time, one round trip instead of two.
    pub async fn stat_file(&self, handle: Handle, layout: &Layout) -> Result<Attr> {
        let (attr, stats) = futures::join!(
            self.getattr(handle),
            crate::io::sized_stats(&self.inner.pool, &self.creds, layout)
        );
        let mut attr = attr?;
        if attr.layout() != Some(layout) {
            // Widened since the caller saw it (or, which cannot happen as handles are
            // not reused, another file): the datafiles within the new width.
            self.fill_size(&mut attr).await?;
            return Ok(attr);
        }
        crate::namespace::apply_datafile_stats(&mut attr, layout, &stats?);
        Ok(attr)
    }

    /// Like [`Client::lookup`] when the caller believes `name` means regular file
    /// `expect` with `layout` (seen before): the entry's server and the data servers
    /// are asked at the same time, one round trip instead of two. If the name now
    /// means another object, its size is asked for afterwards.
    pub async fn lookup_expecting(
        &self,
        dir: Handle,
        name: &str,
        expect: Handle,
        layout: &Layout,
    ) -> Result<Attr> {
        let (attr, stats) = futures::join!(
            self.lookup_lite(dir, name),
            crate::io::sized_stats(&self.inner.pool, &self.creds, layout)
        );
        let mut attr = attr?;
        let expected = attr.handle == expect && attr.layout() == Some(layout);
        match stats {
            Ok(stats) if expected => {
                crate::namespace::apply_datafile_stats(&mut attr, layout, &stats);
            }
            // Asking the same datafiles again would fail the same way (a server
            // down costs one timeout, not two).
            Err(e) if expected => return Err(e),
            _ => self.fill_size(&mut attr).await?,
        }
        Ok(attr)
    }

    /// `mkdir` of `name` in directory `dir`.
    pub async fn mkdir_at(&self, dir: Handle, name: &str, mode: u32) -> Result<Attr> {
        let d = self.dir(dir).await?;
        self.mkdir_in(&d, name, mode).await
    }

    /// Creates regular file `name` in directory `dir` (EEXIST if the name is taken).
    pub async fn create_at(
        &self,
        dir: Handle,
        name: &str,
        mode: u32,
        layout: LayoutSpec,
    ) -> Result<File> {
        let d = self.dir(dir).await?;
        let attr = self.create_file_in(&d, name, mode, layout).await?;
        Ok(File::new(self.clone(), attr))
    }

    /// Like [`Client::create_at`] for a parent whose attributes the caller already
    /// holds (its default layout is taken from them, saving a request per create).
    /// With `hold`, the caller opens the file: it is held open by this client
    /// (`crate::holds`) from the commit that makes it, and its close calls
    /// [`Client::unhold`].
    pub async fn create_under(
        &self,
        parent: &Attr,
        name: &str,
        mode: u32,
        layout: LayoutSpec,
        hold: bool,
    ) -> Result<File> {
        let d = Dir::from_attr(parent.clone())?;
        let attr = self
            .create_file_holding(&d, name, mode, layout, hold)
            .await?;
        Ok(File::new(self.clone(), attr))
    }

    /// Like [`Client::mkdir_at`] for a parent whose attributes the caller already
    /// holds (the default layout the new directory inherits is taken from them).
    pub async fn mkdir_under(&self, parent: &Attr, name: &str, mode: u32) -> Result<Attr> {
        let d = Dir::from_attr(parent.clone())?;
        self.mkdir_in(&d, name, mode).await
    }

    /// Like [`Client::mknod`] in a directory whose attributes the caller already holds.
    pub async fn mknod_under(
        &self,
        parent: &Attr,
        name: &str,
        kind: pvfs_proto::NodeKind,
        mode: u32,
        rdev: u64,
    ) -> Result<Attr> {
        let d = Dir::from_attr(parent.clone())?;
        let what = pvfs_proto::CreateWhat::Node { kind, rdev };
        self.create_in(&d, name, mode, what).await
    }

    /// A [`File`] for a regular file whose attributes the caller already holds, for
    /// I/O as this client's user (no request is sent; EISDIR if it is not a file).
    pub fn file_from_attr(&self, attr: Attr) -> Result<File> {
        match attr.kind() {
            pvfs_proto::ObjKind::File => Ok(File::new(self.clone(), attr)),
            _ => Err(Error::new(
                Errno::EISDIR,
                format!("{:#x} is not a regular file", attr.handle),
            )),
        }
    }

    /// `symlink`: creates `name` in directory `dir` pointing to `target`.
    pub async fn symlink_at(&self, dir: Handle, name: &str, target: &str) -> Result<Attr> {
        let d = self.dir(dir).await?;
        let what = pvfs_proto::CreateWhat::Symlink {
            target: target.to_string(),
        };
        self.create_in(&d, name, 0o777, what).await
    }

    /// Removes entry `name` (not a directory) of `dir`; its object loses a link. With
    /// `keep_object`, an object left without a name stays with its data for
    /// [`Client::remove_object`] (a file still open): [`Remains::Kept`].
    pub async fn unlink_at(&self, dir: Handle, name: &str, keep_object: bool) -> Result<Unlinked> {
        let d = self.dir(dir).await?;
        self.unlink_in(&d, name, keep_object).await
    }

    /// `link`: gives object `handle` (not a directory) the new name `name` in `dir`.
    /// Returns its attributes with the new link count (and a file's size), and when
    /// the directory changed.
    pub async fn link_at(
        &self,
        handle: Handle,
        dir: Handle,
        name: &str,
    ) -> Result<(Attr, Timespec)> {
        let d = self.dir(dir).await?;
        let (mut attr, changed) = self.link_in(handle, &d, name).await?;
        self.fill_size(&mut attr).await?;
        Ok((attr, changed))
    }

    /// Removes entry `name` (not a directory) of `dir`, taking its object's link (the
    /// object is deleted with its last name), but only if the entry still names
    /// `expect` (ESTALE otherwise, nothing removed): for a caller that knows which
    /// object the name meant and that nothing uses it (a FUSE mount's unlink of a
    /// file not open there). One commit when the object lives with its entry. What
    /// is left to delete (a deleted file's datafiles) comes back as [`Leftovers`],
    /// for [`Client::delete_leftovers`] now or in the background: the name is gone
    /// either way, the leftovers only take space until then (fsck finds them if
    /// they are never deleted).
    pub async fn unlink_at_expect(
        &self,
        dir: Handle,
        name: &str,
        expect: Handle,
    ) -> Result<(Unlinked, Leftovers)> {
        let d = self.dir(dir).await?;
        // A hold this client kept after the file's last close ends with the name.
        let releasing = self.take_idle_hold(expect);
        let req = Request::Unlink(req::Unlink {
            dir,
            name: name.to_string(),
            expect: Some(expect),
            want: UnlinkWant::NotDir,
            fate: if releasing {
                LinkDrop::Release
            } else {
                LinkDrop::Delete
            },
        });
        let answer = self.rpc(self.entry_server(&d, name), req).await;
        if releasing && !matches!(answer, Ok(Response::Unlinked { .. })) {
            self.give_back_idle_hold(expect).await;
        }
        match answer? {
            Response::Unlinked {
                entry,
                left,
                tickets,
                changed,
            } => {
                let leftovers = Leftovers {
                    handle: entry.handle,
                    left: left.clone(),
                    tickets,
                };
                Ok((
                    Unlinked {
                        entry,
                        left,
                        changed,
                    },
                    leftovers,
                ))
            }
            other => Err(unexpected("Unlink", &other)),
        }
    }

    /// Deletes what an unlink left ([`Client::unlink_at_expect`]): a deleted
    /// file's datafiles are queued, each data server getting them in batches in the
    /// background ([`Client::reaped`] waits for them).
    pub async fn delete_leftovers(&self, leftovers: Leftovers) -> Result<()> {
        match &leftovers.left {
            Remains::Deleted(ObjDetail::File { layout }) => {
                self.forget_caps(leftovers.handle);
                self.reap_datafiles(layout, &leftovers.tickets);
            }
            _ => {
                self.settle(leftovers.handle, &leftovers.left, leftovers.tickets)
                    .await
            }
        }
        Ok(())
    }

    /// Removes empty directory `name` of `dir`.
    pub async fn rmdir_at(&self, dir: Handle, name: &str) -> Result<()> {
        let d = self.dir(dir).await?;
        self.rmdir_in(&d, name).await
    }

    /// Renames `sname` in `sdir` to `dname` in `ddir` (renameat2 semantics by `mode`).
    pub async fn rename_at(
        &self,
        sdir: Handle,
        sname: &str,
        ddir: Handle,
        dname: &str,
        mode: RenameMode,
    ) -> Result<()> {
        let s = self.dir(sdir).await?;
        let d = self.dir(ddir).await?;
        self.rename_in(&s, sname, &d, dname, mode, false)
            .await
            .map(|_| ())
    }

    /// Like [`Client::rename_at`], but an object the rename replaced (`dname`'s old
    /// object) that is left without a name is not deleted ([`Remains::Kept`]): the
    /// caller deletes it with [`Client::remove_object`] when nothing uses it any more
    /// (a file still open, as `unlink_at` with `keep_object`). Returns the replaced
    /// entry and what became of its object.
    pub async fn rename_at_keep(
        &self,
        sdir: Handle,
        sname: &str,
        ddir: Handle,
        dname: &str,
        mode: RenameMode,
    ) -> Result<Option<(DirEntry, Remains)>> {
        let s = self.dir(sdir).await?;
        let d = self.dir(ddir).await?;
        self.rename_in(&s, sname, &d, dname, mode, true).await
    }

    /// Deletes an object that no entry names any more (kept by `unlink_at` with
    /// `keep_object`), with a file's datafiles; EBUSY if it has a name.
    pub async fn remove_object(&self, handle: Handle) -> Result<()> {
        let owner = self.owner(handle)?;
        let ticket = self.ticket(handle, rights::REMOVE);
        let (detail, tickets) = match self
            .rpc(
                owner,
                Request::RemoveObject(req::RemoveObject { handle, ticket }),
            )
            .await?
        {
            Response::Removed { detail, tickets } => (detail, tickets),
            other => return Err(unexpected("RemoveObject", &other)),
        };
        self.forget_caps(handle);
        if let ObjDetail::File { layout } = detail {
            crate::io::remove_datafiles(&self.inner.pool, &self.creds, &layout, &tickets).await;
        }
        Ok(())
    }

    /// Every entry of directory `dir`.
    pub async fn readdir_at(&self, dir: Handle) -> Result<Vec<DirEntry>> {
        let d = self.dir(dir).await?;
        self.readdir_dir(&d).await
    }

    /// Entries of directory `dir` with their attributes (two-phase readdirplus).
    pub async fn readdir_plus_at(
        &self,
        dir: Handle,
        sizes: bool,
    ) -> Result<Vec<(DirEntry, Result<Attr>)>> {
        let entries = self.readdir_at(dir).await?;
        Ok(self.with_attrs(entries, sizes).await)
    }

    /// Attributes of `entries` (from [`Client::readdir_at`]), by the two phases of
    /// readdirplus, so a caller can fetch them page by page; a file's size is filled
    /// in when `sizes`. Each entry carries its own result.
    pub async fn entry_attrs(
        &self,
        entries: Vec<DirEntry>,
        sizes: bool,
    ) -> Vec<(DirEntry, Result<Attr>)> {
        self.with_attrs(entries, sizes).await
    }

    /// Sets or clears the default layout of directory `dir`.
    pub async fn set_dir_layout_at(&self, dir: Handle, layout: Option<LayoutSpec>) -> Result<Attr> {
        let owner = self.owner(dir)?;
        match self
            .rpc(
                owner,
                Request::SetDirLayout(req::SetDirLayout { dir, layout }),
            )
            .await?
        {
            Response::Attr { attr, .. } => Ok(attr),
            other => Err(unexpected("SetDirLayout", &other)),
        }
    }
}

impl Client {
    /// The value of extended attribute `name` of object `handle` (ENODATA if absent).
    pub async fn getxattr(&self, handle: Handle, name: &str) -> Result<Vec<u8>> {
        let owner = self.owner(handle)?;
        let req = Request::GetXattr(req::GetXattr {
            handle,
            name: name.to_string(),
        });
        match self.rpc(owner, req).await? {
            Response::Xattr { value } => Ok(value),
            other => Err(unexpected("GetXattr", &other)),
        }
    }

    /// Sets extended attribute `name` of object `handle`; `flags` as setxattr(2)
    /// (`XATTR_CREATE` 1, `XATTR_REPLACE` 2).
    pub async fn setxattr(
        &self,
        handle: Handle,
        name: &str,
        value: &[u8],
        flags: u32,
    ) -> Result<()> {
        let owner = self.owner(handle)?;
        let req = Request::SetXattr(req::SetXattr {
            handle,
            name: name.to_string(),
            value: value.to_vec(),
            flags,
        });
        self.rpc(owner, req).await.map(|_| ())
    }

    /// The names of the extended attributes of object `handle`.
    pub async fn listxattr(&self, handle: Handle) -> Result<Vec<String>> {
        let owner = self.owner(handle)?;
        match self
            .rpc(owner, Request::ListXattr(req::ListXattr { handle }))
            .await?
        {
            Response::XattrNames { names } => Ok(names),
            other => Err(unexpected("ListXattr", &other)),
        }
    }

    /// Removes extended attribute `name` of object `handle` (ENODATA if absent).
    pub async fn removexattr(&self, handle: Handle, name: &str) -> Result<()> {
        let owner = self.owner(handle)?;
        let req = Request::RemoveXattr(req::RemoveXattr {
            handle,
            name: name.to_string(),
        });
        self.rpc(owner, req).await.map(|_| ())
    }
}

/// What an unlink left to delete: a deleted file's datafiles.
#[derive(Debug)]
#[must_use = "leftovers take space until deleted"]
pub struct Leftovers {
    handle: Handle,
    /// What became of the object.
    left: Remains,
    /// REMOVE tickets for what is left.
    tickets: Vec<pvfs_proto::Capability>,
}
