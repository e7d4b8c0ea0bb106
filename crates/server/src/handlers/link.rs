//! `Link`: a hard link. The server holding the new name adds a link to the object
//! first (in the same commit when it lives here, else at its owner), then the name:
//! a crash between leaves a link too many (fsck repairs the count), never a name
//! whose link was not counted.

use pvfs_proto::types::check_name;
use pvfs_proto::{req, rights, Attr, Changed, Errno, Handle, Response, Timespec};
use pvfs_storage::MetaTxn;

use crate::error::{OpError, OpResult};
use crate::feed::{entry, object};
use crate::handlers::lookup;
use crate::handlers::sealed;
use crate::lifetime;
use crate::op::{Access, Answer, Cx, Handler};

/// Adds `name` -> `handle` to `dir` (the name must be free). The caller needs write
/// and search permission on `dir` and to be allowed to link the object (checked by
/// its owner); one without the key shows `proof`, a VISIT capability on `handle` from
/// the lookup of one of its names, so knowing a handle is not enough.
impl Handler for req::Link {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        vec![entry(self.dir, &self.name), object(self.handle)]
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, caller) = (cx.ctx, cx.caller);
        let req::Link {
            dir,
            name,
            handle,
            proof,
        } = self;
        ctx.require_meta()?;
        check_name(&name).map_err(|e| OpError::invalid(e, format!("invalid name {name:?}")))?;
        if !caller.trusted {
            ctx.caps
                .check(proof.as_ref(), handle, rights::VISIT, caller, false)?;
        }
        let dir_attr = lookup::change(ctx, caller, dir).await?;
        lookup::check_placement(ctx, &dir_attr, &name)?;
        let admission = sealed::gate(ctx, dir).await?;
        if ctx.is_local(handle) {
            let creds = caller.creds.clone();
            let linked = cx
                .once
                .commit(&ctx.meta, move |t| {
                    admission.check(t)?;
                    let attr = lifetime::add_link(t, handle, &creds, false)?;
                    put_name(t, dir, &name, attr)
                })
                .await?;
            return Ok(linked.into());
        }
        // The new name is looked at before the link is counted at the object's
        // owner: a name taken now is EEXIST now. Counted first, the name could be
        // freed meanwhile (a rename moving it away) after the object lost its last
        // name (the same rename replacing it), and the link would name an object
        // that had no name at any moment the new name was free: on one machine the
        // link finds the name taken, or the object gone.
        if ctx.meta.read()?.get_entry(dir, &name)?.is_some() {
            return Err(OpError::posix(Errno::EEXIST, format!("{name:?} exists")));
        }
        // (A retry of a link that was done was answered from its record by
        // dispatch, before the owner could be asked to count it again.)
        let attr = lifetime::add_remote(ctx, caller, handle, false).await?;
        ctx.faults
            .hold_linked(ctx.config.timeouts.request / 2)
            .await;
        let added = cx
            .once
            .commit(&ctx.meta, move |t| {
                admission.check(t)?;
                put_name(t, dir, &name, attr)
            })
            .await;
        match added {
            Ok(r) => Ok(r.into()),
            Err(e) => {
                // The name could not be added: give the link back.
                lifetime::drop_remote(ctx, caller, handle, false, None).await;
                Err(e)
            }
        }
    }
}

/// Puts the new name in place for object `attr` (whose link is counted).
fn put_name(t: &mut MetaTxn<'_>, dir: Handle, name: &str, attr: Attr) -> OpResult<Response> {
    if t.get_entry(dir, name)?.is_some() {
        return Err(OpError::posix(Errno::EEXIST, format!("{name:?} exists")));
    }
    let changed = Timespec::now();
    t.put_entry(dir, name, attr.handle, attr.kind(), changed)?;
    Ok(Response::HardLinked { attr, changed })
}
