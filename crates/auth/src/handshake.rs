//! Both sides of the handshake that opens every connection (the messages are in
//! `pvfs_proto::handshake`, which also draws the exchange).
//!
//! Proofs and the session key are HMAC-SHA256 under the shared key `K` (the file
//! system's key, or the secret of the client's MUNGE credential) over `D`, the SHA-256
//! of the encoded Hello and of the Challenge without its proof:
//! `proof_s = HMAC(K, "pvfs server proof" ‖ D)`, `proof_c = HMAC(K, "pvfs client
//! proof" ‖ D)`, `session = HMAC(K, "pvfs session key" ‖ D)`. Fresh nonces on both
//! sides make every session key new, so nothing recorded from one connection is
//! accepted on another.

use std::net::IpAddr;
use std::sync::Arc;

use hmac::Mac;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use pvfs_proto::frame::{FrameHeader, FrameKind, FLAG_END, HEADER_LEN};
use pvfs_proto::handshake::{
    Challenge, HandshakeMsg, Hello, Method, MungePayload, Proof, Welcome, HANDSHAKE_VERSION,
    MAX_CREDENTIAL, NONCE_LEN, PROOF_LEN,
};
use pvfs_proto::{decode, encode, Errno};

use crate::key::{Key, KeyRing};
use crate::mac::{Direction, FrameMac};
use crate::munge::Munge;
use crate::users::{groups_of, NOBODY};

/// Largest handshake message accepted.
pub const MAX_MESSAGE: u32 = 8192;
/// How long a client's MUNGE credential stays valid (it is used at once).
pub const CREDENTIAL_TTL_SECS: u32 = 60;

/// Why a handshake failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum HandshakeError {
    /// The other side refused, saying why.
    #[error("{message}")]
    Refused {
        /// Its errno.
        errno: Errno,
        /// Its words.
        message: String,
    },
    /// This side refused the other (and told it so).
    #[error("{message}")]
    Rejected {
        /// The errno that describes it.
        errno: Errno,
        /// Why.
        message: String,
    },
    /// The connection failed or broke the protocol.
    #[error("{0}")]
    Io(String),
}

impl HandshakeError {
    /// The errno a caller should see.
    pub fn errno(&self) -> Errno {
        match self {
            HandshakeError::Refused { errno, .. } | HandshakeError::Rejected { errno, .. } => {
                *errno
            }
            HandshakeError::Io(_) => Errno::EIO,
        }
    }
}

fn io(e: std::io::Error) -> HandshakeError {
    HandshakeError::Io(format!("handshake: {}", crate::key::io_text(&e)))
}

/// The two frame MACs of an open connection.
#[derive(Debug)]
pub struct SessionMacs {
    /// For frames this side sends.
    pub send: FrameMac,
    /// For frames this side receives.
    pub recv: FrameMac,
}

/// How a client proves itself.
#[derive(Clone, Debug)]
pub enum ClientProof {
    /// With the file system's key.
    Key(Arc<KeyRing>),
    /// With a MUNGE credential of the calling user; `decoder_uid` limits who may open
    /// it (the uid the servers run as), so that no other user of the realm can.
    Munge {
        /// libmunge.
        munge: Arc<Munge>,
        /// The uid allowed to decode the credential, if known.
        decoder_uid: Option<u32>,
    },
}

/// A client's side of an open connection.
#[derive(Debug)]
pub struct ClientSession {
    /// The frame MACs.
    pub macs: SessionMacs,
    /// Who the server takes this connection for.
    pub welcome: Welcome,
}

/// Who a server's connection acts for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// A node holding the file system's key: its requests name their users.
    Trusted,
    /// One user, proven by MUNGE: every request must be this user.
    User {
        /// The uid the credential proves.
        uid: u32,
        /// The gid it proves.
        gid: u32,
        /// The user's groups (from this node's name service), `gid` first.
        groups: Vec<u32>,
        /// Root squashed: requests act as nobody.
        squashed: bool,
    },
}

impl Identity {
    /// The uid, gid and groups requests on this connection act as, after root squash
    /// (None for a trusted node, whose requests name their users).
    pub fn acts_as(&self) -> Option<(u32, u32, Vec<u32>)> {
        match self {
            Identity::Trusted => None,
            Identity::User { squashed: true, .. } => Some((NOBODY, NOBODY, vec![NOBODY])),
            Identity::User {
                uid, gid, groups, ..
            } => Some((*uid, *gid, groups.clone())),
        }
    }
}

/// What a server accepts.
#[derive(Clone, Debug)]
pub struct ServerPolicy {
    /// The file system it serves.
    pub fsid: u64,
    /// Its configured name.
    pub server: String,
    /// The other servers whose names it answers to now: the metadata groups it took
    /// over as their standby (`docs/replication.md`, "Failover"). Changed while the
    /// server runs.
    pub groups: Arc<std::sync::RwLock<Vec<String>>>,
    /// The file system's key(s).
    pub keys: Arc<KeyRing>,
    /// libmunge, or why MUNGE credentials cannot be checked here.
    pub munge: Result<Arc<Munge>, String>,
    /// Map uid 0 arriving through MUNGE to nobody.
    pub root_squash: bool,
    /// Client addresses whose MUNGE root is not squashed.
    pub trusted: Vec<IpAddr>,
}

/// A server's side of an open connection.
#[derive(Debug)]
pub struct ServerSession {
    /// The frame MACs.
    pub macs: SessionMacs,
    /// Who the connection acts for.
    pub identity: Identity,
    /// What the client called itself.
    pub client: String,
    /// The server the client asked for: this one's name, or one of
    /// [`ServerPolicy::groups`].
    pub server: String,
}

fn header(len: usize) -> [u8; HEADER_LEN] {
    FrameHeader {
        kind: FrameKind::Handshake,
        flags: FLAG_END,
        request_id: 0,
        body_len: len as u32,
        tag_len: 0,
        data_len: 0,
    }
    .encode()
}

async fn send<W: AsyncWrite + Unpin>(w: &mut W, msg: &HandshakeMsg) -> Result<(), HandshakeError> {
    let body = encode(msg);
    let mut frame = Vec::with_capacity(HEADER_LEN + body.len());
    frame.extend_from_slice(&header(body.len()));
    frame.extend_from_slice(&body);
    w.write_all(&frame).await.map_err(io)?;
    w.flush().await.map_err(io)
}

async fn recv<R: AsyncRead + Unpin>(r: &mut R) -> Result<HandshakeMsg, HandshakeError> {
    let mut raw = [0u8; HEADER_LEN];
    r.read_exact(&mut raw).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            HandshakeError::Io("the peer closed the connection during the handshake".into())
        } else {
            io(e)
        }
    })?;
    let h = FrameHeader::decode(&raw).map_err(|e| HandshakeError::Io(format!("handshake: {e}")))?;
    if h.kind != FrameKind::Handshake || h.tag_len != 0 || h.data_len != 0 {
        return Err(HandshakeError::Io(format!(
            "handshake: expected a handshake frame, got {:?}",
            h.kind
        )));
    }
    if h.body_len > MAX_MESSAGE {
        return Err(HandshakeError::Io(format!(
            "handshake: a message of {} bytes (limit {MAX_MESSAGE})",
            h.body_len
        )));
    }
    let mut body = vec![0u8; h.body_len as usize];
    r.read_exact(&mut body).await.map_err(io)?;
    decode(&body).map_err(|e| HandshakeError::Io(format!("handshake: {e}")))
}

fn digest(hello: &Hello, challenge: &Challenge) -> [u8; 32] {
    let unproven = Challenge {
        proof: Vec::new(),
        ..challenge.clone()
    };
    Sha256::new()
        .chain_update(b"pvfs handshake 1")
        .chain_update(encode(hello))
        .chain_update(encode(&unproven))
        .finalize()
        .into()
}

fn keyed(key: &Key, label: &[u8], d: &[u8; 32]) -> hmac::Hmac<Sha256> {
    key.mac().chain_update(label).chain_update(d)
}

fn prove(key: &Key, label: &[u8], d: &[u8; 32]) -> Vec<u8> {
    keyed(key, label, d).finalize().into_bytes().to_vec()
}

fn verify(key: &Key, label: &[u8], d: &[u8; 32], proof: &[u8]) -> bool {
    proof.len() == PROOF_LEN && keyed(key, label, d).verify_slice(proof).is_ok()
}

fn session(key: &Key, d: &[u8; 32], client: bool) -> SessionMacs {
    let mut k = [0u8; 32];
    k.copy_from_slice(&prove(key, b"pvfs session key", d));
    let (send, recv) = if client {
        (Direction::ToServer, Direction::ToClient)
    } else {
        (Direction::ToClient, Direction::ToServer)
    };
    SessionMacs {
        send: FrameMac::new(&k, send),
        recv: FrameMac::new(&k, recv),
    }
}

fn nonce() -> Result<Vec<u8>, HandshakeError> {
    crate::random::array::<NONCE_LEN>()
        .map(|n| n.to_vec())
        .map_err(|e| HandshakeError::Io(format!("no random bytes: {e}")))
}

/// Opens a connection as a client of server `server` of file system `fsid`.
/// The caller bounds it with its connect deadline. When the client gives up (the
/// server is not who it should be), it tells the server why before closing.
pub async fn client<R, W>(
    r: &mut R,
    w: &mut W,
    proof: &ClientProof,
    fsid: u64,
    server: &str,
    client_name: &str,
) -> Result<ClientSession, HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let result = open(r, w, proof, fsid, server, client_name).await;
    if let Err(HandshakeError::Rejected { errno, message }) = &result {
        let _ = send(
            w,
            &HandshakeMsg::Refused {
                errno: errno.0,
                message: format!("the client gives up: {message}"),
            },
        )
        .await;
    }
    result
}

async fn open<R, W>(
    r: &mut R,
    w: &mut W,
    proof: &ClientProof,
    fsid: u64,
    server: &str,
    client_name: &str,
) -> Result<ClientSession, HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let nonce_c = nonce()?;
    let (method, munge_key) = match proof {
        ClientProof::Key(_) => (Method::Key, None),
        ClientProof::Munge { munge, decoder_uid } => {
            let secret = nonce()?;
            let payload = encode(&MungePayload {
                fsid,
                server: server.to_string(),
                nonce: nonce_c.clone(),
                secret: secret.clone(),
            });
            let munge = munge.clone();
            let decoder = *decoder_uid;
            let credential = tokio::task::spawn_blocking(move || {
                munge.encode(&payload, decoder, CREDENTIAL_TTL_SECS)
            })
            .await
            .map_err(|e| HandshakeError::Io(format!("MUNGE: {e}")))?
            .map_err(|e| HandshakeError::Rejected {
                errno: Errno::ENOKEY,
                message: e.to_string(),
            })?;
            let mut k = [0u8; 32];
            k.copy_from_slice(&secret);
            (Method::Munge { credential }, Some(Key::from_bytes(k)))
        }
    };
    let hello = Hello {
        version: HANDSHAKE_VERSION,
        fsid,
        server: server.to_string(),
        nonce: nonce_c,
        method,
        client: client_name.to_string(),
    };
    send(w, &HandshakeMsg::Hello(hello.clone())).await?;
    let challenge = match recv(r).await? {
        HandshakeMsg::Challenge(c) => c,
        HandshakeMsg::Refused { errno, message } => {
            return Err(HandshakeError::Refused {
                errno: Errno(errno),
                message,
            })
        }
        other => {
            return Err(HandshakeError::Io(format!(
                "handshake: expected Challenge, got {}",
                other.name()
            )))
        }
    };
    let reject = |errno: Errno, message: String| HandshakeError::Rejected { errno, message };
    if challenge.fsid != fsid || challenge.server != server {
        return Err(reject(
            Errno::ESTALE,
            format!(
                "the server at this address is {} of file system {:#x}, not {server} of {fsid:#x}: \
                 the configuration does not match the servers",
                challenge.server, challenge.fsid
            ),
        ));
    }
    let key = match (proof, munge_key) {
        (_, Some(k)) => k,
        (ClientProof::Key(ring), None) => {
            ring.find(&challenge.key_id).cloned().ok_or_else(|| {
                reject(
                    Errno::EKEYREJECTED,
                    format!(
                        "server {server} uses key {}, which this node's key file does not hold \
                     (a key rotation not finished here?)",
                        crate::key::hex(&challenge.key_id)
                    ),
                )
            })?
        }
        (ClientProof::Munge { .. }, None) => unreachable!("a MUNGE proof always has its secret"),
    };
    let d = digest(&hello, &challenge);
    if !verify(&key, b"pvfs server proof", &d, &challenge.proof) {
        return Err(reject(
            Errno::EKEYREJECTED,
            format!("server {server} failed to prove it holds the file system's key"),
        ));
    }
    send(
        w,
        &HandshakeMsg::Proof(Proof {
            proof: prove(&key, b"pvfs client proof", &d),
        }),
    )
    .await?;
    match recv(r).await? {
        HandshakeMsg::Welcome(welcome) => Ok(ClientSession {
            macs: session(&key, &d, true),
            welcome,
        }),
        HandshakeMsg::Refused { errno, message } => Err(HandshakeError::Refused {
            errno: Errno(errno),
            message,
        }),
        other => Err(HandshakeError::Io(format!(
            "handshake: expected Welcome, got {}",
            other.name()
        ))),
    }
}

/// Accepts a connection as a server. `peer` is the client's address when known (for
/// root squash). `admit` decides, once the client is proven and before it is told it
/// got in, whether the server takes it (a connection slot, say): its error is sent as
/// the refusal. The caller bounds the whole with a deadline. On a refusal the client
/// has been told why; the caller logs it and closes.
pub async fn server<R, W, T>(
    r: &mut R,
    w: &mut W,
    policy: &ServerPolicy,
    peer: Option<IpAddr>,
    admit: impl FnOnce(&Identity) -> Result<T, (Errno, String)>,
) -> Result<(ServerSession, T), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let result = accept(r, w, policy, peer, admit).await;
    if let Err(HandshakeError::Rejected { errno, message }) = &result {
        let _ = send(
            w,
            &HandshakeMsg::Refused {
                errno: errno.0,
                message: message.clone(),
            },
        )
        .await;
    }
    result
}

async fn accept<R, W, T>(
    r: &mut R,
    w: &mut W,
    policy: &ServerPolicy,
    peer: Option<IpAddr>,
    admit: impl FnOnce(&Identity) -> Result<T, (Errno, String)>,
) -> Result<(ServerSession, T), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let reject = |errno: Errno, message: String| HandshakeError::Rejected { errno, message };
    let hello = match recv(r).await? {
        HandshakeMsg::Hello(h) => h,
        other => {
            return Err(reject(
                Errno::EPROTO,
                format!("handshake: expected Hello, got {}", other.name()),
            ))
        }
    };
    if hello.version != HANDSHAKE_VERSION {
        return Err(reject(
            Errno::EPROTO,
            format!(
                "handshake version {} (this server speaks {HANDSHAKE_VERSION})",
                hello.version
            ),
        ));
    }
    let serves = hello.server == policy.server
        || policy
            .groups
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&hello.server);
    if hello.fsid != policy.fsid || !serves {
        return Err(reject(
            Errno::ESTALE,
            format!(
                "this is server {} of file system {:#x}, not {} of {:#x}: \
                 the client's configuration does not match the servers",
                policy.server, policy.fsid, hello.server, hello.fsid
            ),
        ));
    }
    if hello.nonce.len() != NONCE_LEN {
        return Err(reject(Errno::EPROTO, "handshake: bad nonce".into()));
    }
    let (key, key_id, identity) = match &hello.method {
        Method::Key => {
            let k = policy.keys.current().clone();
            let id = k.id().to_vec();
            (k, id, Identity::Trusted)
        }
        Method::Munge { credential } => {
            let munge = policy.munge.clone().map_err(|why| {
                reject(
                    Errno::ENOKEY,
                    format!(
                        "server {} cannot check MUNGE credentials: {why}",
                        policy.server
                    ),
                )
            })?;
            if credential.len() > MAX_CREDENTIAL {
                return Err(reject(Errno::EPROTO, "MUNGE credential too long".into()));
            }
            let cred = credential.clone();
            let decoded = tokio::task::spawn_blocking(move || munge.decode(&cred))
                .await
                .map_err(|e| HandshakeError::Io(format!("MUNGE: {e}")))?
                .map_err(|e| reject(Errno::EKEYREJECTED, e.to_string()))?;
            let payload: MungePayload = decode(&decoded.payload).map_err(|_| {
                reject(
                    Errno::EKEYREJECTED,
                    "the MUNGE credential does not carry a pvfs handshake".into(),
                )
            })?;
            if payload.fsid != hello.fsid
                || payload.server != hello.server
                || payload.nonce != hello.nonce
                || payload.secret.len() != NONCE_LEN
            {
                return Err(reject(
                    Errno::EKEYREJECTED,
                    "the MUNGE credential was made for another handshake".into(),
                ));
            }
            let mut k = [0u8; 32];
            k.copy_from_slice(&payload.secret);
            let squashed = decoded.uid == 0
                && policy.root_squash
                && !peer.is_some_and(|p| policy.trusted.contains(&p));
            let (uid, gid) = (decoded.uid, decoded.gid);
            let groups = tokio::task::spawn_blocking(move || groups_of(uid, gid))
                .await
                .unwrap_or_else(|_| vec![gid]);
            let identity = Identity::User {
                uid,
                gid,
                groups,
                squashed,
            };
            (Key::from_bytes(k), Vec::new(), identity)
        }
    };
    let mut challenge = Challenge {
        fsid: policy.fsid,
        server: hello.server.clone(),
        nonce: nonce()?,
        key_id,
        proof: Vec::new(),
    };
    let d = digest(&hello, &challenge);
    challenge.proof = prove(&key, b"pvfs server proof", &d);
    send(w, &HandshakeMsg::Challenge(challenge)).await?;
    let proof = match recv(r).await? {
        HandshakeMsg::Proof(p) => p,
        HandshakeMsg::Refused { errno, message } => {
            return Err(HandshakeError::Refused {
                errno: Errno(errno),
                message,
            })
        }
        other => {
            return Err(reject(
                Errno::EPROTO,
                format!("handshake: expected Proof, got {}", other.name()),
            ))
        }
    };
    if !verify(&key, b"pvfs client proof", &d, &proof.proof) {
        return Err(reject(
            Errno::EKEYREJECTED,
            "the client failed to prove it holds the file system's key".into(),
        ));
    }
    let admitted = admit(&identity).map_err(|(errno, message)| reject(errno, message))?;
    let welcome = match identity.acts_as() {
        None => Welcome {
            trusted: true,
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        },
        Some((uid, gid, groups)) => Welcome {
            trusted: false,
            uid,
            gid,
            groups,
        },
    };
    send(w, &HandshakeMsg::Welcome(welcome)).await?;
    Ok((
        ServerSession {
            macs: session(&key, &d, false),
            identity,
            client: hello.client,
            server: hello.server,
        },
        admitted,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(keys: &KeyRing) -> ServerPolicy {
        ServerPolicy {
            fsid: 42,
            server: "s0".into(),
            groups: Arc::new(std::sync::RwLock::new(vec!["s3".into()])),
            keys: Arc::new(keys.clone()),
            munge: Err("not in this test".into()),
            root_squash: true,
            trusted: Vec::new(),
        }
    }

    async fn run(
        server_keys: &KeyRing,
        client: ClientProof,
        fsid: u64,
        name: &str,
    ) -> (
        Result<ClientSession, HandshakeError>,
        Result<ServerSession, HandshakeError>,
    ) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (mut ar, mut aw) = tokio::io::split(a);
        let (mut br, mut bw) = tokio::io::split(b);
        let p = policy(server_keys);
        let s = async move {
            let r = server(&mut br, &mut bw, &p, None, |_| Ok(())).await;
            drop(bw);
            r.map(|(s, ())| s)
        };
        let c = async move {
            let r = super::client(&mut ar, &mut aw, &client, fsid, name, "test").await;
            drop(aw);
            r
        };
        tokio::join!(c, s)
    }

    #[tokio::test]
    async fn same_key_opens_and_keys_the_session() {
        let ring = KeyRing::generate().unwrap();
        let (c, s) = run(&ring, ClientProof::Key(Arc::new(ring.clone())), 42, "s0").await;
        let mut c = c.unwrap();
        let mut s = s.unwrap();
        assert!(c.welcome.trusted);
        assert_eq!(s.identity, Identity::Trusted);
        assert_eq!(s.server, "s0");
        // A group it took over opens by that group's name (and says so).
        let (gc, gs) = run(&ring, ClientProof::Key(Arc::new(ring.clone())), 42, "s3").await;
        gc.unwrap();
        assert_eq!(gs.unwrap().server, "s3");
        // Any other name is refused.
        let (oc, os) = run(&ring, ClientProof::Key(Arc::new(ring.clone())), 42, "s2").await;
        assert!(oc.is_err() && os.is_err());
        let h = [3u8; HEADER_LEN];
        let tag = c.macs.send.seal(&h, b"req");
        s.macs.recv.open(&h, b"req", &tag).unwrap();
        let tag = s.macs.send.seal(&h, b"resp");
        c.macs.recv.open(&h, b"resp", &tag).unwrap();
    }

    #[tokio::test]
    async fn wrong_key_fsid_or_name_is_refused_with_a_reason() {
        let ring = KeyRing::generate().unwrap();
        let other = KeyRing::generate().unwrap();
        let (c, s) = run(&ring, ClientProof::Key(Arc::new(other.clone())), 42, "s0").await;
        let e = c.unwrap_err();
        assert!(e.to_string().contains("does not hold"), "{e}");
        assert!(s.is_err());

        // A client that holds the server's key among others (a rotation) gets in.
        let both = KeyRing::new(vec![other.current().clone(), ring.current().clone()]);
        let (c, _) = run(&ring, ClientProof::Key(Arc::new(both)), 42, "s0").await;
        c.unwrap();

        let (c, s) = run(&ring, ClientProof::Key(Arc::new(ring.clone())), 43, "s0").await;
        let e = c.unwrap_err();
        assert!(matches!(e, HandshakeError::Refused { .. }), "{e:?}");
        assert!(
            e.to_string()
                .contains("this is server s0 of file system 0x2a"),
            "{e}"
        );
        assert!(s.is_err());
        let (c, _) = run(&ring, ClientProof::Key(Arc::new(ring.clone())), 42, "s1").await;
        assert!(c.unwrap_err().to_string().contains("not s1"));
    }

    #[tokio::test]
    async fn a_client_without_the_key_cannot_fake_a_proof() {
        let ring = KeyRing::generate().unwrap();
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (mut ar, mut aw) = tokio::io::split(a);
        let (mut br, mut bw) = tokio::io::split(b);
        let p = policy(&ring);
        let s = tokio::spawn(async move { server(&mut br, &mut bw, &p, None, |_| Ok(())).await });
        let hello = Hello {
            version: HANDSHAKE_VERSION,
            fsid: 42,
            server: "s0".into(),
            nonce: vec![0; NONCE_LEN],
            method: Method::Key,
            client: "raw".into(),
        };
        send(&mut aw, &HandshakeMsg::Hello(hello)).await.unwrap();
        assert!(matches!(
            recv(&mut ar).await.unwrap(),
            HandshakeMsg::Challenge(_)
        ));
        send(
            &mut aw,
            &HandshakeMsg::Proof(Proof {
                proof: vec![0; PROOF_LEN],
            }),
        )
        .await
        .unwrap();
        match recv(&mut ar).await.unwrap() {
            HandshakeMsg::Refused { errno, message } => {
                assert_eq!(Errno(errno), Errno::EKEYREJECTED);
                assert!(message.contains("failed to prove"), "{message}");
            }
            other => panic!("expected Refused, got {other:?}"),
        }
        assert!(s.await.unwrap().is_err());
    }
}
