//! `Sync`: makes everything this server acknowledged stable on disk (a client's
//! fsync or syncfs; `docs/reliability.md`, "What a crash may take").

use pvfs_proto::{req, Changed, Roles};

use crate::error::OpResult;
use crate::op::{done, Access, Answer, Cx, Handler};

/// Syncs the metadata store's redo log (a no-op when every commit is synced already;
/// a data-only server's store holds little, but what it holds is synced too) and,
/// with `data` on a data server, the file system holding the datafiles. Any
/// authenticated client may ask: it changes nothing, and costs no more than the
/// fsyncs any client may send.
impl Handler for req::Sync {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        let meta = ctx.meta.clone();
        let store = (self.data && ctx.roles().contains(Roles::DATA)).then(|| ctx.data.clone());
        ctx.blocking(move || {
            meta.sync()?;
            if let Some(d) = store {
                d.sync_all()?;
            }
            Ok(())
        })
        .await?;
        done()
    }
}
