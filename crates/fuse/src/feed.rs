//! Coherent caching: the mount follows every server's change feed and has the
//! kernel forget what other clients changed, before it asks again.
//!
//! While every feed is followed, the kernel may keep names and attributes for the
//! mount's `cache_timeout` (and cached file pages across opens); a change another
//! client makes reaches this mount as soon as its server's long poll answers
//! (`Request::Changes`), and is dropped from the kernel's caches and the mount's
//! own tables before the mount polls again. The server answers the change's own
//! call only once every mount following it polled again past it, so what another
//! client changed is seen here when its call returns (`docs/fuse.md`, "Caching").
//!
//! - **Kernel locks.** The kernel takes a directory's lock to drop a name in it,
//!   and holds it while this mount serves a change there (a create, a rename...),
//!   whose answer may wait for other mounts. So a dropped name in a directory with
//!   such a request of this mount in progress is not waited for: the kernel drops
//!   it once that request is answered (`crate::busy`), and two mounts changing one
//!   directory never wait for each other.
//! - **Leases.** A poll unanswered for half of `FEED_LEASE` ends the trust in what
//!   the kernel was told: the mount drops everything it cached and uses the short
//!   `attr_timeout` and `entry_timeout` until the feed answers again (the server
//!   stops waiting for the mount after a whole lease).
//! - A feed that lost changes (its server restarted, or this mount fell more than
//!   the server keeps behind, or the server stopped waiting for it) drops
//!   everything cached. While any feed is not followed the short times apply, as
//!   without feeds.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fuser::INodeNo;
use pvfs_client::Errno;
use pvfs_proto::feed::FEED_LEASE;
use pvfs_proto::{Changed, Handle};

use crate::attr::ino_of;
use crate::inner::Inner;

/// How long one poll waits on its server for a change (the server answers a poll
/// with nothing to say after at most `pvfs_proto::feed::FEED_HEARTBEAT`).
const POLL_WAIT: Duration = Duration::from_secs(5);

/// The pause before polling a server again after a failed poll.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// How often a wait for the kernel checks whether the directory it waits on got a
/// request of this mount in progress.
const BUSY_CHECK: Duration = Duration::from_millis(1);

/// What the kernel is told to forget.
enum Forget {
    /// An object's attributes and cached pages.
    Inode(INodeNo),
    /// A name in a directory (positive or negative).
    Entry(INodeNo, OsString),
}

/// Starts following every server's feed on `rt`.
pub(crate) fn start(inner: &Arc<Inner>, rt: &tokio::runtime::Handle) -> std::io::Result<()> {
    if inner.notifier.get().is_none() {
        return Ok(());
    }
    for server in 0..inner.servers() {
        rt.spawn(follow(inner.clone(), server));
    }
    Ok(())
}

/// Follows the feed of `server` for as long as the mount lives.
async fn follow(inner: Arc<Inner>, server: usize) {
    let (mut epoch, mut since) = (0, 0);
    let mut live = false;
    loop {
        // Unanswered for half a lease, the poll ends: the server stops waiting for
        // this mount after a whole one, so what the kernel holds is dropped first.
        let polled = tokio::time::timeout(
            FEED_LEASE / 2,
            inner.client.changes(server, epoch, since, POLL_WAIT),
        )
        .await;
        let failed = match polled {
            Ok(Ok(answer)) => {
                let mut forgets = Vec::new();
                if answer.lost {
                    tracing::info!(
                        server,
                        "changes were lost (the server restarted, or stopped waiting for \
                         this mount?): dropping the mount's caches"
                    );
                    forgets = forget_all(&inner);
                }
                for change in &answer.changes {
                    forgets.extend(forget(&inner, change));
                }
                // Dropped before asking again: the next poll tells the server so.
                apply(&inner, forgets).await;
                if !live {
                    live = true;
                    inner.feeds_live.fetch_add(1, Ordering::AcqRel);
                }
                (epoch, since) = (answer.epoch, answer.next);
                continue;
            }
            Ok(Err(e)) if matches!(e.errno, Errno::EPERM | Errno::EACCES) => {
                // Not a key-holding node: names and attributes expire by time only.
                tracing::info!(server, "no change feed for this mount ({e}): caches expire after the attribute and entry timeouts");
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", FEED_LEASE / 2),
        };
        if live {
            live = false;
            inner.feeds_live.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(
                server,
                "change feed interrupted ({failed}): dropping the mount's caches"
            );
            // Not waited for: the feed goes on meanwhile.
            let inner2 = inner.clone();
            tokio::spawn(async move {
                let all = forget_all(&inner2);
                apply(&inner2, all).await;
            });
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Has the kernel forget `forgets`, and waits until it did, except for names in a
/// directory with a request of this mount in progress (the kernel drops those once
/// the request is answered: `crate::busy`). Off the runtime's threads: the kernel
/// may wait for requests in progress.
async fn apply(inner: &Inner, forgets: Vec<Forget>) {
    if forgets.is_empty() {
        return;
    }
    let Some(notifier) = inner.notifier.get().cloned() else {
        return;
    };
    let mut inodes = Vec::new();
    let mut by_dir: BTreeMap<u64, Vec<OsString>> = BTreeMap::new();
    for f in forgets {
        match f {
            Forget::Inode(ino) => inodes.push(ino),
            Forget::Entry(dir, name) => by_dir.entry(dir.0).or_default().push(name),
        }
    }
    let mut waits = Vec::new();
    if !inodes.is_empty() {
        let n = notifier.clone();
        let done = tokio::task::spawn_blocking(move || {
            for ino in inodes {
                report(n.inval_inode(ino, 0, 0));
            }
        });
        waits.push((None, done));
    }
    for (dir, names) in by_dir {
        let n = notifier.clone();
        let dir = INodeNo(dir);
        let done = tokio::task::spawn_blocking(move || {
            for name in names {
                report(n.inval_entry(dir, &name));
            }
        });
        waits.push((Some(dir), done));
    }
    for (dir, mut done) in waits {
        let Some(dir) = dir else {
            let _ = done.await;
            continue;
        };
        loop {
            tokio::select! {
                _ = &mut done => break,
                () = tokio::time::sleep(BUSY_CHECK) => {
                    if inner.busy.is_busy(dir) {
                        // It goes through once this mount's request there is answered.
                        break;
                    }
                }
            }
        }
    }
}

/// Logs a failed kernel invalidation (ENOENT: the kernel has nothing of it cached).
fn report(done: std::io::Result<()>) {
    if let Err(e) = done {
        if e.raw_os_error() != Some(libc::ENOENT) {
            tracing::debug!("kernel invalidation failed: {e}");
        }
    }
}

/// What the kernel and the mount forget for one change.
fn forget(inner: &Inner, change: &Changed) -> Vec<Forget> {
    tracing::trace!(?change, "another client's change");
    let mut out = Vec::with_capacity(2);
    // A datafile's change is its file's (size, times, contents).
    let handle = inner
        .tables
        .file_of_datafile(change.handle)
        .unwrap_or(change.handle);
    inner.tables.forget_cached(handle);
    if change.entry.is_none() {
        // Maybe its last name went: a hold kept after its last close ends.
        inner.client.held_changed(handle);
    }
    out.push(Forget::Inode(ino_of(inner.root, handle)));
    if let Some((dir, name)) = &change.entry {
        inner.tables.forget_name(*dir, name);
        inner.tables.dir_unknown(*dir);
        out.push(Forget::Entry(ino_of(inner.root, *dir), name.into()));
    }
    out
}

/// Everything the mount knows to forget, after a feed lost changes.
fn forget_all(inner: &Inner) -> Vec<Forget> {
    let (handles, names) = inner.tables.forget_everything();
    let mut out: Vec<Forget> = handles
        .into_iter()
        .map(|h: Handle| Forget::Inode(ino_of(inner.root, h)))
        .collect();
    out.extend(
        names
            .into_iter()
            .map(|(dir, name)| Forget::Entry(ino_of(inner.root, dir), name.into())),
    );
    out
}
