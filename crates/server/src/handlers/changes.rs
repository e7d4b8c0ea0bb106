//! `Changes`: the long poll of a client's cache on this server's change feed.

use std::time::Duration;

use pvfs_proto::feed::FEED_HEARTBEAT;
use pvfs_proto::{req, Changed};

use crate::error::OpResult;
use crate::op::{Access, Answer, Cx, Handler};

/// Answers the changes after `since` that clients other than the caller caused, or
/// waits for one at most `wait_ms` (and at most a third of the request timeout, so
/// the answer is in long before the client gives up on it, and at most
/// `FEED_HEARTBEAT`, so a follower is heard from within its lease). Key-holding nodes only:
/// it names entries of every directory.
impl Handler for req::Changes {
    fn access(&self) -> Access<'_> {
        Access::Peer
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        let wait = Duration::from_millis(u64::from(self.wait_ms))
            .min(ctx.config.timeouts.request / 3)
            .min(FEED_HEARTBEAT);
        let answer = ctx
            .feed
            .poll(
                self.epoch,
                self.since,
                cx.session.origin,
                wait,
                &cx.session.closed,
            )
            .await;
        Ok(answer.into())
    }
}
