//! What the pvfs fuzz targets share: the runtime that drives async code under a
//! paused clock, the canonical round-trip check of the wire codec, a byte stream that
//! arrives in pieces (and may stop), the handshake's fixed key and policy, and the
//! seed inputs (`seeds`). The targets themselves are in `fuzz_targets/`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use pvfs_auth::handshake::ServerPolicy;
use pvfs_auth::{Key, KeyRing};
use pvfs_proto::{decode, encode, Wire};
use tokio::io::{AsyncRead, ReadBuf};

pub mod seeds;
pub mod values;

/// The current-thread runtime every async target runs on, with its clock paused:
/// when every task waits, the clock jumps to the next timer, so a deadline fires at
/// once and a wait without one shows as a hang (see [`run`]).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime builds")
    })
}

/// Longer than any deadline the code under test may wait for (a server's request
/// timeout is tens of seconds): a future still pending after this long on the paused
/// clock waits for something that never comes.
pub const HANG: Duration = Duration::from_secs(24 * 3600);

/// Runs `fut` to its end on [`runtime`]; panics (a finding) if it is still waiting
/// after [`HANG`] of paused time, that is, if it waits without a deadline.
pub fn run<F: Future>(what: &str, fut: F) -> F::Output {
    runtime().block_on(async {
        match tokio::time::timeout(HANG, fut).await {
            Ok(out) => out,
            Err(_) => panic!("{what}: still waiting after {HANG:?} (a wait without a deadline)"),
        }
    })
}

/// Decodes `bytes` as a `T`. An error is fine; a value must be the one the bytes
/// encode: encoding it gives the same bytes back (the codec is canonical: one
/// encoding per value), so a decoder that accepts bytes it cannot stand behind, or
/// reads a field differently from how it is written, is found. Returns the value.
pub fn round_trip<T: Wire + PartialEq + std::fmt::Debug>(bytes: &[u8]) -> Option<T> {
    let value = decode::<T>(bytes).ok()?;
    let again = encode(&value);
    assert_eq!(
        again,
        bytes,
        "a decoded {} encodes to other bytes: {value:?}",
        std::any::type_name::<T>()
    );
    Some(value)
}

/// [`round_trip`] for values that can hold a stored record (a layout, a directory's
/// details: responses, attributes), whose decoders also read the older forms stores
/// written by earlier versions hold (a layout without its width, a directory without
/// `mtime_set`) and encode them in the current form. So the encoding must be the
/// bytes, or longer than them (an older form lacks a field added later); either way
/// it decodes to the same value and encodes to itself.
pub fn round_trip_upgrading<T: Wire + PartialEq + std::fmt::Debug>(bytes: &[u8]) -> Option<T> {
    let value = decode::<T>(bytes).ok()?;
    let again = encode(&value);
    if again != bytes {
        assert!(
            again.len() > bytes.len(),
            "a decoded {} encodes to other bytes, not longer ones (an older form): {value:?}\n{bytes:?}\n{again:?}",
            std::any::type_name::<T>()
        );
        let current = decode::<T>(&again).unwrap_or_else(|e| {
            panic!("a decoded value does not decode once encoded ({e}): {value:?}")
        });
        assert_eq!(current, value, "a value changed over an encoding");
        assert_eq!(encode(&current), again, "the current form is not canonical");
    }
    Some(value)
}

/// A byte stream that hands out at most `chunk` bytes per read, and, with
/// `stall_at`, stops after that many bytes without ever ending (a peer that went
/// silent); otherwise it ends after the last byte.
pub struct Trickle {
    bytes: Vec<u8>,
    at: usize,
    chunk: usize,
    stall_at: Option<usize>,
}

impl Trickle {
    /// Serves `bytes` in reads of at most `chunk` bytes (at least 1), stalling at
    /// `stall_at` if given.
    pub fn new(bytes: Vec<u8>, chunk: usize, stall_at: Option<usize>) -> Trickle {
        Trickle {
            bytes,
            at: 0,
            chunk: chunk.max(1),
            stall_at,
        }
    }

    /// How many bytes a reader can ever get.
    pub fn deliverable(&self) -> usize {
        self.stall_at
            .map_or(self.bytes.len(), |s| s.min(self.bytes.len()))
    }

    /// Whether the stream stalls instead of ending.
    pub fn stalls(&self) -> bool {
        self.stall_at.is_some_and(|s| s <= self.bytes.len())
    }
}

impl AsyncRead for Trickle {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let end = self.deliverable();
        if self.at == end && self.stalls() {
            // Silent forever: nothing will wake the reader but its own deadline.
            return Poll::Pending;
        }
        let n = (end - self.at).min(self.chunk).min(buf.remaining());
        let from = self.at;
        buf.put_slice(&self.bytes[from..from + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

/// The file system id of the handshake targets' server.
pub const FSID: u64 = 0x5eed_f00d;
/// The name of the handshake targets' server.
pub const SERVER: &str = "s0";

/// The file system key the handshake targets use (fixed, so a fuzzer can learn its
/// key id; the nonces stay random).
pub fn fs_key() -> Arc<KeyRing> {
    static RING: OnceLock<Arc<KeyRing>> = OnceLock::new();
    RING.get_or_init(|| Arc::new(KeyRing::new(vec![Key::from_bytes([0x5a; 32])])))
        .clone()
}

/// What the handshake targets' server accepts: clients holding [`fs_key`]; no MUNGE
/// (a credential is refused with the reason), root squashed.
pub fn server_policy() -> ServerPolicy {
    ServerPolicy {
        fsid: FSID,
        server: SERVER.into(),
        groups: Arc::default(),
        keys: fs_key(),
        munge: Err("no MUNGE in the fuzzer".into()),
        root_squash: true,
        trusted: Vec::new(),
    }
}
