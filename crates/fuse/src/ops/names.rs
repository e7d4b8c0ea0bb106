//! Names: looking a name up, reading a symlink, and what every change of a
//! directory's names needs (the parent's attributes, the credentials and mode a
//! new object inherits, the names a request may carry, what a failed change
//! means for the names this mount knows).

use std::ffi::OsStr;

use fuser::{Errno, FileAttr};
use pvfs_client::{Attr, ObjKind};
use pvfs_proto::{Creds, Handle};

use crate::errors::{errno, OpResult};
use crate::inner::Inner;

impl Inner {
    /// The attributes of `name` in `parent`, as the caller sees them.
    pub(crate) async fn lookup(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
    ) -> OpResult<FileAttr> {
        let name = lookup_name(name)?;
        let caller = self.caller(&creds);
        // A file seen before (the kernel asking again after its cache expired): ask
        // for the entry and the file's size at once.
        let known = self
            .tables
            .name(parent, name)
            .and_then(|h| self.tables.layout(h).map(|l| (h, l)));
        let attr = match known {
            Some((h, layout)) => caller.lookup_expecting(parent, name, h, &layout).await,
            None => caller.lookup(parent, name).await,
        }
        .map_err(errno)?;
        self.tables.note(&attr);
        self.tables
            .note_name(parent, name, attr.handle, attr.kind());
        Ok(self.fattr(&attr))
    }

    /// Whether `name` is surely not in `parent`, as this mount knows every name there
    /// (a name a lookup would refuse is left to it, for its error).
    pub(crate) fn surely_absent(&self, parent: Handle, name: &OsStr) -> bool {
        lookup_name(name).is_ok_and(|n| self.coherent() && self.tables.surely_absent(parent, n))
    }

    /// The target of symlink `handle`.
    pub(crate) async fn readlink(&self, handle: Handle) -> OpResult<Vec<u8>> {
        let attr = self.client.getattr(handle).await.map_err(errno)?;
        match attr.detail {
            pvfs_proto::ObjDetail::Symlink { target } => Ok(target.into_bytes()),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Attributes of directory `dir`, from the recent cache or its servers (with its
    /// shards' times and link count, as `getattr` answers from the same cache).
    pub(super) async fn dir_attr(&self, dir: Handle) -> OpResult<Attr> {
        if let Some(a) = self.tables.dir_attr(dir, self.attr_ttl()) {
            return Ok(a);
        }
        let attr = self.client.stat_handle(dir).await.map_err(errno)?;
        if attr.kind() != ObjKind::Dir {
            return Err(Errno::ENOTDIR);
        }
        self.tables.note_dir(&attr);
        Ok(attr)
    }

    /// Credentials and mode for a new object in `parent`: a set-group-ID directory
    /// gives its group to what is created in it, and its bit to new directories.
    pub(super) fn inherit(creds: &Creds, parent: &Attr, mode: u32, is_dir: bool) -> (Creds, u32) {
        if parent.mode & libc::S_ISGID == 0 {
            return (creds.clone(), mode);
        }
        let mut c = creds.clone();
        c.gid = parent.gid;
        (c, if is_dir { mode | libc::S_ISGID } else { mode })
    }

    /// The errno of a namespace change in `dir` that failed: `dir`'s names are no
    /// longer known completely here (the failure may mean another client changed
    /// them, or left a step half done).
    pub(super) fn failed_in(&self, dir: Handle, e: pvfs_client::Error) -> Errno {
        self.tables.dir_unknown(dir);
        errno(e)
    }
}

/// A name to look up or remove (a name that is not UTF-8 cannot exist).
pub(super) fn lookup_name(name: &OsStr) -> OpResult<&str> {
    if name.len() > pvfs_proto::types::NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    name.to_str().ok_or(Errno::ENOENT)
}

/// A name for a new entry (pvfs names are UTF-8).
pub(super) fn new_name(name: &OsStr) -> OpResult<&str> {
    if name.len() > pvfs_proto::types::NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    name.to_str().ok_or(Errno::EILSEQ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(lookup_name(OsStr::new("a")), Ok("a"));
        let long = "x".repeat(256);
        assert_eq!(lookup_name(OsStr::new(&long)), Err(Errno::ENAMETOOLONG));
        assert_eq!(new_name(OsStr::new(&long)), Err(Errno::ENAMETOOLONG));
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(new_name(OsStr::from_bytes(b"\xff")), Err(Errno::EILSEQ));
        assert_eq!(lookup_name(OsStr::from_bytes(b"\xff")), Err(Errno::ENOENT));
    }
}
