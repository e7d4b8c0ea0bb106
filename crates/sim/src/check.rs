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

/// The store of each metadata group that can be read now, by group (a group is
/// known by its server's index): without replication, the store of each running
/// metadata server; with it, the copy that serves the group now (the map's store of
/// the group: its own server's, or that of the standby that took it over), if it
/// runs and has opened it.
fn stores(cluster: &Cluster) -> Vec<(usize, pvfs_storage::MetaStore)> {
    let metas = cluster.config.meta_servers();
    if cluster.config.replication.authority.is_empty() {
        return metas
            .into_iter()
            .filter_map(|g| Some((g, cluster.ctx(g)?.meta.clone())))
            .collect();
    }
    let view = (0..cluster.len())
        .filter_map(|i| cluster.ctx(i)?.lease.view().ok())
        .max_by_key(|v| v.map.version);
    let Some(view) = view else {
        return Vec::new();
    };
    metas
        .into_iter()
        .filter_map(|g| {
            let s = view.store(g)?;
            let ctx = cluster.ctx(s)?;
            let taken = ctx.taken_over.get()?;
            // A group taken over (by its standby, or back by its own server from
            // its copy) is served by the copy's store; a server's own store serves
            // its group until it is superseded.
            match taken.store_of(cluster.name(g)) {
                Some(store) => Some((g, store)),
                None if s == g && !taken.superseded() => Some((g, ctx.meta.clone())),
                None => None,
            }
        })
        .collect()
}

/// Every object and entry of every metadata group's store that can be read now, and
/// those groups.
fn gather(cluster: &Cluster) -> Result<(Objects, Entries, BTreeSet<usize>), Failure> {
    let mut objects = BTreeMap::new();
    let mut entries = Vec::new();
    let mut groups = BTreeSet::new();
    for (i, meta) in stores(cluster) {
        groups.insert(i);
        let view = meta
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
    Ok((objects, entries, groups))
}

/// The invariants that hold at every moment, whatever is in flight or crashed.
pub fn always(cluster: &Cluster) -> Result<Seen, Failure> {
    let (objects, entries, groups) = gather(cluster)?;
    let up = |h: Handle| {
        cluster
            .config
            .owner_of(h)
            .is_some_and(|o| groups.contains(&o))
    };
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
    let (objects, entries, groups) = gather(cluster)?;
    if groups.len() < cluster.config.meta_servers().len() {
        // A group whose store cannot be read: names and links are not all here.
        return Ok(seen);
    }
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
    let Ok((objects, entries, _)) = gather(cluster) else {
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

/// What the replication checks remember between looks: the map each version
/// names, and the newest version each running server knew.
#[derive(Default)]
pub struct Maps {
    /// The servers' entries of every map version seen, by version.
    by_version: BTreeMap<u64, Vec<pvfs_proto::map::MapServer>>,
    /// Per server: its crashes when last looked at, and the newest version it knew
    /// then.
    newest: BTreeMap<usize, (u64, u64)>,
    /// Map versions seen in which a server is down.
    pub downs: u64,
    /// Map versions seen in which a metadata group is led by another server than
    /// its own (taken over by its standby).
    pub taken_over: u64,
    /// Looks at the maps.
    pub looks: u64,
    /// Where each new map version goes, with every server's state in it.
    pub trace: Option<crate::Trace>,
}

impl Maps {
    /// The newest map any running server knows, if one knows any.
    pub fn newest(cluster: &Cluster) -> Option<pvfs_proto::map::ClusterMap> {
        (0..cluster.len())
            .filter_map(|i| cluster.ctx(i)?.lease.map().ok())
            .max_by_key(|m| m.version)
    }

    /// Whether the newest map calls every server up.
    pub fn all_up(cluster: &Cluster) -> bool {
        Maps::newest(cluster).is_some_and(|m| {
            m.servers.len() == cluster.len()
                && m.servers
                    .iter()
                    .all(|s| s.state == pvfs_proto::map::ServerState::Up)
        })
    }

    /// The replication invariants that hold at every moment
    /// (`docs/replication.md`, "Invariants"): every server that knows map version
    /// `v` knows the same map (so one version names one head per datafile and one
    /// primary per metadata group); no server's map goes back while it runs; and,
    /// now, at most one server answers for a metadata group (its fence for the
    /// group holds under its lease and map).
    pub fn check(&mut self, cluster: &Cluster) -> Result<(), Failure> {
        self.looks += 1;
        let mut known = Vec::new();
        for i in 0..cluster.len() {
            let Some(ctx) = cluster.ctx(i) else { continue };
            let Ok(map) = ctx.lease.map() else { continue };
            let crashes = cluster.crashes(i);
            if let Some(&(c, v)) = self.newest.get(&i) {
                if c == crashes && map.version < v {
                    return Err(Failure::Check(format!(
                        "{} knew map version {v} and now knows {} (a map went back)",
                        cluster.name(i),
                        map.version
                    )));
                }
            }
            self.newest.insert(i, (crashes, map.version));
            match self.by_version.get(&map.version) {
                Some(seen) if *seen != map.servers => {
                    return Err(Failure::Check(format!(
                        "two maps of version {}: {seen:?} and, at {}, {:?}",
                        map.version,
                        cluster.name(i),
                        map.servers
                    )));
                }
                Some(_) => {}
                None => {
                    use pvfs_proto::map::ServerState;
                    if map.servers.iter().any(|s| s.state == ServerState::Down) {
                        self.downs += 1;
                    }
                    if map.servers.iter().any(|s| s.led_by.is_some()) {
                        self.taken_over += 1;
                    }
                    if let Some(t) = &self.trace {
                        let states: Vec<String> = map
                            .servers
                            .iter()
                            .enumerate()
                            .map(|(k, e)| {
                                let led =
                                    e.led_by.map_or(String::new(), |l| format!(" led by s{l}"));
                                format!("s{k} {} joined {}{led}", e.state.name(), e.joined)
                            })
                            .collect();
                        t.push(format!("map {}: {}", map.version, states.join(", ")));
                    }
                    self.by_version.insert(map.version, map.servers.clone());
                }
            }
            // The metadata groups this server answers for now: its own while its
            // fence holds, and those it took over whose fences hold. A map naming
            // it primary of a group whose store is another copy's (it never
            // served) does not: it hands the group back or copies it first.
            let mut answering = ctx.taken_over.get().map_or(Vec::new(), |t| t.answering());
            if ctx.fence.replicated() && ctx.fence.holds(&ctx.lease) {
                answering.push(i);
            }
            known.push((i, answering, map));
        }
        for g in cluster.config.meta_servers() {
            let claim: Vec<usize> = known
                .iter()
                .filter(|(_, answering, _)| answering.contains(&g))
                .map(|k| k.0)
                .collect();
            if claim.len() > 1 {
                let maps: Vec<String> = known
                    .iter()
                    .filter(|k| claim.contains(&k.0))
                    .map(|(i, _, m)| format!("{}: {m:?}", cluster.name(*i)))
                    .collect();
                return Err(Failure::Check(format!(
                    "servers {claim:?} each answer for metadata group {} under their \
                     lease and map: {maps:#?}",
                    cluster.name(g)
                )));
            }
        }
        Ok(())
    }
}
