//! Metadata groups that fail over (`docs/replication.md`, "Failover"): with
//! standbys, a group's requests (`pvfs_proto::Scope::Group`) go to the server the
//! cluster map names its primary, on a connection naming the group's server; while
//! the group moves (its primary silent, fenced or down, a standby taking over) the
//! request is sent again under a newer map, with the same retry key, so a change is
//! done once and a retry of one that was done gets its recorded answer.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pvfs_proto::map::ClusterMap;
use pvfs_proto::{encode, Creds, Effect, Errno, ErrorKind, Request, RequestBody, Response, Scope};
use tokio::time::Instant;

use crate::copies::{worth_another_copy, FailoverWait, RETRY_PAUSE, WATCH_EVERY};
use crate::error::{Error, Result};
use crate::pool::Pool;

impl Pool {
    /// [`Pool::rpc`] for a request to metadata group `group` of a file system whose
    /// groups have standbys: to its primary under the newest map, again under a
    /// newer map while the group fails over, within the failover wait ([`FailoverWait`]).
    pub(crate) async fn group_rpc(
        &self,
        group: usize,
        creds: &Creds,
        request: Request,
    ) -> Result<Response> {
        let op = request.op_name();
        let retry = (request.effect() == Effect::Once).then(|| self.next_retry_key());
        let body = encode(&RequestBody {
            creds: creds.clone(),
            request,
            retry,
            origin: 0,
        });
        let mut wait = FailoverWait::new(self);
        let mut stale = false;
        loop {
            let map = self.cluster_map(creds, stale.then_some(0)).await;
            if let Ok(map) = &map {
                wait.saw(map.version);
            }
            let result = match &map {
                Err(e) => Err(e.clone()),
                Ok(map) => match map.primary(group as u32) {
                    Some(_) => self.watched(group, map, creds, op, &body).await,
                    None => Err(Error::of_kind(
                        ErrorKind::Map,
                        Errno::EHOSTDOWN,
                        format!(
                            "no server serves the metadata of {} under cluster map version {}",
                            self.name(group),
                            map.version
                        ),
                    )),
                },
            };
            match result {
                Err(e) if worth_another_copy(&e) && wait.room() => {
                    tracing::debug!(
                        group = self.name(group),
                        op,
                        "asking the map again after: {e}"
                    );
                    tokio::time::sleep(RETRY_PAUSE).await;
                    stale = true;
                }
                other => return other,
            }
        }
    }

    /// Sends `body` to the primary of `group` under `map` and waits for its answer,
    /// for at most the request timeout; after half a lease without one, asks the map
    /// again every [`WATCH_EVERY`] and gives up on it (a map error) once a newer map
    /// names another primary: a primary that stopped answering holds the request up
    /// only until the authority let a standby take its place. One timer at a time
    /// (the wait for the answer is cut into pieces), as a request without the watch
    /// has: a second timer per request costs every metadata request (`docs/benchmarks.md`).
    async fn watched(
        &self,
        group: usize,
        map: &Arc<ClusterMap>,
        creds: &Creds,
        op: &'static str,
        body: &[u8],
    ) -> Result<Response> {
        let primary = map.primary(group as u32);
        let mut call = self
            .start_in(Scope::Group, group, op, body, &[], true)
            .await?;
        let limit = self.config().timeouts.request;
        let started = Instant::now();
        let mut wait = (self.config().replication.lease / 2).min(limit);
        loop {
            let frame = call.recv_within(wait).await;
            let timed_out = matches!(&frame, Err(e) if e.errno() == Errno::ETIMEDOUT);
            let left = limit.saturating_sub(started.elapsed());
            if !timed_out || left.is_zero() {
                self.answered(group, &frame);
                let frame = frame.map_err(|e| Error::transport(self.name(group), e))?;
                return self.response(group, &frame);
            }
            if let Ok(now) = self.cluster_map(creds, Some(map.version)).await {
                if now.version > map.version && now.primary(group as u32) != primary {
                    return Err(Error::of_kind(
                        ErrorKind::Map,
                        Errno::EAGAIN,
                        format!(
                            "the metadata of {} moved under cluster map version {} while its server did not answer",
                            self.name(group),
                            now.version
                        ),
                    ));
                }
            }
            wait = WATCH_EVERY.min(limit.saturating_sub(started.elapsed()));
        }
    }

    /// A new retry key of this client.
    pub(crate) fn next_retry_key(&self) -> pvfs_proto::RetryKey {
        pvfs_proto::RetryKey {
            client: self.client_id(),
            seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
        }
    }
}
