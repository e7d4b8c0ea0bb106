//! What a client counts for Prometheus, served when its program asks
//! ([`crate::Client::serve_metrics`]; `pvfs mount --metrics`): requests sent by kind,
//! the latency and failures of those answered in one frame (metadata), file bytes
//! read and written.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::{Registry, Unit};

/// A client's counters.
pub struct ClientMetrics {
    registry: Registry,
    /// Requests sent, by kind; the latency and errors of one-frame requests.
    pub requests: pvfs_metrics::Requests,
    /// File bytes read (up to the file's end).
    pub bytes_read: Counter,
    /// File bytes written.
    pub bytes_written: Counter,
}

impl Default for ClientMetrics {
    fn default() -> ClientMetrics {
        ClientMetrics::new()
    }
}

impl ClientMetrics {
    /// Every counter at zero, registered under the `pvfs_client_` prefix.
    pub fn new() -> ClientMetrics {
        let mut registry = Registry::with_prefix("pvfs_client");
        let requests = pvfs_metrics::Requests::new(&mut registry, "Requests sent, by kind");
        let (bytes_read, bytes_written) = (Counter::default(), Counter::default());
        registry.register_with_unit("read", "File bytes read", Unit::Bytes, bytes_read.clone());
        registry.register_with_unit(
            "written",
            "File bytes written",
            Unit::Bytes,
            bytes_written.clone(),
        );
        ClientMetrics {
            registry,
            requests,
            bytes_read,
            bytes_written,
        }
    }

    /// Everything as OpenMetrics text.
    pub fn render(&self) -> String {
        pvfs_metrics::encode(&self.registry)
    }
}
