//! Frame MACs: after the handshake every frame carries a tag of [`TAG_LEN`] bytes, the
//! truncated HMAC-SHA256 under the connection's session key of the direction, the
//! frame's sequence number in that direction, its 32-byte header and its body.
//!
//! The sequence number makes a replayed, dropped or reordered frame fail; the
//! direction makes a frame reflected back to its sender fail; the session key, fresh
//! per connection, makes a frame from another connection fail. Bulk data after the
//! tag is not covered (it is protected by TLS where the network is not trusted, as
//! NFS's `krb5` flavour authenticates calls but not their data; `docs/security.md`).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use pvfs_proto::frame::HEADER_LEN;

/// Bytes of a frame's tag.
pub const TAG_LEN: usize = 16;

type HmacSha256 = Hmac<Sha256>;

/// Which way frames go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client (or calling server) to server.
    ToServer,
    /// Server to client.
    ToClient,
}

impl Direction {
    fn byte(self) -> u8 {
        match self {
            Direction::ToServer => 1,
            Direction::ToClient => 2,
        }
    }
}

/// A frame whose tag does not verify.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("frame {seq} failed authentication (forged, altered, replayed or out of order)")]
pub struct MacError {
    /// The sequence number the frame should have had.
    pub seq: u64,
}

/// Tags or checks the frames of one direction of one connection.
#[derive(Clone)]
pub struct FrameMac {
    keyed: HmacSha256,
    dir: Direction,
    seq: u64,
}

impl std::fmt::Debug for FrameMac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FrameMac({:?}, seq {})", self.dir, self.seq)
    }
}

impl FrameMac {
    /// Frames going `dir` under `session_key`, numbered from 0.
    pub fn new(session_key: &[u8; 32], dir: Direction) -> FrameMac {
        FrameMac {
            keyed: <HmacSha256 as Mac>::new_from_slice(session_key)
                .expect("HMAC takes any key length"),
            dir,
            seq: 0,
        }
    }

    fn compute(&self, header: &[u8; HEADER_LEN], body: &[u8]) -> HmacSha256 {
        let mut m = self.keyed.clone();
        m.update(&[self.dir.byte()]);
        m.update(&self.seq.to_le_bytes());
        m.update(header);
        m.update(body);
        m
    }

    /// The tag of the next frame sent (its header must announce [`TAG_LEN`]).
    pub fn seal(&mut self, header: &[u8; HEADER_LEN], body: &[u8]) -> [u8; TAG_LEN] {
        let full = self.compute(header, body).finalize().into_bytes();
        self.seq += 1;
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        tag
    }

    /// Checks the next frame received (constant-time comparison).
    pub fn open(
        &mut self,
        header: &[u8; HEADER_LEN],
        body: &[u8],
        tag: &[u8],
    ) -> Result<(), MacError> {
        if tag.len() != TAG_LEN {
            return Err(MacError { seq: self.seq });
        }
        self.compute(header, body)
            .verify_truncated_left(tag)
            .map_err(|_| MacError { seq: self.seq })?;
        self.seq += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_verify_in_order_and_nothing_else() {
        let key = [9u8; 32];
        let mut tx = FrameMac::new(&key, Direction::ToServer);
        let mut rx = FrameMac::new(&key, Direction::ToServer);
        let h = [1u8; HEADER_LEN];
        let t0 = tx.seal(&h, b"body0");
        let t1 = tx.seal(&h, b"body1");
        // Out of order and replayed frames fail; the receiver stays where it was.
        assert!(rx.open(&h, b"body1", &t1).is_err());
        rx.open(&h, b"body0", &t0).unwrap();
        assert!(rx.open(&h, b"body0", &t0).is_err());
        // An altered body or header fails.
        assert!(rx.open(&h, b"bodyX", &t1).is_err());
        let mut h2 = h;
        h2[7] ^= 1;
        assert!(rx.open(&h2, b"body1", &t1).is_err());
        rx.open(&h, b"body1", &t1).unwrap();
        // The other direction, or another key, never verifies.
        let mut back = FrameMac::new(&key, Direction::ToClient);
        let other = FrameMac::new(&[8u8; 32], Direction::ToServer);
        let t = tx.seal(&h, b"x");
        assert!(back.open(&h, b"x", &t).is_err());
        assert!(other.clone().open(&h, b"x", &t).is_err());
        assert!(rx.open(&h, b"x", &t[..8]).is_err());
        rx.open(&h, b"x", &t).unwrap();
    }
}
