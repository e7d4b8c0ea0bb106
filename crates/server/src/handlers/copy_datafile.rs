//! `CopyDatafile`: makes this server's copy of a datafile what another copy holds
//! (fsck's repair of a copy that differs, `docs/replication.md`, "Checked copies").

use pvfs_proto::{req, Changed, Errno};

use crate::error::{OpError, OpResult};
use crate::handlers::datafiles::check_handles;
use crate::op::{done, Access, Answer, Cx, Handler};

/// Copies the whole datafile from `from` a step at a time under its lock here, as
/// catch-up copies a range (`crate::copy`): writes arriving meanwhile land after
/// the bytes copied. Copying again copies the same bytes: a retry is harmless.
impl Handler for req::CopyDatafile {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        check_handles(ctx, &[self.handle])?;
        let me = ctx.me as u32;
        let map = ctx.lease.map()?;
        let version = map.version;
        if self.from == me
            || !map.holds(self.handle, &self.copies, me)
            || !map.holds(self.handle, &self.copies, self.from)
        {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!(
                    "a copy of datafile {:#x} from server {} to server {me}, of copies {:?}",
                    self.handle, self.from, self.copies
                ),
            ));
        }
        crate::copy::copy_ranges(
            ctx,
            (self.from as usize, crate::copy::Size::Source),
            self.handle,
            &self.copies,
            version,
            &[0, u64::MAX],
        )
        .await?;
        done()
    }
}
