#![allow(clippy::unwrap_used)]

use super::*;

/// A hand-written file; tests replace single lines and check the reported line.
const BASE: &str = r#"fsid = 42
name = "test"

[defaults]
stripe_size = "64K"
stripe_count = 3
dir_shards = 2

[timeouts]
connect = "2s"
request = 5000

[[servers]]
name = "a"
address = "127.0.0.1:7000"
roles = ["meta", "data"]
handles = "0x10000000000-0x1ffffffffff"
storage = "/tmp/a"

[[servers]]
name = "b"
address = "127.0.0.1:7001"
roles = ["meta", "data"]
handles = { first = 0x20000000000, last = 0x2ffffffffff }
storage = "/tmp/b"

[[servers]]
name = "c"
address = "127.0.0.1:7002"
roles = ["data"]
handles = "0x30000000000-0x3ffffffffff"
storage = "c"
"#;

/// BASE with 1-based line `n` replaced by `new`.
fn with_line(n: usize, new: &str) -> String {
    let mut lines: Vec<&str> = BASE.lines().collect();
    lines[n - 1] = new;
    lines.join("\n")
}

/// The error message for BASE with line `n` replaced by `new`.
fn error(n: usize, new: &str) -> String {
    Config::parse(&with_line(n, new), "f.toml")
        .unwrap_err()
        .to_string()
}

#[test]
fn parses_hand_written_file() {
    let c = Config::parse(BASE, "f.toml").unwrap();
    assert_eq!(c.fsid, 42);
    assert_eq!(
        c.defaults,
        Defaults {
            stripe_size: 65536,
            stripe_count: 3,
            dir_shards: 2,
            sync_writes: false,
            metadata_sync: DEFAULT_METADATA_SYNC,
        }
    );
    assert_eq!(c.timeouts.request, std::time::Duration::from_secs(5));
    assert_eq!(
        c.servers[1].handles,
        HandleRange {
            first: 2 << 40,
            last: (3 << 40) - 1
        }
    );
    assert_eq!(c.servers[2].roles, Roles::DATA);
    assert_eq!(c.meta_servers(), vec![0, 1]);
    assert_eq!(c.data_servers(), vec![0, 1, 2]);
    assert_eq!(c.server_index("c"), Some(2));
    assert_eq!(c.server_index("d"), None);
    assert_eq!(c.root_handle(), 1 << 40);
    assert_eq!(Config::parse(&c.to_toml(), "again").unwrap(), c);
}

#[test]
fn owner_of_boundaries() {
    let c = Config::parse(BASE, "f.toml").unwrap();
    let first = 1u64 << 40;
    assert_eq!(c.owner_of(0), None);
    assert_eq!(c.owner_of(first - 1), None);
    assert_eq!(c.owner_of(first), Some(0));
    assert_eq!(c.owner_of(2 * first - 1), Some(0));
    assert_eq!(c.owner_of(2 * first), Some(1));
    assert_eq!(c.owner_of(4 * first - 1), Some(2));
    assert_eq!(c.owner_of(4 * first), None);
    assert_eq!(c.owner_of(u64::MAX), None);
}

#[test]
fn generate_round_trips() {
    let mut o = GenOptions::new(4, "rel/dir");
    o.meta_servers = Some(2);
    o.stripe_size = 1 << 20;
    let c = Config::generate(&o).unwrap();
    assert_eq!(c.meta_servers(), vec![0, 1]);
    assert_eq!(c.data_servers(), vec![0, 1, 2, 3]);
    assert_eq!((c.defaults.stripe_count, c.defaults.dir_shards), (4, 2));
    assert_eq!(c.servers[3].address, "127.0.0.1:7003");
    assert_eq!(
        c.servers[3].handles,
        HandleRange {
            first: 4 << 40,
            last: (5 << 40) - 1
        }
    );
    assert!(c.servers[1].storage.is_absolute() && c.servers[1].storage.ends_with("rel/dir/s1"));
    assert!(c.fsid > 0 && c.fsid <= i64::MAX as u64);
    let text = c.to_toml();
    assert!(text.starts_with("# pvfs file system configuration"));
    assert_eq!(Config::parse(&text, "gen").unwrap(), c);

    // Values that need the less common spellings survive as well.
    let mut odd = c.clone();
    odd.fsid = u64::MAX;
    odd.defaults.stripe_size = 1000;
    odd.defaults.sync_writes = true;
    odd.defaults.metadata_sync = MetadataSync::Commit;
    odd.timeouts.connect = std::time::Duration::from_millis(1500);
    odd.name = "with \"quotes\"".into();
    odd.servers[3].roles = Roles::META;
    odd.defaults.stripe_count = 3;
    assert_eq!(Config::parse(&odd.to_toml(), "odd").unwrap(), odd);
}

#[test]
fn generate_free_ports() {
    let mut o = GenOptions::new(5, "/tmp/pvfs-test");
    o.base_port = 0;
    let c = Config::generate(&o).unwrap();
    let mut ports: Vec<u16> = c
        .servers
        .iter()
        .map(|s| s.address.rsplit_once(':').unwrap().1.parse().unwrap())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 5);
    assert!(ports.iter().all(|&p| p != 0));
}

#[test]
fn generate_rejects_bad_options() {
    let mut o = GenOptions::new(3, "/tmp/x");
    o.meta_servers = Some(4);
    assert!(Config::generate(&o)
        .unwrap_err()
        .to_string()
        .contains("meta servers must be in 1..=3"));
    o.meta_servers = None;
    o.stripe_count = Some(4);
    let e = Config::generate(&o).unwrap_err().to_string();
    assert_eq!(
        e,
        "genconfig: defaults.stripe_count: 4 is not in 1..=3 (the number of data servers)"
    );
    o.stripe_count = None;
    o.base_port = 65534;
    assert!(Config::generate(&o).is_err());
    assert!(Config::generate(&GenOptions::new(0, "/tmp/x")).is_err());
}

#[test]
fn validation_errors_name_line_and_key() {
    let cases = [
        (
            5,
            r#"stripe_size = "64Q""#,
            r#"f.toml:5: defaults.stripe_size: invalid size "64Q""#,
        ),
        (
            5,
            "stripe_size = 256",
            "f.toml:5: defaults.stripe_size: 256 is outside 512..=1G",
        ),
        (
            30,
            r#"roles = ["data", "metta"]"#,
            r#"f.toml:30: servers[2].roles: unknown role "metta" (expected "meta" or "data")"#,
        ),
        (
            30,
            "roles = []",
            "f.toml:30: servers[2].roles: at least one role",
        ),
        (
            31,
            r#"handles = "0x28000000000-0x30000000000""#,
            "f.toml:31: servers[2].handles: range 0x28000000000-0x30000000000 overlaps servers[1]",
        ),
        (
            31,
            r#"handles = "0-5""#,
            "f.toml:31: servers[2].handles: invalid range 0x0-0x5",
        ),
        (
            31,
            r#"handles = "5""#,
            r#"f.toml:31: servers[2].handles: "5" is not FIRST-LAST"#,
        ),
        (
            31,
            "handles = { first = 5 }",
            r#"f.toml:31: servers[2].handles: missing "last""#,
        ),
        (
            28,
            r#"name = "a""#,
            r#"f.toml:28: servers[2].name: duplicate name "a" (also servers[0])"#,
        ),
        (
            22,
            r#"address = "127.0.0.1:7000""#,
            "f.toml:22: servers[1].address: duplicate address",
        ),
        (
            22,
            r#"address = "localhost""#,
            r#"f.toml:22: servers[1].address: "localhost" is not host:port"#,
        ),
        (
            6,
            "stripe_count = 4",
            "f.toml:6: defaults.stripe_count: 4 is not in 1..=3",
        ),
        (
            6,
            "stripe_count = -1",
            "f.toml:6: defaults.stripe_count: -1 is out of range",
        ),
        (
            7,
            "dir_shards = 3",
            "f.toml:7: defaults.dir_shards: 3 is not in 1..=2",
        ),
        (
            11,
            r#"request = "0s""#,
            "f.toml:11: timeouts.request: must be greater than zero",
        ),
        (
            10,
            r#"connect = "soon""#,
            r#"f.toml:10: timeouts.connect: invalid duration "soon""#,
        ),
        (
            32,
            r#"storage = """#,
            "f.toml:32: servers[2].storage: must not be empty",
        ),
        (1, "fsid = -3", "f.toml:1: fsid: -3 is negative"),
        // Unknown keys (typos), at the top level, in a table and in a server.
        (2, r#"nmae = "x""#, "f.toml:2: nmae: unknown field `nmae`"),
        (
            6,
            "stripe_cnt = 3",
            "f.toml:6: defaults.stripe_cnt: unknown field `stripe_cnt`",
        ),
        (
            26,
            "port = 7002",
            "f.toml:26: servers[1].port: unknown field `port`",
        ),
        // Malformed TOML and wrong types.
        (2, r#"name = "test"#, "f.toml:2: name: "),
        (
            16,
            r#"roles = ["meta", "data""#,
            "f.toml:17: servers[0].handles: ",
        ),
        (
            7,
            "dir_shards = 2.5",
            "f.toml:7: defaults.dir_shards: invalid type: floating point",
        ),
        (21, "", "f.toml:20: servers[1]: missing field `name`"),
        // A word where a number (or text) belongs: not TOML's "invalid boolean".
        (
            6,
            "stripe_count = four",
            "f.toml:6: defaults.stripe_count: four is not a value: write a number in \
             digits, and a word in quotes (\"four\")",
        ),
        (
            8,
            "metadata_sync = commit # every change",
            "f.toml:8: defaults.metadata_sync: commit is not a value",
        ),
    ];
    for (line, text, want) in cases {
        let got = error(line, text);
        assert!(
            got.starts_with(want),
            "line {line} {text:?}:\n got  {got}\n want {want}"
        );
        assert!(!got.contains('\n'), "{got}");
    }
}

#[test]
fn whole_file_errors() {
    let e = |t: &str| Config::parse(t, "f.toml").unwrap_err().to_string();
    let head: String = BASE.lines().take(12).map(|l| format!("{l}\n")).collect();
    assert_eq!(e(&head), "f.toml:1: missing field `servers`");
    let empty = format!("servers = []\n{head}");
    assert_eq!(
        e(&empty),
        "f.toml:1: servers: at least one server is required"
    );
    let no_meta = BASE
        .replace(r#"["meta", "data"]"#, r#"["data"]"#)
        .replace("dir_shards = 2", "");
    assert_eq!(
        e(&no_meta),
        r#"f.toml:13: servers: no server has the "meta" role"#
    );
}

#[test]
fn missing_tables_use_defaults() {
    let text = BASE.lines().skip(11).collect::<Vec<_>>().join("\n");
    let c = Config::parse(&format!("fsid = 7\n{text}"), "f.toml").unwrap();
    assert_eq!(c.name, "pvfs");
    assert_eq!(
        c.defaults,
        Defaults {
            stripe_size: 65536,
            stripe_count: 3,
            dir_shards: 2,
            sync_writes: false,
            metadata_sync: DEFAULT_METADATA_SYNC,
        }
    );
    assert_eq!(c.timeouts, Timeouts::default());
}

#[test]
fn load_reads_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fs.toml");
    let e = Config::load(&path).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("cannot read {}: No such file or directory", path.display())
    );
    std::fs::write(&path, BASE).unwrap();
    let c = Config::load(&path).unwrap();
    assert_eq!(c.servers[2].storage, dir.path().join("c")); // relative to the file
    assert_eq!(c.servers[0].storage, PathBuf::from("/tmp/a"));
    std::fs::write(&path, with_line(16, "roles = 3")).unwrap();
    let e = Config::load(&path).unwrap_err();
    assert_eq!(e.line(), Some(16));
    assert!(e.to_string().starts_with(&format!(
        "{}:16: servers[0].roles: invalid type",
        path.display()
    )));
}

#[test]
fn security_parses_defaults_resolves_and_fails_with_the_line() {
    let c = Config::parse(BASE, "f.toml").unwrap();
    assert_eq!(c.security, Security::default());
    assert!(c.security.root_squash);
    let text = format!(
        "{BASE}\n[security]\nkey = \"k/node.key\"\nserver_key = \"/etc/s.key\"\n\
         root_squash = false\ntrusted = [\"10.0.0.1\", \"::1\"]\nmunge_socket = \"/tmp/m.sock\"\n\
         capability_lifetime = \"2m\"\n"
    );
    let c = Config::parse(&text, "f.toml").unwrap();
    assert_eq!(c.security.key, PathBuf::from("k/node.key"));
    assert_eq!(c.security.server_key, PathBuf::from("/etc/s.key"));
    assert!(!c.security.root_squash);
    assert_eq!(c.security.trusted.len(), 2);
    assert_eq!(
        c.security.capability_lifetime,
        std::time::Duration::from_secs(120)
    );
    assert_eq!(
        c.security.munge_socket.as_deref(),
        Some(Path::new("/tmp/m.sock"))
    );
    // Key paths are relative to the file, like storage.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fs.toml");
    std::fs::write(&path, &text).unwrap();
    let loaded = Config::load(&path).unwrap();
    assert_eq!(loaded.security.key, dir.path().join("k/node.key"));
    assert_eq!(loaded.security.server_key, PathBuf::from("/etc/s.key"));
    // Round trip through genconfig's text.
    let round = Config::parse(&c.to_toml(), "g.toml").unwrap();
    assert_eq!(round.security, c.security);

    let n = BASE.lines().count();
    let bad = format!("{BASE}\n[security]\ntrusted = [\"not-an-ip\"]\n");
    let msg = Config::parse(&bad, "f.toml").unwrap_err().to_string();
    assert!(
        msg.starts_with(&format!("f.toml:{}: security.trusted: ", n + 3)),
        "{msg}"
    );
    // The old inline secret says where the secret went.
    let msg = error(2, r#"secret = "000102030405060708090a0b0c0d0e0f""#);
    assert!(msg.starts_with("f.toml:2: secret: "), "{msg}");
    assert!(msg.contains("pvfs keygen"), "{msg}");
    let generated = Config::generate(&GenOptions {
        key_stem: "fs".into(),
        ..GenOptions::new(2, "/tmp/x")
    })
    .unwrap();
    assert_eq!(generated.security.key, PathBuf::from("fs.key"));
    assert_eq!(
        generated.security.server_key,
        PathBuf::from("fs-server.key")
    );
}

#[test]
fn limits_parse_default_and_fail_with_the_line() {
    let c = Config::parse(BASE, "f.toml").unwrap();
    assert_eq!(c.limits, Limits::default());
    let text = format!("{BASE}\n[limits]\nbuffers = \"64M\"\nconnections = 10\n");
    let c = Config::parse(&text, "f.toml").unwrap();
    assert_eq!(c.limits.buffers, 64 << 20);
    assert_eq!(c.limits.connections, 10);
    let n = text.lines().count();
    let bad = format!("{BASE}\n[limits]\nbuffers = \"1M\"\n");
    let msg = Config::parse(&bad, "f.toml").unwrap_err().to_string();
    assert!(msg.contains("limits.buffers"), "{msg}");
    let text2 = format!("{BASE}\n[limits]\nmeta_cache = \"8M\"\n");
    assert_eq!(
        Config::parse(&text2, "f.toml").unwrap().limits.meta_cache,
        8 << 20
    );
    let bad = format!("{BASE}\n[limits]\nmeta_cache = \"4K\"\n");
    let msg = Config::parse(&bad, "f.toml").unwrap_err().to_string();
    assert!(msg.contains("limits.meta_cache"), "{msg}");
    let bad = format!("{BASE}\n[limits]\nconnections = 0\n");
    let msg = Config::parse(&bad, "f.toml").unwrap_err().to_string();
    assert!(
        msg.contains("limits.connections") && msg.contains(&format!(":{}:", n - 1)),
        "{msg}"
    );
    let round = Config::generate(&GenOptions::new(2, "/tmp/x")).unwrap();
    assert_eq!(
        Config::parse(&round.to_toml(), "g.toml").unwrap().limits,
        round.limits
    );
}

#[test]
fn locks_parse_default_and_fail_with_the_line() {
    let c = Config::parse(BASE, "f.toml").unwrap();
    assert_eq!(c.locks, Locks::default());
    assert_eq!(c.locks.lease, Duration::from_secs(30));
    let text = format!("{BASE}\n[locks]\nlease = \"2s\"\n");
    assert_eq!(
        Config::parse(&text, "f.toml").unwrap().locks.lease,
        Duration::from_secs(2)
    );
    let n = text.lines().count();
    for (bad, why) in [
        ("\"100ms\"", "at least 500ms"),
        ("\"2h\"", "at most 1h"),
        ("\"soon\"", "locks.lease"),
        ("-1", "locks.lease"),
    ] {
        let text = format!("{BASE}\n[locks]\nlease = {bad}\n");
        let msg = Config::parse(&text, "f.toml").unwrap_err().to_string();
        assert!(
            msg.contains("locks.lease") && msg.contains(why) && msg.contains(&format!(":{n}:")),
            "{bad}: {msg}"
        );
    }
    let text = format!("{BASE}\n[locks]\nleese = \"2s\"\n");
    let msg = Config::parse(&text, "f.toml").unwrap_err().to_string();
    assert!(msg.contains("locks.leese"), "{msg}");
    let mut round = Config::generate(&GenOptions::new(2, "/tmp/x")).unwrap();
    round.locks.lease = Duration::from_millis(1500);
    assert!(round.to_toml().contains("[locks]"));
    assert_eq!(
        Config::parse(&round.to_toml(), "g.toml").unwrap().locks,
        round.locks
    );
}

#[test]
fn replication_parses_defaults_and_fails_with_the_line() {
    let c = Config::parse(BASE, "f.toml").unwrap();
    assert_eq!(c.replication, Replication::default());
    assert_eq!(c.replication.replicas, 1);
    assert!(c.replication.authority.is_empty());
    assert!(c.servers.iter().all(|s| s.domain.is_none()));
    let text = format!(
        "{BASE}\n[replication]\nreplicas = 1\nauthority = [\"a\", \"b\", \"c\"]\nlease = \"1s\"\n\
         rebuild_after = \"1m\"\nrebuild_bandwidth = \"20M\"\nscrub_bandwidth = \"10M\"\n"
    );
    let r = Config::parse(&text, "f.toml").unwrap().replication;
    assert_eq!(r.replicas, 1);
    assert_eq!(r.authority, vec![0, 1, 2]);
    assert_eq!(r.lease, Duration::from_secs(1));
    assert_eq!(r.rebuild_after, Duration::from_secs(60));
    assert_eq!(r.rebuild_bandwidth, 20 << 20);
    assert_eq!(r.scrub_bandwidth, 10 << 20);
    for (table, key, why) in [
        ("replicas = 0", "replication.replicas", "not in 1..=3"),
        ("replicas = 4", "replication.replicas", "not in 1..=3"),
        // Two meta servers: three copies of a metadata group do not fit.
        (
            "replicas = 3\nauthority = [\"a\"]",
            "replication.replicas",
            "2 meta",
        ),
        ("replicas = 2", "replication.replicas", "needs an authority"),
        (
            "authority = [\"a\", \"b\"]",
            "replication.authority",
            "1, 3, 5 or 7",
        ),
        (
            "authority = [\"a\", \"zz\", \"b\"]",
            "replication.authority",
            "no server is named \"zz\"",
        ),
        (
            "authority = [\"a\", \"a\", \"b\"]",
            "replication.authority",
            "named twice",
        ),
        (
            "lease = \"100ms\"",
            "replication.lease",
            "between 500ms and 1m",
        ),
        (
            "rebuild_after = \"3s\"",
            "replication.rebuild_after",
            "five leases",
        ),
        (
            "rebuild_bandwidth = \"1K\"",
            "replication.rebuild_bandwidth",
            "at least 1M",
        ),
        (
            "scrub_bandwidth = \"1K\"",
            "replication.scrub_bandwidth",
            "at least 1M",
        ),
        ("replikas = 2", "replication.replikas", "unknown field"),
    ] {
        let text = format!("{BASE}\n[replication]\n{table}\n");
        let msg = Config::parse(&text, "f.toml").unwrap_err().to_string();
        assert!(msg.contains(key) && msg.contains(why), "{table}: {msg}");
        // Every message names a line of the [replication] table.
        let base_lines = BASE.lines().count();
        let line: usize = msg.split(':').nth(1).unwrap().parse().unwrap();
        assert!(line > base_lines, "{table}: {msg}");
    }
    let text = with_line(18, "storage = \"/tmp/a\"\ndomain = \"rack1\"");
    let c = Config::parse(&text, "f.toml").unwrap();
    assert_eq!(c.servers[0].domain.as_deref(), Some("rack1"));
    let msg = Config::parse(
        &with_line(18, "storage = \"/tmp/a\"\ndomain = \" \""),
        "f.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("servers[0].domain") && msg.contains(":19:"),
        "{msg}"
    );

    // Generated: it all round-trips; more than one copy names an authority of three.
    let mut o = GenOptions::new(4, "/tmp/x");
    o.replicas = 2;
    let two = Config::generate(&o).unwrap();
    assert_eq!(two.replication.replicas, 2);
    assert_eq!(two.replication.authority, vec![0, 1, 2]);
    let back = Config::parse(&two.to_toml(), "two.toml").unwrap();
    assert_eq!(back.replication, two.replication);
    let mut g = Config::generate(&GenOptions::new(4, "/tmp/x")).unwrap();
    g.replication.authority = vec![0, 1, 2];
    g.servers[1].domain = Some("rack2".into());
    let back = Config::parse(&g.to_toml(), "g.toml").unwrap();
    assert_eq!(back.replication, g.replication);
    assert_eq!(back.servers, g.servers);
    let one = Config::generate(&GenOptions::new(2, "/tmp/x")).unwrap();
    assert!(one.replication.authority.is_empty());
    assert!(one.to_toml().contains("[replication]"));
}

#[test]
fn write_is_private_exclusive_and_replaces_only_when_asked() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fs.toml");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let first = Config::generate(&GenOptions::new(2, dir.path())).unwrap();
    first.write(&path, false).unwrap();
    assert_eq!(mode(&path), 0o600, "a configuration is private");
    assert_eq!(Config::load(&path).unwrap().fsid, first.fsid);

    // An existing file is refused and left as it was.
    let second = Config::generate(&GenOptions::new(3, dir.path())).unwrap();
    assert_ne!(first.fsid, second.fsid);
    let err = second.write(&path, false).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Exists { path: p } if p == &path.display().to_string()),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("{} already exists", path.display())
    );
    assert_eq!(Config::load(&path).unwrap().fsid, first.fsid);

    // Replacing, also a file that was readable by all, leaves a 0600 file and nothing
    // beside it.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    second.write(&path, true).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(Config::load(&path).unwrap().fsid, second.fsid);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [std::ffi::OsString::from("fs.toml")]);

    // A directory where the file should be is not "already exists".
    for replace in [false, true] {
        let err = first.write(dir.path(), replace).unwrap_err();
        assert!(matches!(err, ConfigError::Write { .. }), "{err:?}");
        assert!(
            err.to_string().to_lowercase().contains("is a directory"),
            "{err}"
        );
    }

    // A directory that does not exist: the error names the file, once.
    let missing = dir.path().join("no/such/dir/fs.toml");
    for replace in [false, true] {
        let err = first.write(&missing, replace).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot write {}: No such file or directory",
                missing.display()
            )
        );
    }
}

#[test]
fn metadata_sync_setting() {
    let with = |v: &str| {
        BASE.replace(
            "[defaults]\n",
            &format!("[defaults]\nmetadata_sync = {v}\n"),
        )
    };
    assert!(
        with("1").contains("metadata_sync = 1"),
        "BASE has a [defaults] table"
    );
    let parse = |v: &str| Config::parse(&with(v), "f.toml").map(|c| c.defaults.metadata_sync);
    assert_eq!(parse("\"commit\"").unwrap(), MetadataSync::Commit);
    assert_eq!(
        parse("\"25ms\"").unwrap(),
        MetadataSync::Every(std::time::Duration::from_millis(25))
    );
    assert_eq!(
        parse("5").unwrap(),
        MetadataSync::Every(std::time::Duration::from_millis(5))
    );
    let line = with("1")
        .lines()
        .position(|l| l.starts_with("metadata_sync"))
        .unwrap()
        + 1;
    for bad in ["\"always\"", "\"0s\"", "\"1m\"", "true"] {
        let msg = parse(bad).unwrap_err().to_string();
        assert!(
            msg.contains("defaults.metadata_sync") && msg.contains(&format!("f.toml:{line}")),
            "{bad}: {msg}"
        );
    }
    // genconfig writes the setting with its comment, and the default reads back.
    let c = Config::parse(BASE, "f.toml").unwrap();
    assert_eq!(c.defaults.metadata_sync, DEFAULT_METADATA_SYNC);
    let text = c.to_toml();
    assert!(text.contains("metadata_sync = \"10ms\""), "{text}");
    assert_eq!(Config::parse(&text, "gen").unwrap(), c);
}

#[test]
fn replica_sets_start_at_their_first_copy_and_prefer_distinct_domains() {
    let mut c = Config::generate(&GenOptions::new(4, "/tmp/x")).unwrap();
    let data = c.data_servers();
    assert_eq!(data, vec![0, 1, 2, 3]);
    // No domains named: every server is its own; the next servers round the ring.
    assert_eq!(c.replica_set(&data, 0, 2), vec![0, 1]);
    assert_eq!(c.replica_set(&data, 3, 3), vec![3, 0, 1]);
    assert_eq!(c.replica_set(&data, 2, 1), vec![2]);
    // Two racks, interleaved badly: copies skip the first copy's rack.
    for (s, rack) in [(0, "a"), (1, "a"), (2, "b"), (3, "b")] {
        c.servers[s].domain = Some(rack.into());
    }
    assert_eq!(c.replica_set(&data, 0, 2), vec![0, 2]);
    assert_eq!(c.replica_set(&data, 1, 2), vec![1, 2]);
    assert_eq!(c.replica_set(&data, 3, 2), vec![3, 0]);
    // More copies than racks: distinct servers once the racks run out.
    assert_eq!(c.replica_set(&data, 0, 3), vec![0, 2, 1]);
    // More copies than servers: every server once.
    assert_eq!(c.replica_set(&data[..2], 1, 3), vec![1, 0]);
}

#[test]
fn metadata_groups_take_the_file_systems_count_on_the_next_metadata_servers() {
    let mut o = GenOptions::new(4, "/tmp/x");
    o.meta_servers = Some(3);
    let plain = Config::generate(&o).unwrap();
    // Without an authority a group is its own server alone.
    assert_eq!(plain.meta_group(1), vec![1]);
    o.replicas = 2;
    let c = Config::generate(&o).unwrap();
    assert!(!c.replication.authority.is_empty());
    let metas = c.meta_servers();
    assert_eq!(metas.len(), 3);
    for (k, &g) in metas.iter().enumerate() {
        let group = c.meta_group(g);
        assert_eq!(group, vec![g as u32, metas[(k + 1) % 3] as u32]);
    }
    // A server without the metadata role heads no group.
    let data_only = (0..4).find(|s| !metas.contains(s)).unwrap();
    assert!(c.meta_group(data_only).is_empty());
}

#[test]
fn generated_authority_outlives_the_faults_the_copies_survive() {
    let members = |replicas: u32, servers: usize| {
        let mut o = GenOptions::new(servers, "/tmp/pvfs-test");
        o.replicas = replicas;
        Config::generate(&o).unwrap().replication.authority
    };
    assert!(members(1, 8).is_empty());
    assert_eq!(members(2, 2), vec![0]);
    assert_eq!(members(2, 8), vec![0, 1, 2]);
    // Three copies survive two faults at once: a majority of five survives them too.
    assert_eq!(members(3, 8), vec![0, 1, 2, 3, 4]);
    assert_eq!(members(3, 5), vec![0, 1, 2, 3, 4]);
    assert_eq!(members(3, 4), vec![0, 1, 2]);
}

#[test]
fn a_data_server_added_keeps_the_file_and_takes_the_next_handles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fs.toml");
    let text = format!("# the site's own comment\n{BASE}");
    std::fs::write(&path, &text).unwrap();
    let before = Config::load(&path).unwrap();
    let new = ServerConfig {
        name: "d".into(),
        address: "127.0.0.1:7009".into(),
        roles: Roles::META,
        handles: HandleRange { first: 1, last: 2 },
        storage: "d".into(),
        domain: Some("rack2".into()),
        metrics: None,
    };
    let after = Config::add_data_server(&path, new.clone()).unwrap();
    assert_eq!(after.servers.len(), before.servers.len() + 1);
    assert_eq!(after.servers[..before.servers.len()], before.servers[..]);
    let d = after.servers.last().unwrap();
    let highest = before.servers.iter().map(|s| s.handles.last).max().unwrap();
    assert_eq!((d.name.as_str(), d.roles), ("d", Roles::DATA));
    assert_eq!(d.handles.first, highest + 1);
    assert_eq!(d.handles.last - d.handles.first, (1 << 40) - 1);
    assert_eq!(d.storage, dir.path().join("d"));
    assert_eq!(d.domain.as_deref(), Some("rack2"));
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.starts_with(&text), "{written}");
    assert_eq!(Config::load(&path).unwrap(), after);
    // A name taken: refused, and the file stays as it is.
    let e = Config::add_data_server(&path, new).unwrap_err();
    assert!(e.to_string().contains("named \"d\" already"), "{e}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
}

#[test]
fn logging_level_is_read_and_checked() {
    assert_eq!(Config::parse(BASE, "f.toml").unwrap().logging.level, "info");
    let with = |level: &str| format!("{BASE}\n[logging]\nlevel = {level}\n");
    let c = Config::parse(&with("\"info,pvfs_server=debug\""), "f.toml").unwrap();
    assert_eq!(c.logging.level, "info,pvfs_server=debug");
    let e = Config::parse(&with("\"very loud\""), "f.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("logging.level") && e.contains("is not a log level"),
        "{e}"
    );
}
