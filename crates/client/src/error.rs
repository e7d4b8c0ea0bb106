//! The client's error: a POSIX errno (what programs act on), its kind (what the
//! library acts on: only some kinds are worth another try) and a message (what
//! people read).

use pvfs_proto::{Errno, ErrorKind};
use pvfs_transport::TransportError;

/// A failed client operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// The POSIX errno.
    pub errno: Errno,
    /// Why, as the server (or the library) classed it.
    pub kind: ErrorKind,
    /// One line for humans.
    pub message: String,
}

/// Result of a client operation.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with its own message, of the kind its errno stands for
    /// ([`ErrorKind::of`]).
    pub fn new(errno: Errno, message: impl Into<String>) -> Error {
        Error::of_kind(ErrorKind::of(errno), errno, message)
    }

    /// An error of a given kind.
    pub fn of_kind(kind: ErrorKind, errno: Errno, message: impl Into<String>) -> Error {
        Error {
            errno,
            kind,
            message: message.into(),
        }
    }

    /// Whether what a multi-step operation relied on changed under it, so that the
    /// operation may be redone from its start.
    pub fn is_changed(&self) -> bool {
        self.kind == ErrorKind::Changed
    }

    /// An error about `path`, worded like the C library ("PATH: no such file or
    /// directory").
    pub fn at(errno: Errno, path: &str) -> Error {
        Error::new(errno, format!("{path}: {}", errno.describe()))
    }

    /// The same errno, described for `path` (server details dropped for errnos whose
    /// meaning is plain, kept for the rest). An error already described for `path`
    /// is returned as it is, so the path is said once.
    pub fn for_path(self, path: &str) -> Error {
        if self
            .message
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with(": "))
        {
            return self;
        }
        match self.errno {
            Errno::ENOENT
            | Errno::EEXIST
            | Errno::ENOTDIR
            | Errno::EISDIR
            | Errno::ENOTEMPTY
            | Errno::EACCES
            | Errno::EPERM
            | Errno::ELOOP
            | Errno::ENAMETOOLONG => Error {
                message: format!("{path}: {}", self.errno.describe()),
                ..self
            },
            _ => Error {
                message: format!("{path}: {}", self.message),
                ..self
            },
        }
    }

    pub(crate) fn transport(server: &str, e: TransportError) -> Error {
        Error::of_kind(e.kind(), e.errno(), format!("server {server}: {e}"))
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        std::io::Error::new(
            std::io::Error::from_raw_os_error(e.errno.code()).kind(),
            e.message,
        )
    }
}
