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

use pvfs_config::HandleRange;
use pvfs_proto::access;
use pvfs_proto::{
    req, rights, Attr, Capability, Creds, Errno, Handle, LinkDrop, ObjDetail, Remains, Request,
    Response, RetryKey, Timespec,
};
use pvfs_storage::MetaTxn;

use crate::caps::Caps;
use crate::ctx::Ctx;
use crate::error::{no_object, OpError, OpResult};
use crate::holds::Claims;
use crate::session::Caller;

/// Most links one object may have (as ext4's EXT4_LINK_MAX).
pub const LINK_MAX: u32 = 65000;

/// What an object's loss of a link left, and REMOVE tickets for what the caller
/// deletes next: a deleted file's datafiles, or the object itself when it was kept at
/// zero links.
pub type Dropped = (Remains, Vec<Capability>);

/// Takes one link from `handle` (one of its names is gone). At zero links it is
/// deleted, unless `keep` (the caller has it open and deletes it with
/// [`remove_unlinked`]) or a client holds it open (`crate::holds`: deleted at the
/// last unhold): then it is kept, recorded in the store's `kept` table. A
/// directory is deleted at once.
pub fn drop_link(
    t: &mut MetaTxn<'_>,
    (caps, claims): (&Caps, &Claims),
    handle: Handle,
    keep: bool,
    uid: u32,
) -> OpResult<Dropped> {
    let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
    if attr.is_dir() {
        return deleted(t, caps, attr, uid);
    }
    attr.nlink = attr.nlink.saturating_sub(1);
    attr.ctime = Timespec::now();
    if attr.nlink > 0 {
        t.put_object(&attr);
        return Ok((Remains::Names(attr.nlink), Vec::new()));
    }
    if keep {
        t.put_object(&attr);
        t.set_kept(handle, true);
        return Ok((Remains::Kept, vec![caps.mint(handle, rights::REMOVE, uid)]));
    }
    if !claims.unheld(handle) {
        t.put_object(&attr);
        t.set_kept(handle, true);
        return Ok((Remains::Kept, Vec::new()));
    }
    deleted(t, caps, attr, uid)
}

/// Deletes `handle`, kept at zero links by an unlink while it was open; EBUSY while
/// it has a name (it was never unlinked) or a client holds it open (the last
/// unhold deletes it). Returns what it was and REMOVE tickets for a file's
/// datafiles.
pub fn remove_unlinked(
    t: &mut MetaTxn<'_>,
    (caps, claims): (&Caps, &Claims),
    handle: Handle,
    uid: u32,
) -> OpResult<(ObjDetail, Vec<Capability>)> {
    let attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
    if attr.nlink > 0 && !attr.is_dir() {
        return Err(OpError::posix(
            Errno::EBUSY,
            format!("object {handle:#x} still has {} names", attr.nlink),
        ));
    }
    if !claims.unheld(handle) {
        return Err(OpError::posix(
            Errno::EBUSY,
            format!("object {handle:#x} is open on a client: it goes at its last close"),
        ));
    }
    delete(t, caps, attr, uid)
}

/// Adds a link to `handle` for a new name (not a directory: EPERM), if `creds` may
/// link it (or, `moving`, it is a rename's new name); the object must still have a name (ENOENT otherwise, as Linux answers for
/// a file unlinked while open), and fewer than [`LINK_MAX`] (EMLINK).
pub fn add_link(
    t: &mut MetaTxn<'_>,
    handle: Handle,
    creds: &Creds,
    moving: bool,
) -> OpResult<Attr> {
    let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
    let allowed = if moving && !attr.is_dir() {
        // A rename's new name: the MOVE ticket of the old one allowed it.
        Ok(())
    } else {
        access::may_link(&attr, creds)
    };
    allowed.map_err(|e| {
        let why = if attr.is_dir() {
            "directories cannot have hard links".to_string()
        } else {
            format!("not permitted to link {handle:#x}")
        };
        OpError::denied(e, why)
    })?;
    if attr.nlink == 0 {
        return Err(OpError::posix(
            Errno::ENOENT,
            format!("object {handle:#x} has no name left to link to"),
        ));
    }
    if attr.nlink >= LINK_MAX && !moving {
        return Err(OpError::posix(
            Errno::EMLINK,
            format!("object {handle:#x} has {LINK_MAX} links already"),
        ));
    }
    attr.nlink += 1;
    attr.ctime = Timespec::now();
    t.put_object(&attr);
    Ok(attr)
}

/// Sets `handle`'s link count to `links` if it is `expect` (fsck's repair: a count
/// checked against the names it found); at zero the object is deleted. Changed
/// (ESTALE) when the count changed meanwhile.
pub fn set_links(
    t: &mut MetaTxn<'_>,
    (caps, claims): (&Caps, &Claims),
    handle: Handle,
    links: u32,
    expect: u32,
    uid: u32,
) -> OpResult<Dropped> {
    let mut attr = t.get_object(handle)?.ok_or_else(|| no_object(handle))?;
    if attr.nlink != expect {
        return Err(OpError::changed(format!(
            "object {handle:#x} has {} links, not {expect}",
            attr.nlink
        )));
    }
    if links == 0 {
        if !attr.is_dir() && !claims.unheld(handle) {
            attr.nlink = 0;
            attr.ctime = Timespec::now();
            t.put_object(&attr);
            t.set_kept(handle, true);
            return Ok((Remains::Kept, Vec::new()));
        }
        return deleted(t, caps, attr, uid);
    }
    if attr.is_dir() {
        return Err(OpError::invalid(
            Errno::EPERM,
            "a directory's link count is computed from its shards",
        ));
    }
    attr.nlink = links.min(LINK_MAX);
    attr.ctime = Timespec::now();
    t.put_object(&attr);
    t.set_kept(handle, false);
    Ok((Remains::Names(attr.nlink), Vec::new()))
}

/// The link a name removal in this commit takes from `handle`, as `fate` says: taken
/// here when the object lives here; [`Remains::Unknown`] when it lives elsewhere, for
/// [`finish_remote`] to take after the commit (the answer recorded for a retry says
/// so too). A local object that is already gone (a dangling name) is left alone.
pub fn drop_for_name(
    t: &mut MetaTxn<'_>,
    (caps, claims, here): (&Caps, &Claims, HandleRange),
    handle: Handle,
    fate: LinkDrop,
    uid: u32,
) -> OpResult<Dropped> {
    match fate {
        LinkDrop::Moved => Ok((Remains::Untouched, Vec::new())),
        _ if !here.contains(handle) => Ok((Remains::Unknown, Vec::new())),
        _ if t.get_object(handle)?.is_none() => Ok((Remains::Untouched, Vec::new())),
        LinkDrop::Keep => drop_link(t, (caps, claims), handle, true, uid),
        LinkDrop::Delete | LinkDrop::Release => drop_link(t, (caps, claims), handle, false, uid),
    }
}

/// Deletes `handle` if it is kept at zero links and no client holds it (its last
/// holder let go, or its lease ended): REMOVE tickets and the layout of a file's
/// datafiles. None when it has a name again, is held, or is gone.
pub fn delete_if_free(
    t: &mut MetaTxn<'_>,
    (caps, claims): (&Caps, &Claims),
    handle: Handle,
) -> OpResult<Option<(ObjDetail, Vec<Capability>)>> {
    let Some(attr) = t.get_object(handle)? else {
        t.set_kept(handle, false);
        return Ok(None);
    };
    if attr.nlink > 0 || attr.is_dir() || !claims.unheld(handle) {
        return Ok(None);
    }
    delete(t, caps, attr, 0).map(Some)
}

/// After the commit of a name removal whose object lives elsewhere
/// ([`drop_for_name`] answered Unknown): takes its link at its owner and puts the
/// outcome in the answer. `key`: the retry key of that `DropLink`, the same for every
/// retry of the removal (`crate::once::Once::peer_key`), so the owner answers a
/// repeated one from its record instead of taking a second link (a replayed removal
/// sends it again).
///
/// Only while this server still answers for its metadata group (its fence holds):
/// a commit that waited for its standbys past the lease may be missing from the copy
/// that took the group over, which still names the object; its link then stays
/// (one too many at worst, if the commit survives here), and the removal fails with
/// the fence's map error, to be retried where the group is served.
pub async fn finish_remote(
    ctx: &Ctx,
    caller: &Caller,
    handle: Handle,
    fate: LinkDrop,
    key: Option<RetryKey>,
    (left, tickets): (&mut Remains, &mut Vec<Capability>),
) -> OpResult<()> {
    if fate == LinkDrop::Moved || *left != Remains::Unknown || ctx.is_local(handle) {
        return Ok(());
    }
    ctx.fence.check(&ctx.lease)?;
    let (l, t) = drop_remote(ctx, caller, handle, fate == LinkDrop::Keep, key).await;
    *left = l;
    *tickets = t;
    Ok(())
}

/// Takes the link of a name this server removed from `handle`, which lives on
/// another server: a `DropLink` to its owner, as a step of `caller`'s request, after the commit that
/// removed the name. `key`: the retry key of that mutation. When the owner cannot be
/// asked, the object keeps a link too many ([`Remains::Unknown`]) until fsck repairs
/// the count: a name is never left without its link.
pub async fn drop_remote(
    ctx: &Ctx,
    caller: &Caller,
    handle: Handle,
    keep: bool,
    key: Option<RetryKey>,
) -> Dropped {
    let Some(owner) = ctx.config.owner_of(handle) else {
        return (Remains::Unknown, Vec::new());
    };
    let request = Request::DropLink(req::DropLink { handle, keep });
    match ctx.peers.call_as(owner, caller, request, key).await {
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
/// about to add: an `AddLink` to its owner as a step of `caller`'s request (its user
/// must be allowed to link it). A key of its own per attempt of the link (one
/// attempt's retries of the call share it): a link whose name never made it (a
/// crash between) is counted again when the link is retried, one too many (fsck
/// repairs it), whereas one key for every attempt would leave a link given back
/// after a failed attempt uncounted when a retry puts the name in place: one too few.
pub async fn add_remote(
    ctx: &Ctx,
    caller: &Caller,
    handle: Handle,
    moving: bool,
) -> OpResult<Attr> {
    let owner = ctx
        .config
        .owner_of(handle)
        .ok_or_else(|| OpError::no_server(format!("handle {handle:#x} belongs to no server")))?;
    let request = Request::AddLink(req::AddLink { handle, moving });
    match ctx.peers.call_as(owner, caller, request, None).await? {
        Response::Attr { attr, .. } => Ok(attr),
        other => Err(OpError::internal(
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
    caps: &Caps,
    attr: Attr,
    uid: u32,
) -> OpResult<(ObjDetail, Vec<Capability>)> {
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
            .map(|d| caps.mint(d.handle, rights::REMOVE, uid))
            .collect(),
        _ => Vec::new(),
    };
    Ok((attr.detail, tickets))
}

/// [`delete`], as the loss of the last link.
fn deleted(t: &mut MetaTxn<'_>, caps: &Caps, attr: Attr, uid: u32) -> OpResult<Dropped> {
    let (detail, tickets) = delete(t, caps, attr, uid)?;
    Ok((Remains::Deleted(detail), tickets))
}
