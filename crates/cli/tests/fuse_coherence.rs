//! Coherent caching across mounts: two mounts of one file system (two clients),
//! each letting the kernel cache names, attributes and pages for ten minutes, so
//! only the servers' change feeds can explain one mount seeing the other's change.
//! Every change made through mount B (contents, size, mode, an ACL, a new name where
//! A cached its absence, a rename, an unlink, a new directory entry seen by `ls`) is
//! seen through mount A within seconds; and a mount's own caches still serve it
//! (a mount does not invalidate what it changed itself).
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{scaled, Cluster};
use mount::Mount;

/// Caches far longer than the test: expiry cannot explain what it sees.
const LONG: &[&str] = &[
    "--attr-timeout",
    "600s",
    "--entry-timeout",
    "600s",
    "--cache-timeout",
    "600s",
];

/// Longest a change may take to reach the other mount here (a few milliseconds on
/// an idle machine).
fn reach() -> Duration {
    scaled(Duration::from_secs(10))
}

/// Waits until `seen` holds of what mount A shows, or fails with `what`.
fn until(what: &str, mut seen: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if seen() {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < reach(),
            "mount A did not see {what} within {:?}",
            reach()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn size(p: &Path) -> Option<u64> {
    std::fs::metadata(p).ok().map(|m| m.len())
}

#[test]
fn a_change_through_one_mount_reaches_the_caches_of_another() {
    let cluster = Cluster::start();
    let a = Mount::start(&cluster, LONG);
    let b = Mount::start(&cluster, LONG);
    let mut took = Vec::new();

    // Contents and size: A caches the file's attributes and pages.
    std::fs::write(b.join("f"), b"first version").unwrap();
    until("a file B wrote", || {
        std::fs::read(a.join("f")).is_ok_and(|d| d == b"first version")
    });
    assert_eq!(size(&a.join("f")), Some(13));
    std::fs::write(b.join("f"), b"second, longer version").unwrap();
    took.push(until("B's new contents and size", || {
        size(&a.join("f")) == Some(22)
            && std::fs::read(a.join("f")).is_ok_and(|d| d == b"second, longer version")
    }));
    // The same size, other bytes: the cached pages must go.
    std::fs::write(b.join("f"), b"SECOND, LONGER VERSION").unwrap();
    took.push(until("B's rewrite of the same length", || {
        std::fs::read(a.join("f")).is_ok_and(|d| d == b"SECOND, LONGER VERSION")
    }));

    // Mode.
    std::fs::set_permissions(b.join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    took.push(until("B's chmod", || {
        std::fs::metadata(a.join("f")).is_ok_and(|m| m.permissions().mode() & 0o7777 == 0o600)
    }));

    // An ACL (it travels with the attributes A holds).
    let acl_of = |p: &Path| -> String {
        let out = std::process::Command::new("getfacl")
            .args(["--omit-header", "--absolute-names", "--numeric"])
            .arg(p)
            .output()
            .expect("getfacl (scripts/install-deps installs it)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(!acl_of(&a.join("f")).contains("user:65534:"));
    let set = std::process::Command::new("setfacl")
        .args(["-m", "u:65534:r"])
        .arg(b.join("f"))
        .status()
        .expect("setfacl (scripts/install-deps installs it)");
    assert!(set.success());
    took.push(until("B's ACL", || {
        acl_of(&a.join("f")).contains("user:65534:r--")
    }));

    // A name A cached as absent (a negative entry), then created by B.
    assert!(!a.join("late").exists());
    std::fs::write(b.join("late"), b"x").unwrap();
    took.push(until("a name B created where A saw none", || {
        a.join("late").exists()
    }));

    // Rename and unlink.
    std::fs::rename(b.join("late"), b.join("moved")).unwrap();
    took.push(until("B's rename taking the old name away", || {
        !a.join("late").exists()
    }));
    took.push(until("B's rename giving the new name", || {
        a.join("moved").exists()
    }));
    std::fs::remove_file(b.join("moved")).unwrap();
    took.push(until("B's unlink", || !a.join("moved").exists()));

    // A directory's listing (the kernel caches it with the directory's pages).
    std::fs::create_dir(b.join("d")).unwrap();
    let names = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .map(|r| {
                r.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    until("B's new directory", || {
        names(&a.join("d")).is_empty() && a.join("d").is_dir()
    });
    std::fs::write(b.join("d/one"), b"1").unwrap();
    took.push(until("an entry B added to a directory A listed", || {
        names(&a.join("d")) == ["one"]
    }));

    // A directory A made and filled itself: A answers for the names it lacks without
    // asking, until another client adds one.
    std::fs::create_dir(a.join("k")).unwrap();
    std::fs::write(a.join("k/mine"), b"a").unwrap();
    assert!(!a.join("k/theirs").exists());
    std::fs::write(b.join("k/theirs"), b"b").unwrap();
    took.push(until("a name B added in a directory A made", || {
        a.join("k/theirs").exists()
    }));
    assert_eq!(names(&a.join("k")), ["mine", "theirs"]);

    // A directory A made and changed only itself is listed by A from what it knows:
    // after every kind of change, A's listing is the servers' (B's, which did not
    // make it and asks them), before and after B adds a name.
    let l = a.join("l");
    std::fs::create_dir(&l).unwrap();
    for f in ["a", "b", "x", "y"] {
        std::fs::write(l.join(f), f).unwrap();
    }
    std::fs::rename(l.join("a"), l.join("c")).unwrap();
    std::fs::rename(l.join("x"), l.join("y")).unwrap();
    std::fs::hard_link(l.join("b"), l.join("d")).unwrap();
    std::fs::create_dir(l.join("sub")).unwrap();
    std::os::unix::fs::symlink("c", l.join("s")).unwrap();
    std::fs::remove_file(l.join("b")).unwrap();
    std::fs::create_dir(l.join("gone")).unwrap();
    std::fs::remove_dir(l.join("gone")).unwrap();
    std::fs::rename(l.join("sub"), a.join("k/sub")).unwrap();
    std::fs::create_dir(l.join("e")).unwrap();
    let want = ["c", "d", "e", "s", "y"];
    assert_eq!(names(&l), want, "A's listing of the directory it made");
    until("A's directory through B", || names(&b.join("l")) == want);
    std::fs::write(b.join("l/z"), b"z").unwrap();
    took.push(until(
        "a name B added to a directory A listed from memory",
        || names(&l) == ["c", "d", "e", "s", "y", "z"],
    ));
    // The kernel keeps the listing of a directory A knows completely: A's own
    // changes show in the next listing at once, B's as its change arrives.
    let m = a.join("m");
    std::fs::create_dir(&m).unwrap();
    std::fs::write(m.join("p"), b"p").unwrap();
    assert_eq!(names(&m), ["p"]);
    assert_eq!(names(&m), ["p"], "listed again from what the kernel kept");
    std::fs::write(m.join("q"), b"q").unwrap();
    assert_eq!(names(&m), ["p", "q"], "A's own create, listed at once");
    std::fs::remove_file(m.join("p")).unwrap();
    assert_eq!(names(&m), ["q"], "A's own unlink, listed at once");
    std::fs::remove_file(b.join("m/q")).unwrap();
    took.push(until("a name B removed from a listing A kept", || {
        names(&m).is_empty()
    }));
    std::fs::write(b.join("m/r"), b"r").unwrap();
    took.push(until("a name B added to a listing A kept", || {
        names(&m) == ["r"]
    }));

    // A mount's own changes are its own to cache: A writes, B sees, A still reads
    // its file (no feedback of its own change breaks its caches).
    std::fs::write(a.join("mine"), b"from A").unwrap();
    until("A's own file through B", || {
        std::fs::read(b.join("mine")).is_ok_and(|d| d == b"from A")
    });
    assert_eq!(std::fs::read(a.join("mine")).unwrap(), b"from A");
    // A keeps the contents of the small file it wrote (reads of it take no data
    // server); B's rewrite of it reaches A all the same.
    std::fs::write(b.join("mine"), b"by B!!").unwrap();
    took.push(until("B's rewrite of a small file A wrote", || {
        std::fs::read(a.join("mine")).is_ok_and(|d| d == b"by B!!")
    }));

    // A file A held while it was 1 datafile wide, grown by B past its first stripe
    // unit (B widens it first): A sees the new size and the bytes on the others.
    std::fs::write(b.join("grows"), b"small").unwrap();
    until("B's small file", || {
        std::fs::read(a.join("grows")).is_ok_and(|d| d == b"small")
    });
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(b.join("grows"), &big).unwrap();
    took.push(until("B's file grown past its first stripe unit", || {
        size(&a.join("grows")) == Some(200_000)
            && std::fs::read(a.join("grows")).is_ok_and(|d| d == big)
    }));

    // chmod and utimes keep what A holds of a file it wrote (no server for the stat
    // after them), and what A then shows is what the servers say (B).
    std::fs::write(a.join("kept"), b"four").unwrap();
    std::fs::set_permissions(a.join("kept"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let when = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(a.join("kept"))
        .unwrap();
    f.set_modified(when).unwrap();
    drop(f);
    let shown = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (
            m.len(),
            m.permissions().mode() & 0o7777,
            m.modified().unwrap(),
        )
    };
    assert_eq!(shown(&a.join("kept")), (4, 0o600, when), "A's own view");
    until("A's chmod and utimes through B", || {
        b.join("kept").exists() && shown(&b.join("kept")) == (4, 0o600, when)
    });

    took.sort();
    eprintln!("changes reached the other mount in {took:?}");
    drop(a);
    drop(b);
}

/// Every change on server `server` after `since` (`None`: from where its feed
/// stands now) that client `c` is handed, and the position after them.
async fn fed(
    c: &pvfs_client::Client,
    server: usize,
    since: Option<(u64, u64)>,
) -> (Vec<pvfs_proto::Changed>, (u64, u64)) {
    let (mut epoch, mut next) = since.unwrap_or((0, 0));
    let mut all = Vec::new();
    loop {
        let a = c
            .changes(server, epoch, next, Duration::ZERO)
            .await
            .unwrap();
        assert!(!a.lost, "server {server} lost changes");
        let done = a.changes.is_empty() && epoch != 0;
        (epoch, next) = (a.epoch, a.next);
        all.extend(a.changes);
        if done {
            return (all, (epoch, next));
        }
    }
}

/// A rename whose new name lives on another server than the file is partly done by
/// that server for the client: it counts the new name as a link at the file's owner.
/// That step is the renaming client's own change, not another's: a mount that got
/// it back from the owner's feed would drop what it cached of every file it moved
/// (what made `rsync` run a second time on a tree it had just written take ten
/// times as long). Another client is handed every change all the same.
#[test]
fn a_clients_own_moves_across_servers_are_not_fed_back_to_it() {
    let cluster = Cluster::start();
    let (mover, other) = (cluster.client(), cluster.client());
    let config = cluster.config().clone();
    let metas = config.meta_servers();
    let servers = config.servers.len();
    let (src, dst) = mover.run(Duration::from_secs(30), async |c| {
        let src = c.mkdir("/src", 0o755).await.unwrap();
        let dst = c.mkdir("/dst", 0o755).await.unwrap();
        (src.handle, dst)
    });
    let pvfs_proto::ObjDetail::Dir { shards, .. } = dst.detail else {
        panic!("/dst is not a directory: {dst:?}");
    };
    let names: Vec<String> = (0..16).map(|i| format!("f{i}")).collect();
    let files: Vec<u64> = mover.run(Duration::from_secs(60), async |c| {
        let mut files = Vec::new();
        for n in &names {
            let f = c
                .create(&format!("/src/{n}"), 0o644, Default::default(), true)
                .await
                .unwrap();
            files.push(f.stat().await.unwrap().handle);
        }
        files
    });
    let at = |tc: &common::TestClient| {
        tc.run(Duration::from_secs(30), async |c| {
            let mut at = Vec::new();
            for s in 0..servers {
                at.push(fed(&c, s, None).await.1);
            }
            at
        })
    };
    let (mover_at, other_at) = (at(&mover), at(&other));
    // The other client follows the feeds meanwhile, as a mount does: a change is
    // answered once every follower asked again past it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let following = {
        let (c, stop, mut at) = (other.client.clone(), stop.clone(), other_at.clone());
        other.rt.spawn(async move {
            let mut all = Vec::new();
            loop {
                let last = stop.load(std::sync::atomic::Ordering::Acquire);
                for (s, (epoch, next)) in at.iter_mut().enumerate() {
                    let a = c
                        .changes(s, *epoch, *next, Duration::from_millis(10))
                        .await
                        .unwrap();
                    assert!(!a.lost, "server {s} lost changes");
                    (*epoch, *next) = (a.epoch, a.next);
                    all.extend(a.changes);
                }
                if last {
                    return all;
                }
            }
        })
    };
    mover.run(Duration::from_secs(60), async |c| {
        for n in &names {
            c.rename(&format!("/src/{n}"), &format!("/dst/{n}"))
                .await
                .unwrap();
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Release);
    let to_other = other.block_on(following).expect("the other client's feeds");
    // The moves whose new name's server is not the file's owner (where its old name
    // was: a file is made on its name's server): the owner counted the new name.
    let across = names
        .iter()
        .zip(&files)
        .filter(|(n, h)| {
            let new = config.shard_server_in(&metas, dst.handle, pvfs_proto::name_shard(n, shards));
            config.owner_of(**h) != Some(new)
        })
        .count();
    assert!(
        across > 0,
        "no move went across servers: the test shows nothing"
    );
    let handed = |tc: &common::TestClient, from: Vec<(u64, u64)>| {
        tc.run(Duration::from_secs(30), async |c| {
            let mut all = Vec::new();
            for (s, since) in from.into_iter().enumerate() {
                all.extend(fed(&c, s, Some(since)).await.0);
            }
            all
        })
    };
    let to_mover = handed(&mover, mover_at);
    assert!(
        to_mover.is_empty(),
        "the client that moved {} files ({across} across servers) was handed its own \
         changes: {to_mover:?}",
        files.len()
    );
    // The control: the same changes, handed to the other client.
    for (n, h) in names.iter().zip(&files) {
        assert!(
            to_other
                .iter()
                .any(|ch| ch.handle == *h && ch.entry.is_none()),
            "the other client was not told {n} changed"
        );
        for (dir, name) in [(src, n), (dst.handle, n)] {
            assert!(
                to_other
                    .iter()
                    .any(|ch| ch.entry.as_ref() == Some(&(dir, name.clone()))),
                "the other client was not told of the name {n} in {dir:#x}"
            );
        }
    }
}

/// Two mounts caching for ten minutes, and a directory the first made that the
/// second sees (the mounts go before the file system: fields drop in order).
struct TwoMounts {
    maker: Mount,
    other: Mount,
    _cluster: Cluster,
}

fn two_mounts_with(dir: &str) -> TwoMounts {
    let cluster = Cluster::start();
    let maker = Mount::start(&cluster, LONG);
    let other = Mount::start(&cluster, LONG);
    std::fs::create_dir(maker.join(dir)).unwrap();
    until("the new directory", || other.join(dir).is_dir());
    TwoMounts {
        maker,
        other,
        _cluster: cluster,
    }
}

/// Visible when the call returns: each change made through mount B is checked
/// through mount A right after B's call returned, with A caching for ten minutes (a
/// new name A had looked up as absent, a mode A had cached, both names of a rename,
/// an unlink). Every check finds the change: the servers answer B only once A
/// dropped what it made stale. (Without that wait, one run found 49 of 100 unlinks,
/// 78 of 100 mode changes and 4 of 100 renames stale.)
#[test]
fn another_mounts_change_is_seen_when_its_call_returns() {
    let t = two_mounts_with("v");
    let (a, b) = (&t.other, &t.maker);
    const ROUNDS: usize = 100;
    let mut stale: std::collections::BTreeMap<&str, usize> = Default::default();
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o7777);
    for i in 0..ROUNDS {
        let (name, moved) = (format!("v/f{i}"), format!("v/m{i}"));
        // A caches the name as absent, then B creates it.
        assert!(!a.join(&name).exists());
        std::fs::write(b.join(&name), b"x").unwrap();
        if !a.join(&name).exists() {
            *stale.entry("create").or_default() += 1;
        }
        // A caches the mode, then B changes it.
        let before = mode(&a.join(&name));
        std::fs::set_permissions(b.join(&name), std::fs::Permissions::from_mode(0o600)).unwrap();
        if mode(&a.join(&name)).ok() != Some(0o600) {
            *stale.entry("chmod").or_default() += 1;
        }
        assert_ne!(before.ok(), Some(0o600));
        // A caches the old name as there and the new one as absent; B renames.
        assert!(!a.join(&moved).exists());
        std::fs::rename(b.join(&name), b.join(&moved)).unwrap();
        if a.join(&name).exists() || !a.join(&moved).exists() {
            *stale.entry("rename").or_default() += 1;
        }
        // B unlinks what A sees.
        std::fs::remove_file(b.join(&moved)).unwrap();
        if a.join(&moved).exists() {
            *stale.entry("unlink").or_default() += 1;
        }
    }
    assert!(
        stale.is_empty(),
        "stale answers through A right after B's call returned, of {ROUNDS} each: {stale:?}"
    );
    eprintln!("{} checks, none stale", 4 * ROUNDS);
}

/// Two mounts changing one directory at once never wait for each other's caches:
/// the kernel holds a directory's lock while its mount serves a change there, so a
/// mount does not wait for the kernel to drop another mount's name in a directory
/// it is changing itself (it goes once its own change is answered). A wait would
/// last a whole feed lease (4 s); no create, rename or unlink takes that long.
#[test]
fn two_mounts_changing_one_directory_do_not_wait_for_each_other() {
    let t = two_mounts_with("shared");
    let (a, b) = (&t.maker, &t.other);
    let work = |root: std::path::PathBuf, tag: &'static str| {
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            for i in 0..200 {
                let f = root.join(format!("shared/{tag}{i}"));
                let g = root.join(format!("shared/{tag}{i}.moved"));
                // Names the other mount changes are looked up here too, so both
                // kernels hold entries of the directory the other changes.
                let other = if tag == "a" { "b" } else { "a" };
                let _ = root.join(format!("shared/{other}{i}")).exists();
                let start = Instant::now();
                std::fs::write(&f, b"x").unwrap();
                std::fs::rename(&f, &g).unwrap();
                std::fs::remove_file(&g).unwrap();
                slowest = slowest.max(start.elapsed());
            }
            slowest
        })
    };
    let (ta, tb) = (
        work(a.path().to_path_buf(), "a"),
        work(b.path().to_path_buf(), "b"),
    );
    let (sa, sb) = (ta.join().unwrap(), tb.join().unwrap());
    assert!(
        sa < Duration::from_secs(3) && sb < Duration::from_secs(3),
        "a create, rename and unlink took {sa:?} on A and {sb:?} on B: waited out a lease"
    );
    eprintln!("slowest create+rename+unlink: {sa:?} on A, {sb:?} on B");
}

/// A mount that stops answering (its process stopped, as a hung node) holds other
/// clients' changes up for one feed lease at most, once; when it runs again it has
/// forgotten what it cached and sees what changed meanwhile (a name it had cached
/// as absent excepted: `docs/fuse.md`, "Caching").
#[test]
fn a_stopped_mount_holds_changes_up_for_one_lease_at_most() {
    let cluster = Cluster::start();
    let b = Mount::start(&cluster, LONG);
    let c = Mount::start(&cluster, LONG);
    std::fs::write(b.join("t"), b"t").unwrap();
    until("B's file", || c.join("t").exists());
    c.signal(libc::SIGSTOP);
    let first = Instant::now();
    std::fs::write(b.join("s"), b"s").unwrap();
    let first = first.elapsed();
    let second = Instant::now();
    std::fs::remove_file(b.join("t")).unwrap();
    let second = second.elapsed();
    c.signal(libc::SIGCONT);
    assert!(
        first < scaled(Duration::from_secs(8)),
        "a create waited {first:?} for a stopped mount"
    );
    assert!(
        second < Duration::from_secs(2),
        "the stopped mount held up a second change too: {second:?}"
    );
    until("the create made while C was stopped", || {
        c.join("s").exists()
    });
    until("the unlink made while C was stopped", || {
        !c.join("t").exists()
    });
    eprintln!("held up {first:?} once, then {second:?}");
}
