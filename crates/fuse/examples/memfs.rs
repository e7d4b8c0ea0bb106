//! A trivial in-memory FUSE file system: the ceiling any FUSE client can reach on a
//! machine, measured next to the pvfs mount (`docs/benchmarks.md`). It asks the
//! kernel for what the pvfs mount asks (threads with `clone_fd`, 4 MiB requests,
//! big writes, asynchronous direct I/O) and answers every request at once from
//! memory: no network, no disk. File data lives in 1 MiB chunks under a lock per
//! file (a growing file is never copied, readers and writers of different files do
//! not wait for each other); names and attributes in one table under one lock.
//!
//! ```text
//! cargo run --release -p pvfs-fuse --example memfs -- MOUNTPOINT [THREADS] [--direct-io]
//! ```
//! `--direct-io` opens every file without the page cache, as the pvfs mount opens
//! files being written and large files being read. Serves until unmounted, or until
//! SIGINT or SIGTERM, which unmount it.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

const TTL: Duration = Duration::from_secs(1);
/// Largest request the kernel is asked for, as the pvfs mount's default.
const MAX_REQUEST: u32 = 4 << 20;
/// Size of a file's data chunks.
const CHUNK: usize = 1 << 20;

struct Node {
    attr: FileAttr,
    data: Arc<Mutex<Data>>,
    children: BTreeMap<OsString, u64>,
}

/// A file's bytes: 1 MiB chunks, absent ones reading as zeros.
#[derive(Default)]
struct Data {
    chunks: Vec<Option<Box<[u8]>>>,
    len: usize,
}

impl Data {
    /// Writes `buf` at `offset`; returns the new length.
    fn write(&mut self, offset: usize, buf: &[u8]) -> usize {
        let end = offset + buf.len();
        if self.chunks.len() < end.div_ceil(CHUNK) {
            self.chunks.resize_with(end.div_ceil(CHUNK), || None);
        }
        let mut at = offset;
        while at < end {
            let (i, o) = (at / CHUNK, at % CHUNK);
            let n = (CHUNK - o).min(end - at);
            // calloc: pages cost memory once written.
            let chunk = self.chunks[i].get_or_insert_with(|| vec![0; CHUNK].into_boxed_slice());
            chunk[o..o + n].copy_from_slice(&buf[at - offset..at - offset + n]);
            at += n;
        }
        self.len = self.len.max(end);
        self.len
    }

    /// Hands `f` the bytes of `offset..offset + size` (cut at the end of the file):
    /// a slice of one chunk when they lie in one, else a copy.
    fn read<T>(&self, offset: usize, size: usize, f: impl FnOnce(&[u8]) -> T) -> T {
        let start = offset.min(self.len);
        let end = (offset + size).min(self.len);
        let (i, o) = (start / CHUNK, start % CHUNK);
        if end - start <= CHUNK - o {
            if let Some(Some(c)) = self.chunks.get(i) {
                return f(&c[o..o + (end - start)]);
            }
        }
        let mut out = vec![0; end - start];
        let mut at = start;
        while at < end {
            let (i, o) = (at / CHUNK, at % CHUNK);
            let n = (CHUNK - o).min(end - at);
            if let Some(Some(c)) = self.chunks.get(i) {
                out[at - start..at - start + n].copy_from_slice(&c[o..o + n]);
            }
            at += n;
        }
        f(&out)
    }

    /// Cuts or extends the file to `len` bytes (new bytes read as zeros).
    fn truncate(&mut self, len: usize) {
        self.chunks.truncate(len.div_ceil(CHUNK));
        if !len.is_multiple_of(CHUNK) {
            if let Some(Some(c)) = self.chunks.get_mut(len / CHUNK) {
                c[len % CHUNK..].fill(0);
            }
        }
        self.len = len;
    }
}

struct State {
    nodes: HashMap<u64, Node>,
    next: u64,
}

struct MemFs {
    state: Mutex<State>,
    /// How files are opened: `FOPEN_DIRECT_IO` (no page cache) with `--direct-io`.
    open_flags: FopenFlags,
}

fn new_attr(ino: u64, kind: FileType, perm: u16, req: &Request) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: req.uid(),
        gid: req.gid(),
        rdev: 0,
        blksize: 1 << 20,
        flags: 0,
    }
}

impl MemFs {
    fn add(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: FileType,
        mode: u32,
    ) -> Result<FileAttr, Errno> {
        let mut st = self.state.lock().unwrap();
        if st
            .nodes
            .get(&parent.0)
            .is_none_or(|p| p.children.contains_key(name))
        {
            return Err(Errno::EEXIST);
        }
        let ino = st.next;
        st.next += 1;
        let attr = new_attr(ino, kind, (mode & 0o7777) as u16, req);
        st.nodes.insert(
            ino,
            Node {
                attr,
                data: Arc::default(),
                children: BTreeMap::new(),
            },
        );
        if let Some(p) = st.nodes.get_mut(&parent.0) {
            p.children.insert(name.to_owned(), ino);
        }
        Ok(attr)
    }

    /// The data of file `ino`, to use without the table's lock.
    fn data(&self, ino: INodeNo) -> Option<Arc<Mutex<Data>>> {
        let st = self.state.lock().unwrap();
        st.nodes.get(&ino.0).map(|n| n.data.clone())
    }

    fn remove(&self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let mut st = self.state.lock().unwrap();
        let ino = *st
            .nodes
            .get(&parent.0)
            .and_then(|p| p.children.get(name))
            .ok_or(Errno::ENOENT)?;
        let node = st.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        match (dir, node.attr.kind == FileType::Directory) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            (true, true) if !node.children.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        st.nodes.remove(&ino);
        if let Some(p) = st.nodes.get_mut(&parent.0) {
            p.children.remove(name);
        }
        Ok(())
    }
}

impl Filesystem for MemFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let caps = config.capabilities()
            & (InitFlags::FUSE_PARALLEL_DIROPS
                | InitFlags::FUSE_ATOMIC_O_TRUNC
                | InitFlags::FUSE_ASYNC_READ
                | InitFlags::FUSE_ASYNC_DIO
                | InitFlags::FUSE_MAX_PAGES
                | InitFlags::FUSE_BIG_WRITES);
        let _ = config.add_capabilities(caps);
        if let Err(limit) = config.set_max_write(MAX_REQUEST) {
            let _ = config.set_max_write(limit);
        }
        if let Err(limit) = config.set_max_readahead(MAX_REQUEST) {
            let _ = config.set_max_readahead(limit);
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let st = self.state.lock().unwrap();
        match st
            .nodes
            .get(&parent.0)
            .and_then(|p| p.children.get(name))
            .and_then(|i| st.nodes.get(i))
        {
            Some(n) => reply.entry(&TTL, &n.attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.state.lock().unwrap().nodes.get(&ino.0) {
            Some(n) => reply.attr(&TTL, &n.attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.state.lock().unwrap();
        let Some(n) = st.nodes.get_mut(&ino.0) else {
            reply.error(Errno::ENOENT);
            return;
        };
        let t = |t: TimeOrNow| match t {
            TimeOrNow::Now => SystemTime::now(),
            TimeOrNow::SpecificTime(s) => s,
        };
        if let Some(m) = mode {
            n.attr.perm = (m & 0o7777) as u16;
        }
        if let Some(u) = uid {
            n.attr.uid = u;
        }
        if let Some(g) = gid {
            n.attr.gid = g;
        }
        if let Some(s) = size {
            n.data.lock().unwrap().truncate(s as usize);
            n.attr.size = s;
            n.attr.blocks = s.div_ceil(512);
        }
        if let Some(a) = atime {
            n.attr.atime = t(a);
        }
        if let Some(m) = mtime {
            n.attr.mtime = t(m);
        }
        reply.attr(&TTL, &n.attr);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        match self.add(req, parent, name, FileType::Directory, mode) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), self.open_flags);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(data) = self.data(ino) else {
            reply.error(Errno::ENOENT);
            return;
        };
        let data = data.lock().unwrap();
        data.read(offset as usize, size as usize, |b| reply.data(b));
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _wf: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let Some(file) = self.data(ino) else {
            reply.error(Errno::ENOENT);
            return;
        };
        let len = file.lock().unwrap().write(offset as usize, data) as u64;
        if let Some(n) = self.state.lock().unwrap().nodes.get_mut(&ino.0) {
            n.attr.size = n.attr.size.max(len);
            n.attr.blocks = n.attr.size.div_ceil(512);
            n.attr.mtime = SystemTime::now();
        }
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let st = self.state.lock().unwrap();
        let Some(n) = st.nodes.get(&ino.0) else {
            reply.error(Errno::ENOENT);
            return;
        };
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".")),
            (ino.0, FileType::Directory, OsStr::new("..")),
        ];
        let entries = dots.into_iter().chain(n.children.iter().map(|(name, &i)| {
            let kind = st
                .nodes
                .get(&i)
                .map_or(FileType::RegularFile, |c| c.attr.kind);
            (i, kind, name.as_os_str())
        }));
        for (k, (i, kind, name)) in entries.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(i), k as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 30, 1 << 29, 1 << 29, 1 << 20, 1 << 19, 4096, 255, 4096);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.add(req, parent, name, FileType::RegularFile, mode) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), self.open_flags),
            Err(e) => reply.error(e),
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(mountpoint) = args.next() else {
        eprintln!("usage: memfs MOUNTPOINT [THREADS] [--direct-io]");
        std::process::exit(2);
    };
    let threads: usize = args.next().and_then(|t| t.parse().ok()).unwrap_or(4);
    let open_flags = if args.next().as_deref() == Some("--direct-io") {
        FopenFlags::FOPEN_DIRECT_IO
    } else {
        FopenFlags::empty()
    };
    let req_root = FileAttr {
        ino: INodeNo::ROOT,
        size: 4096,
        blocks: 8,
        atime: SystemTime::now(),
        mtime: SystemTime::now(),
        ctime: SystemTime::now(),
        crtime: SystemTime::now(),
        kind: FileType::Directory,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    };
    let mut nodes = HashMap::new();
    nodes.insert(
        1,
        Node {
            attr: req_root,
            data: Arc::default(),
            children: BTreeMap::new(),
        },
    );
    let fs = MemFs {
        state: Mutex::new(State { nodes, next: 2 }),
        open_flags,
    };
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![MountOption::FSName("memfs".into()), MountOption::RW];
    cfg.n_threads = Some(threads);
    cfg.clone_fd = threads > 1;
    let session = fuser::Session::new(fs, &mountpoint, &cfg).expect("mount");
    // The session ends when someone unmounts; a signal unmounts first.
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
    let thread = std::thread::spawn(move || {
        let result = session.run();
        let _ = ended_tx.send(());
        result
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let unmounted = rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).unwrap();
        tokio::select! {
            _ = term.recv() => false,
            _ = tokio::signal::ctrl_c() => false,
            _ = ended_rx => true,
        }
    });
    if !unmounted {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&mountpoint)
            .status();
    }
    let _ = thread.join();
}
