//! Extended attributes: passed on to the servers, the layout attribute
//! (`user.pvfs.layout`, `xattr.rs`) made here, and ACLs answered from the
//! attributes the mount holds when it can.

use std::ffi::OsStr;

use fuser::Errno;
use pvfs_client::{LayoutSpec, ObjKind, SetAttr};
use pvfs_proto::{Creds, Handle};

use crate::errors::{errno, OpResult};
use crate::inner::Inner;
use crate::xattr::{self, LAYOUT_XATTR};

impl Inner {
    /// The value of extended attribute `name` of `handle`.
    pub(crate) async fn getxattr(
        &self,
        creds: Creds,
        handle: Handle,
        name: &OsStr,
    ) -> OpResult<Vec<u8>> {
        let name = name.to_str().ok_or(Errno::ENODATA)?;
        if name == LAYOUT_XATTR {
            let attr = self.client.getattr(handle).await.map_err(errno)?;
            return match &attr.detail {
                pvfs_proto::ObjDetail::File { layout } => {
                    Ok(xattr::format_file_layout(layout, self.client.config()).into_bytes())
                }
                pvfs_proto::ObjDetail::Dir {
                    default_layout: Some(spec),
                    ..
                } => Ok(xattr::format_spec(spec).into_bytes()),
                _ => Err(Errno::ENODATA),
            };
        }
        if !xattr::passed_on(name) {
            return Err(Errno::EOPNOTSUPP);
        }
        self.caller(&creds)
            .getxattr(handle, name)
            .await
            .map_err(errno)
    }

    /// The names of `handle`'s extended attributes, each ended by a NUL.
    pub(crate) async fn listxattr(&self, creds: Creds, handle: Handle) -> OpResult<Vec<u8>> {
        let names = self.caller(&creds).listxattr(handle).await.map_err(errno)?;
        let mut out = Vec::new();
        for n in names {
            out.extend_from_slice(n.as_bytes());
            out.push(0);
        }
        Ok(out)
    }

    /// Sets extended attribute `name` of `handle` (setxattr(2) `flags`).
    pub(crate) async fn setxattr(
        &self,
        creds: Creds,
        handle: Handle,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> OpResult<()> {
        let name = name.to_str().ok_or(Errno::EOPNOTSUPP)?;
        if name == LAYOUT_XATTR {
            let spec = xattr::parse_spec(value).map_err(|why| {
                tracing::debug!("{LAYOUT_XATTR}: {why}");
                Errno::EINVAL
            })?;
            return self.set_layout(creds, handle, spec).await;
        }
        if !xattr::passed_on(name) {
            return Err(Errno::EOPNOTSUPP);
        }
        let flags = u32::try_from(flags).map_err(|_| Errno::EINVAL)?;
        let keep = self.mtime_to_keep(handle).await?;
        self.caller(&creds)
            .setxattr(handle, name, value, flags)
            .await
            .map_err(errno)?;
        self.restore_mtime(handle, keep).await;
        // An ACL may change the mode: asked again when needed.
        self.tables.forget_dir(handle);
        self.tables.forget_file_attr(handle);
        Ok(())
    }

    /// Removes extended attribute `name` of `handle`.
    pub(crate) async fn removexattr(
        &self,
        creds: Creds,
        handle: Handle,
        name: &OsStr,
    ) -> OpResult<()> {
        let name = name.to_str().ok_or(Errno::ENODATA)?;
        if name == LAYOUT_XATTR {
            return self.set_layout(creds, handle, None).await;
        }
        if !xattr::passed_on(name) {
            return Err(Errno::EOPNOTSUPP);
        }
        let keep = self.mtime_to_keep(handle).await?;
        self.caller(&creds)
            .removexattr(handle, name)
            .await
            .map_err(errno)?;
        self.restore_mtime(handle, keep).await;
        self.tables.forget_dir(handle);
        self.tables.forget_file_attr(handle);
        Ok(())
    }

    /// The value of ACL attribute `name` of `handle` from the attributes this mount
    /// holds current (they carry the ACLs), without waiting; None for another name
    /// or attributes not held.
    pub(crate) fn acl_xattr_now(&self, handle: Handle, name: &str) -> Option<OpResult<Vec<u8>>> {
        if name != pvfs_proto::acl::XATTR_ACCESS && name != pvfs_proto::acl::XATTR_DEFAULT {
            return None;
        }
        let answer = |attr: &pvfs_proto::Attr| {
            let entries = pvfs_proto::acl::named(attr.acl.as_deref(), name);
            if entries.is_empty() {
                Err(Errno::ENODATA)
            } else {
                Ok(pvfs_proto::acl::to_xattr(entries))
            }
        };
        let files = self.file_attrs_held();
        if let Some(a) = self
            .tables
            .with_held_attr(handle, self.attr_ttl(), files, answer)
        {
            return Some(a);
        }
        // A file's ACL does not need its datafiles' sizes: the attributes a listing
        // brought, which the change feeds keep current, answer it (`ls -l` asks for
        // every file's).
        files
            .then(|| self.tables.file_attr(handle))
            .flatten()
            .map(|a| answer(&a))
    }

    /// Sets (or with `None` clears) a directory's default layout. A file's layout
    /// is fixed at create: setting the one it has is accepted, any other is EPERM.
    async fn set_layout(
        &self,
        creds: Creds,
        handle: Handle,
        spec: Option<LayoutSpec>,
    ) -> OpResult<()> {
        let attr = self.client.getattr(handle).await.map_err(errno)?;
        match &attr.detail {
            pvfs_proto::ObjDetail::Dir { .. } => {
                let attr = self
                    .caller(&creds)
                    .set_dir_layout_at(handle, spec)
                    .await
                    .map_err(errno)?;
                self.tables.note_dir(&attr);
                Ok(())
            }
            pvfs_proto::ObjDetail::File { layout } => {
                let same = spec.is_some_and(|s| {
                    s.stripe_size.is_none_or(|v| v == layout.stripe_size)
                        && s.stripe_count
                            .is_none_or(|c| c as usize == layout.datafiles.len())
                });
                if same {
                    Ok(())
                } else {
                    Err(Errno::EPERM)
                }
            }
            pvfs_proto::ObjDetail::Symlink { .. } | pvfs_proto::ObjDetail::Node { .. } => {
                Err(Errno::EPERM)
            }
        }
    }

    /// A regular file's current mtime, when an attribute change is about to make
    /// the metafile's mtime the one that counts.
    async fn mtime_to_keep(&self, handle: Handle) -> OpResult<Option<pvfs_client::Timespec>> {
        let attr = self.stat(handle).await?;
        Ok((attr.kind() == ObjKind::File).then_some(attr.mtime))
    }

    /// Puts back a file's mtime after an extended attribute change (bookkeeping,
    /// done as the mount).
    async fn restore_mtime(&self, handle: Handle, keep: Option<pvfs_client::Timespec>) {
        if let Some(mtime) = keep {
            let set = SetAttr {
                mtime: Some(mtime),
                ..SetAttr::default()
            };
            if let Err(e) = self.client.setattr_lite(handle, set).await {
                tracing::debug!("keeping the mtime of {handle:#x}: {e}");
            }
        }
    }
}
