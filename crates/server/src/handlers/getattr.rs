//! `GetAttr` and `ListAttr`: attributes of objects stored here.

use pvfs_proto::message::AttrResult;
use pvfs_proto::{Errno, Handle, Response};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::handlers::no_object;

/// Most handles one `ListAttr` may ask for.
pub const MAX_LIST: usize = 65536;

/// Attributes of one object.
pub fn handle(ctx: &Ctx, handle: Handle) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    let attr = ctx
        .meta
        .read()?
        .get_object(handle)?
        .ok_or_else(|| no_object(handle))?;
    Ok(Response::Attr { attr })
}

/// Attributes of many objects from one snapshot, each with its own error.
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
    for &h in handles {
        let result = if !ctx.is_local(h) {
            AttrResult {
                errno: Errno::ESTALE.0,
                attr: None,
            }
        } else {
            match view.get_object(h)? {
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
        attrs.push(result);
    }
    Ok(Response::Attrs { attrs })
}
