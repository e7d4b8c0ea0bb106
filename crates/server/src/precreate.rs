//! Pools of pre-created datafile handles (OrangeFS's "precreate").
//!
//! A metadata server keeps, for every data server, a durable pool of datafile handles
//! that data server has reserved for it. A create takes its datafile handles from the
//! pools inside its own commit, so it needs no round trip to any data server. Pools are
//! filled when a metadata server starts and refilled in batches, in the background
//! when they run low and synchronously only when one is empty. Data servers create the datafile itself lazily, on first write.

use pvfs_proto::req;
use std::sync::Arc;

use pvfs_proto::{Errno, Request, Response};
use tokio::sync::Mutex;

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};

/// Below this many handles a pool is refilled in the background.
pub const LOW_WATER: u64 = 256;
/// Handles asked for per refill.
pub const BATCH: u32 = 1024;

/// Refill coordination: one refill at a time per data server.
pub struct Precreator {
    refilling: Vec<Mutex<()>>,
}

impl Precreator {
    /// One lock per configured server.
    pub fn new(servers: usize) -> Precreator {
        Precreator {
            refilling: (0..servers).map(|_| Mutex::new(())).collect(),
        }
    }
}

fn pool_len(ctx: &Ctx, server: usize) -> OpResult<u64> {
    Ok(ctx.meta.read()?.pool_len(server as u32)?)
}

/// Makes sure the pool for `server` holds at least `need` handles.
pub async fn ensure(ctx: &Arc<Ctx>, server: usize, need: u64) -> OpResult<()> {
    if pool_len(ctx, server)? >= need {
        return Ok(());
    }
    let _one_at_a_time = ctx.precreate.refilling[server].lock().await;
    if pool_len(ctx, server)? >= need {
        return Ok(());
    }
    refill(ctx, server, need).await
}

/// Starts a background refill of `server`'s pool if it is low and none is running.
pub fn top_up_later(ctx: &Arc<Ctx>, server: usize) {
    match pool_len(ctx, server) {
        Ok(n) if n >= LOW_WATER => return,
        Err(_) => return,
        Ok(_) => {}
    }
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let Ok(_guard) = ctx.precreate.refilling[server].try_lock() else {
            return;
        };
        if let Err(e) = refill(&ctx, server, 0).await {
            tracing::warn!(server = %ctx.config.servers[server].name, "precreate refill failed: {e}");
        }
    });
}

/// How long a metadata server keeps trying, after it starts, to fill its pools
/// while data servers are not answering yet.
pub const FILL_AT_START_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// Fills every data server's pool up to [`LOW_WATER`] after a metadata server
/// starts, so the first creates of a fresh file system do not wait for refills. Data
/// servers that are not up yet are retried every 250 ms for [`FILL_AT_START_FOR`];
/// a create that comes first refills synchronously as before.
pub async fn fill_at_start(ctx: Arc<Ctx>) {
    if ctx.require_meta().is_err() {
        return;
    }
    let start = tokio::time::Instant::now();
    let mut pending = ctx.config.data_servers();
    while !pending.is_empty() && start.elapsed() < FILL_AT_START_FOR {
        let mut still = Vec::new();
        for server in pending {
            let filled = match pool_len(&ctx, server) {
                Ok(n) if n >= LOW_WATER => true,
                Ok(_) => match ctx.precreate.refilling[server].try_lock() {
                    Ok(_guard) => refill(&ctx, server, LOW_WATER).await.is_ok(),
                    // A create is refilling it right now.
                    Err(_) => false,
                },
                Err(_) => return,
            };
            if !filled {
                still.push(server);
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
}

async fn refill(ctx: &Arc<Ctx>, server: usize, need: u64) -> OpResult<()> {
    let count = u64::from(BATCH).max(need).min(u64::from(u32::MAX)) as u32;
    let (first, count) = if server == ctx.me {
        crate::handlers::precreate::reserve(ctx, count).await?
    } else {
        match ctx
            .peers
            .call(server, Request::Precreate(req::Precreate { count }))
            .await?
        {
            Response::Handles { first, count } => (first, count),
            other => {
                return Err(OpError::internal(
                    Errno::EPROTO,
                    format!("unexpected answer to Precreate: {}", other.op_name()),
                ))
            }
        }
    };
    let idx = server as u32;
    ctx.meta
        .write(move |t| {
            t.pool_add(idx, first, u64::from(count));
            Ok(())
        })
        .await?;
    Ok(())
}
