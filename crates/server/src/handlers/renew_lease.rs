//! `RenewLease`: keeps the lease of the caller's client on this server (its locks
//! and holds stay while it renews), or with `release` drops all its locks, waits
//! and holds here (a client that ends cleanly). A client can renew or release only its own: the lease
//! is keyed by the connection's proven identity.

use pvfs_proto::{req, Changed, Response};

use crate::error::OpResult;
use crate::op::{done, Access, Answer, Cx, Handler};

impl Handler for req::RenewLease {
    fn access(&self) -> Access<'_> {
        Access::Client
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        ctx.require_meta()?;
        let who = cx.caller.lock_who();
        if self.release {
            ctx.locks.release_client(who, self.client);
            let free = ctx.holds.drop_client((who, self.client));
            crate::orphans::free(ctx, free).await;
            return done();
        }
        Ok(Response::Lease {
            lease: ctx.locks.renew(who, self.client).unwrap_or(0),
            grace: ctx.locks.grace_end().is_some(),
        }
        .into())
    }
}
