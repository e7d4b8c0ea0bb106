//! The credentials of the process behind a FUSE request: uid and gid come with the
//! request, supplementary groups from `/proc/PID/status` (servers need them for
//! chgrp). Group lists are cached per process for a moment, so a program that
//! creates thousands of files reads its status once, not once per file.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pvfs_proto::Creds;

/// How long a process's group list is reused.
const TTL: Duration = Duration::from_secs(1);
/// Processes remembered before the cache is emptied (a memory bound).
const MAX_ENTRIES: usize = 4096;
/// Most supplementary groups taken from a status file (Linux's NGROUPS_MAX).
const MAX_GROUPS: usize = 65536;

/// A process's group list: when it was read, for which uid, the groups.
type Cached = (Instant, u32, Vec<u32>);

/// Cached group lists, by process id.
#[derive(Default)]
pub(crate) struct CredCache {
    groups: Mutex<HashMap<u32, Cached>>,
}

impl CredCache {
    /// The credentials of request issuer `pid` acting as `uid`/`gid`. Requests the
    /// kernel makes on its own (pid 0) carry no supplementary groups.
    pub(crate) fn creds(&self, uid: u32, gid: u32, pid: u32) -> Creds {
        Creds {
            uid,
            gid,
            groups: if pid == 0 {
                Vec::new()
            } else {
                self.groups(pid, uid)
            },
        }
    }

    fn groups(&self, pid: u32, uid: u32) -> Vec<u32> {
        if let Ok(map) = self.groups.lock() {
            if let Some((at, owner, groups)) = map.get(&pid) {
                if *owner == uid && at.elapsed() < TTL {
                    return groups.clone();
                }
            }
        }
        let groups = read_groups(pid).unwrap_or_default();
        if let Ok(mut map) = self.groups.lock() {
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
            map.insert(pid, (Instant::now(), uid, groups.clone()));
        }
        groups
    }
}

/// The supplementary groups of process (or thread) `pid`, from its status file.
fn read_groups(pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_groups(&status)
}

/// The `Groups:` line of a `/proc/PID/status` text.
fn parse_groups(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    Some(
        line.split_whitespace()
            .filter_map(|g| g.parse().ok())
            .take(MAX_GROUPS)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_line() {
        let status =
            "Name:\tbash\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 27 1000 \nNgid:\t0\n";
        assert_eq!(parse_groups(status), Some(vec![4, 24, 27, 1000]));
        assert_eq!(parse_groups("Groups:\t\n"), Some(vec![]));
        assert_eq!(parse_groups("Name:\tx\n"), None);
    }

    #[test]
    fn own_process() {
        let pid = std::process::id();
        assert!(read_groups(pid).is_some());
    }
}
