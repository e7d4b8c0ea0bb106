//! `AddLink`: one more link on a local object, for a hard link another server is
//! about to put in place (`crate::lifetime`).

use std::sync::Arc;

use pvfs_proto::{Handle, Response, RetryKey};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::lifetime;
use crate::replay::{remember, replayed};
use crate::session::Caller;

/// Adds a link to `handle` if the user the sending server acts for may link it, and
/// answers its new attributes.
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    handle: Handle,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    let creds = caller.creds.clone();
    let response = ctx
        .meta
        .write(move |t| {
            if let Some(done) = replayed(t, retry)? {
                return Ok(done);
            }
            let attr = lifetime::add_link(t, handle, &creds)?;
            let added = Response::Attr {
                attr,
                caps: Vec::new(),
            };
            remember(t, retry, &added);
            Ok(added)
        })
        .await?;
    Ok(response)
}
