//! `Sync`: makes everything this server acknowledged stable on disk (a client's
//! fsync or syncfs; `docs/reliability.md`, "What a crash may take").

use std::sync::Arc;

use pvfs_proto::{Response, Roles};

use crate::ctx::Ctx;
use crate::error::OpResult;

/// Syncs the metadata store's redo log (a no-op when every commit is synced already;
/// a data-only server's store holds little, but what it holds is synced too) and,
/// with `data` on a data server, the file system holding the datafiles. Any
/// authenticated client may ask: it changes nothing, and costs no more than the
/// fsyncs any client may send.
pub async fn handle(ctx: &Arc<Ctx>, data: bool) -> OpResult<Response> {
    let meta = ctx.meta.clone();
    let store = (data && ctx.roles().contains(Roles::DATA)).then(|| ctx.data.clone());
    ctx.blocking(move || {
        meta.sync()?;
        if let Some(d) = store {
            d.sync_all()?;
        }
        Ok(())
    })
    .await?;
    Ok(Response::Done {})
}
