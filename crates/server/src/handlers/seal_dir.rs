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
/// A shard another rmdir (or rename over the directory) sealed and may still be
/// using is refused (EAGAIN, busy): each seal has one owner, and only it unseals,
/// so an rmdir that loses a race to another never unseals the directory the winner
/// removed (a name could then be added to it). A seal older than any rmdir may run
/// (`crate::seals`) was abandoned, and a new seal takes it over.
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
        let taken = move || {
            OpError::busy(
                Errno::EAGAIN,
                format!("directory {dir:#x} is being removed by another request (try again)"),
            )
        };
        // Whether a seal found here now is another's that may still be in use.
        let others = seal && !ctx.seals.abandoned(dir);
        if others && ctx.meta.read()?.is_sealed(dir)? {
            return Err(taken());
        }
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
                if others && t.is_sealed(dir)? {
                    return Err(taken());
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
