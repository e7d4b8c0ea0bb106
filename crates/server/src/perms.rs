//! Attributes for permission checks. A server checks a directory's permissions for
//! every name it holds in that directory's shard, and most shards live on another
//! server than the directory. A local object comes from the store; another server's
//! from a cache filled by asking the owner (`crate::attr_cache`), kept for at most
//! its time to live, and dropped at once when the owner says the object's
//! permissions changed (`Forget`, sent by `SetAttr` before it answers). If the owner
//! cannot be reached, or its store failed, what is cached is used whatever its age:
//! the owner cannot change it meanwhile (path walks do not depend on the root's
//! owner, `docs/reliability.md`).

use pvfs_proto::req;
use std::sync::Arc;

use pvfs_proto::{Attr, Errno, Handle, Request, Response};

use crate::ctx::Ctx;
use crate::error::{no_object, OpError, OpResult};
use crate::peer::Peers;

/// The attributes of object `handle`, for a permission check (see the module
/// documentation).
pub async fn attrs_of(ctx: &Arc<Ctx>, handle: Handle) -> OpResult<Attr> {
    if ctx.is_local(handle) {
        return ctx
            .meta
            .read()?
            .get_object(handle)?
            .ok_or_else(|| no_object(handle));
    }
    let owner = ctx
        .config
        .owner_of(handle)
        .ok_or_else(|| OpError::no_server(format!("handle {handle:#x} belongs to no server")))?;
    ctx.attr_cache
        .get(handle, ask_owner(&ctx.peers, owner, handle))
        .await
}

/// Whether object `handle` exists now, asked of its owner (not from the cache): a
/// decision that must not rest on a copy.
pub async fn exists_now(ctx: &Arc<Ctx>, handle: Handle) -> OpResult<bool> {
    if ctx.is_local(handle) {
        return Ok(ctx.meta.read()?.get_object(handle)?.is_some());
    }
    let owner = ctx
        .config
        .owner_of(handle)
        .ok_or_else(|| OpError::no_server(format!("handle {handle:#x} belongs to no server")))?;
    match ask_owner(&ctx.peers, owner, handle).await {
        Ok(_) => Ok(true),
        Err(e) if e.errno == Errno::ENOENT => Ok(false),
        Err(e) => Err(e),
    }
}

/// Asks server `owner` for the attributes of its object `handle`.
async fn ask_owner(peers: &Peers, owner: usize, handle: Handle) -> OpResult<Attr> {
    let asked = peers
        .call(
            owner,
            Request::GetAttr(req::GetAttr {
                handle,
                want: 0,
                proof: None,
            }),
        )
        .await?;
    match asked {
        Response::Attr { attr, .. } => Ok(attr),
        other => Err(OpError::internal(
            Errno::EPROTO,
            format!("unexpected answer {} to GetAttr", other.op_name()),
        )),
    }
}

/// Tells every other metadata server to forget what it cached of `handle` (its
/// permissions changed), and waits for them, each at most the request timeout; a
/// server that does not answer uses its copy for at most its time to live more
/// ([`crate::attr_cache::TTL`]).
pub async fn announce_change(ctx: &Arc<Ctx>, handle: Handle) {
    let others: Vec<usize> = ctx
        .config
        .meta_servers()
        .into_iter()
        .filter(|&i| i != ctx.me)
        .collect();
    let calls = others.into_iter().map(|i| async move {
        let r = ctx
            .peers
            .call(
                i,
                Request::Forget(req::Forget {
                    handles: vec![handle],
                }),
            )
            .await;
        if let Err(e) = r {
            tracing::debug!(server = i, "could not tell of a permission change: {e}");
        }
    });
    futures::future::join_all(calls).await;
}
