//! Settings from the environment and path routing.
//!
//! `PVFS_CONFIG` names the configuration file; without it the library is inert (every
//! call passes through). `PVFS_PREFIX` (default `/pvfs`) is where pvfs appears: an
//! absolute path whose lexically normalized form is the prefix or lies below it is a
//! pvfs path, the rest of it taken from the pvfs root. Normalization is lexical (`.`,
//! `..` and repeated slashes; `..` does not look at symlinks), as the kernel would see
//! a real directory at the prefix; a path that passes through the prefix and leaves it
//! again by `..` is handed to the kernel in its normalized form.

use std::path::PathBuf;

use crate::hook::{Errno, R};

/// Where an absolute path leads.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Abs {
    /// Not through pvfs: the kernel resolves it as given.
    Local,
    /// This pvfs path (`/a/b`, or `/` for the prefix itself).
    Pvfs(String),
    /// Through pvfs and out again by `..` (`/pvfs/../etc`): this local path.
    Through(Vec<u8>),
}

/// The environment the library was started with.
pub(crate) struct Settings {
    /// The prefix's components (`["pvfs"]` for `/pvfs`); empty when inert.
    prefix: Vec<Vec<u8>>,
    /// The prefix as given, normalized (`/pvfs`).
    pub(crate) prefix_str: String,
    /// The configuration file; `None` leaves the library inert.
    pub(crate) config: Option<PathBuf>,
}

/// The settings the environment gives (`globals::settings` keeps them).
pub(crate) fn read_env() -> Settings {
    let config = std::env::var_os("PVFS_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let raw = std::env::var("PVFS_PREFIX").unwrap_or_else(|_| "/pvfs".to_string());
    let prefix = match normalize(raw.as_bytes()) {
        Some(c) if !c.is_empty() => c,
        _ => {
            warn(&format!(
                "PVFS_PREFIX={raw:?} is not an absolute path below /; pvfs is disabled"
            ));
            return Settings {
                prefix: Vec::new(),
                prefix_str: String::new(),
                config: None,
            };
        }
    };
    let prefix_str = join(&prefix);
    Settings {
        prefix,
        prefix_str,
        config,
    }
}

/// Prints one line on stderr (the library's only output; used for setup problems).
pub(crate) fn warn(msg: &str) {
    let line = format!("pvfs_preload: {msg}\n");
    // SAFETY: writes a live buffer to fd 2 through the real write (no hook).
    unsafe {
        crate::real::write(2, line.as_ptr().cast(), line.len());
    }
}

/// `/a/b` from components.
fn join(comps: &[Vec<u8>]) -> String {
    let mut s = String::new();
    for c in comps {
        s.push('/');
        s.push_str(&String::from_utf8_lossy(c));
    }
    s
}

/// The components of absolute `path` after lexical normalization; `None` if it is not
/// absolute. `..` at the root stays at the root.
pub(crate) fn normalize(path: &[u8]) -> Option<Vec<Vec<u8>>> {
    if path.first() != Some(&b'/') {
        return None;
    }
    let mut out: Vec<Vec<u8>> = Vec::new();
    for comp in path.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => {
                out.pop();
            }
            c => out.push(c.to_vec()),
        }
    }
    Some(out)
}

impl Settings {
    /// Whether pvfs is configured at all.
    pub(crate) fn active(&self) -> bool {
        self.config.is_some() && !self.prefix.is_empty()
    }

    /// Where absolute local path `path` leads. Errors: a pvfs path that is not UTF-8
    /// (pvfs names are UTF-8) is EILSEQ.
    pub(crate) fn route_abs(&self, path: &[u8]) -> R<Abs> {
        // Fast exit: a path through the prefix names its last component somewhere.
        let Some(last) = self.prefix.last() else {
            return Ok(Abs::Local);
        };
        if !contains(path, last) || path.first() != Some(&b'/') {
            return Ok(Abs::Local);
        }
        let under = |c: &[Vec<u8>]| {
            c.len() >= self.prefix.len() && c[..self.prefix.len()] == self.prefix[..]
        };
        let mut comps: Vec<Vec<u8>> = Vec::new();
        let mut entered = false;
        for comp in path.split(|&b| b == b'/') {
            match comp {
                b"" | b"." => continue,
                b".." => {
                    comps.pop();
                }
                c => comps.push(c.to_vec()),
            }
            entered |= under(&comps);
        }
        if under(&comps) {
            let mut s = String::new();
            for c in &comps[self.prefix.len()..] {
                s.push('/');
                s.push_str(std::str::from_utf8(c).map_err(|_| libc::EILSEQ as Errno)?);
            }
            if s.is_empty() {
                s.push('/');
            }
            return Ok(Abs::Pvfs(s));
        }
        if !entered {
            return Ok(Abs::Local);
        }
        let mut out = Vec::new();
        for c in &comps {
            out.push(b'/');
            out.extend_from_slice(c);
        }
        if out.is_empty() {
            out.push(b'/');
        }
        Ok(Abs::Through(out))
    }

    /// Whether relative path `rel` may lead into the prefix from a local directory: one
    /// of its components must be the prefix's last one.
    pub(crate) fn may_reach(&self, rel: &[u8]) -> bool {
        self.prefix
            .last()
            .is_some_and(|last| rel.split(|&b| b == b'/').any(|c| c == &last[..]))
    }

    /// The local spelling of pvfs path `p` (`/a` → `/pvfs/a`).
    pub(crate) fn local_path(&self, p: &str) -> String {
        if p == "/" {
            self.prefix_str.clone()
        } else {
            format!("{}{p}", self.prefix_str)
        }
    }
}

/// Splits pvfs path `p` into its parent's path and its last name.
pub(crate) fn split(p: &str) -> R<(&str, &str)> {
    let p = p.trim_end_matches('/');
    match p.rfind('/') {
        None => Err(libc::EBUSY),
        Some(i) => {
            let name = &p[i + 1..];
            if name.is_empty() {
                return Err(libc::EBUSY);
            }
            Ok((if i == 0 { "/" } else { &p[..i] }, name))
        }
    }
}

/// Whether `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(prefix: &str) -> Settings {
        let prefix = normalize(prefix.as_bytes()).unwrap_or_default();
        Settings {
            prefix_str: join(&prefix),
            prefix,
            config: Some(PathBuf::from("/x")),
        }
    }

    #[test]
    fn routes_by_lexical_prefix() {
        let s = settings("/pvfs");
        let p = |x: &str| s.route_abs(x.as_bytes()).unwrap_or(Abs::Local);
        let pv = |x: &str| Abs::Pvfs(x.to_string());
        assert_eq!(p("/pvfs"), pv("/"));
        assert_eq!(p("/pvfs/"), pv("/"));
        assert_eq!(p("/pvfs/a/b"), pv("/a/b"));
        assert_eq!(p("//pvfs//a/./b/"), pv("/a/b"));
        assert_eq!(p("/tmp/../pvfs/a"), pv("/a"));
        assert_eq!(p("/pvfs/a/../../etc"), Abs::Through(b"/etc".to_vec()));
        assert_eq!(p("/pvfs/.."), Abs::Through(b"/".to_vec()));
        assert_eq!(p("/pvfsx/a"), Abs::Local);
        assert_eq!(p("/tmp/pvfs/a"), Abs::Local);
        assert_eq!(p("/tmp/pvfs/../a"), Abs::Local);
        assert_eq!(p("pvfs/a"), Abs::Local);
        let m = settings("/mnt/fs/");
        assert_eq!(m.prefix_str, "/mnt/fs");
        assert_eq!(m.route_abs(b"/mnt/fs/x"), Ok(Abs::Pvfs("/x".into())));
        assert_eq!(m.route_abs(b"/mnt/x"), Ok(Abs::Local));
        assert_eq!(m.local_path("/x"), "/mnt/fs/x");
        assert_eq!(m.local_path("/"), "/mnt/fs");
        assert_eq!(s.route_abs(b"/pvfs/\xff"), Err(libc::EILSEQ));
        assert!(s.may_reach(b"pvfs/a") && s.may_reach(b"../../pvfs") && s.may_reach(b"pvfs"));
        assert!(!s.may_reach(b"a/pvfsx") && !s.may_reach(b"xpvfs/a") && !s.may_reach(b""));
    }
}
