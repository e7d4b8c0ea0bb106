//! The one place that maps a request to its handler (one file per kind under
//! `handlers/`, each declaring what its kind is: `crate::op`), and does for every
//! kind alike what must be done around it.

use std::sync::Arc;

use pvfs_proto::{Effect, Errno, Request, RequestBody, Response, Scope};
use pvfs_transport::TransportError;
use tokio::sync::mpsc;

use crate::access::check_access;
use crate::ctx::Ctx;
use crate::error::OpResult;
use crate::once::Once;
use crate::op::{Answer, Cx, Handler, Input};
use crate::reply::{Data, Reply};
use crate::session::{Caller, Session};

/// Handles one request and sends its answer.
pub async fn dispatch(
    ctx: &Arc<Ctx>,
    reply: &Reply,
    session: &Session,
    body: RequestBody,
    data: Data,
    stream: Option<mpsc::Receiver<Data>>,
) {
    let op = body.request.op_name();
    let started = std::time::Instant::now();
    let result = handle(ctx, reply, session, body, data, stream).await;
    let errno = result.as_ref().err().map(|e| e.errno);
    ctx.metrics
        .request(op, started.elapsed(), errno, &session.client);
    send_answer(ctx, reply, op, result).await;
}

/// Handles one request: its answer (sent already when streamed), or its error.
pub async fn handle(
    ctx: &Arc<Ctx>,
    reply: &Reply,
    session: &Session,
    body: RequestBody,
    data: Data,
    stream: Option<mpsc::Receiver<Data>>,
) -> OpResult<Answer> {
    let incoming = Incoming {
        ctx,
        reply,
        session,
        body: (body.creds, body.retry, body.origin),
        input: Input {
            first: data,
            rest: stream,
        },
    };
    match body.request {
        Request::Ping(r) => serve(incoming, r).await,
        Request::StatFs(r) => serve(incoming, r).await,
        Request::Lookup(r) => serve(incoming, r).await,
        Request::GetAttr(r) => serve(incoming, r).await,
        Request::ListAttr(r) => serve(incoming, r).await,
        Request::SetAttr(r) => serve(incoming, r).await,
        Request::Create(r) => serve(incoming, r).await,
        Request::Unlink(r) => serve(incoming, r).await,
        Request::LinkEntry(r) => serve(incoming, r).await,
        Request::Rename(r) => serve(incoming, r).await,
        Request::ReadDir(r) => serve(incoming, r).await,
        Request::SealDir(r) => serve(incoming, r).await,
        Request::SetParent(r) => serve(incoming, r).await,
        Request::SetDirLayout(r) => serve(incoming, r).await,
        Request::RemoveObject(r) => serve(incoming, r).await,
        Request::Forget(r) => serve(incoming, r).await,
        Request::Link(r) => serve(incoming, r).await,
        Request::AddLink(r) => serve(incoming, r).await,
        Request::DropLink(r) => serve(incoming, r).await,
        Request::SetLinks(r) => serve(incoming, r).await,
        Request::DirStats(r) => serve(incoming, r).await,
        Request::Widen(r) => serve(incoming, r).await,
        Request::Precreate(r) => serve(incoming, r).await,
        Request::Write(r) => serve(incoming, r).await,
        Request::Read(r) => serve(incoming, r).await,
        Request::GetSizes(r) => serve(incoming, r).await,
        Request::Truncate(r) => serve(incoming, r).await,
        Request::RemoveDatafiles(r) => serve(incoming, r).await,
        Request::Fsync(r) => serve(incoming, r).await,
        Request::Sync(r) => serve(incoming, r).await,
        Request::Fallocate(r) => serve(incoming, r).await,
        Request::GetXattr(r) => serve(incoming, r).await,
        Request::SetXattr(r) => serve(incoming, r).await,
        Request::ListXattr(r) => serve(incoming, r).await,
        Request::RemoveXattr(r) => serve(incoming, r).await,
        Request::ScanObjects(r) => serve(incoming, r).await,
        Request::ScanEntries(r) => serve(incoming, r).await,
        Request::ScanDatafiles(r) => serve(incoming, r).await,
        Request::ScanSeals(r) => serve(incoming, r).await,
        Request::ScanLost(r) => serve(incoming, r).await,
        Request::CreateDatafiles(r) => serve(incoming, r).await,
        Request::SumDatafiles(r) => serve(incoming, r).await,
        Request::CopyDatafile(r) => serve(incoming, r).await,
        Request::Scrub(r) => serve(incoming, r).await,
        Request::Drain(r) => serve(incoming, r).await,
        Request::Rebalance(r) => serve(incoming, r).await,
        Request::Lock(r) => serve(incoming, r).await,
        Request::Unlock(r) => serve(incoming, r).await,
        Request::TestLock(r) => serve(incoming, r).await,
        Request::CancelLock(r) => serve(incoming, r).await,
        Request::RenewLease(r) => serve(incoming, r).await,
        Request::WaitFor(r) => serve(incoming, r).await,
        Request::Changes(r) => serve(incoming, r).await,
        Request::Hold(r) => serve(incoming, r).await,
        Request::Unhold(r) => serve(incoming, r).await,
        Request::ScanHeld(r) => serve(incoming, r).await,
        Request::Authority(r) => serve(incoming, r).await,
        Request::GetMap(r) => serve(incoming, r).await,
        Request::Missed(r) => serve(incoming, r).await,
        Request::Replicate(r) => serve(incoming, r).await,
    }
}

/// A request as it arrived, before it is taken apart for its handler.
struct Incoming<'a> {
    ctx: &'a Arc<Ctx>,
    reply: &'a Reply,
    session: &'a Session,
    body: (pvfs_proto::Creds, Option<pvfs_proto::RetryKey>, u64),
    input: Input,
}

/// Runs one request of kind `H`: decides who it acts as and whether it may be sent
/// at all (its [`crate::op::Access`]), keeps it apart from a running attempt of the
/// same mutation, runs the handler and records what it changed in the change feed.
async fn serve<H: Handler>(incoming: Incoming<'_>, request: H) -> OpResult<Answer> {
    let Incoming {
        ctx,
        reply,
        session,
        body: (creds, retry, origin),
        input,
    } = incoming;
    let caller = session
        .caller(creds, origin)
        .and_then(|c| check_access(&ctx.caps, &c, request.access(), H::NAME).map(|()| c));
    let caller = match caller {
        Ok(c) => c,
        Err(e) => {
            if let Some(dropped) = ctx.log_limit.allow(&format!("refused {}", session.peer)) {
                tracing::warn!(peer = %session.peer, client = %session.client, op = H::NAME, dropped, "refused: {e}");
            }
            return Err(e);
        }
    };
    // A group's request is answered only by the group's primary, holding a lease
    // (`crate::promote::Fence`); a connection opened for a group no longer served
    // here finds its fence closed too.
    let fenced = H::SCOPE == Scope::Group;
    if fenced {
        if session.server != ctx.info.name {
            return Err(crate::chain::map_error(format!(
                "{} does not serve the metadata of {} now",
                ctx.info.name, session.server
            )));
        }
        ctx.fence.check(&ctx.lease)?;
    }
    let deadline = tokio::time::Instant::now() + ctx.config.timeouts.request;
    let key = (H::EFFECT == Effect::Once)
        .then(|| retry.map(|k| per_user(k, &caller)))
        .flatten();
    let _running = match key {
        Some(k) => Some(ctx.retries.enter(k, ctx.config.timeouts.request).await?),
        None => None,
    };
    let changes = request.changes();
    let (once, used) = Once::new(H::EFFECT, key, deadline);
    // A retry of a mutation that was done is answered from its record, before any
    // check the first run may have made false.
    let recorded = match key {
        Some(_) => once.recorded(&ctx.meta)?,
        None => None,
    };
    if recorded.is_some() {
        // The record may be of a commit its standbys do not hold yet (the first
        // run's answer was lost while it waited for them).
        ctx.meta.replicated().await;
    }
    let cx = Cx {
        ctx,
        caller: &caller,
        session,
        reply,
        once,
        input,
    };
    ctx.faults
        .hold_op(H::NAME, ctx.config.timeouts.request / 2)
        .await;
    let result = match recorded {
        // Boxed: the handlers' futures differ much in size (a rename's is kilobytes),
        // and every request's task would otherwise be as large as the largest.
        Some(answer) => Box::pin(request.replayed(cx, answer)).await,
        None => Box::pin(request.run(cx)).await,
    };
    if result.is_ok() && fenced && H::EFFECT != Effect::None {
        // The lease may have lapsed while the change waited for its standbys: one
        // that a new primary may lack is not acknowledged (the client retries there,
        // under the same key).
        ctx.fence.check(&ctx.lease)?;
    }
    if result.is_ok() {
        if let Some(upto) = ctx.feed.record(caller.origin, changes) {
            if H::AWAITS_CACHES {
                ctx.feed.settle(caller.origin, upto).await;
            }
        }
        if H::EFFECT == Effect::Once && !used.get() {
            // Every handler of such a kind commits through `Once`: the table test of
            // dropped answers checks each; this catches a new path that forgot.
            tracing::error!(
                op = H::NAME,
                "a mutation that must happen once did not record its answer"
            );
            debug_assert!(used.get(), "{} did not go through Once", H::NAME);
        }
    }
    result
}

/// Recorded replies are per user: a retry key replayed by another identity finds
/// nothing (and reads nothing).
fn per_user(k: pvfs_proto::RetryKey, caller: &Caller) -> pvfs_proto::RetryKey {
    pvfs_proto::RetryKey {
        client: k.client ^ (u64::from(caller.creds.uid) << 32 | u64::from(caller.creds.gid)),
        seq: k.seq,
    }
}

/// Sends what the handler left: its answer, or its error.
async fn send_answer(ctx: &Ctx, reply: &Reply, op: &str, result: OpResult<Answer>) {
    if matches!(result, Ok(Answer::Streamed)) {
        return;
    }
    if ctx.faults.drop_reply(op) {
        tracing::warn!(op, "fault injection: dropping the reply");
        reply.abort();
        return;
    }
    let response = match result {
        Ok(Answer::Reply(r)) => r,
        Ok(Answer::Streamed) => return,
        Err(e) => {
            tracing::debug!(op, "failed: {e}");
            e.into_response()
        }
    };
    match reply.response(&response, &[], true).await {
        Ok(()) => {}
        Err(TransportError::Oversized(why)) => {
            tracing::warn!(op, "answer too large: {why}");
            let too_big = Response::error(Errno::E2BIG, format!("answer to {op} too large: {why}"));
            let _ = reply.response(&too_big, &[], true).await;
        }
        Err(e) => tracing::debug!(op, "answer not delivered: {e}"),
    }
}
