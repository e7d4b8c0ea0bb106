//! Namespace operations: path walks through sharded directories, create, mkdir,
//! unlink, rmdir, rename, symlinks, readdir(plus), attributes, statfs, layouts.
//!
//! A path walk costs one lookup per component, sent to the server of the shard that
//! holds the name; the answer carries the object's attributes because objects are
//! created next to their entry. Multi-step operations (rmdir, rename across servers)
//! are ordered so that a failure midway leaves nothing a reader can trip over, only
//! garbage that fsck collects; their steps are documented in docs/namespace.md.

use pvfs_proto::req;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;

use futures::future::{join_all, try_join_all};
use pvfs_proto::message::DatafileStat;
use pvfs_proto::message::{Health, ServerInfo, StatFsReply, UnlinkWant};
use pvfs_proto::{
    rights, Attr, Capability, CreateWhat, Datafile, DirEntry, Errno, ErrorKind, Handle, Layout,
    LayoutSpec, LinkDrop, NodeKind, ObjDetail, ObjKind, Remains, Request, Response, SetAttr,
    Timespec,
};

use crate::error::{Error, Result};
use crate::file::File;
use crate::io;
use crate::pool::unexpected;
use crate::Client;

/// How a rename treats an existing destination (renameat2 flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenameMode {
    /// POSIX rename: replace a compatible destination.
    Replace,
    /// RENAME_NOREPLACE: fail with EEXIST if the destination exists.
    NoReplace,
    /// RENAME_EXCHANGE: swap source and destination (both must exist).
    Exchange,
}

/// What the removal of a name did.
#[derive(Clone, Debug)]
pub struct Unlinked {
    /// The entry removed.
    pub entry: DirEntry,
    /// What became of its object.
    pub left: Remains,
    /// When the directory changed: its new mtime and ctime, as its server stamped
    /// them.
    pub changed: Timespec,
}

/// Most symlinks followed in one walk (as Linux).
const MAX_SYMLINKS: u32 = 40;
/// Entries asked for per ReadDir page.
const PAGE: u32 = 4096;
/// Times a multi-step operation is retried when a concurrent change got in its way.
const RETRIES: u32 = 5;

/// Waits between attempts of an operation refused (busy) while another client
/// removes a directory it touches: pauses from 10 ms doubling to 200 ms, for at
/// most five request timeouts, by when a seal left by an rmdir that died counts as
/// abandoned (four request timeouts) and is taken over.
struct BusyWait {
    deadline: Instant,
    pause: Duration,
}

impl BusyWait {
    fn new(client: &Client) -> BusyWait {
        BusyWait {
            deadline: Instant::now() + client.config().timeouts.request * 5,
            pause: Duration::from_millis(10),
        }
    }

    /// Whether another attempt after `e` is worth it: it was refused busy, and a
    /// pause still ends before the deadline.
    fn again(&self, e: &Error) -> bool {
        e.kind == ErrorKind::Busy && Instant::now() + self.pause < self.deadline
    }

    async fn pause(&mut self) {
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(Duration::from_millis(200));
    }
}

/// A directory reached by a walk: what is needed to work inside it.
#[derive(Clone, Debug)]
pub struct Dir {
    pub handle: Handle,
    pub shards: u32,
    pub attr: Option<Attr>,
}

impl Dir {
    pub(crate) fn from_attr(attr: Attr) -> Result<Dir> {
        match attr.detail {
            ObjDetail::Dir { shards, .. } => Ok(Dir {
                handle: attr.handle,
                shards,
                attr: Some(attr),
            }),
            _ => Err(Error::new(
                Errno::ENOTDIR,
                format!("{:#x} is not a directory", attr.handle),
            )),
        }
    }
}

/// One server's answer to `statfs`.
#[derive(Clone, Debug)]
pub struct ServerStat {
    /// Server name.
    pub name: String,
    /// Its address.
    pub address: String,
    /// Its storage figures, or why they are missing.
    pub stat: Result<StatFsReply>,
    /// How it is doing, as it answered (None when it did not answer).
    pub health: Option<Health>,
    /// The name of an earlier data server storing on the same file system (its space
    /// is that one's, counted once in the totals), if any.
    pub same_space_as: Option<String>,
}

/// The whole file system's space: totals over the servers that answered.
#[derive(Clone, Debug)]
pub struct FsStat {
    /// Every server, answered or not.
    pub servers: Vec<ServerStat>,
    /// Sum of total bytes over the file systems of the data servers that answered
    /// (a file system several of them store on counts once).
    pub total_bytes: u64,
    /// Sum of free bytes, over the same file systems.
    pub free_bytes: u64,
    /// Sum of bytes available to users, over the same file systems.
    pub avail_bytes: u64,
    /// Metadata objects.
    pub objects: u64,
    /// Datafiles.
    pub datafiles: u64,
}

/// One server's answer to `ping`.
#[derive(Clone, Debug)]
pub struct PingReport {
    /// Server name from the configuration.
    pub name: String,
    /// Address from the configuration.
    pub address: String,
    /// Round-trip time and identity, or the error.
    pub result: Result<(Duration, ServerInfo)>,
    /// How it is doing, as it answered (None when it did not answer): an answering
    /// server may still be degraded.
    pub health: Option<Health>,
}

/// Where every stripe of a file lives.
#[derive(Clone, Debug)]
pub struct LayoutReport {
    /// The file's attributes (size filled in).
    pub attr: Attr,
    /// Each datafile with its server's name and what it holds now.
    pub datafiles: Vec<(Datafile, String, DatafileStat)>,
}

/// Most handles one batched request (ListAttr, GetSizes) carries; servers accept up
/// to 65536, smaller batches keep answers well under a frame.
const BATCH: usize = 16384;

/// Splits per-server work lists into batches of at most [`BATCH`] items.
pub(crate) fn split_batches<T: Clone>(groups: Vec<(usize, Vec<T>)>) -> Vec<(usize, Vec<T>)> {
    groups
        .into_iter()
        .flat_map(|(server, items)| {
            items
                .chunks(BATCH)
                .map(|c| (server, c.to_vec()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Merges one datafile's mtime into a file's attributes. A data write after the
/// metafile's last change (its ctime) moves the mtime forward; an older one does not,
/// so a time set explicitly (utimes, `cp -p`, `tar x`) after the last write stays as
/// set. Timestamps of different servers are compared, so their clocks must agree.
pub(crate) fn merge_data_mtime(attr: &mut Attr, data_mtime: pvfs_proto::Timespec) {
    if data_mtime > attr.ctime {
        attr.mtime = attr.mtime.max(data_mtime);
    }
}

/// Fills in a regular file's size, block count and modification time from the stats
/// of its datafiles (in layout order): the size from the stripe arithmetic, the blocks
/// from what the data servers allocate, the mtime by [`merge_data_mtime`].
pub fn apply_datafile_stats(attr: &mut Attr, layout: &Layout, stats: &[DatafileStat]) {
    apply_stripe_stats(attr, layout.stripe(), stats);
}

/// [`apply_datafile_stats`] with the layout's stripe geometry alone (`stats` holds
/// one entry per datafile, in layout order), for callers that hold the layout inside
/// `attr`.
pub fn apply_stripe_stats(attr: &mut Attr, stripe: pvfs_proto::Stripe, stats: &[DatafileStat]) {
    let totals = StripeTotals::of(stripe, stats.iter());
    attr.size = totals.size;
    attr.blocks = totals.blocks;
    merge_data_mtime(attr, totals.data_mtime);
}

/// What the stats of a file's datafiles say of the file, computed without the file's
/// attributes at hand (a listing adds them to attributes it holds borrowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeTotals {
    /// The file's size, by the stripe arithmetic.
    pub size: u64,
    /// 512-byte blocks the data servers allocate for it.
    pub blocks: u64,
    /// The latest datafile modification time (merged as [`merge_data_mtime`] says).
    pub data_mtime: pvfs_proto::Timespec,
}

impl StripeTotals {
    /// The totals of `stats`, one per datafile in layout order.
    pub fn of<'a>(
        stripe: pvfs_proto::Stripe,
        stats: impl Iterator<Item = &'a DatafileStat>,
    ) -> StripeTotals {
        let mut size = 0u64;
        let mut allocated = 0u64;
        let mut data_mtime = pvfs_proto::Timespec::default();
        for (idx, st) in stats.enumerate() {
            size = size.max(stripe.logical_end(idx as u64, st.size));
            allocated = allocated.saturating_add(st.allocated);
            data_mtime = data_mtime.max(st.mtime);
        }
        StripeTotals {
            size,
            blocks: allocated.div_ceil(512),
            data_mtime,
        }
    }

    /// The modification time of a file whose metafile says `mtime` and `ctime`:
    /// [`merge_data_mtime`] of the latest datafile time.
    pub fn mtime(
        &self,
        mtime: pvfs_proto::Timespec,
        ctime: pvfs_proto::Timespec,
    ) -> pvfs_proto::Timespec {
        if self.data_mtime > ctime {
            mtime.max(self.data_mtime)
        } else {
            mtime
        }
    }
}

/// Splits a path into components ("." and empty ones dropped).
fn components(path: &str) -> VecDeque<String> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
        .collect()
}

impl Client {
    // ----- building blocks -------------------------------------------------------

    /// Attributes of an object, from its owner (a file's size is not filled in).
    pub async fn getattr(&self, handle: Handle) -> Result<Attr> {
        let owner = self.owner(handle)?;
        let req = Request::GetAttr(req::GetAttr {
            handle,
            want: 0,
            proof: None,
        });
        match self.rpc(owner, req).await? {
            Response::Attr { attr, .. } => {
                self.remember_dir(&attr);
                Ok(attr)
            }
            other => Err(unexpected("GetAttr", &other)),
        }
    }

    pub(crate) fn owner(&self, handle: Handle) -> Result<usize> {
        self.config().owner_of(handle).ok_or_else(|| {
            Error::of_kind(
                ErrorKind::NoServer,
                Errno::ESTALE,
                format!("handle {handle:#x} belongs to no server"),
            )
        })
    }

    pub(crate) async fn rpc(&self, server: usize, request: Request) -> Result<Response> {
        self.inner.pool.rpc(server, &self.creds, request).await
    }

    /// The root directory: its shard count is the number of metadata servers (fixed
    /// when the file system is made), so no server is asked and a path walk does not
    /// depend on the root's owner being up.
    async fn root_dir(&self) -> Result<Dir> {
        Ok(Dir {
            handle: self.root(),
            shards: self.config().meta_servers().len() as u32,
            attr: None,
        })
    }

    async fn dir_attr(&self, dir: &Dir) -> Result<Attr> {
        match &dir.attr {
            Some(a) => Ok(a.clone()),
            None => self.getattr(dir.handle).await,
        }
    }

    pub(crate) fn entry_server(&self, dir: &Dir, name: &str) -> usize {
        self.inner
            .place
            .entry_server(self.config(), dir.handle, dir.shards, name)
    }

    /// Looks `name` up in `dir`: the entry, and the object's attributes. Read rights
    /// (and a VISIT capability for the object's owner) come with it, so opening for
    /// reading costs no more requests.
    pub(crate) async fn lookup_in(&self, dir: &Dir, name: &str) -> Result<(DirEntry, Attr)> {
        self.lookup_want(dir, name, 0).await
    }

    /// [`Client::lookup_in`], asking also the rights `more` (REMOVE or MOVE for the
    /// next step of a removal or rename: the server refuses when the caller may not).
    pub(crate) async fn lookup_want(
        &self,
        dir: &Dir,
        name: &str,
        more: u32,
    ) -> Result<(DirEntry, Attr)> {
        let server = self.entry_server(dir, name);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let req = Request::Lookup(req::Lookup {
                dir: dir.handle,
                name: name.to_string(),
                want: rights::READ | rights::VISIT | more,
            });
            match self.rpc(server, req).await? {
                Response::Entry {
                    entry,
                    attr: Some(attr),
                    caps,
                } => {
                    self.remember_dir(&attr);
                    self.remember_caps(entry.handle, caps);
                    return Ok((entry, attr));
                }
                Response::Entry {
                    entry,
                    attr: None,
                    caps,
                } => {
                    self.remember_caps(entry.handle, caps);
                    match self.getattr(entry.handle).await {
                        Ok(attr) => return Ok((entry, attr)),
                        // The object went between the entry's lookup and the request
                        // for its attributes at its owner (a rename replaced it, an
                        // unlink removed it): the name may name another object by
                        // now, or none. Look it up again.
                        Err(e) if e.errno == Errno::ENOENT && attempt < RETRIES => continue,
                        Err(e) => return Err(e),
                    }
                }
                other => return Err(unexpected("Lookup", &other)),
            }
        }
    }

    /// Walks `path`; the final component's symlink is followed when `follow`.
    /// Returns the object's attributes (a file's size is not filled in).
    pub(crate) async fn walk(&self, path: &str, follow: bool) -> Result<Attr> {
        let mut stack = vec![self.root_dir().await?];
        let mut todo = components(path);
        let mut links = 0;
        let mut last: Option<Attr> = None;
        while let Some(comp) = todo.pop_front() {
            last = None;
            if comp == ".." {
                if stack.len() > 1 {
                    stack.pop();
                }
                continue;
            }
            if comp.len() > pvfs_proto::types::NAME_MAX {
                return Err(Error::at(Errno::ENAMETOOLONG, path));
            }
            let top = stack
                .last()
                .cloned()
                .ok_or_else(|| Error::new(Errno::EIO, "empty walk"))?;
            let (entry, attr) = self.lookup_in(&top, &comp).await?;
            let is_last = todo.is_empty();
            match (&attr.detail, entry.kind) {
                (ObjDetail::Symlink { target }, _) if !is_last || follow => {
                    links += 1;
                    if links > MAX_SYMLINKS {
                        return Err(Error::at(Errno::ELOOP, path));
                    }
                    if target.starts_with('/') {
                        stack.truncate(1);
                    }
                    for c in components(target).into_iter().rev() {
                        todo.push_front(c);
                    }
                }
                (ObjDetail::Dir { .. }, _) => {
                    stack.push(Dir::from_attr(attr.clone())?);
                    last = Some(attr);
                }
                _ if !is_last => return Err(Error::at(Errno::ENOTDIR, path)),
                _ => last = Some(attr),
            }
        }
        match last {
            Some(a) => Ok(a),
            // The path ended at a directory reached by ".." or at the root.
            None => {
                let top = stack
                    .last()
                    .ok_or_else(|| Error::new(Errno::EIO, "empty walk"))?;
                self.dir_attr(top).await
            }
        }
    }

    /// Walks to the directory that holds the last component of `path`; returns it and
    /// that name.
    pub(crate) async fn walk_parent(&self, path: &str) -> Result<(Dir, String)> {
        let mut comps = components(path);
        let name = comps.pop_back().ok_or_else(|| {
            Error::new(
                Errno::EBUSY,
                format!("{path}: the root cannot be changed this way"),
            )
        })?;
        if name == ".." {
            return Err(Error::new(Errno::EINVAL, format!("{path}: names \"..\"")));
        }
        pvfs_proto::types::check_name(&name).map_err(|e| Error::at(e, path))?;
        let parent_path: Vec<String> = comps.into_iter().collect();
        let parent = if parent_path.is_empty() {
            self.root_dir().await?
        } else {
            let attr = self.walk(&parent_path.join("/"), true).await?;
            Dir::from_attr(attr).map_err(|_| Error::at(Errno::ENOTDIR, path))?
        };
        Ok((parent, name))
    }

    /// Fills in a file's size and modification time from its datafiles, and a
    /// directory's times and link count from its shards.
    pub(crate) async fn fill_size(&self, attr: &mut Attr) -> Result<()> {
        if attr.is_dir() {
            self.fill_dirs(vec![attr]).await;
            return Ok(());
        }
        let Some(layout) = attr.layout().cloned() else {
            return Ok(());
        };
        let stats = io::sized_stats(&self.inner.pool, &self.creds, &layout).await?;
        apply_datafile_stats(attr, &layout, &stats);
        Ok(())
    }

    // ----- attributes ------------------------------------------------------------

    /// `stat`: attributes of what `path` names, following a final symlink; a file's
    /// size comes from its datafiles.
    pub async fn stat(&self, path: &str) -> Result<Attr> {
        let mut attr = self.walk(path, true).await.map_err(|e| e.for_path(path))?;
        self.fill_size(&mut attr).await?;
        Ok(attr)
    }

    /// `lstat`: like [`Client::stat`] but a final symlink is described itself.
    pub async fn lstat(&self, path: &str) -> Result<Attr> {
        let mut attr = self.walk(path, false).await.map_err(|e| e.for_path(path))?;
        self.fill_size(&mut attr).await?;
        Ok(attr)
    }

    /// Completes attributes from a lite call into what a full `stat` gives: a file's
    /// size and mtime from its data servers, a directory's times and link count from
    /// its other shards' servers.
    pub async fn complete(&self, attr: &mut Attr) -> Result<()> {
        self.fill_size(attr).await
    }

    /// `statlite` without the size: attributes as the metadata server stores them
    /// (no data server is asked; a file's `size` is 0).
    pub async fn stat_lite(&self, path: &str) -> Result<Attr> {
        self.walk(path, true).await.map_err(|e| e.for_path(path))
    }

    /// `lstatlite` without the size: like [`Client::stat_lite`] but a final symlink is
    /// described itself (no data server is asked).
    pub async fn lstat_lite(&self, path: &str) -> Result<Attr> {
        self.walk(path, false).await.map_err(|e| e.for_path(path))
    }

    /// chmod, chown and utimes in one: applies `set` to what `path` names.
    pub async fn setattr(&self, path: &str, set: SetAttr) -> Result<Attr> {
        let attr = self.walk(path, true).await.map_err(|e| e.for_path(path))?;
        self.setattr_handle(attr.handle, set)
            .await
            .map_err(|e| e.for_path(path))
    }

    /// Applies `set` to object `handle`.
    pub async fn setattr_handle(&self, handle: Handle, set: SetAttr) -> Result<Attr> {
        let owner = self.owner(handle)?;
        let mut attr = match self
            .rpc(owner, Request::SetAttr(req::SetAttr { handle, set }))
            .await?
        {
            Response::Attr { attr, .. } => attr,
            other => return Err(unexpected("SetAttr", &other)),
        };
        self.fill_size(&mut attr).await?;
        Ok(attr)
    }

    /// Applies `set` to object `handle` and returns the attributes as the metadata
    /// server stores them (one request; no data server is asked for a file's size,
    /// which is 0). For lazy timestamp updates, e.g. the C library's mtime at close.
    pub async fn setattr_lite(&self, handle: Handle, set: SetAttr) -> Result<Attr> {
        let owner = self.owner(handle)?;
        match self
            .rpc(owner, Request::SetAttr(req::SetAttr { handle, set }))
            .await?
        {
            Response::Attr { attr, .. } => Ok(attr),
            other => Err(unexpected("SetAttr", &other)),
        }
    }

    // ----- creating --------------------------------------------------------------

    /// `mkdir`: a directory with the file system's shard count, inheriting its
    /// parent's default layout.
    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<Attr> {
        let (parent, name) = self.walk_parent(path).await.map_err(|e| e.for_path(path))?;
        self.mkdir_in(&parent, &name, mode)
            .await
            .map_err(|e| e.for_path(path))
    }

    pub(crate) async fn mkdir_in(&self, parent: &Dir, name: &str, mode: u32) -> Result<Attr> {
        let pattr = self.dir_attr(parent).await?;
        let default_layout = match pattr.detail {
            ObjDetail::Dir { default_layout, .. } => default_layout,
            _ => None,
        };
        let what = CreateWhat::Dir {
            shards: self.config().defaults.dir_shards,
            default_layout,
        };
        let attr = self.create_in(parent, name, mode, what).await?;
        self.remember_dir(&attr);
        Ok(attr)
    }

    /// `mkdir -p`: creates `path` and any missing parents; existing directories are fine.
    pub async fn mkdir_all(&self, path: &str, mode: u32) -> Result<()> {
        let mut so_far = String::new();
        for comp in components(path) {
            so_far.push('/');
            so_far.push_str(&comp);
            match self.mkdir(&so_far, mode).await {
                Ok(_) => {}
                Err(e) if e.errno == Errno::EEXIST => {
                    let attr = self.stat_lite(&so_far).await?;
                    if attr.kind() != ObjKind::Dir {
                        return Err(Error::at(Errno::ENOTDIR, &so_far));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub(crate) async fn create_in(
        &self,
        parent: &Dir,
        name: &str,
        mode: u32,
        what: CreateWhat,
    ) -> Result<Attr> {
        self.create_holding(parent, name, mode, what, false).await
    }

    /// [`Client::create_in`]; with `hold`, the new file is held open by this client
    /// (`crate::holds`) from the commit that makes it: one [`Client::unhold`] ends it.
    pub(crate) async fn create_holding(
        &self,
        parent: &Dir,
        name: &str,
        mode: u32,
        what: CreateWhat,
        hold: bool,
    ) -> Result<Attr> {
        let server = self.entry_server(parent, name);
        let hold = if hold { self.hold_gen() } else { 0 };
        let req = Request::Create(req::Create {
            hold,
            parent: parent.handle,
            name: name.to_string(),
            mode,
            umask: self.umask,
            uid: self.creds.uid,
            gid: self.creds.gid,
            what,
        });
        match self.rpc(server, req).await? {
            Response::Created { attr, caps } => {
                self.remember_caps(attr.handle, caps);
                if hold != 0 {
                    self.created_held(attr.handle, server);
                }
                Ok(attr)
            }
            other => Err(unexpected("Create", &other)),
        }
    }

    /// Creates a regular file (`O_CREAT|O_EXCL` when `exclusive`, else opens an
    /// existing file). Unset layout fields come from the parent directory's default
    /// layout, then from the file system's defaults.
    pub async fn create(
        &self,
        path: &str,
        mode: u32,
        layout: LayoutSpec,
        exclusive: bool,
    ) -> Result<File> {
        let (parent, name) = self.walk_parent(path).await.map_err(|e| e.for_path(path))?;
        match self.create_file_in(&parent, &name, mode, layout).await {
            Ok(attr) => Ok(File::new(self.clone(), attr)),
            Err(e) if e.errno == Errno::EEXIST && !exclusive => self.open(path).await,
            Err(e) => Err(e.for_path(path)),
        }
    }

    pub(crate) async fn create_file_in(
        &self,
        parent: &Dir,
        name: &str,
        mode: u32,
        layout: LayoutSpec,
    ) -> Result<Attr> {
        self.create_file_holding(parent, name, mode, layout, false)
            .await
    }

    /// [`Client::create_file_in`], the new file held open with `hold`.
    pub(crate) async fn create_file_holding(
        &self,
        parent: &Dir,
        name: &str,
        mode: u32,
        layout: LayoutSpec,
        hold: bool,
    ) -> Result<Attr> {
        let pattr = self.dir_attr(parent).await?;
        let inherited = match pattr.detail {
            ObjDetail::Dir { default_layout, .. } => default_layout.unwrap_or_default(),
            _ => LayoutSpec::default(),
        };
        let d = &self.config().defaults;
        let spec = layout.or(inherited).or(LayoutSpec {
            stripe_size: Some(d.stripe_size),
            stripe_count: Some(d.stripe_count),
            base: None,
            replicas: Some(self.config().replication.replicas),
        });
        self.create_holding(parent, name, mode, CreateWhat::File { spec }, hold)
            .await
    }

    /// Opens an existing regular file.
    pub async fn open(&self, path: &str) -> Result<File> {
        let attr = self.walk(path, true).await.map_err(|e| e.for_path(path))?;
        match attr.kind() {
            ObjKind::File => Ok(File::new(self.clone(), attr)),
            ObjKind::Dir => Err(Error::at(Errno::EISDIR, path)),
            ObjKind::Symlink => Err(Error::at(Errno::ELOOP, path)),
            // A FIFO or device means something only to a local kernel.
            ObjKind::Node(_) => Err(Error::at(Errno::ENXIO, path)),
        }
    }

    /// Opens a file by handle (for callers that keep handles, e.g. a FUSE mount).
    pub async fn open_handle(&self, handle: Handle) -> Result<File> {
        let attr = self.getattr(handle).await?;
        match attr.kind() {
            ObjKind::File => Ok(File::new(self.clone(), attr)),
            _ => Err(Error::new(
                Errno::EISDIR,
                format!("{handle:#x} is not a regular file"),
            )),
        }
    }

    /// `symlink`: creates `path` pointing to `target` (stored verbatim).
    pub async fn symlink(&self, target: &str, path: &str) -> Result<Attr> {
        let (parent, name) = self.walk_parent(path).await.map_err(|e| e.for_path(path))?;
        let what = CreateWhat::Symlink {
            target: target.to_string(),
        };
        self.create_in(&parent, &name, 0o777, what)
            .await
            .map_err(|e| e.for_path(path))
    }

    /// `mknod`: creates the FIFO, socket or device node `path` (`rdev`: the device
    /// number of a device node, ignored by the server for other kinds). pvfs keeps it as
    /// metadata; the client library cannot open it (ENXIO), a kernel mount can.
    pub async fn mknod(&self, path: &str, kind: NodeKind, mode: u32, rdev: u64) -> Result<Attr> {
        let (parent, name) = self.walk_parent(path).await.map_err(|e| e.for_path(path))?;
        self.create_in(&parent, &name, mode, CreateWhat::Node { kind, rdev })
            .await
            .map_err(|e| e.for_path(path))
    }

    /// `readlink`: the target of symlink `path`.
    pub async fn readlink(&self, path: &str) -> Result<String> {
        let attr = self.walk(path, false).await.map_err(|e| e.for_path(path))?;
        match attr.detail {
            ObjDetail::Symlink { target } => Ok(target),
            _ => Err(Error::at(Errno::EINVAL, path)),
        }
    }

    // ----- removing --------------------------------------------------------------

    /// `unlink`: removes a name of a file, symlink or special file; the object, and a
    /// file's datafiles, go with its last name.
    pub async fn unlink(&self, path: &str) -> Result<()> {
        let (parent, name) = self.walk_parent(path).await.map_err(|e| e.for_path(path))?;
        self.unlink_in(&parent, &name, false)
            .await
            .map(|_| ())
            .map_err(|e| e.for_path(path))
    }

    /// Removes entry `name` (not a directory) of `parent`; its object loses a link.
    /// With `keep_object`, an object left without a name stays, with its data (a
    /// file still open somewhere), until [`Client::remove_object`].
    pub(crate) async fn unlink_in(
        &self,
        parent: &Dir,
        name: &str,
        keep_object: bool,
    ) -> Result<Unlinked> {
        let server = self.entry_server(parent, name);
        let req = Request::Unlink(req::Unlink {
            dir: parent.handle,
            name: name.to_string(),
            expect: None,
            want: UnlinkWant::NotDir,
            fate: if keep_object {
                LinkDrop::Keep
            } else {
                LinkDrop::Delete
            },
        });
        match self.rpc(server, req).await? {
            Response::Unlinked {
                entry,
                left,
                tickets,
                changed,
            } => {
                self.settle(entry.handle, &left, tickets).await;
                Ok(Unlinked {
                    entry,
                    left,
                    changed,
                })
            }
            other => Err(unexpected("Unlink", &other)),
        }
    }

    /// Does what is left after object `handle` lost a link: a deleted file's
    /// datafiles are deleted (with the REMOVE `tickets` the servers granted), and the
    /// ticket for an object kept without a name is kept for
    /// [`Client::remove_object`].
    pub(crate) async fn settle(&self, handle: Handle, left: &Remains, tickets: Vec<Capability>) {
        match left {
            Remains::Deleted(detail) => {
                self.forget_caps(handle);
                if let ObjDetail::File { layout } = detail {
                    io::remove_datafiles(&self.inner.pool, &self.creds, layout, &tickets).await;
                }
            }
            Remains::Kept => self.remember_tickets(&tickets),
            Remains::Unknown => {
                tracing::warn!("object {handle:#x} keeps a link too many (fsck repairs it)");
            }
            Remains::Untouched | Remains::Names(_) => {}
        }
    }

    /// Seals every shard of directory `dir` (it must be empty); on ENOTEMPTY the
    /// shards already sealed are unsealed again.
    async fn seal(&self, dir: &Dir) -> Result<()> {
        let servers = self
            .inner
            .place
            .shard_servers(self.config(), dir.handle, dir.shards);
        let ticket = self.ticket(dir.handle, rights::REMOVE);
        let results = join_all(servers.iter().map(|&s| {
            self.rpc(
                s,
                Request::SealDir(req::SealDir {
                    dir: dir.handle,
                    seal: true,
                    ticket: ticket.clone(),
                }),
            )
        }))
        .await;
        let mut first_err = None;
        // Shards that may be sealed now: those that said so, and those whose answer
        // never came (the seal may have been done); not those that refused.
        let mut maybe_sealed = Vec::new();
        for (&s, r) in servers.iter().zip(results) {
            match r {
                Ok(_) => maybe_sealed.push(s),
                Err(e) => {
                    if e.kind == ErrorKind::Unreachable {
                        maybe_sealed.push(s);
                    }
                    if first_err.is_none() || e.errno == Errno::ENOTEMPTY {
                        first_err = Some(e);
                    }
                }
            }
        }
        match first_err {
            None => Ok(()),
            Some(e) => {
                self.unseal_on(dir.handle, &maybe_sealed).await;
                Err(e)
            }
        }
    }

    async fn unseal(&self, dir: &Dir) {
        let servers = self
            .inner
            .place
            .shard_servers(self.config(), dir.handle, dir.shards);
        self.unseal_on(dir.handle, &servers).await;
    }

    async fn unseal_on(&self, dir: Handle, servers: &[usize]) {
        let ticket = self.ticket(dir, rights::REMOVE);
        let results = join_all(servers.iter().map(|&s| {
            self.rpc(
                s,
                Request::SealDir(req::SealDir {
                    dir,
                    seal: false,
                    ticket: ticket.clone(),
                }),
            )
        }))
        .await;
        for (s, r) in servers.iter().zip(results) {
            if let Err(e) = r {
                tracing::warn!(
                    "directory {dir:#x} stays sealed on {}: {e} (pvfs fsck unseals it)",
                    self.inner.pool.name(*s)
                );
            }
        }
    }

    /// `rmdir`: removes an empty directory.
    pub async fn rmdir(&self, path: &str) -> Result<()> {
        let (parent, name) = self.walk_parent(path).await.map_err(|e| e.for_path(path))?;
        self.rmdir_in(&parent, &name)
            .await
            .map_err(|e| e.for_path(path))
    }

    /// Removes directory `name` of `parent`. While another rmdir (or a rename over
    /// it) holds the directory's seals, waits and looks again: once that one removed
    /// it, this one fails with ENOENT, as the loser of such a race on one machine
    /// does; a seal left by an rmdir that died is taken over once it is older than
    /// any rmdir may run (four request timeouts).
    pub(crate) async fn rmdir_in(&self, parent: &Dir, name: &str) -> Result<()> {
        let mut busy = BusyWait::new(self);
        loop {
            match self.rmdir_once(parent, name).await {
                Err(e) if busy.again(&e) => busy.pause().await,
                other => return other,
            }
        }
    }

    async fn rmdir_once(&self, parent: &Dir, name: &str) -> Result<()> {
        let (entry, attr) = self.lookup_want(parent, name, rights::REMOVE).await?;
        if entry.kind != ObjKind::Dir {
            return Err(Error::at(Errno::ENOTDIR, name));
        }
        let target = Dir::from_attr(attr)?;
        self.seal(&target).await?;
        let server = self.entry_server(parent, name);
        let req = Request::Unlink(req::Unlink {
            dir: parent.handle,
            name: name.to_string(),
            expect: Some(target.handle),
            want: UnlinkWant::Dir,
            fate: LinkDrop::Delete,
        });
        match self.rpc(server, req).await {
            Ok(Response::Unlinked {
                entry,
                left,
                tickets,
                ..
            }) => {
                self.settle(entry.handle, &left, tickets).await;
                Ok(())
            }
            Ok(other) => Err(unexpected("Unlink", &other)),
            Err(e) => {
                self.unseal(&target).await;
                Err(e)
            }
        }
    }

    // ----- hard links ------------------------------------------------------------

    /// `link`: gives what `from` names (not a directory; a final symlink is linked
    /// itself, as Linux's link(2)) the new name `to`, in any directory of the file
    /// system. Returns its attributes with the new link count.
    pub async fn link(&self, from: &str, to: &str) -> Result<Attr> {
        let mut obj = self.walk(from, false).await.map_err(|e| e.for_path(from))?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            if obj.is_dir() {
                return Err(Error::new(
                    Errno::EPERM,
                    format!("{from}: directories cannot have hard links"),
                ));
            }
            let (dir, name) = self.walk_parent(to).await.map_err(|e| e.for_path(to))?;
            match self.link_in(obj.handle, &dir, &name).await {
                Ok((mut attr, _)) => {
                    self.fill_size(&mut attr).await?;
                    return Ok(attr);
                }
                // The object went after its lookup: `from` was never without an
                // object if a rename replaced it since. Link what it names now.
                Err(e) if e.errno == Errno::ENOENT && attempt < RETRIES => {
                    match self.walk(from, false).await {
                        Ok(now) if now.handle != obj.handle => obj = now,
                        _ => return Err(e.for_path(to)),
                    }
                }
                Err(e) => return Err(e.for_path(to)),
            }
        }
    }

    /// Adds `name` -> `handle` to `dir`: the server holding the name counts the new
    /// link at the object's owner first. Shows the VISIT capability the lookup of
    /// one of the object's names granted. Returns the object's attributes (a file's
    /// size not filled in) and when the directory changed.
    pub(crate) async fn link_in(
        &self,
        handle: Handle,
        dir: &Dir,
        name: &str,
    ) -> Result<(Attr, Timespec)> {
        let server = self.entry_server(dir, name);
        let req = Request::Link(req::Link {
            dir: dir.handle,
            name: name.to_string(),
            handle,
            proof: self.proof(handle).await,
        });
        match self.rpc(server, req).await? {
            Response::HardLinked { attr, changed } => Ok((attr, changed)),
            other => Err(unexpected("Link", &other)),
        }
    }

    // ----- rename ----------------------------------------------------------------

    /// `rename`: moves `from` to `to`, replacing `to` as POSIX does (a file replaces a
    /// file, a directory replaces an empty directory). A directory cannot move into
    /// its own subtree (EINVAL).
    pub async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let mut attempt = 0;
        let mut busy = BusyWait::new(self);
        loop {
            attempt += 1;
            let (sdir, sname) = self.walk_parent(from).await.map_err(|e| e.for_path(from))?;
            let (ddir, dname) = self.walk_parent(to).await.map_err(|e| e.for_path(to))?;
            let names = (from, to);
            match self
                .rename_once(
                    &sdir,
                    &sname,
                    &ddir,
                    &dname,
                    RenameMode::Replace,
                    names,
                    false,
                )
                .await
            {
                Err(e) if e.is_changed() && attempt < RETRIES => continue,
                // Refused while the replaced directory or the new parent is being
                // removed by another client: the next attempt sees how it ended.
                Err(e) if busy.again(&e) => {
                    attempt -= 1;
                    busy.pause().await;
                }
                other => return other.map(|_| ()),
            }
        }
    }

    /// Renames `sname` in `sdir` to `dname` in `ddir` with `mode`, retrying when a
    /// concurrent change got in the way. With `keep_replaced`, an object the rename
    /// replaced is not deleted but returned (see [`Client::rename_at_keep`]).
    pub(crate) async fn rename_in(
        &self,
        sdir: &Dir,
        sname: &str,
        ddir: &Dir,
        dname: &str,
        mode: RenameMode,
        keep_replaced: bool,
    ) -> Result<Option<(DirEntry, Remains)>> {
        let mut attempt = 0;
        let mut busy = BusyWait::new(self);
        loop {
            attempt += 1;
            match self
                .rename_once(
                    sdir,
                    sname,
                    ddir,
                    dname,
                    mode,
                    (sname, dname),
                    keep_replaced,
                )
                .await
            {
                Err(e) if e.is_changed() && attempt < RETRIES => continue,
                // Refused while the replaced directory or the new parent is being
                // removed by another client: the next attempt sees how it ended.
                Err(e) if busy.again(&e) => {
                    attempt -= 1;
                    busy.pause().await;
                }
                other => return other,
            }
        }
    }

    /// One attempt of a rename. Returns the entry the rename replaced, if any, and
    /// what became of its object (with `keep_replaced`, one left without a name is
    /// kept: [`Remains::Kept`]).
    #[allow(clippy::too_many_arguments)]
    async fn rename_once(
        &self,
        sdir: &Dir,
        sname: &str,
        ddir: &Dir,
        dname: &str,
        mode: RenameMode,
        (from, to): (&str, &str),
        keep_replaced: bool,
    ) -> Result<Option<(DirEntry, Remains)>> {
        // The source's MOVE ticket (the server checks the caller may take the name
        // away), and for a directory going elsewhere, may rewrite its "..".
        let reparent = if sdir.handle != ddir.handle {
            rights::REPARENT
        } else {
            0
        };
        let (src, src_attr) = self
            .lookup_want(sdir, sname, rights::MOVE | reparent)
            .await
            .map_err(|e| e.for_path(from))?;
        if sdir.handle == ddir.handle && sname == dname {
            return match mode {
                RenameMode::NoReplace => Err(Error::at(Errno::EEXIST, to)),
                _ => Ok(None),
            };
        }
        if src.kind == ObjKind::Dir {
            self.check_not_inside(src.handle, ddir, to).await?;
        }
        let dst_want = if mode == RenameMode::Exchange {
            rights::MOVE | reparent
        } else {
            0
        };
        let dst = match self.lookup_want(ddir, dname, dst_want).await {
            Ok(found) => Some(found),
            Err(e) if e.errno == Errno::ENOENT => None,
            Err(e) => return Err(e.for_path(to)),
        };
        match (mode, &dst) {
            (RenameMode::NoReplace, Some(_)) => return Err(Error::at(Errno::EEXIST, to)),
            (RenameMode::Exchange, None) => return Err(Error::at(Errno::ENOENT, to)),
            (RenameMode::Exchange, Some((d, _))) => {
                return self
                    .exchange(sdir, sname, &src, ddir, dname, d, (from, to))
                    .await
                    .map(|()| None)
            }
            _ => {}
        }
        let mut sealed: Option<Dir> = None;
        if let Some((d, dattr)) = &dst {
            if d.handle == src.handle {
                if src.kind == ObjKind::Dir {
                    // A directory has one name: two are a move across servers that
                    // stopped between its steps. Finish it (the old name goes).
                    self.finish_dir_move(sdir, sname, ddir, &src)
                        .await
                        .map_err(|e| e.for_path(from))?;
                } else {
                    // The two lookups ran one after the other: a concurrent rename
                    // may have moved the source onto the destination between them
                    // (the source then names nothing). Both must name the object at
                    // once for the rename to change nothing: the source is looked
                    // up again after the destination, or the rename starts again.
                    let again = self.lookup_want(sdir, sname, 0).await;
                    if !again.as_ref().is_ok_and(|(e, _)| e.handle == src.handle) {
                        return Err(Error::of_kind(
                            ErrorKind::Changed,
                            Errno::ESTALE,
                            format!("{from} changed while {to} was looked up"),
                        ));
                    }
                }
                return Ok(None); // Both names already name the same object.
            }
            match (src.kind == ObjKind::Dir, d.kind == ObjKind::Dir) {
                (true, false) => return Err(Error::at(Errno::ENOTDIR, to)),
                (false, true) => return Err(Error::at(Errno::EISDIR, to)),
                (true, true) => {
                    let victim = Dir::from_attr(dattr.clone())?;
                    // A REMOVE ticket to seal it: the caller may remove that name.
                    self.lookup_want(ddir, dname, rights::REMOVE)
                        .await
                        .map_err(|e| e.for_path(to))?;
                    self.seal(&victim).await.map_err(|e| e.for_path(to))?;
                    sealed = Some(victim);
                }
                (false, false) => {}
            }
        }
        let replace = dst.as_ref().map(|(d, _)| d.handle);
        let fate = if keep_replaced {
            LinkDrop::Keep
        } else {
            LinkDrop::Delete
        };
        let result = self
            .move_entry(sdir, sname, ddir, dname, &src, replace, fate)
            .await;
        let (replaced, left, tickets) = match result {
            Ok(r) => r,
            Err(e) => {
                if let Some(v) = &sealed {
                    self.unseal(v).await;
                }
                // A name that appeared at the destination after the lookup above, or
                // an object looked up above that is gone by now (a concurrent rename
                // replaced it, an unlink removed it), is a concurrent change like any
                // other: the rename starts again and looks both names up anew,
                // rather than failing as rename(2) would not.
                let changed = match e.errno {
                    Errno::EEXIST => Some("appeared"),
                    Errno::ENOENT => Some("changed"),
                    _ => None,
                };
                if let (Some(how), RenameMode::Replace) = (changed, mode) {
                    return Err(Error::of_kind(
                        ErrorKind::Changed,
                        Errno::ESTALE,
                        format!("{to} or {from} {how} while {from} was renamed: {e}"),
                    ));
                }
                return Err(e.for_path(from));
            }
        };
        let replaced = match replaced {
            Some(old) => {
                self.settle(old.handle, &left, tickets).await;
                Some((old, left))
            }
            None => None,
        };
        if src.kind == ObjKind::Dir && sdir.handle != ddir.handle {
            self.set_parent(src_attr.handle, ddir.handle).await?;
        }
        Ok(replaced)
    }

    /// Ends a directory's move from `sname` in `sdir` to its other name in `ddir`
    /// that was interrupted after its new name was in place: the old name goes
    /// (only while it still names the directory), then the directory's parent is
    /// set. What a rename retried after an error does, so a directory is left under
    /// two names only until its rename is tried again (or `pvfs fsck`).
    async fn finish_dir_move(
        &self,
        sdir: &Dir,
        sname: &str,
        ddir: &Dir,
        src: &DirEntry,
    ) -> Result<()> {
        let unlink = Request::Unlink(req::Unlink {
            dir: sdir.handle,
            name: sname.to_string(),
            expect: Some(src.handle),
            want: UnlinkWant::Dir,
            fate: LinkDrop::Moved,
        });
        self.rpc(self.entry_server(sdir, sname), unlink).await?;
        if sdir.handle != ddir.handle {
            self.set_parent(src.handle, ddir.handle).await?;
        }
        Ok(())
    }

    async fn set_parent(&self, dir: Handle, parent: Handle) -> Result<()> {
        let owner = self.owner(dir)?;
        let ticket = self.ticket(dir, rights::MOVE);
        self.rpc(
            owner,
            Request::SetParent(req::SetParent {
                dir,
                parent,
                ticket,
            }),
        )
        .await?;
        Ok(())
    }

    /// `renameat2(RENAME_EXCHANGE)`: swaps two existing names. Each step is a
    /// compare-and-set on the entry; not atomic across the two entries (a crash
    /// between them leaves one object under both names).
    #[allow(clippy::too_many_arguments)]
    async fn exchange(
        &self,
        sdir: &Dir,
        sname: &str,
        src: &DirEntry,
        ddir: &Dir,
        dname: &str,
        dst: &DirEntry,
        (from, to): (&str, &str),
    ) -> Result<()> {
        if dst.handle == src.handle {
            return Ok(());
        }
        if dst.kind == ObjKind::Dir {
            self.check_not_inside(dst.handle, sdir, from).await?;
        }
        // Each object moves to the other name: neither loses a link.
        let link = |dir: &Dir, name: &str, entry: &DirEntry, old: Handle| {
            Request::LinkEntry(req::LinkEntry {
                dir: dir.handle,
                name: name.to_string(),
                handle: entry.handle,
                kind: entry.kind,
                replace: Some(old),
                fate: LinkDrop::Moved,
                counted: false,
                ticket: self.ticket(entry.handle, rights::MOVE),
            })
        };
        let d_server = self.entry_server(ddir, dname);
        self.rpc(d_server, link(ddir, dname, src, dst.handle))
            .await
            .map_err(|e| e.for_path(to))?;
        let s_server = self.entry_server(sdir, sname);
        self.rpc(s_server, link(sdir, sname, dst, src.handle))
            .await
            .map_err(|e| e.for_path(from))?;
        if sdir.handle != ddir.handle {
            if src.kind == ObjKind::Dir {
                self.set_parent(src.handle, ddir.handle).await?;
            }
            if dst.kind == ObjKind::Dir {
                self.set_parent(dst.handle, sdir.handle).await?;
            }
        }
        Ok(())
    }

    /// Moves the entry: one commit when both names live on one server, otherwise
    /// link the new name first, then remove the old one (a crash in between leaves
    /// two names, never none). A replaced object loses a link as `fate` says; returns
    /// its entry, what became of it, and tickets for what is left to delete.
    #[allow(clippy::too_many_arguments)]
    async fn move_entry(
        &self,
        sdir: &Dir,
        sname: &str,
        ddir: &Dir,
        dname: &str,
        src: &DirEntry,
        replace: Option<Handle>,
        fate: LinkDrop,
    ) -> Result<(Option<DirEntry>, Remains, Vec<Capability>)> {
        let s_server = self.entry_server(sdir, sname);
        let d_server = self.entry_server(ddir, dname);
        if s_server == d_server {
            let req = Request::Rename(req::Rename {
                src_dir: sdir.handle,
                src_name: sname.to_string(),
                dst_dir: ddir.handle,
                dst_name: dname.to_string(),
                expect_src: src.handle,
                replace,
                fate,
            });
            return match self.rpc(s_server, req).await? {
                Response::Linked {
                    replaced,
                    left,
                    tickets,
                    ..
                } => Ok((replaced, left, tickets)),
                other => Err(unexpected("Rename", &other)),
            };
        }
        // A file's new name is counted as a link, which the removal of its old name
        // takes back: interrupted between the steps, the file has two counted names
        // (a hard link), never a name whose link is missing. A directory has one name
        // and no hard links: moving it leaves it under both names until fsck, if the
        // second step does not happen.
        let counted = src.kind != ObjKind::Dir;
        let link = Request::LinkEntry(req::LinkEntry {
            dir: ddir.handle,
            name: dname.to_string(),
            handle: src.handle,
            kind: src.kind,
            replace,
            fate,
            counted,
            ticket: self.ticket(src.handle, rights::MOVE),
        });
        let (replaced, left, tickets) = match self.rpc(d_server, link).await? {
            Response::Linked {
                replaced,
                left,
                tickets,
                ..
            } => (replaced, left, tickets),
            other => return Err(unexpected("LinkEntry", &other)),
        };
        // The server replaced exactly what the step named (a compare-and-set).
        debug_assert_eq!(
            replaced.as_ref().map(|r| r.handle),
            replace,
            "LinkEntry replaced another entry than the one it was asked to"
        );
        let unlink = Request::Unlink(req::Unlink {
            dir: sdir.handle,
            name: sname.to_string(),
            expect: Some(src.handle),
            want: UnlinkWant::Any,
            fate: if counted {
                LinkDrop::Keep
            } else {
                LinkDrop::Moved
            },
        });
        match self.rpc(s_server, unlink).await {
            Ok(_) => Ok((replaced, left, tickets)),
            // The old name is gone or names another object: another rename or an
            // unlink took it between the steps. With nothing replaced, the new name
            // is taken back, so this rename did not happen at all (the caller looks
            // the names up again) rather than leaving a second name behind.
            Err(e) if replaced.is_none() && (e.errno == Errno::ENOENT || e.is_changed()) => {
                self.take_back(ddir, dname, src, counted).await;
                Err(e)
            }
            Err(e) => {
                tracing::warn!("rename left the old name {sname:?} in place: {e}");
                // The replaced object lost its link already: finish with it.
                if let Some(old) = &replaced {
                    self.settle(old.handle, &left, tickets).await;
                }
                Err(e)
            }
        }
    }

    /// Removes the name `dname` in `ddir` that the first step of a rename gave
    /// `src`, while it still names `src`: its link taken back (`counted`; at zero
    /// the object goes, as after an unlink of its last name), or a directory's
    /// second name dropped. A failure leaves the name to fsck, and says so.
    async fn take_back(&self, ddir: &Dir, dname: &str, src: &DirEntry, counted: bool) {
        let unlink = Request::Unlink(req::Unlink {
            dir: ddir.handle,
            name: dname.to_string(),
            expect: Some(src.handle),
            want: UnlinkWant::Any,
            fate: if counted {
                LinkDrop::Delete
            } else {
                LinkDrop::Moved
            },
        });
        match self.rpc(self.entry_server(ddir, dname), unlink).await {
            Ok(Response::Unlinked {
                entry,
                left,
                tickets,
                ..
            }) => self.settle(entry.handle, &left, tickets).await,
            Ok(other) => tracing::warn!("{}", unexpected("Unlink", &other)),
            Err(e) => {
                tracing::warn!("a rename cut short left the new name {dname:?} in place: {e}")
            }
        }
    }

    /// Fails with EINVAL if `dir` is `moving` or lies below it.
    async fn check_not_inside(&self, moving: Handle, dir: &Dir, to: &str) -> Result<()> {
        let root = self.root();
        let mut cur = dir.handle;
        let mut depth = 0;
        loop {
            if cur == moving {
                return Err(Error::new(
                    Errno::EINVAL,
                    format!("{to}: cannot move a directory into itself"),
                ));
            }
            if cur == root {
                return Ok(());
            }
            depth += 1;
            if depth > 4096 {
                return Err(Error::new(
                    Errno::ELOOP,
                    format!("{to}: directory tree too deep"),
                ));
            }
            cur = match self.getattr(cur).await?.detail {
                ObjDetail::Dir { parent, .. } => parent,
                _ => return Err(Error::at(Errno::ENOTDIR, to)),
            };
        }
    }

    // ----- listing ---------------------------------------------------------------

    /// Every entry of directory `path` (all shards, in no particular order).
    pub async fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let attr = self.walk(path, true).await.map_err(|e| e.for_path(path))?;
        let dir = Dir::from_attr(attr).map_err(|_| Error::at(Errno::ENOTDIR, path))?;
        self.readdir_dir(&dir).await
    }

    pub(crate) async fn readdir_dir(&self, dir: &Dir) -> Result<Vec<DirEntry>> {
        let servers = self
            .inner
            .place
            .shard_servers(self.config(), dir.handle, dir.shards);
        let parts = try_join_all(
            servers
                .into_iter()
                .map(|s| self.readdir_server(dir.handle, s)),
        )
        .await?;
        Ok(parts.into_iter().flatten().collect())
    }

    pub(crate) async fn readdir_server(&self, dir: Handle, server: usize) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let req = Request::ReadDir(req::ReadDir {
                dir,
                shard: 0,
                after: after.clone(),
                max: PAGE,
            });
            match self.rpc(server, req).await? {
                Response::DirPage { entries, more } => {
                    after = entries.last().map(|e| e.name.clone());
                    out.extend(entries);
                    if !more || after.is_none() {
                        return Ok(out);
                    }
                }
                other => return Err(unexpected("ReadDir", &other)),
            }
        }
    }

    /// Entries of `path` with their attributes, by the two-phase algorithm of the POSIX
    /// extensions paper (Vilayannur et al., 2008): one batched attribute request per
    /// metadata server, then (when `sizes`) one batched size request per data server.
    /// Each entry carries its own result.
    pub async fn readdir_plus(
        &self,
        path: &str,
        sizes: bool,
    ) -> Result<Vec<(DirEntry, Result<Attr>)>> {
        let entries = self.readdir(path).await?;
        Ok(self.with_attrs(entries, sizes).await)
    }

    /// Pairs entries with their attributes (the two phases of readdirplus).
    pub(crate) async fn with_attrs(
        &self,
        entries: Vec<DirEntry>,
        sizes: bool,
    ) -> Vec<(DirEntry, Result<Attr>)> {
        let mut attrs = self.list_attrs(&entries).await;
        if sizes {
            self.fill_sizes(&mut attrs).await;
            self.fill_dirs(attrs.iter_mut().filter_map(|a| a.as_mut().ok()).collect())
                .await;
        }
        entries.into_iter().zip(attrs).collect()
    }

    /// Phase 1: attributes of many objects, one ListAttr per owning server.
    pub(crate) async fn list_attrs(&self, entries: &[DirEntry]) -> Vec<Result<Attr>> {
        let mut out: Vec<Result<Attr>> = entries
            .iter()
            .map(|_| Err(Error::new(Errno::EIO, "not fetched")))
            .collect();
        let mut by_server: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            match self.config().owner_of(e.handle) {
                Some(s) => match by_server.iter_mut().find(|(x, _)| *x == s) {
                    Some((_, v)) => v.push(i),
                    None => by_server.push((s, vec![i])),
                },
                None => {
                    out[i] = Err(Error::of_kind(
                        ErrorKind::NoServer,
                        Errno::ESTALE,
                        "handle of no server",
                    ))
                }
            }
        }
        let by_server = split_batches(by_server);
        let answers = join_all(
            by_server
                .iter()
                .map(|(server, idxs)| self.list_attr_batch(*server, entries, idxs)),
        )
        .await;
        for ((_, idxs), answer) in by_server.iter().zip(answers) {
            for (&i, r) in idxs.iter().zip(answer) {
                out[i] = r;
            }
        }
        out
    }

    /// Attributes of `entries[idxs]` from one server: one ListAttr, and more only if
    /// the server answered a prefix (very large attributes, e.g. long symlink targets).
    async fn list_attr_batch(
        &self,
        server: usize,
        entries: &[DirEntry],
        idxs: &[usize],
    ) -> Vec<Result<Attr>> {
        let mut out = Vec::with_capacity(idxs.len());
        while out.len() < idxs.len() {
            let rest = &idxs[out.len()..];
            let handles = rest.iter().map(|&i| entries[i].handle).collect();
            match self
                .rpc(server, Request::ListAttr(req::ListAttr { handles }))
                .await
            {
                Ok(Response::Attrs { attrs }) if !attrs.is_empty() && attrs.len() <= rest.len() => {
                    out.extend(attrs.into_iter().map(|r| match (r.errno, r.attr) {
                        (0, Some(a)) => Ok(a),
                        (errno, _) => Err(Error::new(Errno(errno), "attributes unavailable")),
                    }));
                }
                Ok(other) => {
                    let e = unexpected("ListAttr", &other);
                    out.resize(idxs.len(), Err(e));
                }
                Err(e) => out.resize(idxs.len(), Err(e)),
            }
        }
        out
    }

    /// Phase 2: sizes of many files, one GetSizes per data server.
    pub(crate) async fn fill_sizes(&self, attrs: &mut [Result<Attr>]) {
        // (attr index, datafile index, datafile handle), grouped by data server.
        type Wanted = Vec<(usize, usize, Handle)>;
        let mut by_server: Vec<(usize, Wanted)> = Vec::new();
        // Files with copies: each datafile's size from a copy that is up, under
        // the map (a copy that is down or catching up may be stale).
        let mut copied: Vec<usize> = Vec::new();
        for (i, a) in attrs.iter().enumerate() {
            if let Ok(Some(layout)) = a.as_ref().map(|a| a.layout()) {
                if layout.replicas > 1 {
                    copied.push(i);
                    continue;
                }
                // The attributes were just fetched: their width holds.
                for (k, df) in layout.datafiles[layout.sized()].iter().enumerate() {
                    let s = df.server as usize;
                    match by_server.iter_mut().find(|(x, _)| *x == s) {
                        Some((_, v)) => v.push((i, k, df.handle)),
                        None => by_server.push((s, vec![(i, k, df.handle)])),
                    }
                }
            }
        }
        let by_server = split_batches(by_server);
        let answers = join_all(by_server.iter().map(|(server, items)| async move {
            let handles = items.iter().map(|x| x.2).collect();
            self.rpc(
                *server,
                Request::GetSizes(req::GetSizes { map: None, handles }),
            )
            .await
        }))
        .await;
        let mut local: Vec<Vec<DatafileStat>> = attrs
            .iter()
            .map(|a| match a.as_ref().map(|a| a.layout()) {
                Ok(Some(l)) => vec![DatafileStat::default(); l.datafiles.len()],
                _ => Vec::new(),
            })
            .collect();
        for ((_, items), answer) in by_server.iter().zip(answers) {
            match answer {
                Ok(Response::Sizes { sizes }) if sizes.len() == items.len() => {
                    for (&(i, k, _), st) in items.iter().zip(sizes) {
                        local[i][k] = st;
                    }
                }
                other => {
                    let err = match other {
                        Err(e) => e,
                        Ok(r) => unexpected("GetSizes", &r),
                    };
                    for &(i, _, _) in items {
                        attrs[i] = Err(err.clone());
                    }
                }
            }
        }
        let shared: &[Result<Attr>] = attrs;
        let copied_stats = join_all(copied.iter().map(|&i| async move {
            let layout = match shared[i].as_ref().map(|a| a.layout()) {
                Ok(Some(l)) => l,
                _ => return Ok(Vec::new()),
            };
            let which: Vec<usize> = layout.sized().collect();
            let mut stats = vec![DatafileStat::default(); layout.datafiles.len()];
            let got = io::datafile_stats(&self.inner.pool, &self.creds, layout, &which).await?;
            for (k, st) in which.into_iter().zip(got) {
                stats[k] = st;
            }
            Ok(stats)
        }))
        .await;
        for (&i, got) in copied.iter().zip(copied_stats) {
            match got {
                Ok(stats) => local[i] = stats,
                Err(e) => attrs[i] = Err(e),
            }
        }
        for (a, stats) in attrs.iter_mut().zip(local) {
            if let Ok(a) = a.as_mut() {
                if let Some(l) = a.layout().cloned() {
                    apply_datafile_stats(a, &l, &stats);
                }
            }
        }
    }

    /// Merges into directories' attributes what their shards on other servers than
    /// their own add (times of entry changes, subdirectories; the owner merged its
    /// own shard): one `DirStats` per server, all at once. A server that does not
    /// answer leaves its shards out (the directory's times may then be older than
    /// its newest entry change) rather than failing a `stat`.
    pub(crate) async fn fill_dirs(&self, mut dirs: Vec<&mut Attr>) {
        let mut by_server: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, a) in dirs.iter().enumerate() {
            let ObjDetail::Dir { shards, .. } = a.detail else {
                continue;
            };
            let Ok(owner) = self.owner(a.handle) else {
                continue;
            };
            for s in self
                .inner
                .place
                .shard_servers(self.config(), a.handle, shards)
            {
                if s == owner {
                    continue;
                }
                match by_server.iter_mut().find(|(x, _)| *x == s) {
                    Some((_, v)) => v.push(i),
                    None => by_server.push((s, vec![i])),
                }
            }
        }
        let by_server = split_batches(by_server);
        let answers = join_all(by_server.iter().map(|(server, idxs)| {
            let handles = idxs.iter().map(|&i| dirs[i].handle).collect();
            let req = Request::DirStats(req::DirStats { dirs: handles });
            self.inner.pool.rpc_optional(*server, &self.creds, req)
        }))
        .await;
        for ((server, idxs), answer) in by_server.iter().zip(answers) {
            match answer {
                Ok(Response::ShardStats { stats }) if stats.len() == idxs.len() => {
                    for (&i, s) in idxs.iter().zip(&stats) {
                        dirs[i].merge_shard(s);
                    }
                }
                Ok(other) => {
                    tracing::debug!("directory shards: {}", unexpected("DirStats", &other));
                }
                Err(e) => tracing::debug!(
                    "directory shards on {} left out: {e}",
                    self.server_name(*server)
                ),
            }
        }
    }

    // ----- file system -----------------------------------------------------------

    /// Space and object counts of every server; servers that do not answer are
    /// reported as such and left out of the totals (never waits past the timeout).
    /// The space of a file system several data servers store on counts once.
    pub async fn statfs(&self) -> FsStat {
        let servers = &self.config().servers;
        let answers =
            join_all((0..servers.len()).map(|i| self.rpc(i, Request::StatFs(req::StatFs {}))))
                .await;
        let mut fs = FsStat {
            servers: Vec::new(),
            total_bytes: 0,
            free_bytes: 0,
            avail_bytes: 0,
            objects: 0,
            datafiles: 0,
        };
        // File systems already counted, with the first data server on each: data
        // servers that store on one file system (several servers on one machine and
        // disk) share its space.
        let mut counted: std::collections::HashMap<u64, String> = Default::default();
        for (sc, answer) in servers.iter().zip(answers) {
            let (stat, health) = match answer {
                Ok(Response::StatFs { stat, health }) => (Ok(stat), Some(health)),
                Ok(other) => (Err(unexpected("StatFs", &other)), None),
                Err(e) => (Err(e), None),
            };
            let mut same_space_as = None;
            if let Ok(s) = &stat {
                if sc.roles.contains(pvfs_proto::Roles::DATA) && s.fs_id != 0 {
                    same_space_as = counted.get(&s.fs_id).cloned();
                    counted.entry(s.fs_id).or_insert_with(|| sc.name.clone());
                }
                if sc.roles.contains(pvfs_proto::Roles::DATA) && same_space_as.is_none() {
                    fs.total_bytes += s.total_bytes;
                    fs.free_bytes += s.free_bytes;
                    fs.avail_bytes += s.avail_bytes;
                }
                fs.objects += s.objects;
                fs.datafiles += s.datafiles;
            }
            fs.servers.push(ServerStat {
                name: sc.name.clone(),
                address: sc.address.clone(),
                stat,
                health,
                same_space_as,
            });
        }
        fs
    }

    /// Pings every server at once.
    pub async fn ping(&self) -> Vec<PingReport> {
        let servers = &self.config().servers;
        join_all(servers.iter().enumerate().map(|(i, sc)| async move {
            let start = Instant::now();
            let (result, health) = match self.rpc(i, Request::Ping(req::Ping {})).await {
                Ok(Response::Pong { info, health }) => (Ok((start.elapsed(), info)), Some(health)),
                Ok(other) => (Err(unexpected("Ping", &other)), None),
                Err(e) => (Err(e), None),
            };
            PingReport {
                name: sc.name.clone(),
                address: sc.address.clone(),
                result,
                health,
            }
        }))
        .await
    }

    /// Sets (or with `None` clears) the default layout of new files in directory `path`.
    pub async fn set_dir_layout(&self, path: &str, layout: Option<LayoutSpec>) -> Result<Attr> {
        let attr = self.walk(path, true).await.map_err(|e| e.for_path(path))?;
        if attr.kind() != ObjKind::Dir {
            return Err(Error::at(Errno::ENOTDIR, path));
        }
        self.set_dir_layout_at(attr.handle, layout)
            .await
            .map_err(|e| e.for_path(path))
    }

    /// Where every stripe of file `path` lives and how much each datafile holds.
    pub async fn layout(&self, path: &str) -> Result<LayoutReport> {
        let mut attr = self.walk(path, true).await.map_err(|e| e.for_path(path))?;
        let Some(layout) = attr.layout().cloned() else {
            return Err(Error::new(
                Errno::EINVAL,
                format!("{path}: not a regular file"),
            ));
        };
        let all: Vec<usize> = (0..layout.datafiles.len()).collect();
        let stats = io::datafile_stats(&self.inner.pool, &self.creds, &layout, &all).await?;
        apply_datafile_stats(&mut attr, &layout, &stats);
        let datafiles = layout
            .datafiles
            .iter()
            .zip(stats)
            .map(|(df, st)| {
                let name = self
                    .config()
                    .servers
                    .get(df.server as usize)
                    .map_or_else(|| format!("#{}", df.server), |s| s.name.clone());
                (*df, name, st)
            })
            .collect();
        Ok(LayoutReport { attr, datafiles })
    }

    /// `truncate`: sets the size of file `path`.
    pub async fn truncate(&self, path: &str, size: u64) -> Result<()> {
        let file = self.open(path).await?;
        file.truncate(size).await.map_err(|e| e.for_path(path))
    }
}
