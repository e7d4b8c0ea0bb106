//! Errors of the storage layer and their mapping to POSIX errnos.
//!
//! [`StorageError`] is a failure of the storage itself (I/O, database, corruption,
//! wrong store); [`MetaError`] adds the logical failures a metadata mutation reports
//! (EEXIST, ENOENT, ...). Both are `Clone` so one failed group commit can answer every
//! job of its batch with the same error.

use pvfs_proto::Errno;
use std::sync::Arc;
use thiserror::Error;

/// A failure of the storage itself.
#[derive(Debug, Error, Clone)]
pub enum StorageError {
    /// An operating-system I/O error (its errno is kept: ENOSPC stays ENOSPC).
    #[error("I/O error: {0}")]
    Io(#[source] Arc<std::io::Error>),
    /// An error of the redb metadata database.
    #[error("metadata database: {0}")]
    Db(#[source] Arc<redb::Error>),
    /// A stored record could not be decoded.
    #[error("corrupt {what}")]
    Corrupt {
        /// Which record, and why.
        what: String,
    },
    /// The store belongs to another file system.
    #[error("storage belongs to file system {found:#x}, not {expected:#x}")]
    WrongFs {
        /// The fsid in the superblock.
        found: u64,
        /// The fsid of the configuration.
        expected: u64,
    },
    /// The store belongs to another server.
    #[error("storage belongs to server {found:?}, not {expected:?}")]
    WrongServer {
        /// The server name in the superblock.
        found: String,
        /// The server name of the configuration.
        expected: String,
    },
    /// The store was created for another handle range.
    #[error("storage handle range {found:?} differs from the configured {expected:?}")]
    WrongRange {
        /// The range in the superblock.
        found: (u64, u64),
        /// The configured range.
        expected: (u64, u64),
    },
    /// An unknown format version or an invalid argument to `open`.
    #[error("storage format: {0}")]
    Format(String),
    /// The metadata writer has stopped.
    #[error("metadata store is closed")]
    Closed,
}

impl StorageError {
    /// The POSIX errno to report: the OS errno of an I/O error, EIO otherwise.
    pub fn errno(&self) -> Errno {
        match self {
            StorageError::Io(e) => Errno::from_io(e),
            StorageError::Db(e) => match &**e {
                redb::Error::Io(io) => Errno::from_io(io),
                _ => Errno::EIO,
            },
            _ => Errno::EIO,
        }
    }

    /// A corruption error about `what`.
    pub(crate) fn corrupt(what: impl Into<String>) -> StorageError {
        StorageError::Corrupt { what: what.into() }
    }
}

impl From<std::io::Error> for StorageError {
    fn from(e: std::io::Error) -> Self {
        StorageError::Io(Arc::new(e))
    }
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for StorageError {
            fn from(e: $t) -> Self {
                StorageError::Db(Arc::new(redb::Error::from(e)))
            }
        }
    )*};
}
from_redb!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

/// Why a metadata mutation failed.
#[derive(Debug, Error, Clone)]
pub enum MetaError {
    /// A logical failure with its errno, e.g. EEXIST; the mutation left no trace.
    #[error("{1}: {0}")]
    Errno(Errno, String),
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl MetaError {
    /// A logical failure with a message.
    pub fn new(errno: Errno, msg: impl Into<String>) -> MetaError {
        MetaError::Errno(errno, msg.into())
    }

    /// The POSIX errno to report.
    pub fn errno(&self) -> Errno {
        match self {
            MetaError::Errno(e, _) => *e,
            MetaError::Storage(s) => s.errno(),
        }
    }
}

impl From<Errno> for MetaError {
    fn from(e: Errno) -> Self {
        MetaError::Errno(e, e.describe().to_string())
    }
}
