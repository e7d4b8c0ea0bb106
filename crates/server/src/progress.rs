//! How far the copies a server makes in the background have got (a rebuild of
//! lost servers' copies, `crate::rebuild`; a refill of its own, `crate::refill`),
//! for `StatFs` (`pvfs status`). Kept in
//! the server's context, below the tasks that fill it in.

use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Instant;

use pvfs_proto::message::Rebuilding;

/// Bytes and datafiles copied so far by a whole copy (`crate::refill::copy_whole`), read while it runs
/// (`pvfs status`).
#[derive(Debug, Default)]
pub struct Meter {
    /// Datafiles copied.
    pub datafiles: std::sync::atomic::AtomicU64,
    /// Bytes copied.
    pub bytes: std::sync::atomic::AtomicU64,
}

/// A pass under way: the lost servers, the datafiles and bytes it counted, and
/// when it began copying.
type Pass = (Vec<u32>, u64, u64, Instant);

/// The pass under way, for `StatFs` (`pvfs status`).
#[derive(Debug, Default)]
pub struct Status {
    /// The pass under way, if any.
    pass: Mutex<Option<Pass>>,
    /// What it copied so far.
    pub meter: Meter,
}

impl Status {
    /// The pass under way, if any.
    pub fn report(&self) -> Option<Rebuilding> {
        let pass = self.pass.lock().unwrap_or_else(|e| e.into_inner());
        let (lost, datafiles_total, bytes_total, began) = pass.as_ref()?;
        Some(Rebuilding {
            lost: lost.clone(),
            datafiles_total: *datafiles_total,
            datafiles_done: self.meter.datafiles.load(Ordering::Relaxed),
            bytes_total: *bytes_total,
            bytes_done: self.meter.bytes.load(Ordering::Relaxed),
            elapsed_ms: began.elapsed().as_millis() as u64,
        })
    }

    /// A pass begins: copies of `lost` servers' places (none for a refill),
    /// `datafiles` and `bytes` to copy as counted now.
    pub fn begin(&self, lost: &[u32], datafiles: u64, bytes: u64) {
        self.meter.datafiles.store(0, Ordering::Relaxed);
        self.meter.bytes.store(0, Ordering::Relaxed);
        let mut pass = self.pass.lock().unwrap_or_else(|e| e.into_inner());
        *pass = Some((lost.to_vec(), datafiles, bytes, Instant::now()));
    }

    /// The pass ended (done or given up): nothing under way.
    pub fn end(&self) {
        *self.pass.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}
