//! Replies recorded with mutations, so that a retried mutation is answered, not redone.
//!
//! A client attaches a [`RetryKey`] to every mutation it may retry. The handler records
//! its reply in the same commit as the mutation; a retry with the same key (after a lost
//! reply, a broken connection, or a server restart) finds it and gets the same answer.
//! Replies are kept for [`keep`] (a dozen times longer than a client retries), so the
//! table holds a few minutes of mutations: it and the server's memory stay bounded
//! under a sustained load.

use std::sync::Arc;
use std::time::Duration;

use pvfs_proto::{decode, encode, Response, RetryKey, Timespec};
use pvfs_storage::{MetaError, MetaTxn, StorageError};

use crate::ctx::Ctx;

/// Shortest time a recorded reply is kept.
pub const KEEP_AT_LEAST: Duration = Duration::from_secs(120);
/// How often old replies are forgotten.
const EXPIRE_EVERY: Duration = Duration::from_secs(30);

/// How long a recorded reply is kept: a client retries a mutation only until its
/// request deadline (and waits at most one more for the last attempt), so 24 request
/// timeouts, and at least [`KEEP_AT_LEAST`], is far beyond any retry.
pub fn keep(config: &pvfs_config::Config) -> Duration {
    KEEP_AT_LEAST.max(config.timeouts.request.saturating_mul(24))
}
/// Most replies forgotten per commit (bounds one expiry commit).
const EXPIRE_BATCH: usize = 10_000;

/// The reply of the mutation `key` names, if it was already done here.
pub fn replayed(t: &MetaTxn<'_>, key: Option<RetryKey>) -> Result<Option<Response>, MetaError> {
    let Some(k) = key else {
        return Ok(None);
    };
    match t.get_reply(k.client, k.seq)? {
        None => Ok(None),
        Some(bytes) => decode_reply(k, &bytes)
            .map(Some)
            .map_err(MetaError::Storage),
    }
}

/// [`replayed`] outside a mutation, from a read snapshot: for a mutation whose first
/// step happens elsewhere and must not be repeated once the mutation was done here.
pub fn replayed_now(ctx: &Ctx, key: Option<RetryKey>) -> Result<Option<Response>, StorageError> {
    let Some(k) = key else {
        return Ok(None);
    };
    match ctx.meta.read()?.get_reply(k.client, k.seq)? {
        None => Ok(None),
        Some(bytes) => decode_reply(k, &bytes).map(Some),
    }
}

/// A recorded reply's bytes as the reply.
fn decode_reply(k: RetryKey, bytes: &[u8]) -> Result<Response, StorageError> {
    decode(bytes).map_err(|e| StorageError::Corrupt {
        what: format!("recorded reply {:#x}/{}: {e}", k.client, k.seq),
    })
}

/// Records `reply` for the mutation `key` names, in the caller's commit.
pub fn remember(t: &mut MetaTxn<'_>, key: Option<RetryKey>, reply: &Response) {
    if let Some(k) = key {
        t.put_reply(k.client, k.seq, &encode(reply), Timespec::now().secs);
    }
}

/// Forgets replies older than [`keep`], every [`EXPIRE_EVERY`], until the server stops.
pub async fn expire_loop(ctx: Arc<Ctx>) {
    let mut tick = tokio::time::interval(EXPIRE_EVERY);
    let keep = keep(&ctx.config).as_secs().min(i64::MAX as u64) as i64;
    loop {
        tick.tick().await;
        let before = Timespec::now().secs.saturating_sub(keep);
        loop {
            match ctx
                .meta
                .write(move |t| t.expire_replies(before, EXPIRE_BATCH))
                .await
            {
                Ok(n) if n == EXPIRE_BATCH => continue,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!("expiring recorded replies failed: {e}");
                    break;
                }
            }
        }
    }
}
