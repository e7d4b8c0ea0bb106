//! Frame headers: `FrameHeader::decode` accepts exactly the headers the format
//! allows (checked against the format written out here: magic, version, kind, flags,
//! reserved fields, length limits), a header it accepts encodes back to the same 32
//! bytes, and `peek_request_id` reads the request id of any header, valid or not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pvfs_proto::frame::{
    peek_request_id, FrameError, FrameHeader, FrameKind, HEADER_LEN, MAX_BODY, MAX_DATA, MAX_TAG,
    PROTOCOL_VERSION,
};

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Why the format refuses `b`, in the order the fields come, or the kind it carries.
fn judge(b: &[u8; HEADER_LEN]) -> Result<FrameKind, &'static str> {
    if &b[0..4] != b"PVFS" {
        return Err("magic");
    }
    if u16::from_le_bytes([b[4], b[5]]) != PROTOCOL_VERSION {
        return Err("version");
    }
    let kind = match b[6] {
        1 => FrameKind::Request,
        2 => FrameKind::Response,
        3 => FrameKind::Data,
        4 => FrameKind::Handshake,
        _ => return Err("kind"),
    };
    if b[7] > 1 || b[22] != 0 || b[23] != 0 || b[28..32] != [0; 4] {
        return Err("reserved");
    }
    if le32(&b[16..20]) > MAX_BODY
        || u16::from_le_bytes([b[20], b[21]]) > MAX_TAG
        || le32(&b[24..28]) > MAX_DATA
    {
        return Err("length");
    }
    Ok(kind)
}

fuzz_target!(|data: &[u8]| {
    let Some(raw) = data.get(..HEADER_LEN) else {
        return;
    };
    let mut b = [0u8; HEADER_LEN];
    b.copy_from_slice(raw);
    let mut id = [0u8; 8];
    id.copy_from_slice(&b[8..16]);
    assert_eq!(peek_request_id(&b), u64::from_le_bytes(id));
    match (FrameHeader::decode(&b), judge(&b)) {
        (Ok(h), Ok(kind)) => {
            assert_eq!(h.kind, kind);
            assert_eq!(h.encode(), b, "an accepted header re-encodes differently");
            assert_eq!(h.is_end(), b[7] == 1);
            assert_eq!(h.request_id, peek_request_id(&b));
            assert_eq!(
                h.payload_len(),
                h.body_len as usize + h.tag_len as usize + h.data_len as usize
            );
        }
        (Err(e), Err(why)) => {
            let same = matches!(
                (&e, why),
                (FrameError::BadMagic(_), "magic")
                    | (FrameError::Version(_), "version")
                    | (FrameError::Kind(_), "kind")
                    | (FrameError::Reserved, "reserved")
                    | (FrameError::TooLarge { .. }, "length")
            );
            assert!(same, "refused for {e:?}, but the format says: {why}");
        }
        (got, want) => panic!("decode gave {got:?}, the format says {want:?}: {b:?}"),
    }
});
