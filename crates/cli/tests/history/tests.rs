//! The checker on hand-made histories: correct ones pass, and each kind of violation
//! the storm must catch fails (the negative controls of the storm's check).

use super::*;

const MS: Nanos = 1_000_000;
const LATE: Nanos = 1_000 * MS;

/// Top directories /a and /b, subdirectory /a/s; names f0..f2 and s. Two shards:
/// f0 and f2 in shard 0, f1 and s in shard 1.
fn universe() -> Universe {
    let dirs = vec![
        DirSpec {
            path: "/a".into(),
            entry: None,
        },
        DirSpec {
            path: "/b".into(),
            entry: None,
        },
        DirSpec {
            path: "/a/s".into(),
            entry: Some(Slot { dir: 0, name: 3 }),
        },
    ];
    let names = ["f0", "f1", "f2", "s"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    Universe::new(dirs, names, 2, |n, _| match n {
        "f0" | "f2" => 0,
        _ => 1,
    })
}

/// A snapshot's entries of one directory: (name, handle, content); a handle of 0 is a
/// directory.
type Listed<'a> = &'a [(&'a str, u64, ReadObs)];

/// A history under construction.
struct H {
    u: Universe,
    ops: Vec<Op>,
}

impl H {
    fn new() -> H {
        H {
            u: universe(),
            ops: Vec::new(),
        }
    }

    fn slot(&self, path: &str) -> Slot {
        let (dir, name) = path.rsplit_once('/').unwrap();
        Slot {
            dir: self.u.dir(dir).unwrap(),
            name: self.u.name(name).unwrap(),
        }
    }

    /// Adds an operation of `client` over `[start, end]` ms that succeeded.
    fn op(&mut self, client: usize, (start, end): (u64, u64), call: Call) -> &mut Op {
        let mut op = Op::new(client, call, start * MS);
        op.end = end * MS;
        op.main = Res::Ok;
        if matches!(
            op.call,
            Call::Create { write: Some(_), .. } | Call::Write { .. } | Call::Read { .. }
        ) {
            op.data = Res::Ok;
        }
        if matches!(op.call, Call::Rename { .. }) {
            op.moves = 1;
        }
        self.ops.push(op);
        self.ops.last_mut().unwrap()
    }

    fn create(&mut self, client: usize, t: (u64, u64), path: &str, v: u32) -> &mut Op {
        let at = self.slot(path);
        self.op(
            client,
            t,
            Call::Create {
                at,
                write: Some(Version { id: v, len: 100 }),
            },
        )
    }

    /// A create of `path` by client 0 over [0, 10] ms whose write of `v` was cut
    /// short (its outcome unknown).
    fn create_cut_short(&mut self, path: &str, v: Version) {
        let at = self.slot(path);
        let c = self.op(0, (0, 10), Call::Create { at, write: Some(v) });
        c.data = Res::Unknown;
    }

    fn write(&mut self, client: usize, t: (u64, u64), path: &str, v: u32) -> &mut Op {
        let at = self.slot(path);
        self.op(
            client,
            t,
            Call::Write {
                at,
                version: Version { id: v, len: 100 },
            },
        )
    }

    fn read(&mut self, client: usize, t: (u64, u64), path: &str, seen: ReadObs) -> &mut Op {
        let at = self.slot(path);
        let op = self.op(client, t, Call::Read { at });
        op.seen = Seen::Read(seen);
        op
    }

    fn rename(&mut self, client: usize, t: (u64, u64), from: &str, to: &str) -> &mut Op {
        let (from, to) = (self.slot(from), self.slot(to));
        self.op(client, t, Call::Rename { from, to })
    }

    fn link(&mut self, client: usize, t: (u64, u64), from: &str, to: &str) -> &mut Op {
        let (from, to) = (self.slot(from), self.slot(to));
        self.op(client, t, Call::Link { from, to })
    }

    fn unlink(&mut self, client: usize, t: (u64, u64), path: &str) -> &mut Op {
        let at = self.slot(path);
        self.op(client, t, Call::Unlink { at })
    }

    fn readdir(&mut self, client: usize, t: (u64, u64), dir: &str, names: &[&str]) -> &mut Op {
        let d = self.u.dir(dir).unwrap();
        let listed = names
            .iter()
            .map(|n| match n.strip_suffix('/') {
                Some(n) => (self.u.name(n).unwrap(), Kind::Dir),
                None => (self.u.name(n).unwrap(), Kind::File),
            })
            .collect();
        let op = self.op(client, t, Call::Readdir { dir: d });
        op.seen = Seen::Listing(listed);
        op
    }

    /// A snapshot: per directory, (name, handle, content); a handle of 0 is a directory.
    fn snapshot(&mut self, t: (u64, u64), dirs: &[(&str, Listed<'_>)]) -> &mut Op {
        let snap = Snap {
            dirs: dirs
                .iter()
                .map(|(d, entries)| SnapDir {
                    dir: self.u.dir(d).unwrap(),
                    entries: entries
                        .iter()
                        .map(|(n, h, r)| SnapEntry {
                            name: self.u.name(n).unwrap(),
                            kind: if *h == 0 { Kind::Dir } else { Kind::File },
                            handle: *h,
                            nlink: 1,
                            data: (*h != 0).then(|| r.clone()),
                        })
                        .collect(),
                })
                .collect(),
            errors: Vec::new(),
        };
        // Link counts: the names sharing the handle.
        let mut snap = snap;
        let handles: Vec<u64> = snap
            .dirs
            .iter()
            .flat_map(|d| d.entries.iter().map(|e| e.handle))
            .collect();
        for e in snap.dirs.iter_mut().flat_map(|d| d.entries.iter_mut()) {
            e.nlink = handles.iter().filter(|&&h| h == e.handle).count() as u32;
        }
        let op = self.op(usize::MAX, t, Call::Snapshot);
        op.seen = Seen::Snapshot(snap);
        op
    }

    fn check(&self) -> Result<Verdict, String> {
        check(&self.u, &self.ops, LATE, DEFAULT_BUDGET)
    }

    #[track_caller]
    fn passes(&self) {
        if let Err(report) = self.check() {
            panic!("a correct history failed the check:\n{report}");
        }
    }

    /// Passes when `fine`, fails otherwise.
    #[track_caller]
    fn holds(&self, fine: bool) {
        if fine {
            self.passes();
        } else {
            self.fails();
        }
    }

    #[track_caller]
    fn fails(&self) -> String {
        match self.check() {
            Ok(v) => panic!("a wrong history passed the check ({v:?})"),
            Err(report) => report,
        }
    }
}

fn v(id: u32) -> ReadObs {
    ReadObs::Exact(id)
}

#[test]
fn a_correct_sequential_history_passes() {
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.read(0, (2, 3), "/a/f0", v(1));
    h.rename(0, (4, 5), "/a/f0", "/b/f1");
    h.read(0, (6, 7), "/b/f1", v(1));
    h.readdir(0, (8, 9), "/a", &[]);
    h.readdir(0, (8, 9), "/b", &["f1"]);
    h.unlink(0, (10, 11), "/b/f1");
    h.readdir(0, (12, 13), "/b", &[]);
    h.passes();
}

#[test]
fn a_rename_that_loses_the_file_fails() {
    // Acknowledged: the file must be under the new name.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.rename(0, (2, 3), "/a/f0", "/b/f1").two_step = true;
    h.snapshot((10, 11), &[("/a", &[]), ("/b", &[])]);
    let report = h.fails();
    assert!(report.contains("rename /a/f0 -> /b/f1"), "{report}");

    // Failed with the outcome unknown (the old storm then accepted anything): still
    // under one name or both, never under none.
    for two_step in [false, true] {
        let mut h = H::new();
        h.create(0, (0, 1), "/a/f0", 1);
        let r = h.rename(0, (2, 3), "/a/f0", "/b/f1");
        r.main = Res::Unknown;
        r.two_step = two_step;
        h.snapshot((10, 11), &[("/a", &[]), ("/b", &[])]);
        h.fails();
    }
}

#[test]
fn an_interrupted_rename_may_leave_either_name_or_in_two_steps_both() {
    let outcomes: [(Listed<'_>, Listed<'_>, bool, bool); 5] = [
        (&[("f0", 7, v(1))], &[], false, true),
        (&[], &[("f1", 7, v(1))], false, true),
        (&[("f0", 7, v(1))], &[("f1", 7, v(1))], true, true),
        // Both names in one step: impossible.
        (&[("f0", 7, v(1))], &[("f1", 7, v(1))], false, false),
        // Both names, but two files: impossible.
        (&[("f0", 7, v(1))], &[("f1", 8, v(1))], true, false),
    ];
    for (a, b, two_step, fine) in outcomes {
        let mut h = H::new();
        h.create(0, (0, 1), "/a/f0", 1);
        let r = h.rename(0, (2, 3), "/a/f0", "/b/f1");
        r.main = Res::Unknown;
        r.two_step = two_step;
        h.snapshot((10, 11), &[("/a", a), ("/b", b)]);
        h.holds(fine);
    }
}

#[test]
fn a_duplicated_create_fails() {
    // Two clients at once, both told they made it.
    let mut h = H::new();
    h.create(0, (0, 10), "/a/f0", 1);
    h.create(1, (2, 12), "/a/f0", 2);
    h.fails();
    // One after the other with nothing removing it.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.create(1, (2, 3), "/a/f0", 2);
    h.fails();
    // With an unlink between: fine.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.unlink(1, (2, 3), "/a/f0");
    h.create(1, (4, 5), "/a/f0", 2);
    h.passes();
    // The second refused with EEXIST: fine; refused while nothing was there: not.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.create(1, (2, 3), "/a/f0", 2).main = Res::Refused(Refusal::Exists);
    h.passes();
    let mut h = H::new();
    h.create(1, (2, 3), "/a/f0", 2).main = Res::Refused(Refusal::Exists);
    h.fails();
}

#[test]
fn a_stale_read_fails() {
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.write(0, (2, 3), "/a/f0", 2);
    h.read(1, (4, 5), "/a/f0", v(1));
    h.fails();
    // Concurrent with the write, either value.
    for seen in [1, 2] {
        let mut h = H::new();
        h.create(0, (0, 1), "/a/f0", 1);
        h.write(0, (2, 10), "/a/f0", 2);
        h.read(1, (4, 5), "/a/f0", v(seen));
        h.passes();
    }
    // But once a reader saw the new value, a later one may not see the old.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.write(0, (2, 20), "/a/f0", 2);
    h.read(1, (4, 5), "/a/f0", v(2));
    h.read(2, (6, 7), "/a/f0", v(1));
    h.fails();
}

#[test]
fn a_read_of_a_value_never_written_fails() {
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.read(1, (2, 3), "/a/f0", v(99));
    h.fails();
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.read(1, (2, 3), "/a/f0", ReadObs::Other(vec![0xab; 100]));
    h.fails();
    // Another file's value.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.create(0, (2, 3), "/a/f1", 2);
    h.read(1, (4, 5), "/a/f0", v(2));
    h.fails();
}

#[test]
fn an_indeterminate_create_may_or_may_not_have_happened() {
    for seen in [&["f0"][..], &[]] {
        let mut h = H::new();
        h.create(0, (0, 10), "/a/f0", 1).main = Res::Unknown;
        h.readdir(1, (20, 21), "/a", seen);
        h.readdir(1, (22, 23), "/a", seen);
        h.passes();
    }
    // Seen, then gone with nothing removing it: not.
    let mut h = H::new();
    h.create(0, (0, 10), "/a/f0", 1).main = Res::Unknown;
    h.readdir(1, (20, 21), "/a", &["f0"]);
    h.readdir(1, (22, 23), "/a", &[]);
    h.fails();
    // After a timeout its effect may come a little after its end (a request still
    // queued at a live server), but not past the grace; after a broken connection,
    // not after its end.
    for (late, first, second, fine) in [
        (true, 20, 500, true),
        (true, 2000, 5000, false),
        (false, 20, 500, false),
    ] {
        let mut h = H::new();
        let c = h.create(0, (0, 10), "/a/f0", 1);
        c.main = Res::Unknown;
        c.late = late;
        h.readdir(1, (first, first + 1), "/a", &[]);
        h.readdir(1, (second, second + 1), "/a", &["f0"]);
        h.holds(fine);
    }
    // A part that sent nothing did not happen.
    let mut h = H::new();
    h.create(0, (0, 10), "/a/f0", 1).main = Res::NotSent;
    h.readdir(1, (20, 21), "/a", &["f0"]);
    h.fails();
    // Its write may have been lost with it; the file read empty then.
    let mut h = H::new();
    let c = h.create(0, (0, 10), "/a/f0", 1);
    c.data = Res::Unknown;
    h.read(1, (20, 21), "/a/f0", ReadObs::Empty);
    h.passes();
}

#[test]
fn a_reader_may_see_a_rename_in_two_steps_half_done_but_not_one_in_one_step() {
    for two_step in [true, false] {
        let mut h = H::new();
        h.create(0, (0, 1), "/a/f0", 1);
        h.rename(0, (10, 50), "/a/f0", "/b/f1").two_step = two_step;
        h.read(1, (20, 25), "/b/f1", v(1));
        h.read(1, (30, 35), "/a/f0", v(1));
        if two_step {
            h.passes();
        } else {
            h.fails();
        }
    }
    // Even in two steps, the old name cannot come back once gone.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.rename(0, (10, 50), "/a/f0", "/b/f1").two_step = true;
    h.readdir(1, (20, 25), "/a", &[]);
    h.read(1, (30, 35), "/a/f0", v(1));
    h.fails();
}

#[test]
fn a_listing_reads_each_shard_at_its_own_moment() {
    // f0 (shard 0) goes and f1 (shard 1) comes during the listing: seeing neither is
    // what a listing of shard 0 after the unlink and of shard 1 before the create sees.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.readdir(1, (10, 50), "/a", &[]);
    h.create(0, (20, 25), "/a/f1", 2);
    h.unlink(0, (30, 35), "/a/f0");
    h.passes();
    // The same with both names in one shard (f0, f2) cannot happen.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.readdir(1, (10, 50), "/a", &[]);
    h.create(0, (20, 25), "/a/f2", 2);
    h.unlink(0, (30, 35), "/a/f0");
    h.fails();
}

#[test]
fn an_rmdir_refuses_new_entries_only_while_it_runs_or_if_it_was_cut_short() {
    let build = |rmdir: Option<Res>| {
        let mut h = H::new();
        let s = h.slot("/a/s");
        h.op(0, (0, 1), Call::Mkdir { at: s });
        h.create(0, (2, 3), "/a/s/f0", 1);
        if let Some(res) = rmdir {
            h.op(0, (10, 50), Call::Rmdir { at: s }).main = res;
        }
        h.create(1, (20, 30), "/a/s/f1", 2).main = Res::Refused(Refusal::NoEntry);
        h.readdir(1, (60, 61), "/a", &["s/"]);
        h
    };
    build(Some(Res::Refused(Refusal::NotEmpty))).passes();
    build(Some(Res::Unknown)).passes();
    build(None).fails();
    // An rmdir that succeeded on a directory that was not empty: not.
    let mut h = H::new();
    let s = h.slot("/a/s");
    h.op(0, (0, 1), Call::Mkdir { at: s });
    h.create(0, (2, 3), "/a/s/f0", 1);
    h.op(0, (10, 50), Call::Rmdir { at: s });
    h.fails();
}

#[test]
fn hard_links_are_one_file() {
    let build = |h1: u64, h2: u64| {
        let mut h = H::new();
        h.create(0, (0, 1), "/a/f0", 1);
        h.link(0, (2, 3), "/a/f0", "/b/f1");
        h.write(1, (4, 5), "/b/f1", 2);
        h.snapshot(
            (10, 11),
            &[("/a", &[("f0", h1, v(2))]), ("/b", &[("f1", h2, v(2))])],
        );
        h
    };
    build(7, 7).passes();
    build(7, 8).fails();
    // Two files created apart cannot share a handle.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.create(0, (2, 3), "/b/f1", 1);
    h.snapshot(
        (10, 11),
        &[("/a", &[("f0", 7, v(1))]), ("/b", &[("f1", 7, v(1))])],
    );
    h.fails();
}

#[test]
fn a_write_cut_short_may_have_landed_in_part_only_when_it_spans_datafiles() {
    let big = Version {
        id: 5,
        len: 200_000,
    };
    let mut part = big.content();
    part[70_000..140_000].fill(0);
    let mut garbage = part.clone();
    garbage[150_000] ^= 0xff;
    for (len, seen, fine) in [
        (big.len, ReadObs::Other(part.clone()), true),
        (big.len, ReadObs::Empty, true),
        (big.len, ReadObs::Exact(5), true),
        (big.len, ReadObs::Other(garbage), false),
        (
            100,
            ReadObs::Other(Version { id: 5, len: 100 }.content()[..50].to_vec()),
            false,
        ),
    ] {
        let mut h = H::new();
        h.create_cut_short("/a/f0", Version { id: 5, len });
        h.snapshot((20, 21), &[("/a", &[("f0", 7, seen)]), ("/b", &[])]);
        h.holds(fine);
    }
}

#[test]
fn a_name_unlinked_stays_gone() {
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.unlink(0, (2, 3), "/a/f0");
    h.read(1, (4, 5), "/a/f0", v(1));
    h.fails();
    // A refusal of the read is right.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.unlink(0, (2, 3), "/a/f0");
    h.read(1, (4, 5), "/a/f0", v(1)).main = Res::Refused(Refusal::NoEntry);
    h.passes();
}

#[test]
fn content_round_trips_and_tells_versions_apart() {
    for len in [16, 100, 4096, 70_001] {
        let c = Version { id: 42, len }.content();
        assert_eq!(c.len(), len as usize);
        assert_eq!(ReadObs::of(&c), ReadObs::Exact(42));
        let mut torn = c.clone();
        let last = torn.len() - 1;
        torn[last] ^= 1;
        assert!(matches!(ReadObs::of(&torn), ReadObs::Other(_)));
        assert!(matches!(ReadObs::of(&c[..c.len() - 1]), ReadObs::Other(_)));
    }
    assert_ne!(
        Version { id: 1, len: 64 }.content(),
        Version { id: 2, len: 64 }.content()
    );
    assert_eq!(ReadObs::of(&[]), ReadObs::Empty);
}

/// Sets the link count every entry of the last snapshot shows.
fn set_nlink(h: &mut H, nlink: u32) {
    let Some(Seen::Snapshot(s)) = h.ops.last_mut().map(|o| &mut o.seen) else {
        panic!("the last operation is no snapshot");
    };
    for e in s.dirs.iter_mut().flat_map(|d| d.entries.iter_mut()) {
        e.nlink = nlink;
    }
}

#[test]
fn link_counts_may_lag_names_only_by_a_rename_cut_short() {
    // A hard link counts: two names, one link is too few.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.link(0, (2, 3), "/a/f0", "/b/f1");
    h.snapshot(
        (10, 11),
        &[("/a", &[("f0", 7, v(1))]), ("/b", &[("f1", 7, v(1))])],
    );
    set_nlink(&mut h, 1);
    h.fails();
    // A rename in two steps cut short leaves a second name no link counts yet.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    let r = h.rename(0, (2, 3), "/a/f0", "/b/f1");
    r.main = Res::Unknown;
    r.two_step = true;
    h.snapshot(
        (10, 11),
        &[("/a", &[("f0", 7, v(1))]), ("/b", &[("f1", 7, v(1))])],
    );
    set_nlink(&mut h, 1);
    h.passes();
    // But the file must outlive the removal of one of its names.
    h.unlink(0, (20, 21), "/a/f0");
    h.read(0, (22, 23), "/b/f1", v(1)).main = Res::Refused(Refusal::NoEntry);
    h.fails();
}

#[test]
fn a_rename_may_succeed_without_moving_when_a_concurrent_one_did() {
    // Two clients rename one name to one place at once: one moves it, the other's
    // attempt fails and its retry finds both names naming the file (nothing to do).
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.rename(1, (10, 50), "/a/f0", "/b/f1").two_step = true;
    h.rename(2, (12, 52), "/a/f0", "/b/f1").two_step = true;
    h.snapshot((60, 61), &[("/a", &[]), ("/b", &[("f1", 7, v(1))])]);
    h.passes();
    // But a rename that succeeded does not leave the old name behind.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.rename(1, (10, 50), "/a/f0", "/b/f1").two_step = true;
    h.snapshot(
        (60, 61),
        &[("/a", &[("f0", 7, v(1))]), ("/b", &[("f1", 7, v(1))])],
    );
    h.fails();
}

/// /a/f0 made, then renamed to /b/f1 (in two steps or one) from 10 to 20 ms, refused
/// with ENOENT: an unlink of /a/f0 took it at 12 ms.
fn lost_to_an_unlink(two_step: bool) -> H {
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    let r = h.rename(1, (10, 20), "/a/f0", "/b/f1");
    r.main = Res::Refused(Refusal::NoEntry);
    r.two_step = two_step;
    h.unlink(0, (12, 13), "/a/f0");
    h
}

#[test]
fn a_refused_rename_moved_nothing() {
    // In one step: nothing at all; and the refusal must be right.
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.rename(0, (2, 3), "/a/f0", "/b/f1").main = Res::Refused(Refusal::NoEntry);
    h.fails();
    let mut h = lost_to_an_unlink(false);
    h.snapshot((30, 31), &[("/a", &[]), ("/b", &[])]);
    h.passes();
    let mut h = lost_to_an_unlink(false);
    h.snapshot((30, 31), &[("/a", &[]), ("/b", &[("f1", 7, v(1))])]);
    h.fails();
    // In two steps, the new name may have gone in (its old name went meanwhile); the
    // old name never went by the rename's doing.
    let mut h = lost_to_an_unlink(true);
    h.snapshot((30, 31), &[("/a", &[]), ("/b", &[("f1", 7, v(1))])]);
    set_nlink(&mut h, 0);
    h.passes();
    // …and a reader may have seen it there before the rename took it back.
    let mut h = lost_to_an_unlink(true);
    h.readdir(2, (14, 15), "/b", &["f1"]);
    h.snapshot((30, 31), &[("/a", &[]), ("/b", &[])]);
    h.passes();
    // Once taken back, it does not come back.
    let mut h = lost_to_an_unlink(true);
    h.readdir(2, (14, 15), "/b", &["f1"]);
    h.readdir(2, (16, 17), "/b", &[]);
    h.readdir(2, (18, 19), "/b", &["f1"]);
    h.fails();
}

#[test]
fn a_snapshot_that_could_not_read_everything_fails_at_once() {
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.snapshot((10, 11), &[("/a", &[("f0", 7, v(1))]), ("/b", &[])]);
    let Some(Seen::Snapshot(s)) = h.ops.last_mut().map(|o| &mut o.seen) else {
        unreachable!("the last operation is the snapshot");
    };
    s.errors.push("/a/f0: the entry points nowhere".into());
    s.dirs[0].entries[0].data = None;
    let report = h.fails();
    assert!(
        report.contains("a snapshot shows what no state can"),
        "{report}"
    );
    assert!(report.contains("/a/f0: nothing could be read"), "{report}");
    // A violation before it is reported as such.
    h.read(1, (2, 3), "/a/f0", v(99));
    let report = h.fails();
    assert!(!report.contains("a snapshot shows"), "{report}");
}

/// A create whose write of a content spanning datafiles was cut short, then a snapshot
/// that reads the file empty (the write did nothing, or landed only past the start),
/// then a read that saw `later`.
fn cut_short_then(later: ReadObs) -> H {
    let mut h = H::new();
    h.create_cut_short(
        "/a/f0",
        Version {
            id: 5,
            len: 200_000,
        },
    );
    h.snapshot(
        (20, 21),
        &[("/a", &[("f0", 7, ReadObs::Empty)]), ("/b", &[])],
    );
    h.read(1, (30, 31), "/a/f0", later);
    h
}

#[test]
fn a_history_is_cut_at_snapshots_nothing_overlapped() {
    let h = cut_short_then(ReadObs::Empty);
    assert_eq!(quiet_cuts(&h.ops, LATE), vec![2]);
    // An operation that may still take effect up to `LATE` after it completed
    // overlaps the snapshot: no cut there.
    let mut late = h.ops.clone();
    late[0].late = true;
    assert_eq!(quiet_cuts(&late, LATE), Vec::<usize>::new());
    // Nor where an operation runs while the snapshot does.
    let mut h = cut_short_then(ReadObs::Empty);
    h.read(1, (21, 22), "/a/f0", ReadObs::Empty);
    h.ops.sort_by_key(|o| (o.start, o.end));
    assert_eq!(quiet_cuts(&h.ops, LATE), Vec::<usize>::new());
}

#[test]
fn a_part_goes_back_for_another_state_the_part_before_can_end_in() {
    let mut part = Version {
        id: 5,
        len: 200_000,
    }
    .content();
    part[..70_000].fill(0);
    let h = cut_short_then(ReadObs::Other(part.clone()));
    // The part before the snapshot ends in two states (the write did nothing, or
    // landed in part), and the first found is not the one the read needs.
    let c = Checker::new(
        &h.u,
        &h.ops,
        LATE,
        std::rc::Rc::new(versions_written(&h.ops)),
        0..2,
        State::default(),
    );
    let spent = Spent::new(DEFAULT_BUDGET);
    let mut search = Search::default();
    let Next::Found(_, first) = search.next(&c, &spent) else {
        panic!("the part before the snapshot has a linearization");
    };
    let Next::Found(_, second) = search.next(&c, &spent) else {
        panic!("the part before the snapshot ends in a second state");
    };
    assert!(matches!(search.next(&c, &spent), Next::Exhausted(_)));
    assert_eq!(first.state.files[0].value, Value::Empty);
    assert_eq!(second.state.files[0].value, Value::Part(5));
    h.passes();
    // Negative control: bytes no state explains fail, in the part after the cut.
    let mut garbage = part;
    garbage[150_000] ^= 0xff;
    let report = cut_short_then(ReadObs::Other(garbage)).fails();
    assert!(report.contains("checked in 2 parts"), "{report}");
    assert!(report.contains("operations #2 to #2"), "{report}");
}

#[test]
fn a_violation_after_a_cut_is_found_and_named() {
    let mut h = H::new();
    h.create(0, (0, 1), "/a/f0", 1);
    h.snapshot((10, 11), &[("/a", &[("f0", 7, v(1))]), ("/b", &[])]);
    h.read(1, (20, 21), "/a/f0", v(1));
    h.snapshot((30, 31), &[("/a", &[("f0", 7, v(1))]), ("/b", &[])]);
    h.passes();
    h.read(1, (40, 41), "/a/f0", v(99));
    let report = h.fails();
    assert!(report.contains("checked in 3 parts"), "{report}");
    assert!(report.contains("#4 client 1"), "{report}");
}
