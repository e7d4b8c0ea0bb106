//! Directories: listings step by step (with attributes for readdirplus), whether
//! the kernel may keep a listing, and fsync of a directory.

use std::sync::Arc;
use std::time::Duration;

use fuser::{Errno, FileAttr, FileType, FopenFlags, INodeNo};
use pvfs_client::ObjKind;
use pvfs_proto::Handle;

use crate::attr::{self, ino_of, placeholder};
use crate::errors::{errno, OpResult};
use crate::inner::Inner;

/// Directory entries whose attributes one readdirplus step fetches at once.
const ATTR_CHUNK: usize = 2048;

/// Most entries one plain readdir step prepares (the kernel takes what fits).
const NAMES_PER_STEP: usize = 4096;

/// One entry of a directory listing step.
pub(crate) struct DirItem {
    /// The entry's inode.
    pub ino: INodeNo,
    /// Offset of the entry after this one.
    pub next: u64,
    /// What the entry is.
    pub kind: FileType,
    /// The entry's name.
    pub name: String,
    /// For readdirplus: attributes and how long the kernel may keep them.
    pub attr: Option<(FileAttr, Duration)>,
}

impl Inner {
    /// One step of a directory listing from `offset` (0: start, re-reading the
    /// directory; 1 and 2 are "." and ".."). With `plus`, entries carry attributes.
    pub(crate) async fn readdir(&self, fh: u64, offset: u64, plus: bool) -> OpResult<Vec<DirItem>> {
        let stream = self.tables.dir(fh).ok_or(Errno::EBADF)?;
        let mut st = stream.lock().await;
        let entries = match (&st.entries, offset) {
            (Some(e), o) if o > 0 => e.clone(),
            _ => {
                // A directory whose every entry this mount knows (it made it, and
                // every change in it since was its own) is listed without a server.
                let known = match self.coherent() {
                    true => self.tables.known_entries(st.handle),
                    false => None,
                };
                let list = match known {
                    Some(list) => list,
                    None => {
                        let list = self.client.readdir_at(st.handle).await.map_err(errno)?;
                        for e in &list {
                            self.tables.note_name(st.handle, &e.name, e.handle, e.kind);
                        }
                        list
                    }
                };
                let list = Arc::new(list);
                st.entries = Some(list.clone());
                st.attrs = None;
                list
            }
        };
        let dir = st.handle;
        let dir_ino = ino_of(self.root, dir);
        let parent_ino = self
            .tables
            .dir_attr(dir, Duration::MAX)
            .and_then(|a| match a.detail {
                pvfs_proto::ObjDetail::Dir { parent, .. } => Some(ino_of(self.root, parent)),
                _ => None,
            })
            .unwrap_or(dir_ino);
        let mut out = Vec::new();
        let mut k = offset;
        let dot = |name: &str, ino: INodeNo, next: u64| DirItem {
            ino,
            next,
            kind: FileType::Directory,
            name: name.to_string(),
            attr: plus.then(|| {
                let mut a = placeholder(
                    self.root,
                    &pvfs_client::DirEntry {
                        name: String::new(),
                        handle: dir,
                        kind: ObjKind::Dir,
                    },
                );
                a.ino = ino;
                (a, Duration::ZERO)
            }),
        };
        if k == 0 {
            out.push(dot(".", dir_ino, 1));
            k = 1;
        }
        if k == 1 {
            out.push(dot("..", parent_ino, 2));
            k = 2;
        }
        let start = usize::try_from(k - 2).unwrap_or(usize::MAX);
        if start >= entries.len() {
            return Ok(out);
        }
        if !plus {
            let end = entries.len().min(start + NAMES_PER_STEP);
            for (i, e) in entries[start..end].iter().enumerate() {
                out.push(DirItem {
                    ino: ino_of(self.root, e.handle),
                    next: (start + i) as u64 + 3,
                    kind: attr::file_type(e.kind),
                    name: e.name.clone(),
                    attr: None,
                });
            }
            return Ok(out);
        }
        let ttl = self.attr_ttl().min(self.entry_ttl());
        let mut start = start;
        let dots = out.len();
        // Attributes come a run of entries at a time; runs whose entries all
        // vanished meanwhile are skipped so an empty step still means the end.
        while out.len() == dots && start < entries.len() {
            let have =
                matches!(&st.attrs, Some((first, v)) if *first <= start && start < first + v.len());
            if !have {
                let end = entries.len().min(start + ATTR_CHUNK);
                st.attrs = Some((start, self.entry_fattrs(&entries[start..end]).await));
            }
            let Some((first, attrs)) = &st.attrs else {
                break;
            };
            for (j, r) in attrs.iter().enumerate().skip(start - first) {
                let i = first + j;
                let Some(e) = entries.get(i) else { break };
                let attr = match r {
                    Ok(fa) => (*fa, ttl),
                    // Removed since the listing was read: leave it out.
                    Err(err) if err.errno == pvfs_client::Errno::ENOENT => continue,
                    // Its server is down: list the name, let a stat find the error.
                    Err(_) => (placeholder(self.root, e), Duration::ZERO),
                };
                out.push(DirItem {
                    ino: ino_of(self.root, e.handle),
                    next: i as u64 + 3,
                    kind: attr::file_type(e.kind),
                    name: e.name.clone(),
                    attr: Some(attr),
                });
            }
            start = first + attrs.len();
        }
        Ok(out)
    }

    /// Attributes of a run of a listing's entries, as the kernel takes them: those
    /// this mount holds current ([`Inner::getattr_now`]'s sources) from memory, the
    /// others from their servers in one batch (kept for the lookups and stats that
    /// follow a listing).
    async fn entry_fattrs(
        &self,
        entries: &[pvfs_client::DirEntry],
    ) -> Vec<pvfs_client::Result<FileAttr>> {
        let handles: Vec<Handle> = entries.iter().map(|e| e.handle).collect();
        let held =
            self.tables
                .held_fattrs(self.root, &handles, self.attr_ttl(), self.file_attrs_held());
        let missing: Vec<pvfs_client::DirEntry> = entries
            .iter()
            .zip(&held)
            .filter(|(_, h)| h.is_none())
            .map(|(e, _)| e.clone())
            .collect();
        let fetched = if missing.is_empty() {
            Vec::new()
        } else {
            self.client.entry_attrs(missing, true).await
        };
        for a in fetched.iter().filter_map(|(_, r)| r.as_ref().ok()) {
            self.tables.note(a);
        }
        let mut fetched = fetched.into_iter().map(|(_, r)| r.map(|a| self.fattr(&a)));
        held.into_iter()
            .map(|h| match h {
                Some(fa) => Ok(fa),
                None => fetched.next().unwrap_or_else(|| {
                    Err(pvfs_client::Error::new(
                        pvfs_client::Errno::EIO,
                        "an entry's attributes did not come",
                    ))
                }),
            })
            .collect()
    }

    /// How the kernel may keep a listing of directory `dir` opened now. Only a
    /// directory this mount knows completely (it made it, and every change in it
    /// since was its own), while the change feeds run, is kept (`FOPEN_CACHE_DIR`,
    /// across opens): the kernel made a name for each of its entries as this mount
    /// created them, so a kept listing, which carries no attributes, sends no
    /// lookups after it; the kernel drops it at its own changes of the directory,
    /// and the feeds at another client's. Any other listing is read afresh, with
    /// the attributes, so an `ls -l` after an `ls` of a directory made elsewhere
    /// does not look every name up alone (docs/fuse.md, "Caching").
    pub(crate) fn dir_open_flags(&self, dir: Handle) -> FopenFlags {
        if self.coherent() && self.tables.knows_entries(dir) {
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    /// fsync of a directory: every metadata change acknowledged so far made stable.
    pub(crate) async fn fsyncdir(&self) -> OpResult<()> {
        self.client.sync_metadata().await.map_err(errno)
    }
}
