//! Group handles (`openg`/`openfh` of the POSIX extensions paper, Vilayannur et al.,
//! 2008): a portable token naming an open file, which cooperating processes turn into
//! an open file without asking any server.
//!
//! Byte format, version 2, little-endian:
//!
//! ```text
//!  0   4  magic "PVGH"
//!  4   2  version (2)
//!  6   2  reserved, 0
//!  8   4  open flags given to openg (the opener enforces them, e.g. read-only)
//! 12   8  fsid
//! 20   8  object handle
//! 28   4  L = length of the layout
//! 32   L  the file's layout (wire encoding, versioned)
//! 32+L 4  C = length of the capabilities
//! 36+L C  the capabilities granted to openg's caller (wire encoding: the object's,
//!         then one per datafile)
//! ..   4  CRC32C of everything before it
//! ```
//!
//! The layout and the capabilities travel in the token, so the opener does I/O at
//! once, with no server round trip. The capabilities are what protects the file: the
//! data servers check them (sealed by the servers, for openg's user, for the rights
//! the open asked), so a token that was altered or forged opens nothing, and one used
//! by another user is refused at its first read or write (on a connection proven by
//! MUNGE). They are renewed like any others when they expire. The CRC catches
//! accidental damage (EBADMSG at openfh).

use pvfs_proto::layout::Layout;
use pvfs_proto::{decode, encode, rights, Attr, Capability, Errno, ObjDetail, Timespec};

use crate::error::{Error, Result};
use crate::file::File;
use crate::Client;

const MAGIC: &[u8; 4] = b"PVGH";
const VERSION: u16 = 2;
/// Bytes of one encoded capability (handle, rights, uid, expiry, a 16-byte seal).
const CAP_LEN: usize = 8 + 4 + 4 + 8 + 4 + pvfs_proto::cap::CAP_MAC_LEN;
/// Largest group handle this version makes (a layout of 4096 datafiles).
pub const GROUP_HANDLE_MAX: usize =
    32 + (1 + 8 + 4 + 4 + 4096 * 12 + 4) + 4 + (4 + 4097 * CAP_LEN) + 4;

fn bad(why: &str) -> Error {
    Error::new(Errno::EBADMSG, format!("invalid group handle: {why}"))
}

impl Client {
    /// `openg`: a group handle for `file`, carrying the open `flags` and the
    /// capabilities for them (asked of the file's owner if not held yet).
    pub async fn group_handle(&self, file: &File, flags: u32) -> Result<Vec<u8>> {
        let writes = flags & libc_accmode() != 0;
        let need = if writes { rights::WRITE } else { rights::READ };
        let caps = self.caps_for(file.handle(), need).await?.caps;
        let layout = encode(file.layout());
        let caps = encode(&caps);
        let mut out = Vec::with_capacity(40 + layout.len() + caps.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.config().fsid.to_le_bytes());
        out.extend_from_slice(&file.handle().to_le_bytes());
        out.extend_from_slice(&(layout.len() as u32).to_le_bytes());
        out.extend_from_slice(&layout);
        out.extend_from_slice(&(caps.len() as u32).to_le_bytes());
        out.extend_from_slice(&caps);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// `openfh`: the file a group handle names, and the flags it was opened with.
    /// Checks format, CRC and fsid; sends no request (the data servers check the
    /// capabilities it carries).
    pub fn open_group_handle(&self, bytes: &[u8]) -> Result<(File, u32)> {
        if bytes.len() < 40 || bytes.len() > GROUP_HANDLE_MAX {
            return Err(bad("wrong length"));
        }
        let (data, crc) = bytes.split_at(bytes.len() - 4);
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
        let caps_at = 32usize.checked_add(len).filter(|&e| e + 4 <= data.len());
        let Some(caps_at) = caps_at else {
            return Err(bad("wrong layout length"));
        };
        let layout: Layout = decode(&data[32..caps_at]).map_err(|e| bad(&e.to_string()))?;
        if layout
            .datafiles
            .iter()
            .any(|d| d.server as usize >= self.config().servers.len())
        {
            return Err(bad("layout names an unknown server"));
        }
        let caps_len = le32(&data[caps_at..caps_at + 4]) as usize;
        if caps_at + 4 + caps_len != data.len() {
            return Err(bad("wrong capabilities length"));
        }
        let caps: Vec<Capability> =
            decode(&data[caps_at + 4..]).map_err(|e| bad(&e.to_string()))?;
        if caps.first().is_none_or(|c| c.handle != handle) {
            return Err(bad("capabilities for another object"));
        }
        self.remember_caps(handle, caps);
        Ok((File::new(self.clone(), opened_attr(handle, layout)), flags))
    }
}

/// The access-mode bits of open flags (O_ACCMODE): write-only and read-write ask for
/// write rights.
fn libc_accmode() -> u32 {
    3
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
        blocks: 0,
        acl: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvfs_config::{Config, GenOptions};
    use pvfs_proto::Datafile;

    fn client() -> Client {
        Client::new(Config::generate(&GenOptions::new(4, "/tmp/unused")).expect("config"))
    }

    fn file(c: &Client) -> File {
        let layout = Layout {
            stripe_size: 65536,
            replicas: 1,
            datafiles: (0..4)
                .map(|i| Datafile::single(i, (u64::from(i) + 1) << 40 | 99))
                .collect(),
            width: 1,
        };
        let handle = 0x1_0000_0000_0042;
        // What a lookup would have granted (the servers seal them; the client only
        // carries them).
        let cap = |h, r| Capability {
            handle: h,
            rights: r,
            uid: c.creds().uid,
            expires: u64::MAX / 2,
            mac: vec![7; pvfs_proto::cap::CAP_MAC_LEN],
        };
        let mut caps = vec![cap(handle, rights::READ | rights::WRITE)];
        caps.extend(
            layout
                .datafiles
                .iter()
                .map(|d| cap(d.handle, rights::READ | rights::WRITE)),
        );
        c.remember_caps(handle, caps);
        File::new(c.clone(), opened_attr(handle, layout))
    }

    #[tokio::test]
    async fn round_trip_sends_nothing_carries_capabilities_and_damage_is_refused() {
        let c = client();
        let f = file(&c);
        let token = c.group_handle(&f, 2).await.expect("openg");
        assert!(token.len() <= GROUP_HANDLE_MAX);
        let other_process = client();
        let other_process = Client::new(Config {
            fsid: c.config().fsid,
            ..other_process.config().clone()
        });
        let (g, flags) = other_process.open_group_handle(&token).expect("openfh");
        assert_eq!(flags, 2);
        assert_eq!(g.handle(), f.handle());
        assert_eq!(g.layout(), f.layout());
        assert_eq!(
            c.stats().total() + other_process.stats().total(),
            0,
            "no request was sent"
        );
        // The opener holds the capabilities now (for the data servers to check).
        let held = other_process
            .caps_for(g.handle(), rights::WRITE)
            .await
            .expect("capabilities from the token");
        assert_eq!(held.caps.len(), 5);
        for i in [0, 9, 20, 40, token.len() - 40, token.len() - 1] {
            let mut bad = token.clone();
            bad[i] ^= 1;
            let e = c
                .open_group_handle(&bad)
                .err()
                .expect("damaged token refused");
            assert_eq!(e.errno, Errno::EBADMSG, "byte {i}");
        }
        assert!(c.open_group_handle(&token[..token.len() - 1]).is_err());
        // Another file system refuses it.
        assert_eq!(
            client().open_group_handle(&token).err().map(|e| e.errno),
            Some(Errno::EXDEV)
        );
    }
}
