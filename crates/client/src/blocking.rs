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

/// `SIGPIPE` kept from the calling thread while the library runs on it: a write to a
/// connection that a dead server closed fails with `EPIPE` (the client then waits for
/// the map and retries), but also raises `SIGPIPE` on the writing thread, whose
/// default action ends the program. A Rust program ignores it from the start; a C
/// program, or one the preload library is in, does not. So the signal is blocked on
/// the thread for the call, one raised meanwhile is taken off the thread, and the
/// thread's mask is restored.
pub struct NoPipe {
    old: libc::sigset_t,
    /// A `SIGPIPE` was pending before: it is the program's, and stays.
    was_pending: bool,
}

impl NoPipe {
    /// Blocks `SIGPIPE` on this thread until the guard is dropped.
    pub fn enter() -> NoPipe {
        // SAFETY: sigset_t is plain data; every pointer is to a live local.
        unsafe {
            let mut pipe: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut pipe);
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
            NoPipe {
                old,
                was_pending: pipe_pending(),
            }
        }
    }
}

/// Whether a `SIGPIPE` is pending on this thread (or the process).
fn pipe_pending() -> bool {
    // SAFETY: sigset_t is plain data; the pointer is to a live local.
    unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending);
        libc::sigismember(&pending, libc::SIGPIPE) == 1
    }
}

impl Drop for NoPipe {
    fn drop(&mut self) {
        // SAFETY: as in `enter`; sigtimedwait with a zero timeout does not wait.
        unsafe {
            if !self.was_pending && pipe_pending() {
                let mut pipe: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut pipe);
                libc::sigaddset(&mut pipe, libc::SIGPIPE);
                let zero = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                libc::sigtimedwait(&pipe, std::ptr::null_mut(), &zero);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

/// With `PVFS_METRICS=HOST:PORT` in the environment, serves the Prometheus metrics of
/// the process's first blocking client there (the C and preload libraries'
/// programs), on a thread of its own with a runtime of its own: a runtime driven by
/// its callers runs nothing between their calls. At most one per process; a port
/// that cannot be bound (another process of the same program took it) leaves the
/// program without metrics.
fn serve_metrics_from_env(client: &Client) {
    static STARTED: std::sync::Once = std::sync::Once::new();
    let Some(addr) = std::env::var("PVFS_METRICS").ok().filter(|a| !a.is_empty()) else {
        return;
    };
    let metrics = client.inner.pool.metrics.clone();
    STARTED.call_once(move || {
        let spawned = std::thread::Builder::new()
            .name("pvfs-metrics".into())
            .spawn(move || {
                block_signals();
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::warn!("no metrics: cannot start their runtime: {e}");
                        return;
                    }
                };
                rt.block_on(pvfs_metrics::serve(addr, move || {
                    let text = metrics.render();
                    async move { text }
                }));
            });
        if let Err(e) = spawned {
            tracing::warn!("no metrics: cannot start their thread: {e}");
        }
    });
}

/// Worker threads for the runtime of a library's client (the C library, the Python
/// package): the cores, 1 to 4.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 4)
}

/// The process's umask, read without changing it (`/proc/self/status`, Linux 4.7+);
/// 022 if unknown. Creates carry it and the servers apply it.
pub fn process_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// A library's configuration file: `arg` if given and not empty, else
/// `$PVFS_CONFIG`; `None` when neither names one.
pub fn config_path(arg: Option<&str>) -> Option<std::path::PathBuf> {
    match arg {
        Some(p) if !p.is_empty() => Some(p.into()),
        _ => std::env::var_os("PVFS_CONFIG")
            .filter(|p| !p.is_empty())
            .map(Into::into),
    }
}

/// The message when [`config_path`] finds none.
pub const NO_CONFIG: &str = "no configuration: pass a path or set PVFS_CONFIG";

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
        serve_metrics_from_env(&client);
        Ok(BlockingClient { rt, client })
    }

    /// The async client underneath.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs any async client operation to completion, on the calling thread, with
    /// `SIGPIPE` kept from it ([`NoPipe`]).
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        let _no_pipe = NoPipe::enter();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static PIPES: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn count(_: libc::c_int) {
        PIPES.fetch_add(1, Ordering::SeqCst);
    }

    /// Writes to a socket whose other end is closed: `EPIPE`, and `SIGPIPE` on this
    /// thread unless it is kept away.
    fn write_to_closed() -> i32 {
        // SAFETY: plain syscalls on descriptors made here.
        unsafe {
            let mut fds = [0; 2];
            assert_eq!(
                libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()),
                0
            );
            libc::close(fds[1]);
            let n = libc::write(fds[0], b"x".as_ptr().cast(), 1);
            let errno = *libc::__errno_location();
            libc::close(fds[0]);
            assert_eq!(n, -1);
            errno
        }
    }

    #[test]
    fn a_write_to_a_closed_connection_raises_no_sigpipe_in_a_call() {
        // SAFETY: a handler that only counts, set and restored in this test alone.
        let before = unsafe {
            libc::signal(
                libc::SIGPIPE,
                count as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
        // The negative control: outside a call, the signal arrives.
        assert_eq!(write_to_closed(), libc::EPIPE);
        assert_eq!(PIPES.load(Ordering::SeqCst), 1);
        {
            let _no_pipe = NoPipe::enter();
            assert_eq!(write_to_closed(), libc::EPIPE);
        }
        assert_eq!(
            PIPES.load(Ordering::SeqCst),
            1,
            "a SIGPIPE reached the thread after the call"
        );
        // SAFETY: restores what the test harness had.
        unsafe { libc::signal(libc::SIGPIPE, before) };
    }
}
