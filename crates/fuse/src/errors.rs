//! What programs see when an operation fails: the errno of a client error.
//!
//! Every operation of the mount returns an [`OpResult`]; its error is the errno the
//! calling program gets. Errors of the client library are mapped once, here.

use fuser::Errno;

/// Result of an operation: the errno is what the calling program sees.
pub(crate) type OpResult<T> = Result<T, Errno>;

/// The errno of a client error. A server that is down, refused or reset the
/// connection, or answered nonsense is EIO to programs (they know what to do with
/// it); a server that did not answer in time stays ETIMEDOUT.
pub(crate) fn errno(e: pvfs_client::Error) -> Errno {
    use pvfs_client::Errno as E;
    tracing::debug!("{}: {}", e.errno.name(), e.message);
    match e.errno {
        E::EHOSTDOWN | E::ECONNREFUSED | E::ECONNRESET | E::EPROTO | E::EBADMSG => Errno::EIO,
        other => Errno::from_i32(other.code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvfs_client::Errno as E;

    fn seen(e: E) -> Errno {
        errno(pvfs_client::Error::new(e, "test"))
    }

    #[test]
    fn broken_servers_are_eio_and_the_rest_keeps_its_errno() {
        for e in [
            E::EHOSTDOWN,
            E::ECONNREFUSED,
            E::ECONNRESET,
            E::EPROTO,
            E::EBADMSG,
        ] {
            assert_eq!(seen(e), Errno::EIO, "{}", e.name());
        }
        // A server that did not answer in time says so.
        assert_eq!(seen(E::ETIMEDOUT), Errno::ETIMEDOUT);
        assert_eq!(seen(E::ENOENT), Errno::ENOENT);
        assert_eq!(seen(E::EACCES), Errno::EACCES);
        assert_eq!(seen(E::ENOSPC), Errno::ENOSPC);
        assert_eq!(seen(E::ESTALE), Errno::ESTALE);
        assert_eq!(seen(E::EIO), Errno::EIO);
    }
}
