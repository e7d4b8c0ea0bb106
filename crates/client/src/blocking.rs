//! A blocking face of the client for callers without an async runtime (C library,
//! FUSE threads, simple tools). It owns a small tokio runtime; do not call it from
//! inside another tokio runtime.

use std::future::Future;
use std::sync::Arc;

use pvfs_config::Config;
use pvfs_proto::{Attr, DirEntry, LayoutSpec, Regions, SetAttr};

use crate::error::Result;
use crate::{Client, File, FsStat};

/// Blocks every signal on a thread of the library's own (runtime workers, blocking
/// pool): the program's signals go to the program's threads, where a wait for a
/// lock can see them (`locks::SignalWatch`) and handlers run where programs expect.
pub(crate) fn block_signals() {
    // SAFETY: sigset_t is plain data; pthread_sigmask gets valid pointers.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// A [`Client`] whose methods block.
#[derive(Clone)]
pub struct BlockingClient {
    rt: Arc<tokio::runtime::Runtime>,
    client: Client,
}

impl BlockingClient {
    /// Starts a runtime and a client on it: with `threads` worker threads, or, for 0,
    /// a runtime driven by the threads that call (each call runs the network I/O on
    /// the calling thread: no hand-off to a worker and back for every request, which
    /// made one-at-a-time creates 60% faster through the preload library; calls from
    /// several threads then take turns driving it).
    pub fn new(config: Config, threads: usize) -> std::io::Result<BlockingClient> {
        let rt = if threads == 0 {
            tokio::runtime::Builder::new_current_thread()
                .on_thread_start(block_signals)
                .enable_all()
                .build()?
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("pvfs-client")
                .on_thread_start(block_signals)
                .enable_all()
                .build()?
        };
        let client = {
            let _guard = rt.enter();
            Client::new(config)
        };
        let rt = Arc::new(rt);
        // A runtime driven by its callers runs nothing by itself: lock leases are
        // renewed by a thread that drives it for each renewal.
        client.inner.locks.set_runner(Arc::downgrade(&rt));
        Ok(BlockingClient { rt, client })
    }

    /// The async client underneath.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs any async client operation to completion.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// See [`Client::stat`].
    pub fn stat(&self, path: &str) -> Result<Attr> {
        self.block_on(self.client.stat(path))
    }

    /// See [`Client::mkdir`].
    pub fn mkdir(&self, path: &str, mode: u32) -> Result<Attr> {
        self.block_on(self.client.mkdir(path, mode))
    }

    /// See [`Client::readdir`].
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        self.block_on(self.client.readdir(path))
    }

    /// See [`Client::unlink`].
    pub fn unlink(&self, path: &str) -> Result<()> {
        self.block_on(self.client.unlink(path))
    }

    /// See [`Client::rmdir`].
    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.block_on(self.client.rmdir(path))
    }

    /// See [`Client::rename`].
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.block_on(self.client.rename(from, to))
    }

    /// See [`Client::setattr`].
    pub fn setattr(&self, path: &str, set: SetAttr) -> Result<Attr> {
        self.block_on(self.client.setattr(path, set))
    }

    /// See [`Client::statfs`].
    pub fn statfs(&self) -> FsStat {
        self.block_on(self.client.statfs())
    }

    /// See [`Client::create`].
    pub fn create(
        &self,
        path: &str,
        mode: u32,
        layout: LayoutSpec,
        exclusive: bool,
    ) -> Result<BlockingFile> {
        let file = self.block_on(self.client.create(path, mode, layout, exclusive))?;
        Ok(self.wrap(file))
    }

    /// See [`Client::open`].
    pub fn open(&self, path: &str) -> Result<BlockingFile> {
        let file = self.block_on(self.client.open(path))?;
        Ok(self.wrap(file))
    }

    fn wrap(&self, file: File) -> BlockingFile {
        BlockingFile {
            rt: self.rt.clone(),
            file,
        }
    }
}

/// A [`File`] whose methods block.
#[derive(Clone)]
pub struct BlockingFile {
    rt: Arc<tokio::runtime::Runtime>,
    file: File,
}

impl BlockingFile {
    /// The async file underneath.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// See [`File::read_at`].
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.rt.block_on(self.file.read_at(offset, buf))
    }

    /// See [`File::write_at`].
    pub fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        self.rt.block_on(self.file.write_at(offset, buf))
    }

    /// See [`File::read_regions`].
    pub fn read_regions(&self, regions: &Regions, buf: &mut [u8]) -> Result<u64> {
        self.rt.block_on(self.file.read_regions(regions, buf))
    }

    /// See [`File::write_regions`].
    pub fn write_regions(&self, regions: &Regions, buf: &[u8]) -> Result<u64> {
        self.rt.block_on(self.file.write_regions(regions, buf))
    }

    /// See [`File::size`].
    pub fn size(&self) -> Result<u64> {
        self.rt.block_on(self.file.size())
    }

    /// See [`File::fsync`].
    pub fn fsync(&self) -> Result<()> {
        self.rt.block_on(self.file.fsync())
    }

    /// See [`File::truncate`].
    pub fn truncate(&self, size: u64) -> Result<()> {
        self.rt.block_on(self.file.truncate(size))
    }
}
