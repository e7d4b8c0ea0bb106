//! Tests of the metadata store: superblock checks, persistence, group-commit atomicity,
//! handle allocation, paging, pools, and a model check of the write overlay.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use pvfs_proto::{Attr, DirEntry, Errno, Handle, ObjDetail, ObjKind, Timespec};
use pvfs_storage::{Identity, MetaError, MetaStore, StorageError, RESERVED_HANDLES};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The change time the tests stamp on entries.
const T0: Timespec = Timespec {
    secs: 1_700_000_000,
    nsecs: 5,
};
const RANGE: (Handle, Handle) = (1 << 32, (2 << 32) - 1);

fn id() -> Identity {
    Identity {
        fsid: 7,
        server: "s1".into(),
    }
}

fn open(dir: &Path) -> MetaStore {
    MetaStore::open(dir, &id(), RANGE).unwrap()
}

fn attr(h: Handle, mode: u32) -> Attr {
    Attr {
        handle: h,
        mode,
        uid: 1,
        gid: 2,
        nlink: 1,
        size: 1,
        atime: Timespec::default(),
        mtime: Timespec { secs: 5, nsecs: 6 },
        ctime: Timespec::default(),
        detail: ObjDetail::Symlink { target: "t".into() },
        blocks: 0,
        acl: None,
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
}

#[test]
fn superblock_refuses_other_fs_server_range_and_format() {
    let d = tempfile::tempdir().unwrap();
    drop(open(d.path()));
    let other_fs = Identity { fsid: 8, ..id() };
    assert!(matches!(
        MetaStore::open(d.path(), &other_fs, RANGE),
        Err(StorageError::WrongFs {
            found: 7,
            expected: 8
        })
    ));
    let other_server = Identity {
        server: "s2".into(),
        ..id()
    };
    assert!(matches!(
        MetaStore::open(d.path(), &other_server, RANGE),
        Err(StorageError::WrongServer { .. })
    ));
    assert!(matches!(
        MetaStore::open(d.path(), &id(), (RANGE.0, RANGE.1 + 1)),
        Err(StorageError::WrongRange { .. })
    ));
    assert!(matches!(
        MetaStore::open(d.path(), &id(), (0, 10)),
        Err(StorageError::Format(_))
    ));
    let sb = open(d.path()).read().unwrap().superblock().unwrap();
    assert_eq!(sb.next_handle, RANGE.0 + RESERVED_HANDLES);
    assert_eq!((sb.fsid, sb.server.as_str(), sb.range), (7, "s1", RANGE));

    // A future format version is refused, not misread.
    let db = redb::Database::create(d.path().join("meta.redb")).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("superblock");
        let mut t = tx.open_table(def).unwrap();
        t.insert(&b"format"[..], &99u32.to_le_bytes()[..]).unwrap();
    }
    tx.commit().unwrap();
    drop(db);
    let err = MetaStore::open(d.path(), &id(), RANGE).err().unwrap();
    assert!(matches!(err, StorageError::Format(_)), "{err}");
}

#[test]
fn corrupt_record_is_an_error_not_a_panic() {
    let d = tempfile::tempdir().unwrap();
    drop(open(d.path()));
    let db = redb::Database::create(d.path().join("meta.redb")).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("objects");
        let mut t = tx.open_table(def).unwrap();
        t.insert(&5u64.to_be_bytes()[..], &[1u8, 2, 3][..]).unwrap();
        let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("entries");
        let mut t = tx.open_table(def).unwrap();
        t.insert(&b"\0\0\0\0\0\0\0\x01x"[..], &[9u8][..]).unwrap();
    }
    tx.commit().unwrap();
    drop(db);
    let r = open(d.path()).read().unwrap();
    assert!(matches!(r.get_object(5), Err(StorageError::Corrupt { .. })));
    assert!(matches!(
        r.get_entry(1, "x"),
        Err(StorageError::Corrupt { .. })
    ));
    assert!(matches!(
        r.list_entries(1, None, 10),
        Err(StorageError::Corrupt { .. })
    ));
    assert_eq!(r.get_object(6).unwrap(), None);
}

#[test]
fn reopen_keeps_data() {
    let d = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let s = open(d.path());
        s.write(|t| {
            t.put_object(&attr(20, 0o644));
            t.put_entry(3, "a", 20, ObjKind::Symlink, T0)?;
            t.set_sealed(3, true);
            t.pool_add(0, 1000, 5);
            Ok(())
        })
        .await
        .unwrap();
        s.close().await;
        let e = s.write(|_| Ok(())).await.unwrap_err();
        assert!(matches!(e, MetaError::Storage(StorageError::Closed)));
        assert_eq!(e.errno(), Errno::EIO);
        assert_eq!(s.read().unwrap().count_objects().unwrap(), 1);
    });
    let r = open(d.path()).read().unwrap();
    assert_eq!(r.get_object(20).unwrap(), Some(attr(20, 0o644)));
    assert_eq!(r.get_entry(3, "a").unwrap(), Some((20, ObjKind::Symlink)));
    assert!(r.is_sealed(3).unwrap() && !r.is_sealed(4).unwrap());
    assert_eq!(r.pool_len(0).unwrap(), 5);
}

#[test]
fn failing_and_panicking_jobs_leave_no_trace_while_neighbours_commit() {
    let d = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let s = open(d.path());
        let (started_tx, started) = std::sync::mpsc::channel();
        let (release, gate) = std::sync::mpsc::channel::<()>();
        // Keeps the writer busy until the following jobs are queued (released by the
        // last future of the join below, polled after each of them has queued its
        // job), so they share one batch.
        let blocker = s.write(move |t| {
            started_tx.send(()).unwrap();
            gate.recv().unwrap();
            t.put_entry(1, "blocker", 10, ObjKind::File, T0)?;
            Ok(())
        });
        let ok_a = s.write(|t| {
            let h = t.alloc_handles(1)?;
            t.put_entry(1, "a", h, ObjKind::File, T0)?;
            Ok(h)
        });
        let fails = s.write(|t| {
            let h = t.alloc_handles(1)?;
            t.put_entry(1, "b", h, ObjKind::File, T0)?;
            t.delete_entry(1, "a", T0)?;
            t.put_object(&attr(h, 0));
            Err::<(), _>(MetaError::new(Errno::EEXIST, "b exists"))
        });
        let panics = s.write(|t| -> Result<(), MetaError> {
            t.put_entry(1, "p", 99, ObjKind::File, T0)?;
            panic!("injected");
        });
        let ok_c = s.write(|t| {
            // Sees the earlier job of the batch, not the failed ones.
            let a = t.get_entry(1, "a")?.map(|e| e.0);
            assert!(t.get_entry(1, "b")?.is_none() && t.get_entry(1, "p")?.is_none());
            let h = t.alloc_handles(1)?;
            t.put_entry(1, "c", h, ObjKind::Dir, T0)?;
            Ok((a, h))
        });
        let (b, a, f, p, c, ()) = tokio::join!(blocker, ok_a, fails, panics, ok_c, async {
            release.send(()).unwrap()
        });
        started.recv().unwrap();
        b.unwrap();
        let a = a.unwrap();
        assert_eq!(f.unwrap_err().errno(), Errno::EEXIST);
        assert_eq!(p.unwrap_err().errno(), Errno::EIO);
        let (seen_a, c) = c.unwrap();
        assert_eq!(seen_a, Some(a));
        assert_eq!(
            c,
            a + 1,
            "the failed job's handle allocation was rolled back"
        );
        let r = s.read().unwrap();
        let names: Vec<String> = r
            .list_entries(1, None, 10)
            .unwrap()
            .0
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["a", "blocker", "c"]);
        assert_eq!(r.count_objects().unwrap(), 0);
        // The writer survived the panic.
        s.write(|t| t.dir_is_empty(2)).await.unwrap();
    });
}

#[test]
fn overlay_respected_by_dir_is_empty_and_seals() {
    let d = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let s = open(d.path());
        s.write(|t| {
            t.put_entry(5, "x", 1, ObjKind::File, T0)?;
            Ok(())
        })
        .await
        .unwrap();
        s.write(|t| {
            assert!(!t.dir_is_empty(5)? && t.dir_is_empty(4)? && t.dir_is_empty(6)?);
            t.delete_entry(5, "x", T0)?;
            assert!(t.dir_is_empty(5)?);
            t.put_entry(5, "y", 2, ObjKind::File, T0)?;
            assert!(!t.dir_is_empty(5)?);
            t.delete_entry(5, "y", T0)?;
            t.set_sealed(5, true);
            assert!(t.is_sealed(5)? && t.dir_is_empty(5)?);
            t.put_entry(u64::MAX, "last", 3, ObjKind::File, T0)?;
            assert!(!t.dir_is_empty(u64::MAX)?);
            Ok(())
        })
        .await
        .unwrap();
        let r = s.read().unwrap();
        assert!(r.dir_is_empty(5).unwrap() && r.is_sealed(5).unwrap());
        assert_eq!(r.list_entries(u64::MAX, None, 5).unwrap().0.len(), 1);
        s.write(|t| {
            t.set_sealed(5, false);
            Ok(())
        })
        .await
        .unwrap();
        assert!(!s.read().unwrap().is_sealed(5).unwrap());
    });
}

#[test]
fn alloc_handles_never_repeats_across_reopen() {
    let d = tempfile::tempdir().unwrap();
    let range = (100, 100 + RESERVED_HANDLES + 9); // 10 allocatable handles
    let mut seen = BTreeSet::new();
    for round in 0..2 {
        rt().block_on(async {
            let s = MetaStore::open(d.path(), &id(), range).unwrap();
            for _ in 0..2 {
                let h = s.write(|t| t.alloc_handles(2)).await.unwrap();
                assert!(h >= range.0 + RESERVED_HANDLES && h < range.1);
                assert!(seen.insert(h) && seen.insert(h + 1), "{h} reused");
            }
            if round == 1 {
                let e = s.write(|t| t.alloc_handles(3)).await.unwrap_err();
                assert_eq!(e.errno(), Errno::ENOSPC);
                assert_eq!(s.write(|t| t.alloc_handles(2)).await.unwrap(), range.1 - 1);
                let e = s.write(|t| t.alloc_handles(1)).await.unwrap_err();
                assert_eq!(e.errno(), Errno::ENOSPC);
            }
            s.close().await;
        });
    }
    // A range reaching u64::MAX is allowed and runs out cleanly.
    let d = tempfile::tempdir().unwrap();
    let top = (u64::MAX - RESERVED_HANDLES - 2, u64::MAX);
    rt().block_on(async {
        let s = MetaStore::open(d.path(), &id(), top).unwrap();
        assert_eq!(s.write(|t| t.alloc_handles(3)).await.unwrap(), u64::MAX - 2);
        let e = s.write(|t| t.alloc_handles(1)).await.unwrap_err();
        assert_eq!(e.errno(), Errno::ENOSPC);
        assert_eq!(s.read().unwrap().superblock().unwrap().next_handle, 0);
    });
}

#[test]
fn list_entries_pages_through_10k_entries() {
    let d = tempfile::tempdir().unwrap();
    let s = open(d.path());
    let mut want: Vec<String> = (0..10_000).map(|i| format!("f{i}")).collect();
    rt().block_on(async {
        for chunk in want.chunks(2500) {
            let names = chunk.to_vec();
            s.write(move |t| {
                for (i, n) in names.iter().enumerate() {
                    t.put_entry(42, n, i as u64 + 1, ObjKind::File, T0)?;
                }
                // Neighbouring directories must not leak into the listing.
                t.put_entry(41, "zzz", 1, ObjKind::File, T0)?;
                t.put_entry(43, "", 1, ObjKind::File, T0)?;
                Ok(())
            })
            .await
            .unwrap();
        }
    });
    want.sort();
    let r = s.read().unwrap();
    let (mut got, mut after) = (Vec::new(), None::<String>);
    loop {
        let (page, more) = r.list_entries(42, after.as_deref(), 333).unwrap();
        assert!(page.len() == 333 || !more);
        got.extend(page.into_iter().map(|e| e.name));
        after = got.last().cloned();
        if !more {
            break;
        }
    }
    assert_eq!(got, want);
    assert_eq!(
        r.list_entries(42, Some("f9999"), 10).unwrap(),
        (vec![], false)
    );
    // The fsck scan sees everything, in key order.
    let all = r.entries_after(None, 20_000).unwrap();
    assert_eq!(all.len(), 10_002);
    assert_eq!(all[0].0, 41);
    let tail = r.entries_after(Some((42, "f9999")), 10).unwrap();
    assert_eq!(
        tail,
        [(
            43,
            DirEntry {
                name: String::new(),
                handle: 1,
                kind: ObjKind::File
            }
        )]
    );
}

#[test]
fn pool_add_and_take() {
    let d = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let s = open(d.path());
        s.write(|t| {
            t.pool_add(1, 2000, 5);
            t.pool_add(1, 1000, 10);
            t.pool_add(2, 3000, 7);
            t.pool_add(u32::MAX, 9, 1);
            Ok(())
        })
        .await
        .unwrap();
        let took = s.write(|t| t.pool_take(1, 12)).await.unwrap();
        let want: Vec<Handle> = (1000..1010).chain([2000, 2001]).collect();
        assert_eq!(took, want);
        let (took, left) = s
            .write(|t| Ok((t.pool_take(1, 10)?, t.pool_len(1)?)))
            .await
            .unwrap();
        assert_eq!((took, left), (vec![2002, 2003, 2004], 0));
        let r = s.read().unwrap();
        assert_eq!(r.pool_ranges(2).unwrap(), [(3000, 7)]);
        assert_eq!(
            (r.pool_len(1).unwrap(), r.pool_len(u32::MAX).unwrap()),
            (0, 1)
        );
    });
}

/// A model of the tables one mutation touches.
#[derive(Clone, Debug, Default)]
struct Model {
    entries: BTreeMap<(Handle, String), Handle>,
    objects: BTreeMap<Handle, u32>,
    seals: BTreeSet<Handle>,
}

#[derive(Clone, Debug)]
enum Op {
    PutEntry(Handle, String, Handle),
    DelEntry(Handle, String),
    GetEntry(Handle, String),
    IsEmpty(Handle),
    List(Handle, Option<String>, usize),
    PutObj(Handle, u32),
    DelObj(Handle),
    GetObj(Handle),
    Seal(Handle, bool),
}

fn op() -> impl Strategy<Value = Op> {
    let dir = 1u64..4;
    let name = "[a-d]{0,2}";
    prop_oneof![
        (dir.clone(), name, 1u64..100).prop_map(|(d, n, h)| Op::PutEntry(d, n, h)),
        (dir.clone(), name).prop_map(|(d, n)| Op::DelEntry(d, n)),
        (dir.clone(), name).prop_map(|(d, n)| Op::GetEntry(d, n)),
        dir.clone().prop_map(Op::IsEmpty),
        (dir.clone(), proptest::option::of(name), 0usize..5)
            .prop_map(|(d, a, m)| Op::List(d, a, m)),
        (10u64..14, 0u32..8).prop_map(|(h, m)| Op::PutObj(h, m)),
        (10u64..14).prop_map(Op::DelObj),
        (10u64..14).prop_map(Op::GetObj),
        (dir, any::<bool>()).prop_map(|(d, s)| Op::Seal(d, s)),
    ]
}

/// Applies `op` to the transaction and the model; an error if a read disagrees.
fn step(t: &mut pvfs_storage::MetaTxn<'_>, m: &mut Model, op: &Op) -> Result<(), MetaError> {
    let diff = |what: String| Err(MetaError::new(Errno::EBADMSG, what));
    match op {
        Op::PutEntry(d, n, h) => {
            t.put_entry(*d, n, *h, ObjKind::File, T0)?;
            m.entries.insert((*d, n.clone()), *h);
        }
        Op::DelEntry(d, n) => {
            t.delete_entry(*d, n, T0)?;
            m.entries.remove(&(*d, n.clone()));
        }
        Op::GetEntry(d, n) => {
            let got = t.get_entry(*d, n)?.map(|e| e.0);
            if got != m.entries.get(&(*d, n.clone())).copied() {
                return diff(format!("{op:?} got {got:?}"));
            }
        }
        Op::IsEmpty(d) => {
            let want = !m.entries.keys().any(|k| k.0 == *d);
            if t.dir_is_empty(*d)? != want {
                return diff(format!("{op:?}"));
            }
        }
        Op::List(d, after, max) => {
            let all: Vec<String> = m
                .entries
                .keys()
                .filter(|k| k.0 == *d && after.as_ref().is_none_or(|a| k.1 > *a))
                .map(|k| k.1.clone())
                .collect();
            let (page, more) = t.list_entries(*d, after.as_deref(), *max)?;
            let page: Vec<String> = page.into_iter().map(|e| e.name).collect();
            if page[..] != all[..all.len().min(*max)] || more != (all.len() > *max) {
                return diff(format!("{op:?} got {page:?} {more}"));
            }
        }
        Op::PutObj(h, mode) => {
            t.put_object(&attr(*h, *mode));
            m.objects.insert(*h, *mode);
        }
        Op::DelObj(h) => {
            t.delete_object(*h);
            m.objects.remove(h);
        }
        Op::GetObj(h) => {
            let got = t.get_object(*h)?.map(|a| a.mode);
            if got != m.objects.get(h).copied() {
                return diff(format!("{op:?} got {got:?}"));
            }
        }
        Op::Seal(d, s) => {
            t.set_sealed(*d, *s);
            if *s {
                m.seals.insert(*d);
            } else {
                m.seals.remove(d);
            }
            if t.is_sealed(*d)? != *s {
                return diff(format!("{op:?}"));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn overlay_matches_model(jobs in proptest::collection::vec(
        (proptest::collection::vec(op(), 0..12), any::<bool>()), 1..10)) {
        let d = tempfile::tempdir().unwrap();
        let model = Arc::new(Mutex::new(Model::default()));
        let s = open(d.path());
        rt().block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for (ops, fail) in jobs {
                let (s, model) = (s.clone(), model.clone());
                set.spawn(async move {
                    s.write(move |t| {
                        // The writer runs jobs one at a time, in commit order.
                        let mut m = model.lock().unwrap().clone();
                        for op in &ops {
                            step(t, &mut m, op)?;
                        }
                        if fail {
                            return Err(MetaError::new(Errno::EPERM, "rolled back"));
                        }
                        *model.lock().unwrap() = m;
                        Ok(())
                    })
                    .await
                });
            }
            while let Some(r) = set.join_next().await {
                if let Err(e) = r.unwrap() {
                    assert_eq!(e.errno(), Errno::EPERM, "{e}");
                }
            }
        });
        let m = model.lock().unwrap().clone();
        let r = s.read().unwrap();
        let entries: BTreeMap<(Handle, String), Handle> = r.entries_after(None, 1000).unwrap()
            .into_iter().map(|(d, e)| ((d, e.name), e.handle)).collect();
        prop_assert_eq!(entries, m.entries);
        let objects: BTreeMap<Handle, u32> = r.objects_after(None, 1000).unwrap()
            .into_iter().map(|a| (a.handle, a.mode)).collect();
        prop_assert_eq!(objects, m.objects);
        for dir in 1..4 {
            prop_assert_eq!(r.is_sealed(dir).unwrap(), m.seals.contains(&dir));
        }
    }
}

/// Durable creates/s with one writer vs 64 concurrent writers (run with
/// `cargo test -p pvfs-storage --release -- --ignored --nocapture throughput`).
#[test]
#[ignore]
fn throughput() {
    let d = tempfile::tempdir().unwrap();
    let s = open(d.path());
    let create = |s: MetaStore, dir: Handle, i: usize| async move {
        s.write(move |t| {
            let h = t.alloc_handles(1)?;
            let name = format!("file{i}");
            if t.get_entry(dir, &name)?.is_some() {
                return Err(Errno::EEXIST.into());
            }
            t.put_object(&attr(h, 0o644));
            t.put_entry(dir, &name, h, ObjKind::File, T0)?;
            Ok(())
        })
        .await
        .unwrap()
    };
    rt().block_on(async {
        let n = 2000;
        let t0 = std::time::Instant::now();
        for i in 0..n {
            create(s.clone(), 1, i).await;
        }
        let single = n as f64 / t0.elapsed().as_secs_f64();

        let (tasks, per) = (64, 500);
        let t0 = std::time::Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for w in 0..tasks {
            let s = s.clone();
            set.spawn(async move {
                for i in 0..per {
                    create(s.clone(), 2, w * per + i).await;
                }
            });
        }
        while set.join_next().await.is_some() {}
        let batched = (tasks * per) as f64 / t0.elapsed().as_secs_f64();
        println!("creates/s: 1 writer {single:.0}, {tasks} concurrent writers {batched:.0}");
        // Every create of the measurement landed.
        let objects = s.read().unwrap().count_objects().unwrap();
        assert_eq!(objects, (n + tasks * per) as u64, "objects after the run");
    });
}

#[test]
fn handles_are_shareable() {
    fn send_sync<T: Send + Sync + Clone>() {}
    send_sync::<MetaStore>();
    send_sync::<MetaError>();
}

#[test]
fn shard_records_follow_entry_changes_in_the_same_commit() {
    let d = tempfile::tempdir().unwrap();
    let t1 = Timespec {
        secs: T0.secs + 1,
        nsecs: 0,
    };
    let t2 = Timespec {
        secs: T0.secs + 2,
        nsecs: 7,
    };
    rt().block_on(async {
        let s = open(d.path());
        assert_eq!(s.read().unwrap().shard_stat(1).unwrap(), Default::default());
        s.write(|t| {
            t.put_entry(1, "d1", 10, ObjKind::Dir, T0)?;
            t.put_entry(1, "d2", 11, ObjKind::Dir, T0)?;
            t.put_entry(1, "f", 12, ObjKind::File, T0)?;
            t.put_entry(2, "d", 13, ObjKind::Dir, T0)?;
            Ok(())
        })
        .await
        .unwrap();
        let st = s.read().unwrap().shard_stat(1).unwrap();
        assert_eq!((st.changed, st.subdirs), (T0, 2));
        // Replacing a directory entry by a file, removing one, and a removal of a
        // name that is not there (no change at all).
        s.write(move |t| {
            t.put_entry(1, "d1", 14, ObjKind::File, t1)?;
            assert_eq!(t.delete_entry(1, "f", t2)?, Some((12, ObjKind::File)));
            assert_eq!(t.delete_entry(1, "nothing", Timespec::default())?, None);
            Ok(())
        })
        .await
        .unwrap();
        let r = s.read().unwrap();
        let st = r.shard_stat(1).unwrap();
        assert_eq!((st.changed, st.subdirs), (t2, 1));
        assert_eq!(r.shard_stat(2).unwrap().subdirs, 1);
        // A failed mutation changes no record.
        let failed = s
            .write(move |t| {
                t.delete_entry(1, "d2", t2)?;
                Err::<(), _>(MetaError::new(Errno::EIO, "injected"))
            })
            .await;
        assert!(failed.is_err());
        assert_eq!(s.read().unwrap().shard_stat(1).unwrap().subdirs, 1);
    });
}

#[test]
fn a_format_1_store_is_upgraded_with_its_subdirectories_counted() {
    let d = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let s = open(d.path());
        s.write(|t| {
            t.put_entry(1, "a", 10, ObjKind::Dir, T0)?;
            t.put_entry(1, "b", 11, ObjKind::Dir, T0)?;
            t.put_entry(1, "c", 12, ObjKind::File, T0)?;
            t.put_entry(3, "x", 13, ObjKind::File, T0)?;
            Ok(())
        })
        .await
        .unwrap();
        s.close().await;
    });
    // Make it what a format 1 build wrote: no shard records.
    let db = redb::Database::create(d.path().join("meta.redb")).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("superblock");
        let mut t = tx.open_table(def).unwrap();
        t.insert(&b"format"[..], &1u32.to_le_bytes()[..]).unwrap();
        let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("shards");
        assert!(tx.delete_table(def).unwrap());
    }
    tx.commit().unwrap();
    drop(db);
    let r = open(d.path()).read().unwrap();
    assert_eq!(r.superblock().unwrap().format, pvfs_storage::FORMAT_VERSION);
    let st = r.shard_stat(1).unwrap();
    assert_eq!((st.changed, st.subdirs), (Timespec::default(), 2));
    assert_eq!(r.shard_stat(3).unwrap().subdirs, 0);
    assert_eq!(r.get_entry(1, "c").unwrap(), Some((12, ObjKind::File)));
}

#[test]
fn a_format_2_store_is_upgraded_with_its_files_at_zero_links_kept() {
    let d = tempfile::tempdir().unwrap();
    let (named, unlinked, dir) = (RANGE.0 + 20, RANGE.0 + 21, RANGE.0 + 22);
    rt().block_on(async {
        let s = open(d.path());
        s.write(move |t| {
            t.put_object(&attr(named, 0o644));
            t.put_object(&Attr {
                nlink: 0,
                ..attr(unlinked, 0o644)
            });
            t.put_object(&Attr {
                nlink: 0,
                detail: ObjDetail::Dir {
                    parent: 1,
                    shards: 1,
                    default_layout: None,
                    mtime_set: Timespec::default(),
                },
                ..attr(dir, 0o755)
            });
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(
            s.read().unwrap().kept_after(None, 10).unwrap(),
            Vec::<Handle>::new()
        );
        s.close().await;
    });
    // Make it what a format 2 build wrote: no `kept` table.
    let db = redb::Database::create(d.path().join("meta.redb")).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("superblock");
        let mut t = tx.open_table(def).unwrap();
        t.insert(&b"format"[..], &2u32.to_le_bytes()[..]).unwrap();
        let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("kept");
        assert!(tx.delete_table(def).unwrap());
    }
    tx.commit().unwrap();
    drop(db);
    let s = open(d.path());
    let r = s.read().unwrap();
    assert_eq!(r.superblock().unwrap().format, pvfs_storage::FORMAT_VERSION);
    assert_eq!(r.kept_after(None, 10).unwrap(), vec![unlinked]);
    drop(r);
    // Deleting the object forgets it as kept.
    rt().block_on(async {
        s.write(move |t| {
            t.delete_object(unlinked);
            Ok(())
        })
        .await
        .unwrap();
    });
    assert!(s.read().unwrap().kept_after(None, 10).unwrap().is_empty());
}

#[test]
fn object_records_of_version_1_read_without_acls_and_new_ones_keep_them() {
    let d = tempfile::tempdir().unwrap();
    let with_acl = Attr {
        acl: Some(Box::new(pvfs_proto::acl::Acl {
            access: Vec::new(),
            default: pvfs_proto::acl::from_mode(0o750),
        })),
        ..attr(RANGE.0 + 100, 0o755)
    };
    rt().block_on(async {
        let s = open(d.path());
        let a = with_acl.clone();
        s.write(move |t| {
            t.put_object(&a);
            Ok(())
        })
        .await
        .unwrap();
        s.close().await;
    });
    // A record as a build without ACLs wrote it: version 1, no trailing field.
    let old = attr(RANGE.0 + 101, 0o644);
    let mut record = vec![1u8];
    let body = pvfs_proto::encode(&old);
    record.extend_from_slice(&body[..body.len() - 1]);
    let db = redb::Database::create(d.path().join("meta.redb")).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("objects");
        let mut t = tx.open_table(def).unwrap();
        t.insert(&old.handle.to_be_bytes()[..], record.as_slice())
            .unwrap();
    }
    tx.commit().unwrap();
    drop(db);
    let r = open(d.path()).read().unwrap();
    assert_eq!(r.get_object(old.handle).unwrap(), Some(old));
    assert_eq!(r.get_object(with_acl.handle).unwrap(), Some(with_acl));
}

#[test]
fn a_released_store_opens_again_while_a_clone_lives_on() {
    // A standby that stops serving a group's copy and serves it again opens the
    // copy anew while connections opened for the group may still hold the old
    // store: closed, the old store keeps the database open (its reads go on) and
    // the second open is refused; released, it lets go, and the open succeeds.
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let store = open(dir.path());
        let held = store.clone();
        store.close().await;
        assert!(held.read().is_ok(), "a closed store still reads");
        let again = MetaStore::open(dir.path(), &id(), RANGE);
        assert!(
            again.is_err(),
            "opened twice in one process while a clone holds it"
        );
        store.release().await;
        assert!(matches!(held.read(), Err(StorageError::Closed)));
        let again = MetaStore::open(dir.path(), &id(), RANGE).unwrap();
        assert!(again.read().is_ok());
        again.close().await;
    });
}
