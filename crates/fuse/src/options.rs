//! The options of a mount (`pvfs mount`'s flags; `docs/fuse.md`), what they
//! default to, and the limits the mount holds them to.

use std::time::Duration;

/// Options of a mount (see `docs/fuse.md`).
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// How long the kernel may cache attributes (size, mode, times).
    pub attr_timeout: Duration,
    /// How long the kernel may cache names (which object a name means).
    pub entry_timeout: Duration,
    /// How long the kernel may cache names and attributes, and keep a file's pages
    /// across opens, while every server feeds the mount the changes other clients
    /// make (`feed.rs`); zero turns the feeds off.
    pub cache_timeout: Duration,
    /// FUSE threads reading requests (each with its own cloned device).
    pub threads: usize,
    /// Let other users in (`allow_other`; a non-root mount needs
    /// `user_allow_other` in `/etc/fuse.conf`).
    pub allow_other: bool,
    /// Bypass the kernel's page cache: every read and write goes to the servers.
    pub direct_io: bool,
    /// Read-ahead window set after mounting, in bytes (0 leaves the kernel's).
    pub read_ahead: u64,
    /// Largest read or write request the kernel sends, in bytes (a multiple of the
    /// page size, at most 16 MiB). Above 1 MiB the kernel's limit
    /// `fs.fuse.max_pages_limit` must allow it: a root mount raises it if needed.
    pub max_request: u32,
    /// Largest file (bytes) read through the kernel's page cache when opened
    /// read-only; larger ones are read directly with the mount's read-ahead (see
    /// `ops::open::serves_direct`).
    pub page_cache_max: u64,
    /// Answer writes once their data is in the mount and send it to the servers in
    /// the background (`writebehind.rs`); errors come with a later write, `fsync` or
    /// `close`.
    pub write_behind: bool,
    /// `host:port` where the mount serves its client's Prometheus metrics
    /// (`GET /metrics`); None: no metrics.
    pub metrics: Option<String>,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
            cache_timeout: Duration::from_secs(60),
            threads: 4,
            allow_other: false,
            direct_io: false,
            read_ahead: 4 << 20,
            max_request: 4 << 20,
            page_cache_max: 4 << 20,
            write_behind: false,
            metrics: None,
        }
    }
}

/// Smallest request size the mount asks the kernel for (128 KiB).
const MIN_REQUEST: u32 = 128 << 10;
/// Largest request size the kernel sends (16 MiB, `FUSE_MAX_MAX_PAGES` pages).
const MAX_REQUEST: u32 = 16 << 20;

impl MountOptions {
    /// These options as the mount applies them: the request size within what the
    /// kernel takes (128 KiB to 16 MiB) and in whole pages.
    pub(crate) fn in_bounds(&self) -> MountOptions {
        MountOptions {
            max_request: self.max_request.clamp(MIN_REQUEST, MAX_REQUEST) & !4095,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_sizes_are_whole_pages_within_the_kernels_limits() {
        let with = |max_request| {
            MountOptions {
                max_request,
                ..MountOptions::default()
            }
            .in_bounds()
            .max_request
        };
        assert_eq!(with(4 << 20), 4 << 20, "the default is kept");
        assert_eq!(with(0), 128 << 10);
        assert_eq!(with(4096), 128 << 10);
        assert_eq!(with((1 << 20) + 1), 1 << 20, "rounded down to a page");
        assert_eq!(with((1 << 20) + 8191), (1 << 20) + 4096);
        assert_eq!(with(16 << 20), 16 << 20);
        assert_eq!(with(u32::MAX), 16 << 20);
        let o = MountOptions {
            max_request: 1,
            write_behind: true,
            threads: 7,
            ..MountOptions::default()
        }
        .in_bounds();
        assert!(o.write_behind && o.threads == 7, "other options untouched");
    }
}
