//! The scrub pass under way on this server (`crate::handlers::scrub`).

use std::sync::{Mutex, PoisonError};

/// The scrub pass that began on this server since it started (its number), so
/// that only a pass that reached it whole makes unsure sums sure.
#[derive(Default)]
pub struct ScrubPass(Mutex<Option<u64>>);

impl ScrubPass {
    /// The pass that began here, to read or set.
    pub fn get(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
