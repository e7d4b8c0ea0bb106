//! New names for objects that exist: link and rename.

use std::ffi::OsStr;

use fuser::{Errno, FileAttr, RenameFlags};
use pvfs_client::{ObjKind, Remains, RenameMode};
use pvfs_proto::{Creds, Handle};

use crate::errors::OpResult;
use crate::inner::Inner;
use crate::ops::names::{lookup_name, new_name};

impl Inner {
    /// Gives object `handle` one more name, `newname` in `newparent`.
    pub(crate) async fn link(
        &self,
        creds: Creds,
        handle: Handle,
        newparent: Handle,
        newname: &OsStr,
    ) -> OpResult<FileAttr> {
        let name = new_name(newname)?;
        let (attr, changed) = self
            .caller(&creds)
            .link_at(handle, newparent, name)
            .await
            .map_err(|e| self.failed_in(newparent, e))?;
        self.tables
            .name_made(newparent, name, attr.handle, attr.kind());
        self.tables.note(&attr);
        self.tables
            .note_name(newparent, name, attr.handle, attr.kind());
        self.tables.dir_changed(newparent, changed, 0);
        Ok(self.fattr(&attr))
    }

    /// Moves `name` of `parent` to `newname` of `newparent` (replacing, not
    /// replacing, or exchanging the two, as `flags` say).
    pub(crate) async fn rename(
        &self,
        creds: Creds,
        parent: Handle,
        name: &OsStr,
        newparent: Handle,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> OpResult<()> {
        let mode = if flags.is_empty() {
            RenameMode::Replace
        } else if flags == RenameFlags::RENAME_NOREPLACE {
            RenameMode::NoReplace
        } else if flags == RenameFlags::RENAME_EXCHANGE {
            RenameMode::Exchange
        } else {
            // RENAME_WHITEOUT (overlay file systems) and combinations.
            return Err(Errno::EINVAL);
        };
        let name = lookup_name(name)?;
        let newname = new_name(newname)?;
        // A file the rename replaces loses a link: what is held of it goes. (The
        // servers leave a moved object's attributes as they are.)
        if mode == RenameMode::Replace {
            if let Some(h) = self.tables.name(newparent, newname) {
                self.tables.forget_file_attr(h);
            }
        }
        let renamed = self
            .caller(&creds)
            .rename_at_keep(parent, name, newparent, newname, mode)
            .await;
        // Times and link counts of both directories changed (or may have).
        self.tables.forget_dir(parent);
        self.tables.forget_dir(newparent);
        let replaced = renamed.map_err(|e| {
            self.tables.dir_unknown(parent);
            self.failed_in(newparent, e)
        })?;
        self.tables.name_moved(
            (parent, name),
            (newparent, newname),
            mode == RenameMode::Exchange,
        );
        self.tables.rename_name(
            (parent, name),
            (newparent, newname),
            mode == RenameMode::Exchange,
        );
        if let Some((old, left)) = replaced {
            if old.kind == ObjKind::Dir {
                self.tables.forget_dir(old.handle);
            }
            if left == Remains::Kept {
                self.dispose(old.handle).await;
            }
        }
        Ok(())
    }
}
