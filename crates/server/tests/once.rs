//! At most once, kind by kind: every request kind that must not happen twice
//! (`Effect::Once`) is done on an in-process server, its answer "lost", and the
//! request sent again with the same retry key. The retry must get the first answer,
//! byte for byte, and the state must be what one run left — also when another client
//! changed the same thing in between (a replayed chmod must not undo a later one).
//! A negative control sends the same request with a fresh key and must see it happen
//! again (or fail as a second run does), so each row proves its check can fail.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use pvfs_proto::message::{UnlinkWant, XATTR_CREATE};
use pvfs_proto::{
    req, CreateWhat, Creds, Effect, Handle, LayoutSpec, LinkDrop, ObjDetail, ObjKind, Request,
    Response, RetryKey, SetAttr,
};
use pvfs_server::local::LocalServer;

/// One in-process server and a source of retry keys.
struct Fx {
    s: LocalServer,
    root: Handle,
    seq: std::cell::Cell<u64>,
}

impl Fx {
    async fn open(dir: &std::path::Path) -> Fx {
        let config = LocalServer::configure(dir, 1).unwrap();
        let root = config.root_handle();
        let s = LocalServer::open(config, "s0").await.unwrap();
        Fx {
            s,
            root,
            seq: std::cell::Cell::new(1),
        }
    }

    fn key(&self) -> RetryKey {
        let seq = self.seq.get();
        self.seq.set(seq + 1);
        RetryKey { client: 77, seq }
    }

    async fn call(&self, r: Request, key: Option<RetryKey>) -> Result<Response, String> {
        self.s
            .call(Creds::default(), r, key)
            .await
            .map_err(|e| format!("{}: {}", e.errno.name(), e.message))
    }

    /// Sets up state with a fresh key; must succeed.
    async fn must(&self, r: Request) -> Response {
        let what = format!("{r:?}");
        let key = Some(self.key());
        self.call(r, key)
            .await
            .unwrap_or_else(|e| panic!("set-up {what}: {e}"))
    }

    async fn create(&self, name: &str, what: CreateWhat) -> Handle {
        let r = LocalServer::create_request(self.root, name, what);
        match self.must(r).await {
            Response::Created { attr, .. } => attr.handle,
            other => panic!("create {name}: {other:?}"),
        }
    }

    async fn file(&self, name: &str) -> Handle {
        self.create(
            name,
            CreateWhat::File {
                spec: LayoutSpec::default(),
            },
        )
        .await
    }

    async fn dir(&self, name: &str) -> Handle {
        self.create(
            name,
            CreateWhat::Dir {
                shards: 1,
                default_layout: None,
            },
        )
        .await
    }

    /// What the tests observe: the root's names, and per object its mode, link
    /// count, parent, default layout and extended attributes, and the sealed shards.
    fn state(&self) -> String {
        let view = self.s.ctx.meta.read().unwrap();
        let (entries, _) = view.list_entries(self.root, None, 1000).unwrap();
        let mut out = String::new();
        for e in entries {
            out.push_str(&format!("{}={:#x} ", e.name, e.handle));
            if let Some(a) = view.get_object(e.handle).unwrap() {
                let (parent, layout) = match &a.detail {
                    ObjDetail::Dir {
                        parent,
                        default_layout,
                        ..
                    } => (*parent, format!("{default_layout:?}")),
                    _ => (0, String::new()),
                };
                let xattrs: Vec<(String, Vec<u8>)> = view
                    .list_xattrs(e.handle)
                    .unwrap()
                    .into_iter()
                    .map(|n| {
                        let v = view.get_xattr(e.handle, &n).unwrap().unwrap_or_default();
                        (n, v)
                    })
                    .collect();
                out.push_str(&format!(
                    "[mode {:o} nlink {} parent {parent:#x} layout {layout} xattrs {xattrs:?} acl {:?}] ",
                    a.mode, a.nlink, a.acl
                ));
            }
        }
        let seals: BTreeSet<Handle> = view.seals().unwrap().into_iter().collect();
        out.push_str(&format!("sealed {seals:?}"));
        out
    }
}

/// One row: the request, and another client's change to make between the first run
/// and the retry (if any).
struct Row {
    request: Request,
    between: Option<Request>,
}

/// Runs one row: first run, optional change by another, retry with the same key,
/// then the negative control with a fresh key.
async fn at_most_once(fx: &Fx, row: Row) -> Response {
    let name = row.request.op_name();
    assert_eq!(row.request.effect(), Effect::Once, "{name}");
    let key = Some(fx.key());
    let first = fx
        .call(row.request.clone(), key)
        .await
        .unwrap_or_else(|e| panic!("{name}: first run failed: {e}"));
    let mut after = fx.state();
    if let Some(b) = row.between {
        fx.must(b).await;
        let changed = fx.state();
        assert_ne!(
            changed, after,
            "{name}: the change in between changed nothing"
        );
        after = changed;
    }
    let retried = fx
        .call(row.request.clone(), key)
        .await
        .unwrap_or_else(|e| panic!("{name}: the retry failed where the first run succeeded: {e}"));
    assert_eq!(retried, first, "{name}: the retry got another answer");
    assert_eq!(fx.state(), after, "{name}: the retry did it again");
    // Negative control: a fresh key runs it again (another answer, or another
    // state), so the checks above could fail.
    let again = fx.call(row.request, Some(fx.key())).await;
    assert!(
        again.as_ref() != Ok(&first) || fx.state() != after,
        "{name}: with a fresh key nothing happened again (the check could not fail)"
    );
    first
}

fn ids(rs: &[&str]) -> BTreeSet<String> {
    rs.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn every_mutation_that_must_happen_once_is_answered_from_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let fx = Fx::open(dir.path()).await;
    let root = fx.root;
    let mut done = Vec::new();

    // Create: the retry is answered Created (not EEXIST).
    let row = Row {
        request: Request::Create(req::Create {
            hold: 0,
            parent: root,
            name: "c".into(),
            mode: 0o644,
            umask: 0,
            uid: 0,
            gid: 0,
            what: CreateWhat::File {
                spec: LayoutSpec::default(),
            },
        }),
        between: None,
    };
    let before = fx.state();
    at_most_once(&fx, row).await;
    assert_ne!(fx.state(), before);
    done.push("Create");

    // SetAttr: a replayed chmod must not undo a later one.
    let f = fx.file("sa").await;
    let chmod = |mode| {
        Request::SetAttr(req::SetAttr {
            handle: f,
            set: SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            },
        })
    };
    at_most_once(
        &fx,
        Row {
            request: chmod(0o600),
            between: Some(chmod(0o640)),
        },
    )
    .await;
    assert!(fx.state().contains("mode 600"), "the control ran it again");
    done.push("SetAttr");

    // Unlink: the retry is answered Unlinked (not ENOENT).
    fx.file("u").await;
    let r = at_most_once(
        &fx,
        Row {
            request: Request::Unlink(req::Unlink {
                dir: root,
                name: "u".into(),
                expect: None,
                want: UnlinkWant::NotDir,
                fate: LinkDrop::Delete,
            }),
            between: None,
        },
    )
    .await;
    assert!(matches!(r, Response::Unlinked { .. }), "{r:?}");
    done.push("Unlink");

    // LinkEntry: a second name for a file (the first step of a rename elsewhere).
    let f = fx.file("le-src").await;
    at_most_once(
        &fx,
        Row {
            request: Request::LinkEntry(req::LinkEntry {
                dir: root,
                name: "le-dst".into(),
                handle: f,
                kind: ObjKind::File,
                replace: None,
                fate: LinkDrop::Delete,
                counted: false,
                ticket: None,
            }),
            between: None,
        },
    )
    .await;
    done.push("LinkEntry");

    // LinkEntry over a name whose object loses its last link: the first run deletes
    // that object, and the retry must still be answered (its checks would look for
    // the deleted object: the record comes first). Found by the simulator.
    let f = fx.file("le-over-src").await;
    let victim = fx.file("le-over-dst").await;
    at_most_once(
        &fx,
        Row {
            request: Request::LinkEntry(req::LinkEntry {
                dir: root,
                name: "le-over-dst".into(),
                handle: f,
                kind: ObjKind::File,
                replace: Some(victim),
                fate: LinkDrop::Delete,
                counted: false,
                ticket: None,
            }),
            between: None,
        },
    )
    .await;

    // Rename: the retry is answered Linked (not ENOENT).
    let f = fx.file("r1").await;
    at_most_once(
        &fx,
        Row {
            request: Request::Rename(req::Rename {
                src_dir: root,
                src_name: "r1".into(),
                dst_dir: root,
                dst_name: "r2".into(),
                expect_src: f,
                replace: None,
                fate: LinkDrop::Delete,
            }),
            between: None,
        },
    )
    .await;
    // And over a name whose object it deletes.
    let f = fx.file("r3").await;
    let victim = fx.file("r4").await;
    at_most_once(
        &fx,
        Row {
            request: Request::Rename(req::Rename {
                src_dir: root,
                src_name: "r3".into(),
                dst_dir: root,
                dst_name: "r4".into(),
                expect_src: f,
                replace: Some(victim),
                fate: LinkDrop::Delete,
            }),
            between: None,
        },
    )
    .await;
    done.push("Rename");

    // SealDir: a seal replayed after the rmdir gave up (unsealed) must not seal again.
    let d = fx.dir("sd").await;
    let seal = |seal| {
        Request::SealDir(req::SealDir {
            dir: d,
            seal,
            ticket: None,
        })
    };
    at_most_once(
        &fx,
        Row {
            request: seal(true),
            between: Some(seal(false)),
        },
    )
    .await;
    done.push("SealDir");

    // SetParent: a replay must not undo a later move.
    let d = fx.dir("sp").await;
    let p2 = fx.dir("sp-parent").await;
    let set_parent = |parent| {
        Request::SetParent(req::SetParent {
            dir: d,
            parent,
            ticket: None,
        })
    };
    at_most_once(
        &fx,
        Row {
            request: set_parent(p2),
            between: Some(set_parent(root)),
        },
    )
    .await;
    done.push("SetParent");

    // SetDirLayout: a replay must not undo a later change.
    let d = fx.dir("sdl").await;
    let layout = |layout| Request::SetDirLayout(req::SetDirLayout { dir: d, layout });
    at_most_once(
        &fx,
        Row {
            request: layout(Some(LayoutSpec {
                stripe_count: Some(1),
                ..LayoutSpec::default()
            })),
            between: Some(layout(None)),
        },
    )
    .await;
    done.push("SetDirLayout");

    // RemoveObject: a file unlinked while open is removed once (the retry is answered
    // Removed, not ENOENT).
    let f = fx.file("ro").await;
    fx.must(Request::Unlink(req::Unlink {
        dir: root,
        name: "ro".into(),
        expect: Some(f),
        want: UnlinkWant::NotDir,
        fate: LinkDrop::Keep,
    }))
    .await;
    at_most_once(
        &fx,
        Row {
            request: Request::RemoveObject(req::RemoveObject {
                handle: f,
                ticket: None,
            }),
            between: None,
        },
    )
    .await;
    done.push("RemoveObject");

    // Link: one more name and one more link, once (the retry is not EEXIST).
    let f = fx.file("ln").await;
    at_most_once(
        &fx,
        Row {
            request: Request::Link(req::Link {
                dir: root,
                name: "ln2".into(),
                handle: f,
                proof: None,
            }),
            between: None,
        },
    )
    .await;
    assert!(fx.state().contains("nlink 2"), "{}", fx.state());
    done.push("Link");

    // AddLink: counted once.
    let f = fx.file("al").await;
    at_most_once(
        &fx,
        Row {
            request: Request::AddLink(req::AddLink {
                handle: f,
                moving: false,
            }),
            between: None,
        },
    )
    .await;
    let al = fx.state();
    let al = &al[al.find("al=").unwrap()..];
    assert!(
        al.starts_with(&format!("al={f:#x} [mode 755 nlink 3 ")),
        "one run and the control: {al}"
    );
    done.push("AddLink");

    // DropLink: taken once.
    let f = fx.file("dl").await;
    fx.must(Request::Link(req::Link {
        dir: root,
        name: "dl2".into(),
        handle: f,
        proof: None,
    }))
    .await;
    fx.must(Request::Link(req::Link {
        dir: root,
        name: "dl3".into(),
        handle: f,
        proof: None,
    }))
    .await;
    at_most_once(
        &fx,
        Row {
            request: Request::DropLink(req::DropLink {
                handle: f,
                keep: false,
            }),
            between: None,
        },
    )
    .await;
    done.push("DropLink");

    // SetLinks: the retry is answered from the record, not "count changed".
    let f = fx.file("sl").await;
    at_most_once(
        &fx,
        Row {
            request: Request::SetLinks(req::SetLinks {
                handle: f,
                links: 3,
                expect: 1,
            }),
            between: None,
        },
    )
    .await;
    done.push("SetLinks");

    // Precreate: the retry is answered the same range, and reserves none.
    let first = match at_most_once(
        &fx,
        Row {
            request: Request::Precreate(req::Precreate { count: 10 }),
            between: None,
        },
    )
    .await
    {
        Response::Handles { first, count: 10 } => first,
        other => panic!("Precreate: {other:?}"),
    };
    match fx
        .must(Request::Precreate(req::Precreate { count: 1 }))
        .await
    {
        Response::Handles { first: next, .. } => assert_eq!(
            next,
            first + 20,
            "the first run and the negative control reserved, the retry did not"
        ),
        other => panic!("Precreate: {other:?}"),
    }
    done.push("Precreate");

    // SetXattr with XATTR_CREATE: the retry is answered Done (not EEXIST); and the
    // ACL attribute's own path.
    let f = fx.file("sx").await;
    let set = |name: &str, value: Vec<u8>, flags| {
        Request::SetXattr(req::SetXattr {
            handle: f,
            name: name.into(),
            value,
            flags,
        })
    };
    at_most_once(
        &fx,
        Row {
            request: set("user.a", b"1".to_vec(), XATTR_CREATE),
            between: Some(set("user.a", b"2".to_vec(), 0)),
        },
    )
    .await;
    let acl = |perm: u16| {
        let mut v = 2u32.to_le_bytes().to_vec();
        for (tag, p) in [(1u16, 6u16), (4, perm), (32, 4)] {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&p.to_le_bytes());
            v.extend_from_slice(&u32::MAX.to_le_bytes());
        }
        v
    };
    at_most_once(
        &fx,
        Row {
            request: set("system.posix_acl_access", acl(4), XATTR_CREATE),
            between: Some(set("system.posix_acl_access", acl(0), 0)),
        },
    )
    .await;
    done.push("SetXattr");

    // RemoveXattr: the retry is answered Done (not ENODATA).
    let f = fx.file("rx").await;
    fx.must(Request::SetXattr(req::SetXattr {
        handle: f,
        name: "user.b".into(),
        value: b"x".to_vec(),
        flags: 0,
    }))
    .await;
    at_most_once(
        &fx,
        Row {
            request: Request::RemoveXattr(req::RemoveXattr {
                handle: f,
                name: "user.b".into(),
            }),
            between: None,
        },
    )
    .await;
    done.push("RemoveXattr");

    // The table covers every kind that must happen once.
    let once: Vec<&str> = Request::EFFECTS
        .iter()
        .filter(|(_, e)| *e == Effect::Once)
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(
        ids(&done),
        ids(&once),
        "rows against the kinds declared Once"
    );
    fx.s.close().await;
}

/// A mutation commits nothing after its deadline (its client gave that attempt up),
/// so what a client sees once the deadline is past is final; before it, it commits.
#[tokio::test]
async fn a_mutation_commits_nothing_after_its_deadline() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tokio::time::{Duration, Instant};

    async fn attempt(fx: &Fx, deadline: Instant, ran: &Arc<AtomicBool>) -> Result<(), String> {
        let ran = ran.clone();
        let (once, _used) = pvfs_server::once::Once::new(Effect::Once, Some(fx.key()), deadline);
        match once
            .commit(&fx.s.ctx.meta, move |_| {
                ran.store(true, Ordering::SeqCst);
                Ok(Response::Done {})
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.errno == pvfs_proto::Errno::ETIMEDOUT => Err(e.to_string()),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let fx = Fx::open(dir.path()).await;
    let ran = Arc::new(AtomicBool::new(false));
    let late = attempt(&fx, Instant::now() - Duration::from_millis(1), &ran).await;
    assert!(late.is_err(), "a commit after the deadline succeeded");
    assert!(!ran.load(Ordering::SeqCst), "the late mutation ran");
    // Negative control: the same before its deadline commits.
    attempt(&fx, Instant::now() + Duration::from_secs(30), &ran)
        .await
        .expect("a commit before the deadline");
    assert!(
        ran.load(Ordering::SeqCst),
        "the mutation in time did not run"
    );
    fx.s.close().await;
}
