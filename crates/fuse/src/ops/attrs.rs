//! Attributes: getattr (from what the mount holds current when it can, without
//! waiting) and setattr (mode, owner, size, times), with the refusals the kernel
//! approved retried as the mount.

use fuser::{FileAttr, TimeOrNow};
use pvfs_client::{Attr, ObjKind, SetAttr};
use pvfs_proto::{Creds, Handle};

use crate::attr::{privileged, timespec};
use crate::errors::{errno, gone, OpResult};
use crate::inner::Inner;

/// What `setattr` asks for.
pub(crate) struct SetReq {
    /// New mode bits (chmod).
    pub mode: Option<u32>,
    /// New owner (chown).
    pub uid: Option<u32>,
    /// New group (chown).
    pub gid: Option<u32>,
    /// New size (truncate).
    pub size: Option<u64>,
    /// New access time (utimes).
    pub atime: Option<TimeOrNow>,
    /// New modification time (utimes).
    pub mtime: Option<TimeOrNow>,
    /// The open file it came through (ftruncate, futimens), if any.
    pub fh: Option<u64>,
}

impl Inner {
    /// A directory's attributes from the recent cache, without waiting (on a FUSE
    /// thread); None when the servers must be asked ([`Inner::getattr`]).
    pub(crate) fn getattr_now(&self, handle: Handle) -> Option<FileAttr> {
        self.attr_now(handle).map(|a| self.fattr(&a))
    }

    /// The attributes of `handle`, from the servers unless a directory's are recent.
    pub(crate) async fn getattr(&self, handle: Handle) -> OpResult<FileAttr> {
        // The kernel asks again for a directory's attributes after every create or
        // remove in it (to check permissions): what was seen within the attribute
        // timeout answers, with the changes this mount made patched in
        // (`Tables::dir_changed`), as the kernel's own cache would.
        if let Some(dir) = self.tables.dir_attr(handle, self.attr_ttl()) {
            return Ok(self.fattr(&dir));
        }
        let attr = self.stat(handle).await?;
        Ok(self.fattr(&attr))
    }

    /// The attributes of `handle` this mount holds current, if any: a directory's
    /// seen within the attribute time, a file's whose every datafile it knows
    /// (while the change feeds run).
    pub(super) fn attr_now(&self, handle: Handle) -> Option<Attr> {
        if let Some(dir) = self.tables.dir_attr(handle, self.attr_ttl()) {
            return Some(dir);
        }
        if !self.file_attrs_held() {
            return None;
        }
        self.tables.known_file_attr(handle)
    }

    /// Current attributes with a file's size and mtime: one round trip when the
    /// file's layout is known (metadata and data servers asked at once).
    pub(super) async fn stat(&self, handle: Handle) -> OpResult<Attr> {
        let attr = match self.tables.layout(handle) {
            Some(layout) => self.client.stat_file(handle, &layout).await,
            None => self.client.stat_handle(handle).await,
        }
        .map_err(gone)?;
        self.tables.note(&attr);
        Ok(attr)
    }

    /// Changes attributes of `handle` as the caller (size as the mount); the new
    /// attributes.
    pub(crate) async fn setattr(
        &self,
        creds: Creds,
        handle: Handle,
        req: SetReq,
    ) -> OpResult<FileAttr> {
        if req.size.is_some() {
            // The datafiles change: what is known of them goes. Other changes are
            // the metafile's alone: its new attributes are noted below, and with
            // the datafiles' stats kept a `stat` after `chmod` or `utimes` (as
            // `rsync` and `tar` do for every file) needs no server.
            self.tables.forget_file_attr(handle);
        }
        if let Some(size) = req.size {
            // Writes still on their way go first.
            if let Some(p) = self.tables.any_pending(handle) {
                p.drain().await;
            }
            let open = req
                .fh
                .and_then(|fh| self.tables.file(fh))
                .filter(|of| of.handle == handle);
            let file = match open {
                Some(of) => of.file.clone(),
                None => self.client.open_handle(handle).await.map_err(errno)?,
            };
            // The kernel checked write access; the truncate also stamps the mtime.
            let truncated = file.truncate(size).await;
            self.tables.note_write(handle);
            truncated.map_err(errno)?;
            if let Some(p) = self.tables.any_pending(handle) {
                p.truncated(size);
            }
        }
        let mut set = SetAttr {
            mode: req.mode.map(|m| m & 0o7777),
            uid: req.uid,
            gid: req.gid,
            atime: req.atime.map(timespec),
            mtime: req.mtime.map(timespec),
            // Explicit times: a "now" change the kernel approved for a writer who is
            // not the owner is retried below on the kernel's word.
            now: false,
        };
        let times_now = matches!(req.atime, None | Some(TimeOrNow::Now))
            && matches!(req.mtime, None | Some(TimeOrNow::Now));
        if req.size.is_some() && times_now {
            // "now" times that come with a truncate are the truncate's own.
            set.atime = None;
            set.mtime = None;
        }
        if set == SetAttr::default() {
            return self.getattr(handle).await;
        }
        let current = match self.attr_now(handle) {
            Some(held) => held,
            None => self.stat(handle).await?,
        };
        if set.mtime.is_none() && current.kind() == ObjKind::File {
            // Changing the metafile makes its mtime the one that counts (see the
            // client's merge_data_mtime): carry the current one over.
            set.mtime = Some(current.mtime);
        }
        // A file whose datafiles this mount knows (it wrote them, and the change
        // feeds say nobody else did) needs no data server for the size the answer
        // carries: one round trip instead of two (`tar` and `rsync` set the mode,
        // owner and times of every file they write).
        let lite = current.kind() == ObjKind::File
            && !self.opts.write_behind
            && self.coherent()
            && self.tables.known_file_attr(handle).is_some();
        let set_with = async |c: pvfs_client::Client, set: SetAttr| {
            if lite {
                c.setattr_lite(handle, set).await
            } else {
                c.setattr_handle(handle, set).await
            }
        };
        let attr = match set_with(self.caller(&creds), set.clone()).await {
            Ok(a) => a,
            Err(e)
                if e.errno == pvfs_client::Errno::EPERM
                    && creds.uid != 0
                    && kernel_approved(&req, &current, &creds) =>
            {
                set_with(self.client.clone(), set).await.map_err(errno)?
            }
            Err(e) => return Err(errno(e)),
        };
        self.tables.note(&attr);
        let attr = match (lite, self.tables.known_file_attr(handle)) {
            (false, _) => attr,
            (true, Some(known)) => known,
            // The datafiles' stats went meanwhile (another client wrote): asked.
            (true, None) => {
                let mut attr = attr;
                self.client.complete(&mut attr).await.map_err(errno)?;
                self.tables.note(&attr);
                attr
            }
        };
        self.tables.set_privileged(handle, privileged(attr.mode));
        Ok(self.fattr(&attr))
    }
}

/// Whether a setattr the servers refused (EPERM) is one the kernel lets a
/// non-owner make: times set to "now" by a writer (the kernel checked write
/// access), or set-user-ID/set-group-ID cleared because someone wrote to the file.
fn kernel_approved(req: &SetReq, current: &Attr, creds: &Creds) -> bool {
    if req.uid.is_some() || req.gid.is_some() || current.uid == creds.uid {
        return false;
    }
    let now = |t: &Option<TimeOrNow>| matches!(t, None | Some(TimeOrNow::Now));
    let touch = (req.atime.is_some() || req.mtime.is_some()) && now(&req.atime) && now(&req.mtime);
    let kill_priv = req.mode.is_some_and(|m| {
        let (old, new) = (current.mode & 0o7777, m & 0o7777);
        // Only bits removed, and only set-user-ID and set-group-ID among them.
        old != new && new & !old == 0 && (old & !new) & !(libc::S_ISUID | libc::S_ISGID) == 0
    });
    match (
        req.mode.is_some(),
        req.atime.is_some() || req.mtime.is_some(),
    ) {
        (false, true) => touch,
        (true, false) => kill_priv,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvfs_proto::layout::{Datafile, Layout};
    use pvfs_proto::{ObjDetail, Timespec};

    fn file(mode: u32, uid: u32) -> Attr {
        Attr {
            handle: 5,
            mode,
            uid,
            gid: uid,
            nlink: 1,
            size: 0,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            detail: ObjDetail::File {
                layout: Layout {
                    stripe_size: 65536,
                    replicas: 1,
                    datafiles: vec![Datafile::single(0, 9)],
                    width: 1,
                },
            },
            blocks: 0,
            acl: None,
        }
    }

    fn req() -> SetReq {
        SetReq {
            mode: None,
            uid: None,
            gid: None,
            size: None,
            atime: None,
            mtime: None,
            fh: None,
        }
    }

    #[test]
    fn which_refusals_the_kernel_approved() {
        let writer = Creds {
            uid: 1000,
            gid: 1000,
            groups: vec![],
        };
        let cur = file(0o6775, 0);
        // Clearing set-user-ID and set-group-ID after a write.
        let r = SetReq {
            mode: Some(0o0775),
            ..req()
        };
        assert!(kernel_approved(&r, &cur, &writer));
        let r = SetReq {
            mode: Some(0o2775),
            ..req()
        };
        assert!(kernel_approved(&r, &cur, &writer));
        // Anything else about the mode is a chmod the servers rightly refused.
        let r = SetReq {
            mode: Some(0o0777),
            ..req()
        };
        assert!(!kernel_approved(&r, &cur, &writer));
        let r = SetReq {
            mode: Some(0o6775),
            ..req()
        };
        assert!(!kernel_approved(&r, &cur, &writer));
        // utimes(NULL) by a writer, but not explicit times.
        let r = SetReq {
            atime: Some(TimeOrNow::Now),
            mtime: Some(TimeOrNow::Now),
            ..req()
        };
        assert!(kernel_approved(&r, &cur, &writer));
        let r = SetReq {
            mtime: Some(TimeOrNow::SpecificTime(std::time::UNIX_EPOCH)),
            ..req()
        };
        assert!(!kernel_approved(&r, &cur, &writer));
        // Never a chown.
        let r = SetReq {
            uid: Some(1000),
            ..req()
        };
        assert!(!kernel_approved(&r, &cur, &writer));
    }
}
