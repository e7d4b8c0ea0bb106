//! `pvfs fsck`: a file system is damaged on purpose in every way fsck knows (each
//! `ProblemKind`), the way a crash between the steps of a multi-server operation, a
//! lost disk or a configuration change leaves it — by raw requests to the servers and
//! by changing a server's storage directory or the configuration, never by faking
//! fsck's input. `pvfs fsck` must find each problem (human output, `--json`, exit
//! status 1), change nothing without `--repair`, repair each repairable one with
//! `--repair` (and say which it could not), and a later check must be clean (exit
//! status 0) with the data of healthy files intact.
#![allow(clippy::unwrap_used)]

mod common;

use pvfs_proto::req;
use std::collections::BTreeMap;
use std::time::Duration;

use common::{CliOutput, Cluster, Rng};
use pvfs_client::{Client, LayoutSpec};
use pvfs_proto::{
    decode, encode, name_shard, Creds, Handle, LinkDrop, ObjDetail, ObjKind, Request, RequestBody,
    Response,
};

/// Longest a client call may take here (`TestClient::run` scales it).
fn call() -> Duration {
    Duration::from_secs(120)
}

/// Every kind of problem fsck knows on a file system of one copy, as `--json` names
/// it, and whether `--repair` fixes it (a directory's several names and impossible
/// layouts are only reported: which name or which server is right cannot be known).
/// Copies that differ (`CopiesDiffer`) have a test of their own, below.
const KINDS: [(&str, bool); 12] = [
    ("DanglingEntry", true),
    ("OrphanEntry", true),
    ("MisplacedEntry", true),
    ("OrphanObject", true),
    ("MultipleNames", false),
    ("LinkCount", true),
    ("WrongParent", true),
    ("StaleSeal", true),
    ("BadLayout", false),
    ("MissingDatafile", true),
    ("OrphanDatafile", true),
    ("PastWidth", true),
];

/// Sends one raw request to server `server` (for damage the client library has no
/// call for) and returns the answer; an error answer fails the test.
async fn raw(config: &pvfs_config::Config, server: usize, request: Request) -> Response {
    let op = request.op_name();
    let r = raw_answer(config, server, request).await;
    if let Response::Error { errno, message, .. } = &r {
        panic!("{op} on server {server}: error {errno}: {message}");
    }
    r
}

/// Sends one raw request to server `server` and returns the answer, errors included.
async fn raw_answer(config: &pvfs_config::Config, server: usize, request: Request) -> Response {
    let mux = common::raw_mux(config, server).await;
    let body = encode(&RequestBody {
        creds: Creds::default(),
        request,
        retry: None,
        origin: 0,
    });
    let mut call = mux.call(&body, &[], true).await.unwrap();
    decode(&call.recv().await.unwrap().body).unwrap()
}

/// The server holding entry `name` of directory `dir`: shard `name_shard(name)` of
/// the directory, on the metadata server that many places after the directory's owner
/// (the placement rule of docs/namespace.md, computed from the configuration alone).
fn entry_server(config: &pvfs_config::Config, dir: Handle, shards: u32, name: &str) -> usize {
    let metas = config.meta_servers();
    let owner = config.owner_of(dir).unwrap();
    let pos = metas.iter().position(|&m| m == owner).unwrap();
    metas[(pos + name_shard(name, shards) as usize) % metas.len()]
}

/// The number of shards of directory `path`.
async fn shards_of(c: &Client, path: &str) -> (Handle, u32) {
    let a = c.stat(path).await.unwrap();
    match a.detail {
        ObjDetail::Dir { shards, .. } => (a.handle, shards),
        other => panic!("{path} is not a directory: {other:?}"),
    }
}

/// One `pvfs fsck` run, parsed: the exit code and, per problem kind, how many were
/// found and how many of them repaired.
struct Run {
    out: CliOutput,
    code: i32,
    kinds: BTreeMap<String, (usize, usize)>,
}

/// Runs `pvfs fsck --grace 0s --json` (with `--repair` if asked) and checks the JSON
/// is consistent with itself and with the exit status.
fn fsck_json(cluster: &Cluster, repair: bool) -> Run {
    let mut args = vec!["fsck", "--grace", "0s", "--json"];
    if repair {
        args.push("--repair");
    }
    let out = cluster.run_cli(&args);
    let code = out.status.code().expect("fsck died of a signal");
    let v = out.json_any();
    let problems = v["problems"].as_array().expect("problems array");
    let mut kinds: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut unrepaired = 0;
    for p in problems {
        let kind = p["kind"].as_str().expect("kind").to_string();
        assert!(
            p["what"].as_str().is_some_and(|w| !w.is_empty()),
            "a problem without a description: {p}"
        );
        let repaired = p["repaired"].as_bool().expect("repaired");
        assert!(repair || !repaired, "a check without --repair repaired {p}");
        let e = kinds.entry(kind).or_default();
        e.0 += 1;
        if repaired {
            e.1 += 1;
        } else {
            unrepaired += 1;
        }
    }
    assert_eq!(v["unrepaired"].as_u64(), Some(unrepaired), "{v}");
    for key in ["objects", "entries", "datafiles"] {
        assert!(v[key].as_u64().is_some(), "no {key} count: {v}");
    }
    assert_eq!(
        code,
        if unrepaired == 0 { 0 } else { 1 },
        "exit status with {unrepaired} problems left:\n{}",
        out.stdout
    );
    Run { out, code, kinds }
}

/// Runs the human-readable `pvfs fsck --grace 0s`; returns its output and exit code.
fn fsck_human(cluster: &Cluster) -> (String, i32) {
    let out = cluster.run_cli(&["fsck", "--grace", "0s"]);
    let code = out.status.code().expect("fsck died of a signal");
    assert!(
        out.stdout.starts_with("checked "),
        "fsck's first line:\n{}",
        out.stdout
    );
    (out.stdout, code)
}

#[test]
fn fsck_finds_and_repairs_each_kind_of_damage() {
    let cluster = Cluster::start();
    let tc = cluster.client();
    let mut rng = Rng::new(0x5eed_f5c4);
    let big = rng.bytes(3 << 20);
    let small = rng.bytes(200_000);
    let config = cluster.config().clone();
    let (victim_df, victim_server) = tc.run(call(), async |c| {
        c.mkdir_all("/a/b", 0o755).await.unwrap();
        for name in ["/a/f1", "/a/b/f2", "/a/orphan", "/a/dangling", "/big"] {
            let f = c
                .create(name, 0o644, LayoutSpec::default(), true)
                .await
                .unwrap();
            f.write_at(0, &big).await.unwrap();
        }
        let f = c
            .create("/a/b/small", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, &small).await.unwrap();
        c.symlink("f1", "/a/link").await.unwrap();
        let f = c
            .create("/a/moved", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, &small).await.unwrap();
        c.mkdir("/a/sealed", 0o755).await.unwrap();
        c.mkdir("/a/c", 0o755).await.unwrap();
        let f = c
            .create("/a/narrow", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, &small[..3901]).await.unwrap();
        let df = c.open("/big").await.unwrap().layout().datafiles[1];
        (df.handle, df.server as usize)
    });
    // The small file's bytes are on its first datafile only: it is 1 wide.
    let narrow_df = tc.run(call(), async |c| {
        let l = c.stat("/a/narrow").await.unwrap().layout().unwrap().clone();
        assert_eq!((l.width, l.datafiles.len()), (1, 4), "{l:?}");
        l.datafiles[1]
    });
    let clean = fsck_json(&cluster, false);
    assert!(
        clean.kinds.is_empty(),
        "fresh file system: {}",
        clean.out.stdout
    );

    // MissingDatafile: a lost datafile of a written file (a lost disk).
    std::fs::remove_file(cluster.datafile_path(victim_server, victim_df)).unwrap();
    // PastWidth: bytes on a datafile past its file's width (a metadata server
    // restored from a copy older than the file's growth).
    std::fs::write(
        cluster.datafile_path(narrow_df.server as usize, narrow_df.handle),
        &small[..100],
    )
    .unwrap();
    tc.run(call(), async |c| {
        let size = c.stat("/a/narrow").await.unwrap().size;
        assert_eq!(size, 3901, "sizes ask only the datafiles within the width");
    });
    // OrphanDatafile: a datafile no layout names (an interrupted unlink).
    let stray = config.servers[2].handles.first + 0xfff_0000;
    std::fs::create_dir_all(cluster.datafile_path(2, stray).parent().unwrap()).unwrap();
    std::fs::write(cluster.datafile_path(2, stray), b"stray bytes").unwrap();
    let (a, b_dir) = tc.run(call(), async |c| {
        let (a, a_shards) = shards_of(&c, "/a").await;
        let (b_dir, _) = shards_of(&c, "/a/b").await;
        // OrphanObject: a name dropped while its object stays (an interrupted unlink).
        c.unlink_at(a, "orphan", true).await.unwrap();
        // DanglingEntry: an object removed while its name stays (its datafiles stay
        // too: OrphanDatafile).
        let dangling = c.stat("/a/dangling").await.unwrap().handle;
        raw(
            &config,
            config.owner_of(dangling).unwrap(),
            Request::SetLinks(req::SetLinks {
                handle: dangling,
                links: 0,
                expect: 1,
            }),
        )
        .await;
        // StaleSeal: a sealed shard of a directory that still exists (an interrupted
        // rmdir).
        let sealed = c.stat("/a/sealed").await.unwrap().handle;
        raw(
            &config,
            config.owner_of(sealed).unwrap(),
            Request::SealDir(req::SealDir {
                dir: sealed,
                seal: true,
                ticket: None,
            }),
        )
        .await;
        // LinkCount: a second name of /a/b/f2 in /a, not counted (an interrupted
        // rename that had linked the new name and not yet removed the old one).
        let f2 = c.stat("/a/b/f2").await.unwrap().handle;
        raw(
            &config,
            entry_server(&config, a, a_shards, "alias"),
            Request::LinkEntry(req::LinkEntry {
                dir: a,
                name: "alias".into(),
                handle: f2,
                kind: ObjKind::File,
                replace: None,
                fate: LinkDrop::Moved,
                counted: false,
                ticket: None,
            }),
        )
        .await;
        // MultipleNames: a second name of directory /a/c at the root (the same, for
        // a directory, which cannot have hard links).
        let c_dir = c.stat("/a/c").await.unwrap().handle;
        let root = c.root();
        let root_shards = config.meta_servers().len() as u32;
        raw(
            &config,
            entry_server(&config, root, root_shards, "calias"),
            Request::LinkEntry(req::LinkEntry {
                dir: root,
                name: "calias".into(),
                handle: c_dir,
                kind: ObjKind::Dir,
                replace: None,
                fate: LinkDrop::Moved,
                counted: false,
                ticket: None,
            }),
        )
        .await;
        // OrphanEntry: an entry in a directory that does not exist (a directory
        // object removed by hand, name and all, while an entry of it, on another
        // server, names /a/f1). Servers refuse a name for a directory that does not
        // exist, so the entry is made first.
        c.mkdir("/a/ghost", 0o755).await.unwrap();
        let (ghost, ghost_shards) = shards_of(&c, "/a/ghost").await;
        let f1 = c.stat("/a/f1").await.unwrap().handle;
        raw(
            &config,
            entry_server(&config, ghost, ghost_shards, "lost"),
            Request::LinkEntry(req::LinkEntry {
                dir: ghost,
                name: "lost".into(),
                handle: f1,
                kind: ObjKind::File,
                replace: None,
                fate: LinkDrop::Moved,
                counted: false,
                ticket: None,
            }),
        )
        .await;
        raw(
            &config,
            entry_server(&config, a, a_shards, "ghost"),
            Request::Unlink(req::Unlink {
                dir: a,
                name: "ghost".into(),
                expect: Some(ghost),
                want: pvfs_proto::UnlinkWant::Dir,
                fate: LinkDrop::Moved,
            }),
        )
        .await;
        raw(
            &config,
            config.owner_of(ghost).unwrap(),
            Request::RemoveObject(req::RemoveObject {
                handle: ghost,
                ticket: None,
            }),
        )
        .await;
        // A name in the wrong shard is refused (it would be invisible).
        let wrong = (0..config.servers.len())
            .find(|&s| s != entry_server(&config, a, a_shards, "misplaced"))
            .unwrap();
        let refused = raw_answer(
            &config,
            wrong,
            Request::LinkEntry(req::LinkEntry {
                dir: a,
                name: "misplaced".into(),
                handle: f1,
                kind: ObjKind::File,
                replace: None,
                fate: LinkDrop::Moved,
                counted: false,
                ticket: None,
            }),
        )
        .await;
        assert!(
            matches!(&refused, Response::Error { errno, .. } if pvfs_proto::Errno(*errno) == pvfs_proto::Errno::EXDEV),
            "a misplaced name: {refused:?}"
        );
        // WrongParent: /a/b records the root as its parent while /a names it (an
        // interrupted rename of a directory).
        raw(
            &config,
            config.owner_of(b_dir).unwrap(),
            Request::SetParent(req::SetParent {
                dir: b_dir,
                parent: c.root(),
                ticket: None,
            }),
        )
        .await;
        (a, b_dir)
    });

    // MisplacedEntry: /a/moved's entry kept by another metadata server than the one
    // holding its shard (servers refuse to put it there, so it is done in the stores
    // of the two servers, stopped).
    let a_attr = tc.run(call(), async |c| c.stat("/a").await.unwrap());
    let a_shards = match a_attr.detail {
        ObjDetail::Dir { shards, .. } => shards,
        _ => unreachable!("/a is a directory"),
    };
    let moved = tc.run(call(), async |c| c.stat("/a/moved").await.unwrap().handle);
    let right = entry_server(&config, a, a_shards, "moved");
    let wrong = config
        .meta_servers()
        .into_iter()
        .find(|&s| s != right)
        .unwrap();
    let names = cluster.names();
    for s in [right, wrong] {
        cluster.stop_clean(&names[s]);
    }
    tc.block_on(async {
        for (s, put) in [(right, false), (wrong, true)] {
            let sc = &config.servers[s];
            let store = pvfs_storage::MetaStore::open(
                &sc.storage,
                &pvfs_storage::Identity {
                    fsid: config.fsid,
                    server: sc.name.clone(),
                },
                (sc.handles.first, sc.handles.last),
            )
            .unwrap();
            store
                .write(move |t| {
                    let now = pvfs_proto::Timespec::now();
                    if put {
                        t.put_entry(a, "moved", moved, ObjKind::File, now)?;
                    } else {
                        t.delete_entry(a, "moved", now)?;
                    }
                    Ok(())
                })
                .await
                .unwrap();
            store.close().await;
        }
    });
    for s in [right, wrong] {
        cluster.restart(&names[s]);
    }
    tc.run(call(), async |c| {
        assert!(
            c.stat("/a/moved").await.is_err(),
            "a misplaced name is not seen"
        );
    });

    // Found: every kind but BadLayout (its own test), in JSON and in words, exit 1.
    let found = fsck_json(&cluster, false);
    for (kind, _) in KINDS.iter().filter(|(k, _)| *k != "BadLayout") {
        assert!(
            found.kinds.contains_key(*kind),
            "fsck missed {kind}:\n{}",
            found.out.stdout
        );
    }
    assert_eq!(found.code, 1);
    let (text, code) = fsck_human(&cluster);
    assert_eq!(code, 1, "{text}");
    let total: usize = found.kinds.values().map(|k| k.0).sum();
    for (kind, (n, _)) in &found.kinds {
        let lines = text
            .lines()
            .filter(|l| l.trim_start().starts_with(&format!("found  {kind}: ")))
            .count();
        assert_eq!(lines, *n, "{kind} lines in the human output:\n{text}");
    }
    assert!(
        text.lines().last() == Some(&format!("{total} problems (run with --repair to fix them)")),
        "the summary line:\n{text}"
    );
    // Read-only: the same problems are still there.
    let again = fsck_json(&cluster, false);
    assert_eq!(
        again.kinds, found.kinds,
        "a check without --repair changed something"
    );

    // --repair: every repairable kind repaired, the others left and said so.
    let repaired = fsck_json(&cluster, true);
    assert_eq!(
        repaired.kinds.keys().collect::<Vec<_>>(),
        found.kinds.keys().collect::<Vec<_>>()
    );
    for (kind, (n, fixed)) in &repaired.kinds {
        let repairable = KINDS.iter().find(|(k, _)| k == kind).unwrap().1;
        let want = if repairable { *n } else { 0 };
        assert_eq!(
            *fixed, want,
            "{kind}: {fixed} of {n} repaired:\n{}",
            repaired.out.stdout
        );
    }
    assert_eq!(repaired.code, 1, "MultipleNames is left: exit status 1");
    // What is left: only the second name, reported in words as found.
    let (text, code) = fsck_human(&cluster);
    assert_eq!(code, 1, "{text}");
    let left: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(
        left.len(),
        2,
        "only MultipleNames and the summary left:\n{text}"
    );
    assert!(
        left[0].trim_start().starts_with("found  MultipleNames: "),
        "{text}"
    );
    assert_eq!(
        left[1], "1 problems (run with --repair to fix them)",
        "{text}"
    );

    // The wrong name removed by hand (the directory stays): clean, exit status 0.
    tc.run(call(), async |c| {
        let root = c.root();
        let root_shards = config.meta_servers().len() as u32;
        let c_dir = c.stat("/a/c").await.unwrap().handle;
        raw(
            &config,
            entry_server(&config, root, root_shards, "calias"),
            Request::Unlink(req::Unlink {
                dir: root,
                name: "calias".into(),
                expect: Some(c_dir),
                want: pvfs_proto::UnlinkWant::Dir,
                fate: LinkDrop::Moved,
            }),
        )
        .await;
    });
    let clean = fsck_json(&cluster, false);
    assert!(clean.kinds.is_empty(), "after repair: {}", clean.out.stdout);
    let (text, code) = fsck_human(&cluster);
    assert_eq!((code, text.lines().last()), (0, Some("clean")), "{text}");

    // The repaired file system works and healthy data is intact: the stray datafile
    // is gone, the lost stripe reads as zeros, the unsealed directory takes new
    // entries, /a/b records /a as its parent, the rest is byte for byte as written.
    assert!(!cluster.datafile_path(2, stray).exists());
    tc.run(call(), async |c| {
        // The misplaced name is where lookups find it again, with its data.
        let f = c.open("/a/moved").await.unwrap();
        let mut got = vec![0u8; small.len()];
        assert_eq!(f.read_at(0, &mut got).await.unwrap(), small.len());
        assert!(got == small, "/a/moved's data after its name moved");
        let f = c.open("/big").await.unwrap();
        let mut got = vec![0u8; big.len()];
        assert_eq!(f.read_at(0, &mut got).await.unwrap(), big.len());
        let stripe = f.layout().stripe();
        for (x, (g, w)) in got.iter().zip(&big).enumerate() {
            let (idx, _) = stripe.locate(x as u64);
            let want = if idx == 1 { 0 } else { *w };
            assert_eq!(*g, want, "byte {x} of /big after repair");
        }
        c.create("/a/sealed/new", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        assert!(c.stat("/a/dangling").await.is_err());
        assert!(c.stat("/a/orphan").await.is_err());
        // The uncounted second name is now a hard link of /a/b/f2.
        let alias = c.stat("/a/alias").await.unwrap();
        let f2 = c.stat("/a/b/f2").await.unwrap();
        assert_eq!((alias.handle, alias.nlink, f2.nlink), (f2.handle, 2, 2));
        match c.stat("/a/b").await.unwrap().detail {
            ObjDetail::Dir { parent, .. } => assert_eq!(parent, a, "/a/b's parent"),
            other => panic!("/a/b: {other:?}"),
        }
        assert_eq!(c.stat("/a/b").await.unwrap().handle, b_dir);
        for (path, want) in [("/a/f1", &big), ("/a/b/f2", &big), ("/a/b/small", &small)] {
            let f = c.open(path).await.unwrap();
            let mut got = vec![0u8; want.len() + 1];
            let n = f.read_at(0, &mut got).await.unwrap();
            got.truncate(n);
            common::assert_bytes_eq(&got, want, path);
        }
        assert_eq!(c.readlink("/a/link").await.unwrap(), "f1");
        // Widened over the bytes past its width: they count and read back.
        let f = c.open("/a/narrow").await.unwrap();
        let mut got = vec![0u8; 65536 + 200];
        let n = f.read_at(0, &mut got).await.unwrap();
        assert_eq!(n, 65536 + 100, "/a/narrow's size after repair");
        common::assert_bytes_eq(&got[..3901], &small[..3901], "/a/narrow's first stripe");
        assert!(
            got[3901..65536].iter().all(|&b| b == 0),
            "the hole reads as zeros"
        );
        common::assert_bytes_eq(
            &got[65536..n],
            &small[..100],
            "/a/narrow past its old width",
        );
        let l = c.stat("/a/narrow").await.unwrap().layout().unwrap().clone();
        assert_eq!(l.width, 2, "{l:?}");
    });
}

#[test]
fn fsck_reports_layouts_naming_a_server_no_longer_configured() {
    // Five servers, s4 data only; /wide has a datafile on s4, /narrow does not.
    let cluster = Cluster::builder().servers(5).meta_servers(4).start();
    let mut rng = Rng::new(0x5eed_ba1a);
    let wide = rng.bytes(1 << 20);
    let narrow = rng.bytes(600_000);
    let tc = cluster.client();
    tc.run(call(), async |c| {
        let w = c
            .create("/wide", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        w.write_at(0, &wide).await.unwrap();
        assert!(w.layout().datafiles.iter().any(|d| d.server == 4));
        let spec = LayoutSpec {
            stripe_size: None,
            stripe_count: Some(4),
            base: Some(0),
            replicas: None,
        };
        let n = c.create("/narrow", 0o644, spec, true).await.unwrap();
        n.write_at(0, &narrow).await.unwrap();
        assert!(n.layout().datafiles.iter().all(|d| d.server < 4));
    });
    drop(tc);
    assert!(fsck_json(&cluster, false).kinds.is_empty());

    // s4 is taken out of the configuration (an administrator's mistake: its data was
    // not moved first). The servers refuse to start with it; clients that read it
    // meet layouts naming a server they do not know.
    let full = std::fs::read_to_string(cluster.config_path()).unwrap();
    let at = full
        .find("[[servers]]\nname = \"s4\"")
        .expect("s4's section");
    let without = full[..at]
        .replace("stripe_count = 5", "stripe_count = 4")
        .trim_end()
        .to_string()
        + "\n";
    std::fs::write(cluster.config_path(), &without).unwrap();
    let refused = cluster.run_cli(&["server", "--name", "s0"]);
    assert!(!refused.status.success(), "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("used with 5 servers and the configuration has 4"),
        "{}",
        refused.stderr
    );
    cluster.assert_all_running();

    let found = fsck_json(&cluster, false);
    assert_eq!(
        found.kinds.keys().collect::<Vec<_>>(),
        ["BadLayout"],
        "{}",
        found.out.stdout
    );
    assert!(
        found.out.stdout.contains("cannot be on server 4"),
        "{}",
        found.out.stdout
    );
    let (text, code) = fsck_human(&cluster);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("found  BadLayout: "), "{text}");
    // --repair cannot know where the data went: reported, not repaired.
    let repaired = fsck_json(&cluster, true);
    assert_eq!(repaired.kinds.get("BadLayout").map(|k| k.1), Some(0));
    let out = cluster.run_cli(&["fsck", "--grace", "0s", "--repair"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stdout.contains("NOT REPAIRED  BadLayout: "),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("not repaired"), "{}", out.stdout);
    // Every client path that meets the layout errors out, none panics.
    for args in [
        &["stat", "/wide"][..],
        &["layout", "/wide"],
        &["ls", "-l", "/"],
        &["cp", "pvfs:/wide", "/dev/null"],
    ] {
        let out = cluster.run_cli(args);
        assert!(
            !out.stderr.contains("panicked"),
            "`pvfs {}` panicked on a layout naming an unknown server:\n{}",
            args.join(" "),
            out.stderr
        );
        assert!(
            out.status.code().is_some(),
            "`pvfs {}` died of a signal: {}",
            args.join(" "),
            out.stderr
        );
    }
    cluster
        .run_cli(&["cp", "pvfs:/wide", "/dev/null"])
        .err_containing("not in the configuration");

    // Fixed by hand (s4 back in the configuration): clean, and both files intact.
    std::fs::write(cluster.config_path(), &full).unwrap();
    let clean = fsck_json(&cluster, false);
    assert!(clean.kinds.is_empty(), "{}", clean.out.stdout);
    let tc = cluster.client();
    tc.run(call(), async |c| {
        for (path, want) in [("/wide", &wide), ("/narrow", &narrow)] {
            let f = c.open(path).await.unwrap();
            let mut got = vec![0u8; want.len() + 1];
            let n = f.read_at(0, &mut got).await.unwrap();
            got.truncate(n);
            common::assert_bytes_eq(&got, want, path);
        }
    });
}

#[test]
fn fsck_refuses_to_judge_with_a_server_down() {
    let cluster = Cluster::builder()
        .request_timeout(&format!(
            "{}ms",
            common::scaled(Duration::from_secs(2)).as_millis()
        ))
        .start();
    cluster.kill("s1", libc::SIGKILL);
    let tc = cluster.client();
    let err = tc.run(Duration::from_secs(30), async |c| {
        c.fsck(false, Duration::ZERO).await.unwrap_err()
    });
    assert!(common::is_server_down_errno(err.errno), "{err:?}");
    // The command says so and exits non-zero, with no verdict on stdout.
    let out = cluster.run_cli(&["fsck", "--grace", "0s"]);
    out.err_line();
    assert!(!out.stdout.contains("clean"), "{}", out.stdout);
}

/// Flips one bit of server `server`'s copy of datafile `handle` on its disk, behind
/// its back, as a failing disk would.
fn flip_bit(cluster: &Cluster, server: usize, handle: Handle, at: usize) {
    let path = cluster.datafile_path(server, handle);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
}

#[test]
fn fsck_finds_copies_that_differ_and_makes_them_agree() {
    let cluster = common::with_copies(4, 3);
    let tc = cluster.client();
    let data = Rng::new(0x5eed_c0b1).bytes(300_000);
    // Three copies, and a file with two.
    let (three, two) = tc.run(call(), async |c| {
        let mut dfs = Vec::new();
        for (path, replicas) in [("/three", None), ("/two", Some(2))] {
            let spec = LayoutSpec {
                replicas,
                ..LayoutSpec::default()
            };
            let f = c.create(path, 0o644, spec, true).await.unwrap();
            f.write_at(0, &data).await.unwrap();
            f.fsync().await.unwrap();
            dfs.push(f.layout().datafiles[0]);
        }
        (dfs[0], dfs[1])
    });
    let clean = fsck_json(&cluster, false);
    assert!(clean.kinds.is_empty(), "copies agree: {}", clean.out.stdout);

    // One copy of each goes bad: of three, the middle one (two outvote it); of two,
    // the tail (the head, which takes every write first, decides).
    let copies = |df: pvfs_proto::Datafile| df.replicas().map(|s| s as usize).collect::<Vec<_>>();
    let (c3, c2) = (copies(three), copies(two));
    assert_eq!((c3.len(), c2.len()), (3, 2));
    flip_bit(&cluster, c3[1], three.handle, 1000);
    flip_bit(&cluster, c2[1], two.handle, 2000);
    let found = fsck_json(&cluster, false);
    assert_eq!(
        found.kinds.get("CopiesDiffer"),
        Some(&(2, 0)),
        "{}",
        found.out.stdout
    );
    assert_eq!(found.kinds.len(), 1, "{}", found.out.stdout);
    for s in [c3[1], c2[1]] {
        assert!(
            found.out.stdout.contains(&cluster.config().servers[s].name),
            "{}",
            found.out.stdout
        );
    }
    let fixed = fsck_json(&cluster, true);
    assert_eq!(
        fixed.kinds.get("CopiesDiffer"),
        Some(&(2, 2)),
        "{}",
        fixed.out.stdout
    );
    let after = fsck_json(&cluster, false);
    assert!(after.kinds.is_empty(), "after repair: {}", after.out.stdout);
    // The bad copies hold the good ones' bytes again, and the files read back.
    let on = |s: usize, h: Handle| std::fs::read(cluster.datafile_path(s, h)).unwrap();
    assert!(on(c3[1], three.handle) == on(c3[0], three.handle));
    assert!(on(c2[1], two.handle) == on(c2[0], two.handle));
    tc.run(call(), async |c| {
        for path in ["/three", "/two"] {
            let f = c.open(path).await.unwrap();
            let mut got = vec![0u8; data.len() + 1];
            let n = f.read_at(0, &mut got).await.unwrap();
            common::assert_bytes_eq(&got[..n], &data, path);
        }
    });
}

#[test]
fn a_nameless_file_whose_copies_differ_is_removed_whole() {
    // A file loses its name but keeps its object (an interrupted unlink), and its
    // copies differ (one went bad): the repair removes the file, copies and all,
    // mending no copy of it, and leaves nothing behind for the next check.
    let cluster = common::with_copies(4, 2);
    let tc = cluster.client();
    let data = Rng::new(0x5eed_0a1d).bytes(200_000);
    let (dir, df) = tc.run(call(), async |c| {
        c.mkdir_all("/d", 0o755).await.unwrap();
        let f = c
            .create("/d/gone", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, &data).await.unwrap();
        f.fsync().await.unwrap();
        let (dir, _) = shards_of(&c, "/d").await;
        (dir, f.layout().datafiles[0])
    });
    let copies: Vec<usize> = df.replicas().map(|s| s as usize).collect();
    assert_eq!(copies.len(), 2);
    flip_bit(&cluster, copies[1], df.handle, 1000);
    tc.run(call(), async |c| {
        c.unlink_at(dir, "gone", true).await.unwrap()
    });
    let found = fsck_json(&cluster, false);
    assert_eq!(
        found.kinds.get("OrphanObject"),
        Some(&(1, 0)),
        "{}",
        found.out.stdout
    );
    assert_eq!(
        found.kinds.get("CopiesDiffer"),
        Some(&(1, 0)),
        "{}",
        found.out.stdout
    );
    let fixed = fsck_json(&cluster, true);
    assert_eq!(
        fixed.kinds.get("OrphanObject"),
        Some(&(1, 1)),
        "{}",
        fixed.out.stdout
    );
    assert_eq!(
        fixed.kinds.get("CopiesDiffer"),
        None,
        "{}",
        fixed.out.stdout
    );
    let after = fsck_json(&cluster, false);
    assert!(after.kinds.is_empty(), "after repair: {}", after.out.stdout);
    for s in copies {
        assert!(
            !cluster.datafile_path(s, df.handle).exists(),
            "a copy of the removed file's datafile is left on {s}"
        );
    }
}
