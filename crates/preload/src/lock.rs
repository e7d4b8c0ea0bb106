//! A small futex mutex that the fork handlers can take and release from different
//! functions, and that a forked child can force open.
//!
//! `std::sync::Mutex` cannot do either: its guard must be dropped where it was made,
//! and a lock held by another thread at `fork` stays locked forever in the child (that
//! thread does not exist there). The library's global locks are taken by the
//! `pthread_atfork` prepare handler and released in the parent and child handlers; the
//! per-descriptor locks (held by a thread across a whole read or write) are forced open
//! in the child, where their holder does not exist.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};

/// Unlocked.
const FREE: u32 = 0;
/// Locked, nobody waiting.
const LOCKED: u32 = 1;
/// Locked, and someone may be waiting in futex_wait.
const CONTENDED: u32 = 2;

/// A mutex around a `T` (Drepper's three-state futex mutex).
pub(crate) struct Locked<T> {
    state: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and one guard exists at a time.
unsafe impl<T: Send> Sync for Locked<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Locked<T> {}

impl<T> Locked<T> {
    /// An unlocked mutex holding `value`.
    pub(crate) const fn new(value: T) -> Locked<T> {
        Locked {
            state: AtomicU32::new(FREE),
            value: UnsafeCell::new(value),
        }
    }

    /// Waits for the lock.
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        self.raw_lock();
        Guard { lock: self }
    }

    /// Takes the lock without a guard (the fork prepare handler); released by
    /// [`Locked::raw_unlock`].
    pub(crate) fn raw_lock(&self) {
        if self
            .state
            .compare_exchange(FREE, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        while self.state.swap(CONTENDED, Ordering::Acquire) != FREE {
            futex(
                &self.state,
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                CONTENDED,
            );
        }
    }

    /// The value, without locking.
    ///
    /// # Safety
    /// The caller holds the lock (taken with [`Locked::raw_lock`]) and no guard
    /// exists.
    pub(crate) unsafe fn held(&self) -> &T {
        // SAFETY: the caller holds the lock and no guard exists, so nothing mutates it.
        unsafe { &*self.value.get() }
    }

    /// Releases a lock taken with [`Locked::raw_lock`] (or whose holder is gone: a
    /// forked child forcing open locks held by threads it does not have).
    pub(crate) fn raw_unlock(&self) {
        if self.state.swap(FREE, Ordering::Release) == CONTENDED {
            futex(&self.state, libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1);
        }
    }
}

/// futex(2) on `word`; spurious returns and errors are fine (callers loop).
fn futex(word: &AtomicU32, op: libc::c_int, val: u32) {
    // SAFETY: word is a live, aligned u32; FUTEX_WAIT reads it, FUTEX_WAKE only uses
    // its address. No timeout pointer is passed.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            val,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// Access to a [`Locked`] value; unlocks when dropped.
pub(crate) struct Guard<'a, T> {
    lock: &'a Locked<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock, so no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in deref, and &mut self makes this the only access.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.lock.raw_unlock();
    }
}
