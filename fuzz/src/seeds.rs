//! Seed inputs for the fuzz targets, made from code so none is an opaque file: one
//! valid body of every request kind and of every response kind, valid frame headers,
//! the frames of a valid handshake, a generated configuration, a key file and a group
//! handle. `src/bin/seeds.rs` writes them where `scripts/fuzz` gives them to libFuzzer.
//!
//! The message bodies are found by asking the decoder, not written out by hand: for
//! each variant tag, the first byte string in byte order that starts with the tag and
//! decodes (see [`first_valid`]). So every kind the decoder knows gets a seed, and the
//! seeds follow the wire format when it changes.

use pvfs_proto::codec::DecodeError;
use pvfs_proto::frame::{FrameHeader, FrameKind, FLAG_END};
use pvfs_proto::handshake::{HandshakeMsg, Hello, Method, HANDSHAKE_VERSION, NONCE_LEN};
use pvfs_proto::{decode, encode, Creds, Request, RequestBody, Response, Wire};

/// Decode attempts [`first_valid`] makes per variant before it gives up.
const SEARCH_BUDGET: usize = 1 << 20;

/// The first byte string, in byte order, that starts with `prefix` and decodes as a
/// `T`, or None if there is none within the search budget. Depth first: a string the
/// decoder finds too short grows by a zero byte; one it refuses (an unknown tag, a
/// value out of range, bad UTF-8) gets its last byte increased, carrying into the
/// byte before when it overflows. The codec reads front to back, so a refused string
/// is refused whatever follows it, and no valid string is skipped.
pub fn first_valid<T: Wire>(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut b = prefix.to_vec();
    for _ in 0..SEARCH_BUDGET {
        match decode::<T>(&b) {
            Ok(_) => return Some(b),
            Err(DecodeError::Truncated { .. }) => b.push(0),
            // A shorter string is complete (a bumped tag chose a smaller variant).
            Err(DecodeError::Trailing(n)) => {
                b.truncate(b.len() - n);
                if b.len() < prefix.len() {
                    return None;
                }
            }
            Err(_) => loop {
                if b.len() <= prefix.len() {
                    return None;
                }
                let last = b.last_mut()?;
                if *last == u8::MAX {
                    b.pop();
                } else {
                    *last += 1;
                    break;
                }
            },
        }
    }
    None
}

/// One valid encoding of every variant of a `u16`-tagged enum (a request after
/// `prefix`, or a response), named by the variant.
fn every_variant<T: Wire>(prefix: &[u8], name: impl Fn(&T) -> &'static str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    // Tags in use are small; 1024 is well past the last.
    for tag in 0..=1024u16 {
        let mut start = prefix.to_vec();
        start.extend_from_slice(&tag.to_le_bytes());
        if let Some(bytes) = first_valid::<T>(&start) {
            let value = decode::<T>(&bytes).expect("first_valid returns decodable bytes");
            out.push((name(&value).to_string(), bytes));
        }
    }
    out
}

/// The encoded credentials request seeds carry (uid and gid 1000, one group).
fn creds() -> Vec<u8> {
    encode(&Creds {
        uid: 1000,
        gid: 1000,
        groups: vec![1000],
    })
}

/// One valid body of every request kind, named by the kind.
pub fn request_bodies() -> Vec<(String, Vec<u8>)> {
    every_variant::<RequestBody>(&creds(), |b| b.request.op_name())
}

/// One valid body of every response kind, named by the kind.
pub fn responses() -> Vec<(String, Vec<u8>)> {
    every_variant::<Response>(&[], |r| r.op_name())
}

/// Every request kind the decoder knows, in tag order (the seeds must cover them).
pub fn request_kinds() -> &'static [&'static str] {
    Request::OP_NAMES
}

/// Every response kind the decoder knows.
pub fn response_kinds() -> &'static [&'static str] {
    Response::OP_NAMES
}

/// A frame header of `kind` announcing these lengths.
pub fn header(kind: FrameKind, body_len: u32, tag_len: u16, data_len: u32) -> [u8; 32] {
    FrameHeader {
        kind,
        flags: FLAG_END,
        request_id: 7,
        body_len,
        tag_len,
        data_len,
    }
    .encode()
}

/// Valid frame headers: one of each kind.
pub fn frame_headers() -> Vec<(String, Vec<u8>)> {
    [
        ("request", FrameKind::Request, 40, 16, 0),
        ("response", FrameKind::Response, 12, 16, 4096),
        ("data", FrameKind::Data, 0, 16, 65536),
        ("handshake", FrameKind::Handshake, 100, 0, 0),
    ]
    .into_iter()
    .map(|(name, kind, b, t, d)| (name.to_string(), header(kind, b, t, d).to_vec()))
    .collect()
}

/// A handshake frame carrying `msg`, as `pvfs_auth::handshake` sends it.
pub fn handshake_frame(msg: &HandshakeMsg) -> Vec<u8> {
    let body = encode(msg);
    let mut out = header(FrameKind::Handshake, body.len() as u32, 0, 0).to_vec();
    out[8..16].fill(0);
    out.extend_from_slice(&body);
    out
}

/// The Hello a client holding the key sends to the fuzz targets' server.
pub fn hello() -> HandshakeMsg {
    HandshakeMsg::Hello(Hello {
        version: HANDSHAKE_VERSION,
        fsid: crate::FSID,
        server: crate::SERVER.into(),
        nonce: vec![0x11; NONCE_LEN],
        method: Method::Key,
        client: "seed".into(),
    })
}

/// Every target's seeds: (target, [(name, bytes)]). Fails if a request or response
/// kind has no seed.
pub fn all() -> Result<Vec<(&'static str, Vec<(String, Vec<u8>)>)>, String> {
    let requests = request_bodies();
    let responses = responses();
    for (what, kinds, seeds) in [
        ("request", request_kinds(), &requests),
        ("response", response_kinds(), &responses),
    ] {
        let missing: Vec<&str> = kinds
            .iter()
            .copied()
            .filter(|k| !seeds.iter().any(|(n, _)| n == k))
            .collect();
        if !missing.is_empty() {
            return Err(format!("no valid {what} body found for {missing:?}"));
        }
    }
    Ok(vec![
        ("frame_header", frame_headers()),
        ("request_body", requests),
        ("response", responses),
    ])
}

/// Writes [`all`] under `dir` (`dir/TARGET/NAME`); returns how many seeds each
/// target got.
pub fn write_all(dir: &std::path::Path) -> Result<Vec<(&'static str, usize)>, String> {
    let mut counts = Vec::new();
    for (target, seeds) in all()? {
        let to = dir.join(target);
        std::fs::create_dir_all(&to).map_err(|e| format!("{}: {e}", to.display()))?;
        for (name, bytes) in &seeds {
            let file = to.join(name);
            std::fs::write(&file, bytes).map_err(|e| format!("{}: {e}", file.display()))?;
        }
        counts.push((target, seeds.len()));
    }
    Ok(counts)
}
