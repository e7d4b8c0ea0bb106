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
    /// A block of a datafile whose bytes do not match their checksum: this copy of
    /// them is damaged (or, `unsure`, was written before a reboot that may have
    /// lost part of it, `docs/storage-format.md`, "Checksums").
    #[error("{}", bad_sum_text(*handle, *offset, *unsure))]
    BadSum {
        /// The datafile.
        handle: pvfs_proto::Handle,
        /// Where the block starts in it.
        offset: u64,
        /// Whether the sums have not been checked since a reboot.
        unsure: bool,
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
    /// The metadata store failed: an error it cannot undo (an I/O error in a commit, a
    /// full disk, after which redb refuses every transaction) left it refusing every
    /// operation until it is reopened (`MetaStore::reopen`). `errno` is that of the
    /// error that failed it (ENOSPC stays ENOSPC).
    #[error("metadata store failed: {cause}")]
    Failed {
        /// The errno operations report.
        errno: Errno,
        /// What failed it, one line (e.g. "No space left on device").
        cause: String,
    },
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
            StorageError::Failed { errno, .. } => *errno,
            _ => Errno::EIO,
        }
    }

    /// Whether this error leaves the metadata store unusable until it is reopened: an
    /// I/O error (after one, redb answers every later transaction with "previous I/O
    /// error"), that answer itself, or a lock poisoned by a panic inside redb. A
    /// corrupt record or a logical failure is not: the store still works.
    pub fn fails_store(&self) -> bool {
        match self {
            StorageError::Io(_) => true,
            StorageError::Db(e) => matches!(
                &**e,
                redb::Error::Io(_) | redb::Error::PreviousIo | redb::Error::LockPoisoned(_)
            ),
            _ => false,
        }
    }

    /// Whether this error says the store itself is damaged, of another format, or not
    /// this server's: reopening it again cannot help (an administrator must act).
    pub fn is_damage(&self) -> bool {
        let io_damage = |e: &std::io::Error| e.kind() == std::io::ErrorKind::InvalidData;
        match self {
            StorageError::Corrupt { .. }
            | StorageError::Format(_)
            | StorageError::WrongFs { .. }
            | StorageError::WrongServer { .. }
            | StorageError::WrongRange { .. } => true,
            StorageError::Io(e) => io_damage(e),
            StorageError::Db(e) => match &**e {
                redb::Error::Corrupted(_) | redb::Error::UpgradeRequired(_) => true,
                redb::Error::Io(io) => io_damage(io),
                _ => false,
            },
            _ => false,
        }
    }

    /// [`StorageError::Failed`] for a store that `self` failed: the same errno, and a
    /// short cause (the system's text for an OS error, e.g. "No space left on device").
    pub fn to_failed(&self) -> StorageError {
        if let StorageError::Failed { .. } = self {
            return self.clone();
        }
        let os_text = |e: &std::io::Error| match e.raw_os_error() {
            Some(code) => without_os_error(&std::io::Error::from_raw_os_error(code).to_string()),
            None => e.to_string(),
        };
        let cause = match self {
            StorageError::Io(e) => os_text(e),
            StorageError::Db(e) => match &**e {
                redb::Error::Io(io) => os_text(io),
                redb::Error::PreviousIo => "an earlier I/O error".to_string(),
                other => other.to_string(),
            },
            other => other.to_string(),
        };
        StorageError::Failed {
            errno: self.errno(),
            cause,
        }
    }

    /// A corruption error about `what`.
    pub(crate) fn corrupt(what: impl Into<String>) -> StorageError {
        StorageError::Corrupt { what: what.into() }
    }
}

/// The message of [`StorageError::BadSum`].
fn bad_sum_text(handle: pvfs_proto::Handle, offset: u64, unsure: bool) -> String {
    let end = offset.saturating_add(crate::sums::SUM_BLOCK);
    let why = if unsure {
        "written before a reboot and not checked since"
    } else {
        "this copy on disk is damaged"
    };
    format!("datafile {handle:016x}: bytes {offset}..{end} do not match their checksum ({why})")
}

/// `text` without the " (os error N)" that `std::io::Error` appends.
fn without_os_error(text: &str) -> String {
    match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => text[..i].to_string(),
        _ => text.to_string(),
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

/// An error a metadata mutation may end with ([`crate::MetaStore::write_with`]):
/// whatever a [`MetaError`] converts into, as long as it still tells a failure of the
/// storage (which fails the store) from a refusal (which only undoes the mutation).
pub trait MutationError: From<MetaError> + Send + 'static {
    /// The storage failure this error is, if it is one.
    fn storage_failure(&self) -> Option<&StorageError>;
}

impl MutationError for MetaError {
    fn storage_failure(&self) -> Option<&StorageError> {
        match self {
            MetaError::Storage(e) => Some(e),
            MetaError::Errno(..) => None,
        }
    }
}

impl From<Errno> for MetaError {
    fn from(e: Errno) -> Self {
        MetaError::Errno(e, e.describe().to_string())
    }
}
