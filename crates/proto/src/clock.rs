//! The wall clock and the random ids every part of pvfs reads, in one place, with a
//! per-thread override: a deterministic simulation ([`install`]) runs servers and
//! clients on one thread with its own time and a seeded source of ids, so that a run
//! replays exactly from its seed. Without an override: the system's clock and the
//! kernel's random numbers.

use std::cell::RefCell;
use std::time::Duration;

/// What a simulation supplies instead of the system.
pub trait Hooks {
    /// The wall-clock time now, since the Unix epoch.
    fn now(&self) -> Duration;
    /// A random 64-bit id.
    fn random_u64(&self) -> u64;
}

thread_local! {
    static HOOKS: RefCell<Option<Box<dyn Hooks>>> = const { RefCell::new(None) };
}

/// Removes the override of this thread when dropped.
pub struct Installed(());

impl Drop for Installed {
    fn drop(&mut self) {
        HOOKS.with(|h| h.borrow_mut().take());
    }
}

/// Makes this thread read time and ids from `hooks` until the result is dropped.
pub fn install(hooks: Box<dyn Hooks>) -> Installed {
    HOOKS.with(|h| *h.borrow_mut() = Some(hooks));
    Installed(())
}

/// Whether this thread runs a simulation (its hooks are [`install`]ed): work that
/// would go to another thread (a blocking pool) runs on this one instead, and random
/// choices come from [`random_u64`], so that the run follows from its seed.
pub fn simulated() -> bool {
    HOOKS.with(|h| h.borrow().is_some())
}

/// The wall-clock time now, since the Unix epoch (`Timespec::now` wraps it).
pub fn now() -> Duration {
    if let Some(t) = HOOKS.with(|h| h.borrow().as_ref().map(|h| h.now())) {
        return t;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// Whole seconds since the epoch, now.
pub fn now_secs() -> u64 {
    now().as_secs()
}

/// A random 64-bit id (lease ids, epochs, client ids): from the kernel, else from
/// the clock, the process id and a counter (ids that must differ between runs, not
/// secrets).
pub fn random_u64() -> u64 {
    if let Some(r) = HOOKS.with(|h| h.borrow().as_ref().map(|h| h.random_u64())) {
        return r;
    }
    use std::io::Read;
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_le_bytes(b);
    }
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ u64::from(std::process::id()) << 32 ^ COUNTER.fetch_add(1, Ordering::Relaxed))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl Hooks for Fixed {
        fn now(&self) -> Duration {
            Duration::new(42, 7)
        }
        fn random_u64(&self) -> u64 {
            9
        }
    }

    #[test]
    fn an_override_holds_on_its_thread_until_dropped() {
        let real = now_secs();
        assert!(real > 1_700_000_000, "the system clock: {real}");
        let guard = install(Box::new(Fixed));
        assert_eq!(now(), Duration::new(42, 7));
        assert_eq!(random_u64(), 9);
        let other = std::thread::spawn(now_secs).join().unwrap();
        assert!(
            other > 1_700_000_000,
            "another thread keeps the system clock"
        );
        drop(guard);
        assert_ne!(now_secs(), 42);
    }
}
