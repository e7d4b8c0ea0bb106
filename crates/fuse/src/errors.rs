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

/// The errno of a client error on an object the kernel named by its inode: ENOENT
/// there means the object is gone (a rename replaced it, or it was removed since
/// the kernel looked its name up), which is ESTALE to the kernel: a path's open,
/// `stat` or `chmod` then looks the path up again and finds what the name holds
/// now, as on NFS. A program that holds a descriptor of the object sees ESTALE.
pub(crate) fn gone(e: pvfs_client::Error) -> Errno {
    match errno(e) {
        Errno::ENOENT => Errno::ESTALE,
        other => other,
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

    #[test]
    fn an_object_gone_from_under_its_inode_is_stale() {
        assert_eq!(gone(pvfs_client::Error::new(E::ENOENT, "t")), Errno::ESTALE);
        assert_eq!(gone(pvfs_client::Error::new(E::EACCES, "t")), Errno::EACCES);
        assert_eq!(gone(pvfs_client::Error::new(E::EHOSTDOWN, "t")), Errno::EIO);
    }
}
