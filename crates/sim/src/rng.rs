//! The simulation's one source of randomness: a seeded generator (SplitMix64), so a
//! run is a function of its seed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A seeded random number generator, shared by everything of one run (cheap clones
/// share the state). Everything of a run happens on one thread, in an order the
/// seed decides, so the numbers each part draws are too.
#[derive(Clone, Debug)]
pub struct Rng(Arc<AtomicU64>);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(Arc::new(AtomicU64::new(seed)))
    }

    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        let s = self
            .0
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..hi` (`lo` when the range is empty).
    pub fn range(&self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo)
    }

    /// True with probability `p`.
    pub fn chance(&self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p
    }

    /// One of `items`.
    pub fn pick<'a, T>(&self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            return None;
        }
        items.get(self.range(0, items.len() as u64) as usize)
    }
}
