//! `fsck`: checks the whole file system across servers and repairs what it can.
//!
//! It reads every server's state page by page (datafiles first, then objects, then
//! entries, so that anything created during the scan is seen with its parents), and
//! looks for what a crash or a lost server between the steps of a multi-step operation
//! can leave (docs/namespace.md), and for damage:
//!
//! - an entry whose object is gone (dangling entry) → the entry is removed;
//! - an entry in a directory that does not exist → the entry is removed;
//! - an entry kept on a server that does not hold its shard (invisible to lookups and
//!   listings) → moved to the right server;
//! - an object no entry names (an interrupted unlink, a file unlinked while open on a
//!   mount that died) → the object and its datafiles are removed;
//! - a directory with several names (an interrupted rename) → reported (which name is
//!   the right one cannot be known);
//! - another object whose link count is not its number of names (an interrupted
//!   unlink or hard link leaves one too many; an interrupted rename leaves a second
//!   name) → the count is set to the names found, which keeps every name valid;
//! - a directory whose recorded parent is not the directory naming it → fixed;
//! - a sealed shard of a directory that still exists (an interrupted rmdir) → unsealed;
//! - a layout naming a server that holds no data or a handle outside its range →
//!   reported;
//! - a missing datafile that its data server created and did not remove (its born log
//!   says so: docs/storage-format.md) → reported as lost data and recreated empty.
//!   Datafiles are created on their first write, so a datafile no byte ever reached
//!   does not exist, and its server never created it: that is a hole, not a finding,
//!   however far the file reaches past it (a `pwrite` of 100 bytes at offset 300000
//!   into a new file leaves three of its four datafiles uncreated);
//! - a datafile no layout names (an interrupted unlink) → removed;
//! - copies of a datafile that differ (size or CRC32C of their bytes, each read whole
//!   under its lock, and read again after a moment before it counts), or a copy with
//!   a block that does not match its checksum → the others are made what the copies
//!   of the majority hold, or with no majority what the copy at the head of the chain
//!   holds (it takes every write first), never what a damaged copy holds.
//!
//! Every destructive repair is confirmed first with a fresh look at the object or entry
//! involved, so a client working during the check does not lose a file; objects changed
//! in the last `grace` are left alone.

use pvfs_proto::req;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use pvfs_proto::{
    Attr, DirEntry, Errno, Handle, LinkDrop, ObjDetail, ObjKind, Request, Response, Timespec,
};

use crate::error::Result;
use crate::pool::unexpected;
use crate::Client;
use pvfs_proto::map::holders_of;

/// What fsck found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// An entry names an object that does not exist.
    DanglingEntry,
    /// An entry lives in a directory that does not exist.
    OrphanEntry,
    /// An entry kept on another server than its directory's shard for its name.
    MisplacedEntry,
    /// An object no entry names.
    OrphanObject,
    /// A directory with more than one name.
    MultipleNames,
    /// A file, symlink or special file whose link count is not its number of names.
    LinkCount,
    /// A directory whose recorded parent differs from the directory naming it.
    WrongParent,
    /// A sealed shard of a directory that still exists.
    StaleSeal,
    /// A layout that cannot be right.
    BadLayout,
    /// A datafile its data server created (and did not remove) is missing: its bytes
    /// are lost.
    MissingDatafile,
    /// A datafile no layout names.
    OrphanDatafile,
    /// Bytes on a datafile past its file's width: sizes do not ask it, so the file
    /// looks shorter than it is.
    PastWidth,
    /// Copies of a datafile hold different bytes.
    CopiesDiffer,
}

/// One finding.
#[derive(Clone, Debug)]
pub struct Problem {
    /// Its kind.
    pub kind: ProblemKind,
    /// One line describing it.
    pub what: String,
    /// Whether `--repair` fixed it.
    pub repaired: bool,
}

/// The outcome of a check.
#[derive(Clone, Debug, Default)]
pub struct FsckReport {
    /// Objects seen (directories, metafiles, symlinks).
    pub objects: usize,
    /// Directory entries seen.
    pub entries: usize,
    /// Datafiles present on the data servers.
    pub datafiles: usize,
    /// Files without a name that a client still has open (deleted at its last
    /// close; not a problem).
    pub open_unlinked: usize,
    /// Everything found.
    pub problems: Vec<Problem>,
}

impl FsckReport {
    /// Problems that are still there (not repaired).
    pub fn unrepaired(&self) -> usize {
        self.problems.iter().filter(|p| !p.repaired).count()
    }
}

/// Everything read from the servers.
#[derive(Default)]
struct Snapshot {
    /// Object handle -> attributes (ordered: the problems, the sums asked of the data
    /// servers and the repairs go by handle, the same in every run).
    objects: BTreeMap<Handle, Attr>,
    /// (directory, entry, server holding it).
    entries: Vec<(Handle, DirEntry, usize)>,
    /// Data server -> datafiles present.
    datafiles: BTreeMap<usize, BTreeSet<Handle>>,
    /// Data server -> datafiles it created, did not remove, and lacks (lost).
    lost: BTreeMap<usize, BTreeSet<Handle>>,
    /// (server, directory) of every sealed shard.
    seals: Vec<(usize, Handle)>,
    /// Objects clients hold open.
    held: BTreeSet<Handle>,
    /// The cluster map the scan ran under (None without an authority): where the
    /// copies of datafiles are, which servers are gone for good.
    map: Option<pvfs_proto::map::ClusterMap>,
}

/// Items asked per scan page.
const PAGE: u32 = 8192;

/// Datafiles summed per `SumDatafiles` (each is read whole).
const SUM_BATCH: usize = 64;

/// The sum fsck keeps for a copy with a block not matching its checksum (no real
/// copy's: its size is past the largest file).
const DAMAGED: (u64, u32) = (u64::MAX, 0);

impl Client {
    /// Checks the whole file system; with `repair`, fixes what can be fixed. Fails if a
    /// server does not answer (a partial view would report false damage).
    pub async fn fsck(&self, repair: bool, grace: Duration) -> Result<FsckReport> {
        let snap = self.snapshot().await?;
        let mut report = FsckReport {
            objects: snap.objects.len(),
            entries: snap.entries.len(),
            datafiles: snap.datafiles.values().map(BTreeSet::len).sum(),
            open_unlinked: 0,
            problems: Vec::new(),
        };
        let now = Timespec::now();
        let young = |a: &Attr| now.secs - a.ctime.secs < grace.as_secs() as i64;
        let mut add = |kind, what: String, repaired| {
            report.problems.push(Problem {
                kind,
                what,
                repaired,
            })
        };

        // Entries: dangling, orphaned, and the names of every object.
        let mut names: HashMap<Handle, Vec<(Handle, String)>> = HashMap::new();
        for (dir, e, server) in &snap.entries {
            let path = format!(
                "entry {:?} of directory {dir:#x} on {}",
                e.name,
                self.server_name(*server)
            );
            if !matches!(snap.objects.get(dir), Some(a) if a.kind() == ObjKind::Dir) {
                let fixed = repair && self.remove_entry_if(*server, *dir, &e.name, e.handle).await;
                add(
                    ProblemKind::OrphanEntry,
                    format!("{path}: the directory does not exist"),
                    fixed,
                );
                continue;
            }
            if let Some(ObjDetail::Dir { shards, .. }) = snap.objects.get(dir).map(|a| &a.detail) {
                let right = self.config().entry_server(*dir, *shards, &e.name);
                if right != *server {
                    let fixed = repair && self.move_entry_to(*server, right, *dir, e).await;
                    add(
                        ProblemKind::MisplacedEntry,
                        format!(
                            "{path}: it belongs on {} (lookups and listings do not see it)",
                            self.server_name(right)
                        ),
                        fixed,
                    );
                }
            }
            if !snap.objects.contains_key(&e.handle) {
                // Confirm: the object may have been created after the object scan.
                let gone = matches!(self.getattr(e.handle).await, Err(ref err) if err.errno == Errno::ENOENT);
                if gone {
                    let fixed =
                        repair && self.remove_entry_if(*server, *dir, &e.name, e.handle).await;
                    add(
                        ProblemKind::DanglingEntry,
                        format!("{path}: object {:#x} does not exist", e.handle),
                        fixed,
                    );
                }
                continue;
            }
            names
                .entry(e.handle)
                .or_default()
                .push((*dir, e.name.clone()));
        }

        // Objects: orphans, several names, wrong parents, layouts.
        let root = self.root();
        if !matches!(snap.objects.get(&root), Some(a) if a.kind() == ObjKind::Dir) {
            add(
                ProblemKind::BadLayout,
                format!("the root directory {root:#x} is missing: nothing is reachable (restore its server's storage)"),
                false,
            );
        }
        // Objects the repair removed: their datafiles are not recreated below.
        let mut removed: BTreeSet<Handle> = BTreeSet::new();
        for (h, a) in &snap.objects {
            let its = names.get(h).map(Vec::as_slice).unwrap_or(&[]);
            if *h == root {
                continue;
            }
            match its.len() {
                0 if a.nlink == 0 && snap.held.contains(h) => report.open_unlinked += 1,
                0 if young(a) => {}
                0 => {
                    let fixed = repair && self.remove_orphan(a).await;
                    if fixed {
                        removed.insert(*h);
                    }
                    add(
                        ProblemKind::OrphanObject,
                        format!("{} {h:#x} has no name", a.kind().name()),
                        fixed,
                    );
                }
                n if a.is_dir() && n > 1 => add(
                    ProblemKind::MultipleNames,
                    format!(
                        "directory {h:#x} has {n} names: {its:?} (remove the wrong one by hand)"
                    ),
                    false,
                ),
                n if !a.is_dir() && n as u64 != u64::from(a.nlink) && !young(a) => {
                    let fixed = repair && self.fix_links(a).await;
                    add(
                        ProblemKind::LinkCount,
                        format!(
                            "{} {h:#x} has {n} names but counts {} links{}",
                            a.kind().name(),
                            a.nlink,
                            if n as u64 > u64::from(a.nlink) {
                                " (an interrupted rename, or a crash during a hard link)"
                            } else {
                                " (an interrupted unlink)"
                            }
                        ),
                        fixed,
                    );
                }
                _ => {}
            }
            if let (ObjDetail::Dir { parent, .. }, [(dir, _)]) = (&a.detail, its) {
                if parent != dir {
                    let fixed = repair
                        && self
                            .rpc_owner(
                                *h,
                                Request::SetParent(req::SetParent {
                                    dir: *h,
                                    parent: *dir,
                                    ticket: None,
                                }),
                            )
                            .await
                            .is_ok();
                    add(
                        ProblemKind::WrongParent,
                        format!(
                            "directory {h:#x} records parent {parent:#x} but lives in {dir:#x}"
                        ),
                        fixed,
                    );
                }
            }
            if let ObjDetail::File { layout } = &a.detail {
                for (i, df) in layout.datafiles.iter().enumerate() {
                    let server = df.server as usize;
                    if !self.can_hold(df) {
                        add(
                            ProblemKind::BadLayout,
                            format!(
                                "file {h:#x}: datafile {i} ({:#x}) cannot be on server {server}",
                                df.handle
                            ),
                            false,
                        );
                    }
                }
            }
        }

        // Seals of directories that still exist (the root has no name but exists).
        for (server, dir) in &snap.seals {
            if snap.objects.contains_key(dir) && (names.contains_key(dir) || *dir == root) {
                let fixed = repair
                    && self
                        .rpc(
                            *server,
                            Request::SealDir(req::SealDir {
                                dir: *dir,
                                seal: false,
                                ticket: None,
                            }),
                        )
                        .await
                        .is_ok();
                add(
                    ProblemKind::StaleSeal,
                    format!(
                        "directory {dir:#x} is sealed on {} (an rmdir was interrupted)",
                        self.server_name(*server)
                    ),
                    fixed,
                );
            }
        }

        // Datafiles: lost ones (created by their server, missing from its disk), and
        // orphans. A datafile missing and never created is a hole.
        let mut referenced: BTreeMap<usize, BTreeSet<Handle>> = BTreeMap::new();
        // The servers in a line of each datafile (its holders, and those that held a
        // place of it before): a copy on one holding no place now (an heir whose lost
        // server came back, a server that handed its place on with `pvfs rebalance`)
        // is its server's to remove, which it does once it sees the map say so; it is
        // no orphan.
        let mut in_lines: BTreeMap<usize, BTreeSet<Handle>> = BTreeMap::new();
        // The datafiles of the files removed above.
        let mut of_removed: BTreeSet<Handle> = BTreeSet::new();
        for (h, a) in &snap.objects {
            let Some(layout) = a.layout() else { continue };
            // A file removed above as nameless owns nothing any more: a copy of its
            // datafiles its removal did not reach (its server was down when the
            // file lost its last name) is an orphan, removed below.
            if removed.contains(h) {
                of_removed.extend(layout.datafiles.iter().map(|df| df.handle));
                continue;
            }
            // Every copy of a datafile belongs to its file, an heir's too.
            for df in &layout.datafiles {
                for s in holders_of(snap.map.as_ref(), layout.replicas, df) {
                    referenced.entry(s as usize).or_default().insert(df.handle);
                }
                let copies: Vec<u32> = df.replicas().take(layout.replicas as usize).collect();
                if let Some(map) = snap.map.as_ref().filter(|_| copies.len() > 1) {
                    for s in map.lines(df.handle, &copies).into_iter().flatten() {
                        in_lines.entry(s as usize).or_default().insert(df.handle);
                    }
                }
            }
            let lost: Vec<(usize, &pvfs_proto::Datafile)> = layout
                .datafiles
                .iter()
                .enumerate()
                .filter(|(_, df)| {
                    snap.lost
                        .get(&(df.server as usize))
                        .is_some_and(|s| s.contains(&df.handle))
                })
                .collect();
            // A layout reported above as impossible cannot be asked about its sizes.
            if lost.is_empty() || !layout.datafiles.iter().all(|df| self.can_hold(df)) {
                continue;
            }
            // How much of the file, as its other datafiles place it, was on them.
            let all: Vec<usize> = (0..layout.datafiles.len()).collect();
            let stats =
                crate::io::datafile_stats(&self.inner.pool, &self.creds, layout, &all).await?;
            let sizes: Vec<u64> = stats.iter().map(|s| s.size).collect();
            let stripe = layout.stripe();
            let size = stripe.file_size(&sizes);
            for (i, df) in lost {
                let owed = stripe.local_size(i as u64, size);
                let fixed = repair
                    && self
                        .rpc(
                            df.server as usize,
                            Request::CreateDatafiles(req::CreateDatafiles {
                                handles: vec![df.handle],
                            }),
                        )
                        .await
                        .is_ok();
                let server = self.server_name(df.server as usize);
                let within = if owed > 0 {
                    format!(", {owed} of them within the file's size")
                } else {
                    String::new()
                };
                add(
                    ProblemKind::MissingDatafile,
                    format!(
                        "file {h:#x}: datafile {i} ({:#x} on {server}) is missing although {server} created it: the bytes written to it are lost{within}",
                        df.handle
                    ),
                    fixed,
                );
            }
        }
        // Bytes past a file's width (written by a client that skipped widening, or
        // under a metadata server restored from an older copy): the file's size
        // misses them. Repair widens the file over them.
        for (h, idx) in self.past_width(&snap).await? {
            // Confirm: the file may have been widened after the object scan.
            let now = self.getattr(h).await?;
            if now.layout().is_none_or(|l| l.width as usize > idx) {
                continue;
            }
            let fixed = repair && self.widen(h, idx as u32 + 1).await;
            add(
                ProblemKind::PastWidth,
                format!(
                    "file {h:#x}: datafile {idx} holds bytes past the file's width ({}): sizes miss them",
                    now.layout().map_or(0, |l| l.width)
                ),
                fixed,
            );
        }
        for (h, df, sums) in self.differing_copies(&snap).await? {
            // A file removed above: its copies are orphans now, not copies to mend.
            if removed.contains(&h) {
                continue;
            }
            let what = sums
                .iter()
                .map(|(s, (size, crc))| match (*size, *crc) {
                    DAMAGED => format!(
                        "{} a block not matching its checksum",
                        self.server_name(*s as usize)
                    ),
                    _ => format!(
                        "{} {size} bytes crc32c {crc:08x}",
                        self.server_name(*s as usize)
                    ),
                })
                .collect::<Vec<_>>()
                .join(", ");
            let fixed = repair && self.repair_copies(&df, &snap, &sums).await;
            add(
                ProblemKind::CopiesDiffer,
                format!(
                    "file {h:#x}: the copies of datafile {:#x} differ: {what}",
                    df.handle
                ),
                fixed,
            );
        }
        for (server, present) in &snap.datafiles {
            let known = referenced.get(server);
            let mut orphans: Vec<Handle> = present
                .iter()
                .filter(|h| !known.is_some_and(|k| k.contains(h)))
                .filter(|h| !in_lines.get(server).is_some_and(|k| k.contains(h)))
                .copied()
                .collect();
            // The removal of a file removed above took its datafiles where it reached
            // them: only those still here are orphans.
            if orphans.iter().any(|h| of_removed.contains(h)) {
                let now = self
                    .scan_handles(*server, |after| {
                        Request::ScanDatafiles(req::ScanDatafiles { after, max: PAGE })
                    })
                    .await?;
                orphans.retain(|h| !of_removed.contains(h) || now.contains(h));
            }
            for h in orphans {
                let fixed = repair && self.remove_orphan_datafile(*server, h).await;
                add(
                    ProblemKind::OrphanDatafile,
                    format!(
                        "datafile {h:#x} on {} belongs to no file",
                        self.server_name(*server)
                    ),
                    fixed,
                );
            }
        }
        Ok(report)
    }

    /// The datafiles with copies that differ, read twice a moment apart (a change on
    /// its way down a chain between two copies' sums is not a difference), with each
    /// copy's (server, (size, CRC32C)).
    async fn differing_copies(
        &self,
        snap: &Snapshot,
    ) -> Result<Vec<(Handle, pvfs_proto::Datafile, Vec<(u32, (u64, u32))>)>> {
        let mut wanted: Vec<(Handle, pvfs_proto::Datafile)> = Vec::new();
        let holds = |s: u32| {
            self.config()
                .servers
                .get(s as usize)
                .is_some_and(|c| c.roles.contains(pvfs_proto::Roles::DATA))
        };
        for (h, a) in &snap.objects {
            let Some(layout) = a.layout() else { continue };
            for df in &layout.datafiles {
                let copies = self.whole_copies(snap, df);
                if copies.len() > 1 && copies.into_iter().all(holds) {
                    wanted.push((*h, *df));
                }
            }
        }
        let mut differ = Vec::new();
        for round in 0..2 {
            let sums = self
                .sum_copies(
                    wanted
                        .iter()
                        .map(|(_, df)| (df.handle, self.whole_copies(snap, df))),
                )
                .await?;
            differ.clear();
            for (h, df) in &wanted {
                let each: Vec<(u32, (u64, u32))> = self
                    .whole_copies(snap, df)
                    .into_iter()
                    .map(|s| (s, sums.get(&(s, df.handle)).copied().unwrap_or_default()))
                    .collect();
                if each.iter().any(|(_, sum)| *sum != each[0].1) {
                    differ.push((*h, *df, each));
                }
            }
            if differ.is_empty() || round == 1 {
                break;
            }
            wanted = differ.iter().map(|(h, df, _)| (*h, *df)).collect();
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        Ok(differ)
    }

    /// The servers of the copies of `df` (a datafile of a file with copies) fsck
    /// compares: where the scan's map has them, but heirs still rebuilding theirs.
    fn whole_copies(&self, snap: &Snapshot, df: &pvfs_proto::Datafile) -> Vec<u32> {
        let listed: Vec<u32> = df.replicas().collect();
        match &snap.map {
            Some(map) if listed.len() > 1 => map.whole_holders(df.handle, &listed),
            _ => listed,
        }
    }

    /// (size, CRC32C) of every copy of `datafiles` (each a handle and the servers of
    /// its copies), by (server, handle).
    async fn sum_copies(
        &self,
        datafiles: impl Iterator<Item = (Handle, Vec<u32>)>,
    ) -> Result<HashMap<(u32, Handle), (u64, u32)>> {
        let mut by_server: BTreeMap<usize, Vec<Handle>> = BTreeMap::new();
        for (handle, servers) in datafiles {
            for s in servers {
                by_server.entry(s as usize).or_default().push(handle);
            }
        }
        let mut out = HashMap::new();
        for (server, handles) in by_server {
            for batch in handles.chunks(SUM_BATCH) {
                let request = Request::SumDatafiles(req::SumDatafiles {
                    handles: batch.to_vec(),
                });
                match self.rpc(server, request).await? {
                    Response::Sums { sums, damaged } if sums.len() == batch.len() => {
                        for (h, sum) in batch.iter().zip(sums) {
                            let sum = if damaged.contains(h) { DAMAGED } else { sum };
                            out.insert((server as u32, *h), sum);
                        }
                    }
                    other => return Err(unexpected("SumDatafiles", &other)),
                }
            }
        }
        Ok(out)
    }

    /// Makes every copy of `df` what the copies of the majority hold, or with no
    /// majority what the head of its chain holds (a copy with a damaged block is
    /// never the one copied: then another that is not); whether every copy agrees
    /// after.
    async fn repair_copies(
        &self,
        df: &pvfs_proto::Datafile,
        snap: &Snapshot,
        sums: &[(u32, (u64, u32))],
    ) -> bool {
        let copies: Vec<u32> = df.replicas().collect();
        let holders = self.whole_copies(snap, df);
        let sound = |s: u32| sums.iter().any(|&(c, sum)| c == s && sum != DAMAGED);
        let majority = sums.iter().find(|(_, sum)| {
            *sum != DAMAGED
                && sums.iter().filter(|(_, other)| other == sum).count() * 2 > sums.len()
        });
        let good = match majority {
            Some(&(s, _)) => s,
            None => match self.cluster_map().await {
                Ok(Some(map)) => match map.head(df.handle, &copies).filter(|&h| sound(h)) {
                    Some(s) => s,
                    None => match holders.iter().copied().find(|&s| sound(s)) {
                        Some(s) => s,
                        None => return false,
                    },
                },
                _ => return false,
            },
        };
        let want = sums.iter().find(|(s, _)| *s == good).map(|(_, sum)| *sum);
        for &(s, sum) in sums {
            if Some(sum) == want {
                continue;
            }
            let request = Request::CopyDatafile(req::CopyDatafile {
                handle: df.handle,
                copies: copies.clone(),
                from: good,
            });
            if self.rpc(s as usize, request).await.is_err() {
                return false;
            }
        }
        match self
            .sum_copies(std::iter::once((df.handle, holders.clone())))
            .await
        {
            Ok(after) => holders
                .iter()
                .all(|s| after.get(&(*s, df.handle)) == after.get(&(good, df.handle))),
            Err(_) => false,
        }
    }

    /// Whether the configuration has a data server that can hold datafile `df` (the
    /// server exists, has the data role and owns the handle's range).
    fn can_hold(&self, df: &pvfs_proto::Datafile) -> bool {
        self.config()
            .servers
            .get(df.server as usize)
            .is_some_and(|s| {
                s.roles.contains(pvfs_proto::Roles::DATA) && s.handles.contains(df.handle)
            })
    }

    pub(crate) fn server_name(&self, i: usize) -> &str {
        self.config()
            .servers
            .get(i)
            .map_or("?", |s| s.name.as_str())
    }

    /// Files with bytes on datafiles past their width, and the last such datafile:
    /// one `GetSizes` per data server (in batches) for every datafile past a width.
    async fn past_width(&self, snap: &Snapshot) -> Result<Vec<(Handle, usize)>> {
        // (file, datafile index, datafile handle), grouped by data server.
        type Wanted = Vec<(Handle, usize, Handle)>;
        let mut by_server: Vec<(usize, Wanted)> = Vec::new();
        for (h, a) in &snap.objects {
            let Some(layout) = a.layout() else { continue };
            let past = layout
                .datafiles
                .iter()
                .enumerate()
                .skip(layout.width as usize);
            for (i, df) in past.filter(|(_, df)| self.can_hold(df)) {
                // Its first copy that is whole (a lost server's heir in its place).
                let s = self
                    .whole_copies(snap, df)
                    .first()
                    .map_or(df.server as usize, |&s| s as usize);
                match by_server.iter_mut().find(|(x, _)| *x == s) {
                    Some((_, v)) => v.push((*h, i, df.handle)),
                    None => by_server.push((s, vec![(*h, i, df.handle)])),
                }
            }
        }
        let mut found: BTreeMap<Handle, usize> = BTreeMap::new();
        for (server, items) in crate::namespace::split_batches(by_server) {
            let handles = items.iter().map(|x| x.2).collect();
            let sizes = match self
                .rpc(
                    server,
                    Request::GetSizes(req::GetSizes { map: None, handles }),
                )
                .await?
            {
                Response::Sizes { sizes } if sizes.len() == items.len() => sizes,
                other => return Err(crate::pool::unexpected("GetSizes", &other)),
            };
            for ((h, i, _), st) in items.iter().zip(sizes) {
                if st.size > 0 || st.allocated > 0 {
                    let last = found.entry(*h).or_default();
                    *last = (*last).max(*i);
                }
            }
        }
        Ok(found.into_iter().collect())
    }

    /// Widens file `h` to `width` datafiles (fsck's repair), with a WRITE capability
    /// asked for it.
    async fn widen(&self, h: Handle, width: u32) -> bool {
        let Ok(caps) = self.caps_for(h, pvfs_proto::rights::WRITE).await else {
            return false;
        };
        let req = Request::Widen(req::Widen {
            handle: h,
            width,
            cap: caps.object().cloned(),
        });
        self.rpc_owner(h, req).await.is_ok()
    }

    async fn rpc_owner(&self, h: Handle, req: Request) -> Result<Response> {
        let owner = self.owner(h)?;
        self.rpc(owner, req).await
    }

    /// Reads every server's objects, entries, datafiles and seals.
    /// Every object of metadata group `i`, a page at a time.
    pub(crate) async fn scan_objects(&self, i: usize) -> Result<Vec<Attr>> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            match self
                .rpc(
                    i,
                    Request::ScanObjects(req::ScanObjects { after, max: PAGE }),
                )
                .await?
            {
                Response::Objects { attrs, more } => {
                    after = attrs.last().map(|a| a.handle);
                    out.extend(attrs);
                    if !more || after.is_none() {
                        return Ok(out);
                    }
                }
                other => return Err(unexpected("ScanObjects", &other)),
            }
        }
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        let mut snap = Snapshot {
            map: self.cluster_map().await?,
            ..Snapshot::default()
        };
        let servers = &self.config().servers;
        // Datafiles first: a datafile appears after its file's object, so a datafile
        // seen here always has its object in the object scan below. A server gone
        // for good (lost, retired) holds nothing any file counts on.
        for (i, sc) in servers.iter().enumerate() {
            let gone = snap
                .map
                .as_ref()
                .and_then(|m| m.state(i as u32))
                .is_some_and(|s| s.gone());
            if !sc.roles.contains(pvfs_proto::Roles::DATA) || gone {
                continue;
            }
            let present = self
                .scan_handles(i, |after| {
                    Request::ScanDatafiles(req::ScanDatafiles { after, max: PAGE })
                })
                .await?;
            snap.datafiles.insert(i, present);
            let lost = self
                .scan_handles(i, |after| {
                    Request::ScanLost(req::ScanLost { after, max: PAGE })
                })
                .await?;
            snap.lost.insert(i, lost);
        }
        for (i, sc) in servers.iter().enumerate() {
            if !sc.roles.contains(pvfs_proto::Roles::META) {
                continue;
            }
            snap.objects.extend(
                self.scan_objects(i)
                    .await?
                    .into_iter()
                    .map(|a| (a.handle, a)),
            );
            let mut after: Option<(Handle, String)> = None;
            loop {
                match self
                    .rpc(
                        i,
                        Request::ScanEntries(req::ScanEntries {
                            after: after.clone(),
                            max: PAGE,
                        }),
                    )
                    .await?
                {
                    Response::Entries { entries, more } => {
                        after = entries.last().map(|(d, e)| (*d, e.name.clone()));
                        snap.entries
                            .extend(entries.into_iter().map(|(d, e)| (d, e, i)));
                        if !more || after.is_none() {
                            break;
                        }
                    }
                    other => return Err(unexpected("ScanEntries", &other)),
                }
            }
            let held = self
                .scan_handles(i, |after| {
                    Request::ScanHeld(req::ScanHeld { after, max: PAGE })
                })
                .await?;
            snap.held.extend(held);
            match self.rpc(i, Request::ScanSeals(req::ScanSeals {})).await? {
                Response::HandleList { handles, .. } => {
                    snap.seals.extend(handles.into_iter().map(|d| (i, d)));
                }
                other => return Err(unexpected("ScanSeals", &other)),
            }
        }
        Ok(snap)
    }

    /// Every handle a paged handle scan of server `i` answers (`ScanDatafiles`,
    /// `ScanLost`; `req` makes the request for the page after a handle).
    async fn scan_handles(
        &self,
        i: usize,
        req: impl Fn(Option<Handle>) -> Request,
    ) -> Result<BTreeSet<Handle>> {
        let mut set = BTreeSet::new();
        let mut after = None;
        loop {
            let r = req(after);
            let op = r.op_name();
            match self.rpc(i, r).await? {
                Response::HandleList { handles, more } => {
                    after = handles.last().copied();
                    set.extend(handles);
                    if !more || after.is_none() {
                        return Ok(set);
                    }
                }
                other => return Err(unexpected(op, &other)),
            }
        }
    }

    /// Moves entry `e` of `dir` from server `from` to server `to`: the name is put in
    /// place there (if it is free, or already names the same object), then removed
    /// where it was (if it still names the same object).
    async fn move_entry_to(&self, from: usize, to: usize, dir: Handle, e: &DirEntry) -> bool {
        let link = Request::LinkEntry(req::LinkEntry {
            dir,
            name: e.name.clone(),
            handle: e.handle,
            kind: e.kind,
            replace: None,
            fate: LinkDrop::Moved,
            counted: false,
            ticket: None,
        });
        let placed = match self.rpc(to, link).await {
            Ok(_) => true,
            Err(err) if err.errno == Errno::EEXIST => {
                // Already there: only if it names the same object.
                matches!(
                    self.rpc(
                        to,
                        Request::Lookup(req::Lookup {
                            dir,
                            name: e.name.clone(),
                            want: 0,
                        }),
                    )
                    .await,
                    Ok(Response::Entry { entry, .. }) if entry.handle == e.handle
                )
            }
            Err(_) => false,
        };
        placed && self.remove_entry_if(from, dir, &e.name, e.handle).await
    }

    /// Removes entry `name` of `dir` on `server` if it still names `handle`, leaving
    /// the object's link count alone: a count that then is one too many is repaired
    /// with the others (taking the link here would delete an object whose count was
    /// too low while another name still leads to it).
    async fn remove_entry_if(
        &self,
        server: usize,
        dir: Handle,
        name: &str,
        handle: Handle,
    ) -> bool {
        let req = Request::Unlink(req::Unlink {
            dir,
            name: name.to_string(),
            expect: Some(handle),
            want: pvfs_proto::UnlinkWant::Any,
            fate: LinkDrop::Moved,
        });
        self.rpc(server, req).await.is_ok()
    }

    /// Removes an object no entry names, after checking again that none does (a
    /// concurrent rename may have been between its two steps during the scan): its
    /// link count set to zero, if it is still what was seen.
    async fn remove_orphan(&self, a: &Attr) -> bool {
        match self.count_names(a.handle).await {
            Ok(0) => self.set_links(a, 0).await,
            _ => false,
        }
    }

    /// Sets the link count of `a` to its number of names, counted again.
    async fn fix_links(&self, a: &Attr) -> bool {
        match self.count_names(a.handle).await {
            Ok(n) if n > 0 => self.set_links(a, n).await,
            _ => false,
        }
    }

    /// Sets the link count of `a` to `links` if it is still the one seen (a file
    /// whose count reaches zero goes, with its datafiles).
    async fn set_links(&self, a: &Attr, links: u32) -> bool {
        let req = Request::SetLinks(req::SetLinks {
            handle: a.handle,
            links,
            expect: a.nlink,
        });
        match self.rpc_owner(a.handle, req).await {
            Ok(Response::Dropped { left, tickets }) => {
                self.settle(a.handle, &left, tickets).await;
                true
            }
            _ => false,
        }
    }

    /// A fresh scan of every server's entries: how many name `h`.
    async fn count_names(&self, h: Handle) -> Result<u32> {
        let mut n = 0u32;
        for (i, sc) in self.config().servers.iter().enumerate() {
            if !sc.roles.contains(pvfs_proto::Roles::META) {
                continue;
            }
            let mut after: Option<(Handle, String)> = None;
            loop {
                match self
                    .rpc(
                        i,
                        Request::ScanEntries(req::ScanEntries {
                            after: after.clone(),
                            max: PAGE,
                        }),
                    )
                    .await?
                {
                    Response::Entries { entries, more } => {
                        let here = entries.iter().filter(|(_, e)| e.handle == h).count();
                        n = n.saturating_add(here as u32);
                        after = entries.last().map(|(d, e)| (*d, e.name.clone()));
                        if !more || after.is_none() {
                            break;
                        }
                    }
                    other => return Err(unexpected("ScanEntries", &other)),
                }
            }
        }
        Ok(n)
    }

    /// Removes a datafile no layout names, after checking again that no object names it.
    async fn remove_orphan_datafile(&self, server: usize, h: Handle) -> bool {
        let mut after = None;
        for (i, sc) in self.config().servers.iter().enumerate() {
            if !sc.roles.contains(pvfs_proto::Roles::META) {
                continue;
            }
            loop {
                match self
                    .rpc(
                        i,
                        Request::ScanObjects(req::ScanObjects { after, max: PAGE }),
                    )
                    .await
                {
                    Ok(Response::Objects { attrs, more }) => {
                        let named = attrs.iter().any(|a| {
                            a.layout()
                                .is_some_and(|l| l.datafiles.iter().any(|d| d.handle == h))
                        });
                        if named {
                            tracing::info!("datafile {h:#x}: a file names it now; kept");
                            return false;
                        }
                        after = attrs.last().map(|a| a.handle);
                        if !more || after.is_none() {
                            break;
                        }
                    }
                    other => {
                        tracing::warn!(
                            "datafile {h:#x} kept: could not check that no file names it \
                             ({other:?})"
                        );
                        return false;
                    }
                }
            }
            after = None;
        }
        let removed = self
            .rpc(
                server,
                Request::RemoveDatafiles(req::RemoveDatafiles {
                    handles: vec![h],
                    tickets: Vec::new(),
                }),
            )
            .await;
        if let Err(e) = &removed {
            tracing::warn!("orphan datafile {h:#x} not removed: {e}");
        }
        removed.is_ok()
    }
}
