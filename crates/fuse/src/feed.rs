//! Coherent caching: the mount follows every server's change feed and has the
//! kernel forget what other clients changed.
//!
//! While every feed is followed, the kernel may keep names and attributes for the
//! mount's `cache_timeout` (and cached file pages across opens); a change another
//! client makes reaches this mount as soon as its server's long poll answers
//! (`Request::Changes`), and is dropped from the kernel's caches and the mount's
//! own tables at once. While any feed is not followed (a server down, or a mount
//! that may not ask), the short `attr_timeout` and `entry_timeout` apply, as
//! without feeds. A feed that lost changes (its server restarted, or this mount
//! fell more than the server keeps behind) drops everything cached. The rules are
//! in `docs/fuse.md`, "Caching".

use std::ffi::OsString;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fuser::INodeNo;
use pvfs_client::Errno;
use pvfs_proto::{Changed, Handle};

use crate::attr::ino_of;
use crate::inner::Inner;

/// How long one poll waits on its server for a change (the server waits at most a
/// third of its request timeout).
const POLL_WAIT: Duration = Duration::from_secs(5);

/// The pause before polling a server again after a failed poll.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Most invalidations queued for the kernel; a feed waits beyond it.
const QUEUE: usize = 16 * 1024;

/// What the kernel is told to forget.
enum Forget {
    /// An object's attributes and cached pages.
    Inode(INodeNo),
    /// A name in a directory (positive or negative).
    Entry(INodeNo, OsString),
}

/// Starts following every server's feed on `rt`, with a thread that passes the
/// invalidations to the kernel (the kernel may wait on a request in progress before
/// it takes one, so they never run on the runtime's threads).
pub(crate) fn start(inner: &Arc<Inner>, rt: &tokio::runtime::Handle) -> std::io::Result<()> {
    let Some(notifier) = inner.notifier.get().cloned() else {
        return Ok(());
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Forget>(QUEUE);
    std::thread::Builder::new()
        .name("fuse-invalidate".into())
        .spawn(move || {
            while let Some(f) = rx.blocking_recv() {
                let done = match &f {
                    Forget::Inode(ino) => notifier.inval_inode(*ino, 0, 0),
                    Forget::Entry(dir, name) => notifier.inval_entry(*dir, name),
                };
                if let Err(e) = done {
                    // ENOENT: the kernel has nothing of it cached.
                    if e.raw_os_error() != Some(libc::ENOENT) {
                        tracing::debug!("kernel invalidation failed: {e}");
                    }
                }
            }
        })?;
    for server in 0..inner.servers() {
        rt.spawn(follow(inner.clone(), server, tx.clone()));
    }
    Ok(())
}

/// Follows the feed of `server` for as long as the mount lives.
async fn follow(inner: Arc<Inner>, server: usize, tx: tokio::sync::mpsc::Sender<Forget>) {
    let (mut epoch, mut since) = (0, 0);
    let mut live = false;
    loop {
        match inner.client.changes(server, epoch, since, POLL_WAIT).await {
            Ok(answer) => {
                if answer.lost {
                    tracing::info!(
                        server,
                        "changes were lost (the server restarted?): dropping the mount's caches"
                    );
                    for f in forget_all(&inner) {
                        if tx.send(f).await.is_err() {
                            return;
                        }
                    }
                }
                for change in &answer.changes {
                    for f in forget(&inner, change) {
                        if tx.send(f).await.is_err() {
                            return;
                        }
                    }
                }
                if !live {
                    live = true;
                    inner.feeds_live.fetch_add(1, Ordering::AcqRel);
                }
                (epoch, since) = (answer.epoch, answer.next);
            }
            Err(e) if matches!(e.errno, Errno::EPERM | Errno::EACCES) => {
                // Not a key-holding node: names and attributes expire by time only.
                tracing::info!(server, "no change feed for this mount ({e}): caches expire after the attribute and entry timeouts");
                return;
            }
            Err(e) => {
                if live {
                    live = false;
                    inner.feeds_live.fetch_sub(1, Ordering::AcqRel);
                    tracing::debug!(server, "change feed interrupted: {e}");
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
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
