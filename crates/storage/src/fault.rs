//! [`FaultyData`]: a [`DataBackend`] wrapper that injects failures, for tests.
//!
//! It can fail writes with a chosen errno once a byte budget is spent (a disk filling
//! up: the write that crosses the budget lands partially, then fails), or fail every
//! call with EIO (a dead disk). Both are switched at run time through atomics.

use crate::data::{DataBackend, FsSpace};
use crate::error::StorageError;
use pvfs_proto::message::DatafileStat;
use pvfs_proto::{Errno, Handle};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Wraps a backend and fails its calls on demand.
pub struct FaultyData<B: DataBackend> {
    inner: B,
    fail_all: AtomicBool,
    /// Bytes writes may still store; `u64::MAX` means unlimited.
    write_budget: AtomicU64,
    write_errno: AtomicU32,
}

fn os_err(e: Errno) -> StorageError {
    std::io::Error::from_raw_os_error(e.code()).into()
}

impl<B: DataBackend> FaultyData<B> {
    /// Wraps `inner`, injecting nothing yet.
    pub fn new(inner: B) -> FaultyData<B> {
        FaultyData {
            inner,
            fail_all: AtomicBool::new(false),
            write_budget: AtomicU64::new(u64::MAX),
            write_errno: AtomicU32::new(Errno::ENOSPC.0),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Lets writes store `bytes` more bytes, then fails them with `errno`.
    pub fn fail_writes_after(&self, bytes: u64, errno: Errno) {
        self.write_errno.store(errno.0, Ordering::SeqCst);
        self.write_budget.store(bytes, Ordering::SeqCst);
    }

    /// Fails every call with EIO while `on`.
    pub fn fail_all(&self, on: bool) {
        self.fail_all.store(on, Ordering::SeqCst);
    }

    /// Stops injecting any fault.
    pub fn heal(&self) {
        self.fail_all(false);
        self.write_budget.store(u64::MAX, Ordering::SeqCst);
    }

    fn check(&self) -> Result<(), StorageError> {
        if self.fail_all.load(Ordering::SeqCst) {
            return Err(os_err(Errno::EIO));
        }
        Ok(())
    }
}

impl<B: DataBackend> DataBackend for FaultyData<B> {
    fn write_at(&self, h: Handle, off: u64, data: &[u8]) -> Result<(), StorageError> {
        self.check()?;
        let len = data.len() as u64;
        let before = self
            .write_budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                (b != u64::MAX).then(|| b.saturating_sub(len))
            });
        match before {
            Ok(left) if left < len => {
                // Store what fits, as a filling disk does, then fail.
                let fits = left as usize;
                self.inner.write_at(h, off, &data[..fits])?;
                Err(os_err(Errno(self.write_errno.load(Ordering::SeqCst))))
            }
            _ => self.inner.write_at(h, off, data),
        }
    }

    fn read_at(&self, h: Handle, off: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        self.check()?;
        self.inner.read_at(h, off, buf)
    }

    fn stat(&self, h: Handle) -> Result<DatafileStat, StorageError> {
        self.check()?;
        self.inner.stat(h)
    }

    fn truncate(&self, h: Handle, size: u64) -> Result<(), StorageError> {
        self.check()?;
        self.inner.truncate(h, size)
    }

    fn fallocate(&self, h: Handle, mode: u32, off: u64, len: u64) -> Result<(), StorageError> {
        self.check()?;
        self.inner.fallocate(h, mode, off, len)
    }

    fn remove(&self, h: Handle) -> Result<(), StorageError> {
        self.check()?;
        self.inner.remove(h)
    }

    fn sync(&self, h: Handle) -> Result<(), StorageError> {
        self.check()?;
        self.inner.sync(h)
    }

    fn sync_all(&self) -> Result<(), StorageError> {
        self.check()?;
        self.inner.sync_all()
    }

    fn count(&self) -> Result<u64, StorageError> {
        self.check()?;
        self.inner.count()
    }

    fn list(&self) -> Result<Vec<Handle>, StorageError> {
        self.check()?;
        self.inner.list()
    }

    fn lost(&self) -> Result<Vec<Handle>, StorageError> {
        self.check()?;
        self.inner.lost()
    }

    fn statfs(&self) -> Result<FsSpace, StorageError> {
        self.check()?;
        self.inner.statfs()
    }

    fn verifier(&self) -> u64 {
        self.inner.verifier()
    }

    fn check_runs(&self, h: Handle, runs: &[(u64, u64)]) -> Result<(), StorageError> {
        self.check()?;
        self.inner.check_runs(h, runs)
    }

    fn resum(&self, h: Handle, off: u64) -> Result<(), StorageError> {
        self.check()?;
        self.inner.resum(h, off)
    }

    fn sums_unsure(&self) -> bool {
        self.inner.sums_unsure()
    }

    fn trust_sums(&self) -> Result<(), StorageError> {
        self.check()?;
        self.inner.trust_sums()
    }

    fn create_all(&self, hs: &[Handle]) -> Result<(), StorageError> {
        self.check()?;
        self.inner.create_all(hs)
    }
}
