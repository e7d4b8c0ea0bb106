//! Refilling (`docs/replication.md`, "Self-healing"): a server whose storage
//! directory was replaced (a new disk) holds none of its copies, and a server whose
//! absence was recorded on that disk cannot learn what it missed. The map marks
//! both `refill`; before such a server is up again, it copies every datafile it
//! holds a copy of, whole, from a copy that is up.
//!
//! Which datafiles: the layouts of every file, read a page at a time from every
//! metadata group (`ScanObjects`, routed to whichever server serves the group).
//! Each datafile listing this server is copied under its lock here, as catch-up
//! copies a range (`crate::copy::copy_ranges`), so writes arriving meanwhile
//! (this server is at the tail of its chains) land after the bytes copied. A try
//! first counts what it will copy ([`count`]: the datafiles, and the bytes their
//! sources hold), so `pvfs status` shows how far it got and the time left.
//!
//! A file removed while its page was being copied could leave a copy behind: its
//! datafiles' removal may reach this server before the copy does. So once a page is
//! copied, its range of objects is read again, and the copies of every file gone
//! from it are removed here (the removal of a file's name and object comes before
//! that of its datafiles, so a file still listed then has its removal still to come,
//! and it reaches the copy made).
//!
//! A server that leads no replicated metadata group (a data server alone) hands out
//! datafile handles from its own store, which a new disk starts over: its next
//! handle is moved past every handle of its range that a layout holds, and past
//! [`POOL_GAP`] more, which no metadata server's pool of its handles can reach.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use pvfs_proto::attr::ObjDetail;
use pvfs_proto::map::ClusterMap;
use pvfs_proto::{req, Errno, Handle, Request, Response};

use crate::copy::{copy_ranges, source};
use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::progress::Meter;

/// Objects asked for at once.
const PAGE: u32 = 256;

/// How far past the highest handle a layout holds a data server's next handle
/// moves after its disk was replaced: more than every metadata server's pools of
/// its handles together (each refilled in batches of `crate::precreate::BATCH`
/// below `crate::precreate::LOW_WATER`, at most `crate::precreate::MAX_COUNT` at
/// once), by orders of magnitude.
pub const POOL_GAP: u64 = 1 << 32;

/// What a refill did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refilled {
    /// Datafiles copied in this stay as recovering (by this try or an earlier one).
    pub datafiles: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Datafiles with no other copy (one copy, or every other copy lost): lost
    /// with the disk.
    pub alone: u64,
    /// Copies removed again because their file was removed meanwhile.
    pub removed: u64,
    /// The highest datafile handle of this server's range in any layout.
    pub highest: Option<Handle>,
}

/// The datafiles copied whole in one stay as recovering: a refill that has to start
/// again (a map change, a source gone) does not copy them again, since this server,
/// at the tail of their chains since, has taken every change after the copy. A new
/// stay (the server went down and came back) starts from nothing.
#[derive(Debug, Default)]
pub struct Progress {
    /// The map version the stay began at.
    since: u64,
    /// The datafiles copied in it.
    copied: HashSet<Handle>,
}

impl Progress {
    /// The progress of the stay that began at map version `since`.
    fn of_stay(&mut self, since: u64) -> &mut HashSet<Handle> {
        if self.since != since {
            self.since = since;
            self.copied.clear();
        }
        &mut self.copied
    }
}

/// Copies every datafile this server holds a copy of, whole, from a copy that is
/// up under map `version`, but those `progress` says were copied in this stay (that
/// began at map version `since`).
pub async fn refill(
    ctx: &Arc<Ctx>,
    map: &ClusterMap,
    version: u64,
    since: u64,
    progress: &mut Progress,
) -> OpResult<Refilled> {
    let me = ctx.me as u32;
    let copied_before = progress.of_stay(since);
    let key = |handle: Handle, copies: &[u32]| map.holds(handle, copies, me).then_some(handle);
    let (datafiles, bytes) = count(ctx, map, copied_before, &key).await?;
    ctx.refilling.begin(&[], datafiles, bytes);
    let done = copy_whole(ctx, map, version, copied_before, &key, &ctx.refilling.meter).await;
    ctx.refilling.end();
    done
}

/// What a whole copy ([`copy_whole`] with `key`) has to do, for `pvfs status`: the
/// datafiles to which `key` gives a key (those whose key is in `copied_before`
/// too, which it counts as done), and the bytes their sources hold now of those
/// it will copy.
pub async fn count<K>(
    ctx: &Arc<Ctx>,
    map: &ClusterMap,
    copied_before: &HashSet<K>,
    key: &(dyn Fn(Handle, &[u32]) -> Option<K> + Sync),
) -> OpResult<(u64, u64)>
where
    K: Copy + Eq + std::hash::Hash,
{
    let me = ctx.me as u32;
    let (mut datafiles, mut bytes) = (0, 0);
    let mut pages = ObjectPages::new(ctx);
    while let Some(attrs) = pages.next(ctx).await? {
        let mut by_source: BTreeMap<usize, Vec<Handle>> = BTreeMap::new();
        for (handle, copies) in datafiles_of(&attrs) {
            let Some(k) = key(handle, &copies) else {
                continue;
            };
            datafiles += 1;
            if copied_before.contains(&k) {
                continue;
            }
            if let Some(from) = source(map, handle, &copies, me, None) {
                by_source.entry(from).or_default().push(handle);
            }
        }
        for (from, handles) in by_source {
            bytes += sizes(ctx, map, from, handles).await?;
        }
    }
    Ok((datafiles, bytes))
}

/// The bytes server `from`'s copies of `handles` hold.
async fn sizes(
    ctx: &Arc<Ctx>,
    map: &ClusterMap,
    from: usize,
    handles: Vec<Handle>,
) -> OpResult<u64> {
    let request = Request::GetSizes(req::GetSizes {
        handles,
        map: Some(map.version),
    });
    match ctx.peers.call(from, request).await? {
        Response::Sizes { sizes } => Ok(sizes.iter().map(|s| s.size).sum()),
        other => Err(OpError::internal(
            Errno::EPROTO,
            format!("GetSizes answered with {}", other.op_name()),
        )),
    }
}

/// Every datafile of the files among `attrs`, with its copies' servers in layout
/// order (one for a file of one copy).
pub fn datafiles_of(attrs: &[pvfs_proto::Attr]) -> impl Iterator<Item = (Handle, Vec<u32>)> + '_ {
    attrs.iter().flat_map(|attr| {
        let layout = match &attr.detail {
            ObjDetail::File { layout } => Some(layout),
            _ => None,
        };
        layout.into_iter().flat_map(|l| {
            l.datafiles.iter().map(move |d| {
                let copies = d.replicas().take(l.replicas.max(1) as usize).collect();
                (d.handle, copies)
            })
        })
    })
}

/// Copies whole, from a copy that may serve reads under map `version`, every
/// datafile of every file's layout to which `key` (given its handle and its
/// copies' servers in layout order) gives a key, but those whose key is in
/// `copied_before` (to which it adds those it copies); counts them in `meter` as
/// it goes.
pub async fn copy_whole<K>(
    ctx: &Arc<Ctx>,
    map: &ClusterMap,
    version: u64,
    copied_before: &mut HashSet<K>,
    key: &(dyn Fn(Handle, &[u32]) -> Option<K> + Sync),
    meter: &Meter,
) -> OpResult<Refilled>
where
    K: Copy + Eq + std::hash::Hash + Send + Sync,
{
    let mut done = Refilled::default();
    for g in ctx.config.meta_servers() {
        let mut after = None;
        loop {
            let (attrs, more) = scan(ctx, g, after, PAGE).await?;
            let Some(last) = attrs.last().map(|a| a.handle) else {
                break;
            };
            let mut copied: Vec<(Handle, Vec<Handle>)> = Vec::new();
            for attr in &attrs {
                let file = copy_file(ctx, map, version, attr, copied_before, key, &mut done);
                let keyed = file.await?;
                if !keyed.is_empty() {
                    copied_before.extend(keyed.iter().map(|&(_, k)| k));
                    copied.push((attr.handle, keyed.into_iter().map(|(h, _)| h).collect()));
                }
                meter
                    .datafiles
                    .store(done.datafiles, std::sync::atomic::Ordering::Relaxed);
                meter
                    .bytes
                    .store(done.bytes, std::sync::atomic::Ordering::Relaxed);
            }
            if !copied.is_empty() {
                let still = objects_through(ctx, g, after, last).await?;
                for (file, handles) in copied {
                    if !still.contains(&file) {
                        let store = ctx.data.clone();
                        done.removed += handles.len() as u64;
                        ctx.blocking(move || {
                            handles.iter().try_for_each(|&h| Ok(store.remove(h)?))
                        })
                        .await?;
                    }
                }
            }
            if !more {
                break;
            }
            after = Some(last);
        }
    }
    Ok(done)
}

/// Copies the datafiles of `attr` (when it is a file) to which `key` gives a key
/// not in `copied_before`; the handles copied, with their keys.
async fn copy_file<K>(
    ctx: &Arc<Ctx>,
    map: &ClusterMap,
    version: u64,
    attr: &pvfs_proto::Attr,
    copied_before: &HashSet<K>,
    key: &(dyn Fn(Handle, &[u32]) -> Option<K> + Sync),
    done: &mut Refilled,
) -> OpResult<Vec<(Handle, K)>>
where
    K: Copy + Eq + std::hash::Hash + Send + Sync,
{
    let ObjDetail::File { layout } = &attr.detail else {
        return Ok(Vec::new());
    };
    let me = ctx.me as u32;
    let range = ctx.config.servers[ctx.me].handles;
    let mut copied = Vec::new();
    for df in &layout.datafiles {
        if (range.first..=range.last).contains(&df.handle) {
            done.highest = done.highest.max(Some(df.handle));
        }
        let copies: Vec<u32> = df.replicas().collect();
        let Some(k) = key(df.handle, &copies) else {
            continue;
        };
        if copied_before.contains(&k) {
            // Copied by an earlier try: counted, not copied again.
            done.datafiles += 1;
            continue;
        }
        let Some(from) = source(map, df.handle, &copies, me, None) else {
            let holders = map.holders(df.handle, &copies);
            if holders.len() == 1
                || holders
                    .iter()
                    .all(|h| h.server == me || map.state(h.server).is_some_and(|s| s.gone()))
            {
                done.alone += 1;
                continue;
            }
            return Err(OpError::busy(
                Errno::EAGAIN,
                format!(
                    "no copy of datafile {:#x} may serve reads to copy this server's from",
                    df.handle
                ),
            ));
        };
        done.bytes += copy_ranges(
            ctx,
            (from, crate::copy::Size::Source),
            df.handle,
            &copies,
            version,
            &[0, u64::MAX],
        )
        .await?;
        done.datafiles += 1;
        copied.push((df.handle, k));
    }
    Ok(copied)
}

/// Every object of every metadata group, a page at a time (`ScanObjects`, routed
/// to whichever server serves each group).
pub struct ObjectPages {
    groups: std::vec::IntoIter<usize>,
    /// The group being read and the last object read of it; None once done.
    at: Option<(usize, Option<Handle>)>,
}

impl ObjectPages {
    /// From the first object of the first group.
    pub fn new(ctx: &Ctx) -> ObjectPages {
        let mut groups = ctx.config.meta_servers().into_iter();
        let at = groups.next().map(|g| (g, None));
        ObjectPages { groups, at }
    }

    /// The next page; None after the last.
    pub async fn next(&mut self, ctx: &Arc<Ctx>) -> OpResult<Option<Vec<pvfs_proto::Attr>>> {
        while let Some((g, after)) = self.at {
            let (attrs, more) = scan(ctx, g, after, PAGE).await?;
            self.at = match attrs.last() {
                Some(a) if more => Some((g, Some(a.handle))),
                _ => self.groups.next().map(|g| (g, None)),
            };
            if !attrs.is_empty() {
                return Ok(Some(attrs));
            }
        }
        Ok(None)
    }
}

/// A page of metadata group `g`'s objects after `after`, and whether more follow.
pub(crate) async fn scan(
    ctx: &Arc<Ctx>,
    g: usize,
    after: Option<Handle>,
    max: u32,
) -> OpResult<(Vec<pvfs_proto::Attr>, bool)> {
    match ctx
        .peers
        .call(g, Request::ScanObjects(req::ScanObjects { after, max }))
        .await?
    {
        Response::Objects { attrs, more } => Ok((attrs, more)),
        other => Err(OpError::internal(
            Errno::EPROTO,
            format!("ScanObjects answered with {}", other.op_name()),
        )),
    }
}

/// The handles of group `g`'s objects after `after` up to `last`, as they are now.
async fn objects_through(
    ctx: &Arc<Ctx>,
    g: usize,
    mut after: Option<Handle>,
    last: Handle,
) -> OpResult<HashSet<Handle>> {
    let mut out = HashSet::new();
    loop {
        let (attrs, more) = scan(ctx, g, after, PAGE).await?;
        for a in &attrs {
            if a.handle > last {
                return Ok(out);
            }
            out.insert(a.handle);
        }
        match attrs.last() {
            Some(a) if more => after = Some(a.handle),
            _ => return Ok(out),
        }
    }
}

/// Moves this server's next datafile handle past `highest` (the highest of its
/// range any layout holds) and [`POOL_GAP`] more: its store started over on the
/// new disk, and must not hand out a handle in use.
pub async fn raise_handles(ctx: &Arc<Ctx>, highest: Option<Handle>) -> OpResult<()> {
    let range = ctx.config.servers[ctx.me].handles;
    let floor = highest
        .unwrap_or(range.first)
        .saturating_add(POOL_GAP)
        .min(range.last);
    ctx.meta
        .write(move |t| {
            let next = t.next_handle()?;
            if next != 0 && next < floor {
                t.alloc_handles(floor - next)?;
            }
            Ok(())
        })
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lasts_for_one_stay_only() {
        let mut p = Progress::default();
        p.of_stay(7).insert(0x10);
        p.of_stay(7).insert(0x11);
        assert_eq!(
            p.of_stay(7).len(),
            2,
            "a try of the same stay keeps what was copied"
        );
        assert!(
            p.of_stay(9).is_empty(),
            "a new stay copies everything again"
        );
    }
}
