//! Invariants of the namespace, read straight from the stores of the running servers
//! after every operation: every name leads to an object; every name is on the server
//! its directory's sharding puts it on; and, once the file system is quiet and fsck
//! has counted the names, every file's link count is its number of names and every
//! object but the root has a name.

use std::collections::{BTreeMap, BTreeSet};

use pvfs_proto::{Attr, DirEntry, Handle, ObjDetail};

use crate::cluster::Cluster;
use crate::Failure;

/// What one look at all stores found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Seen {
    /// Objects on the running metadata servers.
    pub objects: usize,
    /// Entries on the running metadata servers.
    pub entries: usize,
}

/// Objects by handle, with the server each was found on.
type Objects = BTreeMap<Handle, (usize, Attr)>;
/// Entries as (server, directory, entry).
type Entries = Vec<(usize, Handle, DirEntry)>;

/// Every object and entry of every running metadata server.
fn gather(cluster: &Cluster) -> Result<(Objects, Entries), Failure> {
    let mut objects = BTreeMap::new();
    let mut entries = Vec::new();
    for i in cluster.config.meta_servers() {
        let Some(ctx) = cluster.ctx(i) else { continue };
        let view = ctx
            .meta
            .read()
            .map_err(|e| Failure::Check(format!("{}: store unreadable: {e}", cluster.name(i))))?;
        let bad = |e: pvfs_storage::StorageError| {
            Failure::Check(format!("{}: store unreadable: {e}", cluster.name(i)))
        };
        for a in view.objects_after(None, usize::MAX).map_err(bad)? {
            objects.insert(a.handle, (i, a));
        }
        for (dir, e) in view.entries_after(None, usize::MAX).map_err(bad)? {
            entries.push((i, dir, e));
        }
    }
    Ok((objects, entries))
}

/// The invariants that hold at every moment, whatever is in flight or crashed.
pub fn always(cluster: &Cluster) -> Result<Seen, Failure> {
    let (objects, entries) = gather(cluster)?;
    let up = |h: Handle| cluster.config.owner_of(h).is_some_and(|o| cluster.is_up(o));
    for (server, dir, e) in &entries {
        if up(e.handle) && !objects.contains_key(&e.handle) {
            return Err(Failure::Check(format!(
                "entry {:?} of directory {dir:#x} on {} leads to {:#x}, which does not \
                 exist (a name without its object)",
                e.name,
                cluster.name(*server),
                e.handle
            )));
        }
        if let Some((_, d)) = objects.get(dir) {
            if let ObjDetail::Dir { shards, .. } = d.detail {
                let right = cluster.config.entry_server(*dir, shards, &e.name);
                if right != *server {
                    return Err(Failure::Check(format!(
                        "entry {:?} of directory {dir:#x} is on {}, its shard is on {}",
                        e.name,
                        cluster.name(*server),
                        cluster.name(right)
                    )));
                }
            }
        }
    }
    Ok(Seen {
        objects: objects.len(),
        entries: entries.len(),
    })
}

/// The invariants of a quiet file system after fsck repaired it (every server up):
/// every file counts exactly its names, every directory has one name, every object
/// but the root has a name.
pub fn quiet(cluster: &Cluster) -> Result<Seen, Failure> {
    let seen = always(cluster)?;
    let (objects, entries) = gather(cluster)?;
    let root = cluster.config.root_handle();
    let mut names: BTreeMap<Handle, usize> = BTreeMap::new();
    for (_, _, e) in &entries {
        *names.entry(e.handle).or_default() += 1;
    }
    let dirs: BTreeSet<Handle> = objects
        .values()
        .filter(|(_, a)| a.is_dir())
        .map(|(_, a)| a.handle)
        .collect();
    for (h, (server, a)) in &objects {
        let n = names.get(h).copied().unwrap_or(0);
        if *h == root {
            continue;
        }
        if n == 0 {
            return Err(Failure::Check(format!(
                "object {h:#x} on {} has no name after fsck",
                cluster.name(*server)
            )));
        }
        if dirs.contains(h) {
            if n != 1 {
                return Err(Failure::Check(format!("directory {h:#x} has {n} names")));
            }
        } else if a.nlink as usize != n {
            return Err(Failure::Check(format!(
                "object {h:#x} counts {} links and has {n} names after fsck",
                a.nlink
            )));
        }
    }
    Ok(seen)
}

/// Every entry and object of the running metadata servers, one per line (for a
/// failure's report).
pub fn dump(cluster: &Cluster) -> String {
    let Ok((objects, entries)) = gather(cluster) else {
        return "(stores unreadable)".into();
    };
    let mut out = String::new();
    for (server, dir, e) in &entries {
        let obj = objects
            .get(&e.handle)
            .map_or("MISSING".to_string(), |(s, a)| {
                format!("on {} nlink {}", cluster.name(*s), a.nlink)
            });
        out.push_str(&format!(
            "  {}: {dir:#x}/{} -> {:#x} ({obj})\n",
            cluster.name(*server),
            e.name,
            e.handle
        ));
    }
    out
}
