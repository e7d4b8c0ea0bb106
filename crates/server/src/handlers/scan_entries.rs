//! `ScanEntries`: a page of the directory entries stored on this server (fsck).

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::handlers::scan::page;
use crate::op::{Access, Answer, Cx, Handler};

impl Handler for req::ScanEntries {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        ctx.require_meta()?;
        let max = page(self.max);
        let after = self.after.as_ref().map(|(d, n)| (*d, n.as_str()));
        let entries = ctx.meta.read()?.entries_after(after, max)?;
        let more = entries.len() == max;
        Ok(Response::Entries { entries, more }.into())
    }
}
