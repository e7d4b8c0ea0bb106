//! An object's lifetime, in one place: every link an object gains or loses (link,
//! unlink, rename over it, an undone link, fsck's repair) is counted here, inside the
//! commit that changes it, and only here is an object deleted.
//!
//! A file, symlink or special file has one link per name (`Attr::nlink`). Links are
//! added before the new name is put in place and taken after a name is gone, so a
//! crash between the steps of an operation that spans servers leaves a count that is
//! too high (an object that outlives its names, which fsck finds), never one that is
//! too low (a name whose object was deleted). A directory has one name; its link
//! count is computed (2 + subdirectories, from its shards), and losing its name
//! deletes it.

use pvfs_proto::access;
use pvfs_proto::{
    rights, Attr, Capability, Creds, Errno, Handle, LinkDrop, ObjDetail, Remains, Request,
    Response, RetryKey, Timespec,
};
use pvfs_storage::{MetaError, MetaTxn};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::no_object;

/// Most links one object may have (as ext4's EXT4_LINK_MAX).
pub const LINK_MAX: u32 = 65000;

/// What an object's loss of a link left, and REMOVE tickets for what the caller
/// deletes next: a deleted file's datafiles, or the object itself when it was kept at
/// zero links.
pub type Dropped = (Remains, Vec<Capability>);

/// Takes one link from `handle` (one of its names is gone). At zero links it is
/// deleted, unless `keep` (a file still open somewhere: [`remove_unlinked`] deletes
/// it later). A directory is deleted at once.
pub fn drop_link(
    t: &mut MetaTxn<'_>,
    ctx: &Ctx,
    handle: Handle,
    keep: bool,
    uid: u32,
) -> Result<Dropped, MetaError> {
    let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
    if attr.is_dir() {
        return deleted(t, ctx, attr, uid);
    }
    attr.nlink = attr.nlink.saturating_sub(1);
    attr.ctime = Timespec::now();
    if attr.nlink > 0 {
        t.put_object(&attr);
        return Ok((Remains::Names(attr.nlink), Vec::new()));
    }
    if keep {
        t.put_object(&attr);
        return Ok((
            Remains::Kept,
            vec![ctx.caps.mint(handle, rights::REMOVE, uid)],
        ));
    }
    deleted(t, ctx, attr, uid)
}

/// Deletes `handle`, kept at zero links by an unlink while it was open; EBUSY while
/// it has a name (it was never unlinked). Returns what it was and REMOVE tickets for
/// a file's datafiles.
pub fn remove_unlinked(
    t: &mut MetaTxn<'_>,
    ctx: &Ctx,
    handle: Handle,
    uid: u32,
) -> Result<(ObjDetail, Vec<Capability>), MetaError> {
    let attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
    if attr.nlink > 0 && !attr.is_dir() {
        return Err(OpError::new(
            Errno::EBUSY,
            format!("object {handle:#x} still has {} names", attr.nlink),
        )
        .into());
    }
    delete(t, ctx, attr, uid)
}

/// Adds a link to `handle` for a new name (not a directory: EPERM), if `creds` may
/// link it; the object must still have a name (ENOENT otherwise, as Linux answers for
/// a file unlinked while open), and fewer than [`LINK_MAX`] (EMLINK).
pub fn add_link(t: &mut MetaTxn<'_>, handle: Handle, creds: &Creds) -> Result<Attr, MetaError> {
    let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
    access::may_link(&attr, creds).map_err(|e| {
        let why = if attr.is_dir() {
            "directories cannot have hard links".to_string()
        } else {
            format!("not permitted to link {handle:#x}")
        };
        OpError::new(e, why)
    })?;
    if attr.nlink == 0 {
        return Err(OpError::new(
            Errno::ENOENT,
            format!("object {handle:#x} has no name left to link to"),
        )
        .into());
    }
    if attr.nlink >= LINK_MAX {
        return Err(OpError::new(
            Errno::EMLINK,
            format!("object {handle:#x} has {LINK_MAX} links already"),
        )
        .into());
    }
    attr.nlink += 1;
    attr.ctime = Timespec::now();
    t.put_object(&attr);
    Ok(attr)
}

/// Sets `handle`'s link count to `links` if it is `expect` (fsck's repair: a count
/// checked against the names it found); at zero the object is deleted. ESTALE when
/// the count changed meanwhile.
pub fn set_links(
    t: &mut MetaTxn<'_>,
    ctx: &Ctx,
    handle: Handle,
    links: u32,
    expect: u32,
    uid: u32,
) -> Result<Dropped, MetaError> {
    let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
    if attr.nlink != expect {
        return Err(OpError::new(
            Errno::ESTALE,
            format!("object {handle:#x} has {} links, not {expect}", attr.nlink),
        )
        .into());
    }
    if links == 0 {
        return deleted(t, ctx, attr, uid);
    }
    if attr.is_dir() {
        return Err(OpError::new(
            Errno::EPERM,
            "a directory's link count is computed from its shards",
        )
        .into());
    }
    attr.nlink = links.min(LINK_MAX);
    attr.ctime = Timespec::now();
    t.put_object(&attr);
    Ok((Remains::Names(attr.nlink), Vec::new()))
}

/// The link a name removal in this commit takes from `handle`, as `fate` says: taken
/// here when the object lives here; [`Remains::Unknown`] when it lives elsewhere, for
/// [`finish_remote`] to take after the commit (the answer recorded for a retry says
/// so too). A local object that is already gone (a dangling name) is left alone.
pub fn drop_for_name(
    t: &mut MetaTxn<'_>,
    ctx: &Ctx,
    handle: Handle,
    fate: LinkDrop,
    uid: u32,
) -> Result<Dropped, MetaError> {
    match fate {
        LinkDrop::Moved => Ok((Remains::Untouched, Vec::new())),
        _ if !ctx.is_local(handle) => Ok((Remains::Unknown, Vec::new())),
        _ if t.get_object(handle)?.is_none() => Ok((Remains::Untouched, Vec::new())),
        LinkDrop::Keep => drop_link(t, ctx, handle, true, uid),
        LinkDrop::Delete => drop_link(t, ctx, handle, false, uid),
    }
}

/// After the commit of a name removal whose object lives elsewhere
/// ([`drop_for_name`] answered Unknown): takes its link at its owner and puts the
/// outcome in the answer.
pub async fn finish_remote(
    ctx: &Ctx,
    creds: &Creds,
    handle: Handle,
    fate: LinkDrop,
    key: Option<RetryKey>,
    (left, tickets): (&mut Remains, &mut Vec<Capability>),
) {
    if fate == LinkDrop::Moved || *left != Remains::Unknown || ctx.is_local(handle) {
        return;
    }
    let (l, t) = drop_remote(ctx, creds, handle, fate == LinkDrop::Keep, key).await;
    *left = l;
    *tickets = t;
}

/// The retry key of the `DropLink` a server sends for the mutation `key` names: the
/// same for every retry of that mutation, so the owner answers a repeated one from its
/// record instead of taking a second link (a replayed `Unlink` sends it again).
fn peer_key(key: Option<RetryKey>) -> Option<RetryKey> {
    key.map(|k| RetryKey {
        client: k.client ^ 0x9e37_79b9_7f4a_7c15,
        seq: k.seq,
    })
}

/// Takes the link of a name this server removed from `handle`, which lives on
/// another server: a `DropLink` to its owner, as `creds`, after the commit that
/// removed the name. `key`: the retry key of that mutation. When the owner cannot be
/// asked, the object keeps a link too many ([`Remains::Unknown`]) until fsck repairs
/// the count: a name is never left without its link.
pub async fn drop_remote(
    ctx: &Ctx,
    creds: &Creds,
    handle: Handle,
    keep: bool,
    key: Option<RetryKey>,
) -> Dropped {
    let Some(owner) = ctx.config.owner_of(handle) else {
        return (Remains::Unknown, Vec::new());
    };
    let request = Request::DropLink { handle, keep };
    match ctx
        .peers
        .call_as(owner, creds, request, peer_key(key))
        .await
    {
        Ok(Response::Dropped { left, tickets }) => (left, tickets),
        Ok(other) => {
            tracing::warn!(
                "object {handle:#x} keeps a link too many (fsck repairs it): unexpected answer {}",
                other.op_name()
            );
            (Remains::Unknown, Vec::new())
        }
        Err(e) => {
            tracing::warn!("object {handle:#x} keeps a link too many (fsck repairs it): {e}");
            (Remains::Unknown, Vec::new())
        }
    }
}

/// Adds a link to `handle`, which lives on another server, for a name this server is
/// about to add: an `AddLink` to its owner as `creds` (who must be allowed to link
/// it). No retry key: a retried link that finds its name already added is answered
/// from this server's record before asking again, and a link counted twice is one
/// too many (fsck repairs it), never one too few.
pub async fn add_remote(ctx: &Ctx, creds: &Creds, handle: Handle) -> OpResult<Attr> {
    let owner = ctx.config.owner_of(handle).ok_or_else(|| {
        OpError::new(
            Errno::ESTALE,
            format!("handle {handle:#x} belongs to no server"),
        )
    })?;
    match ctx
        .peers
        .call_as(owner, creds, Request::AddLink { handle }, None)
        .await?
    {
        Response::Attr { attr, .. } => Ok(attr),
        other => Err(OpError::new(
            Errno::EPROTO,
            format!("unexpected answer {} to AddLink", other.op_name()),
        )),
    }
}

/// Deletes an object with what only it uses here: its extended attributes and, for a
/// directory, this server's record and seal of its shard. Returns what it was and
/// REMOVE tickets for a file's datafiles.
fn delete(
    t: &mut MetaTxn<'_>,
    ctx: &Ctx,
    attr: Attr,
    uid: u32,
) -> Result<(ObjDetail, Vec<Capability>), MetaError> {
    let handle = attr.handle;
    t.delete_object(handle);
    t.clear_xattrs(handle)?;
    if attr.is_dir() {
        t.delete_shard(handle);
        t.set_sealed(handle, false);
    }
    let tickets = match &attr.detail {
        ObjDetail::File { layout } => layout
            .datafiles
            .iter()
            .map(|d| ctx.caps.mint(d.handle, rights::REMOVE, uid))
            .collect(),
        _ => Vec::new(),
    };
    Ok((attr.detail, tickets))
}

/// [`delete`], as the loss of the last link.
fn deleted(t: &mut MetaTxn<'_>, ctx: &Ctx, attr: Attr, uid: u32) -> Result<Dropped, MetaError> {
    let (detail, tickets) = delete(t, ctx, attr, uid)?;
    Ok((Remains::Deleted(detail), tickets))
}
