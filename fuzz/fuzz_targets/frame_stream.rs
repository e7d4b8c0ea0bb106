//! Frames read from a byte stream as a server reads them once a connection is open
//! (`crates/server/src/connection.rs`): `read_header_within` with its deadline,
//! `FrameHeader::decode`, `read_payload` under the request deadline, `check_tag`
//! with the session's MAC, then the body of a request decoded.
//!
//! The stream is made of frames the fuzzer describes (kind, flags, body, data, a tag
//! that is the right one or not, a header byte changed after sealing), bytes after
//! them, reads of any size, and possibly a peer that goes silent. The reader must
//! accept exactly the frames a client holding the session key sealed, in order and
//! unaltered, give them back as sent, stop at the first other one, and end for the
//! reason the bytes call for: a clean end, a stream that ends or stalls inside a
//! frame (a deadline, never a hang), a header refused, or a tag refused.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use pvfs_auth::mac::Direction;
use pvfs_auth::{FrameMac, TAG_LEN};
use pvfs_proto::frame::{FrameHeader, FrameKind, HEADER_LEN};
use pvfs_proto::RequestBody;
use pvfs_transport::frames::{check_tag, read_header_within, read_payload};
use pvfs_transport::{BufPool, TransportError};

/// The server's `[timeouts] request` (the rest of a frame must come within it).
const REQUEST: Duration = Duration::from_secs(30);
/// The server's `[timeouts] idle` (a silent connection is closed after it).
const IDLE: Duration = Duration::from_secs(300);
const SESSION_KEY: [u8; 32] = [0x3c; 32];

#[derive(Arbitrary, Debug)]
enum Tag {
    /// The tag the sender's MAC gives this frame.
    Sealed,
    /// No tag at all.
    Missing,
    /// Other bytes.
    Bytes(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct FrameSpec {
    kind: u8,
    flags: u8,
    request_id: u64,
    /// One of the seed request bodies instead of `body` (index into them).
    seed_body: Option<u8>,
    body: Vec<u8>,
    data_len: u16,
    tag: Tag,
    /// A header byte changed after the frame was sealed: (index mod 32, xor).
    patch: Option<(u8, u8)>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    frames: Vec<FrameSpec>,
    tail: Vec<u8>,
    /// Largest read (0: 1 byte at a time).
    chunk: u16,
    /// The peer goes silent after this many bytes.
    stall_at: Option<u16>,
}

/// Why reading stopped.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The stream ended between frames.
    Clean,
    /// Silent between frames for the idle time.
    Idle,
    /// The stream ended inside a frame.
    Cut,
    /// The rest of a header or a payload did not come in time.
    Late,
    /// A header the format refuses.
    BadHeader,
    /// A tag the session's MAC refuses.
    BadTag,
}

struct Received {
    header: FrameHeader,
    body: Vec<u8>,
    data: Vec<u8>,
}

/// Reads frames from `r` as the server does, until something stops it.
async fn serve(r: &mut pvfs_fuzz::Trickle) -> (Vec<Received>, End) {
    static POOL: std::sync::OnceLock<BufPool> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| BufPool::new(64 << 10, 4));
    let mut mac = Some(FrameMac::new(&SESSION_KEY, Direction::ToServer));
    let mut got = Vec::new();
    loop {
        let first = tokio::time::timeout(IDLE, read_header_within(r, Some(REQUEST))).await;
        let raw = match first {
            Err(_) => return (got, End::Idle),
            Ok(Ok(Some(raw))) => raw,
            Ok(Ok(None)) => return (got, End::Clean),
            Ok(Err(TransportError::Timeout { .. })) => return (got, End::Late),
            Ok(Err(TransportError::Closed(_))) => return (got, End::Cut),
            Ok(Err(e)) => panic!("reading a header from memory failed: {e}"),
        };
        let Ok(header) = FrameHeader::decode(&raw) else {
            return (got, End::BadHeader);
        };
        let frame = match tokio::time::timeout(REQUEST, read_payload(r, header, pool)).await {
            Err(_) => return (got, End::Late),
            Ok(Err(TransportError::Closed(_))) => return (got, End::Cut),
            Ok(Err(e)) => panic!("reading a payload from memory failed: {e}"),
            Ok(Ok(f)) => f,
        };
        assert_eq!(frame.body.len(), header.body_len as usize);
        assert_eq!(frame.tag.len(), header.tag_len as usize);
        assert_eq!(frame.data.len(), header.data_len as usize);
        if check_tag(&mut mac, &header, &frame.body, &frame.tag).is_err() {
            return (got, End::BadTag);
        }
        if header.kind == FrameKind::Request {
            pvfs_fuzz::round_trip::<RequestBody>(&frame.body);
        }
        got.push(Received {
            header,
            body: frame.body,
            data: frame.data.to_vec(),
        });
    }
}

fuzz_target!(|input: Input| {
    let seeds = request_seeds();
    let mut sender = FrameMac::new(&SESSION_KEY, Direction::ToServer);
    let mut stream = Vec::new();
    // (where the frame starts, its header, body and data) of the frames a client
    // holding the key sent: sealed, unaltered.
    let mut genuine = Vec::new();
    let mut all_genuine = true;
    for (i, f) in input.frames.iter().take(12).enumerate() {
        let body = match f.seed_body {
            Some(k) => seeds[k as usize % seeds.len()].clone(),
            None => f.body.clone(),
        };
        let data: Vec<u8> = (0..f.data_len % 8192)
            .map(|j| (i as u16 ^ j) as u8)
            .collect();
        let tag_len = match &f.tag {
            Tag::Sealed => TAG_LEN,
            Tag::Missing => 0,
            Tag::Bytes(b) => b.len(),
        };
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(b"PVFS");
        h[4..6].copy_from_slice(&pvfs_proto::frame::PROTOCOL_VERSION.to_le_bytes());
        h[6] = f.kind;
        h[7] = f.flags;
        h[8..16].copy_from_slice(&f.request_id.to_le_bytes());
        h[16..20].copy_from_slice(&(body.len() as u32).to_le_bytes());
        h[20..22].copy_from_slice(&(tag_len as u16).to_le_bytes());
        h[24..28].copy_from_slice(&(data.len() as u32).to_le_bytes());
        // The tag this frame must carry to be accepted (the sender's next).
        let right = sender.seal(&h, &body);
        let tag = match &f.tag {
            Tag::Sealed => right.to_vec(),
            Tag::Missing => Vec::new(),
            Tag::Bytes(b) => b.clone(),
        };
        let mut sent = h;
        if let Some((at, xor)) = f.patch {
            sent[at as usize % HEADER_LEN] ^= xor;
        }
        let valid_header = FrameHeader::decode(&h).is_ok();
        let is_genuine = valid_header && tag == right && sent == h;
        if all_genuine && is_genuine {
            genuine.push((stream.len(), h, body.clone(), data.clone()));
        } else {
            all_genuine = false;
        }
        stream.extend_from_slice(&sent);
        stream.extend_from_slice(&body);
        stream.extend_from_slice(&tag);
        stream.extend_from_slice(&data);
    }
    stream.extend_from_slice(&input.tail);

    let stall_at = input.stall_at.map(usize::from);
    let mut r = pvfs_fuzz::Trickle::new(stream.clone(), usize::from(input.chunk), stall_at);
    let delivered = r.deliverable();
    let stalls = r.stalls();
    let (got, end) = pvfs_fuzz::run("reading frames", serve(&mut r));

    // The genuine frames delivered whole are accepted, as sent; nothing else is.
    let whole = |at: usize, body: &[u8], data: &[u8]| {
        at + HEADER_LEN + body.len() + TAG_LEN + data.len() <= delivered
    };
    let expected: Vec<_> = genuine
        .iter()
        .take_while(|(at, _, body, data)| whole(*at, body, data))
        .collect();
    assert_eq!(
        got.len(),
        expected.len(),
        "frames accepted (ended: {end:?})"
    );
    for (g, (_, h, body, data)) in got.iter().zip(&expected) {
        assert_eq!(&g.header.encode(), h);
        assert_eq!(&g.body, body);
        assert_eq!(&g.data, data);
    }

    // Why it stopped, from the bytes after the accepted frames.
    let at = expected.last().map_or(0, |(at, _, body, data)| {
        at + HEADER_LEN + body.len() + TAG_LEN + data.len()
    });
    let rest = &stream[at..delivered];
    let want = if rest.is_empty() {
        if stalls {
            End::Idle
        } else {
            End::Clean
        }
    } else if rest.len() < HEADER_LEN {
        if stalls {
            End::Late
        } else {
            End::Cut
        }
    } else {
        let mut raw = [0u8; HEADER_LEN];
        raw.copy_from_slice(&rest[..HEADER_LEN]);
        match FrameHeader::decode(&raw) {
            Err(_) => End::BadHeader,
            Ok(h) if rest.len() < HEADER_LEN + h.payload_len() => {
                if stalls {
                    End::Late
                } else {
                    End::Cut
                }
            }
            Ok(_) => End::BadTag,
        }
    };
    assert_eq!(end, want, "why reading stopped, after {} frames", got.len());
});

/// The seed request bodies (one of every kind), made once.
fn request_seeds() -> &'static [Vec<u8>] {
    static SEEDS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        pvfs_fuzz::seeds::request_bodies()
            .into_iter()
            .map(|(_, b)| b)
            .collect()
    })
}
