//! Page-aligned buffers and a bounded pool of them.
//!
//! Data moves between sockets and files in page-aligned buffers: on this machine a
//! kernel-to-user copy into a misaligned buffer costs 3-5x more (design §13), and first
//! touch of fresh memory is slow, so buffers are reused through a pool instead of
//! being allocated per frame.

use std::alloc::{dealloc, Layout};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Alignment of every buffer: one page.
pub const ALIGN: usize = 4096;

/// A heap buffer aligned to [`ALIGN`], with a length that may be below its capacity.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give read access to the bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zero-filled buffer of `cap` bytes (rounded up to a page), with length `cap`.
    pub fn new(cap: usize) -> AlignedBuf {
        let cap = cap.max(1).div_ceil(ALIGN) * ALIGN;
        let layout = Layout::from_size_align(cap, ALIGN).expect("buffer size fits a Layout");
        // SAFETY: layout has non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        AlignedBuf { ptr, cap, len: cap }
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Current length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the length (the bytes keep whatever they held).
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap, "length beyond capacity");
        self.len = len;
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap >= len initialized bytes (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.cap, ALIGN).expect("layout was valid at alloc");
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

struct PoolInner {
    size: usize,
    keep: usize,
    free: Mutex<Vec<AlignedBuf>>,
}

/// A pool of equal-sized aligned buffers; at most `keep` idle buffers are retained.
#[derive(Clone)]
pub struct BufPool {
    inner: Arc<PoolInner>,
}

impl BufPool {
    /// A pool of buffers of `size` bytes, keeping up to `keep` idle ones.
    pub fn new(size: usize, keep: usize) -> BufPool {
        BufPool {
            inner: Arc::new(PoolInner {
                size,
                keep,
                free: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Size of the pooled buffers.
    pub fn buf_size(&self) -> usize {
        self.inner.size
    }

    /// A buffer of length `len`: from the pool when it fits, else a fresh one (not
    /// returned to the pool).
    pub fn get(&self, len: usize) -> PooledBuf {
        let buf = if len <= self.inner.size {
            let reused = self.inner.free.lock().ok().and_then(|mut v| v.pop());
            let mut b = reused.unwrap_or_else(|| AlignedBuf::new(self.inner.size));
            b.set_len(len);
            b
        } else {
            AlignedBuf::new(len)
        };
        PooledBuf {
            buf: Some(buf),
            pool: Some(self.inner.clone()),
        }
    }
}

/// A buffer that goes back to its pool when dropped.
pub struct PooledBuf {
    buf: Option<AlignedBuf>,
    pool: Option<Arc<PoolInner>>,
}

impl PooledBuf {
    /// An empty buffer belonging to no pool.
    pub fn empty() -> PooledBuf {
        PooledBuf {
            buf: None,
            pool: None,
        }
    }

    /// Sets the length (at most the capacity).
    pub fn set_len(&mut self, len: usize) {
        match &mut self.buf {
            Some(b) => b.set_len(len),
            None => assert!(len == 0, "empty buffer has no capacity"),
        }
    }
}

impl std::ops::Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or(&[])
    }
}

impl std::ops::DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.buf {
            Some(b) => b,
            None => &mut [],
        }
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let (Some(buf), Some(pool)) = (self.buf.take(), self.pool.as_ref()) {
            if buf.capacity() == pool.size {
                if let Ok(mut free) = pool.free.lock() {
                    if free.len() < pool.keep {
                        free.push(buf);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_reused() {
        let pool = BufPool::new(1 << 20, 2);
        let a = pool.get(100);
        assert_eq!(a.len(), 100);
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        let p = a.as_ptr();
        drop(a);
        let b = pool.get(5000);
        assert_eq!(b.as_ptr(), p, "buffer reused");
        let big = pool.get(3 << 20);
        assert_eq!(big.len(), 3 << 20);
        assert!(PooledBuf::empty().is_empty());
    }
}
