//! `SumDatafiles`: the size and CRC32C of datafiles' local bytes, so fsck can tell
//! whether the copies of a datafile agree (`docs/replication.md`, "Checked copies").

use std::sync::Arc;

use pvfs_proto::{req, Changed, Errno, Response};

use pvfs_storage::StorageError;

use crate::error::{OpError, OpResult};
use crate::handlers::datafiles::check_handles;
use crate::op::{Access, Answer, Cx, Handler};

/// Most datafiles one `SumDatafiles` may name: each is read whole.
pub const MAX_SUMS: usize = 1024;

/// Bytes read at a time.
const CHUNK: usize = 1 << 20;

/// A copy with a block that does not match its checksum is answered in `damaged`.
/// Each datafile is read whole holding its lock (the one every copy takes while it
/// applies a change passed down its chain), so a change is in the sum entirely or
/// not at all.
impl Handler for req::SumDatafiles {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, handles) = (cx.ctx, self.handles);
        check_handles(ctx, &handles)?;
        if handles.len() > MAX_SUMS {
            return Err(OpError::invalid(
                Errno::E2BIG,
                format!("{} datafiles to sum (limit {MAX_SUMS})", handles.len()),
            ));
        }
        let limit = ctx.config.timeouts.request;
        let mut sums = Vec::with_capacity(handles.len());
        let mut damaged = Vec::new();
        for h in handles {
            let _held = ctx.chain_locks.lock(h, 0, u64::MAX, limit).await?;
            let data = Arc::clone(&ctx.data);
            let sum = ctx
                .blocking(move || {
                    let mut buf = vec![0u8; CHUNK];
                    let (mut at, mut crc) = (0u64, 0u32);
                    loop {
                        let n = match data.read_at(h, at, &mut buf) {
                            Ok(n) => n,
                            Err(StorageError::BadSum { .. }) => return Ok(None),
                            Err(e) => return Err(e.into()),
                        };
                        if n == 0 {
                            return Ok(Some((at, crc)));
                        }
                        crc = crc32c::crc32c_append(crc, &buf[..n]);
                        at += n as u64;
                    }
                })
                .await?;
            match sum {
                Some(sum) => sums.push(sum),
                None => {
                    sums.push((0, 0));
                    damaged.push(h);
                }
            }
        }
        Ok(Response::Sums { sums, damaged }.into())
    }
}
