//! What a server counts for Prometheus (served by `crate::scrape`; `docs/operations.md`,
//! "Metrics").
//!
//! Counters move where the work is done: every request in `crate::dispatch` (by
//! kind, with its latency, and by errno when it fails), bytes in the read and write
//! handlers, connections and refused handshakes in `crate::connection`. Space is read
//! from the storage when scraped. The text is OpenMetrics, encoded by
//! `prometheus-client`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// A batch job and a request kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabel {
    /// The job's id (from `PVFS_JOBID` or `SLURM_JOB_ID` of the client), or
    /// [`OTHER_JOBS`] past [`MAX_JOBS`] of them.
    pub job: String,
    /// The request's kind.
    pub op: &'static str,
}

/// Most jobs counted apart; requests of later ones count under [`OTHER_JOBS`], so
/// that clients cannot grow a server's memory without bound.
pub const MAX_JOBS: usize = 1024;

/// The job the requests of jobs past [`MAX_JOBS`] count under.
pub const OTHER_JOBS: &str = "other";

/// What a scrape reads of the server's state at that moment.
#[derive(Default)]
pub struct Snapshot {
    /// The storage's file system (None: could not be read).
    pub space: Option<pvfs_storage::FsSpace>,
    /// Requests being handled.
    pub in_flight: u64,
    /// Bytes of the receive-buffer budget held, and its size.
    pub budget: (u64, u64),
    /// Byte-range locks held.
    pub locks: u64,
    /// Objects clients hold open here.
    pub held: u64,
    /// Bytes a rebuild of lost servers' copies has left to copy (0: none running).
    pub rebuild_left: u64,
    /// Bytes a refill of this server's own copies has left (0: none running).
    pub refill_left: u64,
    /// Whether the server is degraded (its metadata store failed).
    pub degraded: bool,
    /// Its metadata store's commits, mutations, redo-log syncs and their time so
    /// far (nanoseconds).
    pub meta: [u64; 4],
}

/// A server's counters and gauges.
pub struct Metrics {
    registry: Registry,
    /// Requests answered: by kind, their latency, failures by errno.
    pub requests: pvfs_metrics::Requests,
    /// Requests answered per batch job and kind (as Lustre's job statistics).
    jobs: Family<JobLabel, Counter>,
    /// The jobs counted apart so far (at most [`MAX_JOBS`]).
    job_names: std::sync::Mutex<std::collections::HashSet<String>>,
    /// File bytes sent to readers.
    pub bytes_read: Counter,
    /// File bytes received from writers (and from the previous copy of a chain).
    pub bytes_written: Counter,
    /// Connections open now.
    pub connections: Gauge,
    /// Connections accepted since the start.
    pub connections_accepted: Counter,
    /// Connections whose handshake (or TLS) failed or was refused.
    pub handshake_failures: Counter,
    /// Size of the storage's file system, read when scraped.
    capacity: Gauge,
    /// Its free bytes.
    free: Gauge,
    /// Its bytes available to the server.
    available: Gauge,
    /// Metadata commits, mutations, redo-log syncs, and the seconds syncs took.
    meta: (
        Counter,
        Counter,
        Counter,
        Counter<f64, std::sync::atomic::AtomicU64>,
    ),
    /// What [`Snapshot::meta`] said at the last scrape (the counters move by the
    /// difference).
    meta_seen: std::sync::Mutex<[u64; 4]>,
    /// The rest of a [`Snapshot`], by name.
    now: [(&'static str, &'static str, Option<Unit>, Gauge); 7],
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric at zero, registered under the `pvfs_server_` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("pvfs_server");
        let requests = pvfs_metrics::Requests::new(&mut registry, "Requests answered, by kind");
        let m = Metrics {
            requests,
            jobs: Family::default(),
            job_names: Default::default(),
            meta: Default::default(),
            meta_seen: Default::default(),
            bytes_read: Counter::default(),
            bytes_written: Counter::default(),
            connections: Gauge::default(),
            connections_accepted: Counter::default(),
            handshake_failures: Counter::default(),
            capacity: Gauge::default(),
            free: Gauge::default(),
            available: Gauge::default(),
            now: [
                ("requests_in_flight", "Requests being handled now", None, Gauge::default()),
                ("buffer_budget_used", "Receive-buffer budget held now", Some(Unit::Bytes), Gauge::default()),
                ("buffer_budget", "Size of the receive-buffer budget", Some(Unit::Bytes), Gauge::default()),
                ("locks_held", "Byte-range locks held now", None, Gauge::default()),
                ("objects_held_open", "Objects clients hold open here now", None, Gauge::default()),
                (
                    "copies_left",
                    "Bytes a rebuild of lost servers' copies and a refill of this server's own have left to copy",
                    Some(Unit::Bytes),
                    Gauge::default(),
                ),
                ("degraded", "1 while the server is degraded (its metadata store failed)", None, Gauge::default()),
            ],
            registry: Registry::default(),
        };
        registry.register_with_unit(
            "read",
            "File bytes sent to readers",
            Unit::Bytes,
            m.bytes_read.clone(),
        );
        registry.register_with_unit(
            "written",
            "File bytes received from writers and from the previous copy of a chain",
            Unit::Bytes,
            m.bytes_written.clone(),
        );
        registry.register("connections", "Connections open now", m.connections.clone());
        registry.register(
            "connections_accepted",
            "Connections accepted since the start",
            m.connections_accepted.clone(),
        );
        registry.register(
            "handshake_failures",
            "Connections whose handshake failed or was refused",
            m.handshake_failures.clone(),
        );
        registry.register_with_unit(
            "storage_capacity",
            "Size of the file system of the server's storage",
            Unit::Bytes,
            m.capacity.clone(),
        );
        registry.register_with_unit(
            "storage_free",
            "Free bytes of the file system of the server's storage",
            Unit::Bytes,
            m.free.clone(),
        );
        registry.register_with_unit(
            "storage_available",
            "Bytes of the server's storage it may still fill",
            Unit::Bytes,
            m.available.clone(),
        );
        registry.register(
            "job_requests",
            "Requests answered per batch job (PVFS_JOBID or SLURM_JOB_ID of the client) and kind",
            m.jobs.clone(),
        );
        registry.register(
            "metadata_commits",
            "Write transactions of the metadata store (each a batch of mutations)",
            m.meta.0.clone(),
        );
        registry.register(
            "metadata_mutations",
            "Mutations committed to the metadata store",
            m.meta.1.clone(),
        );
        registry.register(
            "metadata_syncs",
            "Syncs of the metadata store's redo log",
            m.meta.2.clone(),
        );
        registry.register_with_unit(
            "metadata_sync",
            "Time the metadata store's redo-log syncs took (divided by the syncs: their mean)",
            Unit::Seconds,
            m.meta.3.clone(),
        );
        for (name, help, unit, gauge) in &m.now {
            match unit {
                Some(u) => registry.register_with_unit(*name, *help, u.clone(), gauge.clone()),
                None => registry.register(*name, *help, gauge.clone()),
            }
        }
        Metrics { registry, ..m }
    }

    /// Counts one answered request of kind `op` that took `took`, failed with
    /// `errno` when it failed, from a client that named itself `client` in its
    /// handshake (its batch job counted when it names one).
    pub fn request(
        &self,
        op: &'static str,
        took: Duration,
        errno: Option<pvfs_proto::Errno>,
        client: &str,
    ) {
        self.requests.record(op, took, errno.map(|e| e.name()));
        if let Some(job) = pvfs_transport::session::job_of(client) {
            let job = {
                let mut names = self
                    .job_names
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if names.contains(job) || names.len() < MAX_JOBS && names.insert(job.into()) {
                    job.to_string()
                } else {
                    OTHER_JOBS.to_string()
                }
            };
            self.jobs.get_or_create(&JobLabel { job, op }).inc();
        }
    }

    /// The OpenMetrics text of everything, with the server's state `now` (space as
    /// last read when it could not be read now).
    pub fn render(&self, now: &Snapshot) -> String {
        let g = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        if let Some(space) = &now.space {
            self.capacity.set(g(space.total_bytes));
            self.free.set(g(space.free_bytes));
            self.available.set(g(space.avail_bytes));
        }
        let values = [
            now.in_flight,
            now.budget.0,
            now.budget.1,
            now.locks,
            now.held,
            now.rebuild_left + now.refill_left,
            u64::from(now.degraded),
        ];
        for ((_, _, _, gauge), v) in self.now.iter().zip(values) {
            gauge.set(g(v));
        }
        {
            let mut seen = self
                .meta_seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let d = |i: usize| now.meta[i].saturating_sub(seen[i]);
            self.meta.0.inc_by(d(0));
            self.meta.1.inc_by(d(1));
            self.meta.2.inc_by(d(2));
            self.meta.3.inc_by(d(3) as f64 / 1e9);
            for (s, n) in seen.iter_mut().zip(now.meta) {
                *s = (*s).max(n);
            }
        }
        pvfs_metrics::encode(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_are_counted_apart_up_to_a_bound() {
        let m = Metrics::new();
        let ms = Duration::from_millis(1);
        m.request("Lookup", ms, None, "pvfs@h:1;job=4711#00ff");
        m.request("Lookup", ms, None, "pvfs@h:1;job=4711#00ff");
        m.request("Write", ms, None, "pvfs@h:2#00ff");
        for j in 0..MAX_JOBS + 3 {
            m.request("Read", ms, None, &format!("pvfs@h:3;job=j{j}#01"));
        }
        let text = m.render(&Snapshot::default());
        assert!(
            text.contains("pvfs_server_job_requests_total{job=\"4711\",op=\"Lookup\"} 2"),
            "{text}"
        );
        // 4711 took one of the places: four jobs past the bound count as one.
        assert!(text.contains("pvfs_server_job_requests_total{job=\"other\",op=\"Read\"} 4"));
        assert!(!text.contains(&format!("job=\"j{}\"", MAX_JOBS)));
        let no_job = |l: &&str| l.starts_with("pvfs_server_job") && l.contains("\"Write\"");
        assert!(
            !text.lines().any(|l| no_job(&l)),
            "a client without a job counts in no job"
        );
    }
}
