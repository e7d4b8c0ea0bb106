//! Who may talk to a pvfs server, and as whom.
//!
//! - [`key`]: key files (the file system's node key; the servers' own key);
//! - [`handshake`]: the mutual proof that opens every connection and yields its
//!   session key; the identity a connection acts for ([`handshake::Identity`]);
//! - [`mac`]: the tag every frame carries afterwards;
//! - [`munge`]: MUNGE credentials, with which unprivileged processes prove their user;
//! - [`users`]: groups as the name service knows them;
//! - [`random`]: random bytes from the kernel.
//!
//! The threat model and what each mode guarantees are in `docs/security.md`.

pub mod handshake;
pub mod key;
pub mod mac;
pub mod munge;
pub mod random;
pub mod users;

pub use handshake::{
    ClientProof, ClientSession, HandshakeError, Identity, ServerPolicy, ServerSession, SessionMacs,
};
pub use key::{Key, KeyError, KeyRing};
pub use mac::{FrameMac, MacError, TAG_LEN};
pub use munge::{Munge, MungeError};
