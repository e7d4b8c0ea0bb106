//! The client of one process generation ([`Proc`]): one [`BlockingClient`] (a small
//! tokio runtime and the connections) shared by every thread, with the process's
//! credentials. `globals.rs` holds the current generation's client, made on first
//! use, and says what happens to it at `fork`.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};

use pvfs_client::blocking::BlockingClient;
use pvfs_client::Attr;

use crate::client_error::client_errno;
use crate::hook::R;
use crate::settings::{warn, Settings};

/// The client of one process generation.
pub(crate) struct Proc {
    /// The generation this client belongs to.
    pub(crate) gen: u64,
    /// The client and its runtime.
    pub(crate) client: BlockingClient,
    /// Effective uid and gid and supplementary groups (for open's permission check).
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

/// The client of generation `gen`, for the file system of settings `s`. Fails with
/// EIO (and one line on stderr) if the configuration cannot be loaded.
pub(crate) fn make(gen: u64, s: &Settings) -> R<Proc> {
    static WARNED: AtomicU32 = AtomicU32::new(0);
    let Some(path) = s.config.as_ref() else {
        return Err(libc::ENOSYS);
    };
    let config = match pvfs_config::Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            if WARNED.swap(1, Ordering::Relaxed) == 0 {
                warn(&format!("cannot load PVFS_CONFIG {}: {e}", path.display()));
            }
            return Err(libc::EIO);
        }
    };
    let threads = std::env::var("PVFS_PRELOAD_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0)
        .min(64);
    let client = BlockingClient::new(config, threads).map_err(|e| {
        warn(&format!("cannot start the pvfs client runtime: {e}"));
        libc::EIO
    })?;
    let creds = client.client().creds().clone();
    Ok(Proc {
        gen,
        uid: creds.uid,
        gid: creds.gid,
        groups: groups(),
        client,
    })
}

/// The calling process's supplementary groups.
fn groups() -> Vec<u32> {
    // SAFETY: getgroups(0, NULL) only returns the count.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut v = vec![0 as libc::gid_t; n as usize];
    // SAFETY: v has room for n entries.
    let got = unsafe { libc::getgroups(n, v.as_mut_ptr()) };
    v.truncate(got.max(0) as usize);
    v
}

impl Proc {
    /// Runs a client future to completion on this process's runtime. From a thread
    /// that is itself inside a tokio runtime (a tokio program doing blocking file I/O)
    /// the future runs on a helper thread, since a runtime cannot be entered twice.
    pub(crate) fn run<F: Future + Send>(&self, f: F) -> F::Output
    where
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.client.block_on(f);
        }
        std::thread::scope(|s| {
            let h = s.spawn(|| self.client.block_on(f));
            match h.join() {
                Ok(v) => v,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }

    /// Runs a client call and maps its error to an errno.
    pub(crate) fn call<T: Send, F>(&self, f: F) -> R<T>
    where
        F: Future<Output = pvfs_client::Result<T>> + Send,
    {
        self.run(f).map_err(client_errno)
    }

    /// The async client.
    pub(crate) fn client(&self) -> &pvfs_client::Client {
        self.client.client()
    }

    /// Whether the caller may access `attr` for `want` (a mask of `R_OK`, `W_OK`,
    /// `X_OK`), by the shared POSIX rules (`pvfs_proto::access`).
    pub(crate) fn may(&self, attr: &Attr, want: u32) -> bool {
        let creds = pvfs_proto::Creds {
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
        };
        pvfs_proto::access::allows(attr, &creds, want)
    }
}
