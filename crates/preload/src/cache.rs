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

/// The latest directory listed, and its entries' attributes once read.
pub(crate) struct Listing {
    /// The directory's pvfs path.
    dir: String,
    /// Its handle.
    handle: pvfs_proto::Handle,
    /// When it was listed (or its attributes read).
    at: Instant,
    /// [`CHANGES`] when it was listed.
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
    /// Read the attributes of this directory (handle) with [`fill`], then ask again.
    Fill(pvfs_proto::Handle),
    /// Nothing: ask the servers.
    Miss,
}

/// The latest listing.
pub(crate) static LATEST: Locked<Option<Listing>> = Locked::new(None);
/// Changes made through the library (a listing read before the last one is stale).
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// How long a listing's attributes are used.
fn ttl() -> Duration {
    static TTL: OnceLock<Duration> = OnceLock::new();
    *TTL.get_or_init(|| {
        let ms = std::env::var("PVFS_PRELOAD_ATTR_TTL_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1000);
        Duration::from_millis(ms)
    })
}

/// Records that this process changed something in pvfs.
pub(crate) fn changed() {
    CHANGES.fetch_add(1, Ordering::AcqRel);
}

/// Records that directory `dir` (object `handle`) was listed, after `changes` changes.
pub(crate) fn listed(dir: &str, handle: pvfs_proto::Handle, changes: u64) {
    if ttl().is_zero() {
        return;
    }
    *LATEST.lock() = Some(Listing {
        dir: dir.to_string(),
        handle,
        at: Instant::now(),
        changes,
        misses: 0,
        attrs: None,
    });
}

/// Keeps the attributes of directory `dir`'s entries, read after `changes` changes.
pub(crate) fn fill(dir: &str, changes: u64, attrs: HashMap<String, Attr>) {
    let mut l = LATEST.lock();
    if let Some(l) = l.as_mut().filter(|l| l.dir == dir) {
        l.attrs = Some(attrs);
        l.changes = changes;
        l.at = Instant::now();
    }
}

/// The change count now (taken before a listing is read).
pub(crate) fn changes() -> u64 {
    CHANGES.load(Ordering::Acquire)
}

/// The kept attributes of pvfs path `p`, without counting a miss (for calls that only
/// need the handle, such as `lgetxattr` after `ls -l`'s stat).
pub(crate) fn peek(p: &str) -> Lookup {
    lookup_counting(p, false)
}

/// What the cache knows of pvfs path `p`; a miss in the latest listed directory counts
/// towards reading all its attributes.
pub(crate) fn lookup(p: &str) -> Lookup {
    lookup_counting(p, true)
}

fn lookup_counting(p: &str, count: bool) -> Lookup {
    let Ok((dir, name)) = crate::meta::split(p) else {
        return Lookup::Miss;
    };
    let mut l = LATEST.lock();
    let Some(l) = l.as_mut() else {
        return Lookup::Miss;
    };
    if l.dir != dir || l.changes != changes() || l.at.elapsed() > ttl() {
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
