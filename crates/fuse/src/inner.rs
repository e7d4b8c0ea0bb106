//! The mount's shared state ([`Inner`]): the client, the options, the tables of
//! what the mount knows and holds open (`state.rs`), the buffers and budgets of
//! read-ahead and background writes, and how long the kernel may keep what it is
//! told (longer while every server's change feed reaches the mount).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fuser::{FileAttr, INodeNo};
use pvfs_client::{Attr, Client, ObjKind};
use pvfs_proto::{Creds, Handle};
use pvfs_transport::BufPool;

use crate::attr::{self, file_attr};
use crate::creds::CredCache;
use crate::options::MountOptions;
use crate::readahead::Budget;
use crate::state::Tables;
use crate::writebehind;

/// The mount's shared state.
pub(crate) struct Inner {
    /// The client, acting as the mount's own user.
    pub client: Client,
    /// The root directory's handle (inode 1).
    pub root: Handle,
    /// The mount's options, within their bounds (`MountOptions::in_bounds`).
    pub opts: MountOptions,
    /// What the mount knows of names and objects, and holds open (`state.rs`).
    pub tables: Arc<Tables>,
    /// Credentials of calling processes (`creds.rs`).
    pub creds: CredCache,
    /// Buffers of reads and background writes, a largest request each.
    pub bufs: BufPool,
    /// Read-ahead chunks the mount may still fetch.
    pub budget: Budget,
    /// Background writes the mount may still start (`--write-behind`).
    pub write_budget: Arc<tokio::sync::Semaphore>,
    /// The kernel maps files it serves without the page cache (set at init).
    pub direct_mmap: AtomicBool,
    /// Deletions of unlinked objects running in the background (a bound on them).
    pub removals: Arc<tokio::sync::Semaphore>,
    /// Sends the kernel invalidations (set once the session exists): a granted lock
    /// drops the file's cached pages (`ops/locks.rs`).
    pub notifier: std::sync::OnceLock<fuser::Notifier>,
    /// Servers whose change feed this mount follows now (`feed.rs`): with all of
    /// them, the kernel may cache for `cache_timeout`.
    pub feeds_live: std::sync::atomic::AtomicUsize,
    /// Directories with a change of this mount in progress (`feed.rs`).
    pub busy: Arc<crate::busy::BusyDirs>,
}

/// Most deletions of unlinked objects running in the background at once; an unlink
/// beyond that waits (backpressure on `rm -rf`).
pub(crate) const REMOVALS: u32 = 256;

/// How long the mount keeps holding a file after its last close
/// (`pvfs_client::holds`): a file opened again within it asks no server. Another
/// client's change of the file and this mount's unlink of it end the hold at once;
/// a file this mount renames another over goes when the hold ends.
const HOLD_LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// Read-ahead chunks the whole mount holds at most (with 4 MiB requests, 128 MiB).
const READ_AHEAD_BUDGET: usize = 32;

impl Inner {
    /// The state of a mount of `client`'s file system with `opts`.
    pub(crate) fn new(client: Client, opts: MountOptions) -> Inner {
        // A file opened again soon after its last close (a header every compile
        // includes, a file read right after it was written) asks no server.
        client.linger_holds(HOLD_LINGER);
        Inner {
            root: client.root(),
            client,
            // Room for a largest request at the read skew. Huge pages: read-ahead
            // fills these whole and the FUSE device copies answers out of them
            // (write-behind data and direct reads, which fill them in part, take
            // at most a huge page more each, within the same budgets).
            bufs: BufPool::with_huge_pages(opts.max_request as usize + 4096, 16),
            budget: Budget::new(READ_AHEAD_BUDGET),
            write_budget: Arc::new(tokio::sync::Semaphore::new(writebehind::BUDGET)),
            direct_mmap: AtomicBool::new(false),
            opts,
            tables: Arc::new(Tables::new()),
            creds: CredCache::default(),
            removals: Arc::new(tokio::sync::Semaphore::new(REMOVALS as usize)),
            notifier: std::sync::OnceLock::new(),
            feeds_live: std::sync::atomic::AtomicUsize::new(0),
            busy: Arc::default(),
        }
    }

    /// The number of servers in the file system.
    pub(crate) fn servers(&self) -> usize {
        self.client.config().servers.len()
    }

    /// Whether every server's changes reach this mount (`feed.rs`).
    pub(crate) fn coherent(&self) -> bool {
        self.opts.cache_timeout > Duration::ZERO
            && self.feeds_live.load(Ordering::Acquire) == self.servers()
    }

    /// How long the kernel may keep attributes answered now.
    pub(crate) fn attr_ttl(&self) -> Duration {
        if self.coherent() {
            self.opts.cache_timeout.max(self.opts.attr_timeout)
        } else {
            self.opts.attr_timeout
        }
    }

    /// How long the kernel may keep names answered now.
    pub(crate) fn entry_ttl(&self) -> Duration {
        if self.coherent() {
            self.opts.cache_timeout.max(self.opts.entry_timeout)
        } else {
            self.opts.entry_timeout
        }
    }

    /// Whether the files' attributes this mount keeps are current: while every change
    /// feed runs, and not with `--write-behind` (bytes on their way change sizes).
    pub(crate) fn file_attrs_held(&self) -> bool {
        !self.opts.write_behind && self.coherent()
    }

    /// The handle behind inode `ino`.
    pub(crate) fn handle(&self, ino: INodeNo) -> Handle {
        attr::handle_of(self.root, ino)
    }

    /// The kernel's view of `attr`.
    pub(crate) fn fattr(&self, attr: &Attr) -> FileAttr {
        let file = attr.kind() == ObjKind::File;
        if file {
            self.tables.note_size(attr.handle, attr.size);
        }
        let orphan = file && self.tables.is_orphan(attr.handle);
        let mut fa = file_attr(self.root, attr, orphan);
        if file {
            // What this mount wrote counts, arrived or not (`--write-behind`).
            if let Some(p) = self.tables.any_pending(attr.handle) {
                if p.end() > fa.size {
                    // The bytes on their way past the end will take space too.
                    fa.blocks += (p.end() - fa.size).div_ceil(512);
                    fa.size = p.end();
                }
            }
        }
        fa
    }

    /// The client acting as the caller.
    pub(crate) fn caller(&self, creds: &Creds) -> Client {
        self.client.with_creds(creds.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvfs_config::{Config, GenOptions};

    /// The state of a mount of a 4-server file system (no server is asked).
    fn inner(opts: MountOptions) -> Inner {
        let config = Config::generate(&GenOptions::new(4, "/nonexistent")).expect("config");
        Inner::new(Client::new(config), opts)
    }

    fn feeds(i: &Inner, live: usize) {
        i.feeds_live.store(live, Ordering::Release);
    }

    #[test]
    fn the_kernel_keeps_longer_only_while_every_feed_runs() {
        let secs = Duration::from_secs;
        let i = inner(MountOptions::default());
        assert_eq!(i.servers(), 4);
        assert!(!i.coherent());
        assert_eq!((i.attr_ttl(), i.entry_ttl()), (secs(1), secs(1)));
        assert!(!i.file_attrs_held());
        feeds(&i, 3);
        assert!(
            !i.coherent(),
            "one server's changes would not reach the mount"
        );
        assert_eq!((i.attr_ttl(), i.entry_ttl()), (secs(1), secs(1)));
        feeds(&i, 4);
        assert!(i.coherent());
        assert_eq!((i.attr_ttl(), i.entry_ttl()), (secs(60), secs(60)));
        assert!(i.file_attrs_held());
        feeds(&i, 2);
        assert!(!i.coherent(), "a feed that stops ends it");
        assert_eq!(i.attr_ttl(), secs(1));

        // Longer plain timeouts stay; no cache timeout means no feeds' grace.
        let i = inner(MountOptions {
            attr_timeout: secs(90),
            entry_timeout: secs(5),
            ..MountOptions::default()
        });
        feeds(&i, 4);
        assert_eq!((i.attr_ttl(), i.entry_ttl()), (secs(90), secs(60)));
        let i = inner(MountOptions {
            cache_timeout: Duration::ZERO,
            ..MountOptions::default()
        });
        feeds(&i, 4);
        assert!(!i.coherent());
        assert_eq!(i.attr_ttl(), secs(1));

        // Bytes on their way (write-behind) change sizes: files' attributes are
        // not held as current even while the feeds run.
        let i = inner(MountOptions {
            write_behind: true,
            ..MountOptions::default()
        });
        feeds(&i, 4);
        assert!(i.coherent() && !i.file_attrs_held());
    }
}
