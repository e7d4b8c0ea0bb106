//! Histories of concurrent file-system operations, and a checker that decides whether a
//! history is linearizable (Herlihy and Wing, 1990, *Linearizability: A Correctness
//! Condition for Concurrent Objects*) with respect to a model of the namespace.
//!
//! **The model.** A directory is a set of names; a name names a directory or a file; a
//! file is a register holding one version of its content, and a file has as many names
//! as hard links, all of them naming the same register. Top directories always exist;
//! subdirectories come and go with mkdir and rmdir.
//!
//! **Operations and their steps.** Each operation of the history is one or more
//! *steps*, each an atomic change or observation of the model, because that is what
//! pvfs does (`docs/namespace.md`): a write or read of a path looks the path up, then
//! writes or reads the file it found (which may have been renamed meanwhile); a rename
//! whose two names live on different metadata servers puts the new name in place, then
//! removes the old one if it still names the file (a reader in between sees both
//! names); an rmdir seals the directory's shards (refusing new entries with ENOENT),
//! then removes it or, when it is not empty, unseals it; a listing reads each shard of
//! a directory at its own moment. Every other namespace operation is one step. A
//! rename that sent several requests (a retry after a concurrent change) is that many
//! attempts, each of which may have done its steps.
//!
//! **Outcomes.** A step of an operation that succeeded takes effect at one instant
//! between the operation's invocation and its completion. A step of an operation that
//! failed with a *refusal* (ENOENT, EEXIST, ENOTEMPTY, ENOTDIR, EISDIR: the operation
//! did not happen) changes nothing, but the refusal must be right at some instant of
//! that interval. A step of an *indeterminate* part (a timeout, EIO, a server gone:
//! it may or may not have happened) takes effect at some instant after the invocation
//! and before the completion plus a grace for requests still queued at a live server
//! (`late`), or never. An indeterminate write of a content that spans several
//! datafiles may also have landed in part.
//!
//! **The search** is the one of Wing and Gong (1993, *Testing and Verifying Concurrent
//! Objects*) with Lowe's memoization of configurations (2017, *Testing for
//! Linearizability*): a depth-first search over the orders in which steps can take
//! effect, respecting real time (a step cannot come after a step of an operation that
//! was invoked after its own operation completed) and the order of an operation's
//! steps, never exploring a configuration (steps done, model state) twice. Steps of
//! indeterminate parts are tried last, so they are placed where an observation needs
//! them. When no order exists, the report shows how far the furthest order got, the
//! operations that would have had to come next, the model state there and the
//! operations around that moment.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};

#[cfg(test)]
mod tests;

/// Nanoseconds since the start of a run, on a monotonic clock shared by all threads.
pub type Nanos = u64;

// ----- the namespace ------------------------------------------------------------------

/// A place for a name: name `name` (an index into [`Universe::names`]) in directory
/// `dir` (an index into [`Universe::dirs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot {
    /// The directory.
    pub dir: u16,
    /// The name.
    pub name: u16,
}

/// One directory a storm may use.
#[derive(Clone, Debug)]
pub struct DirSpec {
    /// Its path (for messages and for the client calls).
    pub path: String,
    /// Where its own name is: None for a top directory (always there).
    pub entry: Option<Slot>,
}

/// Every directory and name a history may mention, and how names map to shards.
pub struct Universe {
    /// The directories.
    pub dirs: Vec<DirSpec>,
    /// The names.
    pub names: Vec<String>,
    /// Shards of every directory (a listing reads each at its own moment).
    pub shards: u32,
    shard: Vec<u32>,
    by_entry: HashMap<Slot, u16>,
}

/// A name a listing returned that the universe does not have.
pub const UNKNOWN_NAME: u16 = u16::MAX;

impl Universe {
    /// A universe of `dirs` and `names`, where name `n` lives in shard `shard_of(n,
    /// shards)` of its directory.
    pub fn new(
        dirs: Vec<DirSpec>,
        names: Vec<String>,
        shards: u32,
        shard_of: impl Fn(&str, u32) -> u32,
    ) -> Universe {
        let shard = names.iter().map(|n| shard_of(n, shards)).collect();
        let by_entry = dirs
            .iter()
            .enumerate()
            .filter_map(|(i, d)| Some((d.entry?, i as u16)))
            .collect();
        Universe {
            dirs,
            names,
            shards,
            shard,
            by_entry,
        }
    }

    /// The index of name `s`, if the universe has it.
    pub fn name(&self, s: &str) -> Option<u16> {
        self.names.iter().position(|n| n == s).map(|i| i as u16)
    }

    /// The index of the directory with path `path`.
    pub fn dir(&self, path: &str) -> Option<u16> {
        self.dirs
            .iter()
            .position(|d| d.path == path)
            .map(|i| i as u16)
    }

    /// The path of `slot`.
    pub fn path(&self, slot: Slot) -> String {
        format!(
            "{}/{}",
            self.dirs[usize::from(slot.dir)].path,
            self.name_of(slot.name)
        )
    }

    /// Name `n`, or `?` for a name outside the universe.
    pub fn name_of(&self, n: u16) -> &str {
        self.names.get(usize::from(n)).map_or("?", String::as_str)
    }

    /// The subdirectory whose name is `slot`, if it is one.
    pub fn dir_at(&self, slot: Slot) -> Option<u16> {
        self.by_entry.get(&slot).copied()
    }

    /// The shard of name `n` (names outside the universe: none).
    fn shard_of(&self, n: u16) -> Option<u32> {
        self.shard.get(usize::from(n)).copied()
    }
}

// ----- contents ---------------------------------------------------------------------

/// One content a write puts in a file: all of it, from offset 0. The bytes are a
/// function of `id` and `len` ([`Version::content`]), and every write has its own `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    /// Unique among the writes of a history.
    pub id: u32,
    /// Bytes.
    pub len: u32,
}

/// Contents at most this long go in one write request to one page of one datafile:
/// a reader sees all of it or none. Longer ones span datafiles, and one interrupted
/// may have landed in part.
pub const WHOLE_MAX: u32 = 4096;

const MAGIC: &[u8; 4] = b"pvfs";
const HEADER: usize = 16;

impl Version {
    /// The bytes: a 16-byte header (magic, id, length, the id inverted) and bytes drawn
    /// from the id, so a read says which write it saw and that it saw all of it.
    pub fn content(&self) -> Vec<u8> {
        let len = self.len as usize;
        let mut out = Vec::with_capacity(len.max(HEADER));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&(!self.id).to_le_bytes());
        let mut x = u64::from(self.id).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed;
        while out.len() < len {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            out.extend_from_slice(&z.to_le_bytes());
        }
        out.truncate(len);
        out
    }

    /// Whether a reader sees all of it or none of it ([`WHOLE_MAX`]).
    pub fn whole(&self) -> bool {
        self.len <= WHOLE_MAX
    }
}

/// What a read of a whole file returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadObs {
    /// No bytes.
    Empty,
    /// Exactly the content of version `id`.
    Exact(u32),
    /// Anything else (kept for the check of a write that may have landed in part).
    Other(Vec<u8>),
}

impl ReadObs {
    /// Classifies the bytes of a read.
    pub fn of(bytes: &[u8]) -> ReadObs {
        if bytes.is_empty() {
            return ReadObs::Empty;
        }
        if bytes.len() >= HEADER && &bytes[..4] == MAGIC {
            let word =
                |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
            let (id, len, check) = (word(4), word(8), word(12));
            if check == !id
                && len as usize == bytes.len()
                && (Version { id, len }).content() == bytes
            {
                return ReadObs::Exact(id);
            }
        }
        ReadObs::Other(bytes.to_vec())
    }

    fn describe(&self) -> String {
        match self {
            ReadObs::Empty => "empty".into(),
            ReadObs::Exact(id) => format!("v{id}"),
            ReadObs::Other(b) => {
                let head: Vec<String> = b.iter().take(8).map(|x| format!("{x:02x}")).collect();
                format!(
                    "{} bytes of no single version ({}…)",
                    b.len(),
                    head.join("")
                )
            }
        }
    }
}

// ----- operations ---------------------------------------------------------------------

/// What kind of object a name names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// Anything else (the storm makes none).
    Other,
}

/// An operation as it was asked.
#[derive(Clone, Debug)]
pub enum Call {
    /// Create an empty file (exclusively), then, if given, write a version into it
    /// through the handle the create returned.
    Create { at: Slot, write: Option<Version> },
    /// Open a path, then write a version into the file it named.
    Write { at: Slot, version: Version },
    /// Open a path, then read the whole file it named.
    Read { at: Slot },
    /// Remove a file's name.
    Unlink { at: Slot },
    /// Rename a file, replacing the destination.
    Rename { from: Slot, to: Slot },
    /// Give a file another name.
    Link { from: Slot, to: Slot },
    /// Make a subdirectory.
    Mkdir { at: Slot },
    /// Remove a subdirectory.
    Rmdir { at: Slot },
    /// List a directory.
    Readdir { dir: u16 },
    /// Everything listed and read, with nothing else running.
    Snapshot,
}

/// Why a part of an operation was refused (it did not happen).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// ENOENT.
    NoEntry,
    /// EEXIST.
    Exists,
    /// ENOTEMPTY.
    NotEmpty,
    /// ENOTDIR.
    NotDir,
    /// EISDIR.
    IsDir,
}

/// How a part of an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Res {
    /// It happened.
    Ok,
    /// It did not happen, and the error says why.
    Refused(Refusal),
    /// It may or may not have happened.
    Unknown,
    /// It failed before any request that could change something was sent: it did not
    /// happen (and the error says nothing about the namespace).
    NotSent,
    /// It was not tried (an earlier part failed).
    NotRun,
}

/// What an operation saw.
#[derive(Clone, Debug)]
pub enum Seen {
    /// Nothing.
    Nothing,
    /// The content a read returned.
    Read(ReadObs),
    /// The names and kinds a listing returned.
    Listing(Vec<(u16, Kind)>),
    /// Everything.
    Snapshot(Snap),
}

/// Everything, listed and read while nothing else ran.
#[derive(Clone, Debug, Default)]
pub struct Snap {
    /// Every directory found, with its entries.
    pub dirs: Vec<SnapDir>,
    /// What could not be listed or read (never right).
    pub errors: Vec<String>,
}

/// One directory of a [`Snap`].
#[derive(Clone, Debug)]
pub struct SnapDir {
    /// Which.
    pub dir: u16,
    /// Its entries.
    pub entries: Vec<SnapEntry>,
}

/// One entry of a [`SnapDir`].
#[derive(Clone, Debug)]
pub struct SnapEntry {
    /// The name ([`UNKNOWN_NAME`] for one outside the universe).
    pub name: u16,
    /// What it names.
    pub kind: Kind,
    /// The object's handle (names of one file share it).
    pub handle: u64,
    /// The object's link count.
    pub nlink: u32,
    /// A file's content.
    pub data: Option<ReadObs>,
}

/// One operation of a history.
#[derive(Clone, Debug)]
pub struct Op {
    /// Who ran it (a client's index).
    pub client: usize,
    /// What was asked.
    pub call: Call,
    /// When it was invoked.
    pub start: Nanos,
    /// When it completed.
    pub end: Nanos,
    /// The namespace part: the create, the open of a write or a read, the unlink,
    /// rename, link, mkdir, rmdir, listing.
    pub main: Res,
    /// The data part: the write after a create or an open, the read after an open.
    pub data: Res,
    /// What it saw.
    pub seen: Seen,
    /// For a rename: the requests that moved the name (`Rename` in one step,
    /// `LinkEntry` in two).
    pub moves: u8,
    /// For a rename: whether any of them went in two steps.
    pub two_step: bool,
    /// Whether an indeterminate part may still take effect after the operation
    /// completed: it timed out, and its request may be queued at a live server. (When
    /// the connection broke or could not be made, any effect came before the error.)
    pub late: bool,
    /// Whether every server was up all the time it ran (then the unsealing of a
    /// failed rmdir reached every server).
    pub calm: bool,
    /// The errors, for reports.
    pub note: String,
}

impl Op {
    /// An operation of `client` with nothing recorded yet but what was asked.
    pub fn new(client: usize, call: Call, start: Nanos) -> Op {
        Op {
            client,
            call,
            start,
            end: start,
            main: Res::NotRun,
            data: Res::NotRun,
            seen: Seen::Nothing,
            moves: 0,
            two_step: false,
            late: false,
            calm: true,
            note: String::new(),
        }
    }

    /// Whether some part of it may or may not have happened.
    pub fn indeterminate(&self) -> bool {
        self.main == Res::Unknown || self.data == Res::Unknown
    }

    /// One line: what was asked and how it ended.
    pub fn describe(&self, u: &Universe) -> String {
        let p = |s: &Slot| u.path(*s);
        let call = match &self.call {
            Call::Create { at, write: Some(v) } => {
                format!("create {} + write v{} ({} B)", p(at), v.id, v.len)
            }
            Call::Create { at, write: None } => format!("create {}", p(at)),
            Call::Write { at, version } => {
                format!("write {} v{} ({} B)", p(at), version.id, version.len)
            }
            Call::Read { at } => format!("read {}", p(at)),
            Call::Unlink { at } => format!("unlink {}", p(at)),
            Call::Rename { from, to } => format!("rename {} -> {}", p(from), p(to)),
            Call::Link { from, to } => format!("link {} -> {}", p(from), p(to)),
            Call::Mkdir { at } => format!("mkdir {}", p(at)),
            Call::Rmdir { at } => format!("rmdir {}", p(at)),
            Call::Readdir { dir } => format!("readdir {}", u.dirs[usize::from(*dir)].path),
            Call::Snapshot => "snapshot of everything".into(),
        };
        let res = |r: Res| match r {
            Res::Ok => "ok".to_string(),
            Res::Refused(why) => format!("{why:?}"),
            Res::Unknown => "unknown".to_string(),
            Res::NotSent => "not sent".to_string(),
            Res::NotRun => "-".to_string(),
        };
        let mut out = format!("{call}: {}", res(self.main));
        if self.data != Res::NotRun {
            let _ = write!(out, ", data {}", res(self.data));
        }
        match &self.seen {
            Seen::Nothing => {}
            Seen::Read(r) => {
                let _ = write!(out, ", read {}", r.describe());
            }
            Seen::Listing(l) => {
                let names: Vec<String> = l
                    .iter()
                    .map(|(n, k)| match k {
                        Kind::Dir => format!("{}/", u.name_of(*n)),
                        _ => u.name_of(*n).to_string(),
                    })
                    .collect();
                let _ = write!(out, ", listed [{}]", names.join(" "));
            }
            Seen::Snapshot(s) => {
                let _ = write!(out, "\n{}", describe_snap(u, s));
            }
        }
        if matches!(self.call, Call::Rename { .. }) {
            let _ = write!(
                out,
                " ({} request{}{})",
                self.moves,
                if self.moves == 1 { "" } else { "s" },
                if self.two_step { ", in two steps" } else { "" }
            );
        }
        if !self.note.is_empty() {
            let _ = write!(out, " [{}]", self.note);
        }
        out
    }
}

fn describe_snap(u: &Universe, s: &Snap) -> String {
    let mut out = String::new();
    for d in &s.dirs {
        let _ = write!(out, "      {}:", u.dirs[usize::from(d.dir)].path);
        for e in &d.entries {
            let _ = write!(out, " {}", u.name_of(e.name));
            match (&e.kind, &e.data) {
                (Kind::Dir, _) => out.push('/'),
                (_, Some(r)) => {
                    let _ = write!(out, "=#{:x}:{}", e.handle, r.describe());
                }
                _ => {}
            }
        }
        out.push('\n');
    }
    for e in &s.errors {
        let _ = writeln!(out, "      error: {e}");
    }
    out
}

// ----- the model ----------------------------------------------------------------------

/// What a name names in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Entry {
    /// The file created by operation `.0`.
    File(u32),
    /// The subdirectory the universe places at this slot.
    Dir,
}

/// A file's content in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Value {
    /// Nothing written.
    Empty,
    /// Version `.0`, whole.
    Ver(u32),
    /// Version `.0`, perhaps in part (over an empty file): every byte is the version's
    /// or zero, and the file is no longer than the version.
    Part(u32),
}

/// What an operation between its steps remembers (the file it looked up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Held {
    /// The file the lookup found.
    File(u32),
    /// The lookup found nothing, and that is the refusal.
    Refused,
    /// The step did nothing.
    Nothing,
    /// A rename's attempt moved the name.
    Moved,
}

/// A file of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FileRec {
    /// The operation that created it.
    id: u32,
    /// Its content.
    value: Value,
    /// Its names.
    names: u16,
    /// The links pvfs counts for it at least: a name a two-step rename put in place
    /// holds no link of its own until the rename removes the old name (a rename that
    /// stops in between leaves a name not counted, which `fsck` counts).
    links: u16,
}

/// Files get ids from here on when a snapshot renames them ([`State::canonicalize`]);
/// below are the indices of the operations that created them.
const CANON: u32 = 1 << 31;
/// The id of a file that is gone, held by an operation between its steps.
const GONE: u32 = u32::MAX;

/// Names file `f` for a report.
fn file_name(f: u32) -> String {
    if f >= CANON {
        format!("file #{} of the last snapshot", f - CANON)
    } else {
        format!("file of op #{f}")
    }
}

/// The model's state: sorted vectors, cheap to clone, hash and compare.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct State {
    /// Names that name something.
    entries: Vec<(Slot, Entry)>,
    /// Files with at least one name, by creating operation.
    files: Vec<FileRec>,
    /// Subdirectories an rmdir sealed (or may have): (directory, operation).
    seals: Vec<(u16, u32)>,
    /// What operations between steps remember.
    held: Vec<(u32, Held)>,
}

impl State {
    fn entry(&self, s: Slot) -> Option<Entry> {
        self.entries
            .binary_search_by(|(k, _)| k.cmp(&s))
            .ok()
            .map(|i| self.entries[i].1)
    }

    fn file_at(&self, s: Slot) -> Option<u32> {
        match self.entry(s) {
            Some(Entry::File(f)) => Some(f),
            _ => None,
        }
    }

    fn dir_exists(&self, u: &Universe, d: u16) -> bool {
        match u.dirs[usize::from(d)].entry {
            None => true,
            Some(at) => self.entry(at) == Some(Entry::Dir),
        }
    }

    fn sealed(&self, d: u16) -> bool {
        self.seals.iter().any(|&(x, _)| x == d)
    }

    fn dir_empty(&self, d: u16) -> bool {
        !self.entries.iter().any(|(s, _)| s.dir == d)
    }

    fn file(&self, f: u32) -> Option<FileRec> {
        self.files
            .binary_search_by(|r| r.id.cmp(&f))
            .ok()
            .map(|i| self.files[i])
    }

    fn set_value(&mut self, f: u32, v: Value) {
        if let Ok(i) = self.files.binary_search_by(|r| r.id.cmp(&f)) {
            self.files[i].value = v;
        }
    }

    /// Puts `e` at `s` (which must be free or name a file, which then loses its name
    /// and a link); the name holds a link of its own when `counted`.
    fn put(&mut self, s: Slot, e: Entry, counted: bool) {
        if let Some(Entry::File(old)) = self.entry(s) {
            self.drop_name(old, true);
        }
        match self.entries.binary_search_by(|(k, _)| k.cmp(&s)) {
            Ok(i) => self.entries[i].1 = e,
            Err(i) => self.entries.insert(i, (s, e)),
        }
        if let Entry::File(f) = e {
            let links = u16::from(counted);
            match self.files.binary_search_by(|r| r.id.cmp(&f)) {
                Ok(i) => {
                    self.files[i].names += 1;
                    self.files[i].links += links;
                }
                Err(i) => self.files.insert(
                    i,
                    FileRec {
                        id: f,
                        value: Value::Empty,
                        names: 1,
                        links,
                    },
                ),
            }
        }
    }

    /// Removes the name at `s`, with a link of its file when `link` (an unlink; a
    /// rename's removal of the old name keeps it). A file left without names is gone.
    fn remove(&mut self, s: Slot, link: bool) {
        if let Ok(i) = self.entries.binary_search_by(|(k, _)| k.cmp(&s)) {
            let (_, e) = self.entries.remove(i);
            if let Entry::File(f) = e {
                self.drop_name(f, link);
            }
        }
    }

    fn drop_name(&mut self, f: u32, link: bool) {
        if let Ok(i) = self.files.binary_search_by(|r| r.id.cmp(&f)) {
            let r = &mut self.files[i];
            r.names -= 1;
            if link {
                r.links = r.links.saturating_sub(1);
            }
            if r.names == 0 {
                self.files.remove(i);
            }
        }
    }

    fn hold(&mut self, op: u32, h: Held) {
        match self.held.binary_search_by(|(k, _)| k.cmp(&op)) {
            Ok(i) => self.held[i].1 = h,
            Err(i) => self.held.insert(i, (op, h)),
        }
    }

    fn take(&mut self, op: u32) -> Held {
        match self.held.binary_search_by(|(k, _)| k.cmp(&op)) {
            Ok(i) => self.held.remove(i).1,
            Err(_) => Held::Nothing,
        }
    }

    fn seal(&mut self, d: u16, op: u32) {
        if let Err(i) = self.seals.binary_search(&(d, op)) {
            self.seals.insert(i, (d, op));
        }
    }

    fn unseal(&mut self, d: u16, op: u32) {
        if let Ok(i) = self.seals.binary_search(&(d, op)) {
            self.seals.remove(i);
        }
    }

    /// Renames every file by the order of its first name (ids from [`CANON`] on), so
    /// states that differ only in which operation created which file become equal;
    /// returns the renaming. What an operation holds follows (a file gone meanwhile
    /// becomes [`GONE`]).
    fn canonicalize(&mut self) -> Vec<(u32, u32)> {
        let mut map: Vec<(u32, u32)> = Vec::new();
        for (_, e) in &self.entries {
            if let Entry::File(f) = e {
                if !map.iter().any(|(old, _)| old == f) {
                    map.push((*f, CANON + map.len() as u32));
                }
            }
        }
        let new = |f: u32| map.iter().find(|(old, _)| *old == f).map(|m| m.1);
        for (_, e) in &mut self.entries {
            if let Entry::File(f) = e {
                *f = new(*f).unwrap_or(GONE);
            }
        }
        for r in &mut self.files {
            r.id = new(r.id).unwrap_or(GONE);
        }
        self.files.sort_by_key(|r| r.id);
        for (_, h) in &mut self.held {
            if let Held::File(f) = h {
                *f = new(*f).unwrap_or(GONE);
            }
        }
        map
    }

    fn describe(&self, u: &Universe) -> String {
        let mut out = String::new();
        for (d, spec) in u.dirs.iter().enumerate() {
            let d = d as u16;
            if !self.dir_exists(u, d) {
                continue;
            }
            let _ = write!(out, "      {}:", spec.path);
            if self.sealed(d) {
                out.push_str(" (sealed)");
            }
            for (s, e) in self.entries.iter().filter(|(s, _)| s.dir == d) {
                let _ = write!(out, " {}", u.name_of(s.name));
                match e {
                    Entry::Dir => out.push('/'),
                    Entry::File(f) => {
                        let Some(r) = self.file(*f) else {
                            let _ = write!(out, "={}:?", file_name(*f));
                            continue;
                        };
                        let v = match r.value {
                            Value::Empty => "empty".to_string(),
                            Value::Ver(v) => format!("v{v}"),
                            Value::Part(v) => format!("part of v{v}"),
                        };
                        let _ = write!(out, "={}:{v}", file_name(*f));
                        if r.names > 1 || r.links != r.names {
                            let _ = write!(out, " ({} names, {} links)", r.names, r.links);
                        }
                    }
                }
            }
            out.push('\n');
        }
        out
    }
}

// ----- steps --------------------------------------------------------------------------

/// One atomic change or observation of the model, part of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Act {
    /// Create: the new name.
    Create,
    /// Create: the write through the handle the create returned.
    WriteNew,
    /// Write, read, link: the lookup of the path (what it names is held).
    Resolve,
    /// Write: the write into the held file.
    WriteHeld,
    /// Read: the read of the held file.
    ReadHeld,
    /// Unlink.
    Unlink,
    /// Rename in one request.
    Move,
    /// Rename in two requests, first: the new name names the old name's file.
    MoveLink,
    /// Rename in two requests, second: the old name goes if it still names that file.
    MoveUnlink,
    /// Rename in two requests refused after its first (its old name was gone or
    /// named another file by then): the new name goes again if it still names the
    /// file, as if the rename never happened.
    TakeBack,
    /// Rename that succeeded, last: one of its attempts moved the name, or (a retry
    /// that found both names naming one file, which sends nothing) nothing was left
    /// to do.
    Finish,
    /// Rename or rmdir refused: the refusal was right at some moment.
    Refuse,
    /// Link: the new name.
    LinkAdd,
    /// Mkdir.
    Mkdir,
    /// Rmdir, first: the directory's shards sealed.
    Seal,
    /// Rmdir, second: removed if empty, else unsealed.
    Decide,
    /// Listing: one shard.
    List(u32),
    /// Snapshot.
    Snapshot,
}

#[derive(Clone, Debug)]
struct Step {
    op: u32,
    act: Act,
    start: Nanos,
    end: Nanos,
    /// The step of the same operation that must come first.
    after: Option<u32>,
    /// For a step that may do nothing: the later step of its operation after which it
    /// can no longer come.
    closed_by: Option<u32>,
    /// The step's part is indeterminate: it may do nothing.
    may_skip: bool,
}

/// What a check found.
#[derive(Debug)]
pub struct Verdict {
    /// Operations checked (those that carry information).
    pub ops: usize,
    /// Steps placed.
    pub steps: usize,
    /// Configurations explored.
    pub explored: usize,
}

/// How much the search of one part of a history ([`check`]) may explore before it
/// gives up (a failure too).
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Configurations. A storm's history of the default length took up to about a
    /// million to check, most far fewer; a violation takes as many as the orders
    /// before it.
    pub configurations: usize,
    /// Time.
    pub time: std::time::Duration,
}

/// What a check may take by default, on a machine as fast as a developer's 2-core
/// laptop (scale the time for a slower one).
pub const DEFAULT_BUDGET: Budget = Budget {
    configurations: 4_000_000,
    time: std::time::Duration::from_secs(120),
};

/// Checks `ops` (any order) against the model: `Ok` with counts when some
/// linearization exists, else a report. `late`: how long after an indeterminate
/// operation completed its effect may still come (a request queued at a live server).
pub fn check(u: &Universe, ops: &[Op], late: Nanos, budget: Budget) -> Result<Verdict, String> {
    let mut ops: Vec<Op> = ops.to_vec();
    ops.sort_by_key(|o| (o.start, o.end));
    let budget = Spent::new(budget);
    // A snapshot that could not read everything fits no state: rather than try every
    // order of what came before, check that, and show the snapshot against where it
    // ends (the snapshot's step is the last of its history).
    let broken = ops
        .iter()
        .position(|op| matches!(&op.seen, Seen::Snapshot(s) if !s.errors.is_empty()));
    if let Some(i) = broken {
        let (verdict, from, mut best) = check_in_parts(u, &ops[..i], late, &budget)?;
        let versions = std::rc::Rc::new(versions_written(&ops));
        let full = Checker::new(
            u,
            &ops[..=i],
            late,
            versions,
            from.start..i + 1,
            best.start.clone(),
        );
        best.cands = vec![(full.steps.len() - 1) as u32];
        return Err(format!(
            "a snapshot shows what no state can (what came before it is linearizable):\n{}",
            full.report(&best, &[], verdict.explored, false)
        ));
    }
    check_in_parts(u, &ops, late, &budget).map(|(v, _, _)| v)
}

/// Where a history may be cut: after each snapshot that nothing overlapped (every
/// operation before it completed, with its grace when it may still take effect, before
/// the snapshot began; every one after it began after the snapshot completed). Every
/// linearization places all the steps before such a snapshot first, then the snapshot,
/// then the rest, so the parts can be checked one after the other, each from a state
/// the part before can end in. `ops` is sorted by invocation.
fn quiet_cuts(ops: &[Op], late: Nanos) -> Vec<usize> {
    let mut cuts = Vec::new();
    let mut ended: Nanos = 0;
    for (i, op) in ops.iter().enumerate() {
        let quiet = matches!(&op.seen, Seen::Snapshot(s) if s.errors.is_empty())
            && op.main == Res::Ok
            && ended < op.start
            && ops.get(i + 1).is_none_or(|next| next.start > op.end);
        if quiet && i + 1 < ops.len() {
            cuts.push(i + 1);
        }
        let end = if op.late {
            op.end.saturating_add(late)
        } else {
            op.end
        };
        ended = ended.max(end);
    }
    cuts
}

/// Checks `ops` (sorted) part by part between quiet snapshots ([`quiet_cuts`]): a part
/// is searched from one state the part before ends in, and should it fit none of them,
/// the part before is asked for another (the snapshot fixes nearly everything, so
/// there are few). Returns the counts, and the last part's range and linearization.
fn check_in_parts(
    u: &Universe,
    ops: &[Op],
    late: Nanos,
    budget: &Spent,
) -> Result<(Verdict, std::ops::Range<usize>, Best), String> {
    let mut bounds = vec![0];
    bounds.extend(quiet_cuts(ops, late));
    bounds.push(ops.len());
    let parts: Vec<std::ops::Range<usize>> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
    let versions = std::rc::Rc::new(versions_written(ops));
    // One search per part reached, each from a state the one before it ended in, with
    // the operations and steps its linearization placed.
    let mut levels: Vec<(Checker<'_>, Search, (usize, usize))> = Vec::new();
    levels.push((
        Checker::new(
            u,
            ops,
            late,
            versions.clone(),
            parts[0].clone(),
            State::default(),
        ),
        Search::default(),
        (0, 0),
    ));
    // The report of the furthest part that fitted none of the states offered to it.
    let mut deepest: Option<(usize, String)> = None;
    let mut searching = usize::MAX;
    loop {
        let level = levels.len() - 1;
        if level != searching {
            budget.begin_part();
            searching = level;
        }
        let (checker, search, _) = levels.last_mut().expect("a part");
        match search.next(checker, budget) {
            Next::Found(verdict, best) => {
                levels[level].2 = (verdict.ops, verdict.steps);
                if level + 1 == parts.len() {
                    let verdict = Verdict {
                        ops: levels.iter().map(|l| l.2 .0).sum(),
                        steps: levels.iter().map(|l| l.2 .1).sum(),
                        explored: budget.explored(),
                    };
                    return Ok((verdict, parts[level].clone(), *best));
                }
                levels.push((
                    Checker::new(
                        u,
                        ops,
                        late,
                        versions.clone(),
                        parts[level + 1].clone(),
                        best.state,
                    ),
                    Search::default(),
                    (0, 0),
                ));
                // A part that cannot follow the states the part before ends in needs
                // another state from a part further back only when something a
                // snapshot does not show (a seal, a write landed in part, a link
                // count) lasts over several parts: the searches of parts further back
                // than that are let go, so that memory stays bounded.
                if let Some(old) = levels.len().checked_sub(RESUMABLE_PARTS + 1) {
                    levels[old].1 = Search::let_go();
                }
            }
            Next::Exhausted(report) => {
                if deepest.as_ref().is_none_or(|(d, _)| level > *d) {
                    let header = if parts.len() > 1 {
                        let r = &parts[level];
                        format!(
                            "(the history is checked in {} parts, cut at snapshots nothing overlapped; \
                             this is the part of operations #{} to #{}, and none of the states the \
                             parts before it can end in lets it through)\n",
                            parts.len(),
                            r.start,
                            r.end - 1
                        )
                    } else {
                        String::new()
                    };
                    deepest = Some((level, format!("{header}{report}")));
                }
                levels.pop();
                if levels.is_empty() {
                    return Err(deepest.map(|(_, r)| r).unwrap_or_default());
                }
            }
            Next::GaveUp(report) => return Err(report),
        }
    }
}

/// How many of the last parts a check can go back to for another state to start from.
const RESUMABLE_PARTS: usize = 16;

/// Every version the operations of `ops` write, by id.
fn versions_written(ops: &[Op]) -> HashMap<u32, Version> {
    ops.iter()
        .filter_map(|op| match &op.call {
            Call::Create { write: Some(v), .. } | Call::Write { version: v, .. } => {
                Some((v.id, *v))
            }
            _ => None,
        })
        .collect()
}

/// What a check has spent: of its budget, which bounds the search of each part
/// ([`check_in_parts`]: a history checked part by part takes time in proportion to
/// its length), and in all.
struct Spent {
    budget: Budget,
    /// When the part searched now began to be searched.
    part_started: std::cell::Cell<std::time::Instant>,
    /// Configurations explored in it.
    part_explored: std::cell::Cell<usize>,
    explored: std::cell::Cell<usize>,
}

impl Spent {
    fn new(budget: Budget) -> Spent {
        Spent {
            budget,
            part_started: std::cell::Cell::new(std::time::Instant::now()),
            part_explored: std::cell::Cell::new(0),
            explored: std::cell::Cell::new(0),
        }
    }

    /// The search goes on with another part: its budget starts whole.
    fn begin_part(&self) {
        self.part_started.set(std::time::Instant::now());
        self.part_explored.set(0);
    }

    fn explored(&self) -> usize {
        self.explored.get()
    }

    /// Counts one configuration more: whether the part's budget is spent.
    fn count(&self) -> bool {
        self.explored.set(self.explored.get() + 1);
        let n = self.part_explored.get() + 1;
        self.part_explored.set(n);
        n > self.budget.configurations
            || (n.is_multiple_of(1024) && self.part_started.get().elapsed() > self.budget.time)
    }
}

struct Checker<'a> {
    u: &'a Universe,
    ops: &'a [Op],
    steps: Vec<Step>,
    /// Steps that must be placed (those of parts that may have done nothing need not).
    required: usize,
    /// Per operation, the end of its last step's window.
    last_end: HashMap<u32, Nanos>,
    /// Every version written, by id.
    versions: std::rc::Rc<HashMap<u32, Version>>,
    /// The state the steps start from.
    start: State,
}

impl<'a> Checker<'a> {
    /// The checker of the operations of `ops` in `range` (numbered as in `ops`),
    /// starting from `start`; `versions`: those `ops` write ([`versions_written`]).
    fn new(
        u: &'a Universe,
        ops: &'a [Op],
        late: Nanos,
        versions: std::rc::Rc<HashMap<u32, Version>>,
        range: std::ops::Range<usize>,
        start: State,
    ) -> Checker<'a> {
        let mut steps: Vec<Step> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            if !range.contains(&i) {
                continue;
            }
            let i = i as u32;
            let mut chain: Option<u32> = None;
            let mut push = |act: Act, may_skip: bool, chained: bool| {
                let idx = steps.len() as u32;
                steps.push(Step {
                    op: i,
                    act,
                    start: op.start,
                    end: if may_skip && op.late {
                        op.end.saturating_add(late)
                    } else {
                        op.end
                    },
                    after: if chained { chain } else { None },
                    closed_by: None,
                    may_skip,
                });
                if chained {
                    chain = Some(idx);
                }
            };
            let unknown = op.main == Res::Unknown;
            let data_sent = matches!(op.data, Res::Ok | Res::Unknown);
            if op.main == Res::NotSent {
                continue;
            }
            match &op.call {
                Call::Create { write, .. } => {
                    push(Act::Create, unknown, true);
                    if write.is_some() && op.main == Res::Ok && data_sent {
                        push(Act::WriteNew, op.data == Res::Unknown, true);
                    }
                }
                Call::Write { .. } => {
                    // An open that failed indeterminately changed nothing and saw
                    // nothing.
                    if unknown {
                        continue;
                    }
                    push(Act::Resolve, false, true);
                    if op.main == Res::Ok && data_sent {
                        push(Act::WriteHeld, op.data == Res::Unknown, true);
                    }
                }
                Call::Read { .. } => {
                    if unknown {
                        continue;
                    }
                    push(Act::Resolve, false, true);
                    if op.main == Res::Ok && op.data == Res::Ok {
                        push(Act::ReadHeld, false, true);
                    }
                }
                Call::Unlink { .. } | Call::Mkdir { .. } => {
                    let act = if matches!(op.call, Call::Unlink { .. }) {
                        Act::Unlink
                    } else {
                        Act::Mkdir
                    };
                    push(act, unknown, true);
                }
                Call::Link { .. } => {
                    push(Act::Resolve, unknown, true);
                    push(Act::LinkAdd, unknown, true);
                }
                Call::Rename { .. } => {
                    // An attempt the client started again ended with ESTALE: in two
                    // steps, the new name may have gone in; in one, nothing happened.
                    // Only the last may have moved the name (unless it was refused),
                    // and a rename that succeeded may have ended with a retry that
                    // found both names naming one file, which sends nothing. Whatever
                    // one attempt did, the next may do its own; they came in order
                    // (closed_by, below).
                    let refused = matches!(op.main, Res::Refused(_));
                    for k in 0..op.moves {
                        let last = k + 1 == op.moves;
                        let moves = last && !refused;
                        if op.two_step {
                            push(Act::MoveLink, true, false);
                            if moves {
                                push(Act::MoveUnlink, true, true);
                            } else if last && refused {
                                push(Act::TakeBack, true, true);
                            }
                        } else if moves {
                            push(Act::Move, true, false);
                        }
                    }
                    match op.main {
                        Res::Ok => push(Act::Finish, false, false),
                        Res::Refused(_) => push(Act::Refuse, false, false),
                        _ => {}
                    }
                }
                Call::Rmdir { .. } => match op.main {
                    Res::Refused(Refusal::NoEntry) => push(Act::Refuse, false, true),
                    Res::Refused(Refusal::NotDir | Refusal::IsDir | Refusal::Exists) => {
                        push(Act::Refuse, false, true);
                    }
                    _ => {
                        push(Act::Seal, unknown, true);
                        push(Act::Decide, unknown, true);
                    }
                },
                Call::Readdir { .. } => match op.main {
                    Res::Ok => {
                        for k in 0..u.shards {
                            push(Act::List(k), false, false);
                        }
                    }
                    Res::Refused(_) => push(Act::Refuse, false, true),
                    Res::Unknown | Res::NotSent | Res::NotRun => {}
                },
                Call::Snapshot => push(Act::Snapshot, false, true),
            }
        }
        // A step that may do nothing can no longer come once a later step of its
        // operation that does not wait for it came.
        for k in 0..steps.len() {
            if !steps[k].may_skip {
                continue;
            }
            let waits_for = |mut j: usize| loop {
                match steps[j].after {
                    Some(a) if a as usize == k => return true,
                    Some(a) => j = a as usize,
                    None => return false,
                }
            };
            steps[k].closed_by = (k + 1..steps.len())
                .take_while(|&j| steps[j].op == steps[k].op)
                .find(|&j| !waits_for(j))
                .map(|j| j as u32);
        }
        let required = steps.iter().filter(|s| !s.may_skip).count();
        let mut last_end: HashMap<u32, Nanos> = HashMap::new();
        for s in &steps {
            let e = last_end.entry(s.op).or_default();
            *e = (*e).max(s.end);
        }
        Checker {
            u,
            ops,
            steps,
            required,
            last_end,
            versions,
            start,
        }
    }

    /// The successor states of placing step `si` in state `st` (none: it cannot come
    /// now).
    fn apply(&self, st: &State, si: usize) -> Vec<State> {
        let step = &self.steps[si];
        let op = &self.ops[step.op as usize];
        let u = self.u;
        let mut out = Vec::new();
        let opi = step.op;
        match (step.act, &op.call) {
            (Act::Create, Call::Create { at, .. }) => match op.main {
                Res::Ok | Res::Unknown => {
                    if st.dir_exists(u, at.dir) && st.entry(*at).is_none() {
                        let mut s = st.clone();
                        s.put(*at, Entry::File(opi), true);
                        if self.chained_next(si) {
                            s.hold(opi, Held::File(opi));
                        }
                        out.push(s);
                    }
                }
                Res::Refused(r) => {
                    if refusal_of_add(u, st, *at, r) {
                        out.push(st.clone());
                    }
                }
                Res::NotSent | Res::NotRun => {}
            },
            (Act::WriteNew, Call::Create { write: Some(v), .. }) => {
                let mut s = st.clone();
                if let Held::File(f) = s.take(opi) {
                    self.write_into(&s, f, *v, step.may_skip, &mut out);
                }
            }
            (
                Act::Resolve,
                Call::Write { at, .. } | Call::Read { at } | Call::Link { from: at, .. },
            ) => {
                let keeps = self.chained_next(si);
                match op.main {
                    Res::Ok | Res::Unknown => {
                        if let Some(f) = st.file_at(*at) {
                            let mut s = st.clone();
                            if keeps {
                                s.hold(opi, Held::File(f));
                            }
                            out.push(s);
                        }
                    }
                    Res::Refused(r) => {
                        let absent = !st.dir_exists(u, at.dir) || st.entry(*at).is_none();
                        let right = match r {
                            Refusal::NoEntry => absent,
                            Refusal::IsDir => st.entry(*at) == Some(Entry::Dir),
                            _ => false,
                        };
                        if right {
                            let mut s = st.clone();
                            if keeps {
                                s.hold(opi, Held::Refused);
                            }
                            out.push(s);
                        }
                        // A link's ENOENT or EEXIST may come from its second step.
                        if let (Call::Link { .. }, Some(f)) = (&op.call, st.file_at(*at)) {
                            let mut s = st.clone();
                            s.hold(opi, Held::File(f));
                            out.push(s);
                        }
                    }
                    Res::NotSent | Res::NotRun => {}
                }
            }
            (Act::WriteHeld, Call::Write { version, .. }) => {
                let mut s = st.clone();
                if let Held::File(f) = s.take(opi) {
                    self.write_into(&s, f, *version, step.may_skip, &mut out);
                }
            }
            (Act::ReadHeld, Call::Read { .. }) => {
                let mut s = st.clone();
                let held = s.take(opi);
                let Seen::Read(obs) = &op.seen else {
                    return out;
                };
                let fine = match held {
                    Held::File(f) => match s.file(f) {
                        Some(r) => self.matches(r.value, obs),
                        // A file with no name left: its data may be gone.
                        None => true,
                    },
                    _ => false,
                };
                if fine {
                    out.push(s);
                }
            }
            (Act::Unlink, Call::Unlink { at }) => match op.main {
                Res::Ok | Res::Unknown => {
                    if st.file_at(*at).is_some() {
                        let mut s = st.clone();
                        s.remove(*at, true);
                        out.push(s);
                    }
                }
                Res::Refused(r) => {
                    let right = match r {
                        Refusal::NoEntry => !st.dir_exists(u, at.dir) || st.entry(*at).is_none(),
                        Refusal::IsDir => st.entry(*at) == Some(Entry::Dir),
                        _ => false,
                    };
                    if right {
                        out.push(st.clone());
                    }
                }
                Res::NotSent | Res::NotRun => {}
            },
            (Act::LinkAdd, Call::Link { to, .. }) => {
                let mut s = st.clone();
                let held = s.take(opi);
                let (added, refused) = match held {
                    Held::File(f) => (
                        s.dir_exists(u, to.dir) && s.entry(*to).is_none() && s.file(f).is_some(),
                        match op.main {
                            Res::Refused(Refusal::NoEntry) => {
                                !s.dir_exists(u, to.dir) || s.sealed(to.dir) || s.file(f).is_none()
                            }
                            Res::Refused(Refusal::Exists) => s.entry(*to).is_some(),
                            _ => false,
                        },
                    ),
                    // The lookup of the old name was the refusal.
                    Held::Refused => (false, op.main == Res::Refused(Refusal::NoEntry)),
                    Held::Nothing | Held::Moved => (false, false),
                };
                match (op.main, held) {
                    (Res::Ok | Res::Unknown, Held::File(f)) if added => {
                        s.put(*to, Entry::File(f), true);
                        out.push(s);
                    }
                    (Res::Refused(_), _) if refused => out.push(s),
                    _ => {}
                }
            }
            (Act::Move | Act::MoveLink, Call::Rename { from, to }) => {
                if let Some(f) = st.file_at(*from) {
                    let fits = st.dir_exists(u, to.dir)
                        && st.entry(*to) != Some(Entry::File(f))
                        && st.entry(*to) != Some(Entry::Dir);
                    if fits {
                        let mut s = st.clone();
                        s.put(*to, Entry::File(f), false);
                        if step.act == Act::Move {
                            s.remove(*from, false);
                            s.hold(opi, Held::Moved);
                        } else {
                            s.hold(opi, Held::File(f));
                        }
                        out.push(s);
                    }
                }
            }
            (Act::MoveUnlink, Call::Rename { from, .. }) => {
                let mut s = st.clone();
                if let Held::File(f) = s.take(opi) {
                    if s.file_at(*from) == Some(f) {
                        s.remove(*from, false);
                        s.hold(opi, Held::Moved);
                        out.push(s);
                    }
                }
            }
            (Act::TakeBack, Call::Rename { to, .. }) => {
                let mut s = st.clone();
                if let Held::File(f) = s.take(opi) {
                    if s.file_at(*to) == Some(f) {
                        s.remove(*to, false);
                        out.push(s);
                    }
                }
            }
            (Act::Finish, Call::Rename { from, to }) => {
                let mut s = st.clone();
                let done = match s.take(opi) {
                    Held::Moved => true,
                    // Nothing left to do: both names name one file.
                    Held::Nothing => {
                        s.file_at(*from).is_some() && s.file_at(*from) == s.file_at(*to)
                    }
                    _ => false,
                };
                if done {
                    out.push(s);
                }
            }
            (Act::Refuse, Call::Rename { from, to }) => {
                let right = match op.main {
                    Res::Refused(Refusal::NoEntry) => {
                        st.file_at(*from).is_none()
                            || !st.dir_exists(u, from.dir)
                            || !st.dir_exists(u, to.dir)
                            || st.sealed(to.dir)
                    }
                    _ => false,
                };
                if right {
                    out.push(st.clone());
                }
            }
            (Act::Mkdir, Call::Mkdir { at }) => match op.main {
                Res::Ok | Res::Unknown => {
                    if st.dir_exists(u, at.dir) && st.entry(*at).is_none() {
                        let mut s = st.clone();
                        s.put(*at, Entry::Dir, true);
                        if let Some(d) = u.dir_at(*at) {
                            s.seals.retain(|&(x, _)| x != d);
                        }
                        out.push(s);
                    }
                }
                Res::Refused(r) => {
                    if refusal_of_add(u, st, *at, r) {
                        out.push(st.clone());
                    }
                }
                Res::NotSent | Res::NotRun => {}
            },
            (Act::Refuse, Call::Rmdir { at }) => {
                let right = match op.main {
                    Res::Refused(Refusal::NoEntry) => {
                        !st.dir_exists(u, at.dir) || st.entry(*at).is_none()
                    }
                    Res::Refused(Refusal::NotDir) => matches!(st.entry(*at), Some(Entry::File(_))),
                    _ => false,
                };
                if right {
                    out.push(st.clone());
                }
            }
            (Act::Seal, Call::Rmdir { at }) => {
                if let (Some(Entry::Dir), Some(d)) = (st.entry(*at), u.dir_at(*at)) {
                    let mut s = st.clone();
                    s.seal(d, opi);
                    out.push(s);
                }
            }
            (Act::Decide, Call::Rmdir { at }) => {
                let Some(d) = u.dir_at(*at) else {
                    return out;
                };
                if st.entry(*at) == Some(Entry::Dir) {
                    let empty = st.dir_empty(d);
                    let removes = matches!(op.main, Res::Ok | Res::Unknown) && empty;
                    let unseals =
                        matches!(op.main, Res::Refused(Refusal::NotEmpty) | Res::Unknown) && !empty;
                    if removes {
                        let mut s = st.clone();
                        s.remove(*at, true);
                        s.seals.retain(|&(x, _)| x != d);
                        out.push(s);
                    }
                    if unseals {
                        let mut s = st.clone();
                        s.unseal(d, opi);
                        out.push(s);
                        // An unseal that did not reach a server that was down leaves
                        // its shard sealed (fsck removes the seal).
                        if !op.calm && !step.may_skip {
                            out.push(st.clone());
                        }
                    }
                }
            }
            (Act::List(k), Call::Readdir { dir }) => {
                let Seen::Listing(listed) = &op.seen else {
                    return out;
                };
                if self.listing_fits(st, *dir, k, listed) {
                    out.push(st.clone());
                }
            }
            (Act::Refuse, Call::Readdir { dir })
                if op.main == Res::Refused(Refusal::NoEntry) && !st.dir_exists(u, *dir) =>
            {
                out.push(st.clone());
            }
            (Act::Snapshot, Call::Snapshot) => {
                let Seen::Snapshot(snap) = &op.seen else {
                    return out;
                };
                if self.snapshot_fits(st, snap) {
                    // Which operation created a file no longer matters: configurations
                    // that differ only in that are one from here on.
                    let mut s = st.clone();
                    // What operations whose steps can no longer come hold is dead.
                    s.held
                        .retain(|&(o, _)| self.last_end.get(&o).is_some_and(|&e| e >= op.start));
                    s.canonicalize();
                    out.push(s);
                }
            }
            _ => {}
        }
        out
    }

    /// Whether step `si` has a next step of its operation that waits for it (and takes
    /// what it holds).
    fn chained_next(&self, si: usize) -> bool {
        self.steps
            .get(si + 1)
            .is_some_and(|n| n.after == Some(si as u32))
    }

    /// Writes version `v` into file `f`: pushes the state with it (and, when `maybe`,
    /// with it perhaps in part over an empty file).
    fn write_into(&self, st: &State, f: u32, v: Version, maybe: bool, out: &mut Vec<State>) {
        match st.file(f) {
            Some(FileRec { value: old, .. }) => {
                let mut s = st.clone();
                s.set_value(f, Value::Ver(v.id));
                out.push(s);
                if maybe && !v.whole() && old == Value::Empty {
                    let mut s = st.clone();
                    s.set_value(f, Value::Part(v.id));
                    out.push(s);
                }
            }
            // Written into a file with no name left: nothing anyone can see.
            None => {
                if !maybe {
                    out.push(st.clone());
                }
            }
        }
    }

    /// Whether a read of a file holding `v` may return `obs`.
    fn matches(&self, v: Value, obs: &ReadObs) -> bool {
        match (v, obs) {
            (Value::Empty, ReadObs::Empty) => true,
            (Value::Ver(a), ReadObs::Exact(b)) => a == *b,
            (Value::Part(_), ReadObs::Empty) => true,
            (Value::Part(a), ReadObs::Exact(b)) => a == *b,
            (Value::Part(a), ReadObs::Other(bytes)) => match self.versions.get(&a) {
                Some(ver) => {
                    let want = ver.content();
                    bytes.len() <= want.len()
                        && bytes.iter().zip(&want).all(|(&g, &w)| g == w || g == 0)
                }
                None => false,
            },
            _ => false,
        }
    }

    /// Whether shard `k` of directory `d` in `st` holds exactly the names of `listed`
    /// in that shard (a directory that is gone lists nothing).
    fn listing_fits(&self, st: &State, d: u16, k: u32, listed: &[(u16, Kind)]) -> bool {
        let u = self.u;
        if k == 0 && listed.iter().any(|(n, _)| u.shard_of(*n).is_none()) {
            return false;
        }
        let mut got: Vec<(u16, Kind)> = listed
            .iter()
            .filter(|(n, _)| u.shard_of(*n) == Some(k))
            .copied()
            .collect();
        got.sort_unstable();
        let mut want: Vec<(u16, Kind)> = Vec::new();
        if st.dir_exists(u, d) {
            for (s, e) in st.entries.iter().filter(|(s, _)| s.dir == d) {
                if u.shard_of(s.name) == Some(k) {
                    want.push((s.name, kind_of(*e)));
                }
            }
        }
        want.sort_unstable();
        got == want
    }

    /// Whether `snap` shows exactly `st`: the same directories, names, kinds and
    /// contents, and names share a handle exactly when they name one file.
    fn snapshot_fits(&self, st: &State, snap: &Snap) -> bool {
        let u = self.u;
        if !snap.errors.is_empty() {
            return false;
        }
        let listed: HashSet<u16> = snap.dirs.iter().map(|d| d.dir).collect();
        for d in 0..u.dirs.len() as u16 {
            if st.dir_exists(u, d) != listed.contains(&d) {
                return false;
            }
        }
        let mut handle_of: HashMap<u32, u64> = HashMap::new();
        let mut file_of: HashMap<u64, u32> = HashMap::new();
        for sd in &snap.dirs {
            let mut want: Vec<(u16, Kind)> = st
                .entries
                .iter()
                .filter(|(s, _)| s.dir == sd.dir)
                .map(|(s, e)| (s.name, kind_of(*e)))
                .collect();
            want.sort_unstable();
            let mut got: Vec<(u16, Kind)> = sd.entries.iter().map(|e| (e.name, e.kind)).collect();
            got.sort_unstable();
            if got != want {
                return false;
            }
            for e in &sd.entries {
                let Some(Entry::File(f)) = st.entry(Slot {
                    dir: sd.dir,
                    name: e.name,
                }) else {
                    continue;
                };
                if *handle_of.entry(f).or_insert(e.handle) != e.handle
                    || *file_of.entry(e.handle).or_insert(f) != f
                {
                    return false;
                }
                let fits = match (st.file(f), &e.data) {
                    // pvfs counts at least the links the model does.
                    (Some(r), Some(obs)) => {
                        self.matches(r.value, obs) && u32::from(r.links) <= e.nlink
                    }
                    _ => false,
                };
                if !fits {
                    return false;
                }
            }
        }
        true
    }

    fn root(&self) -> Frame {
        let placed = vec![0; self.steps.len().div_ceil(64)];
        let lo = self.first_open(&placed, 0, 0);
        Frame::new(self, placed, 0, lo, 0, self.start.clone())
    }

    /// The first step from `lo` on that may still be placed: not placed, and for one
    /// that may do nothing, not closed (a step invoked after its window ended is
    /// placed already, `latest` being the latest invocation placed).
    fn first_open(&self, placed: &[u64], mut lo: usize, latest: Nanos) -> usize {
        while lo < self.steps.len() {
            // 64 steps placed at once.
            if lo.is_multiple_of(64) && placed[lo / 64] == u64::MAX {
                lo += 64;
                continue;
            }
            if !is_set(placed, lo) && !self.closed(placed, lo, latest) {
                break;
            }
            lo += 1;
        }
        lo.min(self.steps.len())
    }

    /// Whether step `j`, one that may do nothing, can no longer come: its window ended
    /// before a step placed was invoked, or a later step of its operation came.
    fn closed(&self, placed: &[u64], j: usize, latest: Nanos) -> bool {
        let s = &self.steps[j];
        s.may_skip && (s.end < latest || s.closed_by.is_some_and(|c| is_set(placed, c as usize)))
    }

    /// Steps that may come next: not placed, their operation's earlier step placed, and
    /// invoked before every step that must still be placed had to complete; one that
    /// may do nothing also only while its window is open (not ended before a placed
    /// step was invoked). Those that must happen first, the most urgent first; those
    /// that may do nothing last, for an observation to call for them.
    fn candidates(&self, placed: &[u64], lo: usize, latest: Nanos) -> Vec<u32> {
        let mut bound = Nanos::MAX;
        let mut out: Vec<u32> = Vec::new();
        let mut j = lo;
        while j < self.steps.len() {
            let s = &self.steps[j];
            if s.start > bound {
                break;
            }
            // 64 steps placed at once: nothing there.
            if j.is_multiple_of(64) && placed[j / 64] == u64::MAX {
                j += 64;
                continue;
            }
            j += 1;
            let j = j - 1;
            if is_set(placed, j) || self.closed(placed, j, latest) {
                continue;
            }
            if !s.may_skip {
                bound = bound.min(s.end);
            }
            let ready = s.after.is_none_or(|a| is_set(placed, a as usize));
            if ready {
                out.push(j as u32);
            }
        }
        out.retain(|&j| self.steps[j as usize].start <= bound);
        out.sort_by_key(|&j| {
            let s = &self.steps[j as usize];
            (s.may_skip, s.end)
        });
        // Should the most urgent step not fit, its own operation's steps that may do
        // nothing are the likeliest to make it fit (a rename's attempts before its
        // finish): they come right after it.
        if let Some(&first) = out.first() {
            let op = self.steps[first as usize].op;
            let (own, rest): (Vec<u32>, Vec<u32>) = out[1..].iter().partition(|&&j| {
                self.steps[j as usize].may_skip && self.steps[j as usize].op == op
            });
            out.truncate(1);
            out.extend(own);
            out.extend(rest);
        }
        out
    }

    fn report(&self, best: &Best, stack: &[Frame], explored: usize, gave_up: bool) -> String {
        let u = self.u;
        let mut out = String::new();
        if gave_up {
            let _ = writeln!(
                out,
                "the checker gave up after {explored} configurations (its budget of them or of time) \
                 without finding a linearization \
                 (the furthest it got is below; {} frames deep)",
                stack.len()
            );
        } else {
            let _ = writeln!(
                out,
                "no linearization exists: {explored} configurations explored; every order of the \
                 steps gets stuck"
            );
        }
        let _ = writeln!(
            out,
            "  the furthest order placed {} of {} steps; one of these had to come next, and none could:",
            best.count,
            self.steps.len()
        );
        let mut stuck_ops: Vec<u32> = best
            .cands
            .iter()
            .map(|&j| self.steps[j as usize].op)
            .collect();
        stuck_ops.sort_unstable();
        stuck_ops.dedup();
        let mut slots: HashSet<Slot> = stuck_ops
            .iter()
            .flat_map(|&o| slots_of(&self.ops[o as usize].call))
            .collect();
        // The versions the conflict names: the operations that wrote them are shown
        // wherever they are in the history.
        let mut versions: HashSet<u32> = HashSet::new();
        for &j in &best.cands {
            let s = &self.steps[j as usize];
            let _ = writeln!(
                out,
                "    step {:?} of op #{}{}",
                s.act,
                s.op,
                if s.may_skip { " (may do nothing)" } else { "" }
            );
            for (slot, why) in self.explain(&best.state, j as usize) {
                let _ = writeln!(out, "      {why}");
                versions.extend(versions_named(&why));
                slots.extend(slot);
            }
        }
        let _ = writeln!(out, "  the model there:");
        out.push_str(&best.state.describe(u));
        let _ = writeln!(out, "  the last steps of that order:");
        for &(j, _) in best.path.iter().skip(best.path.len().saturating_sub(16)) {
            let s = &self.steps[j as usize];
            let _ = writeln!(out, "    op #{} {:?}", s.op, s.act);
        }
        // Every name the files in question had on the way there.
        let names = self.names_along(&best.path);
        let files: Vec<u32> = {
            let mut f: Vec<u32> = slots
                .iter()
                .filter_map(|s| best.state.file_at(*s))
                .collect();
            f.sort_unstable();
            f.dedup();
            f
        };
        for f in files {
            if let Some(had) = names.get(&f) {
                let mut paths: Vec<String> = had.iter().map(|s| u.path(*s)).collect();
                paths.sort();
                let _ = writeln!(
                    out,
                    "  the {} had the names {}",
                    file_name(f),
                    paths.join(", ")
                );
                slots.extend(had.iter().copied());
            }
        }
        // The names in question themselves (before the step further below).
        let direct = slots.clone();
        // The operations around the stuck ones: everything overlapping their time,
        // and the last operations before them on the slots they touch.
        let (lo, hi) = stuck_ops.iter().fold((Nanos::MAX, 0), |(lo, hi), &o| {
            let op = &self.ops[o as usize];
            (lo.min(op.start), hi.max(op.end))
        });
        let lo = if stuck_ops.is_empty() { 0 } else { lo };
        // One step further: the other names of renames and links of those names.
        let touching: Vec<Slot> = self
            .ops
            .iter()
            .filter(|op| op.end < hi && slots_of(&op.call).iter().any(|s| slots.contains(s)))
            .flat_map(|op| slots_of(&op.call))
            .collect();
        slots.extend(touching);
        let mut shown: Vec<usize> = Vec::new();
        for (i, op) in self.ops.iter().enumerate() {
            let overlaps = op.start <= hi && op.end >= lo;
            let related = op.end < lo && slots_of(&op.call).iter().any(|s| slots.contains(s));
            if overlaps || related {
                shown.push(i);
            }
        }
        // Of the related earlier ones, the last 40, the last 60 before them on the
        // names in question, and every one writing a version the conflict names.
        let early: Vec<usize> = shown
            .iter()
            .copied()
            .filter(|&i| self.ops[i].end < lo)
            .collect();
        let skip = early.len().saturating_sub(40);
        let mut shown: Vec<usize> = early
            .iter()
            .copied()
            .skip(skip)
            .chain(shown.iter().copied().filter(|&i| self.ops[i].end >= lo))
            .collect();
        let on_direct: Vec<usize> = early
            .iter()
            .copied()
            .take(skip)
            .filter(|&i| {
                slots_of(&self.ops[i].call)
                    .iter()
                    .any(|s| direct.contains(s))
            })
            .collect();
        shown.extend(on_direct.iter().skip(on_direct.len().saturating_sub(60)));
        shown.extend(
            (0..self.ops.len())
                .filter(|&i| written(&self.ops[i].call).is_some_and(|v| versions.contains(&v))),
        );
        shown.sort_unstable();
        shown.dedup();
        let _ = writeln!(
            out,
            "  the operations around it (times in ms since the start; * = had to come next):"
        );
        for i in shown {
            let mark = if stuck_ops.contains(&(i as u32)) {
                '*'
            } else {
                ' '
            };
            let _ = writeln!(out, "  {mark} {}", line(u, i, &self.ops[i]));
        }
        out
    }
}

/// One operation as the reports show it: its number, client, times and outcome.
fn line(u: &Universe, i: usize, op: &Op) -> String {
    format!(
        "#{i} client {} [{:.3} .. {:.3}] {}",
        op.client,
        op.start as f64 / 1e6,
        op.end as f64 / 1e6,
        op.describe(u)
    )
}

/// Every operation of a history, one per line, numbered as the checker's reports
/// number them (by invocation, then completion): kept next to a failed check's
/// report, since the report shows only the operations near the conflict.
pub fn dump(u: &Universe, ops: &[Op]) -> String {
    let mut ops: Vec<&Op> = ops.iter().collect();
    ops.sort_by_key(|o| (o.start, o.end));
    let mut out = String::new();
    for (i, op) in ops.into_iter().enumerate() {
        let _ = writeln!(out, "{}", line(u, i, op));
    }
    out
}

/// The version a call writes, if it writes one.
fn written(call: &Call) -> Option<u32> {
    match call {
        Call::Create { write: Some(v), .. } => Some(v.id),
        Call::Write { version, .. } => Some(version.id),
        _ => None,
    }
}

/// The versions (`v123`) a line of explanation names.
fn versions_named(why: &str) -> Vec<u32> {
    why.replace("Ver(", "v")
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(|w| w.strip_prefix('v')?.parse().ok())
        .collect()
}

impl Checker<'_> {
    /// Replays `path` from the start: every name each file had.
    fn names_along(&self, path: &[(u32, usize)]) -> HashMap<u32, HashSet<Slot>> {
        let mut names: HashMap<u32, HashSet<Slot>> = HashMap::new();
        let mut st = self.start.clone();
        for &(j, k) in path {
            let Some(next) = self.apply(&st, j as usize).into_iter().nth(k) else {
                break;
            };
            if self.steps[j as usize].act == Act::Snapshot {
                // The same renaming the snapshot step made.
                let mut before = st.clone();
                let map = before.canonicalize();
                let mut renamed: HashMap<u32, HashSet<Slot>> = HashMap::new();
                for (old, new) in map {
                    if let Some(s) = names.remove(&old) {
                        renamed.insert(new, s);
                    }
                }
                names = renamed;
            }
            st = next;
            for (s, e) in &st.entries {
                if let Entry::File(f) = e {
                    names.entry(*f).or_default().insert(*s);
                }
            }
        }
        names
    }

    /// Why an observation step does not fit state `st`: each difference, with the
    /// slot it is about.
    fn explain(&self, st: &State, si: usize) -> Vec<(Option<Slot>, String)> {
        let u = self.u;
        let step = &self.steps[si];
        let op = &self.ops[step.op as usize];
        let mut out = Vec::new();
        // (slot, what the model has, what was seen)
        let compare = |d: u16, want: Vec<(u16, Kind)>, got: Vec<(u16, Kind)>| {
            let mut out = Vec::new();
            for (these, others, how) in [
                (&want, &got, "is in the model, not seen"),
                (&got, &want, "is seen, not in the model"),
            ] {
                for (n, k) in these.iter().filter(|e| !others.contains(e)) {
                    let slot = Slot { dir: d, name: *n };
                    out.push((Some(slot), format!("{} ({k:?}) {how}", u.path(slot))));
                }
            }
            out
        };
        let model = |d: u16, shard: Option<u32>| -> Vec<(u16, Kind)> {
            if !st.dir_exists(u, d) {
                return Vec::new();
            }
            st.entries
                .iter()
                .filter(|(s, _)| s.dir == d && shard.is_none_or(|k| u.shard_of(s.name) == Some(k)))
                .map(|(s, e)| (s.name, kind_of(*e)))
                .collect()
        };
        match (&step.act, &op.seen, &op.call) {
            (Act::List(k), Seen::Listing(listed), Call::Readdir { dir }) => {
                let got = listed
                    .iter()
                    .filter(|(n, _)| u.shard_of(*n).is_none_or(|s| s == *k))
                    .copied()
                    .collect();
                out.extend(compare(*dir, model(*dir, Some(*k)), got));
            }
            (Act::Snapshot, Seen::Snapshot(snap), _) => {
                for e in &snap.errors {
                    out.push((None, format!("error: {e}")));
                }
                for d in 0..u.dirs.len() as u16 {
                    let listed = snap.dirs.iter().find(|x| x.dir == d);
                    if st.dir_exists(u, d) && listed.is_none() {
                        out.push((
                            None,
                            format!("{} is in the model, not seen", u.dirs[usize::from(d)].path),
                        ));
                    }
                    let Some(sd) = listed else { continue };
                    if !st.dir_exists(u, d) {
                        out.push((
                            None,
                            format!("{} is seen, not in the model", u.dirs[usize::from(d)].path),
                        ));
                    }
                    out.extend(compare(
                        d,
                        model(d, None),
                        sd.entries.iter().map(|e| (e.name, e.kind)).collect(),
                    ));
                    for e in &sd.entries {
                        let slot = Slot {
                            dir: d,
                            name: e.name,
                        };
                        if e.kind == Kind::File && e.data.is_none() {
                            out.push((
                                Some(slot),
                                format!("{}: nothing could be read", u.path(slot)),
                            ));
                        }
                        let (Some(f), Some(obs)) = (st.file_at(slot), &e.data) else {
                            continue;
                        };
                        if let Some(r) = st.file(f) {
                            if u32::from(r.links) > e.nlink {
                                out.push((
                                    Some(slot),
                                    format!(
                                        "{}: pvfs counts {} links, the model at least {}",
                                        u.path(slot),
                                        e.nlink,
                                        r.links
                                    ),
                                ));
                            }
                            let v = r.value;
                            if !self.matches(v, obs) {
                                out.push((
                                    Some(slot),
                                    format!(
                                        "{}: the model holds {v:?}, read {}",
                                        u.path(slot),
                                        obs.describe()
                                    ),
                                ));
                            }
                        }
                    }
                }
                let mut by_handle: HashMap<u64, Vec<(Slot, Option<u32>)>> = HashMap::new();
                for sd in &snap.dirs {
                    for e in sd.entries.iter().filter(|e| e.kind == Kind::File) {
                        let slot = Slot {
                            dir: sd.dir,
                            name: e.name,
                        };
                        by_handle
                            .entry(e.handle)
                            .or_default()
                            .push((slot, st.file_at(slot)));
                    }
                }
                let mut owner: HashMap<u32, u64> = HashMap::new();
                for (h, names) in &by_handle {
                    for (slot, f) in names {
                        let other = names.iter().find(|(_, g)| g != f);
                        if let Some((s2, _)) = other {
                            out.push((
                                Some(*slot),
                                format!(
                                    "{} and {} share handle {h:#x}, but are two files in the model",
                                    u.path(*slot),
                                    u.path(*s2)
                                ),
                            ));
                        }
                        if let Some(f) = f {
                            if let Some(h0) = owner.insert(*f, *h) {
                                if h0 != *h {
                                    out.push((Some(*slot), format!(
                                        "{}: one file of the model under handles {h0:#x} and {h:#x}",
                                        u.path(*slot)
                                    )));
                                }
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        out
    }
}

/// Whether bit `i` of `bits` is set.
fn is_set(bits: &[u64], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

/// Whether refusal `r` of adding a name at `at` was right in `st`.
fn refusal_of_add(u: &Universe, st: &State, at: Slot, r: Refusal) -> bool {
    match r {
        Refusal::Exists => st.dir_exists(u, at.dir) && st.entry(at).is_some(),
        Refusal::NoEntry => !st.dir_exists(u, at.dir) || st.sealed(at.dir),
        _ => false,
    }
}

fn kind_of(e: Entry) -> Kind {
    match e {
        Entry::File(_) => Kind::File,
        Entry::Dir => Kind::Dir,
    }
}

/// The slots an operation names.
fn slots_of(c: &Call) -> Vec<Slot> {
    match c {
        Call::Create { at, .. }
        | Call::Write { at, .. }
        | Call::Read { at }
        | Call::Unlink { at }
        | Call::Mkdir { at }
        | Call::Rmdir { at } => vec![*at],
        Call::Rename { from, to } | Call::Link { from, to } => vec![*from, *to],
        Call::Readdir { .. } | Call::Snapshot => Vec::new(),
    }
}

/// One node of the search: the steps placed, the state, and where its children are.
struct Frame {
    placed: Vec<u64>,
    /// Steps placed of those that must be.
    count: usize,
    lo: usize,
    /// The latest invocation of a step placed.
    latest: Nanos,
    state: State,
    cands: Vec<u32>,
    cand_i: usize,
    succ: Vec<State>,
    succ_i: usize,
}

impl Frame {
    fn new(
        c: &Checker<'_>,
        placed: Vec<u64>,
        count: usize,
        lo: usize,
        latest: Nanos,
        state: State,
    ) -> Frame {
        let cands = c.candidates(&placed, lo, latest);
        Frame {
            placed,
            count,
            lo,
            latest,
            state,
            cands,
            cand_i: 0,
            succ: Vec::new(),
            succ_i: 0,
        }
    }
}

/// The furthest configuration the search reached, for the report.
#[derive(Default)]
struct Best {
    count: usize,
    state: State,
    /// The state the order starts from.
    start: State,
    cands: Vec<u32>,
    /// The steps placed, and which of each one's successor states was taken.
    path: Vec<(u32, usize)>,
}

/// What [`Search::next`] found.
enum Next {
    /// A linearization (one ending in a state not offered before): the counts and the
    /// order.
    Found(Verdict, Box<Best>),
    /// No other linearization exists: the report.
    Exhausted(String),
    /// The budget is spent: the report.
    GaveUp(String),
}

/// A depth-first search for linearizations of one checker's steps that can be resumed
/// after each one found, for the next ending in another state.
#[derive(Default)]
struct Search {
    started: bool,
    /// Let go of to bound memory: it offers nothing more.
    let_go: bool,
    memo: HashSet<u128>,
    stack: Vec<Frame>,
    best: Best,
    /// The states linearizations found ended in.
    ends: HashSet<State>,
}

impl Search {
    /// A search let go of.
    fn let_go() -> Search {
        Search {
            started: true,
            let_go: true,
            ..Search::default()
        }
    }

    /// The next linearization ending in a state not offered before, or why none is.
    fn next(&mut self, c: &Checker<'_>, spent: &Spent) -> Next {
        let informative = c.steps.iter().map(|s| s.op).collect::<HashSet<_>>().len();
        if self.let_go {
            return Next::Exhausted(format!(
                "(the search of the part of operations from #{} on was let go, so that memory \
                 stays bounded: it was not asked for other states to end in)",
                c.steps.first().map_or(0, |s| s.op)
            ));
        }
        if !self.started {
            self.started = true;
            if c.required == 0 {
                self.ends.insert(c.start.clone());
                let verdict = Verdict {
                    ops: informative,
                    steps: 0,
                    explored: spent.explored(),
                };
                let best = Best {
                    state: c.start.clone(),
                    start: c.start.clone(),
                    ..Best::default()
                };
                return Next::Found(verdict, Box::new(best));
            }
            let root = c.root();
            spent.count();
            self.best.state = root.state.clone();
            self.best.start = c.start.clone();
            self.best.cands = root.cands.clone();
            self.stack.push(root);
        }
        while let Some(top) = self.stack.last_mut() {
            if top.succ_i < top.succ.len() {
                let si = top.cands[top.cand_i - 1] as usize;
                let state = std::mem::take(&mut top.succ[top.succ_i]);
                top.succ_i += 1;
                let step = &c.steps[si];
                let mut placed = top.placed.clone();
                placed[si / 64] |= 1 << (si % 64);
                let count = top.count + usize::from(!step.may_skip);
                let (top_lo, top_latest) = (top.lo, top.latest);
                if count == c.required {
                    if !self.ends.insert(state.clone()) {
                        continue;
                    }
                    let verdict = Verdict {
                        ops: informative,
                        steps: count,
                        explored: spent.explored(),
                    };
                    let best = Best {
                        count,
                        state,
                        start: c.start.clone(),
                        cands: Vec::new(),
                        path: self.path(),
                    };
                    return Next::Found(verdict, Box::new(best));
                }
                let latest = top_latest.max(step.start);
                let lo = c.first_open(&placed, top_lo, latest);
                if !self.memo.insert(key(&placed, lo, &state)) {
                    continue;
                }
                if spent.count() {
                    return Next::GaveUp(c.report(&self.best, &self.stack, spent.explored(), true));
                }
                let frame = Frame::new(c, placed, count, lo, latest, state);
                if count > self.best.count {
                    self.best = Best {
                        count,
                        state: frame.state.clone(),
                        start: c.start.clone(),
                        cands: frame.cands.clone(),
                        path: self.path(),
                    };
                }
                self.stack.push(frame);
            } else if top.cand_i < top.cands.len() {
                let si = top.cands[top.cand_i] as usize;
                top.cand_i += 1;
                top.succ = c.apply(&top.state, si);
                top.succ_i = 0;
            } else {
                self.stack.pop();
            }
        }
        Next::Exhausted(c.report(&self.best, &[], spent.explored(), false))
    }

    /// The steps placed along the stack, and which successor state each one took.
    fn path(&self) -> Vec<(u32, usize)> {
        self.stack
            .iter()
            .filter(|f| f.cand_i > 0 && f.succ_i > 0)
            .map(|f| (f.cands[f.cand_i - 1], f.succ_i - 1))
            .collect()
    }
}

/// A 128-bit fingerprint of a configuration (steps placed from `lo` on, and the
/// state): two independent 64-bit hashes, so a collision that would skip a
/// configuration is out of the question in practice.
fn key(placed: &[u64], lo: usize, st: &State) -> u128 {
    let mut a = Mix::new(0x243f_6a88_85a3_08d3, 0x9e37_79b9_7f4a_7c15);
    let mut b = Mix::new(0x1319_8a2e_0370_7344, 0xc2b2_ae3d_27d4_eb4f);
    for h in [&mut a, &mut b] {
        lo.hash(h);
        let mut words = &placed[lo / 64..];
        while let Some((&0, rest)) = words.split_last() {
            words = rest;
        }
        words.hash(h);
        st.hash(h);
    }
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

/// A fast seeded hasher for the search's fingerprints (a multiply-xorshift per word and
/// the SplitMix64 finalizer): SipHash took most of the search's time in the
/// unoptimized builds tests run in.
struct Mix {
    h: u64,
    k: u64,
}

impl Mix {
    fn new(seed: u64, k: u64) -> Mix {
        Mix { h: seed, k }
    }

    fn add(&mut self, x: u64) {
        self.h = (self.h ^ x).wrapping_mul(self.k);
        self.h ^= self.h >> 29;
    }
}

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        let mut z = self.h;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(w));
        }
    }

    fn write_u8(&mut self, x: u8) {
        self.add(u64::from(x));
    }

    fn write_u16(&mut self, x: u16) {
        self.add(u64::from(x));
    }

    fn write_u32(&mut self, x: u32) {
        self.add(u64::from(x));
    }

    fn write_u64(&mut self, x: u64) {
        self.add(x);
    }

    fn write_usize(&mut self, x: usize) {
        self.add(x as u64);
    }
}
