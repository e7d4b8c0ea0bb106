//! `SealDir`: the first step of rmdir and of renaming over a directory. A sealed
//! shard is empty and refuses new entries, so once every shard is sealed the
//! directory stays empty until it is removed.

use pvfs_proto::{req, rights, Changed, Errno, Response};

use crate::error::{OpError, OpResult};
use crate::op::{Access, Answer, Cx, Handler, Tickets};

/// Seals this server's shard of `dir` if it is empty (else ENOTEMPTY), or unseals it.
/// A caller without the key shows a REMOVE ticket for `dir` (from the lookup of its
/// name: it may remove it). A retried seal is answered from its record: one that
/// arrives after the rmdir gave up and unsealed must not seal the shard again.
impl Handler for req::SealDir {
    fn access(&self) -> Access<'_> {
        Access::Ticket {
            tickets: Tickets::One(self.ticket.as_ref(), self.dir),
            rights: rights::REMOVE,
        }
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let (ctx, dir, seal) = (cx.ctx, self.dir, self.seal);
        ctx.require_meta()?;
        if seal {
            ctx.seals.sealing(dir);
        }
        let answer = cx
            .once
            .commit(&ctx.meta, move |t| {
                if seal && !t.dir_is_empty(dir)? {
                    return Err(OpError::posix(
                        Errno::ENOTEMPTY,
                        format!("directory {dir:#x} is not empty"),
                    ));
                }
                t.set_sealed(dir, seal);
                Ok(Response::Done {})
            })
            .await?;
        if !seal {
            ctx.seals.unsealed(dir);
        }
        Ok(answer.into())
    }
}
