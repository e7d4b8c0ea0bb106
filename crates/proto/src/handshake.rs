//! The handshake that opens every connection, before any request.
//!
//! ```text
//! client                                   server
//!   Hello { fsid, server, nonce_c, method } ->
//!                                          <- Challenge { fsid, server, nonce_s, key_id, proof_s }
//!   Proof { proof_c }                      ->
//!                                          <- Welcome { identity }   (or Refused, then close)
//! ```
//!
//! Each message is the body of a frame of kind `Handshake` (no tag). The client names
//! the file system and the server it means to reach; the server refuses a Hello for
//! another fsid or another server name, and the client checks the Challenge's. Both
//! proofs are MACs under a shared key over a digest of Hello and Challenge, so each
//! side proves it holds the key and both are bound to the same nonces, fsid and name:
//! the file system's key for nodes that hold it ([`Method::Key`]), or a random secret
//! the client sealed into a MUNGE credential ([`Method::Munge`]) that only a node of
//! the MUNGE realm can open. The connection's session key is derived from the same
//! digest; from then on every frame carries a MAC under it (`pvfs-auth`).
//! Any failure is answered with `Refused` and the connection is closed.

use crate::codec::{DecodeError, Reader, Wire};
use crate::wire_struct;

/// Version of the handshake this build speaks.
pub const HANDSHAKE_VERSION: u16 = 1;
/// Bytes of each side's nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a key fingerprint ([`Challenge::key_id`]).
pub const KEY_ID_LEN: usize = 8;
/// Bytes of a handshake proof.
pub const PROOF_LEN: usize = 32;
/// Longest MUNGE credential accepted (they are a few hundred bytes).
pub const MAX_CREDENTIAL: usize = 4096;

/// How the client proves itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    /// With the file system's key: a node (server, mount, root's tools) that may act
    /// for any user the kernel names.
    Key,
    /// With a MUNGE credential: one user's process; the connection acts for that user
    /// only. The credential's payload holds the secret the proofs are keyed with.
    Munge {
        /// The credential, as `munge_encode` made it.
        credential: String,
    },
}

impl Wire for Method {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Method::Key => out.push(1),
            Method::Munge { credential } => {
                out.push(2);
                credential.put(out);
            }
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            1 => Ok(Method::Key),
            2 => Ok(Method::Munge {
                credential: Wire::get(r)?,
            }),
            t => Err(DecodeError::UnknownTag {
                what: "handshake method",
                tag: u32::from(t),
            }),
        }
    }
}

/// What a client seals into its MUNGE credential: the handshake it belongs to and the
/// secret both proofs are keyed with (MUNGE encrypts the payload, so only a node of
/// the same MUNGE realm learns the secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MungePayload {
    /// The file system of the Hello.
    pub fsid: u64,
    /// The server of the Hello.
    pub server: String,
    /// The client nonce of the Hello.
    pub nonce: Vec<u8>,
    /// The secret ([`NONCE_LEN`] bytes).
    pub secret: Vec<u8>,
}
wire_struct!(MungePayload {
    fsid: u64,
    server: String,
    nonce: Vec<u8>,
    secret: Vec<u8>,
});

/// The client's opening message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// [`HANDSHAKE_VERSION`].
    pub version: u16,
    /// The file system the client belongs to.
    pub fsid: u64,
    /// The server the client means to reach (its configured name).
    pub server: String,
    /// Fresh random bytes ([`NONCE_LEN`]).
    pub nonce: Vec<u8>,
    /// How the client proves itself.
    pub method: Method,
    /// What the client calls itself (program, host, pid), for the server's logs.
    pub client: String,
}
wire_struct!(Hello {
    version: u16,
    fsid: u64,
    server: String,
    nonce: Vec<u8>,
    method: Method,
    client: String,
});

/// The server's answer to `Hello`: who it is and its proof.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The file system the server serves.
    pub fsid: u64,
    /// The server's configured name.
    pub server: String,
    /// Fresh random bytes ([`NONCE_LEN`]).
    pub nonce: Vec<u8>,
    /// Fingerprint of the key the proofs use (key method; empty for MUNGE).
    pub key_id: Vec<u8>,
    /// The server's proof ([`PROOF_LEN`]).
    pub proof: Vec<u8>,
}
wire_struct!(Challenge {
    fsid: u64,
    server: String,
    nonce: Vec<u8>,
    key_id: Vec<u8>,
    proof: Vec<u8>,
});

/// The client's proof.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proof {
    /// [`PROOF_LEN`] bytes.
    pub proof: Vec<u8>,
}
wire_struct!(Proof { proof: Vec<u8> });

/// Who the server will take the connection's requests from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// A key holder: requests may name any user.
    pub trusted: bool,
    /// For MUNGE connections, the user every request must be (after root squash).
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// Its supplementary groups, as the server resolved them.
    pub groups: Vec<u32>,
}
wire_struct!(Welcome {
    trusted: bool,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
});

/// One handshake message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeMsg {
    /// Client, first.
    Hello(Hello),
    /// Server, second.
    Challenge(Challenge),
    /// Client, third.
    Proof(Proof),
    /// Server, last: the connection is open.
    Welcome(Welcome),
    /// Either side: the handshake failed (the connection closes after it).
    Refused {
        /// Why, as an errno.
        errno: u32,
        /// Why, in words.
        message: String,
    },
}

impl HandshakeMsg {
    /// The message's name, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            HandshakeMsg::Hello(_) => "Hello",
            HandshakeMsg::Challenge(_) => "Challenge",
            HandshakeMsg::Proof(_) => "Proof",
            HandshakeMsg::Welcome(_) => "Welcome",
            HandshakeMsg::Refused { .. } => "Refused",
        }
    }
}

impl Wire for HandshakeMsg {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            HandshakeMsg::Hello(m) => {
                out.push(1);
                m.put(out);
            }
            HandshakeMsg::Challenge(m) => {
                out.push(2);
                m.put(out);
            }
            HandshakeMsg::Proof(m) => {
                out.push(3);
                m.put(out);
            }
            HandshakeMsg::Welcome(m) => {
                out.push(4);
                m.put(out);
            }
            HandshakeMsg::Refused { errno, message } => {
                out.push(5);
                errno.put(out);
                message.put(out);
            }
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            1 => Ok(HandshakeMsg::Hello(Wire::get(r)?)),
            2 => Ok(HandshakeMsg::Challenge(Wire::get(r)?)),
            3 => Ok(HandshakeMsg::Proof(Wire::get(r)?)),
            4 => Ok(HandshakeMsg::Welcome(Wire::get(r)?)),
            5 => Ok(HandshakeMsg::Refused {
                errno: Wire::get(r)?,
                message: Wire::get(r)?,
            }),
            t => Err(DecodeError::UnknownTag {
                what: "handshake message",
                tag: u32::from(t),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode};

    #[test]
    fn messages_round_trip() {
        let msgs = vec![
            HandshakeMsg::Hello(Hello {
                version: HANDSHAKE_VERSION,
                fsid: 7,
                server: "s0".into(),
                nonce: vec![1; NONCE_LEN],
                method: Method::Munge {
                    credential: "MUNGE:abc".into(),
                },
                client: "test".into(),
            }),
            HandshakeMsg::Challenge(Challenge {
                fsid: 7,
                server: "s0".into(),
                nonce: vec![2; NONCE_LEN],
                key_id: vec![3; KEY_ID_LEN],
                proof: vec![4; PROOF_LEN],
            }),
            HandshakeMsg::Proof(Proof {
                proof: vec![5; PROOF_LEN],
            }),
            HandshakeMsg::Welcome(Welcome {
                trusted: false,
                uid: 1000,
                gid: 100,
                groups: vec![100, 27],
            }),
            HandshakeMsg::Refused {
                errno: 13,
                message: "no".into(),
            },
        ];
        for m in msgs {
            assert_eq!(decode::<HandshakeMsg>(&encode(&m)).unwrap(), m);
        }
        assert!(decode::<HandshakeMsg>(&[9]).is_err());
    }
}
