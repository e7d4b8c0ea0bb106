//! The HTTP endpoint of a server's Prometheus metrics (`[[servers]] metrics` in the
//! configuration): `GET /metrics` answers what `crate::metrics` counted.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::ctx::Ctx;

/// Scrapes served at once; more wait for their turn.
const SCRAPES_AT_ONCE: usize = 8;

/// Longest a scrape's connection may take, from accept to the last byte.
const SCRAPE_DEADLINE: Duration = Duration::from_secs(10);

/// Largest request head read (a scraper sends a few hundred bytes).
const HEAD_MAX: usize = 8192;

/// Serves `GET /metrics` on `addr` until the task is dropped. A port that cannot be
/// bound is logged and left: metrics are not the file system, and a monitoring port
/// taken must not keep a server from serving files.
pub async fn serve(ctx: Arc<Ctx>, addr: String) {
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, "cannot serve metrics there (the server runs without): {e}");
            return;
        }
    };
    tracing::info!(%addr, "serving metrics at /metrics");
    let slots = Arc::new(tokio::sync::Semaphore::new(SCRAPES_AT_ONCE));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!("metrics accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(SCRAPE_DEADLINE, answer(&ctx, stream)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, "metrics request failed: {e}"),
                Err(_) => tracing::debug!(%peer, "metrics request took too long"),
            }
        });
    }
}

/// The server's state now, for a scrape.
async fn snapshot(ctx: &Arc<Ctx>) -> crate::metrics::Snapshot {
    let data = ctx.data.clone();
    let space = ctx.blocking(move || Ok(data.statfs()?)).await.ok();
    let unit = crate::budget::BUDGET_UNIT;
    let size = u64::from(ctx.budget.units());
    let free = ctx.budget.available() as u64;
    let left = |s: &crate::progress::Status| {
        s.report()
            .map_or(0, |r| r.bytes_total.saturating_sub(r.bytes_done))
    };
    crate::metrics::Snapshot {
        space,
        in_flight: ctx.inflight.count() as u64,
        budget: (size.saturating_sub(free) * unit, size * unit),
        locks: ctx.locks.held_count() as u64,
        held: ctx.holds.counts().0 as u64,
        rebuild_left: left(&ctx.rebuilding),
        refill_left: left(&ctx.refilling),
        degraded: !ctx.health.report(&ctx.meta).is_ok(),
    }
}

/// Reads one HTTP request head and answers it: the metrics for `GET /metrics`, 404
/// for any other path, 405 for any other method.
async fn answer(ctx: &Arc<Ctx>, mut stream: tokio::net::TcpStream) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > HEAD_MAX {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            )
            .await;
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => {
            let body = ctx.metrics.render(&snapshot(ctx).await);
            let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
            respond(&mut stream, "200 OK", kind, &body).await
        }
        ("GET", _) => respond(&mut stream, "404 Not Found", "text/plain", "try /metrics\n").await,
        _ => respond(&mut stream, "405 Method Not Allowed", "text/plain", "").await,
    }
}

async fn respond(
    stream: &mut tokio::net::TcpStream,
    status: &str,
    kind: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
