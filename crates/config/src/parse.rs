//! TOML text to a validated [`Config`]: serde reads the text into raw structs whose
//! values carry their spans; conversion (units, roles, handle ranges) and validation
//! then turn spans into line numbers for their error messages.

use std::collections::HashMap;
use std::ops::Range;

use pvfs_proto::layout::{MAX_STRIPE_SIZE, MIN_STRIPE_SIZE};
use serde::Deserialize;
use toml::{Spanned, Value};

use crate::units::{format_size, parse_duration, parse_size};
use crate::{
    Config, ConfigError, Defaults, HandleRange, Limits, Locks, Logging, MetadataSync, Replication,
    Roles, Security, ServerConfig, Timeouts, DEFAULT_METADATA_SYNC, MAX_REPLICAS,
    METADATA_SYNC_MAX,
};

/// Stripe size when `[defaults]` does not give one.
pub(crate) const DEFAULT_STRIPE_SIZE: u64 = 64 << 10;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    fsid: Spanned<Value>,
    name: Option<Spanned<String>>,
    secret: Option<Spanned<String>>,
    security: Option<Spanned<RawSecurity>>,
    defaults: Option<Spanned<RawDefaults>>,
    timeouts: Option<Spanned<RawTimeouts>>,
    limits: Option<Spanned<RawLimits>>,
    locks: Option<Spanned<RawLocks>>,
    replication: Option<Spanned<RawReplication>>,
    logging: Option<Spanned<RawLogging>>,
    servers: Spanned<Vec<RawServer>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecurity {
    key: Option<Spanned<String>>,
    server_key: Option<Spanned<String>>,
    root_squash: Option<bool>,
    trusted: Option<Spanned<Vec<Spanned<String>>>>,
    munge_socket: Option<Spanned<String>>,
    server_uid: Option<Spanned<i64>>,
    capability_lifetime: Option<Spanned<Value>>,
    tls: Option<bool>,
    tls_cert: Option<Spanned<String>>,
    tls_key: Option<Spanned<String>>,
    tls_ca: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    stripe_size: Option<Spanned<Value>>,
    stripe_count: Option<Spanned<i64>>,
    dir_shards: Option<Spanned<i64>>,
    sync_writes: Option<bool>,
    metadata_sync: Option<Spanned<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    connect: Option<Spanned<Value>>,
    request: Option<Spanned<Value>>,
    sync: Option<Spanned<Value>>,
    idle: Option<Spanned<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    buffers: Option<Spanned<Value>>,
    connections: Option<Spanned<Value>>,
    connections_per_address: Option<Spanned<Value>>,
    meta_cache: Option<Spanned<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLocks {
    lease: Option<Spanned<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLogging {
    level: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplication {
    replicas: Option<Spanned<i64>>,
    authority: Option<Spanned<Vec<Spanned<String>>>>,
    lease: Option<Spanned<Value>>,
    rebuild_after: Option<Spanned<Value>>,
    rebuild_bandwidth: Option<Spanned<Value>>,
    scrub_bandwidth: Option<Spanned<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    name: Spanned<String>,
    address: Spanned<String>,
    roles: Spanned<Vec<Spanned<String>>>,
    handles: Spanned<Value>,
    storage: Spanned<String>,
    domain: Option<Spanned<String>>,
    metrics: Option<Spanned<String>>,
}

/// The text being parsed, and the line of every key seen so far.
struct Ctx<'a> {
    text: &'a str,
    origin: &'a str,
    lines: HashMap<String, usize>,
}

impl Ctx<'_> {
    fn line(&self, span: Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn error(&self, line: Option<usize>, key: &str, message: impl Into<String>) -> ConfigError {
        let origin = self.origin.to_string();
        ConfigError::Invalid {
            origin,
            line,
            key: key.to_string(),
            message: message.into(),
        }
    }

    /// Records where `key` is and returns its value.
    fn at<'v, T>(&mut self, key: &str, v: &'v Spanned<T>) -> &'v T {
        self.lines.insert(key.to_string(), self.line(v.span()));
        v.get_ref()
    }

    /// Records where `key` is and converts its value, or fails naming its line.
    fn convert<T, U>(
        &mut self,
        key: &str,
        v: &Spanned<T>,
        f: impl FnOnce(&T) -> Result<U, String>,
    ) -> Result<U, ConfigError> {
        let line = self.line(v.span());
        f(self.at(key, v)).map_err(|m| self.error(Some(line), key, m))
    }

    /// The line of `key`, or of the nearest enclosing key that has one.
    fn line_of(&self, key: &str) -> Option<usize> {
        let mut k = key;
        loop {
            if let Some(&l) = self.lines.get(k) {
                return Some(l);
            }
            k = &k[..k.rfind(['.', '['])?];
        }
    }

    fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let message = e.message().trim().lines().collect::<Vec<_>>().join("; ");
        // A missing field's span is its table: name the table, not the key on its line.
        let table_only = message.starts_with("missing field");
        match e.span() {
            Some(s) => {
                let key = key_at(self.text, s.start, table_only);
                // TOML's own words for an unquoted word ("invalid boolean" for
                // `four`, which begins like `false`) say nothing to a person.
                let message = match bare_word_at(self.text, s.start) {
                    Some(word) => format!(
                        "{word} is not a value: write a number in digits, and a word in \
                         quotes (\"{word}\")"
                    ),
                    None => message,
                };
                self.error(Some(self.line(s)), &key, message)
            }
            None => self.error(None, "", message),
        }
    }
}

/// Best-effort dotted path of the key at byte `offset`, e.g. "servers[1].roles", or
/// with `table_only` of its table, e.g. "servers[1]".
fn key_at(text: &str, offset: usize, table_only: bool) -> String {
    let (mut table, mut counts) = (String::new(), HashMap::<String, usize>::new());
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
            let n = counts.entry(name.trim().to_string()).or_insert(0);
            table = format!("{}[{n}]", name.trim());
            *n += 1;
        } else if let Some(name) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
            table = name.trim().to_string();
        }
        pos += line.len();
        if offset < pos || pos == text.len() {
            let key = match t.split_once('=') {
                Some((k, _)) if !t.starts_with('[') && !table_only => k.trim().trim_matches('"'),
                _ => "",
            };
            return match (table.is_empty(), key.is_empty()) {
                (_, true) => table,
                (true, false) => key.to_string(),
                (false, false) => format!("{table}.{key}"),
            };
        }
    }
    table
}

/// The value of the `key = value` line at byte `offset` when it is a bare word
/// (neither quoted, nor a number, a boolean, a date, an array or a table).
fn bare_word_at(text: &str, offset: usize) -> Option<&str> {
    let start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?;
    let (_, value) = line.split_once('=')?;
    let value = value.split('#').next()?.trim();
    let word = value
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !matches!(value, "true" | "false" | "inf" | "nan");
    word.then_some(value)
}

/// A log level or filter: levels, module paths and `=` (checked in full by the server
/// that applies it).
fn log_level(s: &String) -> Result<String, String> {
    let ok = !s.trim().is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_:=,.-".contains(c));
    if ok {
        Ok(s.trim().to_string())
    } else {
        Err(format!(
            "{s:?} is not a log level (error, warn, info, debug or trace, or per module: \
             \"info,pvfs_server=debug\")"
        ))
    }
}

/// A path that is not empty.
fn non_empty_path(s: &String) -> Result<std::path::PathBuf, String> {
    if s.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(s.into())
    }
}

/// A handle or fsid: decimal or "0x" hexadecimal.
fn parse_number(s: &str) -> Result<u64, String> {
    let t = s.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse(),
    }
    .map_err(|_| format!("invalid number {s:?} (expected decimal or 0x hexadecimal)"))
}

fn number_value(v: &Value) -> Result<u64, String> {
    match v {
        Value::Integer(i) => u64::try_from(*i).map_err(|_| format!("{i} is negative")),
        Value::String(s) => parse_number(s),
        v => Err(format!("expected an integer, found {}", v.type_str())),
    }
}

fn size_value(v: &Value) -> Result<u64, String> {
    match v {
        Value::String(s) => parse_size(s),
        v => number_value(v).map_err(|_| format!("expected a size like \"64K\", found {v}")),
    }
}

fn duration_value(v: &Value) -> Result<std::time::Duration, String> {
    match v {
        Value::Integer(ms) => u64::try_from(*ms)
            .map(std::time::Duration::from_millis)
            .map_err(|_| format!("{ms} is negative")),
        Value::String(s) => parse_duration(s),
        v => Err(format!(
            "expected a duration like \"2s\", found {}",
            v.type_str()
        )),
    }
}

/// Parses a `metadata_sync` value given as text (`pvfs genconfig --metadata-sync`):
/// `commit`, or a duration ("10ms").
pub fn parse_metadata_sync(s: &str) -> Result<MetadataSync, String> {
    metadata_sync_value(&Value::String(s.to_string()))
}

/// `"commit"`, or the longest time between two syncs of the redo log.
fn metadata_sync_value(v: &Value) -> Result<MetadataSync, String> {
    if let Value::String(s) = v {
        if s.trim() == "commit" {
            return Ok(MetadataSync::Commit);
        }
    }
    let d = duration_value(v).map_err(|e| format!("{e}, or \"commit\""))?;
    if d < std::time::Duration::from_millis(1) || d > METADATA_SYNC_MAX {
        return Err(format!(
            "{} is not between 1ms and {} (or \"commit\": sync every commit)",
            crate::units::format_duration(d),
            crate::units::format_duration(METADATA_SYNC_MAX)
        ));
    }
    Ok(MetadataSync::Every(d))
}

fn handle_range(v: &Value) -> Result<HandleRange, String> {
    let (first, last) = match v {
        Value::String(s) => {
            let (a, b) = s
                .split_once('-')
                .ok_or_else(|| format!("{s:?} is not FIRST-LAST"))?;
            (parse_number(a)?, parse_number(b)?)
        }
        Value::Table(t) => {
            if let Some(k) = t.keys().find(|k| *k != "first" && *k != "last") {
                return Err(format!(
                    "unknown key {k:?} (expected \"first\" and \"last\")"
                ));
            }
            let get = |k| {
                t.get(k)
                    .ok_or_else(|| format!("missing {k:?}"))
                    .and_then(number_value)
            };
            (get("first")?, get("last")?)
        }
        v => Err(format!(
            "expected \"FIRST-LAST\" or {{ first, last }}, found {}",
            v.type_str()
        ))?,
    };
    Ok(HandleRange { first, last })
}

fn count(n: &i64) -> Result<u32, String> {
    u32::try_from(*n).map_err(|_| format!("{n} is out of range"))
}

pub(crate) fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let mut cx = Ctx {
        text,
        origin,
        lines: HashMap::new(),
    };
    let raw: RawConfig = toml::from_str(text).map_err(|e| cx.toml_error(&e))?;
    let fsid = cx.convert("fsid", &raw.fsid, number_value)?;
    let name = raw
        .name
        .as_ref()
        .map_or("pvfs".into(), |n| cx.at("name", n).clone());
    if let Some(v) = &raw.secret {
        return Err(cx.error(
            Some(cx.line(v.span())),
            "secret",
            "the shared secret now lives in the key file named by [security] key: \
             create it with pvfs keygen and remove this line (docs/security.md)",
        ));
    }
    let mut security = Security::default();
    if let Some(sec) = &raw.security {
        let sec = cx.at("security", sec);
        if let Some(v) = &sec.key {
            security.key = cx.convert("security.key", v, non_empty_path)?;
        }
        if let Some(v) = &sec.server_key {
            security.server_key = cx.convert("security.server_key", v, non_empty_path)?;
        }
        if let Some(v) = &sec.munge_socket {
            security.munge_socket = Some(cx.convert("security.munge_socket", v, non_empty_path)?);
        }
        if let Some(v) = &sec.server_uid {
            security.server_uid = cx.convert("security.server_uid", v, count)?;
        }
        if let Some(v) = &sec.capability_lifetime {
            security.capability_lifetime =
                cx.convert("security.capability_lifetime", v, duration_value)?;
        }
        security.root_squash = sec.root_squash.unwrap_or(true);
        security.tls = sec.tls.unwrap_or(false);
        if let Some(v) = &sec.tls_cert {
            security.tls_cert = cx.convert("security.tls_cert", v, non_empty_path)?;
        }
        if let Some(v) = &sec.tls_key {
            security.tls_key = cx.convert("security.tls_key", v, non_empty_path)?;
        }
        if let Some(v) = &sec.tls_ca {
            security.tls_ca = cx.convert("security.tls_ca", v, non_empty_path)?;
        }
        if let Some(list) = &sec.trusted {
            for a in cx.at("security.trusted", list) {
                let ip = cx.convert("security.trusted", a, |s: &String| {
                    s.parse::<std::net::IpAddr>()
                        .map_err(|_| format!("{s:?} is not an IP address"))
                })?;
                security.trusted.push(ip);
            }
        }
    }

    let mut servers = Vec::new();
    for (i, s) in cx.at("servers", &raw.servers).iter().enumerate() {
        let k = |f: &str| format!("servers[{i}].{f}");
        let mut roles = Roles(0);
        for r in cx.at(&k("roles"), &s.roles) {
            roles = roles
                | match r.get_ref().as_str() {
                    "meta" => Roles::META,
                    "data" => Roles::DATA,
                    other => Err(cx.error(
                        Some(cx.line(r.span())),
                        &k("roles"),
                        format!("unknown role {other:?} (expected \"meta\" or \"data\")"),
                    ))?,
                };
        }
        servers.push(ServerConfig {
            name: cx.at(&k("name"), &s.name).clone(),
            address: cx.at(&k("address"), &s.address).clone(),
            roles,
            handles: cx.convert(&k("handles"), &s.handles, handle_range)?,
            storage: cx.at(&k("storage"), &s.storage).into(),
            domain: s.domain.as_ref().map(|d| cx.at(&k("domain"), d).clone()),
            metrics: s.metrics.as_ref().map(|m| cx.at(&k("metrics"), m).clone()),
        });
    }
    let with = |r| servers.iter().filter(|s| s.roles.contains(r)).count();
    let (n_meta, n_data) = (with(Roles::META), with(Roles::DATA));
    let all = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);

    let mut defaults = Defaults {
        stripe_size: DEFAULT_STRIPE_SIZE,
        stripe_count: all(n_data),
        dir_shards: all(n_meta),
        sync_writes: false,
        metadata_sync: DEFAULT_METADATA_SYNC,
    };
    if let Some(d) = &raw.defaults {
        let d = cx.at("defaults", d);
        if let Some(v) = &d.stripe_size {
            defaults.stripe_size = cx.convert("defaults.stripe_size", v, size_value)?;
        }
        if let Some(v) = &d.stripe_count {
            defaults.stripe_count = cx.convert("defaults.stripe_count", v, count)?;
        }
        if let Some(v) = &d.dir_shards {
            defaults.dir_shards = cx.convert("defaults.dir_shards", v, count)?;
        }
        defaults.sync_writes = d.sync_writes.unwrap_or(false);
        if let Some(v) = &d.metadata_sync {
            defaults.metadata_sync =
                cx.convert("defaults.metadata_sync", v, metadata_sync_value)?;
        }
    }
    let mut timeouts = Timeouts::default();
    if let Some(t) = &raw.timeouts {
        let t = cx.at("timeouts", t);
        if let Some(v) = &t.connect {
            timeouts.connect = cx.convert("timeouts.connect", v, duration_value)?;
        }
        if let Some(v) = &t.request {
            timeouts.request = cx.convert("timeouts.request", v, duration_value)?;
        }
        if let Some(v) = &t.sync {
            timeouts.sync = cx.convert("timeouts.sync", v, duration_value)?;
        }
        if let Some(v) = &t.idle {
            timeouts.idle = cx.convert("timeouts.idle", v, duration_value)?;
        }
    }

    let mut limits = Limits::default();
    if let Some(l) = &raw.limits {
        let l = cx.at("limits", l);
        if let Some(v) = &l.buffers {
            limits.buffers = cx.convert("limits.buffers", v, size_value)?;
        }
        if let Some(v) = &l.meta_cache {
            limits.meta_cache = cx.convert("limits.meta_cache", v, size_value)?;
        }
        let count_value = |v: &Value| {
            number_value(v).and_then(|n| u32::try_from(n).map_err(|_| "too large".to_string()))
        };
        if let Some(v) = &l.connections {
            limits.connections = cx.convert("limits.connections", v, count_value)?;
        }
        if let Some(v) = &l.connections_per_address {
            limits.connections_per_address =
                cx.convert("limits.connections_per_address", v, count_value)?;
        }
    }

    let mut locks = Locks::default();
    if let Some(l) = &raw.locks {
        let l = cx.at("locks", l);
        if let Some(v) = &l.lease {
            locks.lease = cx.convert("locks.lease", v, duration_value)?;
        }
    }

    let mut replication = Replication::default();
    if let Some(r) = &raw.replication {
        let r = cx.at("replication", r);
        if let Some(v) = &r.replicas {
            replication.replicas = cx.convert("replication.replicas", v, count)?;
        }
        if let Some(v) = &r.lease {
            replication.lease = cx.convert("replication.lease", v, duration_value)?;
        }
        if let Some(v) = &r.rebuild_after {
            replication.rebuild_after =
                cx.convert("replication.rebuild_after", v, duration_value)?;
        }
        if let Some(v) = &r.rebuild_bandwidth {
            replication.rebuild_bandwidth =
                cx.convert("replication.rebuild_bandwidth", v, size_value)?;
        }
        if let Some(v) = &r.scrub_bandwidth {
            replication.scrub_bandwidth =
                cx.convert("replication.scrub_bandwidth", v, size_value)?;
        }
        if let Some(list) = &r.authority {
            for n in cx.at("replication.authority", list) {
                let i = cx.convert("replication.authority", n, |name: &String| {
                    servers
                        .iter()
                        .position(|s| &s.name == name)
                        .ok_or_else(|| format!("no server is named {name:?}"))
                })?;
                replication.authority.push(i);
            }
        }
    }

    let mut logging = Logging::default();
    if let Some(l) = &raw.logging {
        let l = cx.at("logging", l);
        if let Some(v) = &l.level {
            logging.level = cx.convert("logging.level", v, log_level)?;
        }
    }

    let config = Config {
        fsid,
        name,
        security,
        defaults,
        timeouts,
        limits,
        locks,
        replication,
        logging,
        servers,
    };
    check(&config).map_err(|(key, message)| cx.error(cx.line_of(&key), &key, message))?;
    Ok(config)
}

/// Returns a validation error: key, then a format string and its arguments.
macro_rules! fail {
    ($key:expr, $($fmt:tt)+) => {
        return Err(($key.to_string(), format!($($fmt)+)))
    };
}

/// Checks everything that does not depend on the text; errors are (key, message).
pub(crate) fn check(c: &Config) -> Result<(), (String, String)> {
    if c.name.trim().is_empty() {
        fail!("name", "must not be empty");
    }
    if c.servers.is_empty() {
        fail!("servers", "at least one server is required");
    }
    for (i, s) in c.servers.iter().enumerate() {
        let k = |f: &str| format!("servers[{i}].{f}");
        let (name, addr, h) = (&s.name, &s.address, s.handles);
        let name_ok = |ch: char| ch.is_ascii_alphanumeric() || "-_.".contains(ch);
        if name.is_empty() || !name.chars().all(name_ok) {
            fail!(
                k("name"),
                "invalid name {name:?} (use letters, digits, - _ .)"
            );
        }
        let host_port = |a: &str| {
            let port = a.rsplit_once(':').filter(|(host, _)| !host.is_empty());
            port.is_some_and(|(_, p)| p.parse::<u16>().is_ok_and(|p| p != 0))
        };
        if !host_port(addr) {
            fail!(
                k("address"),
                "{addr:?} is not host:port (with a port in 1..=65535)"
            );
        }
        if let Some(m) = &s.metrics {
            if !host_port(m) {
                fail!(
                    k("metrics"),
                    "{m:?} is not host:port (with a port in 1..=65535)"
                );
            }
            if let Some(j) = c.servers.iter().position(|o| &o.address == m) {
                fail!(k("metrics"), "{m:?} is the address of servers[{j}]");
            }
            if let Some(j) = c.servers[..i]
                .iter()
                .position(|o| o.metrics.as_ref() == Some(m))
            {
                fail!(
                    k("metrics"),
                    "duplicate metrics address {m:?} (also servers[{j}])"
                );
            }
        }
        if s.roles.0 & (Roles::META | Roles::DATA).0 == 0 {
            fail!(
                k("roles"),
                "at least one role (\"meta\", \"data\") is required"
            );
        }
        if h.first == 0 || h.first > h.last {
            fail!(k("handles"), "invalid range {h} (need 1 <= first <= last)");
        }
        if s.storage.as_os_str().is_empty() {
            fail!(k("storage"), "must not be empty");
        }
        for (j, o) in c.servers[..i].iter().enumerate() {
            if &o.name == name {
                fail!(k("name"), "duplicate name {name:?} (also servers[{j}])");
            }
            if &o.address == addr {
                fail!(
                    k("address"),
                    "duplicate address {addr:?} (also servers[{j}])"
                );
            }
            if o.handles.overlaps(&h) {
                fail!(
                    k("handles"),
                    "range {h} overlaps servers[{j}] ({}: {})",
                    o.name,
                    o.handles
                );
            }
        }
    }
    let (n_meta, n_data) = (c.meta_servers().len(), c.data_servers().len());
    if n_meta == 0 {
        fail!("servers", "no server has the \"meta\" role");
    }
    if n_data == 0 {
        fail!("servers", "no server has the \"data\" role");
    }
    let d = &c.defaults;
    if !(MIN_STRIPE_SIZE..=MAX_STRIPE_SIZE).contains(&d.stripe_size) {
        let (lo, hi) = (format_size(MIN_STRIPE_SIZE), format_size(MAX_STRIPE_SIZE));
        fail!(
            "defaults.stripe_size",
            "{} is outside {lo}..={hi}",
            d.stripe_size
        );
    }
    let (count, shards) = (d.stripe_count as usize, d.dir_shards as usize);
    if !(1..=n_data).contains(&count) {
        fail!(
            "defaults.stripe_count",
            "{count} is not in 1..={n_data} (the number of data servers)"
        );
    }
    if !(1..=n_meta).contains(&shards) {
        fail!(
            "defaults.dir_shards",
            "{shards} is not in 1..={n_meta} (the number of meta servers)"
        );
    }
    if c.limits.buffers < 16 << 20 {
        fail!(
            "limits.buffers",
            "must be at least 16M (a few frames in flight)"
        );
    }
    if c.limits.meta_cache < 256 << 10 {
        fail!("limits.meta_cache", "must be at least 256K");
    }
    if c.limits.connections == 0 {
        fail!("limits.connections", "must be greater than zero");
    }
    if c.limits.connections_per_address == 0 {
        fail!(
            "limits.connections_per_address",
            "must be greater than zero"
        );
    }
    if c.timeouts.idle < c.timeouts.request {
        fail!(
            "timeouts.idle",
            "must be at least the request timeout ({})",
            crate::units::format_duration(c.timeouts.request)
        );
    }
    if c.timeouts.connect.is_zero() {
        fail!("timeouts.connect", "must be greater than zero");
    }
    if c.timeouts.sync.is_zero() {
        fail!("timeouts.sync", "must be greater than zero");
    }
    if c.timeouts.request.is_zero() {
        fail!("timeouts.request", "must be greater than zero");
    }
    if c.locks.lease < std::time::Duration::from_millis(500) {
        fail!(
            "locks.lease",
            "must be at least 500ms (clients renew their leases three times per lease)"
        );
    }
    if c.locks.lease > std::time::Duration::from_secs(3600) {
        fail!(
            "locks.lease",
            "must be at most 1h (a dead client's locks are held that long)"
        );
    }
    check_replication(c, n_meta, n_data)?;
    if c.security.capability_lifetime < std::time::Duration::from_secs(10) {
        fail!(
            "security.capability_lifetime",
            "must be at least 10s (clients renew capabilities before they expire)"
        );
    }
    Ok(())
}

/// Checks the `[replication]` table against the servers.
fn check_replication(c: &Config, n_meta: usize, n_data: usize) -> Result<(), (String, String)> {
    use std::time::Duration;
    let r = &c.replication;
    if !(1..=MAX_REPLICAS).contains(&r.replicas) {
        fail!(
            "replication.replicas",
            "{} is not in 1..={MAX_REPLICAS}",
            r.replicas
        );
    }
    let copies = r.replicas as usize;
    if copies > n_data || copies > n_meta {
        fail!(
            "replication.replicas",
            "{copies} copies need {copies} servers of each role ({n_meta} meta, {n_data} data)"
        );
    }
    if copies > 1 && r.authority.is_empty() {
        fail!(
            "replication.replicas",
            "more than one copy needs an authority: name 1, 3 or 5 servers in \
             [replication] authority (docs/replication.md)"
        );
    }
    let members = r.authority.len();
    if members > 0 && (members % 2 == 0 || members > 7) {
        fail!(
            "replication.authority",
            "{members} servers: name 1, 3, 5 or 7 (a majority must survive a failure)"
        );
    }
    for (i, a) in r.authority.iter().enumerate() {
        if r.authority[..i].contains(a) {
            fail!(
                "replication.authority",
                "{:?} is named twice",
                c.servers[*a].name
            );
        }
    }
    if r.lease < Duration::from_millis(500) || r.lease > Duration::from_secs(60) {
        fail!(
            "replication.lease",
            "must be between 500ms and 1m (it is the failover pause)"
        );
    }
    if r.rebuild_after < 5 * r.lease {
        fail!(
            "replication.rebuild_after",
            "must be at least five leases ({})",
            crate::units::format_duration(5 * r.lease)
        );
    }
    if r.rebuild_bandwidth < 1 << 20 {
        fail!(
            "replication.rebuild_bandwidth",
            "must be at least 1M (per second)"
        );
    }
    if r.scrub_bandwidth < 1 << 20 {
        fail!(
            "replication.scrub_bandwidth",
            "must be at least 1M (per second)"
        );
    }
    for (i, s) in c.servers.iter().enumerate() {
        if s.domain.as_deref().is_some_and(|d| d.trim().is_empty()) {
            fail!(format!("servers[{i}].domain"), "must not be empty");
        }
    }
    Ok(())
}
