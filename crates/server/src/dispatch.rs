//! The one place that maps a request to its handler (one file per operation under
//! `handlers/`).

use std::sync::Arc;

use pvfs_proto::{rights, Errno, Request, RequestBody, Response};
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
    // Recorded replies are per user: a retry key replayed by another identity finds
    // nothing (and reads nothing).
    let retry = retry.map(|k| pvfs_proto::RetryKey {
        client: k.client ^ (u64::from(caller.creds.uid) << 32 | u64::from(caller.creds.gid)),
        seq: k.seq,
    });
    let c = &caller;
    let touched = crate::feed::touched(&request);
    let result = match request {
        Request::Ping {} => ping::handle(ctx),
        Request::StatFs {} => statfs::handle(ctx).await,
        Request::Lookup { dir, name, want } => lookup::handle(ctx, c, dir, &name, want).await,
        Request::GetAttr {
            handle,
            want,
            proof,
        } => getattr::handle(ctx, c, handle, want, proof.as_ref()).await,
        Request::ListAttr { handles } => getattr::handle_list(ctx, &handles),
        Request::SetAttr { handle, set } => setattr::handle(ctx, c, handle, set).await,
        Request::Create {
            parent,
            name,
            mode,
            umask,
            uid,
            gid,
            what,
        } => create::handle(ctx, c, parent, name, (mode, umask), (uid, gid), what, retry).await,
        Request::Unlink {
            dir,
            name,
            expect,
            want,
            fate,
        } => unlink::handle(ctx, c, dir, name, expect, want, fate, retry).await,
        Request::LinkEntry {
            dir,
            name,
            handle,
            kind,
            replace,
            fate,
            ticket,
        } => {
            link_entry::handle(
                ctx,
                c,
                link_entry::Link {
                    dir,
                    name,
                    handle,
                    kind,
                    replace,
                    fate,
                },
                ticket.as_ref(),
                retry,
            )
            .await
        }
        Request::Rename {
            src_dir,
            src_name,
            dst_dir,
            dst_name,
            expect_src,
            replace,
            fate,
        } => {
            rename::handle(
                ctx,
                c,
                rename::Move {
                    src_dir,
                    src_name,
                    dst_dir,
                    dst_name,
                    expect_src,
                    replace,
                    fate,
                },
                retry,
            )
            .await
        }
        Request::ReadDir {
            dir,
            shard: _,
            after,
            max,
        } => readdir::handle(ctx, c, dir, after, max).await,
        Request::SealDir { dir, seal, ticket } => {
            seal_dir::handle(ctx, c, dir, seal, ticket.as_ref()).await
        }
        Request::SetParent {
            dir,
            parent,
            ticket,
        } => set_parent::handle(ctx, c, dir, parent, ticket.as_ref()).await,
        Request::SetDirLayout { dir, layout } => {
            set_dir_layout::handle(ctx, &c.creds, dir, layout).await
        }
        Request::RemoveObject { handle, ticket } => {
            remove_object::handle(ctx, c, handle, ticket.as_ref(), retry).await
        }
        Request::Forget { handles } => forget::handle(ctx, &handles),
        Request::Link {
            dir,
            name,
            handle,
            proof,
        } => link::handle(ctx, c, dir, name, handle, proof.as_ref(), retry).await,
        Request::AddLink { handle } => add_link::handle(ctx, c, handle, retry).await,
        Request::DropLink { handle, keep } => drop_link::handle(ctx, c, handle, keep, retry).await,
        Request::SetLinks {
            handle,
            links,
            expect,
        } => drop_link::set(ctx, c, handle, links, expect, retry).await,
        Request::DirStats { dirs } => dir_stats::handle(ctx, &dirs),
        Request::Precreate { count } => precreate::handle(ctx, count).await,
        Request::Write {
            handle,
            stripe,
            index,
            regions,
            sync,
            cap,
        } => {
            match ctx
                .caps
                .check(cap.as_ref(), handle, rights::WRITE, c, false)
            {
                Ok(()) => {
                    write::handle(ctx, handle, stripe, index, regions, sync, data, stream).await
                }
                Err(e) => Err(e),
            }
        }
        Request::Read {
            handle,
            stripe,
            index,
            regions,
            cap,
        } => match ctx.caps.check(cap.as_ref(), handle, rights::READ, c, false) {
            Ok(()) => {
                // A read streams its own frames, including a failure's error frame.
                read::handle(ctx, reply, handle, stripe, index, regions).await;
                return;
            }
            Err(e) => Err(e),
        },
        Request::GetSizes { handles } => datafiles::get_sizes(ctx, handles).await,
        Request::Widen { handle, width, cap } => {
            match ctx
                .caps
                .check(cap.as_ref(), handle, rights::WRITE, c, false)
            {
                Ok(()) => widen::handle(ctx, handle, width).await,
                Err(e) => Err(e),
            }
        }
        Request::Truncate {
            handle,
            stripe,
            index,
            size,
            cap,
        } => match ctx
            .caps
            .check(cap.as_ref(), handle, rights::WRITE, c, false)
        {
            Ok(()) => datafiles::truncate(ctx, handle, stripe, index, size).await,
            Err(e) => Err(e),
        },
        Request::Fallocate {
            handle,
            stripe,
            index,
            offset,
            len,
            mode,
            cap,
        } => match ctx
            .caps
            .check(cap.as_ref(), handle, rights::WRITE, c, false)
        {
            Ok(()) => fallocate::handle(ctx, handle, stripe, index, offset, len, mode).await,
            Err(e) => Err(e),
        },
        Request::RemoveDatafiles { handles, tickets } => {
            datafiles::remove(ctx, c, handles, &tickets).await
        }
        Request::Fsync { handles } => datafiles::fsync(ctx, handles).await,
        Request::Sync { data } => sync::handle(ctx, data).await,
        Request::GetXattr { handle, name } => xattr::get(ctx, c, handle, &name),
        Request::SetXattr {
            handle,
            name,
            value,
            flags,
        } => xattr::set(ctx, c, handle, name, value, flags, retry).await,
        Request::ListXattr { handle } => xattr::list(ctx, c, handle),
        Request::RemoveXattr { handle, name } => xattr::remove(ctx, c, handle, name, retry).await,
        Request::ScanObjects { after, max } => scan::objects(ctx, after, max),
        Request::ScanEntries { after, max } => scan::entries(ctx, after, max),
        Request::ScanDatafiles { after, max } => scan::datafiles(ctx, after, max).await,
        Request::ScanSeals {} => scan::seals(ctx),
        Request::ScanLost { after, max } => scan::lost(ctx, after, max).await,
        Request::CreateDatafiles { handles } => scan::create_datafiles(ctx, handles).await,
        Request::Lock {
            handle,
            owner,
            typ,
            start,
            end,
            pid,
            flags,
            proof,
        } => {
            let args = lock::LockArgs {
                handle,
                owner,
                typ,
                start,
                end,
                pid,
                flags,
            };
            lock::handle(ctx, c, args, proof.as_ref()).await
        }
        Request::Unlock {
            handle,
            owner,
            start,
            end,
        } => unlock::handle(ctx, c, handle, owner, start, end),
        Request::TestLock {
            handle,
            owner,
            typ,
            start,
            end,
            proof,
        } => test_lock::handle(ctx, c, handle, owner, typ, (start, end), proof.as_ref()).await,
        Request::CancelLock {
            handle,
            owner,
            typ,
            start,
            end,
        } => cancel_lock::handle(ctx, c, handle, owner, typ, (start, end)),
        Request::RenewLease { client, release } => renew_lease::handle(ctx, c, client, release),
        Request::WaitFor {
            waiter,
            blockers,
            server,
            handle,
        } => wait_for::handle(ctx, waiter, &blockers, server, handle),
        Request::Changes {
            epoch,
            since,
            wait_ms,
        } => Ok(changes::handle(ctx, session, epoch, since, wait_ms).await),
    };
    if matches!(result, Ok(ref r) if !matches!(r, Response::Error { .. })) {
        ctx.feed.record(session.origin, touched);
    }
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
