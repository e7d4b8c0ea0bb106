//! The file system's totals for `statfs` (`df`).

use fuser::Errno;

use crate::errors::{errno, OpResult};
use crate::inner::Inner;

/// Preferred I/O size reported by `statfs`.
pub(crate) const STATFS_BSIZE: u32 = 1 << 20;

/// Block size `statfs` counts in.
pub(crate) const STATFS_FRSIZE: u64 = 4096;

/// Totals for `statfs`.
pub(crate) struct FsTotals {
    /// Blocks of [`STATFS_FRSIZE`] bytes in all.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks an unprivileged user may take.
    pub bavail: u64,
    /// Objects the file system may hold.
    pub files: u64,
    /// Objects it may still take.
    pub ffree: u64,
}

impl Inner {
    /// The file system's totals; what the servers that answer hold when some are down.
    pub(crate) async fn statfs(&self) -> OpResult<FsTotals> {
        let fs = self.client.statfs().await;
        if fs.servers.iter().all(|s| s.stat.is_err()) {
            // Nobody answered; with some servers up, df shows what they hold.
            return Err(fs
                .servers
                .iter()
                .find_map(|s| s.stat.clone().err())
                .map_or(Errno::EIO, errno));
        }
        // Free handles: what the metadata servers' handle ranges leave, capped so
        // tools that multiply do not overflow.
        let capacity: u64 = self
            .client
            .config()
            .meta_servers()
            .iter()
            .map(|&i| {
                let r = self.client.config().servers[i].handles;
                r.last.saturating_sub(r.first)
            })
            .fold(0u64, u64::saturating_add)
            .min(1 << 48);
        let used = fs.objects.saturating_add(fs.datafiles);
        Ok(FsTotals {
            blocks: fs.total_bytes / STATFS_FRSIZE,
            bfree: fs.free_bytes / STATFS_FRSIZE,
            bavail: fs.avail_bytes / STATFS_FRSIZE,
            files: capacity.max(used),
            ffree: capacity.saturating_sub(used),
        })
    }
}
