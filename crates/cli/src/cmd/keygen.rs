//! `pvfs keygen`: makes, rotates and retires key files (`docs/security.md`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use pvfs_auth::{KeyError, KeyRing};
use pvfs_config::Config;

/// Options of `pvfs keygen`.
#[derive(Args)]
pub struct KeygenArgs {
    /// The key file to write (mode 0600).
    file: PathBuf,
    /// Put a new key first and keep the current one as accepted: the first step of a
    /// rotation (copy the file to every client node, then to the servers).
    #[arg(long, conflicts_with_all = ["retire", "force"])]
    rotate: bool,
    /// Keep only the first key: the last step of a rotation.
    #[arg(long, conflicts_with = "force")]
    retire: bool,
    /// Replace an existing FILE with a new key (every node then needs the new file).
    #[arg(long)]
    force: bool,
}

/// The comment at the top of a node key file.
pub const NODE_KEY: &str = "pvfs node key: every server and every trusted client node";
/// The comment at the top of a servers' key file.
pub const SERVER_KEY: &str = "pvfs server key: servers only (it signs capabilities)";

/// Makes, rotates or retires a key file.
pub fn run(a: KeygenArgs) -> anyhow::Result<ExitCode> {
    let what = "pvfs key file";
    let ring = if a.rotate || a.retire {
        let old = KeyRing::load(&a.file)?;
        let new = if a.rotate {
            old.rotated()?
        } else {
            old.retired()
        };
        new.write(&a.file, &comment_of(&a.file).unwrap_or(what.into()), true)?;
        new
    } else {
        let new = KeyRing::generate()?;
        write_key(&new, &a.file, what, a.force)?;
        new
    };
    let ids: Vec<String> = ring.keys().iter().map(|k| k.fingerprint()).collect();
    eprintln!(
        "wrote {} (key {}{})",
        a.file.display(),
        ids[0],
        if ids.len() > 1 {
            format!("; also accepted: {}", ids[1..].join(", "))
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// An I/O error's text without the "(os error N)" suffix.
fn io_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// The first comment line of an existing key file (kept across a rotation).
fn comment_of(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("# "))
        .map(str::to_string)
}

/// Writes a new key file, refusing to replace one unless `force`.
fn write_key(ring: &KeyRing, path: &Path, what: &str, force: bool) -> anyhow::Result<()> {
    match ring.write(path, what, force) {
        Ok(()) => Ok(()),
        Err(KeyError::Exists { path }) => bail!(
            "{path} already exists: it is a key of a file system, and nodes holding it could \
             no longer connect (--force replaces it; --rotate replaces it gradually)"
        ),
        Err(e) => Err(e.into()),
    }
}

/// Writes a certificate (public: every user may read it), replacing an existing file
/// only with `force`.
fn write_public(path: &Path, pem: &str, force: bool) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).mode(0o644);
    if force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mut f = opts
        .open(path)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {}", path.display(), io_text(&e)))?;
    f.write_all(pem.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {}", path.display(), io_text(&e)))
}

/// Writes a new file system's key files and configuration (`pvfs genconfig`, `pvfs
/// demo`), keys first so that no configuration names a key that is not there; without
/// `force` nothing that exists is replaced. Returns the configuration as it loads from
/// `path` (key and storage paths resolved).
pub fn write_new_file_system(config: &Config, path: &Path, force: bool) -> anyhow::Result<Config> {
    let base = path.parent().unwrap_or(Path::new(""));
    let resolve = |p: &Path| {
        if p.is_relative() {
            base.join(p)
        } else {
            p.to_path_buf()
        }
    };
    let sec = &config.security;
    let (key, server_key) = (resolve(&sec.key), resolve(&sec.server_key));
    let tls_files = if sec.tls {
        vec![
            resolve(&sec.tls_ca),
            resolve(&sec.tls_cert),
            resolve(&sec.tls_key),
        ]
    } else {
        Vec::new()
    };
    // The directory must take files before any key is written.
    let dir = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!(
            "cannot write {}: {} is not a directory",
            path.display(),
            dir.display()
        ),
        Err(e) => bail!("cannot write {}: {}", path.display(), io_text(&e)),
    }
    if !force {
        if path.is_file() {
            bail!(
                "{} already exists: it holds the fsid and keys of a file system, and a new \
                 one cannot open that file system's storage (--force replaces it)",
                path.display()
            );
        }
        for k in [&key, &server_key].into_iter().chain(&tls_files) {
            if k.exists() {
                bail!(
                    "{} already exists (the key of another file system?): --force replaces it",
                    k.display()
                );
            }
        }
    }
    write_key(&KeyRing::generate()?, &key, NODE_KEY, force)?;
    write_key(&KeyRing::generate()?, &server_key, SERVER_KEY, force)?;
    if let [ca, cert, tls_key] = tls_files.as_slice() {
        // One certificate names every server's host; the CA's key is not kept (a
        // new server means new certificates: pvfs genconfig --tls again, or the site's).
        let mut hosts: Vec<String> = Vec::new();
        for s in &config.servers {
            let host = s
                .address
                .rsplit_once(':')
                .map_or(s.address.as_str(), |(h, _)| h)
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        let (ca_pem, cert_pem, key_pem) = pvfs_transport::tls::generate(&hosts)?;
        write_public(ca, &ca_pem, force)?;
        write_public(cert, &cert_pem, force)?;
        pvfs_auth::key::write_private(tls_key, key_pem.as_bytes(), force)?;
    }
    config.write(path, force)?;
    Ok(Config::load(path)?)
}
