//! One module per request kind, each with the `impl Handler` that declares what
//! the kind is and does it (`crate::op`); a few modules hold what several share
//! (`acl`, `datafiles`, `grant`, `scan`, `xattr`).

pub mod acl;
pub mod add_link;
pub mod authority;
pub mod cancel_lock;
pub mod changes;
pub mod copies;
pub mod copy_datafile;
pub mod create;
pub mod create_datafiles;
pub mod datafiles;
pub mod dir_stats;
pub mod drain;
pub mod drop_link;
pub mod fallocate;
pub mod forget;
pub mod fsync;
pub mod get_map;
pub mod get_sizes;
pub mod get_xattr;
pub mod getattr;
pub mod grant;
pub mod hold;
pub mod link;
pub mod link_entry;
pub mod list_attr;
pub mod list_xattr;
pub mod lock;
pub mod lookup;
pub mod missed;
pub mod ping;
pub mod precreate;
pub mod read;
pub mod readdir;
pub mod rebalance;
pub mod remove_datafiles;
pub mod remove_object;
pub mod remove_xattr;
pub mod rename;
pub mod renew_lease;
pub mod replicate;
pub mod scan;
pub mod scan_datafiles;
pub mod scan_entries;
pub mod scan_held;
pub mod scan_lost;
pub mod scan_objects;
pub mod scan_seals;
pub mod scrub;
pub mod seal_dir;
pub mod sealed;
pub mod set_dir_layout;
pub mod set_links;
pub mod set_parent;
pub mod set_xattr;
pub mod setattr;
pub mod statfs;
pub mod sum_datafiles;
pub mod sync;
pub mod test_lock;
pub mod truncate;
pub mod unhold;
pub mod unlink;
pub mod unlock;
pub mod wait_for;
pub mod widen;
pub mod write;
pub mod xattr;

use pvfs_proto::{Errno, Handle};

// The errors handlers share are made in `crate::error`, below every subsystem.
pub(crate) use crate::error::{changed, no_entry, no_object};
use crate::error::{OpError, OpResult};

/// Object `h` as answered to clients: a directory's times and link count merged with
/// this server's shard of it (its owner holds shard 0; clients merge the others).
pub(crate) fn answered(
    view: &pvfs_storage::ReadView,
    h: Handle,
) -> Result<Option<pvfs_proto::Attr>, pvfs_storage::StorageError> {
    let Some(mut attr) = view.get_object(h)? else {
        return Ok(None);
    };
    if attr.is_dir() {
        attr.merge_shard(&view.shard_stat(h)?);
    }
    Ok(Some(attr))
}

/// Object `handle` of this metadata server as committed now (ENOENT if there is none,
/// an error if the handle is not this server's).
pub(crate) fn local_object(ctx: &crate::ctx::Ctx, handle: Handle) -> OpResult<pvfs_proto::Attr> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    ctx.meta
        .read()?
        .get_object(handle)?
        .ok_or_else(|| no_object(handle))
}

/// Changes directory `dir` inside a commit: `change` gets the owner's uid and the
/// directory's parent and default-layout fields; ctime is stamped and the object
/// stored. Returns the new attributes.
pub(crate) fn change_dir(
    t: &mut pvfs_storage::MetaTxn<'_>,
    dir: Handle,
    change: impl FnOnce(u32, &mut Handle, &mut Option<pvfs_proto::LayoutSpec>) -> Result<(), OpError>,
) -> OpResult<pvfs_proto::Attr> {
    let mut attr = t.get_object(dir)?.ok_or_else(|| no_object(dir))?;
    let owner = attr.uid;
    match &mut attr.detail {
        pvfs_proto::ObjDetail::Dir {
            parent,
            default_layout,
            ..
        } => change(owner, parent, default_layout)?,
        _ => {
            return Err(OpError::posix(
                Errno::ENOTDIR,
                format!("{dir:#x} is not a directory"),
            ))
        }
    }
    attr.ctime = pvfs_proto::Timespec::now();
    t.put_object(&attr);
    Ok(attr)
}
