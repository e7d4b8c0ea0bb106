//! The virtual extended attribute `user.pvfs.layout`: a file's layout as text, and
//! the default layout of a directory, settable the way Lustre users set stripes.
//!
//! Formats (documented in `docs/fuse.md`):
//! - file (read only): `stripe_size=65536 stripe_count=4 replicas=1
//!   datafiles=s1:0x..,s2:0x..` (with copies: `s1+s2:0x..`, the chain's servers)
//! - directory (read, set, remove): `stripe_size=1M stripe_count=2 base=0 replicas=2`,
//!   any subset of the four keys, separated by spaces or commas, sizes with K, M,
//!   G, T or P suffixes; an empty value, `default` or `none` (or removing the attribute)
//!   clears the default so the file system's applies again.

use pvfs_client::LayoutSpec;
use pvfs_config::{parse_size, Config};
use pvfs_proto::layout::Layout;

/// Name of the virtual layout attribute.
pub const LAYOUT_XATTR: &str = "user.pvfs.layout";

/// Whether extended attribute `name` is passed on to the servers: `user.` ones and
/// the POSIX ACLs (others are EOPNOTSUPP at once: `security.capability` is asked on
/// every write).
pub(crate) fn passed_on(name: &str) -> bool {
    name.starts_with("user.")
        || name == pvfs_proto::acl::XATTR_ACCESS
        || name == pvfs_proto::acl::XATTR_DEFAULT
}

/// A file's layout as text, naming each datafile's server.
pub(crate) fn format_file_layout(layout: &Layout, config: &Config) -> String {
    let dfs: Vec<String> = layout
        .datafiles
        .iter()
        .map(|df| {
            let server = config
                .servers
                .get(df.server as usize)
                .map_or_else(|| format!("#{}", df.server), |s| s.name.clone());
            let copies: Vec<String> = df
                .replicas()
                .skip(1)
                .map(|s| {
                    config
                        .servers
                        .get(s as usize)
                        .map_or_else(|| format!("#{s}"), |s| s.name.clone())
                })
                .collect();
            if copies.is_empty() {
                format!("{server}:{:#x}", df.handle)
            } else {
                format!("{server}+{}:{:#x}", copies.join("+"), df.handle)
            }
        })
        .collect();
    format!(
        "stripe_size={} stripe_count={} replicas={} datafiles={}",
        layout.stripe_size,
        layout.datafiles.len(),
        layout.replicas,
        dfs.join(",")
    )
}

/// A directory's default layout as text (the keys that are set).
pub(crate) fn format_spec(spec: &LayoutSpec) -> String {
    let mut parts = Vec::new();
    if let Some(s) = spec.stripe_size {
        parts.push(format!("stripe_size={s}"));
    }
    if let Some(c) = spec.stripe_count {
        parts.push(format!("stripe_count={c}"));
    }
    if let Some(b) = spec.base {
        parts.push(format!("base={b}"));
    }
    if let Some(r) = spec.replicas {
        parts.push(format!("replicas={r}"));
    }
    parts.join(" ")
}

/// Parses a value set on a directory: `Ok(None)` clears the default layout.
pub(crate) fn parse_spec(value: &[u8]) -> Result<Option<LayoutSpec>, String> {
    let text = std::str::from_utf8(value).map_err(|_| "layout is not UTF-8".to_string())?;
    let text = text.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    if text.is_empty() || text == "default" || text == "none" {
        return Ok(None);
    }
    let mut spec = LayoutSpec::default();
    for item in text.split(|c: char| c.is_whitespace() || c == ',') {
        if item.is_empty() {
            continue;
        }
        let (key, val) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?} is not key=value"))?;
        match key {
            "stripe_size" | "size" => spec.stripe_size = Some(parse_size(val)?),
            "stripe_count" | "count" => {
                spec.stripe_count = Some(val.parse().map_err(|_| format!("bad count {val:?}"))?)
            }
            "base" => spec.base = Some(val.parse().map_err(|_| format!("bad base {val:?}"))?),
            "replicas" | "copies" => {
                spec.replicas = Some(val.parse().map_err(|_| format!("bad replicas {val:?}"))?)
            }
            _ => return Err(format!("unknown layout key {key:?}")),
        }
    }
    if spec == LayoutSpec::default() {
        return Ok(None);
    }
    Ok(Some(spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format() {
        let s = parse_spec(b"stripe_size=1M stripe_count=2")
            .unwrap()
            .unwrap();
        assert_eq!(s.stripe_size, Some(1 << 20));
        assert_eq!(s.stripe_count, Some(2));
        assert_eq!(s.base, None);
        assert_eq!(format_spec(&s), "stripe_size=1048576 stripe_count=2");
        let s = parse_spec(b"count=3,base=1\n").unwrap().unwrap();
        assert_eq!((s.stripe_count, s.base), (Some(3), Some(1)));
        let s = parse_spec(b"replicas=2").unwrap().unwrap();
        assert_eq!((s.replicas, s.stripe_count), (Some(2), None));
        assert_eq!(format_spec(&s), "replicas=2");
        assert!(parse_spec(b"replicas=two").is_err());
        assert_eq!(parse_spec(b"").unwrap(), None);
        assert_eq!(parse_spec(b"none").unwrap(), None);
        assert!(parse_spec(b"stripe_size").is_err());
        assert!(parse_spec(b"colour=blue").is_err());
        assert!(parse_spec(b"stripe_count=x").is_err());
        assert!(parse_spec(&[0xff]).is_err());
    }
}
