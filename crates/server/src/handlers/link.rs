//! `Link`: a hard link. The server holding the new name adds a link to the object
//! first (in the same commit when it lives here, else at its owner), then the name:
//! a crash between leaves a link too many (fsck repairs the count), never a name
//! whose link was not counted.

use std::sync::Arc;

use pvfs_proto::types::check_name;
use pvfs_proto::{rights, Attr, Capability, Errno, Handle, Response, RetryKey, Timespec};
use pvfs_storage::{MetaError, MetaTxn};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::lookup;
use crate::lifetime;
use crate::replay::{remember, replayed, replayed_now};
use crate::session::Caller;

/// Adds `name` -> `handle` to `dir` (the name must be free). The caller needs write
/// and search permission on `dir` and to be allowed to link the object (checked by
/// its owner); one without the key shows `proof`, a VISIT capability on `handle` from
/// the lookup of one of its names, so knowing a handle is not enough.
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    dir: Handle,
    name: String,
    handle: Handle,
    proof: Option<&Capability>,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    check_name(&name).map_err(|e| OpError::new(e, format!("invalid name {name:?}")))?;
    if !caller.trusted {
        ctx.caps
            .check(proof, handle, rights::VISIT, caller, false)?;
    }
    let dir_attr = lookup::change(ctx, caller, dir).await?;
    lookup::check_placement(ctx, &dir_attr, &name)?;
    if ctx.is_local(handle) {
        let creds = caller.creds.clone();
        return Ok(ctx
            .meta
            .write(move |t| {
                if let Some(done) = replayed(t, retry)? {
                    return Ok(done);
                }
                let attr = lifetime::add_link(t, handle, &creds)?;
                put_name(t, dir, &name, attr, retry)
            })
            .await?);
    }
    // A retry of a link that was done is answered from the record, before the owner
    // is asked to count it again.
    if let Some(done) = replayed_now(ctx, retry)? {
        return Ok(done);
    }
    let attr = lifetime::add_remote(ctx, &caller.creds, handle).await?;
    let added = ctx
        .meta
        .write(move |t| {
            if let Some(done) = replayed(t, retry)? {
                return Ok(done);
            }
            put_name(t, dir, &name, attr, retry)
        })
        .await;
    match added {
        Ok(r) => Ok(r),
        Err(e) => {
            // The name could not be added: give the link back.
            let creds = &caller.creds;
            lifetime::drop_remote(ctx, creds, handle, false, None).await;
            Err(e.into())
        }
    }
}

/// Puts the new name in place for object `attr` (whose link is counted) and records
/// the answer.
fn put_name(
    t: &mut MetaTxn<'_>,
    dir: Handle,
    name: &str,
    attr: Attr,
    retry: Option<RetryKey>,
) -> Result<Response, MetaError> {
    if t.is_sealed(dir)? {
        return Err(OpError::new(
            Errno::ENOENT,
            format!("directory {dir:#x} is being removed"),
        )
        .into());
    }
    if t.get_entry(dir, name)?.is_some() {
        return Err(OpError::new(Errno::EEXIST, format!("{name:?} exists")).into());
    }
    let changed = Timespec::now();
    t.put_entry(dir, name, attr.handle, attr.kind(), changed)?;
    let linked = Response::HardLinked { attr, changed };
    remember(t, retry, &linked);
    Ok(linked)
}
