//! The frame: the unit of the pvfs wire protocol.
//!
//! ```text
//! offset size field
//!  0     4    magic "PVFS"
//!  4     2    protocol version (2)
//!  6     1    kind: 1 request, 2 response, 3 data, 4 handshake
//!  7     1    flags: bit 0 END (last frame of this side of the exchange)
//!  8     8    request id (chosen by the client; unique among its requests in flight
//!             on one connection)
//! 16     4    body length (encoded Request/Response; 0 for data frames)
//! 20     2    authentication tag length (16 after the handshake: the frame's MAC;
//!             0 in handshake frames)
//! 22     2    reserved, zero
//! 24     4    data length (bulk bytes after body and tag)
//! 28     4    reserved, zero
//! 32          body, tag, data
//! ```
//! All integers little-endian. A reader checks magic, version, kind, reserved fields
//! and every length against the limits below before reading or allocating anything.

use thiserror::Error;

/// "PVFS" read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"PVFS");
/// Protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 18;
/// Size of the fixed frame header.
pub const HEADER_LEN: usize = 32;
/// Largest body accepted.
pub const MAX_BODY: u32 = 4 << 20;
/// Largest bulk-data part of one frame.
pub const MAX_DATA: u32 = 8 << 20;
/// Largest authentication tag accepted.
pub const MAX_TAG: u16 = 64;
/// Flag: the last frame this side sends for the request.
pub const FLAG_END: u8 = 1;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// Starts a request (client to server).
    Request,
    /// Carries a response (server to client).
    Response,
    /// Continues a request's or response's bulk data.
    Data,
    /// Proves who is at each end before any request (see `handshake`).
    Handshake,
}

/// The fixed header of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the frame carries.
    pub kind: FrameKind,
    /// Flag bits ([`FLAG_END`]).
    pub flags: u8,
    /// The request this frame belongs to.
    pub request_id: u64,
    /// Bytes of encoded body.
    pub body_len: u32,
    /// Bytes of authentication tag.
    pub tag_len: u16,
    /// Bytes of bulk data.
    pub data_len: u32,
}

/// Why a frame header was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// Not a pvfs frame.
    #[error("bad magic {0:#010x}: not a pvfs frame")]
    BadMagic(u32),
    /// A protocol version this build does not speak.
    #[error("unsupported protocol version {0} (this build speaks {PROTOCOL_VERSION})")]
    Version(u16),
    /// An unknown frame kind.
    #[error("unknown frame kind {0}")]
    Kind(u8),
    /// Reserved bits or fields were set.
    #[error("reserved header field set")]
    Reserved,
    /// A length beyond its limit.
    #[error("{what} of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Which length.
        what: &'static str,
        /// Its value.
        len: u64,
        /// The limit.
        max: u64,
    },
}

impl FrameHeader {
    /// Whether this is the last frame of its side of the exchange.
    pub fn is_end(&self) -> bool {
        self.flags & FLAG_END != 0
    }

    /// Total bytes after the header.
    pub fn payload_len(&self) -> usize {
        self.body_len as usize + self.tag_len as usize + self.data_len as usize
    }

    /// The 32 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        b[6] = match self.kind {
            FrameKind::Request => 1,
            FrameKind::Response => 2,
            FrameKind::Data => 3,
            FrameKind::Handshake => 4,
        };
        b[7] = self.flags;
        b[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.body_len.to_le_bytes());
        b[20..22].copy_from_slice(&self.tag_len.to_le_bytes());
        b[24..28].copy_from_slice(&self.data_len.to_le_bytes());
        b
    }

    /// Parses and checks a header. On a version error the request id is still
    /// available through [`peek_request_id`] so the peer can be told why.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<FrameHeader, FrameError> {
        let le32 = |r: std::ops::Range<usize>| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[r]);
            u32::from_le_bytes(a)
        };
        let magic = le32(0..4);
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != PROTOCOL_VERSION {
            return Err(FrameError::Version(version));
        }
        let kind = match b[6] {
            1 => FrameKind::Request,
            2 => FrameKind::Response,
            3 => FrameKind::Data,
            4 => FrameKind::Handshake,
            k => return Err(FrameError::Kind(k)),
        };
        let flags = b[7];
        if flags & !FLAG_END != 0 || b[22] != 0 || b[23] != 0 || le32(28..32) != 0 {
            return Err(FrameError::Reserved);
        }
        let request_id = peek_request_id(b);
        let body_len = le32(16..20);
        let tag_len = u16::from_le_bytes([b[20], b[21]]);
        let data_len = le32(24..28);
        let check = |what, len: u64, max: u64| {
            if len > max {
                Err(FrameError::TooLarge { what, len, max })
            } else {
                Ok(())
            }
        };
        check("body", u64::from(body_len), u64::from(MAX_BODY))?;
        check("tag", u64::from(tag_len), u64::from(MAX_TAG))?;
        check("data", u64::from(data_len), u64::from(MAX_DATA))?;
        Ok(FrameHeader {
            kind,
            flags,
            request_id,
            body_len,
            tag_len,
            data_len,
        })
    }
}

/// The request id field of a raw header, valid or not.
pub fn peek_request_id(b: &[u8; HEADER_LEN]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[8..16]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> FrameHeader {
        FrameHeader {
            kind: FrameKind::Request,
            flags: FLAG_END,
            request_id: 77,
            body_len: 10,
            tag_len: 0,
            data_len: 4096,
        }
    }

    #[test]
    fn round_trip() {
        let h = header();
        assert_eq!(FrameHeader::decode(&h.encode()).unwrap(), h);
        assert_eq!(&h.encode()[0..4], b"PVFS");
    }

    #[test]
    fn rejects_bad_headers() {
        let good = header().encode();
        let mut b = good;
        b[0] = b'X';
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(FrameError::BadMagic(_))
        ));
        let mut b = good;
        let other = PROTOCOL_VERSION + 1;
        b[4..6].copy_from_slice(&other.to_le_bytes());
        assert_eq!(FrameHeader::decode(&b), Err(FrameError::Version(other)));
        assert_eq!(peek_request_id(&b), 77);
        let mut b = good;
        b[6] = 7;
        assert_eq!(FrameHeader::decode(&b), Err(FrameError::Kind(7)));
        let mut b = good;
        b[7] = 0x80;
        assert_eq!(FrameHeader::decode(&b), Err(FrameError::Reserved));
        let mut b = good;
        b[16..20].copy_from_slice(&(MAX_BODY + 1).to_le_bytes());
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(FrameError::TooLarge { what: "body", .. })
        ));
        let mut b = good;
        b[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(FrameError::TooLarge { what: "data", .. })
        ));
    }
}
