//! What a caller may be granted on an object: the rights of a capability request
//! decided with the shared POSIX rules (`pvfs_proto::access`).

use std::sync::Arc;

use pvfs_proto::access::{self, MAY_READ, MAY_WRITE};
use pvfs_proto::{rights, Attr, Capability, Errno};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::session::Caller;

/// The rights of `want` that `caller` gets on object `obj`, whose name is in
/// directory `dir` (REMOVE and MOVE are decided only with it). READ and WRITE are
/// granted as far as the mode allows (an answer without them is how a caller learns
/// it may not open the file that way); REMOVE and MOVE not allowed are an error
/// (EACCES, or EPERM from a sticky directory), since the caller is about to do it.
pub fn decide(caller: &Caller, dir: Option<&Attr>, obj: &Attr, want: u32) -> OpResult<u32> {
    let c = &caller.creds;
    let mut granted = want & rights::VISIT;
    if want & rights::READ != 0 && access::check(obj, c, MAY_READ).is_ok() {
        granted |= rights::READ;
    }
    if want & rights::WRITE != 0 && !obj.is_dir() && access::check(obj, c, MAY_WRITE).is_ok() {
        granted |= rights::WRITE;
    }
    if want & (rights::REMOVE | rights::MOVE) != 0 {
        let dir = dir.ok_or_else(|| {
            OpError::invalid(
                Errno::EINVAL,
                "remove and move rights are granted by the lookup of a name",
            )
        })?;
        access::may_delete(dir, obj.uid, c).map_err(|e| {
            OpError::denied(
                e,
                format!(
                    "no permission to remove a name from directory {:#x}",
                    dir.handle
                ),
            )
        })?;
        if want & rights::MOVE != 0 && want & rights::REPARENT != 0 && obj.is_dir() {
            access::check(obj, c, MAY_WRITE).map_err(|e| {
                OpError::denied(
                    e,
                    format!(
                        "no write permission on directory {:#x} to move it",
                        obj.handle
                    ),
                )
            })?;
        }
        granted |= want & (rights::REMOVE | rights::MOVE);
    }
    Ok(granted)
}

/// The capabilities for `granted` rights on local object `obj`. A write granted on a
/// set-user-ID or set-group-ID file to anyone but root drops those bits first: the
/// data servers, which see the writes, know no modes (so it happens at the grant, not
/// at the first write as in a local file system).
pub async fn issue(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    obj: &mut Attr,
    granted: u32,
) -> OpResult<Vec<Capability>> {
    if granted & rights::WRITE != 0 && access::write_drops_privileges(obj.mode, &caller.creds) {
        let handle = obj.handle;
        let creds = caller.creds.clone();
        let updated = ctx
            .commit(move |t| {
                let mut a = t
                    .get_object(handle)?
                    .ok_or_else(|| crate::handlers::no_object(handle))?;
                a.mode = access::mode_after_write(a.mode, &creds);
                a.ctime = pvfs_proto::Timespec::now();
                t.put_object(&a);
                Ok(a)
            })
            .await?;
        *obj = updated;
    }
    Ok(ctx.caps.grant(obj, granted, caller.creds.uid))
}
