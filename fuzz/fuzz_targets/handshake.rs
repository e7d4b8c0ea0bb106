//! The handshake that opens every connection (`pvfs_auth::handshake`), both sides,
//! with the file system's real key and a server's policy. The first input byte picks
//! one of three games:
//!
//! - 0: the rest is everything a client sends to a server: the server must refuse it
//!   (no byte string proves the key without knowing the server's fresh nonce);
//! - 1: the rest is everything a server sends to a client: the client must refuse it
//!   (likewise);
//! - 2: a real client and a real server talk through a relay that changes the
//!   messages as the rest of the input says (a new body, a byte flipped, a body cut
//!   short, a header byte changed; none at all). Neither side may accept a message
//!   that was changed where it counts: the server opens only if the Hello, the
//!   Challenge and the Proof arrived as sent, the client only if the Hello and the
//!   Challenge did; unchanged messages open both sides with session keys that agree;
//!   a server that refuses the client (no connection slot) never opens.
//!
//! Every wait is bounded as the callers bound it (their request or connect deadline),
//! so a side that waits forever shows as a hang.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use pvfs_auth::handshake::{
    self, ClientProof, ClientSession, HandshakeError, Identity, ServerSession,
};
use pvfs_proto::frame::HEADER_LEN;
use pvfs_proto::Errno;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, SimplexStream, WriteHalf};

/// The deadline the server's and the client's callers give the handshake.
const DEADLINE: Duration = Duration::from_secs(30);
/// Largest message the relay parses (the handshake's own limit); after a header
/// announcing more it passes bytes on untouched.
const MAX_MESSAGE: usize = handshake::MAX_MESSAGE as usize;

type Reader = ReadHalf<SimplexStream>;
type Writer = WriteHalf<SimplexStream>;

fn client_proof() -> ClientProof {
    ClientProof::Key(pvfs_fuzz::fs_key())
}

fn admit(refuse: bool) -> impl FnOnce(&Identity) -> Result<(), (Errno, String)> {
    move |_| {
        if refuse {
            Err((Errno::EAGAIN, "no connection slot left".into()))
        } else {
            Ok(())
        }
    }
}

/// Game 0: the server reads `bytes`, then the end of the stream.
fn to_server(bytes: &[u8]) {
    let policy = pvfs_fuzz::server_policy();
    let opened = pvfs_fuzz::run("server handshake", async {
        let mut r = pvfs_fuzz::Trickle::new(bytes.to_vec(), bytes.len(), None);
        let mut w = tokio::io::sink();
        handshake::server(&mut r, &mut w, &policy, None, admit(false)).await
    });
    assert!(
        opened.is_err(),
        "the server accepted a client that does not hold the key: {bytes:?}"
    );
}

/// Game 1: the client reads `bytes`, then the end of the stream.
fn to_client(bytes: &[u8]) {
    let opened = pvfs_fuzz::run("client handshake", async {
        let mut r = pvfs_fuzz::Trickle::new(bytes.to_vec(), bytes.len(), None);
        let mut w = tokio::io::sink();
        handshake::client(
            &mut r,
            &mut w,
            &client_proof(),
            pvfs_fuzz::FSID,
            pvfs_fuzz::SERVER,
            "fuzz",
        )
        .await
    });
    assert!(
        opened.is_err(),
        "the client accepted a server that does not hold the key: {bytes:?}"
    );
}

#[derive(Arbitrary, Debug)]
enum Change {
    /// A new body.
    Body(Vec<u8>),
    /// One body byte xored (index modulo the length).
    Flip { at: u16, xor: u8 },
    /// The body cut to this length (if shorter).
    Cut(u16),
    /// One header byte xored, after the header was set for the new body.
    Header { at: u8, xor: u8 },
}

#[derive(Arbitrary, Debug)]
struct Edit {
    /// Which way: client to server, or server to client.
    to_server: bool,
    /// The message, counted from 0 in its direction.
    message: u8,
    change: Change,
}

#[derive(Arbitrary, Debug)]
struct Relay {
    edits: Vec<Edit>,
    /// The server has no connection slot for the client.
    refuse: bool,
    client_name: String,
}

/// Passes the frames from `from` to `to`, changing message `i` by `changes(i)`;
/// returns for each message passed whether its receiver reads it as it was sent
/// (same body; same header but for the flags' end bit and the request id, which a
/// handshake does not read).
async fn relay(mut from: Reader, mut to: Writer, changes: Vec<(u8, &Change)>) -> Vec<bool> {
    let mut intact = Vec::new();
    loop {
        let mut h = [0u8; HEADER_LEN];
        if from.read_exact(&mut h).await.is_err() {
            break;
        }
        let len = u32::from_le_bytes([h[16], h[17], h[18], h[19]]) as usize;
        if len > MAX_MESSAGE {
            // Not a message the receiver reads: pass everything on as it is.
            intact.push(true);
            let _ = to.write_all(&h).await;
            let _ = tokio::io::copy(&mut from, &mut to).await;
            break;
        }
        let mut body = vec![0u8; len];
        if from.read_exact(&mut body).await.is_err() {
            break;
        }
        let index = intact.len();
        let mut new_body = body.clone();
        let mut header_xor = Vec::new();
        for (_, change) in changes.iter().filter(|(m, _)| usize::from(*m) == index) {
            match change {
                Change::Body(b) => new_body = b.clone(),
                Change::Flip { at, xor } => {
                    if !new_body.is_empty() {
                        let i = usize::from(*at) % new_body.len();
                        new_body[i] ^= xor;
                    }
                }
                Change::Cut(n) => new_body.truncate(usize::from(*n)),
                Change::Header { at, xor } => {
                    header_xor.push((usize::from(*at) % HEADER_LEN, *xor))
                }
            }
        }
        let mut new_h = h;
        new_h[16..20].copy_from_slice(&(new_body.len() as u32).to_le_bytes());
        for (at, xor) in header_xor {
            new_h[at] ^= xor;
        }
        let unread = |i: usize| (8..16).contains(&i) || (i == 7 && new_h[7] <= 1);
        let same_header = (0..HEADER_LEN).all(|i| new_h[i] == h[i] || unread(i));
        intact.push(same_header && new_body == body);
        if to.write_all(&new_h).await.is_err() || to.write_all(&new_body).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
    intact
}

async fn as_server(
    mut r: Reader,
    mut w: Writer,
    refuse: bool,
) -> Result<ServerSession, HandshakeError> {
    let policy = pvfs_fuzz::server_policy();
    let opened = tokio::time::timeout(
        DEADLINE,
        handshake::server(&mut r, &mut w, &policy, None, admit(refuse)),
    )
    .await;
    let _ = w.shutdown().await;
    match opened {
        Ok(o) => o.map(|(session, ())| session),
        Err(_) => Err(HandshakeError::Io("the request deadline passed".into())),
    }
}

async fn as_client(
    mut r: Reader,
    mut w: Writer,
    name: &str,
) -> Result<ClientSession, HandshakeError> {
    let proof = client_proof();
    let opened = tokio::time::timeout(
        DEADLINE,
        handshake::client(
            &mut r,
            &mut w,
            &proof,
            pvfs_fuzz::FSID,
            pvfs_fuzz::SERVER,
            name,
        ),
    )
    .await;
    let _ = w.shutdown().await;
    opened.unwrap_or_else(|_| Err(HandshakeError::Io("the connect deadline passed".into())))
}

/// Game 2.
fn relayed(relay_spec: &Relay) {
    let to_server: Vec<(u8, &Change)> = relay_spec
        .edits
        .iter()
        .filter(|e| e.to_server)
        .map(|e| (e.message, &e.change))
        .collect();
    let to_client: Vec<(u8, &Change)> = relay_spec
        .edits
        .iter()
        .filter(|e| !e.to_server)
        .map(|e| (e.message, &e.change))
        .collect();
    let (client, server, up, down) = pvfs_fuzz::run("relayed handshake", async {
        let (c_out_r, c_out_w) = tokio::io::simplex(1 << 16);
        let (s_in_r, s_in_w) = tokio::io::simplex(1 << 16);
        let (s_out_r, s_out_w) = tokio::io::simplex(1 << 16);
        let (c_in_r, c_in_w) = tokio::io::simplex(1 << 16);
        tokio::join!(
            as_client(c_in_r, c_out_w, &relay_spec.client_name),
            as_server(s_in_r, s_out_w, relay_spec.refuse),
            relay(c_out_r, s_in_w, to_server),
            relay(s_out_r, c_in_w, to_client),
        )
    });
    // Messages: up = [Hello, Proof or the client's Refused], down = [Challenge or the
    // server's Refused, Welcome or Refused].
    let arrived = |v: &[bool], i: usize| v.get(i).copied().unwrap_or(false);
    let hello = arrived(&up, 0);
    let proof = arrived(&up, 1);
    let challenge = arrived(&down, 0);
    let everything = up.iter().chain(&down).all(|&b| b);
    if server.is_ok() {
        assert!(
            !relay_spec.refuse,
            "the server opened a connection it refused"
        );
        assert!(
            hello && proof && challenge,
            "the server opened after a changed message: up {up:?} down {down:?}"
        );
    }
    if client.is_ok() {
        assert!(
            hello && challenge,
            "the client opened after a changed message: up {up:?} down {down:?}"
        );
    }
    if everything && !relay_spec.refuse {
        assert!(
            client.is_ok() && server.is_ok(),
            "an unchanged handshake failed: client {:?}, server {:?}",
            client.as_ref().err(),
            server.as_ref().err()
        );
    }
    if relay_spec.refuse && arrived(&down, 1) {
        assert!(
            client.is_err(),
            "the client opened a connection the server refused"
        );
    }
    if let (Ok(mut c), Ok(mut s)) = (client, server) {
        assert_eq!(s.identity, Identity::Trusted);
        assert_eq!(s.client, relay_spec.client_name);
        if arrived(&down, 1) {
            assert!(
                c.welcome.trusted,
                "a key holder was not welcomed as trusted"
            );
        }
        // The two sides derived the same session: each opens what the other seals.
        let h = [7u8; HEADER_LEN];
        let tag = c.macs.send.seal(&h, b"request");
        assert!(
            s.macs.recv.open(&h, b"request", &tag).is_ok(),
            "server cannot open the client's frame"
        );
        let tag = s.macs.send.seal(&h, b"answer");
        assert!(
            c.macs.recv.open(&h, b"answer", &tag).is_ok(),
            "client cannot open the server's frame"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&game, rest)) = data.split_first() else {
        return;
    };
    match game % 3 {
        0 => to_server(rest),
        1 => to_client(rest),
        _ => {
            if let Ok(spec) = Relay::arbitrary_take_rest(Unstructured::new(rest)) {
                relayed(&spec);
            }
        }
    }
});
