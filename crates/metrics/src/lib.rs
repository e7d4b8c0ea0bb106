//! The HTTP endpoint of pvfs's Prometheus metrics, for servers (`[[servers]]
//! metrics`), mounts (`pvfs mount --metrics`) and library clients: `GET /metrics`
//! answers what a caller-given function renders (OpenMetrics text), anything else 404.
//! Scrapes are bounded in number and in time; a request head is read up to a bound.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A request kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    /// Its name (`Lookup`, `Write`, ...).
    pub op: &'static str,
}

/// A request kind and the errno it failed with.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    /// The request's kind.
    pub op: &'static str,
    /// The errno's name (`ENOENT`, ...).
    pub errno: &'static str,
}

/// Requests by kind, their latency and their failures by errno: what servers count
/// of the requests they answer and clients of those they send.
#[derive(Clone)]
pub struct Requests {
    /// Requests, by kind.
    pub count: Family<OpLabel, Counter>,
    /// How long they took, by kind.
    pub latency: Family<OpLabel, Histogram>,
    /// Those that failed, by kind and errno.
    pub errors: Family<ErrorLabel, Counter>,
}

impl Requests {
    /// Registers them in `registry`: `requests` ("`count_help`"),
    /// `request_duration_seconds` and `request_errors`.
    pub fn new(registry: &mut Registry, count_help: &str) -> Requests {
        let r = Requests {
            count: Family::default(),
            // 10 µs to about 40 s, in steps of 4.
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1e-5, 4.0, 12))
            }),
            errors: Family::default(),
        };
        registry.register("requests", count_help, r.count.clone());
        registry.register_with_unit(
            "request_duration",
            "How long requests took, by kind",
            Unit::Seconds,
            r.latency.clone(),
        );
        registry.register(
            "request_errors",
            "Requests that failed, by kind and errno",
            r.errors.clone(),
        );
        r
    }

    /// Counts a request of kind `op` that took `took`, failed with the errno named
    /// `errno` when it failed.
    pub fn record(&self, op: &'static str, took: Duration, errno: Option<&'static str>) {
        self.count_only(op);
        self.timed(op, took, errno);
    }

    /// Counts a request of kind `op` (its time and outcome counted apart, or not).
    pub fn count_only(&self, op: &'static str) {
        self.count.get_or_create(&OpLabel { op }).inc();
    }

    /// Notes how long a request of kind `op` took and the errno it failed with.
    pub fn timed(&self, op: &'static str, took: Duration, errno: Option<&'static str>) {
        self.latency
            .get_or_create(&OpLabel { op })
            .observe(took.as_secs_f64());
        if let Some(errno) = errno {
            self.errors.get_or_create(&ErrorLabel { op, errno }).inc();
        }
    }
}

/// `registry` as OpenMetrics text.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::warn!("cannot encode metrics: {e}");
    }
    out
}

/// The content type of OpenMetrics text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Scrapes served at once; more wait for their turn.
const SCRAPES_AT_ONCE: usize = 8;

/// Longest a scrape's connection may take, from accept to the last byte.
const SCRAPE_DEADLINE: Duration = Duration::from_secs(10);

/// Largest request head read (a scraper sends a few hundred bytes).
const HEAD_MAX: usize = 8192;

/// Serves `GET /metrics` on `addr` with what `render` makes, until the task is
/// dropped. A port that cannot be bound is logged and left: metrics are not the file
/// system, and a monitoring port taken must not keep anyone from serving or reading
/// files.
pub async fn serve<F, Fut>(addr: String, render: F)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = String> + Send,
{
    let render = Arc::new(render);
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, "cannot serve metrics there (running without them): {e}");
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
        let render = render.clone();
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(SCRAPE_DEADLINE, answer(&*render, stream)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, "metrics request failed: {e}"),
                Err(_) => tracing::debug!(%peer, "metrics request took too long"),
            }
        });
    }
}

/// Reads one HTTP request head and answers it: the metrics for `GET /metrics`, 404
/// for any other path, 405 for any other method.
async fn answer<F, Fut>(render: &F, mut stream: tokio::net::TcpStream) -> std::io::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = String>,
{
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
            let body = render().await;
            respond(&mut stream, "200 OK", CONTENT_TYPE, &body).await
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn ask(addr: &str, request: &[u8]) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        // What came before the end, or before a reset (a server that stops reading
        // an oversized head closes with bytes unread).
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn answers_metrics_and_nothing_else() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let task = tokio::spawn(serve(addr.clone(), || async {
            "x_total 1\n# EOF\n".to_string()
        }));
        let mut ok = String::new();
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(&addr).await.is_ok() {
                ok = ask(&addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains(CONTENT_TYPE) && ok.ends_with("\r\n\r\nx_total 1\n# EOF\n"),
            "{ok}"
        );
        let other = ask(&addr, b"GET /?x HTTP/1.1\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let post = ask(&addr, b"POST /metrics HTTP/1.1\r\n\r\n").await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
        huge.extend(std::iter::repeat_n(b'a', 3 * HEAD_MAX));
        let big = ask(&addr, &huge).await;
        assert!(big.starts_with("HTTP/1.1 431"), "{big}");
        task.abort();
    }
}
