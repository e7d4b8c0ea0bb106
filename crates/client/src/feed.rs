//! The servers' change feeds, for caches built on this client (the mount's).

use pvfs_proto::req;
use std::time::Duration;

use pvfs_proto::{Changed, Request, Response};

use crate::error::Result;
use crate::pool::unexpected;
use crate::Client;

/// One answer of a server's change feed (`Request::Changes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedAnswer {
    /// The feed's epoch: a new one each time the server starts.
    pub epoch: u64,
    /// The position to ask from next.
    pub next: u64,
    /// Changes were lost since the position asked: forget everything cached from
    /// this server.
    pub lost: bool,
    /// What other clients changed, oldest first.
    pub changes: Vec<Changed>,
}

impl Client {
    /// The changes other clients made on server `server` after position `since` of
    /// feed `epoch` (0: where the feed stands now), waiting up to `wait` for one.
    pub async fn changes(
        &self,
        server: usize,
        epoch: u64,
        since: u64,
        wait: Duration,
    ) -> Result<FeedAnswer> {
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        let request = Request::Changes(req::Changes {
            epoch,
            since,
            wait_ms,
        });
        match self.rpc(server, request).await? {
            Response::Changes {
                epoch,
                next,
                lost,
                changes,
            } => Ok(FeedAnswer {
                epoch,
                next,
                lost,
                changes,
            }),
            other => Err(unexpected("Changes", &other)),
        }
    }
}
