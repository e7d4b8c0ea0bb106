//! `DropLink` and `SetLinks`: an object loses a link after one of its names went
//! (or fsck sets the count it found); `crate::lifetime` decides whether it lives.

use std::sync::Arc;

use pvfs_proto::{Handle, Response, RetryKey};

use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::lifetime::{self, Dropped};
use crate::replay::{remember, replayed};
use crate::session::Caller;
use pvfs_storage::{MetaError, MetaTxn};

/// Takes one link from `handle`, whose name the sending server removed (deleted at
/// zero unless `keep`).
pub async fn handle(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    handle: Handle,
    keep: bool,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    ctx.refuse_root(handle)?;
    let uid = caller.creds.uid;
    change(ctx, retry, move |t, owner| {
        lifetime::drop_link(t, owner, handle, keep, uid)
    })
    .await
}

/// Sets `handle`'s link count to `links` if it is `expect` (fsck's repair).
pub async fn set(
    ctx: &Arc<Ctx>,
    caller: &Caller,
    handle: Handle,
    links: u32,
    expect: u32,
    retry: Option<RetryKey>,
) -> OpResult<Response> {
    ctx.require_meta()?;
    ctx.require_local(handle)?;
    if links == 0 {
        ctx.refuse_root(handle)?;
    }
    let uid = caller.creds.uid;
    change(ctx, retry, move |t, owner| {
        lifetime::set_links(t, owner, handle, links, expect, uid)
    })
    .await
}

/// Runs link change `f` in one commit; its outcome is the answer, recorded for a
/// retry.
async fn change(
    ctx: &Arc<Ctx>,
    retry: Option<RetryKey>,
    f: impl FnOnce(&mut MetaTxn<'_>, &Ctx) -> Result<Dropped, MetaError> + Send + 'static,
) -> OpResult<Response> {
    let owner = ctx.clone();
    let response = ctx
        .meta
        .write(move |t| {
            if let Some(done) = replayed(t, retry)? {
                return Ok(done);
            }
            let (left, tickets) = f(t, &owner)?;
            let answer = Response::Dropped { left, tickets };
            remember(t, retry, &answer);
            Ok(answer)
        })
        .await?;
    Ok(response)
}
