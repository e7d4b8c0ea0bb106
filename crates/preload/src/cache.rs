//! Attributes that came with a directory listing, kept for a moment.
//!
//! `ls -l` lists a directory and then stats every entry. The library remembers the
//! latest directory listed; when two of its entries have been stat'ed, it reads the
//! attributes of all of them with readdirplus (one batched attribute request per
//! metadata server, one batched size request per data server: the two-phase listattr
//! of Vilayannur et al., 2008, *Extending the POSIX I/O Interface: A Parallel File
//! System Perspective*, §3.5) and answers the following stats from those. A program
//! that lists without stat'ing (`ls`, `rm -r`, `os.listdir`) pays nothing. Only the
//! latest listing is kept, for at most `PVFS_PRELOAD_ATTR_TTL_MS` milliseconds
//! (default 1000; 0 turns this off), and every change this process makes through the
//! library drops it. Another client's change may thus be seen by `stat` up to that
//! long after it (the same paper, §3.4, lets attributes be lazy); data is never
//! cached.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pvfs_client::Attr;

use crate::lock::Locked;
use crate::settings::split;

/// The latest directory listed, and its entries' attributes once read.
struct Listing {
    /// The directory's pvfs path.
    dir: String,
    /// Its handle.
    handle: pvfs_proto::Handle,
    /// When it was listed (or its attributes read).
    at: Instant,
    /// The change count when it was listed.
    changes: u64,
    /// Stats of its entries that were not answered from here.
    misses: u32,
    /// Attributes by entry name, once read.
    attrs: Option<HashMap<String, Attr>>,
}

/// What the cache says about a path.
pub(crate) enum Lookup {
    /// Its attributes.
    Hit(Attr),
    /// Read the attributes of this directory (handle) with [`ListingCache::fill`],
    /// then ask again.
    Fill(pvfs_proto::Handle),
    /// Nothing: ask the servers.
    Miss,
}

/// The attributes of the latest listing (the process's one is `globals::LISTINGS`).
pub(crate) struct ListingCache {
    /// The latest listing.
    latest: Locked<Option<Listing>>,
    /// Changes made through the library (a listing read before the last one is stale).
    changes: AtomicU64,
    /// How long a listing's attributes are used (`PVFS_PRELOAD_ATTR_TTL_MS`, read on
    /// first use).
    ttl: OnceLock<Duration>,
}

impl ListingCache {
    /// A cache with no listing.
    pub(crate) const fn new() -> ListingCache {
        ListingCache {
            latest: Locked::new(None),
            changes: AtomicU64::new(0),
            ttl: OnceLock::new(),
        }
    }

    /// How long a listing's attributes are used.
    fn ttl(&self) -> Duration {
        *self.ttl.get_or_init(|| {
            let ms = std::env::var("PVFS_PRELOAD_ATTR_TTL_MS")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(1000);
            Duration::from_millis(ms)
        })
    }

    /// Records that this process changed something in pvfs.
    pub(crate) fn changed(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
    }

    /// Records that directory `dir` (object `handle`) was listed, after `changes`
    /// changes.
    pub(crate) fn listed(&self, dir: &str, handle: pvfs_proto::Handle, changes: u64) {
        if self.ttl().is_zero() {
            return;
        }
        *self.latest.lock() = Some(Listing {
            dir: dir.to_string(),
            handle,
            at: Instant::now(),
            changes,
            misses: 0,
            attrs: None,
        });
    }

    /// Keeps the attributes of directory `dir`'s entries, read after `changes` changes.
    pub(crate) fn fill(&self, dir: &str, changes: u64, attrs: HashMap<String, Attr>) {
        let mut l = self.latest.lock();
        if let Some(l) = l.as_mut().filter(|l| l.dir == dir) {
            l.attrs = Some(attrs);
            l.changes = changes;
            l.at = Instant::now();
        }
    }

    /// The change count now (taken before a listing is read).
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// The kept attributes of pvfs path `p`, without counting a miss (for calls that
    /// only need the handle, such as `lgetxattr` after `ls -l`'s stat).
    pub(crate) fn peek(&self, p: &str) -> Lookup {
        self.lookup_counting(p, false)
    }

    /// What the cache knows of pvfs path `p`; a miss in the latest listed directory
    /// counts towards reading all its attributes.
    pub(crate) fn lookup(&self, p: &str) -> Lookup {
        self.lookup_counting(p, true)
    }

    fn lookup_counting(&self, p: &str, count: bool) -> Lookup {
        let Ok((dir, name)) = split(p) else {
            return Lookup::Miss;
        };
        let mut l = self.latest.lock();
        let Some(l) = l.as_mut() else {
            return Lookup::Miss;
        };
        if l.dir != dir || l.changes != self.changes() || l.at.elapsed() > self.ttl() {
            return Lookup::Miss;
        }
        match &l.attrs {
            Some(a) => a.get(name).cloned().map_or(Lookup::Miss, Lookup::Hit),
            None if !count => Lookup::Miss,
            None => {
                l.misses += 1;
                if l.misses >= 2 {
                    Lookup::Fill(l.handle)
                } else {
                    Lookup::Miss
                }
            }
        }
    }

    /// Takes the cache's lock without a guard (the fork prepare handler).
    pub(crate) fn lock_for_fork(&self) {
        self.latest.raw_lock();
    }

    /// Releases the lock [`ListingCache::lock_for_fork`] took (parent and child).
    pub(crate) fn unlock_after_fork(&self) {
        self.latest.raw_unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvfs_proto::{ObjDetail, Timespec};

    fn attr(handle: pvfs_proto::Handle) -> Attr {
        Attr {
            handle,
            mode: 0o777,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 1,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            detail: ObjDetail::Symlink { target: "t".into() },
            blocks: 0,
            acl: None,
        }
    }

    /// A cache whose listings are used for `ttl` (not the environment's).
    fn cache(ttl: Duration) -> ListingCache {
        let c = ListingCache::new();
        assert!(c.ttl.set(ttl).is_ok());
        c
    }

    fn hit(l: Lookup) -> Option<pvfs_proto::Handle> {
        match l {
            Lookup::Hit(a) => Some(a.handle),
            _ => None,
        }
    }

    #[test]
    fn stats_after_a_listing_are_answered_from_its_attributes() {
        let c = cache(Duration::from_secs(600));
        assert!(
            matches!(c.lookup("/d/a"), Lookup::Miss),
            "nothing listed yet"
        );
        c.listed("/d", 7, c.changes());
        assert!(
            matches!(c.lookup("/d/a"), Lookup::Miss),
            "one stat: the servers"
        );
        assert!(
            matches!(c.lookup("/e/a"), Lookup::Miss),
            "another directory"
        );
        assert!(matches!(c.peek("/d/b"), Lookup::Miss));
        assert!(
            matches!(c.lookup("/d/b"), Lookup::Fill(7)),
            "the second stat in the directory: read all its attributes"
        );
        let changes = c.changes();
        let attrs = HashMap::from([("a".to_string(), attr(100)), ("b".to_string(), attr(101))]);
        c.fill("/d", changes, attrs);
        assert_eq!(hit(c.lookup("/d/a")), Some(100));
        assert_eq!(hit(c.peek("/d/b")), Some(101));
        assert_eq!(hit(c.lookup("/d/b/")), Some(101), "a trailing slash");
        assert!(matches!(c.lookup("/d/c"), Lookup::Miss), "not listed");
        assert!(
            matches!(c.lookup("/d"), Lookup::Miss),
            "the directory itself"
        );
        c.fill("/x", changes, HashMap::from([("a".to_string(), attr(200))]));
        assert_eq!(hit(c.lookup("/d/a")), Some(100), "another directory's fill");
        c.changed();
        assert!(
            matches!(c.lookup("/d/a"), Lookup::Miss),
            "a change through the library drops it"
        );
        c.listed("/d", 7, c.changes());
        assert!(
            matches!(c.lookup("/d/a"), Lookup::Miss),
            "listed again: no attributes yet"
        );
    }

    #[test]
    fn listings_are_kept_for_their_time_only() {
        let off = cache(Duration::ZERO);
        off.listed("/d", 7, off.changes());
        for _ in 0..3 {
            assert!(matches!(off.lookup("/d/a"), Lookup::Miss), "0 turns it off");
        }
        let ttl = Duration::from_millis(20);
        let c = cache(ttl);
        c.listed("/d", 7, c.changes());
        std::thread::sleep(ttl * 3);
        for _ in 0..3 {
            assert!(matches!(c.lookup("/d/a"), Lookup::Miss), "expired");
        }
    }
}
