//! The pvfs file system configuration: one TOML file, read by every server and client
//! and written by `pvfs genconfig`. This crate parses, validates, generates and
//! serializes it. The format (documented in full in `docs/configuration.md`):
//!
//! ```toml
//! fsid = 1234567890123
//!
//! [security]                    # optional, as are [defaults], [timeouts], [limits]
//! key = "pvfs.key"              # the node key file, beside this file (0600)
//!
//! [defaults]
//! stripe_size = "64K"           # sizes: bytes, or K, M, G, T or P (powers of 1024)
//!
//! [[servers]]                   # one table per server, at least one
//! name = "s0"
//! address = "127.0.0.1:7000"
//! roles = ["meta", "data"]
//! handles = "0x10000000000-0x1ffffffffff"
//! storage = "/srv/pvfs/s0"      # relative paths are relative to the file's directory
//! ```
//!
//! Unknown keys are errors. Every error about the file names the file, the line and
//! the key, e.g. `fs.toml:14: servers[2].roles: unknown role "metta" (expected "meta" or "data")`.

mod gen;
mod parse;
mod units;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use gen::{authority_members, GenOptions};
pub use parse::parse_metadata_sync;
pub use pvfs_proto::{Handle, Roles};
pub use units::{format_duration, format_size, parse_duration, parse_size};

/// A whole file system configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// File system id, random at generation.
    pub fsid: u64,
    /// Human name of the file system.
    pub name: String,
    /// Keys, users and their rights (the `[security]` table).
    pub security: Security,
    /// Defaults for new files and directories.
    pub defaults: Defaults,
    /// Client and server timeouts.
    pub timeouts: Timeouts,
    /// Per-server resource limits.
    pub limits: Limits,
    /// Cluster-wide file locks (the `[locks]` table).
    pub locks: Locks,
    /// Copies, the authority and its leases (the `[replication]` table).
    pub replication: Replication,
    /// What servers log (the `[logging]` table).
    pub logging: Logging,
    /// The servers, in file order; indices into this list identify servers everywhere.
    pub servers: Vec<ServerConfig>,
}

/// Who may talk to the servers, and as whom (the `[security]` table;
/// `docs/security.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Security {
    /// The node key file: every server and every trusted client node holds it.
    /// [`Config::load`] makes a relative path relative to the configuration's
    /// directory.
    pub key: PathBuf,
    /// The servers' key file (capabilities): servers only. Relative as `key`.
    pub server_key: PathBuf,
    /// Map uid 0 arriving with a MUNGE credential to nobody.
    pub root_squash: bool,
    /// Client addresses whose MUNGE root is not squashed.
    pub trusted: Vec<std::net::IpAddr>,
    /// munged's socket; `None` for libmunge's default.
    pub munge_socket: Option<PathBuf>,
    /// The user the servers run as (the owner of the key files): only its processes
    /// may open the MUNGE credentials clients make, whatever a client can see of the
    /// key file.
    pub server_uid: u32,
    /// How long a capability a metadata server grants stays valid (clients renew
    /// them; a permission taken away stops I/O by the next renewal).
    pub capability_lifetime: Duration,
    /// Run every connection over TLS 1.3 (for networks that are not trusted).
    pub tls: bool,
    /// The servers' certificate chain (PEM). Relative as `key`.
    pub tls_cert: PathBuf,
    /// The servers' TLS private key (PEM): servers only. Relative as `key`.
    pub tls_key: PathBuf,
    /// The CA certificate(s) clients check servers' certificates with (PEM). Relative
    /// as `key`.
    pub tls_ca: PathBuf,
}

impl Default for Security {
    fn default() -> Security {
        Security {
            key: PathBuf::from(DEFAULT_KEY),
            server_key: PathBuf::from(DEFAULT_SERVER_KEY),
            root_squash: true,
            trusted: Vec::new(),
            munge_socket: None,
            server_uid: 0,
            capability_lifetime: Duration::from_secs(600),
            tls: false,
            tls_cert: PathBuf::from("pvfs-tls.pem"),
            tls_key: PathBuf::from("pvfs-tls.key"),
            tls_ca: PathBuf::from("pvfs-ca.pem"),
        }
    }
}

/// The node key file's name when `[security] key` is not given.
pub const DEFAULT_KEY: &str = "pvfs.key";
/// The servers' key file's name when `[security] server_key` is not given.
pub const DEFAULT_SERVER_KEY: &str = "pvfs-server.key";

/// Defaults for new files and directories (the `[defaults]` table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defaults {
    /// Bytes per stripe unit.
    pub stripe_size: u64,
    /// Datafiles per new file.
    pub stripe_count: u32,
    /// Dirdata shards per new directory.
    pub dir_shards: u32,
    /// Whether data servers fsync every write.
    pub sync_writes: bool,
    /// When metadata servers sync their redo log (`metadata_sync`).
    pub metadata_sync: MetadataSync,
}

/// When a metadata server syncs its redo log (`[defaults] metadata_sync`): what a
/// power loss may take of acknowledged metadata changes (`docs/reliability.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetadataSync {
    /// `"commit"`: every commit is synced before it is answered (nothing acknowledged
    /// is lost even to a power loss).
    Commit,
    /// A duration: commits are written to the log before they are answered (a killed
    /// process loses nothing) and the log is synced at least this often, and at every
    /// client's fsync (a power loss takes at most the commits of the last interval).
    Every(Duration),
}

/// The default `metadata_sync`: the log is synced at least every 10 ms.
pub const DEFAULT_METADATA_SYNC: MetadataSync = MetadataSync::Every(Duration::from_millis(10));
/// The longest `metadata_sync` interval accepted.
pub const METADATA_SYNC_MAX: Duration = Duration::from_secs(10);

/// Resource limits of each server (the `[limits]` table): what bounds its memory
/// whatever clients do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of received data a server holds at once (frames queued or being written);
    /// beyond it, it stops reading sockets until data reaches the disk.
    pub buffers: u64,
    /// Client connections a server serves at once; more are closed at once. The
    /// server also keeps it under its open-file limit (raised at start as far as the
    /// system allows).
    pub connections: u32,
    /// Connections one client address may hold at once on one server (so one node,
    /// misbehaving or hostile, cannot take every slot).
    pub connections_per_address: u32,
    /// Bytes of metadata store pages a server caches in memory (the rest comes from
    /// the kernel's page cache at the price of a system call).
    pub meta_cache: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            buffers: 256 << 20,
            connections: 4096,
            connections_per_address: 1024,
            meta_cache: 1 << 20,
        }
    }
}

/// Cluster-wide file locks (the `[locks]` table; `docs/locks.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Locks {
    /// How long a server keeps the locks of a client that stopped renewing its lease
    /// (a dead or cut-off client), and how long a restarted server accepts only
    /// reclaims of locks held before (its grace period).
    pub lease: Duration,
}

impl Default for Locks {
    fn default() -> Locks {
        Locks {
            lease: Duration::from_secs(30),
        }
    }
}

/// What servers log (the `[logging]` table): the level a server starts with unless
/// `PVFS_LOG` says otherwise, and takes again from this file on SIGHUP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logging {
    /// A tracing filter: `error`, `warn`, `info`, `debug` or `trace`, or per module
    /// (`info,pvfs_server=debug`).
    pub level: String,
}

impl Default for Logging {
    fn default() -> Logging {
        Logging {
            level: "info".into(),
        }
    }
}

/// Copies of files and metadata, and the authority that decides which servers are
/// alive (the `[replication]` table; `docs/replication.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replication {
    /// Copies of new files' bytes by default (1-3), and of every metadata group.
    pub replicas: u32,
    /// The servers (indices into [`Config::servers`]) that run the authority; empty:
    /// none, and no file may have more than one copy.
    pub authority: Vec<usize>,
    /// How long a server that stops renewing keeps its roles: the failover pause.
    pub lease: Duration,
    /// How long a server may be down before its copies are rebuilt elsewhere.
    pub rebuild_after: Duration,
    /// Bytes per second a server spends on rebuild and catch-up copies.
    pub rebuild_bandwidth: u64,
    /// Bytes per second a server reads to check its datafiles' checksums in a scrub.
    pub scrub_bandwidth: u64,
}

impl Default for Replication {
    fn default() -> Replication {
        Replication {
            replicas: 1,
            authority: Vec::new(),
            lease: Duration::from_secs(2),
            rebuild_after: Duration::from_secs(600),
            rebuild_bandwidth: 100 << 20,
            scrub_bandwidth: 50 << 20,
        }
    }
}

/// Most copies of anything (`[replication] replicas`, a layout's count).
pub const MAX_REPLICAS: u32 = 3;

/// Timeouts (the `[timeouts]` table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Longest wait for a connection to a server.
    pub connect: Duration,
    /// Longest time without progress on a request before it fails with ETIMEDOUT.
    pub request: Duration,
    /// Longest wait for an fsync (it may write back much data first).
    pub sync: Duration,
    /// A connection without a request for this long is closed by the server (clients
    /// close theirs earlier, after half of it, and reconnect when needed).
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(2),
            request: Duration::from_secs(5),
            sync: Duration::from_secs(60),
            idle: Duration::from_secs(600),
        }
    }
}

/// One server (a `[[servers]]` table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// Unique name, e.g. "s0".
    pub name: String,
    /// Unique `host:port` the server listens on and clients connect to.
    pub address: String,
    /// Which objects the server holds.
    pub roles: Roles,
    /// Handles this server allocates and owns.
    pub handles: HandleRange,
    /// Directory of the server's storage.
    pub storage: PathBuf,
    /// Failure domain (a rack, a power feed): copies of one thing go to distinct
    /// domains. `None`: the server is a domain of its own.
    pub domain: Option<String>,
    /// `host:port` where the server serves Prometheus metrics (`GET /metrics`);
    /// `None`: no metrics.
    pub metrics: Option<String>,
}

/// An inclusive range of handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HandleRange {
    /// First handle of the range.
    pub first: Handle,
    /// Last handle of the range (inclusive).
    pub last: Handle,
}

impl HandleRange {
    /// Whether `h` is in the range.
    pub fn contains(&self, h: Handle) -> bool {
        (self.first..=self.last).contains(&h)
    }

    /// Whether the two ranges share a handle.
    pub fn overlaps(&self, other: &HandleRange) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

impl std::fmt::Display for HandleRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}-{:#x}", self.first, self.last)
    }
}

/// Why a configuration could not be read, parsed, validated or generated.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {}", io_message(.source))]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is malformed or invalid.
    #[error("{origin}{}: {}{message}", at_line(.line), at_key(.key))]
    Invalid {
        /// The file (or "genconfig" for generation options).
        origin: String,
        /// 1-based line of the problem, when it is in the file.
        line: Option<usize>,
        /// Path of the key, e.g. "servers[2].roles"; empty when unknown.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// Generation failed for a reason outside any file (e.g. no free port).
    #[error("genconfig: {0}")]
    Generate(String),
    /// The file could not be written.
    #[error("cannot write {path}: {}", io_message(.source))]
    Write {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file exists and was not to be replaced ([`Config::write`]).
    #[error("{path} already exists")]
    Exists {
        /// The file.
        path: String,
    },
}

impl ConfigError {
    /// The 1-based line in the file the error points at, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::Invalid { line, .. } => *line,
            _ => None,
        }
    }
}

/// An I/O error's text without the "(os error N)" suffix.
fn io_message(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Writes `bytes` to a new file `path` of mode 0600 (see [`Config::write`]).
fn write_private(path: &Path, bytes: &[u8], replace: bool) -> Result<(), ConfigError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    let fail = |source: std::io::Error| ConfigError::Write {
        path: path.display().to_string(),
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
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                fail(e)
            } else if path.is_dir() {
                fail(std::io::ErrorKind::IsADirectory.into())
            } else {
                ConfigError::Exists {
                    path: path.display().to_string(),
                }
            }
        })?;
        return fill(&mut f).map_err(|e| {
            // Leave no half-written configuration behind.
            let _ = std::fs::remove_file(path);
            fail(e)
        });
    }
    let name = path
        .file_name()
        .ok_or_else(|| fail(std::io::ErrorKind::InvalidInput.into()))?;
    let mut n = 0u32;
    let (tmp, mut f) = loop {
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.{n}.tmp", std::process::id()));
        let tmp = path.with_file_name(tmp_name);
        match create(&tmp) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
            Err(e) => return Err(fail(e)),
        }
    };
    let written = fill(&mut f).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}

fn at_line(line: &Option<usize>) -> String {
    line.map(|l| format!(":{l}")).unwrap_or_default()
}

fn at_key(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("{key}: ")
    }
}

impl Config {
    /// Reads and validates a configuration file; relative storage paths are taken
    /// relative to the file's directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let mut config = Config::parse(&text, &path.display().to_string())?;
        let base = path.parent().unwrap_or(Path::new(""));
        for s in &mut config.servers {
            if s.storage.is_relative() {
                s.storage = base.join(&s.storage);
            }
        }
        let sec = &mut config.security;
        for p in [
            &mut sec.key,
            &mut sec.server_key,
            &mut sec.tls_cert,
            &mut sec.tls_key,
            &mut sec.tls_ca,
        ] {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        Ok(config)
    }

    /// Parses and validates configuration text; `origin` names it in error messages.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        parse::parse(text, origin)
    }

    /// Writes the configuration to the file `path`, which only its owner may read or
    /// write (mode 0600: it names the file system's keys and storage). Without `replace` an
    /// existing file is an error ([`ConfigError::Exists`]) and is left alone: the file
    /// is created exclusively (`O_EXCL`) with mode 0600 from the start. With `replace`
    /// the text goes to a new 0600 file beside `path` that is then renamed over it, so
    /// the file never has wider permissions and never holds half a configuration.
    pub fn write(&self, path: &Path, replace: bool) -> Result<(), ConfigError> {
        write_private(path, self.to_toml().as_bytes(), replace)
    }

    /// The configuration as TOML text (with a header comment) that parses back to it.
    pub fn to_toml(&self) -> String {
        gen::to_toml(self)
    }

    /// Adds data server `server` at the end of the configuration file at `path`:
    /// its text (comments and all) stays, a `[[servers]]` table is appended, the
    /// result must load, and replaces the file at once (`docs/configuration.md`,
    /// "Adding a server"). `server.handles` and `server.roles` are ignored: the new
    /// server holds data only, and gets the next range of handles after every
    /// server's. Returns the configuration written.
    pub fn add_data_server(path: &Path, mut server: ServerConfig) -> Result<Config, ConfigError> {
        let old = Config::load(path)?;
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let invalid = |message: String| ConfigError::Invalid {
            origin: path.display().to_string(),
            line: None,
            key: "servers".into(),
            message,
        };
        if old.server_index(&server.name).is_some() {
            return Err(invalid(format!(
                "a server is named {:?} already",
                server.name
            )));
        }
        // The next range after every server's, on a 2^40 boundary as `generate`'s.
        let last = old
            .servers
            .iter()
            .map(|s| s.handles.last)
            .max()
            .unwrap_or(0);
        let first = ((last >> 40) + 1).checked_shl(40).filter(|&f| f > last);
        let Some((first, end)) = first.and_then(|f| Some((f, f.checked_add((1 << 40) - 1)?)))
        else {
            return Err(invalid("no handles left for another server".into()));
        };
        server.handles = HandleRange { first, last: end };
        server.roles = Roles::DATA;
        let mut text = text.trim_end().to_string();
        text.push_str("\n\n");
        text.push_str(&gen::server_toml(&server));
        text.push('\n');
        Config::parse(&text, &path.display().to_string())?;
        write_private(path, text.as_bytes(), true)?;
        Config::load(path)
    }

    /// Generates a configuration for a new file system (see [`GenOptions`]).
    pub fn generate(opts: &GenOptions) -> Result<Config, ConfigError> {
        gen::generate(opts)
    }

    /// Index of the server called `name`.
    pub fn server_index(&self, name: &str) -> Option<usize> {
        self.servers.iter().position(|s| s.name == name)
    }

    /// Index of the server whose handle range holds `handle`.
    pub fn owner_of(&self, handle: Handle) -> Option<usize> {
        self.servers.iter().position(|s| s.handles.contains(handle))
    }

    /// Every server's failure domain as a number: the index of the first server
    /// in its domain (one without a domain is a domain of its own). Empty when no
    /// server names a domain.
    pub fn domains(&self) -> Vec<usize> {
        if self.servers.iter().all(|s| s.domain.is_none()) {
            return Vec::new();
        }
        self.servers
            .iter()
            .enumerate()
            .map(|(i, s)| match &s.domain {
                Some(d) => self
                    .servers
                    .iter()
                    .position(|o| o.domain.as_ref() == Some(d))
                    .unwrap_or(i),
                None => i,
            })
            .collect()
    }

    /// Indices of the metadata servers, in file order.
    pub fn meta_servers(&self) -> Vec<usize> {
        self.with_role(Roles::META)
    }

    /// Indices of the data servers, in file order.
    pub fn data_servers(&self) -> Vec<usize> {
        self.with_role(Roles::DATA)
    }

    /// The root directory's handle: the first handle of the first metadata server.
    pub fn root_handle(&self) -> Handle {
        self.meta_servers()
            .first()
            .map_or(0, |&i| self.servers[i].handles.first)
    }

    /// The server holding shard `shard` of directory `dir`, given the metadata
    /// servers `metas` ([`Config::meta_servers`], passed in so callers that place many
    /// names compute it once): shard k lives on the k-th metadata server after the
    /// directory's owner (shard 0 with the directory), `docs/namespace.md`.
    pub fn shard_server_in(&self, metas: &[usize], dir: Handle, shard: u32) -> usize {
        let pos = self
            .owner_of(dir)
            .and_then(|owner| metas.iter().position(|&m| m == owner))
            .unwrap_or(0);
        metas[(pos + shard as usize) % metas.len()]
    }

    /// The servers of the `r` copies of a datafile whose first copy is on data
    /// server `data[first]` (`data` = [`Config::data_servers`]), in chain order: the
    /// next data servers after it in a domain no copy has yet, then, when the domains
    /// run out, the next ones not holding a copy (`docs/replication.md`,
    /// "Placement"). Fewer than `r` only when there are fewer data servers.
    pub fn replica_set(&self, data: &[usize], first: usize, r: usize) -> Vec<u32> {
        let n = data.len();
        let domain = |s: usize| {
            let server = &self.servers[s];
            server.domain.as_deref().unwrap_or(&server.name).to_string()
        };
        let ring = || (0..n).map(|k| data[(first + k) % n]);
        let mut set: Vec<usize> = Vec::with_capacity(r);
        for s in ring() {
            if set.len() < r && !set.iter().any(|&c| domain(c) == domain(s)) {
                set.push(s);
            }
        }
        for s in ring() {
            if set.len() < r && !set.contains(&s) {
                set.push(s);
            }
        }
        debug_assert!(set.first() == data.get(first % n.max(1)));
        set.into_iter().map(|s| s as u32).collect()
    }

    /// The servers holding metadata group `group` (metadata server `group`'s names and
    /// objects), primary first: the group's own server, then its standbys, the next
    /// metadata servers in distinct domains, `[replication] replicas` in all
    /// (`docs/replication.md`, "Placement"). Just the server without an authority.
    pub fn meta_group(&self, group: usize) -> Vec<u32> {
        let metas = self.meta_servers();
        let Some(pos) = metas.iter().position(|&m| m == group) else {
            return Vec::new();
        };
        let r = if self.replication.authority.is_empty() {
            1
        } else {
            self.replication.replicas.max(1) as usize
        };
        self.replica_set(&metas, pos, r)
    }

    /// The server holding entry `name` of directory `dir` with `shards` shards (a new
    /// object named `name` is created there too).
    pub fn entry_server(&self, dir: Handle, shards: u32, name: &str) -> usize {
        self.shard_server_in(
            &self.meta_servers(),
            dir,
            pvfs_proto::name_shard(name, shards),
        )
    }

    fn with_role(&self, role: Roles) -> Vec<usize> {
        (0..self.servers.len())
            .filter(|&i| self.servers[i].roles.contains(role))
            .collect()
    }
}

#[cfg(test)]
mod tests;
