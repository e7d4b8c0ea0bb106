//! Two file systems side by side on one host, as ParaStation's partitions run them
//! (Düssel et al., 2003): two configurations with their own fsids, keys and servers,
//! both started and both mounted at once, each seeing only its own files; and a
//! configuration that names the other one's servers is turned away with a message
//! that says so, by every command and by the mount, without calling them down.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use common::{run_pvfs, Cluster, Rng};
use mount::Mount;

#[test]
fn two_file_systems_run_and_mount_side_by_side_and_a_client_of_the_other_is_refused() {
    let a = Cluster::start();
    let b = Cluster::start();
    assert_ne!(a.config().fsid, b.config().fsid);
    let (ma, mb) = (Mount::start(&a, &[]), Mount::start(&b, &[]));
    let mut rng = Rng::new(0x5eed_0007);
    let (da, db) = (rng.bytes(300_000), rng.bytes(200_000));
    // The same name in each, different bytes; and a name in one only.
    std::fs::write(ma.join("same"), &da).unwrap();
    std::fs::write(mb.join("same"), &db).unwrap();
    std::fs::create_dir(ma.join("only-a")).unwrap();
    assert_eq!(std::fs::read(ma.join("same")).unwrap(), da);
    assert_eq!(std::fs::read(mb.join("same")).unwrap(), db);
    assert!(!mb.join("only-a").exists());
    // The command line of each sees its own, and every server of both answers.
    for (c, size, names) in [(&a, da.len(), "only-a\nsame\n"), (&b, db.len(), "same\n")] {
        assert_eq!(c.run_cli(&["stat", "--json", "/same"]).json()["size"], size);
        assert_eq!(c.run_cli(&["ls", "/"]).ok(), names);
        c.run_cli(&["ping"]).ok();
    }

    // A's configuration (its fsid and key) with B's addresses: a client of the other
    // file system.
    let mut text = std::fs::read_to_string(a.config_path()).unwrap();
    for (sa, sb) in a.config().servers.iter().zip(&b.config().servers) {
        text = text.replace(
            &format!("address = \"{}\"", sa.address),
            &format!("address = \"{}\"", sb.address),
        );
    }
    let wrong = a.dir().join("wrong.toml");
    std::fs::write(&wrong, text).unwrap();
    let w = wrong.to_str().unwrap();
    let none: &[(&str, &str)] = &[];
    let servers = a.config().servers.len();
    for cmd in ["ping", "status", "df"] {
        let out = run_pvfs(&[cmd, "-c", w], none, &["PVFS_CONFIG"]);
        let line = out.err_containing("answer as another file system's");
        assert!(
            line.contains(&format!("{servers} of {servers}")),
            "{cmd}: {line}"
        );
        assert!(line.contains("does not match"), "{cmd}: {line}");
        assert!(!line.contains("not answering"), "{cmd}: {line}");
        assert!(!out.stdout.contains(" down "), "{cmd}:\n{}", out.stdout);
    }
    let out = run_pvfs(&["ls", "/", "-c", w], none, &["PVFS_CONFIG"]);
    out.err_containing("does not match");
    let mnt = a.dir().join("wrong-mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = run_pvfs(
        &["mount", "-c", w, mnt.to_str().unwrap()],
        none,
        &["PVFS_CONFIG"],
    );
    out.err_containing("does not match");
    assert!(!mount::is_mounted(&mnt));
    // Neither file system took anything from it.
    assert_eq!(std::fs::read(mb.join("same")).unwrap(), db);
    assert_eq!(std::fs::read(ma.join("same")).unwrap(), da);
}
