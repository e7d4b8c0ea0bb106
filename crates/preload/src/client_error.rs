//! The errno a program sees for a client error, and the one hint it cannot print
//! itself.

use crate::hook::Errno;

/// The errno of a client error. A failure to authenticate (no key this user can read
/// and no MUNGE, or a key the servers do not hold) is also said once on stderr, with
/// what to do: a program only prints "Required key not available".
pub(crate) fn client_errno(e: pvfs_client::Error) -> Errno {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let auth = [libc::ENOKEY, libc::EKEYREJECTED];
    if auth.contains(&(e.errno.0 as Errno))
        && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        crate::settings::warn(&format!("cannot authenticate: {}", e.message));
    }
    match e.errno.0 {
        0 => libc::EIO,
        n => n as Errno,
    }
}
