//! The servers a storage directory was used with (`<storage>/servers`): a server
//! refuses to start under a configuration that renames, reorders, removes or changes
//! the roles or handles of a server it ran with, or adds a metadata server. Layouts
//! and the map name servers by their place in the configuration, and names are
//! placed by the number of metadata servers (`docs/namespace.md`), so only data
//! servers may be added, at the end (`docs/configuration.md`, "Adding a server").
//!
//! The file has one line per server, in configuration order: `name roles handles`
//! (roles `meta,data`, `meta` or `data`; handles as the configuration writes them).
//! It is written (to a temporary file, synced, renamed) on the first start and
//! whenever servers were added.

use std::io::Write;
use std::path::Path;

use pvfs_config::{Config, Roles};

/// The file's name under the storage directory.
const FILE: &str = "servers";

/// One server's line.
fn line(config: &Config, i: usize) -> String {
    let s = &config.servers[i];
    let roles: Vec<&str> = [(Roles::META, "meta"), (Roles::DATA, "data")]
        .into_iter()
        .filter_map(|(r, name)| s.roles.contains(r).then_some(name))
        .collect();
    format!("{} {} {}", s.name, roles.join(","), s.handles)
}

/// Checks `config` against the servers recorded under `storage`, and records its
/// servers when they are new or were added. The error says what changed and why
/// that cannot be.
pub fn check(config: &Config, storage: &Path) -> Result<(), String> {
    let path = storage.join(FILE);
    let now: Vec<String> = (0..config.servers.len()).map(|i| line(config, i)).collect();
    let recorded = match std::fs::read_to_string(&path) {
        Ok(text) => text.lines().map(str::to_string).collect::<Vec<_>>(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if recorded.len() > now.len() {
        return Err(format!(
            "this storage was used with {} servers and the configuration has {}: a server \
             leaves by `pvfs server drain` and stays in the configuration, retired",
            recorded.len(),
            now.len()
        ));
    }
    for (i, (was, is)) in recorded.iter().zip(&now).enumerate() {
        if was != is {
            return Err(format!(
                "server {i} of the configuration was `{was}` and is now `{is}`: layouts name \
                 servers by their place in the configuration, so a server keeps its place, \
                 name, roles and handles (its address may change); servers are added at the end"
            ));
        }
    }
    if let Some(i) = (recorded.len()..now.len())
        .filter(|_| !recorded.is_empty())
        .find(|&i| config.servers[i].roles.contains(Roles::META))
    {
        return Err(format!(
            "the configuration adds metadata server {}: names are placed by the number of \
             metadata servers, so only data servers can be added to a file system",
            config.servers[i].name
        ));
    }
    if recorded.len() == now.len() {
        return Ok(());
    }
    write(storage, &now).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Writes the lines to the file atomically and durably.
fn write(storage: &Path, lines: &[String]) -> std::io::Result<()> {
    let tmp = storage.join(format!("{FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    for l in lines {
        writeln!(f, "{l}")?;
    }
    f.sync_all()?;
    std::fs::rename(&tmp, storage.join(FILE))?;
    std::fs::File::open(storage)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(servers: usize, metas: usize) -> Config {
        Config::generate(&pvfs_config::GenOptions {
            meta_servers: Some(metas),
            ..pvfs_config::GenOptions::new(servers, "/tmp/unused")
        })
        .unwrap()
    }

    #[test]
    fn data_servers_may_be_added_at_the_end_and_nothing_else_changes() {
        let dir = tempfile::tempdir().unwrap();
        let four = config(4, 2);
        check(&four, dir.path()).unwrap();
        check(&four, dir.path()).unwrap();
        // A fifth, data only: taken, and recorded.
        let mut five = config(5, 2);
        five.servers[..4].clone_from_slice(&four.servers);
        check(&five, dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert_eq!(text.lines().count(), 5, "{text}");
        // Back to four: refused.
        let e = check(&four, dir.path()).unwrap_err();
        assert!(e.contains("used with 5 servers"), "{e}");
        // A sixth with the metadata role: refused, and not recorded.
        let mut six = config(6, 2);
        six.servers[..5].clone_from_slice(&five.servers);
        six.servers[5].roles = Roles::META | Roles::DATA;
        let e = check(&six, dir.path()).unwrap_err();
        assert!(e.contains("adds metadata server"), "{e}");
        // A server renamed, or given another role: refused.
        let mut renamed = five.clone();
        renamed.servers[1].name = "other".into();
        let e = check(&renamed, dir.path()).unwrap_err();
        assert!(e.contains("server 1"), "{e}");
        let mut demoted = five.clone();
        demoted.servers[0].roles = Roles::DATA;
        assert!(check(&demoted, dir.path()).is_err());
        // A new address is fine.
        let mut moved = five.clone();
        moved.servers[2].address = "127.0.0.9:1".into();
        check(&moved, dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
            text
        );
    }
}
