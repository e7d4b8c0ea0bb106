//! pvfs transport layer: moves frames between clients and servers.
//!
//! - [`stream`]: the [`Transport`] trait with TCP and Unix-socket implementations;
//! - [`frames`]: reading and writing whole frames with bounded, aligned buffers;
//! - [`mux`]: a client connection carrying many requests at once;
//! - [`buf`]: page-aligned buffers and their pool;
//! - [`session`]: opening a client connection (connect, TLS when asked, handshake,
//!   multiplexing);
//! - [`tls`]: TLS 1.3 for networks that are not trusted.

pub mod buf;
pub mod frames;
pub mod mux;
mod sendfile;
pub mod session;
pub mod stream;
pub mod tls;

pub use buf::{AlignedBuf, BufPool, PooledBuf};
pub use frames::{BlockingFrames, Frame, FrameWriter};
pub use mux::{Call, Direct, Incoming, MuxConn};
pub use session::{connect_mux, Target};
pub use stream::{AutoTransport, Conn, Listener, TcpTransport, Transport, UnixTransport};

use pvfs_proto::Errno;
use thiserror::Error;

/// Why a transport operation failed.
#[derive(Debug, Error)]
pub enum TransportError {
    /// Could not connect.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address tried.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Could not listen.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address tried.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The peer did not make progress in time.
    #[error("timed out {what}")]
    Timeout {
        /// What was being waited for.
        what: String,
    },
    /// The connection is gone.
    #[error("connection lost: {0}")]
    Closed(String),
    /// An I/O error on an established connection.
    #[error("I/O error: {0}")]
    Io(std::io::Error),
    /// A frame beyond the protocol's limits was not sent.
    #[error("not sent: {0}")]
    Oversized(String),
    /// The handshake failed: the peer is not who it should be, or refused us.
    #[error("{message}")]
    Handshake {
        /// What a caller should see (EACCES: no proof; ESTALE: another file system
        /// or server; EPROTO: not our protocol).
        errno: Errno,
        /// Why.
        message: String,
    },
}

impl TransportError {
    /// The errno a caller should see: a peer that cannot be reached is EHOSTDOWN,
    /// one that does not answer in time ETIMEDOUT, a broken connection EIO.
    pub fn errno(&self) -> Errno {
        match self {
            TransportError::Connect { .. } => Errno::EHOSTDOWN,
            TransportError::Listen { source, .. } => Errno::from_io(source),
            TransportError::Timeout { .. } => Errno::ETIMEDOUT,
            TransportError::Closed(_) | TransportError::Io(_) => Errno::EIO,
            TransportError::Oversized(_) => Errno::E2BIG,
            TransportError::Handshake { errno, .. } => *errno,
        }
    }

    /// Why, as a kind: a server that cannot be reached, does not answer or whose
    /// connection broke is unreachable (the retries of each operation's effect
    /// apply); an oversized frame is invalid; a refused handshake is what its errno
    /// says.
    pub fn kind(&self) -> pvfs_proto::ErrorKind {
        use pvfs_proto::ErrorKind;
        match self {
            TransportError::Connect { .. }
            | TransportError::Timeout { .. }
            | TransportError::Closed(_)
            | TransportError::Io(_) => ErrorKind::Unreachable,
            TransportError::Listen { .. } => ErrorKind::Storage,
            TransportError::Oversized(_) => ErrorKind::Invalid,
            TransportError::Handshake { errno, .. } => ErrorKind::of(*errno),
        }
    }
}
