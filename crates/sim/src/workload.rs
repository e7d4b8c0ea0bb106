//! What the simulated clients do, and what they must see: each client works in a
//! directory of its own with a random stream of operations (create and write, mkdir,
//! rename — often across metadata servers —, hard links, unlink, rmdir, chmod, read,
//! list) and keeps a model of its directory. Every answer is checked against the
//! model: an operation that succeeded must have been allowed, one that failed with a
//! POSIX error must have failed so in the model too (a retried create answered EEXIST
//! is a mutation done twice). An operation that failed because a server could not be
//! reached may have happened or not: the client then looks (once the servers answer)
//! and accepts exactly the outcomes the operation allows — for a rename: not done,
//! done, or the object under both names (a crash between its steps), never under none.
//!
//! Clients also take turns on one exclusive lock of a shared file and check that no
//! two hold it at once, append records to that file (no acknowledged append may
//! overlap another, and each is there, whole, at the end), and read files they hold
//! open after removing their names (the bytes must be there, whatever crashed
//! meanwhile).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pvfs_client::{Attr, Client, Error, ErrorKind, LayoutSpec, LockKind, LockRequest, LockType};
use pvfs_proto::{Errno, Handle, SetAttr};

use crate::rng::Rng;
use crate::{Failure, Trace};

/// What one client saw.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Operations done.
    pub ops: u64,
    /// Operations that succeeded.
    pub ok: u64,
    /// Operations that failed with the error the model predicted.
    pub refused: u64,
    /// Operations whose outcome was unknown and had to be looked up.
    pub indeterminate: u64,
    /// Renames whose two names are on different metadata servers.
    pub cross_renames: u64,
    /// Hard links made.
    pub links: u64,
    /// Exclusive locks held.
    pub locks: u64,
    /// Directory moves interrupted between their steps (the directory under both
    /// names) and finished by trying the rename again.
    pub resumed_moves: u64,
    /// Files read through an open file after their name was removed.
    pub held_reads: u64,
    /// Appends to the shared file acknowledged.
    pub appends: u64,
}

/// An object of the model.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Obj {
    Dir(Handle),
    File(Handle),
}

impl Obj {
    fn handle(&self) -> Handle {
        match self {
            Obj::Dir(h) | Obj::File(h) => *h,
        }
    }
}

/// A client's model of its own directory.
#[derive(Default)]
struct Model {
    /// Path → object.
    paths: BTreeMap<String, Obj>,
    /// File → contents it may have (more than one after a write whose outcome is
    /// unknown).
    contents: BTreeMap<Handle, BTreeSet<Vec<u8>>>,
    /// File → mode bits it may have.
    modes: BTreeMap<Handle, BTreeSet<u32>>,
    /// File → values its attribute `user.k` may have (None: absent).
    xattrs: BTreeMap<Handle, BTreeSet<Option<Vec<u8>>>>,
}

impl Model {
    fn parent(path: &str) -> &str {
        path.rsplit_once('/').map_or("/", |(p, _)| p)
    }

    fn children<'a>(&'a self, dir: &'a str) -> impl Iterator<Item = &'a String> + 'a {
        self.paths
            .keys()
            .filter(move |p| Model::parent(p) == dir && p.as_str() != dir)
    }

    fn names_of(&self, h: Handle) -> usize {
        self.paths.values().filter(|o| o.handle() == h).count()
    }

    /// Moves `from` (and everything under it) to `to`.
    fn rename(&mut self, from: &str, to: &str) {
        let moved: Vec<(String, Obj)> = self
            .paths
            .range(from.to_string()..)
            .take_while(|(p, _)| p.as_str() == from || p.starts_with(&format!("{from}/")))
            .map(|(p, o)| (p.clone(), o.clone()))
            .collect();
        // A replaced name first (its object keeps its other names).
        let replaced: Vec<String> = self
            .paths
            .keys()
            .filter(|p| p.as_str() == to || p.starts_with(&format!("{to}/")))
            .cloned()
            .collect();
        for p in replaced {
            self.paths.remove(&p);
        }
        for (p, _) in &moved {
            self.paths.remove(p);
        }
        for (p, o) in moved {
            let rest = &p[from.len()..];
            self.paths.insert(format!("{to}{rest}"), o);
        }
        self.forget_unnamed();
    }

    fn forget_unnamed(&mut self) {
        let named: BTreeSet<Handle> = self.paths.values().map(Obj::handle).collect();
        self.contents.retain(|h, _| named.contains(h));
        self.modes.retain(|h, _| named.contains(h));
        self.xattrs.retain(|h, _| named.contains(h));
    }
}

/// The shared lock's holder, for the check that no two hold it: who, and how many
/// times the lock's server had crashed when it was granted (a crash may take a lock
/// from its holder: a later holder then is no conflict).
#[derive(Default)]
pub struct LockWitness {
    holder: Option<(usize, u64)>,
}

/// The appends to the shared file that were acknowledged (and made durable, in runs
/// with power losses), for the check that none overlaps another: by offset, the end
/// and who appended what.
#[derive(Default)]
pub struct AppendWitness {
    acked: BTreeMap<u64, (u64, usize, Vec<u8>)>,
}

impl AppendWitness {
    /// Records an acknowledged append of `bytes` at `at` by client `k`; the append
    /// it overlaps, if any.
    fn add(&mut self, at: u64, k: usize, bytes: &[u8]) -> Option<(u64, usize)> {
        let end = at + bytes.len() as u64;
        let before = self.acked.range(..end).next_back();
        if let Some((&a, &(e, who, _))) = before {
            if e > at {
                return Some((a, who));
            }
        }
        self.acked.insert(at, (end, k, bytes.to_vec()));
        None
    }
}

/// Everything a client needs from the rest of the run.
pub struct Shared {
    /// The trace of the run (for the replay check).
    pub trace: Trace,
    /// Who holds the shared lock.
    pub lock: Arc<Mutex<LockWitness>>,
    /// The acknowledged appends to the shared file.
    pub appends: Arc<Mutex<AppendWitness>>,
    /// Crashes so far of each server (updated by the nemesis).
    pub crashes: Arc<Mutex<Vec<u64>>>,
    /// The metadata server of each directory handle (for counting cross-server
    /// renames): the configuration.
    pub config: pvfs_config::Config,
    /// Whether metadata groups move between servers (a replicated file system): a
    /// crash of any server may then take the shared lock from its holder.
    pub replicated: bool,
}

/// One simulated client.
pub struct Worker {
    k: usize,
    c: Client,
    rng: Rng,
    model: Model,
    root: String,
    next: u64,
    counts: Counts,
    shared: Arc<Shared>,
    /// The shared file's handle (locks).
    lock_file: Option<Handle>,
    /// Whether the client fsyncs what it writes (runs with power losses).
    pub fsync: bool,
    /// Whether to wait, after an unknown outcome, until the servers can no longer
    /// make the change before looking at it ([`crate::Options::settle`]).
    pub settle: bool,
    /// How late a request can still arrive at its server (the network's worst delay).
    pub transit: Duration,
    /// Whether an operation's outcome was unknown and nothing has been looked at since.
    unsettled: std::sync::atomic::AtomicBool,
}

/// Whether an error says the operation may or may not have happened.
fn unknown(e: &Error) -> bool {
    matches!(
        e.kind,
        ErrorKind::Unreachable | ErrorKind::Storage | ErrorKind::Busy
    )
}

/// How long a client waits between looks while servers are down.
const LOOK_PAUSE: Duration = Duration::from_millis(200);
/// How long a client keeps looking before it reports that the servers never came
/// back.
const LOOK_FOR: Duration = Duration::from_secs(600);

impl Worker {
    /// Client `k`, working under `/c<k>`.
    pub fn new(k: usize, c: Client, rng: Rng, shared: Arc<Shared>) -> Worker {
        Worker {
            k,
            c,
            rng,
            model: Model::default(),
            root: format!("/c{k}"),
            next: 0,
            counts: Counts::default(),
            shared,
            lock_file: None,
            fsync: false,
            settle: false,
            transit: Duration::ZERO,
            unsettled: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn note(&self, what: &str) {
        self.shared.trace.push(format!("c{} {what}", self.k));
    }

    fn fail(&self, what: String) -> Failure {
        Failure::Check(format!("client c{}: {what}", self.k))
    }

    /// Makes the client's directory and finds the shared file.
    pub async fn setup(&mut self) -> Result<(), Failure> {
        let root = self.root.clone();
        let attr = self
            .until_answered(|c| {
                let root = root.clone();
                async move {
                    match c.mkdir(&root, 0o755).await {
                        Err(e) if e.errno == Errno::EEXIST => c.lstat(&root).await,
                        other => other,
                    }
                }
            })
            .await?;
        self.model.paths.insert(root, Obj::Dir(attr.handle));
        let shared = self
            .until_answered(|c| async move {
                match c
                    .create("/shared", 0o666, LayoutSpec::default(), false)
                    .await
                {
                    Ok(f) => Ok(f.handle()),
                    Err(e) => Err(e),
                }
            })
            .await?;
        self.lock_file = Some(shared);
        Ok(())
    }

    /// Runs `f` until it answers something else than "unreachable", for at most
    /// [`LOOK_FOR`].
    async fn until_answered<T, F, Fut>(&self, f: F) -> Result<T, Failure>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        self.wait_out_unknown().await;
        let start = tokio::time::Instant::now();
        loop {
            match f(self.c.clone()).await {
                Ok(v) => return Ok(v),
                Err(e) if unknown(&e) && start.elapsed() < LOOK_FOR => {
                    tokio::time::sleep(LOOK_PAUSE).await;
                }
                Err(e) => return Err(self.fail(format!("the servers did not answer: {e}"))),
            }
        }
    }

    /// After an operation whose outcome was unknown: waits until the servers can no
    /// longer make it. A server commits a mutation no later than one request timeout
    /// after it arrived, so what is seen after that, and the request's time on the
    /// way, is final — and no later operation of this client races it (an unknown
    /// link predicted to fail EEXIST could otherwise still land after the next
    /// operation removed the name).
    async fn wait_out_unknown(&self) {
        if self
            .unsettled
            .swap(false, std::sync::atomic::Ordering::Relaxed)
            && self.settle
        {
            let settle = self.shared.config.timeouts.request + self.transit;
            tokio::time::sleep(settle).await;
        }
    }

    /// What `path` is now: its attributes, or None.
    async fn look(&self, path: &str) -> Result<Option<Attr>, Failure> {
        let p = path.to_string();
        self.until_answered(move |c| {
            let p = p.clone();
            async move {
                match c.lstat(&p).await {
                    Ok(a) => Ok(Some(a)),
                    Err(e) if e.errno == Errno::ENOENT || e.errno == Errno::ENOTDIR => Ok(None),
                    Err(e) => Err(e),
                }
            }
        })
        .await
    }

    /// Every append this client had acknowledged is in the shared file, whole, where
    /// it landed.
    async fn verify_appends(&mut self) -> Result<(), Failure> {
        let Some(handle) = self.lock_file else {
            return Ok(());
        };
        let mine: Vec<(u64, Vec<u8>)> = self
            .shared
            .appends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .acked
            .iter()
            .filter(|(_, (_, who, _))| *who == self.k)
            .map(|(&at, (_, _, bytes))| (at, bytes.clone()))
            .collect();
        for (at, want) in mine {
            let len = want.len();
            let got = self
                .until_answered(move |c| async move {
                    let f = c.open_handle(handle).await?;
                    let mut buf = vec![0u8; len];
                    let n = f.read_at(at, &mut buf).await?;
                    buf.truncate(n);
                    Ok(buf)
                })
                .await?;
            if got != want {
                return Err(self.fail(format!(
                    "the append at {at} holds {:?}, not {:?}",
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&want)
                )));
            }
        }
        Ok(())
    }

    fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// A path under the client's directory: an existing one or a new name.
    fn path(&mut self, existing: bool) -> String {
        let known: Vec<String> = self.model.paths.keys().cloned().collect();
        if existing {
            if let Some(p) = self.rng.pick(&known) {
                return p.clone();
            }
        }
        let dirs: Vec<String> = self
            .model
            .paths
            .iter()
            .filter(|(_, o)| matches!(o, Obj::Dir(_)))
            .map(|(p, _)| p.clone())
            .collect();
        let dir = self
            .rng
            .pick(&dirs)
            .cloned()
            .unwrap_or_else(|| self.root.clone());
        // A small pool of names, so names are reused and collide.
        let n = self.rng.range(0, 6);
        format!("{dir}/n{n}")
    }

    /// Runs `ops` random operations, checking each.
    pub async fn run(&mut self, ops: usize) -> Result<Counts, Failure> {
        for _ in 0..ops {
            self.counts.ops += 1;
            self.wait_out_unknown().await;
            match self.rng.range(0, 20) {
                0..=4 => self.create().await?,
                5..=6 => self.mkdir().await?,
                7..=9 => self.rename().await?,
                10..=11 => self.link().await?,
                12..=13 => self.unlink().await?,
                14 => self.rmdir().await?,
                15 => self.chmod().await?,
                16 => match self.rng.range(0, 2) {
                    0 => self.held_read().await?,
                    _ => self.read().await?,
                },
                17 => match self.rng.range(0, 4) {
                    0 => self.xattr().await?,
                    1 => self.truncate().await?,
                    2 => self.held_read().await?,
                    _ => self.read().await?,
                },
                18 => match self.rng.range(0, 2) {
                    0 => self.append().await?,
                    _ => self.list().await?,
                },
                _ => match self.rng.range(0, 3) {
                    0 => self.append().await?,
                    _ => self.lock_turn().await?,
                },
            }
            let pause = self.rng.range(0, 20);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        Ok(self.counts.clone())
    }

    /// The error the model predicts for creating `path` (a file or directory), or
    /// None when it succeeds.
    fn predict_new(&self, path: &str) -> Option<Errno> {
        match self.model.paths.get(Model::parent(path)) {
            None => Some(Errno::ENOENT),
            Some(Obj::File(_)) => Some(Errno::ENOTDIR),
            Some(Obj::Dir(_)) if self.model.paths.contains_key(path) => Some(Errno::EEXIST),
            Some(Obj::Dir(_)) => None,
        }
    }

    /// Checks an answer against the prediction; Ok(true) if the operation happened,
    /// Ok(false) if it did not, Err(None) if that is unknown.
    fn judge<T>(
        &mut self,
        what: &str,
        predicted: Option<Errno>,
        got: &Result<T, Error>,
    ) -> Result<Option<bool>, Failure> {
        match (got, predicted) {
            (Ok(_), None) => {
                self.counts.ok += 1;
                self.note(&format!("{what}: ok"));
                Ok(Some(true))
            }
            (Err(e), _) if unknown(e) => {
                self.unsettled
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                self.counts.indeterminate += 1;
                self.note(&format!("{what}: unknown ({})", e.errno.name()));
                Ok(None)
            }
            (Err(e), Some(want)) if e.errno == want => {
                self.counts.refused += 1;
                self.note(&format!("{what}: {}", e.errno.name()));
                Ok(Some(false))
            }
            (Ok(_), Some(want)) => Err(self.fail(format!(
                "{what} succeeded, but it should have failed with {}",
                want.name()
            ))),
            (Err(e), want) => Err(self.fail(format!(
                "{what} failed with {} ({e}), but it should have {}",
                e.errno.name(),
                want.map_or("succeeded".to_string(), |w| format!(
                    "failed with {}",
                    w.name()
                ))
            ))),
        }
    }

    async fn create(&mut self) -> Result<(), Failure> {
        let path = self.path(false);
        let id = self.fresh();
        let content = format!("{path}#{id}").into_bytes();
        let predicted = self.predict_new(&path);
        let got = self
            .c
            .create(&path, 0o644, LayoutSpec::default(), true)
            .await;
        let what = format!("create {path}");
        match self.judge(&what, predicted, &got)? {
            Some(false) => Ok(()),
            Some(true) => {
                let Ok(file) = got else { return Ok(()) };
                let h = file.handle();
                self.model.paths.insert(path.clone(), Obj::File(h));
                self.model.modes.insert(h, [0o644].into());
                self.model.xattrs.insert(h, [None].into());
                let mut written = file.write_at(0, &content).await;
                if self.fsync && written.is_ok() {
                    if let Err(e) = file.fsync().await {
                        written = Err(e);
                    }
                }
                let mut may = BTreeSet::new();
                match written {
                    Ok(n) if n == content.len() => {
                        may.insert(content);
                    }
                    Ok(n) => {
                        return Err(self.fail(format!("write to {path} wrote {n} bytes")));
                    }
                    Err(e) if unknown(&e) => {
                        may.insert(Vec::new());
                        may.insert(content);
                        self.model.contents.insert(h, may.clone());
                        self.make_durable(&path).await?;
                    }
                    Err(e) => return Err(self.fail(format!("write to {path}: {e}"))),
                }
                self.model.contents.insert(h, may);
                Ok(())
            }
            None => {
                match self.look(&path).await? {
                    Some(a) if !a.is_dir() && !self.model.paths.contains_key(&path) => {
                        // Created (its content was never written).
                        self.model.paths.insert(path.clone(), Obj::File(a.handle));
                        self.model.contents.insert(a.handle, [Vec::new()].into());
                        self.model.modes.insert(a.handle, [0o644].into());
                        self.model.xattrs.insert(a.handle, [None].into());
                    }
                    None if predicted.is_none() => {}
                    seen if predicted.is_some() => {
                        // It could not have been created; the old state stands.
                        let _ = seen;
                    }
                    other => {
                        return Err(self.fail(format!(
                            "after an unknown {what}: found {other:?}, model {:?}",
                            self.model.paths.get(&path)
                        )))
                    }
                }
                Ok(())
            }
        }
    }

    async fn mkdir(&mut self) -> Result<(), Failure> {
        let path = self.path(false);
        let predicted = self.predict_new(&path);
        let got = self.c.mkdir(&path, 0o755).await;
        let what = format!("mkdir {path}");
        match self.judge(&what, predicted, &got)? {
            Some(true) => {
                if let Ok(a) = got {
                    self.model.paths.insert(path, Obj::Dir(a.handle));
                }
            }
            Some(false) => {}
            None => {
                if predicted.is_none() {
                    match self.look(&path).await? {
                        Some(a) if a.is_dir() => {
                            self.model.paths.insert(path, Obj::Dir(a.handle));
                        }
                        None => {}
                        Some(a) => {
                            return Err(self.fail(format!(
                                "after an unknown {what}: found a non-directory {a:?}"
                            )))
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether `path` is `dir` or under it.
    fn under(path: &str, dir: &str) -> bool {
        path == dir || path.starts_with(&format!("{dir}/"))
    }

    fn predict_rename(&self, from: &str, to: &str) -> Option<Errno> {
        let Some(src) = self.model.paths.get(from) else {
            return Some(Errno::ENOENT);
        };
        match self.model.paths.get(Model::parent(to)) {
            None => return Some(Errno::ENOENT),
            Some(Obj::File(_)) => return Some(Errno::ENOTDIR),
            Some(Obj::Dir(_)) => {}
        }
        if matches!(src, Obj::Dir(_)) && Worker::under(to, from) && to != from {
            return Some(Errno::EINVAL);
        }
        match (src, self.model.paths.get(to)) {
            (_, None) => None,
            (a, Some(b)) if a.handle() == b.handle() => None,
            (Obj::File(_), Some(Obj::Dir(_))) => Some(Errno::EISDIR),
            (Obj::Dir(_), Some(Obj::File(_))) => Some(Errno::ENOTDIR),
            (Obj::Dir(_), Some(Obj::Dir(_))) if self.model.children(to).next().is_some() => {
                Some(Errno::ENOTEMPTY)
            }
            _ => None,
        }
    }

    async fn rename(&mut self) -> Result<(), Failure> {
        let from = self.path(true);
        let to = self.path(self.rng.chance(0.3));
        if from == self.root || to == self.root || Worker::under(&self.root, &to) {
            return Ok(());
        }
        let predicted = self.predict_rename(&from, &to);
        let before_to = self.model.paths.get(&to).cloned();
        let src = self.model.paths.get(&from).cloned();
        let got = self.c.rename(&from, &to).await;
        let what = format!("rename {from} {to}");
        if predicted.is_none() {
            let servers = |p: &str| -> Option<usize> {
                let dir = self.model.paths.get(Model::parent(p))?.handle();
                let name = p.rsplit('/').next()?;
                Some(self.shared.config.entry_server(dir, 1, name))
            };
            if servers(&from) != servers(&to) {
                self.counts.cross_renames += 1;
            }
        }
        match self.judge(&what, predicted, &got)? {
            Some(true) => {
                if src.as_ref().map(Obj::handle) != before_to.as_ref().map(Obj::handle) {
                    self.model.rename(&from, &to);
                }
            }
            Some(false) => {}
            None if predicted.is_some() => {}
            None => {
                let Some(src) = src else { return Ok(()) };
                let at_from = self.look(&from).await?.map(|a| a.handle);
                let at_to = self.look(&to).await?.map(|a| a.handle);
                let h = src.handle();
                match (at_from, at_to) {
                    (Some(f), t) if f == h && t == before_to.as_ref().map(Obj::handle) => {
                        // Not done.
                    }
                    (None, Some(t)) if t == h => self.model.rename(&from, &to),
                    (Some(f), Some(t)) if f == h && t == h && matches!(src, Obj::File(_)) => {
                        // Interrupted between its steps: the file under both names
                        // (fsck counts the second name).
                        self.model.paths.insert(to.clone(), src.clone());
                        if let Some(Obj::File(old)) = &before_to {
                            if *old != h {
                                self.model.forget_unnamed();
                            }
                        }
                    }
                    (Some(f), Some(t)) if f == h && t == h => {
                        // A directory interrupted between its steps: under both names
                        // until the rename is tried again, which finishes it.
                        self.note(&format!("{what}: directory under both names; again"));
                        let (a, b) = (from.clone(), to.clone());
                        self.until_answered(move |c| {
                            let (a, b) = (a.clone(), b.clone());
                            async move { c.rename(&a, &b).await }
                        })
                        .await?;
                        let at_from = self.look(&from).await?.map(|a| a.handle);
                        let at_to = self.look(&to).await?.map(|a| a.handle);
                        if at_from.is_some() || at_to != Some(h) {
                            return Err(self.fail(format!(
                                "{what} again did not finish the interrupted move: {from} is \
                                 {at_from:?}, {to} is {at_to:?}, the directory is {h:#x}"
                            )));
                        }
                        self.model.rename(&from, &to);
                        self.counts.resumed_moves += 1;
                    }
                    (f, t) => {
                        return Err(self.fail(format!(
                            "after an unknown {what}: {from} is {f:?}, {to} is {t:?}; the moved \
                             object is {h:#x}, {to} was {before_to:?} (lost or misplaced)"
                        )))
                    }
                }
            }
        }
        Ok(())
    }

    async fn link(&mut self) -> Result<(), Failure> {
        let from = self.path(true);
        let to = self.path(false);
        let src = self.model.paths.get(&from).cloned();
        let predicted = match (&src, self.predict_new(&to)) {
            (None, _) => Some(Errno::ENOENT),
            (_, Some(Errno::ENOENT)) => Some(Errno::ENOENT),
            (Some(Obj::Dir(_)), _) => Some(Errno::EPERM),
            (_, p) => p,
        };
        let got = self.c.link(&from, &to).await;
        let what = format!("link {from} {to}");
        match self.judge(&what, predicted, &got)? {
            Some(true) => {
                self.counts.links += 1;
                if let Some(o) = src {
                    self.model.paths.insert(to, o);
                }
            }
            Some(false) => {}
            None if predicted.is_some() => {}
            None => {
                let Some(o) = src else { return Ok(()) };
                match self.look(&to).await?.map(|a| a.handle) {
                    Some(h) if h == o.handle() => {
                        self.model.paths.insert(to, o);
                    }
                    None => {}
                    other => {
                        return Err(self.fail(format!(
                            "after an unknown {what}: {to} is {other:?}, not {:#x}",
                            o.handle()
                        )))
                    }
                }
            }
        }
        Ok(())
    }

    async fn unlink(&mut self) -> Result<(), Failure> {
        let path = self.path(true);
        self.unlink_path(path).await
    }

    /// Opens a file (a hold at its metadata server), removes its name, and reads it
    /// through the open file: the bytes must be the model's whatever crashed or was
    /// cut off meanwhile (a restarted server deletes nothing for a lease, and the
    /// client holds its files again within a third of one).
    async fn held_read(&mut self) -> Result<(), Failure> {
        let path = self.path(true);
        let Some(Obj::File(h)) = self.model.paths.get(&path).cloned() else {
            return Ok(());
        };
        let may = self.model.contents.get(&h).cloned().unwrap_or_default();
        let attr = match self.c.hold(h).await {
            Ok(Some(a)) => a,
            Ok(None) => {
                self.c.unhold(h).await;
                return Ok(());
            }
            Err(e) if unknown(&e) => return Ok(()),
            Err(e) => return Err(self.fail(format!("hold of {path} ({h:#x}): {e}"))),
        };
        self.unlink_path(path.clone()).await?;
        let got = async {
            let f = self.c.file_from_attr(attr)?;
            let mut buf = vec![0u8; 4096];
            let n = f.read_at(0, &mut buf).await?;
            buf.truncate(n);
            Ok::<_, Error>(buf)
        }
        .await;
        self.c.unhold(h).await;
        match got {
            Ok(data) if may.is_empty() || may.contains(&data) => {
                self.counts.held_reads += 1;
                Ok(())
            }
            Ok(data) => Err(self.fail(format!(
                "{path} ({h:#x}) read through its hold after the unlink holds {:?}, the \
                 model allows {may:?}",
                String::from_utf8_lossy(&data)
            ))),
            Err(e) if unknown(&e) => Ok(()),
            Err(e) => Err(self.fail(format!(
                "{path} ({h:#x}) held open was lost after its unlink: {e}"
            ))),
        }
    }

    /// Removes name `path` (not a directory), as the model predicts.
    async fn unlink_path(&mut self, path: String) -> Result<(), Failure> {
        let predicted = match self.model.paths.get(&path) {
            None => Some(Errno::ENOENT),
            Some(Obj::Dir(_)) => Some(Errno::EISDIR),
            Some(Obj::File(_)) => None,
        };
        let got = self.c.unlink(&path).await;
        let what = format!("unlink {path}");
        match self.judge(&what, predicted, &got)? {
            Some(true) => {
                self.model.paths.remove(&path);
                self.model.forget_unnamed();
            }
            Some(false) => {}
            None if predicted.is_some() => {}
            None => {
                if self.look(&path).await?.is_none() {
                    self.model.paths.remove(&path);
                    self.model.forget_unnamed();
                }
            }
        }
        Ok(())
    }

    async fn rmdir(&mut self) -> Result<(), Failure> {
        let path = self.path(true);
        if path == self.root {
            return Ok(());
        }
        let predicted = match self.model.paths.get(&path) {
            None => Some(Errno::ENOENT),
            Some(Obj::File(_)) => Some(Errno::ENOTDIR),
            Some(Obj::Dir(_)) if self.model.children(&path).next().is_some() => {
                Some(Errno::ENOTEMPTY)
            }
            Some(Obj::Dir(_)) => None,
        };
        let got = self.c.rmdir(&path).await;
        let what = format!("rmdir {path}");
        match self.judge(&what, predicted, &got)? {
            Some(true) => {
                self.model.paths.remove(&path);
            }
            Some(false) => {}
            None if predicted.is_some() => {}
            None => {
                if self.look(&path).await?.is_none() {
                    self.model.paths.remove(&path);
                }
            }
        }
        Ok(())
    }

    async fn chmod(&mut self) -> Result<(), Failure> {
        let path = self.path(true);
        let Some(Obj::File(h)) = self.model.paths.get(&path).cloned() else {
            return Ok(());
        };
        let mode = *self
            .rng
            .pick(&[0o600, 0o640, 0o644, 0o604])
            .unwrap_or(&0o644);
        let set = SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        let got = self.c.setattr(&path, set).await;
        let what = format!("chmod {mode:o} {path}");
        match self.judge(&what, None, &got)? {
            Some(_) => {
                self.model.modes.insert(h, [mode].into());
            }
            None => {
                self.model.modes.entry(h).or_default().insert(mode);
            }
        }
        Ok(())
    }

    /// Sets, removes or reads attribute `user.k` of a file.
    async fn xattr(&mut self) -> Result<(), Failure> {
        let path = self.path(true);
        let Some(Obj::File(h)) = self.model.paths.get(&path).cloned() else {
            return Ok(());
        };
        let may = self.model.xattrs.get(&h).cloned().unwrap_or_default();
        match self.rng.range(0, 3) {
            0 => {
                let value = format!("v{}", self.fresh()).into_bytes();
                let got = self.c.setxattr(h, "user.k", &value, 0).await;
                let what = format!("setxattr {path}");
                match self.judge(&what, None, &got)? {
                    Some(_) => {
                        self.model.xattrs.insert(h, [Some(value)].into());
                    }
                    None => {
                        self.model.xattrs.entry(h).or_default().insert(Some(value));
                    }
                }
            }
            1 => {
                let absent = may == [None].into();
                let predicted = absent.then_some(Errno::ENODATA);
                let got = self.c.removexattr(h, "user.k").await;
                let what = format!("removexattr {path}");
                match self.judge(&what, predicted, &got)? {
                    Some(true) => {
                        self.model.xattrs.insert(h, [None].into());
                    }
                    Some(false) => {
                        if !may.contains(&None) {
                            return Err(self.fail(format!(
                                "{what} found no attribute, the model has {may:?}"
                            )));
                        }
                        self.model.xattrs.insert(h, [None].into());
                    }
                    None => {
                        self.model.xattrs.entry(h).or_default().insert(None);
                    }
                }
            }
            _ => {
                let got = match self.c.getxattr(h, "user.k").await {
                    Ok(v) => Ok(Some(v)),
                    Err(e) if e.errno == Errno::ENODATA => Ok(None),
                    Err(e) => Err(e),
                };
                let what = format!("getxattr {path}");
                if self.judge(&what, None, &got)?.is_some() {
                    if let Ok(v) = got {
                        if !may.contains(&v) {
                            return Err(
                                self.fail(format!("{what} gives {v:?}, the model allows {may:?}"))
                            );
                        }
                        self.model.xattrs.insert(h, [v].into());
                    }
                }
            }
        }
        Ok(())
    }

    /// Truncates a file to a length within or past its content.
    async fn truncate(&mut self) -> Result<(), Failure> {
        let path = self.path(true);
        let Some(Obj::File(h)) = self.model.paths.get(&path).cloned() else {
            return Ok(());
        };
        let len = self.rng.range(0, 80) as usize;
        let cut = |c: &Vec<u8>| {
            let mut c = c.clone();
            c.resize(len, 0);
            c
        };
        let may = self.model.contents.get(&h).cloned().unwrap_or_default();
        let after: BTreeSet<Vec<u8>> = may.iter().map(cut).collect();
        let got = self.c.truncate(&path, len as u64).await;
        let what = format!("truncate {path} {len}");
        let got = match got {
            Ok(()) if self.fsync => match self.c.open(&path).await {
                Ok(f) => f.fsync().await,
                Err(e) => Err(e),
            },
            other => other,
        };
        match self.judge(&what, None, &got)? {
            Some(_) => {
                self.model.contents.insert(h, after);
            }
            None => {
                let mut both = may;
                both.extend(after);
                self.model.contents.insert(h, both);
                self.make_durable(&path).await?;
            }
        }
        Ok(())
    }

    /// After a change of a file's bytes whose outcome is unknown, in a run with power
    /// losses: makes whatever the file holds durable (fsync), so a later power loss
    /// cannot take back what a read may see in between.
    async fn make_durable(&self, path: &str) -> Result<(), Failure> {
        if !self.fsync {
            return Ok(());
        }
        let p = path.to_string();
        self.until_answered(move |c| {
            let p = p.clone();
            async move { c.open(&p).await?.fsync().await }
        })
        .await
    }

    async fn read(&mut self) -> Result<(), Failure> {
        let path = self.path(true);
        let Some(Obj::File(h)) = self.model.paths.get(&path).cloned() else {
            return Ok(());
        };
        let got = async {
            let f = self.c.open(&path).await?;
            let mut buf = vec![0u8; 4096];
            let n = f.read_at(0, &mut buf).await?;
            buf.truncate(n);
            let attr = self.c.lstat(&path).await?;
            Ok::<_, Error>((buf, attr))
        }
        .await;
        let what = format!("read {path}");
        let Some(_) = self.judge(&what, None, &got)? else {
            return Ok(());
        };
        let Ok((data, attr)) = got else {
            return Ok(());
        };
        self.check_file(&path, h, &data, &attr)
    }

    /// Checks what a read of file `h` at `path` returned against the model, and
    /// narrows the model to it.
    fn check_file(
        &mut self,
        path: &str,
        h: Handle,
        data: &[u8],
        attr: &Attr,
    ) -> Result<(), Failure> {
        if attr.handle != h {
            return Err(self.fail(format!("{path} names {:#x}, the model {h:#x}", attr.handle)));
        }
        let may = self.model.contents.get(&h).cloned().unwrap_or_default();
        if !may.contains(data) {
            return Err(self.fail(format!(
                "{path} ({h:#x}) holds {:?}, the model allows {:?}",
                String::from_utf8_lossy(data),
                may.iter()
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect::<Vec<_>>()
            )));
        }
        self.model.contents.insert(h, [data.to_vec()].into());
        let modes = self.model.modes.get(&h).cloned().unwrap_or_default();
        if !modes.contains(&(attr.mode & 0o7777)) {
            return Err(self.fail(format!(
                "{path} has mode {:o}, the model allows {modes:?}",
                attr.mode & 0o7777
            )));
        }
        self.model.modes.insert(h, [attr.mode & 0o7777].into());
        Ok(())
    }

    async fn list(&mut self) -> Result<(), Failure> {
        let dirs: Vec<String> = self
            .model
            .paths
            .iter()
            .filter(|(_, o)| matches!(o, Obj::Dir(_)))
            .map(|(p, _)| p.clone())
            .collect();
        let Some(dir) = self.rng.pick(&dirs).cloned() else {
            return Ok(());
        };
        let got = self.c.readdir(&dir).await;
        let what = format!("readdir {dir}");
        if self.judge(&what, None, &got)?.is_none() {
            return Ok(());
        }
        let Ok(entries) = got else { return Ok(()) };
        self.check_listing(&dir, &entries)
    }

    fn check_listing(&self, dir: &str, entries: &[pvfs_client::DirEntry]) -> Result<(), Failure> {
        let seen: BTreeMap<String, Handle> = entries
            .iter()
            .map(|e| (format!("{dir}/{}", e.name), e.handle))
            .collect();
        let want: BTreeMap<String, Handle> = self
            .model
            .children(dir)
            .map(|p| (p.clone(), self.model.paths[p].handle()))
            .collect();
        if seen != want {
            return Err(self.fail(format!(
                "readdir {dir} lists {seen:x?}, the model has {want:x?}"
            )));
        }
        Ok(())
    }

    /// Appends one to three records of its own at once to the shared file (which
    /// other clients append to and lock meanwhile): an acknowledged append must
    /// overlap no other acknowledged one, whatever crashed or was cut off meanwhile.
    async fn append(&mut self) -> Result<(), Failure> {
        let Some(handle) = self.lock_file else {
            return Ok(());
        };
        let count = self.rng.range(1, 4);
        let records: Vec<Vec<u8>> = (0..3)
            .map(|_| {
                let n = self.fresh();
                format!("<c{}:{n}>", self.k).into_bytes()
            })
            .collect();
        // In runs with power losses only bytes made durable must stay: such an
        // append counts once its fsync returned.
        let fsync = self.fsync;
        let c = &self.c;
        let one = |i: u64| {
            let record = records[i as usize].clone();
            async move {
                if i >= count {
                    return None;
                }
                let got = async {
                    let f = c.open_handle(handle).await?;
                    let landed = f.append(&record).await?;
                    if fsync {
                        f.fsync().await?;
                    }
                    Ok::<_, Error>(landed)
                }
                .await;
                Some((record, got))
            }
        };
        let (a, b, d) = tokio::join!(one(0), one(1), one(2));
        for (record, got) in [a, b, d].into_iter().flatten() {
            match got {
                Ok((at, written)) => {
                    if written != record.len() {
                        return Err(self.fail(format!(
                            "an append wrote {written} of {} bytes",
                            record.len()
                        )));
                    }
                    let overlap = self
                        .shared
                        .appends
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .add(at, self.k, &record);
                    if let Some((other, who)) = overlap {
                        return Err(self.fail(format!(
                            "an append landed at {at}, over the append of client c{who} at \
                             {other}"
                        )));
                    }
                    self.counts.appends += 1;
                    self.note(&format!("append: at {at}"));
                }
                Err(e) => self.note(&format!("append: {}", e.errno.name())),
            }
        }
        Ok(())
    }

    async fn lock_turn(&mut self) -> Result<(), Failure> {
        let Some(handle) = self.lock_file else {
            return Ok(());
        };
        let owner = 1;
        let req = LockRequest {
            handle,
            owner,
            kind: LockKind::Ofd,
            typ: LockType::Write,
            start: 0,
            end: pvfs_proto::locks::TO_EOF,
            pid: self.k as u32 + 1,
            wait: true,
        };
        let server = self.shared.config.owner_of(handle).unwrap_or(0);
        let got = self.c.lock(&req, &mut || false).await;
        match got {
            Ok(()) => {
                self.counts.locks += 1;
                let epoch = self.crashes_of(server);
                {
                    let mut w = self.shared.lock.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some((other, at)) = w.holder {
                        if at == epoch {
                            return Err(self.fail(format!(
                                "was granted the exclusive lock that client c{other} holds"
                            )));
                        }
                    }
                    w.holder = Some((self.k, epoch));
                }
                self.note("lock: granted");
                let hold = self.rng.range(1, 30);
                tokio::time::sleep(Duration::from_millis(hold)).await;
                {
                    let mut w = self.shared.lock.lock().unwrap_or_else(|p| p.into_inner());
                    if w.holder.map(|(k, _)| k) == Some(self.k) {
                        w.holder = None;
                    }
                }
                let _ = self
                    .c
                    .unlock(handle, owner, 0, pvfs_proto::locks::TO_EOF)
                    .await;
            }
            Err(e) => self.note(&format!("lock: {}", e.errno.name())),
        }
        Ok(())
    }

    fn crashes_of(&self, server: usize) -> u64 {
        let replicated = self.shared.replicated;
        self.shared
            .crashes
            .lock()
            .map(|c| {
                if replicated {
                    c.iter().sum()
                } else {
                    c.get(server).copied().unwrap_or(0)
                }
            })
            .unwrap_or(0)
    }

    /// At the end, with every server up: the whole directory as the model has it —
    /// every name, every file's content and mode, and (after fsck counted them) every
    /// file's link count.
    pub async fn verify(&mut self) -> Result<(), Failure> {
        self.verify_appends().await?;
        let dirs: Vec<String> = self
            .model
            .paths
            .iter()
            .filter(|(_, o)| matches!(o, Obj::Dir(_)))
            .map(|(p, _)| p.clone())
            .collect();
        for dir in dirs {
            let d = dir.clone();
            let entries = self
                .until_answered(move |c| {
                    let d = d.clone();
                    async move { c.readdir(&d).await }
                })
                .await?;
            self.check_listing(&dir, &entries)?;
        }
        let files: Vec<(String, Handle)> = self
            .model
            .paths
            .iter()
            .filter_map(|(p, o)| match o {
                Obj::File(h) => Some((p.clone(), *h)),
                Obj::Dir(_) => None,
            })
            .collect();
        for (path, h) in files {
            let p = path.clone();
            let (data, attr) = self
                .until_answered(move |c| {
                    let p = p.clone();
                    async move {
                        let f = c.open(&p).await?;
                        let mut buf = vec![0u8; 4096];
                        let n = f.read_at(0, &mut buf).await?;
                        buf.truncate(n);
                        Ok((buf, c.lstat(&p).await?))
                    }
                })
                .await?;
            self.check_file(&path, h, &data, &attr)?;
            let value = self
                .until_answered(move |c| async move {
                    match c.getxattr(h, "user.k").await {
                        Ok(v) => Ok(Some(v)),
                        Err(e) if e.errno == Errno::ENODATA => Ok(None),
                        Err(e) => Err(e),
                    }
                })
                .await?;
            let may = self.model.xattrs.get(&h).cloned().unwrap_or_default();
            if !may.contains(&value) {
                return Err(self.fail(format!(
                    "{path} has user.k {value:?}, the model allows {may:?}"
                )));
            }
            let names = self.model.names_of(h);
            if attr.nlink as usize != names {
                return Err(self.fail(format!(
                    "{path} ({h:#x}) counts {} links, it has {names} names",
                    attr.nlink
                )));
            }
        }
        Ok(())
    }
}
