//! The error every handler returns: why it failed (its [`ErrorKind`], what the client
//! acts on), the POSIX errno a program sees, and a message for humans.
//!
//! Each kind has its constructor, so a handler says what happened rather than picking
//! an errno: [`OpError::changed`] (a multi-step operation's ground moved: the client
//! redoes it), [`OpError::not_here`] (the sender's placement is wrong),
//! [`OpError::denied`], [`OpError::invalid`], [`OpError::posix`] (the call's POSIX
//! outcome: ENOENT, EEXIST, …), [`OpError::busy`]; storage and transport failures
//! convert with `?`. The answer carries the kind's wire code beside the errno
//! (`Response::Error`); `docs/error-handling.md` lists the kinds.

use pvfs_proto::{Errno, ErrorKind, Handle, Response};
use pvfs_storage::{MetaError, MutationError, StorageError};
use pvfs_transport::TransportError;

/// A failed operation, answered to the client as `Response::Error`.
#[derive(Debug, Clone)]
pub struct OpError {
    /// Why, for the client's retry decisions.
    pub kind: ErrorKind,
    /// The POSIX errno the client sees.
    pub errno: Errno,
    /// One line saying what went wrong.
    pub message: String,
    /// The storage failure behind a [`ErrorKind::Storage`] error met inside a commit
    /// (so the store can tell it fails the store, not just the mutation).
    failure: Option<StorageError>,
}

impl OpError {
    /// An error of `kind`.
    pub fn of_kind(kind: ErrorKind, errno: Errno, message: impl Into<String>) -> OpError {
        OpError {
            kind,
            errno,
            message: message.into(),
            failure: None,
        }
    }

    /// The answer POSIX defines for the call (ENOENT, EEXIST, ENOTEMPTY, EISDIR, …).
    pub fn posix(errno: Errno, message: impl Into<String>) -> OpError {
        OpError::of_kind(ErrorKind::Posix, errno, message)
    }

    /// The caller may not (EACCES, EPERM, EKEYEXPIRED).
    pub fn denied(errno: Errno, message: impl Into<String>) -> OpError {
        OpError::of_kind(ErrorKind::Denied, errno, message)
    }

    /// The request is malformed or out of range (EINVAL, E2BIG, ENAMETOOLONG, …).
    pub fn invalid(errno: Errno, message: impl Into<String>) -> OpError {
        OpError::of_kind(ErrorKind::Invalid, errno, message)
    }

    /// What a multi-step operation relied on changed under it: the client redoes the
    /// operation from its start (ESTALE at the edges when it gives up).
    pub fn changed(message: impl Into<String>) -> OpError {
        OpError::of_kind(ErrorKind::Changed, Errno::ESTALE, message)
    }

    /// The handle, name or role asked for is another server's (ESTALE for a handle,
    /// EINVAL for a role this server does not play).
    pub fn not_here(errno: Errno, message: impl Into<String>) -> OpError {
        OpError::of_kind(ErrorKind::NotHere, errno, message)
    }

    /// The handle belongs to no server of this file system (ESTALE).
    pub fn no_server(message: impl Into<String>) -> OpError {
        OpError::of_kind(ErrorKind::NoServer, Errno::ESTALE, message)
    }

    /// The sender's cluster map is not this server's, or the map does not let this
    /// server act as asked now: the client learns the newest map and asks again.
    pub fn map(message: impl Into<String>) -> OpError {
        OpError::of_kind(ErrorKind::Map, Errno::EAGAIN, message)
    }

    /// Busy or out of a resource for now: worth asking again after a pause.
    pub fn busy(errno: Errno, message: impl Into<String>) -> OpError {
        OpError::of_kind(ErrorKind::Busy, errno, message)
    }

    /// This server's own failure (a task that died, an answer of the wrong kind from
    /// a peer): EIO or EPROTO, classed as a storage failure is (not retried).
    pub fn internal(errno: Errno, message: impl Into<String>) -> OpError {
        OpError::of_kind(ErrorKind::Storage, errno, message)
    }

    /// The block that did not match its checksum, when that is this error: its
    /// datafile, offset, and whether the sums were unsure (`crate::mend`).
    pub fn bad_block(&self) -> Option<(Handle, u64, bool)> {
        match self.failure {
            Some(StorageError::BadSum {
                handle,
                offset,
                unsure,
            }) => Some((handle, offset, unsure)),
            _ => None,
        }
    }

    /// The reply that carries this error.
    pub fn into_response(self) -> Response {
        Response::failure(self.kind, self.errno, self.message)
    }
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.errno.name(), self.message)
    }
}

impl From<StorageError> for OpError {
    fn from(e: StorageError) -> OpError {
        let errno = e.errno();
        OpError {
            kind: ErrorKind::Storage,
            errno,
            message: e.to_string(),
            failure: Some(e),
        }
    }
}

impl From<MetaError> for OpError {
    fn from(e: MetaError) -> OpError {
        match e {
            MetaError::Storage(e) => e.into(),
            MetaError::Errno(errno, message) => {
                OpError::of_kind(ErrorKind::of(errno), errno, message)
            }
        }
    }
}

impl From<TransportError> for OpError {
    fn from(e: TransportError) -> OpError {
        OpError::of_kind(e.kind(), e.errno(), e.to_string())
    }
}

impl MutationError for OpError {
    fn storage_failure(&self) -> Option<&StorageError> {
        self.failure.as_ref()
    }
}

/// Shorthand for handler results.
pub type OpResult<T> = Result<T, OpError>;

/// The error for a name that is not in a directory.
pub(crate) fn no_entry(dir: Handle, name: &str) -> OpError {
    OpError::posix(
        Errno::ENOENT,
        format!("no entry {name:?} in directory {dir:#x}"),
    )
}

/// The error for a handle with no object.
pub(crate) fn no_object(handle: Handle) -> OpError {
    OpError::posix(Errno::ENOENT, format!("no object {handle:#x}"))
}

/// The error for an entry that changed under a multi-step operation (the client
/// redoes the operation from the start).
pub(crate) fn changed(dir: Handle, name: &str) -> OpError {
    OpError::changed(format!(
        "entry {name:?} of directory {dir:#x} changed concurrently"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_reach_the_wire_and_storage_failures_stay_recognisable() {
        let e = OpError::changed("entry moved");
        assert_eq!(e.errno, Errno::ESTALE);
        let Response::Error { errno, kind, .. } = e.into_response() else {
            panic!("not an error answer");
        };
        assert_eq!((Errno(errno), kind), (Errno::ESTALE, ErrorKind::Changed));
        assert_eq!(OpError::no_server("x").kind, ErrorKind::NoServer);
        assert_eq!(
            OpError::not_here(Errno::ESTALE, "x").kind,
            ErrorKind::NotHere
        );
        // A refusal inside a commit is not a storage failure; a disk error is.
        let refusal: OpError = MetaError::new(Errno::EEXIST, "exists").into();
        assert_eq!(refusal.kind, ErrorKind::Posix);
        assert!(refusal.storage_failure().is_none());
        let io = StorageError::Io(std::sync::Arc::new(std::io::Error::from_raw_os_error(28)));
        let full: OpError = MetaError::Storage(io).into();
        assert_eq!((full.kind, full.errno), (ErrorKind::Storage, Errno::ENOSPC));
        assert!(full.storage_failure().is_some());
    }
}
