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
fn every_variant<T: Wire>(
    prefix: &[u8],
    name: impl Fn(&T) -> &'static str,
) -> Vec<(String, Vec<u8>)> {
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

/// The handshake target's games (its first byte) started right: a client's Hello
/// for the server to refuse (0), a Challenge from a server using the key for the
/// client to refuse (1), an unchanged relayed handshake (2).
pub fn handshake() -> Vec<(String, Vec<u8>)> {
    let mut to_server = vec![0];
    to_server.extend_from_slice(&handshake_frame(&hello()));
    let challenge = HandshakeMsg::Challenge(pvfs_proto::handshake::Challenge {
        fsid: crate::FSID,
        server: crate::SERVER.into(),
        nonce: vec![0x22; NONCE_LEN],
        key_id: crate::fs_key().current().id().to_vec(),
        proof: vec![0x33; pvfs_proto::handshake::PROOF_LEN],
    });
    let mut to_client = vec![1];
    to_client.extend_from_slice(&handshake_frame(&challenge));
    vec![
        ("hello".to_string(), to_server),
        ("challenge".to_string(), to_client),
        ("relayed".to_string(), vec![2]),
    ]
}

/// A configuration, a key file, a size and a duration as the text they are read
/// from (the `text_formats` target's first byte picks which).
pub fn text_formats() -> Vec<(String, Vec<u8>)> {
    let with = |which: u8, text: String| {
        let mut b = vec![which];
        b.extend_from_slice(text.as_bytes());
        b
    };
    vec![
        ("config".to_string(), with(0, group_config().to_toml())),
        (
            "key".to_string(),
            with(1, crate::fs_key().to_text("the fuzzer's key")),
        ),
        ("size".to_string(), with(2, "64K".into())),
        ("duration".to_string(), with(3, "1500ms".into())),
    ]
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

/// Named inputs: (name, bytes).
pub type Seeds = Vec<(String, Vec<u8>)>;

/// Every target's seeds: (target, its seeds). Fails if a request or response kind
/// has no seed.
pub fn all() -> Result<Vec<(&'static str, Seeds)>, String> {
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
    let wire_values = crate::values::TYPES
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let mut bytes = vec![i as u8];
            bytes.extend_from_slice(&(t.seed)()?);
            Some((t.name.to_string(), bytes))
        })
        .collect();
    Ok(vec![
        ("frame_header", frame_headers()),
        ("request_body", requests),
        ("response", responses),
        ("wire_values", wire_values),
        ("handshake", handshake()),
        ("text_formats", text_formats()),
        ("group_handle", vec![("valid".to_string(), group_handle())]),
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

/// The configuration of the client the `group_handle` target opens tokens with: a
/// file system of three servers with id [`crate::FSID`] (nothing on disk is read but
/// its key file, which need not exist: no request is sent).
pub fn group_config() -> pvfs_config::Config {
    let mut opts = pvfs_config::GenOptions::new(3, "/nonexistent/pvfs-fuzz");
    opts.fsid = Some(crate::FSID);
    pvfs_config::Config::generate(&opts).expect("a three-server configuration generates")
}

/// A valid layout: one datafile on server 0, 64 KiB stripes.
pub fn layout() -> pvfs_proto::layout::Layout {
    pvfs_proto::layout::Layout {
        stripe_size: 64 << 10,
        replicas: 1,
        datafiles: vec![pvfs_proto::Datafile::single(0, 0x0200_0000_0000_0001)],
        width: 1,
    }
}

/// A valid group handle of [`group_config`]'s file system, as `openg` lays it out
/// (`crates/client/src/group.rs`): magic, version, flags, fsid, handle, the layout,
/// the capabilities, a CRC32C.
pub fn group_handle() -> Vec<u8> {
    let handle: u64 = 0x0100_0000_0000_0042;
    let layout = encode(&layout());
    let caps = encode(&vec![pvfs_proto::Capability {
        handle,
        rights: pvfs_proto::rights::READ,
        uid: 1000,
        expires: 1 << 40,
        mac: vec![0xa5; pvfs_proto::cap::CAP_MAC_LEN],
    }]);
    let mut out = Vec::new();
    out.extend_from_slice(b"PVGH");
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&crate::FSID.to_le_bytes());
    out.extend_from_slice(&handle.to_le_bytes());
    out.extend_from_slice(&(layout.len() as u32).to_le_bytes());
    out.extend_from_slice(&layout);
    out.extend_from_slice(&(caps.len() as u32).to_le_bytes());
    out.extend_from_slice(&caps);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}
