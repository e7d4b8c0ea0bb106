//! `Changes`: the long poll of a client's cache on this server's change feed.

use std::time::Duration;

use pvfs_proto::Response;

use crate::ctx::Ctx;
use crate::session::Session;

/// Answers the changes after `since` that clients other than the caller caused, or
/// waits for one at most `wait_ms` (and at most a third of the request timeout, so
/// the answer is in long before the client gives up on it).
pub async fn handle(
    ctx: &Ctx,
    session: &Session,
    epoch: u64,
    since: u64,
    wait_ms: u32,
) -> Response {
    let wait = Duration::from_millis(u64::from(wait_ms)).min(ctx.config.timeouts.request / 3);
    ctx.feed.poll(epoch, since, session.origin, wait).await
}
