//! The one place that maps a request to its handler (one file per operation under
//! `handlers/`).

use std::sync::Arc;

use pvfs_proto::{Errno, Request, RequestBody, Response};
use pvfs_transport::TransportError;
use tokio::sync::mpsc;

use crate::connection::{Data, Reply};
use crate::ctx::Ctx;
use crate::handlers::*;
use crate::session::Session;

/// Handles one request and sends its answer. Who the request acts as, and whether it
/// may be sent at all, is decided here once, from the connection's session.
pub async fn dispatch(
    ctx: &Arc<Ctx>,
    reply: &Reply,
    session: &Session,
    body: RequestBody,
    data: Data,
    stream: Option<mpsc::Receiver<Data>>,
) {
    let RequestBody {
        creds,
        request,
        retry,
    } = body;
    let op = request.op_name();
    let caller = session
        .caller(creds)
        .and_then(|c| c.may_send(request.class(), op).map(|()| c));
    let caller = match caller {
        Ok(c) => c,
        Err(e) => {
            if let Some(dropped) = ctx.log_limit.allow(&format!("refused {}", session.peer)) {
                tracing::warn!(peer = %session.peer, client = %session.client, op, dropped, "refused: {e}");
            }
            let _ = reply.response(&e.into_response(), &[], true).await;
            return;
        }
    };
    let creds = caller.creds;
    let result = match request {
        Request::Ping {} => ping::handle(ctx),
        Request::StatFs {} => statfs::handle(ctx).await,
        Request::Lookup { dir, name } => lookup::handle(ctx, dir, &name),
        Request::GetAttr { handle } => getattr::handle(ctx, handle),
        Request::ListAttr { handles } => getattr::handle_list(ctx, &handles),
        Request::SetAttr { handle, set } => setattr::handle(ctx, &creds, handle, set).await,
        Request::Create {
            parent,
            name,
            mode,
            uid,
            gid,
            what,
        } => create::handle(ctx, &creds, parent, name, mode, uid, gid, what, retry).await,
        Request::Unlink {
            dir,
            name,
            expect,
            want,
            drop_object,
        } => unlink::handle(ctx, dir, name, expect, want, drop_object, retry).await,
        Request::LinkEntry {
            dir,
            name,
            handle,
            kind,
            replace,
        } => link_entry::handle(ctx, dir, name, handle, kind, replace, retry).await,
        Request::Rename {
            src_dir,
            src_name,
            dst_dir,
            dst_name,
            expect_src,
            replace,
        } => {
            rename::handle(
                ctx, src_dir, src_name, dst_dir, dst_name, expect_src, replace, retry,
            )
            .await
        }
        Request::ReadDir {
            dir,
            shard: _,
            after,
            max,
        } => readdir::handle(ctx, dir, after, max),
        Request::SealDir { dir, seal } => seal_dir::handle(ctx, dir, seal).await,
        Request::SetParent { dir, parent } => set_parent::handle(ctx, dir, parent).await,
        Request::SetDirLayout { dir, layout } => {
            set_dir_layout::handle(ctx, &creds, dir, layout).await
        }
        Request::RemoveObject { handle } => remove_object::handle(ctx, handle, retry).await,
        Request::Precreate { count } => precreate::handle(ctx, count).await,
        Request::Write {
            handle,
            stripe,
            index,
            regions,
            sync,
        } => write::handle(ctx, handle, stripe, index, regions, sync, data, stream).await,
        Request::Read {
            handle,
            stripe,
            index,
            regions,
        } => {
            // A read streams its own frames, including a failure's error frame.
            read::handle(ctx, reply, handle, stripe, index, regions).await;
            return;
        }
        Request::GetSizes { handles } => datafiles::get_sizes(ctx, handles).await,
        Request::Truncate {
            handle,
            stripe,
            index,
            size,
        } => datafiles::truncate(ctx, handle, stripe, index, size).await,
        Request::RemoveDatafiles { handles } => datafiles::remove(ctx, handles).await,
        Request::Fsync { handles } => datafiles::fsync(ctx, handles).await,
        Request::GetXattr { handle, name } => xattr::get(ctx, handle, &name),
        Request::SetXattr {
            handle,
            name,
            value,
            flags,
        } => xattr::set(ctx, &creds, handle, name, value, flags, retry).await,
        Request::ListXattr { handle } => xattr::list(ctx, handle),
        Request::RemoveXattr { handle, name } => {
            xattr::remove(ctx, &creds, handle, name, retry).await
        }
        Request::ScanObjects { after, max } => scan::objects(ctx, after, max),
        Request::ScanEntries { after, max } => scan::entries(ctx, after, max),
        Request::ScanDatafiles { after, max } => scan::datafiles(ctx, after, max).await,
        Request::ScanSeals {} => scan::seals(ctx),
        Request::CreateDatafiles { handles } => scan::create_datafiles(ctx, handles).await,
    };
    if ctx.faults.drop_reply(op) {
        tracing::warn!(op, "fault injection: dropping the reply");
        reply.abort();
        return;
    }
    let response = result.unwrap_or_else(|e| {
        tracing::debug!(op, "failed: {e}");
        e.into_response()
    });
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

/// Convenience for handlers that answer `Done`.
pub fn done() -> crate::error::OpResult<Response> {
    Ok(Response::Done {})
}
