//! The error every handler returns: an errno for the client and a message for humans.

use pvfs_proto::{Errno, Response};
use pvfs_storage::{MetaError, StorageError};
use pvfs_transport::TransportError;

/// A failed operation, answered to the client as `Response::Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    /// The POSIX errno the client sees.
    pub errno: Errno,
    /// One line saying what went wrong.
    pub message: String,
}

impl OpError {
    /// An error with a message.
    pub fn new(errno: Errno, message: impl Into<String>) -> OpError {
        OpError {
            errno,
            message: message.into(),
        }
    }

    /// The reply that carries this error.
    pub fn into_response(self) -> Response {
        Response::error(self.errno, self.message)
    }
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.errno.name(), self.message)
    }
}

impl From<MetaError> for OpError {
    fn from(e: MetaError) -> OpError {
        OpError::new(e.errno(), e.to_string())
    }
}

impl From<StorageError> for OpError {
    fn from(e: StorageError) -> OpError {
        OpError::new(e.errno(), e.to_string())
    }
}

impl From<TransportError> for OpError {
    fn from(e: TransportError) -> OpError {
        OpError::new(e.errno(), e.to_string())
    }
}

/// Shorthand for handler results.
pub type OpResult<T> = Result<T, OpError>;
