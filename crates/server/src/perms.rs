//! Attributes for permission checks. A server checks a directory's permissions for
//! every name it holds in that directory's shard, and most shards live on another
//! server than the directory. A local object comes from the store; another server's
//! from a cache filled by asking the owner, kept for at most [`TTL`], and dropped at
//! once when the owner says the object's permissions changed (`Forget`, sent by
//! `SetAttr` before it answers). If the owner cannot be reached, or its store failed,
//! what is cached is used whatever its age: the owner cannot change it meanwhile
//! (path walks do not depend on the root's owner, `docs/reliability.md`).

use pvfs_proto::req;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use pvfs_proto::{Attr, Errno, Handle, Request, Response};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::handlers::no_object;

/// How long another server's object's attributes are used without asking again.
pub const TTL: Duration = Duration::from_secs(5);
/// Most objects cached (beyond it, the oldest half goes).
const MAX: usize = 65536;

/// Cached attributes of other servers' objects.
#[derive(Default)]
pub struct AttrCache {
    map: Mutex<HashMap<Handle, (Attr, Instant)>>,
}

impl AttrCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Handle, (Attr, Instant)>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, h: Handle) -> Option<(Attr, Instant)> {
        self.lock().get(&h).cloned()
    }

    fn put(&self, attr: Attr) {
        let mut m = self.lock();
        if m.len() >= MAX {
            let mut ages: Vec<Instant> = m.values().map(|(_, t)| *t).collect();
            ages.sort();
            let cut = ages[ages.len() / 2];
            m.retain(|_, (_, t)| *t > cut);
        }
        m.insert(attr.handle, (attr, Instant::now()));
    }

    /// Drops what is cached of `handles`.
    pub fn forget(&self, handles: &[Handle]) {
        let mut m = self.lock();
        for h in handles {
            m.remove(h);
        }
    }
}

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
    let cached = ctx.attr_cache.get(handle);
    if let Some((attr, at)) = &cached {
        if at.elapsed() < TTL {
            return Ok(attr.clone());
        }
    }
    let owner = ctx
        .config
        .owner_of(handle)
        .ok_or_else(|| OpError::no_server(format!("handle {handle:#x} belongs to no server")))?;
    let asked = ctx
        .peers
        .call(
            owner,
            Request::GetAttr(req::GetAttr {
                handle,
                want: 0,
                proof: None,
            }),
        )
        .await;
    match asked {
        Ok(Response::Attr { attr, .. }) => {
            ctx.attr_cache.put(attr.clone());
            Ok(attr)
        }
        Ok(other) => Err(OpError::internal(
            Errno::EPROTO,
            format!("unexpected answer {} to GetAttr", other.op_name()),
        )),
        // The owner is down, hung, or its store failed (it answers ENOSPC or EIO until
        // it heals): what is cached cannot have changed meanwhile.
        Err(e)
            if matches!(
                e.errno,
                Errno::EHOSTDOWN | Errno::ETIMEDOUT | Errno::EIO | Errno::ENOSPC
            ) =>
        {
            match cached {
                Some((attr, _)) => {
                    tracing::debug!(handle, "owner unreachable ({e}); using cached attributes");
                    Ok(attr)
                }
                None => Err(e),
            }
        }
        Err(e) => {
            if e.errno == Errno::ENOENT {
                ctx.attr_cache.forget(&[handle]);
            }
            Err(e)
        }
    }
}

/// Tells every other metadata server to forget what it cached of `handle` (its
/// permissions changed), and waits for them, each at most the request timeout; a
/// server that does not answer uses its copy for at most [`TTL`] more.
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
