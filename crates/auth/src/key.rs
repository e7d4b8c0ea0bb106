//! Key files: the file system's node key (every server and every trusted client node
//! holds it) and the servers' own key (capabilities; servers only).
//!
//! A key file is text: comment lines starting with `#`, then one or more lines of 64
//! hexadecimal digits (32 bytes each). The first key is the one this node proves
//! itself with; the others are still accepted from peers (a rotation in progress,
//! `docs/security.md`). The file must be readable by its owner only: a key file that
//! group or others may read is refused, as ssh refuses such private keys.

use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use pvfs_proto::handshake::KEY_ID_LEN;

/// Bytes of one key.
pub const KEY_LEN: usize = 32;
/// Most keys one file may hold (the current one and those being rotated out).
pub const MAX_KEYS: usize = 4;

/// Why a key file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read or written.
    #[error("key file {path}: {}", io_text(.source))]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// Group or others may read the file.
    #[error("key file {path} may be read by others (mode {mode:04o}): chmod 600 {path}")]
    Exposed {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The file does not hold keys in the expected form.
    #[error("key file {path}:{line}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The file could not be written.
    #[error("cannot write key file {path}: {}", io_text(.source))]
    Write {
        /// The file.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file exists and was not to be replaced.
    #[error("key file {path} already exists")]
    Exists {
        /// The file.
        path: String,
    },
}

impl KeyError {
    /// Whether the file is missing or this process may not read it (as opposed to a
    /// file that is there but wrong).
    pub fn is_unreadable(&self) -> bool {
        matches!(self, KeyError::Io { source, .. }
            if matches!(source.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied))
    }
}

/// An I/O error's text without the "(os error N)" suffix.
pub(crate) fn io_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// One secret key and its public fingerprint.
#[derive(Clone)]
pub struct Key {
    bytes: [u8; KEY_LEN],
    id: [u8; KEY_ID_LEN],
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({})", self.fingerprint())
    }
}

impl Key {
    /// A key from its bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Key {
        let digest = Sha256::new()
            .chain_update(b"pvfs key id")
            .chain_update(bytes)
            .finalize();
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&digest[..KEY_ID_LEN]);
        Key { bytes, id }
    }

    /// A fresh random key.
    pub fn generate() -> std::io::Result<Key> {
        let mut b = [0u8; KEY_LEN];
        crate::random::fill(&mut b)?;
        Ok(Key::from_bytes(b))
    }

    /// The key's fingerprint: names it in handshakes and messages, reveals nothing.
    pub fn id(&self) -> &[u8; KEY_ID_LEN] {
        &self.id
    }

    /// The fingerprint in hexadecimal.
    pub fn fingerprint(&self) -> String {
        hex(&self.id)
    }

    /// A MAC keyed with this key (a key of any length is valid for HMAC).
    pub fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as Mac>::new_from_slice(&self.bytes).expect("HMAC takes any key length")
    }

    /// A key derived from this one for another purpose (`label` names it).
    pub fn derive(&self, label: &[u8]) -> Key {
        let out = self.mac().chain_update(label).finalize().into_bytes();
        let mut b = [0u8; KEY_LEN];
        b.copy_from_slice(&out);
        Key::from_bytes(b)
    }
}

/// Lowercase hexadecimal of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The keys of one key file: the first is current, the others are accepted.
#[derive(Clone, Debug)]
pub struct KeyRing {
    keys: Vec<Key>,
}

impl KeyRing {
    /// A ring of one fresh key.
    pub fn generate() -> std::io::Result<KeyRing> {
        Ok(KeyRing {
            keys: vec![Key::generate()?],
        })
    }

    /// A ring of the given keys (at least one).
    pub fn new(keys: Vec<Key>) -> KeyRing {
        assert!(!keys.is_empty(), "a key ring holds at least one key");
        KeyRing { keys }
    }

    /// Reads a key file, refusing one that others may read.
    pub fn load(path: &Path) -> Result<KeyRing, KeyError> {
        use std::os::unix::fs::PermissionsExt;
        let shown = path.display().to_string();
        let io = |source| KeyError::Io {
            path: shown.clone(),
            source,
        };
        let text = std::fs::read_to_string(path).map_err(io)?;
        let mode = std::fs::metadata(path).map_err(io)?.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Exposed { path: shown, mode });
        }
        KeyRing::parse(&text, &shown)
    }

    /// Parses a key file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<KeyRing, KeyError> {
        let mut keys = Vec::new();
        let bad = |line: usize, message: String| KeyError::Invalid {
            path: origin.to_string(),
            line,
            message,
        };
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            if t.len() != 2 * KEY_LEN || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad(
                    i + 1,
                    format!(
                        "expected a key of {} hexadecimal digits, found {} characters",
                        2 * KEY_LEN,
                        t.len()
                    ),
                ));
            }
            let mut b = [0u8; KEY_LEN];
            for (j, chunk) in t.as_bytes().chunks(2).enumerate() {
                let pair = std::str::from_utf8(chunk).unwrap_or("zz");
                b[j] = u8::from_str_radix(pair, 16)
                    .map_err(|_| bad(i + 1, "not hexadecimal".into()))?;
            }
            if keys.len() == MAX_KEYS {
                return Err(bad(i + 1, format!("more than {MAX_KEYS} keys")));
            }
            keys.push(Key::from_bytes(b));
        }
        if keys.is_empty() {
            return Err(bad(
                text.lines().count().max(1),
                "no key in the file".into(),
            ));
        }
        Ok(KeyRing { keys })
    }

    /// The key this node proves itself with.
    pub fn current(&self) -> &Key {
        &self.keys[0]
    }

    /// Every key, current first.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// The key with fingerprint `id`, if this ring holds it.
    pub fn find(&self, id: &[u8]) -> Option<&Key> {
        self.keys.iter().find(|k| k.id() == id)
    }

    /// A fresh key first, then this ring's current key (still accepted): the first
    /// step of a rotation.
    pub fn rotated(&self) -> std::io::Result<KeyRing> {
        Ok(KeyRing {
            keys: vec![Key::generate()?, self.current().clone()],
        })
    }

    /// This ring's current key alone: the last step of a rotation.
    pub fn retired(&self) -> KeyRing {
        KeyRing {
            keys: vec![self.current().clone()],
        }
    }

    /// The key file's text: `what` says in a comment what the key is for.
    pub fn to_text(&self, what: &str) -> String {
        let mut out = format!(
            "# {what}\n# Keep this file readable by its owner only (mode 0600). The first key is\n\
             # used; later ones are still accepted during a rotation (docs/security.md).\n"
        );
        for k in &self.keys {
            out.push_str(&hex(&k.bytes));
            out.push('\n');
        }
        out
    }

    /// Writes the ring to `path` with mode 0600. Without `replace` an existing file is
    /// an error and stays as it is; with it, the file is replaced atomically.
    pub fn write(&self, path: &Path, what: &str, replace: bool) -> Result<(), KeyError> {
        write_private(path, self.to_text(what).as_bytes(), replace)
    }
}

/// Writes `bytes` to `path`, a file of mode 0600 from its creation (atomic rename when
/// replacing), so a secret is never readable by others, not even for a moment.
pub fn write_private(path: &Path, bytes: &[u8], replace: bool) -> Result<(), KeyError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display().to_string();
    let fail = |source: std::io::Error| KeyError::Write {
        path: shown.clone(),
        source,
    };
    let create = |p: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(p)
    };
    let fill = |f: &mut std::fs::File| f.write_all(bytes).and_then(|()| f.sync_all());
    if !replace {
        let mut f = create(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists && !path.is_dir() {
                KeyError::Exists {
                    path: shown.clone(),
                }
            } else {
                fail(e)
            }
        })?;
        return fill(&mut f).map_err(|e| {
            let _ = std::fs::remove_file(path);
            fail(e)
        });
    }
    let name = path
        .file_name()
        .ok_or_else(|| fail(std::io::ErrorKind::InvalidInput.into()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let _ = std::fs::remove_file(&tmp);
    let mut f = create(&tmp).map_err(fail)?;
    let written = fill(&mut f).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_write_load_and_refuse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.key");
        let ring = KeyRing::generate().unwrap();
        ring.write(&path, "test key", false).unwrap();
        let back = KeyRing::load(&path).unwrap();
        assert_eq!(back.current().id(), ring.current().id());
        assert!(matches!(
            ring.write(&path, "test key", false),
            Err(KeyError::Exists { .. })
        ));
        let rotated = back.rotated().unwrap();
        rotated.write(&path, "test key", true).unwrap();
        let back = KeyRing::load(&path).unwrap();
        assert_eq!(back.keys().len(), 2);
        assert_eq!(back.keys()[1].id(), ring.current().id());
        assert!(back.find(ring.current().id()).is_some());
        assert_eq!(back.retired().keys().len(), 1);

        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = KeyRing::load(&path).unwrap_err();
        assert!(e.to_string().contains("chmod 600"), "{e}");

        let e = KeyRing::parse("# only a comment\n", "x").unwrap_err();
        assert!(e.to_string().contains("no key"), "{e}");
        let e = KeyRing::parse("abc\n", "x").unwrap_err();
        assert!(e.to_string().starts_with("key file x:1: "), "{e}");
        let missing = KeyRing::load(&dir.path().join("none")).unwrap_err();
        assert!(missing.is_unreadable());
    }

    #[test]
    fn derived_keys_differ_and_are_stable() {
        let k = Key::from_bytes([7; KEY_LEN]);
        assert_eq!(k.derive(b"a").id(), k.derive(b"a").id());
        assert_ne!(k.derive(b"a").id(), k.derive(b"b").id());
        assert_ne!(k.derive(b"a").id(), k.id());
    }
}
