//! Attributes of other servers' objects, cached for permission checks
//! (`crate::perms`): an object's attributes asked of its owner are kept for at most
//! a time to live ([`TTL`]), and dropped at once when the owner says the object's
//! permissions changed (`Forget`). If the owner cannot be reached, or its store
//! failed, what is cached is used whatever its age: the owner cannot change it
//! meanwhile.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

use pvfs_proto::{Attr, Errno, Handle};

use crate::error::OpResult;

/// How long another server's object's attributes are used without asking again.
pub const TTL: Duration = Duration::from_secs(5);
/// Most objects cached (beyond it, the oldest half goes).
const MAX: usize = 65536;

/// Cached attributes of other servers' objects.
pub struct AttrCache {
    map: Mutex<HashMap<Handle, (Attr, Instant)>>,
    ttl: Duration,
}

impl Default for AttrCache {
    fn default() -> AttrCache {
        AttrCache::new(TTL)
    }
}

impl AttrCache {
    /// An empty cache whose entries are used without asking again for `ttl`.
    pub fn new(ttl: Duration) -> AttrCache {
        AttrCache {
            map: Mutex::new(HashMap::new()),
            ttl,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Handle, (Attr, Instant)>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn put(&self, attr: Attr) {
        let mut m = self.lock();
        if m.len() >= MAX {
            let mut ages: Vec<Instant> = m.values().map(|(_, t)| *t).collect();
            ages.sort();
            let cut = ages[ages.len() / 2];
            m.retain(|_, (_, t)| *t > cut);
        }
        m.insert(attr.handle, (attr, Instant::now()));
    }

    /// The attributes of object `handle`: cached ones younger than the time to live,
    /// else those `ask_owner` gets from the object's owner (then cached). If the owner
    /// is down, hung or its store failed, what is cached is used whatever its age; if
    /// it says there is no such object, what is cached goes.
    pub async fn get(
        &self,
        handle: Handle,
        ask_owner: impl Future<Output = OpResult<Attr>>,
    ) -> OpResult<Attr> {
        let cached = self.lock().get(&handle).cloned();
        if let Some((attr, at)) = &cached {
            if at.elapsed() < self.ttl {
                return Ok(attr.clone());
            }
        }
        match ask_owner.await {
            Ok(attr) => {
                self.put(attr.clone());
                Ok(attr)
            }
            // The owner is down, hung, or its store failed (it answers ENOSPC or EIO
            // until it heals): what is cached cannot have changed meanwhile.
            Err(e)
                if matches!(
                    e.errno,
                    Errno::EHOSTDOWN | Errno::ETIMEDOUT | Errno::EIO | Errno::ENOSPC
                ) =>
            {
                match cached {
                    Some((attr, _)) => {
                        tracing::debug!(handle, "owner unreachable ({e}); using cached attributes");
                        Ok(attr)
                    }
                    None => Err(e),
                }
            }
            Err(e) => {
                if e.errno == Errno::ENOENT {
                    self.forget(&[handle]);
                }
                Err(e)
            }
        }
    }

    /// Drops what is cached of `handles`.
    pub fn forget(&self, handles: &[Handle]) {
        let mut m = self.lock();
        for h in handles {
            m.remove(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{no_object, OpError};
    use std::cell::Cell;

    fn attr(handle: Handle, mode: u32) -> Attr {
        Attr {
            handle,
            mode,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            atime: Default::default(),
            mtime: Default::default(),
            ctime: Default::default(),
            detail: pvfs_proto::ObjDetail::Symlink { target: "t".into() },
            blocks: 0,
            acl: None,
        }
    }

    /// An owner answering `answer`, counting how often it is asked.
    async fn owner(asked: &Cell<u32>, answer: OpResult<Attr>) -> OpResult<Attr> {
        asked.set(asked.get() + 1);
        answer
    }

    #[tokio::test]
    async fn fresh_entries_spare_the_owner_and_stale_ones_serve_only_while_it_is_away() {
        let asked = Cell::new(0);
        let fresh = AttrCache::new(Duration::from_secs(3600));
        assert_eq!(
            fresh
                .get(7, owner(&asked, Ok(attr(7, 0o600))))
                .await
                .unwrap()
                .mode,
            0o600
        );
        // Within the time to live the owner is not asked (its answer would differ).
        let again = fresh
            .get(7, owner(&asked, Ok(attr(7, 0o644))))
            .await
            .unwrap();
        assert_eq!((again.mode, asked.get()), (0o600, 1));
        // Forgotten (the owner said its permissions changed): asked again.
        fresh.forget(&[7]);
        let after = fresh
            .get(7, owner(&asked, Ok(attr(7, 0o644))))
            .await
            .unwrap();
        assert_eq!((after.mode, asked.get()), (0o644, 2));

        // Every entry is stale at once: each call asks the owner.
        let stale = AttrCache::new(Duration::ZERO);
        stale
            .get(9, owner(&asked, Ok(attr(9, 0o600))))
            .await
            .unwrap();
        let changed = stale
            .get(9, owner(&asked, Ok(attr(9, 0o640))))
            .await
            .unwrap();
        assert_eq!((changed.mode, asked.get()), (0o640, 4));
        // The owner is down: the stale entry serves.
        let down = OpError::posix(Errno::EHOSTDOWN, "down");
        let served = stale
            .get(9, owner(&asked, Err(down.clone())))
            .await
            .unwrap();
        assert_eq!(served.mode, 0o640);
        // Nothing cached to fall back on: the error.
        let e = stale.get(10, owner(&asked, Err(down))).await.unwrap_err();
        assert_eq!(e.errno, Errno::EHOSTDOWN);
        // Refused for another reason: the error, the entry kept.
        let denied = OpError::denied(Errno::EACCES, "no");
        let e = stale.get(9, owner(&asked, Err(denied))).await.unwrap_err();
        assert_eq!(e.errno, Errno::EACCES);
        let down = OpError::posix(Errno::ETIMEDOUT, "hung");
        assert!(stale.get(9, owner(&asked, Err(down.clone()))).await.is_ok());
        // The object is gone: the entry goes with it.
        let gone = stale
            .get(9, owner(&asked, Err(no_object(9))))
            .await
            .unwrap_err();
        assert_eq!(gone.errno, Errno::ENOENT);
        let e = stale.get(9, owner(&asked, Err(down))).await.unwrap_err();
        assert_eq!(e.errno, Errno::ETIMEDOUT, "nothing cached any more");
        assert_eq!(asked.get(), 10);
    }
}
