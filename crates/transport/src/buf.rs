//! Page-aligned buffers and a bounded pool of them.
//!
//! Data moves between sockets and files in page-aligned buffers: a kernel-to-user copy
//! into a misaligned buffer costs several times more, and first touch of fresh memory
//! is slow (docs/benchmarks.md has the figures), so buffers are reused through a pool
//! instead of being allocated per frame.
//!
//! Buffers are anonymous memory maps: the kernel hands out zero pages lazily, so a
//! 4 MiB buffer that only ever carries 64 KiB writes costs 64 KiB of memory, and a
//! dropped buffer goes straight back to the system. A pool keeps idle buffers for
//! reuse and [`BufPool::trim`] releases the ones no request needed for a whole
//! interval, so a server's memory follows its load instead of its highest peak.
//!
//! Buffers that are always filled whole (the FUSE mount's read-ahead) can ask for
//! transparent huge pages ([`BufPool::with_huge_pages`]): copies into and out of them
//! miss the TLB less, and the kernel pins one 2 MiB page instead of 512 small ones
//! when the FUSE device copies an answer out of them (FUSE reads +15% with 1 and 4
//! readers, `docs/benchmarks.md`). Buffers filled in part (a server's receive
//! buffers) keep small pages, so a 64 KiB write costs 64 KiB.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Alignment of every buffer: one page.
pub const ALIGN: usize = 4096;

/// Size and alignment of a transparent huge page (x86-64 and arm64 with 4 KiB pages).
const HUGE_PAGE: usize = 2 << 20;

/// A page-aligned buffer (an anonymous memory map), with a length that may be below its
/// capacity.
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
    /// Its pages take memory only once they are written.
    pub fn new(cap: usize) -> AlignedBuf {
        AlignedBuf::map(cap, false)
    }

    /// As [`AlignedBuf::new`], but starting on a huge-page boundary and advised to
    /// the kernel for transparent huge pages (when at least one fits; where the
    /// kernel has them off, plain pages). Touching one byte of a huge page takes all
    /// of it: for buffers that are filled whole.
    pub fn new_huge(cap: usize) -> AlignedBuf {
        AlignedBuf::map(cap, true)
    }

    fn map(cap: usize, huge: bool) -> AlignedBuf {
        let cap = cap.max(1).div_ceil(ALIGN) * ALIGN;
        let huge = huge && cap >= HUGE_PAGE;
        // Room to move the start to a huge-page boundary.
        let map_len = if huge { cap + HUGE_PAGE } else { cap };
        // SAFETY: a private anonymous map of non-zero length at an address of the
        // kernel's choice; it aliases nothing.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        let ptr = if raw == libc::MAP_FAILED {
            None
        } else if huge {
            Some(trim_to_huge(raw.cast::<u8>(), map_len, cap))
        } else {
            NonNull::new(raw.cast::<u8>())
        };
        let Some(ptr) = ptr else {
            let layout = Layout::from_size_align(cap, ALIGN).expect("buffer size fits a Layout");
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
        // SAFETY: mapped in `new` with this length; nothing borrows it any more.
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.cap) };
        debug_assert_eq!(rc, 0, "munmap of our own map failed");
    }
}

/// Keeps the `cap` bytes of the fresh map `raw` (of `map_len` bytes, at least `cap`
/// plus one huge page) that start at its first huge-page boundary, unmaps the rest
/// and advises the kept part for huge pages. Returns the kept part's start.
fn trim_to_huge(raw: *mut u8, map_len: usize, cap: usize) -> NonNull<u8> {
    assert!(map_len >= cap + HUGE_PAGE, "no room to align the map");
    let start = raw as usize;
    let head = start.next_multiple_of(HUGE_PAGE) - start;
    let tail = map_len - head - cap;
    // SAFETY: both ranges lie in the map just made, outside the kept part, which no
    // one references yet; the kept part is what madvise is told about.
    unsafe {
        let kept = raw.add(head);
        if head > 0 {
            libc::munmap(raw.cast(), head);
        }
        if tail > 0 {
            libc::munmap(kept.add(cap).cast(), tail);
        }
        // Advice only: without transparent huge pages the buffer keeps small ones.
        libc::madvise(kept.cast(), cap, libc::MADV_HUGEPAGE);
        NonNull::new(kept).expect("a map does not start at address zero")
    }
}

struct PoolInner {
    size: usize,
    huge: bool,
    keep: usize,
    free: Mutex<FreeList>,
}

/// Idle buffers, and the fewest there were since the last trim.
#[derive(Default)]
struct FreeList {
    bufs: Vec<AlignedBuf>,
    low: usize,
}

/// A pool of equal-sized aligned buffers; at most `keep` idle buffers are retained.
#[derive(Clone)]
pub struct BufPool {
    inner: Arc<PoolInner>,
}

impl BufPool {
    /// A pool of buffers of `size` bytes, keeping up to `keep` idle ones.
    pub fn new(size: usize, keep: usize) -> BufPool {
        BufPool::make(size, keep, false)
    }

    /// As [`BufPool::new`], with its buffers in transparent huge pages
    /// ([`AlignedBuf::new_huge`]): for buffers that are filled whole.
    pub fn with_huge_pages(size: usize, keep: usize) -> BufPool {
        BufPool::make(size, keep, true)
    }

    fn make(size: usize, keep: usize, huge: bool) -> BufPool {
        BufPool {
            inner: Arc::new(PoolInner {
                size,
                huge,
                keep,
                free: Mutex::new(FreeList::default()),
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
            let reused = self.inner.free.lock().ok().and_then(|mut f| {
                let b = f.bufs.pop();
                f.low = f.low.min(f.bufs.len());
                b
            });
            let mut b = reused.unwrap_or_else(|| self.fresh(self.inner.size));
            b.set_len(len);
            b
        } else {
            self.fresh(len)
        };
        PooledBuf {
            buf: Some(buf),
            pool: Some(self.inner.clone()),
        }
    }

    fn fresh(&self, cap: usize) -> AlignedBuf {
        if self.inner.huge {
            AlignedBuf::new_huge(cap)
        } else {
            AlignedBuf::new(cap)
        }
    }

    /// Releases the idle buffers that stayed idle since the previous call (no request
    /// needed them), and returns how many. Called periodically, it lets memory taken
    /// by a burst go back to the system while a steady load keeps its buffers.
    pub fn trim(&self) -> usize {
        let released = match self.inner.free.lock() {
            Ok(mut f) => {
                let n = f.low.min(f.bufs.len());
                let keep = f.bufs.len() - n;
                let gone = f.bufs.split_off(keep);
                f.low = f.bufs.len();
                gone
            }
            Err(_) => Vec::new(),
        };
        // Unmapped outside the lock.
        released.len()
    }

    /// Idle buffers held right now.
    pub fn idle(&self) -> usize {
        self.inner.free.lock().map(|f| f.bufs.len()).unwrap_or(0)
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
                    if free.bufs.len() < pool.keep {
                        free.bufs.push(buf);
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
        assert!(big.iter().all(|&b| b == 0), "fresh buffers read as zeros");
        assert!(PooledBuf::empty().is_empty());
    }

    #[test]
    fn huge_page_buffers_start_on_a_huge_page_and_work_whole() {
        let size = (4 << 20) + ALIGN;
        let pool = BufPool::with_huge_pages(size, 2);
        let mut a = pool.get(size);
        assert_eq!(a.as_ptr() as usize % HUGE_PAGE, 0);
        assert!(a.iter().all(|&b| b == 0), "fresh buffers read as zeros");
        a.fill(0xa5);
        assert!(a.iter().all(|&b| b == 0xa5));
        let p = a.as_ptr();
        drop(a);
        let b = pool.get(100);
        assert_eq!(b.as_ptr(), p, "buffer reused");
        let big = pool.get(10 << 20);
        assert_eq!(big.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(big.len(), 10 << 20);
        // Below one huge page: a plain page-aligned buffer.
        let small = AlignedBuf::new_huge(100 << 10);
        assert_eq!(small.as_ptr() as usize % ALIGN, 0);
        assert_eq!(small.capacity(), 100 << 10);
    }

    #[test]
    fn trim_releases_only_what_stayed_idle() {
        let pool = BufPool::new(1 << 16, 8);
        let held: Vec<_> = (0..4).map(|_| pool.get(10)).collect();
        drop(held);
        assert_eq!(pool.idle(), 4);
        // Never trimmed before: the low mark starts at zero, nothing is released.
        assert_eq!(pool.trim(), 0);
        // Two of the four are used during the interval: two stayed idle throughout.
        let busy: Vec<_> = (0..2).map(|_| pool.get(10)).collect();
        drop(busy);
        assert_eq!(pool.trim(), 2);
        assert_eq!(pool.idle(), 2);
        // An interval without any use releases the rest.
        assert_eq!(pool.trim(), 2);
        assert_eq!(pool.idle(), 0);
        // The pool still hands out buffers afterwards.
        assert_eq!(pool.get(10).len(), 10);
    }
}
