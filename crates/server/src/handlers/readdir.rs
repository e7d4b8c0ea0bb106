//! `ReadDir`: one page of the entries of a directory shard held here.

use pvfs_proto::access::{self, MAY_READ};
use pvfs_proto::{req, Changed, Response};

use crate::error::{OpError, OpResult};
use crate::op::{Access, Answer, Cx, Handler};
use crate::perms::attrs_of;

/// Most entries one page may hold (bounds the answer to well under a frame).
pub const MAX_PAGE: u32 = 4096;

/// Entries of `dir` held here whose names sort after `after` (the caller needs read
/// permission on `dir`).
impl Handler for req::ReadDir {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, dir) = (cx.ctx, self.dir);
        ctx.require_meta()?;
        let dir_attr = attrs_of(ctx, dir).await?;
        access::check(&dir_attr, &cx.caller.creds, MAY_READ)
            .map_err(|e| OpError::denied(e, format!("no read permission on directory {dir:#x}")))?;
        let max = self.max.clamp(1, MAX_PAGE) as usize;
        let (entries, more) = ctx
            .meta
            .read()?
            .list_entries(dir, self.after.as_deref(), max)?;
        Ok(Response::DirPage { entries, more }.into())
    }
}
