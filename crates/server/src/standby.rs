//! The copies this server keeps of other metadata servers' stores, as their
//! standby (`docs/replication.md`, "Metadata: a primary and standbys"): one
//! [`StandbyStore`] per group, in `<storage>/groups/<primary's name>/`, fed by the
//! group's primary (`Replicate`, `crate::handlers::replicate`).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pvfs_config::Config;
use pvfs_proto::map::{ClusterMap, Held};
use pvfs_storage::{StandbyStore, SyncPolicy};

/// One group's copy, and a signal of its moving on (a batch of records that
/// arrived before its predecessor waits for it).
pub struct GroupCopy {
    /// The copy.
    pub store: Arc<StandbyStore>,
    /// Notified after every step applied to it.
    pub moved: tokio::sync::Notify,
    /// The copy followed its primary until this server came back from being out
    /// (it stopped following then), and has not begun another copy since: it holds
    /// every change the group acknowledged before this server went out. Kept in
    /// memory only (a restart forgets it).
    kept: std::sync::atomic::AtomicBool,
}

impl GroupCopy {
    /// The copy begins anew (a primary sends a whole copy): it no longer holds
    /// what it held when this server went out.
    pub fn renew(&self) {
        self.kept.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// The standby copies of one server, by group.
pub struct Standbys {
    sync: SyncPolicy,
    /// This server.
    me: u32,
    /// The groups this server may be a standby of (indices of their primaries):
    /// those the configuration makes it a member of, and, for a metadata server,
    /// every other, which it joins as the heir of a lost member
    /// (`docs/replication.md`, "Rebuild").
    groups: Vec<usize>,
    /// The configured members of each group (`Config::meta_group`), in the order
    /// of `groups`.
    members: Vec<Vec<u32>>,
    /// Where each group's copy lives, `<storage>/groups/<primary's name>`, in the
    /// order of `groups`.
    dirs: Vec<PathBuf>,
    open: Mutex<HashMap<usize, Arc<GroupCopy>>>,
    /// The groups whose copy this server serves as their primary now
    /// (`crate::promote`): not a standby's copy while they are.
    taken: Mutex<HashSet<usize>>,
    /// The map version of the stay as recovering whose start [`Standbys::rejoined`]
    /// has seen (0: none).
    rejoined: std::sync::atomic::AtomicU64,
}

impl Standbys {
    /// The standby copies server `me` of `config` keeps (none without metadata
    /// copies), synced as `sync` says: of the groups it stands by for, and of its
    /// own (kept while another server leads it, after a failover).
    pub fn new(config: &Config, me: usize, sync: SyncPolicy) -> Standbys {
        let meta = config.servers[me].roles.contains(pvfs_proto::Roles::META);
        let groups: Vec<usize> = config
            .meta_servers()
            .into_iter()
            .filter(|&g| {
                let group = config.meta_group(g);
                group.len() > 1 && (meta || group.contains(&(me as u32)))
            })
            .collect();
        let dir = config.servers[me].storage.join("groups");
        Standbys {
            sync,
            me: me as u32,
            members: groups.iter().map(|&g| config.meta_group(g)).collect(),
            dirs: groups
                .iter()
                .map(|&g| dir.join(&config.servers[g].name))
                .collect(),
            groups,
            open: Mutex::new(HashMap::new()),
            taken: Mutex::default(),
            rejoined: Default::default(),
        }
    }

    /// No copies (the context of a group taken over keeps none).
    pub fn none(sync: SyncPolicy) -> Standbys {
        Standbys {
            sync,
            me: 0,
            members: Vec::new(),
            groups: Vec::new(),
            dirs: Vec::new(),
            open: Mutex::new(HashMap::new()),
            taken: Mutex::default(),
            rejoined: Default::default(),
        }
    }

    /// This server is recovering since map version `since` (back from down): records
    /// may have gone by while it was away, so every copy stops following until its
    /// primary sends a new one; once per stay as recovering. Until then neither
    /// catch-up nor a takeover counts the copies as current.
    pub fn rejoined(&self, since: u64) {
        use std::sync::atomic::Ordering;
        if self.rejoined.swap(since, Ordering::AcqRel) == since {
            return;
        }
        let open: Vec<(usize, Arc<GroupCopy>)> = self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(g, c)| (*g, c.clone()))
            .collect();
        for (g, c) in open {
            c.kept.store(c.store.following(), Ordering::Release);
            if let Err(e) = c.store.unfollow() {
                tracing::warn!(group = g, "cannot stop following: {e}");
            }
        }
    }

    /// Whether the copy of `group` followed its primary until this server came
    /// back from being out, and began no other copy since ([`GroupCopy`]).
    pub fn kept(&self, group: usize) -> bool {
        use std::sync::atomic::Ordering;
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&group)
            .is_some_and(|c| c.kept.load(Ordering::Acquire))
    }

    /// How the copies sync their logs (the server's `[defaults] metadata_sync`).
    pub fn sync(&self) -> SyncPolicy {
        self.sync
    }

    /// Where the copy of `group` lives, if this server keeps one.
    pub fn dir(&self, group: usize) -> Option<PathBuf> {
        let k = self.groups.iter().position(|&g| g == group)?;
        Some(self.dirs[k].clone())
    }

    /// Closes the copy of `group` for good: it is about to be served as the group's
    /// store; `get` refuses it until [`Standbys::give_back`].
    pub fn take(&self, group: usize) {
        let copy = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            self.taken
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(group);
            open.remove(&group)
        };
        // Closed for good: a step already on its way to it is refused.
        if let Some(c) = copy {
            if let Err(e) = c.store.close() {
                tracing::warn!(group, "cannot close the standby copy: {e}");
            }
        }
    }

    /// Whether `group`'s copy is the group's store (taken over here), not a
    /// standby's.
    pub fn is_taken(&self, group: usize) -> bool {
        self.taken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&group)
    }

    /// `group`'s copy is a standby's again (no longer served here).
    pub fn give_back(&self, group: usize) {
        self.taken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&group);
    }

    /// The groups this server may be a standby of.
    pub fn groups(&self) -> &[usize] {
        &self.groups
    }

    /// Whether this server holds a place in metadata group `group` under `map`
    /// (a configured member not lost, or the heir of one): its copy counts only
    /// then.
    pub fn holds_place(&self, map: &ClusterMap, group: usize) -> bool {
        self.groups
            .iter()
            .position(|&g| g == group)
            .is_some_and(|k| map.holds_of(Held::Meta, &self.members[k], self.me))
    }

    /// The copy of `group` stops following (this server left the group: its
    /// primary ships it nothing more), so it never counts as current until a new
    /// copy.
    pub fn unfollow(&self, group: usize) {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = open.get(&group) {
            c.renew();
        }
        if let Some(c) = open.get(&group).filter(|c| c.store.following()) {
            if let Err(e) = c.store.unfollow() {
                tracing::warn!(group, "cannot stop following: {e}");
            }
        }
    }

    /// The copy of group `group`, opened on first use; None if this server is not
    /// one of its standbys.
    pub fn get(&self, group: usize) -> std::io::Result<Option<Arc<GroupCopy>>> {
        let Some(k) = self.groups.iter().position(|&g| g == group) else {
            return Ok(None);
        };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        // Under the lock of the open copies, as `take` marks it.
        if self
            .taken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&group)
        {
            return Ok(None);
        }
        if let Some(s) = open.get(&group) {
            return Ok(Some(s.clone()));
        }
        let copy = Arc::new(GroupCopy {
            store: Arc::new(StandbyStore::open(&self.dirs[k], self.sync)?),
            moved: tokio::sync::Notify::new(),
            kept: Default::default(),
        });
        open.insert(group, copy.clone());
        Ok(Some(copy))
    }

    /// Whether the copy of `group` is whole and follows its primary's records.
    pub fn following(&self, group: usize) -> bool {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&group).is_some_and(|c| c.store.following())
    }

    /// Checkpoints every copy (a clean stop).
    pub fn close(&self) {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        for (g, c) in open.iter() {
            if let Err(e) = c.store.close() {
                tracing::warn!(group = g, "cannot close the standby copy: {e}");
            }
        }
    }
}
