//! The crate's errors.

use std::time::Duration;

/// What can go wrong at the authority or when asking it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bytes that are not what the other side (or the disk) should have sent.
    #[error("cannot decode: {0}")]
    Decode(String),
    /// The raft store (`raft.redb`) failed.
    #[error("raft store {path}: {what}")]
    Store {
        /// The database file.
        path: String,
        /// What failed.
        what: String,
    },
    /// Raft itself failed or stopped.
    #[error("raft: {0}")]
    Raft(String),
    /// The parameters cannot work (a lease no longer than its margin, no members...).
    #[error("invalid parameters: {0}")]
    Params(String),
    /// The authority refused the renewal: the server is retired or not in the map.
    #[error("lease refused: the server is retired or unknown")]
    Refused,
    /// A member refused the request (a command a server may not propose).
    #[error("rejected: {0}")]
    Rejected(String),
    /// No member answered (or none led) within the time given.
    #[error("no authority member answered within {0:?}")]
    NoAnswer(Duration),
    /// This member was shut down.
    #[error("the authority member is shut down")]
    Shutdown,
}
