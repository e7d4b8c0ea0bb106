//! Removing: unlink and rmdir, and the deletion of what lost its last name (at
//! once in the background, or at the last close of a file unlinked while open, or
//! when the mount ends).

use std::ffi::OsStr;
use std::time::Duration;

use pvfs_client::Remains;
use pvfs_proto::{Creds, Handle};

use crate::errors::OpResult;
use crate::inner::{Inner, REMOVALS};
use crate::ops::names::lookup_name;
use crate::state::Disposal;

impl Inner {
    /// Removes name `name` (not a directory) from `parent`.
    pub(crate) async fn unlink(&self, creds: Creds, parent: Handle, name: &OsStr) -> OpResult<()> {
        let name = lookup_name(name)?;
        let caller = self.caller(&creds);
        // The usual case, a file not open here whose object the name still means:
        // entry and object go in one commit.
        if let Some(h) = self.tables.name(parent, name) {
            if self.tables.try_begin_remove(h) {
                let done = caller.unlink_at_expect(parent, name, h).await;
                self.tables.removed(h);
                match done {
                    Ok((gone, leftovers)) => {
                        self.tables.forget_name(parent, name);
                        self.tables.dir_changed(parent, gone.changed, 0);
                        self.tables.name_gone(parent, name);
                        if matches!(gone.left, Remains::Deleted(_)) {
                            self.tables.forget_layout(h);
                        } else {
                            // Another link is left: its count and ctime changed.
                            self.tables.forget_file_attr(h);
                        }
                        self.delete_later(leftovers).await;
                        return Ok(());
                    }
                    // The name means another object now: the general way.
                    Err(e) if e.is_changed() => {}
                    Err(e) => {
                        self.tables.forget_name(parent, name);
                        return Err(self.failed_in(parent, e));
                    }
                }
            }
        }
        // Otherwise remove the name; an object left without a name is kept, and
        // deleted unless open.
        let gone = caller
            .unlink_at(parent, name, true)
            .await
            .map_err(|e| self.failed_in(parent, e))?;
        self.tables.name_gone(parent, name);
        self.tables.forget_name(parent, name);
        self.tables.dir_changed(parent, gone.changed, 0);
        self.tables.forget_file_attr(gone.entry.handle);
        if gone.left == Remains::Kept {
            self.dispose(gone.entry.handle).await;
        }
        Ok(())
    }

    /// Removes empty directory `name` from `parent`.
    pub(crate) async fn rmdir(&self, creds: Creds, parent: Handle, name: &OsStr) -> OpResult<()> {
        let name = lookup_name(name)?;
        let done = self.caller(&creds).rmdir_at(parent, name).await;
        // Its time and link count changed (or may have): asked again when needed.
        self.tables.forget_dir(parent);
        done.map_err(|e| self.failed_in(parent, e))?;
        self.tables.name_gone(parent, name);
        Ok(())
    }

    /// Deletes an object that lost its last name, unless it is open here. The
    /// deletion (object and datafiles) runs in the background: the name is already
    /// gone, durably, when the unlink is answered.
    pub(super) async fn dispose(&self, handle: Handle) {
        if self.tables.unlinked(handle) != Disposal::RemoveNow {
            return;
        }
        let Ok(permit) = self.removals.clone().acquire_owned().await else {
            return;
        };
        let client = self.client.clone();
        let tables = self.tables.clone();
        tokio::spawn(async move {
            match client.remove_object(handle).await {
                Ok(()) => {}
                // Open on another client: deleted at its last close there.
                Err(e) if e.errno == pvfs_client::Errno::EBUSY => {
                    tracing::debug!("object {handle:#x} kept: {e}")
                }
                Err(e) => tracing::warn!("object {handle:#x} left behind (fsck removes it): {e}"),
            }
            tables.removed(handle);
            tables.forget_layout(handle);
            drop(permit);
        });
    }

    /// Deletes the datafiles (and object) an unlink left, in the background: the
    /// name is gone already, so `unlink` need not wait for a second round of commits
    /// on the data servers. Bounded by the removals in flight (backpressure).
    async fn delete_later(&self, leftovers: pvfs_client::Leftovers) {
        let Ok(permit) = self.removals.clone().acquire_owned().await else {
            return;
        };
        let client = self.client.clone();
        tokio::spawn(async move {
            if let Err(e) = client.delete_leftovers(leftovers).await {
                tracing::warn!("an unlinked file's data left behind (fsck removes it): {e}");
            }
            drop(permit);
        });
    }

    /// The last close of an object whose last name went while it was open here:
    /// this mount lets go of it, and its server deletes it unless another client
    /// still has it open (`pvfs_client::holds`).
    pub(crate) async fn remove_orphan(&self, handle: Handle) {
        self.client.unhold_now(handle).await;
        self.tables.forget_layout(handle);
    }

    /// Waits (up to `limit`) for background deletions and lets go of every file
    /// still open (when the mount ends): the servers delete those unlinked meanwhile.
    pub(crate) async fn finish(&self, limit: Duration) {
        // Locks and holds of files still open (a detached mount) go with the mount.
        let _ = tokio::time::timeout(limit, self.client.release_all_locks()).await;
        let _ = tokio::time::timeout(limit, self.removals.acquire_many(REMOVALS)).await;
        let _ = tokio::time::timeout(limit, self.client.reaped()).await;
    }
}
