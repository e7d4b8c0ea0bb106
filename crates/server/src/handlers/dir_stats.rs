//! `DirStats`: what this server's shards add to directories' times and link counts.

use pvfs_proto::{req, Changed, Errno, Response};

use crate::error::{OpError, OpResult};
use crate::handlers::list_attr::MAX_LIST;
use crate::op::{Access, Answer, Cx, Handler};

/// The shard records of `dirs` here, in request order (zeros for a directory with
/// no entry ever added here). They say when entries changed and how many are
/// directories, nothing about names, so any authenticated client may ask, as it may
/// ask for a directory's attributes.
impl Handler for req::DirStats {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        ctx.require_meta()?;
        let dirs = self.dirs;
        if dirs.len() > MAX_LIST {
            return Err(OpError::invalid(
                Errno::E2BIG,
                format!("DirStats of {} directories (limit {MAX_LIST})", dirs.len()),
            ));
        }
        let view = ctx.meta.read()?;
        let stats = dirs
            .iter()
            .map(|&d| view.shard_stat(d))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Response::ShardStats { stats }.into())
    }
}
