//! Running pvfs as a site's service manager runs it: the systemd units of
//! `contrib/systemd` pass `systemd-analyze verify`, and the commands they run
//! start real servers that answer, change their log level on the units' reload
//! (SIGHUP, the configuration's `[logging] level` read again) and stop cleanly on the
//! units' stop signal.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{die_with_parent, have_command, poll, run_pvfs, scaled, skip, under_ci, Cluster};

/// The repository's `contrib/systemd`.
fn units_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd")
}

/// The value of `key` in a unit file (its first line `key=...`).
fn unit_value(unit: &str, key: &str) -> String {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("the unit has no {key}="))
        .to_string()
}

/// The units with the binary under test in place of the installed one.
fn units_here(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (template, instance) in [
        ("pvfs-server@.service", "pvfs-server@s0.service"),
        ("pvfs-mount@.service", "pvfs-mount@mnt-pvfs.service"),
    ] {
        let text = std::fs::read_to_string(units_dir().join(template)).unwrap();
        assert!(text.contains("/usr/local/bin/pvfs "), "{template}");
        let path = dir.join(instance);
        std::fs::write(
            &path,
            text.replace("/usr/local/bin/pvfs", common::pvfs_bin()),
        )
        .unwrap();
        out.push(path);
    }
    out
}

/// `systemd-analyze verify` of `units`: its status and what it printed.
fn verify(units: &[PathBuf]) -> (bool, String) {
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(units)
        .env("SYSTEMD_LOG_LEVEL", "info")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    (out.status.success(), text)
}

#[test]
fn the_systemd_units_verify() {
    if !have_command("systemd-analyze") {
        let why = "systemd-analyze is not installed (Debian package systemd)";
        assert!(!under_ci(), "{why}");
        skip("the_systemd_units_verify", why);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let units = units_here(dir.path());
    let (ok, text) = verify(&units);
    assert!(
        ok && text.trim().is_empty(),
        "systemd-analyze verify:\n{text}"
    );
    // Negative control: a misspelt key is caught (a warning, which counts).
    let bad = dir.path().join("pvfs-server@s1.service");
    let text = std::fs::read_to_string(&units[0]).unwrap();
    std::fs::write(&bad, text.replace("\nRestart=", "\nRestartt=")).unwrap();
    let (_, said) = verify(&[bad]);
    assert!(said.contains("Restartt"), "{said}");
}

/// A server started as the unit starts it, its stderr (the journal) in a file.
struct UnitServer {
    name: String,
    child: Child,
    log: PathBuf,
}

impl UnitServer {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Connections the server logged at debug level.
fn debug_lines(s: &UnitServer) -> usize {
    s.log_text().matches("connection opened").count()
}

#[test]
fn servers_run_as_the_unit_runs_them_and_take_a_new_log_level_on_reload() {
    let cluster = Cluster::builder().configure();
    let unit = std::fs::read_to_string(units_dir().join("pvfs-server@.service")).unwrap();
    let exec = unit_value(&unit, "ExecStart");
    assert_eq!(unit_value(&unit, "ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(unit_value(&unit, "KillSignal"), "SIGTERM");
    let mut servers = Vec::new();
    for name in cluster.names() {
        let line = exec
            .replace("/usr/local/bin/pvfs", common::pvfs_bin())
            .replace("${PVFS_CONFIG}", cluster.config_str())
            .replace("%i", &name);
        let words: Vec<&str> = line.split_whitespace().collect();
        let log = cluster.dir().join(format!("{name}.journal"));
        let mut cmd = Command::new(words[0]);
        cmd.args(&words[1..])
            .env_remove("PVFS_LOG")
            .env_remove("PVFS_CONFIG")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(&log).unwrap());
        die_with_parent(&mut cmd);
        servers.push(UnitServer {
            name,
            child: cmd.spawn().unwrap(),
            log,
        });
    }
    // The client's copy of the configuration: the servers' copy changes below.
    let client = cluster.dir().join("client.toml");
    std::fs::copy(cluster.config_path(), &client).unwrap();
    let ping = || {
        run_pvfs(
            &["ping", "-c", client.to_str().unwrap()],
            &[],
            &["PVFS_CONFIG"],
        )
    };
    poll(
        "every server answers",
        scaled(Duration::from_secs(60)),
        || ping().status.success().then_some(()),
    );
    // The configuration's level (info): no debug lines.
    ping().ok();
    assert_eq!(debug_lines(&servers[0]), 0, "{}", servers[0].log_text());

    // The reload: debug from the configuration, on s0 only.
    let config = cluster.config_path();
    let text = std::fs::read_to_string(config).unwrap();
    assert!(text.contains("level = \"info\""), "{text}");
    std::fs::write(
        config,
        text.replace("level = \"info\"", "level = \"debug\""),
    )
    .unwrap();
    let hup = |s: &UnitServer| {
        assert_eq!(unsafe { libc::kill(s.child.id() as i32, libc::SIGHUP) }, 0);
    };
    hup(&servers[0]);
    poll("s0 logs at debug", scaled(Duration::from_secs(30)), || {
        servers[0]
            .log_text()
            .contains("logging at \"debug\" from now on")
            .then_some(())
    });
    ping().ok();
    poll(
        "s0 logs connections",
        scaled(Duration::from_secs(30)),
        || (debug_lines(&servers[0]) > 0).then_some(()),
    );
    // Negative control: s1 was not reloaded and logs no connection.
    assert_eq!(debug_lines(&servers[1]), 0, "{}", servers[1].log_text());

    // A level that does not parse leaves the level as it was; the server goes on.
    std::fs::write(
        config,
        text.replace("level = \"info\"", "level = \"loud!\""),
    )
    .unwrap();
    hup(&servers[0]);
    poll(
        "s0 keeps its level",
        scaled(Duration::from_secs(30)),
        || {
            servers[0]
                .log_text()
                .contains("SIGHUP: the log level stays as it is")
                .then_some(())
        },
    );
    let before = debug_lines(&servers[0]);
    ping().ok();
    poll("s0 still at debug", scaled(Duration::from_secs(30)), || {
        (debug_lines(&servers[0]) > before).then_some(())
    });

    // The unit's stop: SIGTERM, and every server exits cleanly.
    std::fs::write(config, &text).unwrap();
    for s in &servers {
        assert_eq!(unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) }, 0);
    }
    for s in &mut servers {
        let status = poll("the server exits", scaled(Duration::from_secs(60)), || {
            s.child.try_wait().unwrap()
        });
        assert!(status.success(), "{}: {status}\n{}", s.name, s.log_text());
    }
}
