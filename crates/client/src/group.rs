//! Group handles (`openg`/`openfh` of the POSIX extensions paper, Vilayannur et al.,
//! 2008): a portable token naming an open file, which cooperating processes turn into
//! an open file without asking any server.
//!
//! Byte format, version 1, little-endian:
//!
//! ```text
//!  0   4  magic "PVGH"
//!  4   2  version (1)
//!  6   2  reserved, 0
//!  8   4  open flags given to openg (the opener enforces them, e.g. read-only)
//! 12   8  fsid
//! 20   8  object handle
//! 28   4  L = length of the layout
//! 32   L  the file's layout (wire encoding, versioned)
//! 32+L 4  CRC32C of bytes 0 .. 32+L
//! 36+L 32 HMAC-SHA256 of bytes 0 .. 36+L, keyed with a key derived from the node key
//! ```
//!
//! The layout travels in the token so that the opener can do I/O at once, with no
//! server round trip. The CRC catches accidental damage; the MAC refuses tokens not made
//! by a holder of the file system's key (EBADMSG either way).

use hmac::{Hmac, Mac};
use pvfs_proto::layout::Layout;
use pvfs_proto::{decode, encode, Attr, Errno, ObjDetail, Timespec};
use sha2::Sha256;

use crate::error::{Error, Result};
use crate::file::File;
use crate::Client;

const MAGIC: &[u8; 4] = b"PVGH";
const VERSION: u16 = 1;
const MAC_LEN: usize = 32;
/// Largest group handle this version makes (a layout of 4096 datafiles).
pub const GROUP_HANDLE_MAX: usize = 32 + (1 + 8 + 4 + 4 + 4096 * 12) + 4 + MAC_LEN;

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &pvfs_auth::Key, bytes: &[u8]) -> [u8; MAC_LEN] {
    let mut m: HmacSha256 = key.mac();
    m.update(bytes);
    m.finalize().into_bytes().into()
}

fn bad(why: &str) -> Error {
    Error::new(Errno::EBADMSG, format!("invalid group handle: {why}"))
}

impl Client {
    /// The keys of group handles: derived from the node key (the first makes them,
    /// any verifies them, so a key rotation does not void handles in use).
    fn group_keys(&self) -> Result<Vec<pvfs_auth::Key>> {
        let ring = self.inner.pool.key_ring().ok_or_else(|| {
            Error::new(
                Errno::EOPNOTSUPP,
                "group handles need the file system's key, which this process cannot read",
            )
        })?;
        Ok(ring
            .keys()
            .iter()
            .map(|k| k.derive(b"pvfs group handles"))
            .collect())
    }

    /// `openg`: a group handle for `file`, carrying the open `flags` (no request sent).
    pub fn group_handle(&self, file: &File, flags: u32) -> Result<Vec<u8>> {
        let keys = self.group_keys()?;
        let layout = encode(file.layout());
        let mut out = Vec::with_capacity(32 + layout.len() + 4 + MAC_LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.config().fsid.to_le_bytes());
        out.extend_from_slice(&file.handle().to_le_bytes());
        out.extend_from_slice(&(layout.len() as u32).to_le_bytes());
        out.extend_from_slice(&layout);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        let tag = mac(&keys[0], &out);
        out.extend_from_slice(&tag);
        Ok(out)
    }

    /// `openfh`: the file a group handle names, and the flags it was opened with.
    /// Checks fsid, CRC and MAC; sends no request.
    pub fn open_group_handle(&self, bytes: &[u8]) -> Result<(File, u32)> {
        let keys = self.group_keys()?;
        if bytes.len() < 32 + 4 + MAC_LEN || bytes.len() > GROUP_HANDLE_MAX {
            return Err(bad("wrong length"));
        }
        let (body, tag) = bytes.split_at(bytes.len() - MAC_LEN);
        // Constant-time comparison, so timing does not reveal how much matched.
        let matches = |k: &pvfs_auth::Key| {
            mac(k, body)
                .iter()
                .zip(tag)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
        };
        if !keys.iter().any(matches) {
            return Err(bad("authentication failed"));
        }
        let (data, crc) = body.split_at(body.len() - 4);
        let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let le64 = |b: &[u8]| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[..8]);
            u64::from_le_bytes(a)
        };
        if crc32c::crc32c(data) != le32(crc) {
            return Err(bad("checksum mismatch"));
        }
        if &data[0..4] != MAGIC || u16::from_le_bytes([data[4], data[5]]) != VERSION {
            return Err(bad("unknown format"));
        }
        let flags = le32(&data[8..12]);
        if le64(&data[12..20]) != self.config().fsid {
            return Err(Error::new(
                Errno::EXDEV,
                "group handle of another file system",
            ));
        }
        let handle = le64(&data[20..28]);
        let len = le32(&data[28..32]) as usize;
        if 32 + len != data.len() {
            return Err(bad("wrong layout length"));
        }
        let layout: Layout = decode(&data[32..]).map_err(|e| bad(&e.to_string()))?;
        if layout
            .datafiles
            .iter()
            .any(|d| d.server as usize >= self.config().servers.len())
        {
            return Err(bad("layout names an unknown server"));
        }
        Ok((File::new(self.clone(), opened_attr(handle, layout)), flags))
    }
}

/// The attributes a file opened from a group handle starts with: its handle and
/// layout; the rest is unknown until [`File::stat`] asks.
fn opened_attr(handle: pvfs_proto::Handle, layout: Layout) -> Attr {
    Attr {
        handle,
        mode: 0,
        uid: 0,
        gid: 0,
        nlink: 1,
        size: 0,
        atime: Timespec::default(),
        mtime: Timespec::default(),
        ctime: Timespec::default(),
        detail: ObjDetail::File { layout },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvfs_config::{Config, GenOptions};
    use pvfs_proto::Datafile;

    /// A client of a new file system whose key file lives in `dir`.
    fn client(dir: &tempfile::TempDir) -> Client {
        let mut config = Config::generate(&GenOptions::new(4, "/tmp/unused")).expect("config");
        let key = dir.path().join(format!("{:x}.key", config.fsid));
        pvfs_auth::KeyRing::generate()
            .expect("random")
            .write(&key, "test", false)
            .expect("key file");
        config.security.key = key;
        Client::new(config)
    }

    fn file(c: &Client) -> File {
        let layout = Layout {
            stripe_size: 65536,
            replicas: 1,
            datafiles: (0..4)
                .map(|i| Datafile {
                    server: i,
                    handle: (u64::from(i) + 1) << 40 | 99,
                })
                .collect(),
        };
        File::new(c.clone(), opened_attr(0x1_0000_0000_0042, layout))
    }

    #[test]
    fn round_trip_sends_nothing_and_tampering_is_refused() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let c = client(&dir);
        let f = file(&c);
        let token = c.group_handle(&f, 2).expect("openg");
        let (g, flags) = c.open_group_handle(&token).expect("openfh");
        assert_eq!(flags, 2);
        assert_eq!(g.handle(), f.handle());
        assert_eq!(g.layout(), f.layout());
        assert_eq!(c.stats().total(), 0, "no request was sent");
        for i in [0, 9, 20, 40, token.len() - 40, token.len() - 1] {
            let mut bad = token.clone();
            bad[i] ^= 1;
            let e = c
                .open_group_handle(&bad)
                .err()
                .expect("tampered token refused");
            assert_eq!(e.errno, Errno::EBADMSG, "byte {i}");
        }
        assert!(c.open_group_handle(&token[..token.len() - 1]).is_err());
        // Another file system (another key) refuses it too.
        let other = client(&dir);
        assert_eq!(
            other.open_group_handle(&token).err().map(|e| e.errno),
            Some(Errno::EBADMSG)
        );
    }
}
