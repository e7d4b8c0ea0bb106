//! Human output helpers: modes, times, sizes, tables.

use pvfs_proto::{Attr, NodeKind, ObjKind, Timespec};

/// `ls -l` style mode string, e.g. "drwxr-xr-x".
pub fn mode_string(kind: ObjKind, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        ObjKind::Dir => 'd',
        ObjKind::File => '-',
        ObjKind::Symlink => 'l',
        ObjKind::Node(NodeKind::Fifo) => 'p',
        ObjKind::Node(NodeKind::CharDev) => 'c',
        ObjKind::Node(NodeKind::BlockDev) => 'b',
        ObjKind::Node(NodeKind::Socket) => 's',
    });
    let bits = [
        (0o400, 'r'),
        (0o200, 'w'),
        (0o100, 'x'),
        (0o040, 'r'),
        (0o020, 'w'),
        (0o010, 'x'),
        (0o004, 'r'),
        (0o002, 'w'),
        (0o001, 'x'),
    ];
    for (i, (bit, c)) in bits.iter().enumerate() {
        let set = mode & bit != 0;
        let special = match i {
            2 => mode & 0o4000 != 0,
            5 => mode & 0o2000 != 0,
            8 => mode & 0o1000 != 0,
            _ => false,
        };
        s.push(match (set, special, i) {
            (true, true, 8) => 't',
            (false, true, 8) => 'T',
            (true, true, _) => 's',
            (false, true, _) => 'S',
            (true, false, _) => *c,
            (false, false, _) => '-',
        });
    }
    s
}

/// "YYYY-MM-DD HH:MM:SS" in UTC.
pub fn time_string(t: Timespec) -> String {
    let days = t.secs.div_euclid(86_400);
    let secs = t.secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// 512-byte blocks the object occupies (`st_blocks`; a file's from what its data
/// servers allocate).
pub fn blocks(attr: &Attr) -> u64 {
    attr.blocks
}

/// Attributes as JSON.
pub fn attr_json(attr: &Attr) -> serde_json::Value {
    let t = |t: Timespec| serde_json::json!({"secs": t.secs, "nsecs": t.nsecs});
    let mut v = serde_json::json!({
        "handle": attr.handle,
        "type": attr.kind().name(),
        "mode": attr.mode,
        "st_mode": attr.st_mode(),
        "uid": attr.uid,
        "gid": attr.gid,
        "nlink": attr.nlink,
        "size": attr.size,
        "blocks": blocks(attr),
        "atime": t(attr.atime),
        "mtime": t(attr.mtime),
        "ctime": t(attr.ctime),
    });
    match &attr.detail {
        pvfs_proto::ObjDetail::File { layout } => {
            v["stripe_size"] = layout.stripe_size.into();
            v["stripe_count"] = layout.datafiles.len().into();
        }
        pvfs_proto::ObjDetail::Dir { shards, parent, .. } => {
            v["shards"] = (*shards).into();
            v["parent"] = (*parent).into();
        }
        pvfs_proto::ObjDetail::Symlink { target } => {
            v["target"] = target.clone().into();
        }
        pvfs_proto::ObjDetail::Node { rdev, .. } => {
            v["rdev"] = (*rdev).into();
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_dates() {
        assert_eq!(mode_string(ObjKind::Dir, 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(ObjKind::File, 0o4644), "-rwSr--r--");
        assert_eq!(mode_string(ObjKind::Dir, 0o1777), "drwxrwxrwt");
        assert_eq!(
            time_string(Timespec { secs: 0, nsecs: 0 }),
            "1970-01-01 00:00:00"
        );
        assert_eq!(
            time_string(Timespec {
                secs: 1_795_000_000,
                nsecs: 0
            }),
            "2026-11-18 11:06:40"
        );
    }
}
