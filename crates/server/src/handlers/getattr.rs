//! `GetAttr` and `ListAttr`: attributes of objects stored here.

use std::sync::Arc;

use pvfs_proto::message::AttrResult;
use pvfs_proto::{rights, Capability, Errno, Handle, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::{answered, grant, no_object};
use crate::session::Caller;

/// Most handles one `ListAttr` may ask for.
pub const MAX_LIST: usize = 65536;
/// Encoded bytes of attributes after which a `ListAttr` answer stops (well under the
/// 4 MiB body limit).
pub const ANSWER_BUDGET: usize = 3 << 20;

/// Attributes of one object, with the rights of `want` the caller may have. A caller
/// that does not hold the key must show `proof`: a VISIT capability from the lookup
/// of the object's name, or any capability it was granted on the object (a renewal;
/// expired ones count), so that knowing a handle is not enough to be granted access.
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    handle: Handle,
    want: u32,
    proof: Option<&Capability>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    let mut attr = answered(&ctx.meta.read()?, handle)?.ok_or_else(|| no_object(handle))?;
    if want == 0 {
        return Ok(Response::Attr {
            attr,
            caps: Vec::new(),
        });
    }
    if !caller.trusted {
        ctx.caps.check(proof, handle, 0, caller, true)?;
    }
    let granted = grant::decide(caller, None, &attr, want & !(rights::REMOVE | rights::MOVE))?;
    let caps = grant::issue(ctx, caller, &mut attr, granted).await?;
    Ok(Response::Attr { attr, caps })
}

/// Attributes of many objects from one snapshot, each with its own error, in request
/// order; when they would not fit one answer, a prefix of them.
pub fn handle_list(ctx: &Ctx, handles: &[Handle]) -> OpResult<Response> {
    ctx.require_meta()?;
    if handles.len() > MAX_LIST {
        return Err(crate::error::OpError::new(
            Errno::E2BIG,
            format!("ListAttr of {} handles (limit {MAX_LIST})", handles.len()),
        ));
    }
    let view = ctx.meta.read()?;
    let mut attrs = Vec::with_capacity(handles.len());
    let mut bytes = 0usize;
    for &h in handles {
        if bytes > ANSWER_BUDGET {
            // The rest would not fit one frame: answer a prefix; the client asks again
            // for the handles left over.
            break;
        }
        let result = if !ctx.is_local(h) {
            AttrResult {
                errno: Errno::ESTALE.0,
                attr: None,
            }
        } else {
            match answered(&view, h)? {
                Some(attr) => AttrResult {
                    errno: 0,
                    attr: Some(attr),
                },
                None => AttrResult {
                    errno: Errno::ENOENT.0,
                    attr: None,
                },
            }
        };
        bytes += pvfs_proto::encode(&result).len();
        attrs.push(result);
    }
    Ok(Response::Attrs { attrs })
}
