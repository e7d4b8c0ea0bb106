//! What every hook is made of: errno values and the C failure convention, the mark
//! of a thread inside pvfs work (hooks it reaches pass straight through, so nothing
//! recurses), running a pvfs operation for a hook (errno set, panics caught), and
//! the macro that exports one implementation under several libc names.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use libc::c_int;

/// An errno value: the error half of every hook's result.
pub(crate) type Errno = c_int;
/// A hook's result before it is turned into the C convention.
pub(crate) type R<T> = Result<T, Errno>;

/// Sets the calling thread's errno.
pub(crate) fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's errno.
pub(crate) fn errno() -> Errno {
    // SAFETY: as in set_errno.
    unsafe { *libc::__errno_location() }
}

/// What a hook returns on failure, with errno set: -1 or a null pointer.
pub(crate) trait Failure {
    /// The failure value.
    fn failure() -> Self;
}

impl Failure for c_int {
    fn failure() -> Self {
        -1
    }
}

impl Failure for isize {
    fn failure() -> Self {
        -1
    }
}

impl Failure for i64 {
    fn failure() -> Self {
        -1
    }
}

impl Failure for u32 {
    fn failure() -> Self {
        u32::MAX
    }
}

impl Failure for () {
    fn failure() -> Self {}
}

impl<T> Failure for *mut T {
    fn failure() -> Self {
        std::ptr::null_mut()
    }
}

thread_local! {
    /// Set while this thread does pvfs work: hooks it reaches then pass through.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as inside pvfs work for its lifetime.
pub(crate) struct Busy {
    was: bool,
}

impl Busy {
    /// Enters pvfs work.
    pub(crate) fn enter() -> Busy {
        let was = BUSY.with(|b| b.replace(true));
        Busy { was }
    }

    /// Whether the calling thread is inside pvfs work (hooks must pass through).
    pub(crate) fn active() -> bool {
        BUSY.with(|b| b.get())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(self.was));
    }
}

/// Runs a pvfs operation for a hook: marks the thread busy, turns an error into errno
/// and the failure value, and a panic into EIO (a panic never crosses into C).
pub(crate) fn pvfs_call<T: Failure>(f: impl FnOnce() -> R<T>) -> T {
    let _busy = Busy::enter();
    let caller_errno = errno();
    match catch_unwind(AssertUnwindSafe(f)) {
        // Success leaves errno as the program left it (a socket connected on the way
        // sets it; `readdir` callers tell the end of a listing from an error by it).
        Ok(Ok(v)) => {
            set_errno(caller_errno);
            v
        }
        Ok(Err(e)) => {
            set_errno(e);
            T::failure()
        }
        Err(_) => {
            set_errno(libc::EIO);
            T::failure()
        }
    }
}

/// Runs the routing part of a hook (which may touch the descriptor table) without
/// letting a panic escape: a panic there becomes EIO.
pub(crate) fn guarded<T: Failure>(f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            set_errno(libc::EIO);
            T::failure()
        }
    }
}

/// Defines exported hooks `$name…` that all forward to `$imp`.
macro_rules! export {
    ($($name:ident),+ => $imp:ident $args:tt -> $ret:ty) => {
        $( $crate::hook::export!(@one $name $imp $args $ret); )+
    };
    (@one $name:ident $imp:ident ($($a:ident: $t:ty),*) $ret:ty) => {
        #[no_mangle]
        unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            // SAFETY: the same contract as the function it forwards to.
            unsafe { $imp($($a),*) }
        }
    };
}
pub(crate) use export;
