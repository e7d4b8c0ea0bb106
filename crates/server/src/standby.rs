//! The copies this server keeps of other metadata servers' stores, as their
//! standby (`docs/replication.md`, "Metadata: a primary and standbys"): one
//! [`StandbyStore`] per group, in `<storage>/groups/<primary's name>/`, fed by the
//! group's primary (`Replicate`, `crate::handlers::replicate`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pvfs_config::Config;
use pvfs_storage::{StandbyStore, SyncPolicy};

/// One group's copy, and a signal of its moving on (a batch of records that
/// arrived before its predecessor waits for it).
pub struct GroupCopy {
    /// The copy.
    pub store: Arc<StandbyStore>,
    /// Notified after every step applied to it.
    pub moved: tokio::sync::Notify,
}

/// The standby copies of one server, by group.
pub struct Standbys {
    sync: SyncPolicy,
    /// The groups this server is a standby of (indices of their primaries).
    groups: Vec<usize>,
    /// Where each group's copy lives, `<storage>/groups/<primary's name>`, in the
    /// order of `groups`.
    dirs: Vec<PathBuf>,
    open: Mutex<HashMap<usize, Arc<GroupCopy>>>,
}

impl Standbys {
    /// The standby copies server `me` of `config` keeps (none without metadata
    /// copies), synced as `sync` says.
    pub fn new(config: &Config, me: usize, sync: SyncPolicy) -> Standbys {
        let groups: Vec<usize> = config
            .meta_servers()
            .into_iter()
            .filter(|&g| g != me && config.meta_group(g).contains(&(me as u32)))
            .collect();
        let dir = config.servers[me].storage.join("groups");
        Standbys {
            sync,
            dirs: groups
                .iter()
                .map(|&g| dir.join(&config.servers[g].name))
                .collect(),
            groups,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The groups this server is a standby of.
    pub fn groups(&self) -> &[usize] {
        &self.groups
    }

    /// The copy of group `group`, opened on first use; None if this server is not
    /// one of its standbys.
    pub fn get(&self, group: usize) -> std::io::Result<Option<Arc<GroupCopy>>> {
        let Some(k) = self.groups.iter().position(|&g| g == group) else {
            return Ok(None);
        };
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = open.get(&group) {
            return Ok(Some(s.clone()));
        }
        let copy = Arc::new(GroupCopy {
            store: Arc::new(StandbyStore::open(&self.dirs[k], self.sync)?),
            moved: tokio::sync::Notify::new(),
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
