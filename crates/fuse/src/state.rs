//! What the mount remembers between requests: open files (by FUSE file handle), the
//! objects they keep alive (an unlinked file stays until its last close), directory
//! streams, and recently seen directory attributes (for creates: default layout and
//! set-group-ID inheritance).
//!
//! The unlink/open race is closed by order: `open` registers the object before it
//! asks the server for it, and an unlink that finds the object unregistered marks it
//! "removing" before deleting it, which makes a later `open` fail with ENOENT.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pvfs_client::{Attr, DirEntry, File, ObjKind};
use pvfs_proto::layout::Layout;
use pvfs_proto::message::DatafileStat;
use pvfs_proto::Handle;

use fuser::FileAttr;

use crate::attr;
use crate::readahead::ReadAhead;
use crate::smallfiles::SmallFiles;
use crate::writebehind::Pending;

/// Directory attributes remembered before the cache is emptied (a memory bound).
const DIR_CACHE_MAX: usize = 65536;
/// File layouts remembered before the cache is emptied (a memory bound).
const LAYOUT_CACHE_MAX: usize = 1 << 17;
/// Names remembered before the cache is emptied (a memory bound).
const NAME_CACHE_MAX: usize = 1 << 18;
/// Most names kept in all the directories whose every name the mount knows
/// ([`Tables::surely_absent`]); beyond it they are all forgotten.
const KNOWN_NAMES_MAX: usize = 1 << 20;
/// File sizes remembered before the cache is emptied (a memory bound).
const SIZE_CACHE_MAX: usize = 1 << 18;

/// One open file (one FUSE file handle).
pub(crate) struct OpenFile {
    /// The object.
    pub handle: Handle,
    /// Its layout and I/O, acting as the mount itself (the kernel checked the
    /// caller's access when it opened the file).
    pub file: File,
    /// The mount's read-ahead, for an open the kernel reads without its page cache.
    pub stream: Option<ReadAhead>,
}

/// A directory being listed (one FUSE directory handle).
pub(crate) struct DirStream {
    /// The directory.
    pub handle: Handle,
    /// Its entries, read when the listing starts (offset 0).
    pub entries: Option<Arc<Vec<DirEntry>>>,
    /// Attributes of one run of entries for readdirplus: (first index, results).
    pub attrs: Option<(usize, Vec<pvfs_client::Result<FileAttr>>)>,
}

/// What the mount knows of an object some file handle uses.
#[derive(Default)]
struct Inode {
    /// Open file handles (and opens in progress).
    opens: u32,
    /// Its last name is gone; delete the object at the last release.
    orphan: bool,
    /// Being deleted: opens must fail.
    removing: bool,
    /// Has set-user-ID or set-group-ID (with group execute) as last seen: a write
    /// by someone else than root must clear them.
    privileged: bool,
    /// Writes and truncations through this mount so far: read-ahead fetched under
    /// an older count is stale.
    writes: u64,
    /// Its writes in flight in the background (`--write-behind`).
    pending: Option<Arc<Pending>>,
}

/// What to do with an object that just lost its last name.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Disposal {
    /// Still open here: it stays until the last release.
    Kept,
    /// Delete it now, then call [`Tables::removed`].
    RemoveNow,
}

/// The mount's tables.
pub(crate) struct Tables {
    files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    inodes: Mutex<HashMap<Handle, Inode>>,
    dirs: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<DirStream>>>>,
    dir_attrs: Mutex<HashMap<Handle, (Instant, Attr)>>,
    layouts: Mutex<HashMap<Handle, Arc<Layout>>>,
    /// The file each datafile of a known layout belongs to: a data server's change
    /// feed names datafiles.
    datafiles: Mutex<HashMap<Handle, Handle>>,
    /// Files' attributes as last answered by their servers: an open while the
    /// change feeds run needs no server (another client's change drops them).
    file_attrs: Mutex<HashMap<Handle, Attr>>,
    /// What the data servers last said of each datafile of a file this mount
    /// created or wrote (in layout order; None: not known): with all known, the
    /// file's size and times need no server.
    data_stats: Mutex<HashMap<Handle, Vec<Option<DatafileStat>>>>,
    /// Directories whose every name this mount knows: it made them, and each change
    /// in them since was its own (another client's, reported by a change feed, or a
    /// failure ends that). A lookup of a name not among them is answered ENOENT
    /// without a server, as a create's first step always is.
    known_dirs: Mutex<KnownDirs>,
    /// Which object a name of a directory meant when last seen (files and
    /// symlinks only): lets an unlink name the object it expects to remove.
    names: Mutex<HashMap<(Handle, String), Handle>>,
    /// The size of each file as last told to the kernel: how an open is served
    /// depends on it, and opening asks for no size.
    sizes: Mutex<HashMap<Handle, u64>>,
    /// Lock owners that took locks through each file handle (released at its
    /// release: OFD locks and `flock`s end at the last close of an open file).
    lock_owners: Mutex<HashMap<u64, Vec<u64>>>,
    /// Small files' contents this mount wrote (`smallfiles.rs`).
    pub(crate) small: SmallFiles,
    next_fh: AtomicU64,
}

/// The entries of the directories a mount knows completely (each name's object and
/// kind), and their count.
#[derive(Default)]
pub(crate) struct KnownDirs {
    dirs: HashMap<Handle, HashMap<String, (Handle, ObjKind)>>,
    names: usize,
}

/// Locks a mutex, recovering the data if a holder panicked (the tables stay usable).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Tables {
    /// Empty tables.
    pub(crate) fn new() -> Tables {
        Tables {
            files: Mutex::new(HashMap::new()),
            inodes: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            dir_attrs: Mutex::new(HashMap::new()),
            layouts: Mutex::new(HashMap::new()),
            datafiles: Mutex::new(HashMap::new()),
            file_attrs: Mutex::new(HashMap::new()),
            data_stats: Mutex::new(HashMap::new()),
            known_dirs: Mutex::new(KnownDirs::default()),
            names: Mutex::new(HashMap::new()),
            sizes: Mutex::new(HashMap::new()),
            lock_owners: Mutex::new(HashMap::new()),
            small: SmallFiles::default(),
            next_fh: AtomicU64::new(1),
        }
    }

    fn fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    // ----- open files --------------------------------------------------------

    /// Registers an open of `handle` in progress; fails (ENOENT) if the object is
    /// being deleted.
    pub(crate) fn begin_open(&self, handle: Handle) -> bool {
        let mut inodes = lock(&self.inodes);
        let ino = inodes.entry(handle).or_default();
        if ino.removing {
            return false;
        }
        ino.opens += 1;
        true
    }

    /// Finishes an open registered with [`Tables::begin_open`]: a new file handle.
    pub(crate) fn add_file(&self, file: OpenFile) -> u64 {
        let fh = self.fh();
        lock(&self.files).insert(fh, Arc::new(file));
        fh
    }

    /// The open file behind file handle `fh`.
    pub(crate) fn file(&self, fh: u64) -> Option<Arc<OpenFile>> {
        lock(&self.files).get(&fh).cloned()
    }

    /// Forgets file handle `fh` and returns it.
    pub(crate) fn remove_file(&self, fh: u64) -> Option<Arc<OpenFile>> {
        lock(&self.files).remove(&fh)
    }

    /// Drops one open of `handle` (a release, or an open that failed). Returns true
    /// when that was the last open of an orphan, which the caller must now delete.
    pub(crate) fn end_open(&self, handle: Handle) -> bool {
        let mut inodes = lock(&self.inodes);
        let Some(ino) = inodes.get_mut(&handle) else {
            return false;
        };
        ino.opens = ino.opens.saturating_sub(1);
        if ino.opens > 0 || ino.removing {
            return false;
        }
        let orphan = ino.orphan;
        inodes.remove(&handle);
        orphan
    }

    /// `handle` lost its last name: keep it if it is open, else mark it for deletion.
    pub(crate) fn unlinked(&self, handle: Handle) -> Disposal {
        let mut inodes = lock(&self.inodes);
        let ino = inodes.entry(handle).or_default();
        if ino.opens > 0 {
            ino.orphan = true;
            Disposal::Kept
        } else {
            ino.removing = true;
            Disposal::RemoveNow
        }
    }

    /// Marks `handle` for deletion before its name is removed, unless it is open
    /// (then false: it must be kept). Undo with [`Tables::removed`].
    pub(crate) fn try_begin_remove(&self, handle: Handle) -> bool {
        let mut inodes = lock(&self.inodes);
        let ino = inodes.entry(handle).or_default();
        if ino.opens > 0 || ino.removing {
            return false;
        }
        ino.removing = true;
        true
    }

    /// A deletion marked by [`Tables::unlinked`] is over.
    pub(crate) fn removed(&self, handle: Handle) {
        let mut inodes = lock(&self.inodes);
        if inodes.get(&handle).is_some_and(|i| i.opens == 0) {
            inodes.remove(&handle);
        }
    }

    /// Records whether open file `handle` has privilege bits (ignored if not open).
    pub(crate) fn set_privileged(&self, handle: Handle, privileged: bool) {
        if let Some(ino) = lock(&self.inodes).get_mut(&handle) {
            ino.privileged = privileged;
        }
    }

    /// Whether open file `handle` has privilege bits, forgetting it (the caller
    /// clears them).
    pub(crate) fn take_privileged(&self, handle: Handle) -> bool {
        lock(&self.inodes)
            .get_mut(&handle)
            .is_some_and(|i| std::mem::take(&mut i.privileged))
    }

    /// Remembers the size of file `handle` as told to the kernel.
    pub(crate) fn note_size(&self, handle: Handle, size: u64) {
        let mut m = lock(&self.sizes);
        if m.len() >= SIZE_CACHE_MAX {
            m.clear();
        }
        m.insert(handle, size);
    }

    /// A write through the mount ended at `end`: the file is at least that large.
    pub(crate) fn grow_size(&self, handle: Handle, end: u64) {
        let mut m = lock(&self.sizes);
        if m.len() >= SIZE_CACHE_MAX {
            m.clear();
        }
        let size = m.entry(handle).or_insert(end);
        *size = (*size).max(end);
    }

    /// The size of file `handle` last told to the kernel, if remembered.
    pub(crate) fn size(&self, handle: Handle) -> Option<u64> {
        lock(&self.sizes).get(&handle).copied()
    }

    /// Counts a write or truncation of `handle` that just finished (ignored if not
    /// open: then nobody reads ahead in it).
    pub(crate) fn note_write(&self, handle: Handle) {
        if let Some(ino) = lock(&self.inodes).get_mut(&handle) {
            ino.writes = ino.writes.wrapping_add(1);
        }
    }

    /// The background writes of open file `handle`, made on first use (a handle that
    /// is not open gets a set of its own that nothing else sees).
    pub(crate) fn pending(&self, handle: Handle) -> Arc<Pending> {
        let mut inodes = lock(&self.inodes);
        match inodes.get_mut(&handle) {
            Some(ino) => ino.pending.get_or_insert_with(Default::default).clone(),
            None => Arc::default(),
        }
    }

    /// The background writes of `handle`, if it has any in flight.
    pub(crate) fn busy_pending(&self, handle: Handle) -> Option<Arc<Pending>> {
        self.any_pending(handle).filter(|p| p.busy())
    }

    /// The background writes of `handle`, if it ever had any while open.
    pub(crate) fn any_pending(&self, handle: Handle) -> Option<Arc<Pending>> {
        lock(&self.inodes)
            .get(&handle)
            .and_then(|i| i.pending.clone())
    }

    /// Records that lock owner `owner` took a lock through file handle `fh`.
    pub(crate) fn note_lock_owner(&self, fh: u64, owner: u64) {
        let mut m = lock(&self.lock_owners);
        let v = m.entry(fh).or_default();
        if !v.contains(&owner) {
            v.push(owner);
        }
    }

    /// Whether any lock owner took a lock through file handle `fh`.
    pub(crate) fn has_lock_owners(&self, fh: u64) -> bool {
        lock(&self.lock_owners).contains_key(&fh)
    }

    /// The lock owners that took locks through file handle `fh` (forgotten here).
    pub(crate) fn take_lock_owners(&self, fh: u64) -> Vec<u64> {
        lock(&self.lock_owners).remove(&fh).unwrap_or_default()
    }

    /// The write count of open file `handle` (see [`Tables::note_write`]).
    pub(crate) fn writes(&self, handle: Handle) -> u64 {
        lock(&self.inodes).get(&handle).map_or(0, |i| i.writes)
    }

    /// Whether `handle` is open but has no name any more (link count 0).
    pub(crate) fn is_orphan(&self, handle: Handle) -> bool {
        lock(&self.inodes).get(&handle).is_some_and(|i| i.orphan)
    }

    // ----- directory streams -------------------------------------------------

    /// A new directory stream on `handle`; returns its file handle.
    pub(crate) fn open_dir(&self, handle: Handle) -> u64 {
        let fh = self.fh();
        let stream = DirStream {
            handle,
            entries: None,
            attrs: None,
        };
        lock(&self.dirs).insert(fh, Arc::new(tokio::sync::Mutex::new(stream)));
        fh
    }

    /// The directory stream behind `fh`.
    pub(crate) fn dir(&self, fh: u64) -> Option<Arc<tokio::sync::Mutex<DirStream>>> {
        lock(&self.dirs).get(&fh).cloned()
    }

    /// Forgets directory stream `fh`.
    pub(crate) fn close_dir(&self, fh: u64) {
        lock(&self.dirs).remove(&fh);
    }

    // ----- directory attributes ----------------------------------------------

    /// Remembers a directory's attributes (other kinds are ignored). Attributes
    /// older than the ones remembered (by ctime: every change stamps it) are
    /// ignored, so a slow answer cannot undo a change seen since.
    pub(crate) fn note_dir(&self, attr: &Attr) {
        if attr.kind() != pvfs_client::ObjKind::Dir {
            return;
        }
        let mut m = lock(&self.dir_attrs);
        if m.get(&attr.handle)
            .is_some_and(|(_, a)| a.ctime > attr.ctime)
        {
            return;
        }
        if m.len() >= DIR_CACHE_MAX {
            m.clear();
        }
        m.insert(attr.handle, (Instant::now(), attr.clone()));
    }

    /// A directory's attributes if seen less than `ttl` ago.
    pub(crate) fn dir_attr(&self, handle: Handle, ttl: Duration) -> Option<Attr> {
        lock(&self.dir_attrs)
            .get(&handle)
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, a)| a.clone())
    }

    /// Applies an entry change this mount made in directory `dir` to its remembered
    /// attributes: its server stamped `changed` as the new mtime and ctime, and
    /// `subdirs` subdirectories came (or went, negative), which is its link count.
    /// So the kernel, which asks again after every change, is answered from here
    /// with what a `stat` at the servers would say.
    pub(crate) fn dir_changed(&self, dir: Handle, changed: pvfs_client::Timespec, subdirs: i32) {
        if let Some((_, a)) = lock(&self.dir_attrs).get_mut(&dir) {
            a.mtime = a.mtime.max(changed);
            a.ctime = a.ctime.max(changed);
            a.nlink = a.nlink.saturating_add_signed(subdirs).max(2);
        }
    }

    /// Forgets a directory's attributes (it was removed or changed).
    pub(crate) fn forget_dir(&self, handle: Handle) {
        lock(&self.dir_attrs).remove(&handle);
    }

    // ----- names ---------------------------------------------------------------

    /// Remembers that `name` in `dir` means `handle` (directories are not kept).
    pub(crate) fn note_name(
        &self,
        dir: Handle,
        name: &str,
        handle: Handle,
        kind: pvfs_client::ObjKind,
    ) {
        if kind == pvfs_client::ObjKind::Dir {
            return;
        }
        let mut m = lock(&self.names);
        if m.len() >= NAME_CACHE_MAX {
            m.clear();
        }
        m.insert((dir, name.to_string()), handle);
    }

    /// The object `name` in `dir` meant when last seen.
    pub(crate) fn name(&self, dir: Handle, name: &str) -> Option<Handle> {
        lock(&self.names).get(&(dir, name.to_string())).copied()
    }

    /// Forgets `name` in `dir`.
    pub(crate) fn forget_name(&self, dir: Handle, name: &str) {
        lock(&self.names).remove(&(dir, name.to_string()));
    }

    /// Follows a rename (or, with `exchange`, a swap) of two names.
    pub(crate) fn rename_name(&self, from: (Handle, &str), to: (Handle, &str), exchange: bool) {
        let mut m = lock(&self.names);
        let a = m.remove(&(from.0, from.1.to_string()));
        let b = m.remove(&(to.0, to.1.to_string()));
        if let Some(h) = a {
            m.insert((to.0, to.1.to_string()), h);
        }
        if let (true, Some(h)) = (exchange, b) {
            m.insert((from.0, from.1.to_string()), h);
        }
    }

    // ----- file layouts --------------------------------------------------------

    /// Remembers what `attr` tells: a directory's attributes, a file's layout (its
    /// datafiles are fixed at create and handles are never reused; only its width
    /// grows, and a wider one replaces the one kept).
    pub(crate) fn note(&self, attr: &Attr) {
        match attr.layout() {
            Some(layout) => {
                {
                    let mut a = lock(&self.file_attrs);
                    if a.len() >= LAYOUT_CACHE_MAX {
                        a.clear();
                    }
                    a.insert(attr.handle, attr.clone());
                }
                let mut m = lock(&self.layouts);
                if let Some(kept) = m.get_mut(&attr.handle) {
                    if kept.width < layout.width && kept.datafiles == layout.datafiles {
                        *kept = Arc::new(layout.clone());
                    }
                    return;
                }
                let mut d = lock(&self.datafiles);
                if m.len() >= LAYOUT_CACHE_MAX {
                    m.clear();
                    d.clear();
                }
                m.insert(attr.handle, Arc::new(layout.clone()));
                d.extend(layout.datafiles.iter().map(|df| (df.handle, attr.handle)));
            }
            None => self.note_dir(attr),
        }
    }

    /// The layout of file `handle`, if seen.
    pub(crate) fn layout(&self, handle: Handle) -> Option<Arc<Layout>> {
        lock(&self.layouts).get(&handle).cloned()
    }

    /// Forgets a deleted file's layout.
    pub(crate) fn forget_layout(&self, handle: Handle) {
        self.forget_file_attr(handle);
        let mut m = lock(&self.layouts);
        if let Some(layout) = m.remove(&handle) {
            let mut d = lock(&self.datafiles);
            for df in &layout.datafiles {
                d.remove(&df.handle);
            }
        }
    }

    /// File `handle`'s attributes as last answered, if kept.
    pub(crate) fn file_attr(&self, handle: Handle) -> Option<Attr> {
        lock(&self.file_attrs).get(&handle).cloned()
    }

    /// Forgets file `handle`'s attributes, datafile stats and contents (this mount
    /// changed them in a way it does not follow: truncation, preallocation, a failed
    /// write).
    pub(crate) fn forget_file_attr(&self, handle: Handle) {
        lock(&self.file_attrs).remove(&handle);
        lock(&self.data_stats).remove(&handle);
        self.small.forget(handle);
    }

    /// A file just created: every datafile is empty, and so is the file.
    pub(crate) fn fresh_datafiles(&self, attr: &Attr) {
        self.small.created(attr.handle);
        let Some(layout) = attr.layout() else { return };
        let empty = DatafileStat {
            size: 0,
            mtime: pvfs_client::Timespec::default(),
            allocated: 0,
        };
        let mut m = lock(&self.data_stats);
        if m.len() >= LAYOUT_CACHE_MAX {
            m.clear();
        }
        m.insert(attr.handle, vec![Some(empty); layout.datafiles.len()]);
    }

    /// Takes in what data servers said of datafiles of `handle` after a write: a
    /// datafile's size and times only grow with writes (truncation forgets them), so
    /// of two answers that cross the later one wins field by field.
    pub(crate) fn note_datafile_stats(&self, handle: Handle, stats: &[(usize, DatafileStat)]) {
        let mut m = lock(&self.data_stats);
        let Some(known) = m.get_mut(&handle) else {
            return;
        };
        for (idx, st) in stats {
            let Some(slot) = known.get_mut(*idx) else {
                continue;
            };
            *slot = Some(match slot.take() {
                Some(old) => DatafileStat {
                    size: old.size.max(st.size),
                    mtime: old.mtime.max(st.mtime),
                    allocated: old.allocated.max(st.allocated),
                },
                None => *st,
            });
        }
    }

    /// `f` of file `handle`'s kept attributes (borrowed), its stripe geometry and its
    /// datafiles' stats in layout order, when this mount knows every datafile's stat.
    fn with_known_file<R>(
        &self,
        handle: Handle,
        f: impl FnOnce(&Attr, pvfs_proto::Stripe, &[DatafileStat]) -> R,
    ) -> Option<R> {
        let stats: Vec<DatafileStat> = lock(&self.data_stats)
            .get(&handle)?
            .iter()
            .copied()
            .collect::<Option<Vec<_>>>()?;
        let attrs = lock(&self.file_attrs);
        let a = attrs.get(&handle)?;
        let layout = a.layout()?;
        (layout.datafiles.len() == stats.len()).then(|| f(a, layout.stripe(), &stats))
    }

    /// File `handle`'s attributes from what is kept, when every datafile is known.
    pub(crate) fn known_file_attr(&self, handle: Handle) -> Option<Attr> {
        self.with_known_file(handle, |a, stripe, stats| {
            let mut attr = a.clone();
            pvfs_client::apply_stripe_stats(&mut attr, stripe, stats);
            attr
        })
    }

    /// `f` of the attributes of `handle` this mount holds current, borrowed where they
    /// are kept (None where it holds none): a directory's seen within `dir_ttl`; with
    /// `files`, a file's whose every datafile it knows, without its size and times
    /// worked out (for what the metafile alone says, like its ACL).
    pub(crate) fn with_held_attr<R>(
        &self,
        handle: Handle,
        dir_ttl: Duration,
        files: bool,
        f: impl FnOnce(&Attr) -> R,
    ) -> Option<R> {
        if let Some((at, a)) = lock(&self.dir_attrs).get(&handle) {
            if at.elapsed() < dir_ttl {
                return Some(f(a));
            }
        }
        if !files {
            return None;
        }
        self.with_known_file(handle, |a, _, _| f(a))
    }

    /// For a listing of `handles`: the attributes this mount holds current, as the
    /// kernel takes them (None where it holds none). A directory's seen within
    /// `dir_ttl` ([`Tables::dir_attr`]); with `files`, a file's whose every datafile
    /// it knows ([`Tables::known_file_attr`]), its size noted as told
    /// ([`Tables::note_size`]). Each table is locked once for the whole run and no
    /// attributes are cloned: listing a tree of 100,000 files asks this for each.
    pub(crate) fn held_fattrs(
        &self,
        root: Handle,
        handles: &[Handle],
        dir_ttl: Duration,
        files: bool,
    ) -> Vec<Option<FileAttr>> {
        let mut out: Vec<Option<FileAttr>> = {
            let dirs = lock(&self.dir_attrs);
            handles
                .iter()
                .map(|h| {
                    dirs.get(h)
                        .filter(|(at, _)| at.elapsed() < dir_ttl)
                        .map(|(_, a)| attr::file_attr(root, a, false))
                })
                .collect()
        };
        if !files {
            return out;
        }
        // The stats of the files whose every datafile is known: (first, count) in
        // `stats`.
        let mut stats: Vec<DatafileStat> = Vec::new();
        let runs: Vec<Option<(usize, usize)>> = {
            let known = lock(&self.data_stats);
            handles
                .iter()
                .zip(&out)
                .map(|(h, held)| match (held, known.get(h)) {
                    (None, Some(v)) if v.iter().all(Option::is_some) => {
                        let first = stats.len();
                        stats.extend(v.iter().flatten().copied());
                        Some((first, v.len()))
                    }
                    _ => None,
                })
                .collect()
        };
        let orphans: Vec<bool> = {
            let inodes = lock(&self.inodes);
            handles
                .iter()
                .zip(&runs)
                .map(|(h, run)| run.is_some() && inodes.get(h).is_some_and(|i| i.orphan))
                .collect()
        };
        let mut told = Vec::new();
        {
            let attrs = lock(&self.file_attrs);
            for (i, (h, run)) in handles.iter().zip(&runs).enumerate() {
                let Some((first, count)) = *run else { continue };
                let Some(a) = attrs.get(h) else { continue };
                let Some(layout) = a.layout() else { continue };
                if layout.datafiles.len() != count {
                    continue;
                }
                let totals = pvfs_client::StripeTotals::of(
                    layout.stripe(),
                    stats[first..first + count].iter(),
                );
                let mut fa = attr::file_attr(root, a, orphans[i]);
                fa.size = totals.size;
                fa.blocks = totals.blocks;
                fa.mtime = attr::system_time(totals.mtime(a.mtime, a.ctime));
                told.push((*h, totals.size));
                out[i] = Some(fa);
            }
        }
        if !told.is_empty() {
            let mut m = lock(&self.sizes);
            if m.len() + told.len() > SIZE_CACHE_MAX {
                m.clear();
            }
            m.extend(told);
        }
        out
    }

    /// The file datafile `handle` belongs to, if its layout is known.
    pub(crate) fn file_of_datafile(&self, handle: Handle) -> Option<Handle> {
        lock(&self.datafiles).get(&handle).copied()
    }

    // ----- directories known completely ---------------------------------------

    /// Directory `dir` was just made by this mount: it is empty.
    pub(crate) fn dir_made(&self, dir: Handle) {
        let mut k = lock(&self.known_dirs);
        if k.dirs.len() >= DIR_CACHE_MAX {
            *k = KnownDirs::default();
        }
        k.dirs.insert(dir, Default::default());
    }

    /// This mount added `name` to `dir`: object `handle`, of `kind`.
    pub(crate) fn name_made(&self, dir: Handle, name: &str, handle: Handle, kind: ObjKind) {
        let mut k = lock(&self.known_dirs);
        let Some(names) = k.dirs.get_mut(&dir) else {
            return;
        };
        if names.insert(name.to_string(), (handle, kind)).is_none() {
            k.names += 1;
            if k.names > KNOWN_NAMES_MAX {
                *k = KnownDirs::default();
            }
        }
    }

    /// This mount removed `name` from `dir`; what it meant, if `dir` is known.
    pub(crate) fn name_gone(&self, dir: Handle, name: &str) -> Option<(Handle, ObjKind)> {
        let mut k = lock(&self.known_dirs);
        let gone = k.dirs.get_mut(&dir)?.remove(name);
        if gone.is_some() {
            k.names -= 1;
        }
        gone
    }

    /// This mount renamed `from` to `to` (exchanging the two names' objects if
    /// `exchange`): a known directory that gets a name whose object is not known
    /// stops being known.
    pub(crate) fn name_moved(&self, from: (Handle, &str), to: (Handle, &str), exchange: bool) {
        if exchange {
            let a = self.name_gone(from.0, from.1);
            let b = self.name_gone(to.0, to.1);
            match (a, b) {
                (Some(a), Some(b)) => {
                    self.name_made(to.0, to.1, a.0, a.1);
                    self.name_made(from.0, from.1, b.0, b.1);
                }
                _ => {
                    self.dir_unknown(from.0);
                    self.dir_unknown(to.0);
                }
            }
            return;
        }
        let moved = self.name_gone(from.0, from.1);
        // A name replaced at the destination goes with it.
        self.name_gone(to.0, to.1);
        match moved {
            Some((handle, kind)) => self.name_made(to.0, to.1, handle, kind),
            None => self.dir_unknown(to.0),
        }
    }

    /// `dir` is no longer known completely (another client changed it, or a change
    /// of this mount failed in a way that leaves its names in doubt).
    pub(crate) fn dir_unknown(&self, dir: Handle) {
        let mut k = lock(&self.known_dirs);
        if let Some(names) = k.dirs.remove(&dir) {
            k.names -= names.len();
        }
    }

    /// Whether `name` is surely not in `dir` (`dir` known completely, without it).
    pub(crate) fn surely_absent(&self, dir: Handle, name: &str) -> bool {
        lock(&self.known_dirs)
            .dirs
            .get(&dir)
            .is_some_and(|names| !names.contains_key(name))
    }

    /// Whether this mount knows every entry of directory `dir` ([`Tables::known_entries`]).
    pub(crate) fn knows_entries(&self, dir: Handle) -> bool {
        lock(&self.known_dirs).dirs.contains_key(&dir)
    }

    /// Every entry of `dir`, if known completely (in no particular order).
    pub(crate) fn known_entries(&self, dir: Handle) -> Option<Vec<DirEntry>> {
        let k = lock(&self.known_dirs);
        let names = k.dirs.get(&dir)?;
        Some(
            names
                .iter()
                .map(|(name, &(handle, kind))| DirEntry {
                    name: name.clone(),
                    handle,
                    kind,
                })
                .collect(),
        )
    }

    // ----- another client's changes ------------------------------------------

    /// Forgets what is cached of object `handle`, which another client changed: a
    /// directory's attributes, a file's size; readers of it read afresh.
    pub(crate) fn forget_cached(&self, handle: Handle) {
        self.forget_dir(handle);
        self.forget_file_attr(handle);
        lock(&self.sizes).remove(&handle);
        self.note_write(handle);
    }

    /// Forgets every cached attribute, size and name (a change feed lost changes):
    /// the objects and names the kernel may hold, for it to forget too.
    pub(crate) fn forget_everything(&self) -> (Vec<Handle>, Vec<(Handle, String)>) {
        let mut handles: Vec<Handle> = lock(&self.dir_attrs).drain().map(|(h, _)| h).collect();
        handles.extend(lock(&self.sizes).drain().map(|(h, _)| h));
        handles.extend(lock(&self.layouts).keys().copied());
        lock(&self.file_attrs).clear();
        lock(&self.data_stats).clear();
        self.small.clear();
        *lock(&self.known_dirs) = KnownDirs::default();
        handles.extend(lock(&self.inodes).keys().copied());
        handles.sort_unstable();
        handles.dedup();
        for &h in &handles {
            self.note_write(h);
        }
        let names = lock(&self.names).drain().map(|(k, _)| k).collect();
        (handles, names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlink_while_open_keeps_until_last_close() {
        let t = Tables::new();
        assert!(t.begin_open(7));
        assert!(t.begin_open(7));
        assert_eq!(t.unlinked(7), Disposal::Kept);
        assert!(t.is_orphan(7));
        assert!(!t.end_open(7), "one open left");
        assert!(t.end_open(7), "last close deletes");
        assert!(!t.is_orphan(7));
    }

    fn ts(secs: i64) -> pvfs_client::Timespec {
        pvfs_client::Timespec { secs, nsecs: 0 }
    }

    fn object(handle: Handle, detail: pvfs_proto::ObjDetail) -> Attr {
        Attr {
            handle,
            mode: 0o644,
            uid: 1,
            gid: 2,
            nlink: 1,
            size: 0,
            atime: ts(10),
            mtime: ts(10),
            ctime: ts(20),
            detail,
            blocks: 0,
            acl: None,
        }
    }

    fn file(handle: Handle, datafiles: u32) -> Attr {
        let layout = Layout {
            stripe_size: 65536,
            replicas: 1,
            datafiles: (0..datafiles)
                .map(|i| pvfs_proto::layout::Datafile::single(i, handle * 100 + u64::from(i)))
                .collect(),
            width: datafiles,
        };
        object(handle, pvfs_proto::ObjDetail::File { layout })
    }

    #[test]
    fn a_listing_holds_what_one_by_one_lookups_hold() {
        let t = Tables::new();
        let root = 1;
        let dir = object(
            5,
            pvfs_proto::ObjDetail::Dir {
                parent: root,
                shards: 1,
                default_layout: None,
                mtime_set: ts(0),
            },
        );
        t.note(&dir);
        // 6: every datafile known, two of them written (one after the last change of
        // the metafile); 7: one datafile's stat unknown; 8: attributes never seen.
        for h in [6, 7] {
            let a = file(h, 4);
            t.note(&a);
            t.fresh_datafiles(&a);
        }
        let written = |size, mtime| DatafileStat {
            size,
            mtime: ts(mtime),
            allocated: size,
        };
        t.note_datafile_stats(6, &[(0, written(70000, 30)), (1, written(100, 15))]);
        lock(&t.data_stats).get_mut(&7).expect("noted")[2] = None;
        let handles = [5, 6, 7, 8];

        let held = t.held_fattrs(root, &handles, Duration::from_secs(60), true);
        let one_by_one = |h| {
            t.dir_attr(h, Duration::from_secs(60))
                .or_else(|| t.known_file_attr(h))
                .map(|a| attr::file_attr(root, &a, false))
        };
        assert_eq!(held, handles.map(one_by_one).to_vec());
        let six = held[1].expect("every datafile known");
        // Stripe 0 holds 65536 bytes of datafile 0's 70000, stripe 1 is datafile 1's
        // 100, stripe 4 the rest of datafile 0.
        assert_eq!(six.size, 4 * 65536 + (70000 - 65536));
        assert_eq!(six.blocks, (70000u64 + 100).div_ceil(512));
        assert_eq!(six.mtime, attr::system_time(ts(30)), "the later data write");
        assert_eq!(t.size(6), Some(six.size), "the size told is noted");
        assert!(held[0].is_some() && held[2].is_none() && held[3].is_none());

        // Without current file attributes, only directories are held.
        let dirs_only = t.held_fattrs(root, &handles, Duration::from_secs(60), false);
        assert_eq!(dirs_only, vec![held[0], None, None, None]);
        // Past the attribute time, not even those.
        assert_eq!(t.held_fattrs(root, &[5], Duration::ZERO, true), vec![None]);

        let handle_of = |h| t.with_held_attr(h, Duration::from_secs(60), true, |a| a.handle);
        assert_eq!(handles.map(handle_of), [Some(5), Some(6), None, None]);
        assert_eq!(
            t.with_held_attr(6, Duration::from_secs(60), false, |a| a.handle),
            None
        );
    }

    #[test]
    fn names_follow_renames() {
        let t = Tables::new();
        t.note_name(1, "a", 10, pvfs_client::ObjKind::File);
        t.note_name(1, "b", 11, pvfs_client::ObjKind::File);
        t.note_name(1, "d", 12, pvfs_client::ObjKind::Dir);
        assert_eq!(t.name(1, "d"), None, "directories are not kept");
        t.rename_name((1, "a"), (2, "c"), false);
        assert_eq!((t.name(1, "a"), t.name(2, "c")), (None, Some(10)));
        t.rename_name((2, "c"), (1, "b"), true);
        assert_eq!((t.name(2, "c"), t.name(1, "b")), (Some(11), Some(10)));
        t.forget_name(1, "b");
        assert_eq!(t.name(1, "b"), None);
    }

    #[test]
    fn removal_before_unlink_only_when_closed() {
        let t = Tables::new();
        assert!(t.begin_open(3));
        assert!(!t.try_begin_remove(3), "open: keep");
        assert!(!t.end_open(3));
        assert!(t.try_begin_remove(3));
        assert!(!t.begin_open(3), "opens fail while it is removed");
        t.removed(3);
    }

    #[test]
    fn unlink_of_closed_file_blocks_opens_until_removed() {
        let t = Tables::new();
        assert_eq!(t.unlinked(9), Disposal::RemoveNow);
        assert!(!t.begin_open(9), "open during deletion fails");
        t.removed(9);
        assert!(t.begin_open(9), "table entry gone after deletion");
        assert!(!t.end_open(9));
    }
}
