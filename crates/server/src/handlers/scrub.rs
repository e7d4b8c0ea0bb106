//! `Scrub`: checks every block of datafiles against its checksum, mending a damaged
//! one from another copy (`crate::mend`; `docs/storage-format.md`, "Checksums").
//! `pvfs scrub` sends the datafiles of every layout to the servers holding them.

use std::sync::Arc;

use pvfs_proto::map::Copies;
use pvfs_proto::message::scrub;
use pvfs_proto::{req, Changed, Errno, Handle, Response};
use pvfs_storage::sums::SUM_BLOCK;

use crate::error::{OpError, OpResult};
use crate::handlers::datafiles::check_handles;
use crate::mend::{mend, Mended};
use crate::op::{Access, Answer, Cx, Handler};

/// Most datafiles one `Scrub` may name.
pub const MAX_SCRUB: usize = 1024;

/// Bytes read at a time (whole blocks).
const CHUNK: usize = 1 << 20;

/// What scrubbing one datafile found.
#[derive(Default)]
struct Found {
    bytes: u64,
    damaged: u64,
    mended: u64,
    resummed: u64,
    unmended: Vec<(Handle, u64)>,
}

impl Handler for req::Scrub {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        ctx.require_data()?;
        check_handles(ctx, &self.handles)?;
        if self.handles.len() > MAX_SCRUB || self.copies.len() != self.handles.len() {
            return Err(OpError::invalid(
                Errno::E2BIG,
                format!(
                    "{} datafiles with {} lists of copies to scrub (limit {MAX_SCRUB})",
                    self.handles.len(),
                    self.copies.len()
                ),
            ));
        }
        if self.flags & scrub::FIRST != 0 {
            *ctx.scrub_pass.get() = Some(self.pass);
        }
        let mut found = Found::default();
        let until = tokio::time::Instant::now() + ctx.config.timeouts.request / 3;
        let (mut done, mut from) = (0u32, self.from);
        for (handle, servers) in self.handles.iter().zip(self.copies) {
            let copies = Copies {
                servers,
                map: ctx.lease.map().map_or(0, |m| m.version),
                hop: 0,
            };
            match scrub_one(cx.ctx, *handle, &copies, from, until, &mut found).await? {
                Some(at) => {
                    from = at;
                    break;
                }
                None => {
                    done += 1;
                    from = 0;
                }
            }
        }
        let whole = done as usize == self.handles.len();
        if whole && self.flags & scrub::LAST != 0 && *ctx.scrub_pass.get() == Some(self.pass) {
            let data = Arc::clone(&ctx.data);
            ctx.blocking(move || Ok(data.trust_sums()?)).await?;
        }
        Ok(Response::Scrubbed {
            done,
            at: from,
            bytes: found.bytes,
            damaged: found.damaged,
            mended: found.mended,
            resummed: found.resummed,
            unmended: found.unmended,
            unsure: ctx.data.sums_unsure(),
        }
        .into())
    }
}

/// Reads datafile `handle` from byte `from` to its end, a chunk at a time paced by
/// `[replication] scrub_bandwidth`, mending each damaged block met; stops at
/// `until`, answering where (None: it reached the end).
async fn scrub_one(
    ctx: &Arc<crate::ctx::Ctx>,
    handle: Handle,
    copies: &Copies,
    from: u64,
    until: tokio::time::Instant,
    found: &mut Found,
) -> OpResult<Option<u64>> {
    let mut at = from - from % SUM_BLOCK;
    let mut last_bad = None;
    loop {
        if tokio::time::Instant::now() >= until {
            return Ok(Some(at));
        }
        let data = Arc::clone(&ctx.data);
        let began = tokio::time::Instant::now();
        let read = ctx
            .blocking(move || {
                let mut buf = vec![0u8; CHUNK];
                Ok(data.read_at(handle, at, &mut buf).map(|n| n as u64))
            })
            .await?;
        match read {
            Ok(n) => {
                found.bytes += n;
                ctx.scrub_pace.spent(n, began).await;
                if n < CHUNK as u64 {
                    return Ok(None);
                }
                at += n;
            }
            Err(e) => {
                let error = OpError::from(e);
                let Some((_, offset, unsure)) = error.bad_block() else {
                    return Err(error);
                };
                // The blocks before it in the chunk hold: checked.
                let skip = |found: &mut Found| {
                    found.bytes += offset.saturating_sub(at);
                    found.unmended.push((handle, offset));
                    offset + SUM_BLOCK
                };
                if last_bad == Some(offset) {
                    // Mended, and still not matching: left as it is.
                    at = skip(found);
                    continue;
                }
                found.damaged += 1;
                last_bad = Some(offset);
                match mend(ctx, handle, copies, offset, unsure, error).await {
                    Ok(Mended::FromCopy(_)) => found.mended += 1,
                    Ok(Mended::Resummed) => found.resummed += 1,
                    Err(_) => at = skip(found),
                }
            }
        }
    }
}
