//! Generating a configuration for a new file system, and writing one as TOML.

use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;

use crate::parse::{check, DEFAULT_STRIPE_SIZE};
use crate::units::{format_duration, format_size, parse_size};
use crate::{
    Config, ConfigError, Defaults, HandleRange, Limits, Locks, Logging, MetadataSync, Replication,
    Roles, Security, ServerConfig, Timeouts, DEFAULT_METADATA_SYNC,
};

/// Most servers `generate` will lay out (each owns 2^40 handles).
const MAX_SERVERS: usize = 1 << 16;

/// What `pvfs genconfig` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenOptions {
    /// Number of servers; every one has the data role.
    pub servers: usize,
    /// How many of the servers (the first ones) also have the meta role; None = all.
    pub meta_servers: Option<usize>,
    /// Storage parent directory; server i stores under `dir/s{i}` (made absolute).
    pub dir: PathBuf,
    /// Host part of every server address.
    pub host: String,
    /// Port of server 0 (server i gets `base_port + i`); 0 = pick free ports on `host`.
    pub base_port: u16,
    /// Default stripe size in bytes.
    pub stripe_size: u64,
    /// Default datafiles per file; None = all data servers.
    pub stripe_count: Option<u32>,
    /// Default dirdata shards per directory; None = all meta servers.
    pub dir_shards: Option<u32>,
    /// Name of the file system.
    pub name: String,
    /// File system id; None = random.
    pub fsid: Option<u64>,
    /// Stem of the key files' names: `STEM.key` and `STEM-server.key`, beside the
    /// configuration (`pvfs genconfig` uses the configuration file's stem), and with
    /// `tls`, `STEM-tls.pem`, `STEM-tls.key` and `STEM-ca.pem`.
    pub key_stem: String,
    /// Every connection over TLS 1.3.
    pub tls: bool,
    /// Copies of every file and of the metadata (1-3); more than one also names the
    /// authority's servers: the first five with three copies (so that any two
    /// servers may fail at once, as three copies promise), else the first three, or
    /// one with fewer than three servers.
    pub replicas: u32,
    /// First port of the servers' Prometheus metrics (`[[servers]] metrics`, on each
    /// server's host): server `i` serves them on this port + `i`. `Some(0)`: free
    /// ports now; `None`: the servers' first port + 100 (+ `i`), or free ports when
    /// that is 0.
    pub metrics_port: Option<u16>,
}

/// How many servers run the authority of a file system of `servers` servers with
/// `replicas` copies: a majority must outlive the faults the copies survive (`r - 1`
/// at once), so `2r - 1` members, as many of 5, 3 or 1 as there are servers.
pub fn authority_members(replicas: u32, servers: usize) -> usize {
    let wanted = (2 * replicas as usize).saturating_sub(1).max(3);
    [5, 3, 1]
        .into_iter()
        .find(|&m| m <= wanted && m <= servers)
        .unwrap_or(1)
}

impl GenOptions {
    /// `servers` servers storing under `dir`, on 127.0.0.1:7000.., stripe 64K, name "pvfs".
    pub fn new(servers: usize, dir: impl Into<PathBuf>) -> GenOptions {
        GenOptions {
            servers,
            meta_servers: None,
            dir: dir.into(),
            host: "127.0.0.1".into(),
            base_port: 7000,
            stripe_size: DEFAULT_STRIPE_SIZE,
            stripe_count: None,
            dir_shards: None,
            name: "pvfs".into(),
            fsid: None,
            key_stem: "pvfs".into(),
            tls: false,
            replicas: 1,
            metrics_port: None,
        }
    }
}

pub(crate) fn generate(o: &GenOptions) -> Result<Config, ConfigError> {
    let fail = |m: String| ConfigError::Generate(m);
    let n = o.servers;
    let m = o.meta_servers.unwrap_or(n);
    if n == 0 || n > MAX_SERVERS {
        return Err(fail(format!(
            "the number of servers must be in 1..={MAX_SERVERS}, not {n}"
        )));
    }
    if m == 0 || m > n {
        return Err(fail(format!(
            "the number of meta servers must be in 1..={n}, not {m}"
        )));
    }
    let dir = std::path::absolute(&o.dir)
        .map_err(|e| fail(format!("cannot make {} absolute: {e}", o.dir.display())))?;
    // Each server's metrics port: from `metrics_port`, else 100 (or, past 100
    // servers, `n`) above the servers' ports.
    let metrics_base = match (o.metrics_port, o.base_port) {
        (Some(p), _) => p,
        (None, 0) => 0,
        (None, b) => u16::try_from(b as usize + n.max(100)).map_err(|_| {
            fail(format!(
                "ports {b}.. leave no room for {n} metrics ports 100 above them"
            ))
        })?,
    };
    // The servers' ports, then their metrics ports (free ones picked together, so
    // that no two are the same).
    let ports = match (o.base_port, metrics_base) {
        (0, 0) => ports(&o.host, 0, 2 * n)?,
        (b, mb) => {
            let mut p = ports(&o.host, b, n)?;
            p.extend(ports(&o.host, mb, n)?);
            p
        }
    };
    let host = if o.host.contains(':') && !o.host.starts_with('[') {
        format!("[{}]", o.host) // IPv6 literal
    } else {
        o.host.clone()
    };
    let servers = (0..n)
        .map(|i| ServerConfig {
            name: format!("s{i}"),
            address: format!("{host}:{}", ports[i]),
            roles: if i < m {
                Roles::META | Roles::DATA
            } else {
                Roles::DATA
            },
            handles: HandleRange {
                first: (i as u64 + 1) << 40,
                last: ((i as u64 + 2) << 40) - 1,
            },
            storage: dir.join(format!("s{i}")),
            domain: None,
            metrics: Some(format!("{host}:{}", ports[n + i])),
        })
        .collect();
    let replication = Replication {
        replicas: o.replicas,
        authority: if o.replicas > 1 {
            (0..authority_members(o.replicas, n)).collect()
        } else {
            Vec::new()
        },
        ..Replication::default()
    };
    let config = Config {
        fsid: o.fsid.unwrap_or_else(random_fsid),
        name: o.name.clone(),
        security: Security {
            key: PathBuf::from(format!("{}.key", o.key_stem)),
            server_key: PathBuf::from(format!("{}-server.key", o.key_stem)),
            tls: o.tls,
            tls_cert: PathBuf::from(format!("{}-tls.pem", o.key_stem)),
            tls_key: PathBuf::from(format!("{}-tls.key", o.key_stem)),
            tls_ca: PathBuf::from(format!("{}-ca.pem", o.key_stem)),
            ..Security::default()
        },
        defaults: Defaults {
            stripe_size: o.stripe_size,
            stripe_count: o.stripe_count.unwrap_or(n as u32),
            dir_shards: o.dir_shards.unwrap_or(m as u32),
            sync_writes: false,
            metadata_sync: DEFAULT_METADATA_SYNC,
        },
        timeouts: Timeouts::default(),
        limits: Limits::default(),
        locks: Locks::default(),
        replication,
        logging: Logging::default(),
        servers,
    };
    check(&config).map_err(|(key, message)| ConfigError::Invalid {
        origin: "genconfig".into(),
        line: None,
        key,
        message,
    })?;
    Ok(config)
}

/// `n` ports from `base`, or with `base == 0` `n` distinct ports free on `host` now
/// (all listeners stay open until every port is chosen).
fn ports(host: &str, base: u16, n: usize) -> Result<Vec<u16>, ConfigError> {
    if base != 0 {
        return (0..n)
            .map(|i| u16::try_from(base as usize + i).ok())
            .collect::<Option<Vec<u16>>>()
            .ok_or_else(|| {
                ConfigError::Generate(format!("ports {base}.. do not fit {n} servers"))
            });
    }
    let bind_host = host.trim_start_matches('[').trim_end_matches(']');
    let err = |e: std::io::Error| {
        ConfigError::Generate(format!("cannot pick a free port on {host}: {e}"))
    };
    let listeners = (0..n)
        .map(|_| TcpListener::bind((bind_host, 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect::<Result<_, _>>()
        .map_err(err)
}

/// A random fsid in 1..=i64::MAX (so it stays a plain TOML integer).
fn random_fsid() -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&random_bytes(8));
    (u64::from_le_bytes(b) & i64::MAX as u64).max(1)
}

/// `n` random bytes from /dev/urandom (a time-and-pid mix if it cannot be read).
fn random_bytes(n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let mut x = t.map_or(0, |d| d.as_nanos() as u64) ^ (u64::from(std::process::id()) << 40);
        for byte in b.iter_mut() {
            x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
            *byte = (x >> 56) as u8;
        }
    }
    b
}

/// A TOML string literal.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

pub(crate) fn to_toml(c: &Config) -> String {
    let fsid = match i64::try_from(c.fsid) {
        Ok(_) => c.fsid.to_string(),
        Err(_) => format!("\"{:#x}\"", c.fsid),
    };
    let size = |n: u64| match format_size(n) {
        s if parse_size(&s) == Ok(n) => quote(&s),
        _ => n.to_string(),
    };
    let duration = |d| quote(&format_duration(d));
    let note = |line: String, comment: &str| {
        if line.len() < 24 {
            format!("{line:<24}# {comment}")
        } else {
            format!("{line}  # {comment}")
        }
    };
    let d = &c.defaults;
    let mut out = vec![
        "# pvfs file system configuration (generated by pvfs genconfig)".to_string(),
        "# Every server and client reads this same file; see docs/configuration.md.".into(),
        format!("fsid = {fsid}"),
        format!("name = {}", quote(&c.name)),
    ];
    let sec = &c.security;
    let path = |p: &std::path::Path| quote(&p.to_string_lossy());
    out.extend([
        String::new(),
        "[security]".into(),
        "# Key files, relative to this file's directory; keep them readable by their owner".into(),
        "# only (0600). Clients that cannot read the key prove their user with MUNGE.".into(),
        note(
            format!("key = {}", path(&sec.key)),
            "node key: servers and trusted clients",
        ),
        note(
            format!("server_key = {}", path(&sec.server_key)),
            "capabilities: servers only",
        ),
        note(
            format!("root_squash = {}", sec.root_squash),
            "MUNGE root acts as nobody",
        ),
        note(
            format!(
                "trusted = [{}]",
                sec.trusted
                    .iter()
                    .map(|a| quote(&a.to_string()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "clients whose MUNGE root is root",
        ),
    ]);
    out.push(note(
        format!(
            "capability_lifetime = {}",
            quote(&format_duration(sec.capability_lifetime))
        ),
        "rights granted at open, renewed",
    ));
    out.push(note(
        format!("tls = {}", sec.tls),
        "every connection over TLS 1.3",
    ));
    if sec.tls || sec.tls_cert != Security::default().tls_cert {
        out.extend([
            note(
                format!("tls_cert = {}", path(&sec.tls_cert)),
                "servers' certificate",
            ),
            note(
                format!("tls_key = {}", path(&sec.tls_key)),
                "its key: servers only",
            ),
            note(
                format!("tls_ca = {}", path(&sec.tls_ca)),
                "clients check servers with it",
            ),
        ]);
    }
    if let Some(sock) = &sec.munge_socket {
        out.push(note(
            format!("munge_socket = {}", path(sock)),
            "munged's socket",
        ));
    }
    out.push(note(
        format!("server_uid = {}", sec.server_uid),
        "servers run as this user: only it opens MUNGE credentials",
    ));
    out.extend([
        String::new(),
        "[defaults]".into(),
        note(
            format!("stripe_size = {}", size(d.stripe_size)),
            "bytes per stripe unit",
        ),
        note(
            format!("stripe_count = {}", d.stripe_count),
            "datafiles per new file",
        ),
        note(
            format!("dir_shards = {}", d.dir_shards),
            "dirdata shards per new directory",
        ),
        note(
            format!("sync_writes = {}", d.sync_writes),
            "fsync every write on data servers",
        ),
        note(
            format!(
                "metadata_sync = {}",
                match d.metadata_sync {
                    MetadataSync::Commit => "\"commit\"".to_string(),
                    MetadataSync::Every(t) => duration(t),
                }
            ),
            "sync metadata logs: every \"commit\", or this often",
        ),
        String::new(),
        "[timeouts]".into(),
        note(
            format!("connect = {}", duration(c.timeouts.connect)),
            "to connect to a server",
        ),
        note(
            format!("request = {}", duration(c.timeouts.request)),
            "no progress -> ETIMEDOUT",
        ),
        note(
            format!("sync = {}", duration(c.timeouts.sync)),
            "longest wait for an fsync",
        ),
        note(
            format!("idle = {}", duration(c.timeouts.idle)),
            "a connection with nothing to do is closed",
        ),
        String::new(),
        "[limits]".into(),
        note(
            format!("buffers = {}", size(c.limits.buffers)),
            "received data a server holds at once",
        ),
        note(
            format!("connections = {}", c.limits.connections),
            "client connections per server",
        ),
        note(
            format!(
                "connections_per_address = {}",
                c.limits.connections_per_address
            ),
            "of them from one client address",
        ),
        note(
            format!("meta_cache = {}", size(c.limits.meta_cache)),
            "metadata store pages a server caches",
        ),
        String::new(),
        "[locks]".into(),
        note(
            format!("lease = {}", duration(c.locks.lease)),
            "a dead client's locks go after this",
        ),
    ]);
    let r = &c.replication;
    let names: Vec<String> = r
        .authority
        .iter()
        .map(|&i| quote(&c.servers[i].name))
        .collect();
    out.extend([
        String::new(),
        "[replication]".into(),
        note(
            format!("replicas = {}", r.replicas),
            "copies of new files and of metadata",
        ),
        note(
            format!("authority = [{}]", names.join(", ")),
            "servers deciding who is alive (for replicas > 1)",
        ),
        note(
            format!("lease = {}", duration(r.lease)),
            "a silent server is replaced after this",
        ),
        note(
            format!("rebuild_after = {}", duration(r.rebuild_after)),
            "down this long: copies rebuilt elsewhere",
        ),
        note(
            format!("rebuild_bandwidth = {}", size(r.rebuild_bandwidth)),
            "per second, per server",
        ),
        note(
            format!("scrub_bandwidth = {}", size(r.scrub_bandwidth)),
            "per second, per server, checking checksums",
        ),
        String::new(),
        "[logging]".into(),
        note(
            format!("level = {}", quote(&c.logging.level)),
            "servers re-read it on SIGHUP",
        ),
    ]);
    for s in &c.servers {
        out.push(String::new());
        out.push(server_toml(s));
    }
    out.push(String::new());
    out.join("\n")
}

/// One server's `[[servers]]` table, as TOML lines (no newline at the end).
pub(crate) fn server_toml(s: &ServerConfig) -> String {
    let roles: Vec<&str> = [(Roles::META, "\"meta\""), (Roles::DATA, "\"data\"")]
        .into_iter()
        .filter_map(|(r, name)| s.roles.contains(r).then_some(name))
        .collect();
    let mut out = vec![
        "[[servers]]".to_string(),
        format!("name = {}", quote(&s.name)),
        format!("address = {}", quote(&s.address)),
        format!("roles = [{}]", roles.join(", ")),
        format!("handles = \"{}\"", s.handles),
        format!("storage = {}", quote(&s.storage.to_string_lossy())),
    ];
    if let Some(d) = &s.domain {
        out.push(format!("domain = {}", quote(d)));
    }
    if let Some(m) = &s.metrics {
        out.push(format!(
            "metrics = {}  # Prometheus: GET /metrics",
            quote(m)
        ));
    }
    out.join("\n")
}
