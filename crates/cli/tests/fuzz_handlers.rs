//! Fuzzing of every request handler: seeded random requests of every
//! kind — real handles and junk ones, odd names, huge counts, overflowing regions,
//! bogus stripes, data that does not match — sent to live servers. Every request gets
//! a decodable answer (an error is fine), no server dies or hangs, and a normal client
//! still works after `fsck --repair` has cleaned what the valid-but-hostile requests
//! did (nothing left unrepaired, a second check clean). `PVFS_FUZZ_REQUESTS` (default
//! 3000, at least 1000 so every request kind is sent) and `PVFS_FUZZ_SEED` (decimal,
//! or hex with 0x; printed both ways) make longer or replayed sessions; the count,
//! time and answers per request kind are printed.
#![allow(clippy::unwrap_used)]

mod common;

use pvfs_proto::req;
use std::time::{Duration, Instant};

use common::{Cluster, Rng};
use pvfs_client::LayoutSpec;
use pvfs_proto::message::UnlinkWant;
use pvfs_proto::{
    decode, encode, CreateWhat, Creds, Extent, FrameKind, Handle, LinkDrop, ObjKind, Regions,
    Request, RequestBody, Response, RetryKey, SetAttr, Stripe, Timespec,
};

fn pick<T: Clone>(rng: &mut Rng, v: &[T]) -> T {
    v[rng.range(0, v.len() as u64) as usize].clone()
}

fn fate(rng: &mut Rng) -> LinkDrop {
    pick(rng, &[LinkDrop::Moved, LinkDrop::Keep, LinkDrop::Delete])
}

fn name(rng: &mut Rng) -> String {
    match rng.range(0, 8) {
        0 => String::new(),
        1 => ".".into(),
        2 => "..".into(),
        3 => "a/b".into(),
        4 => "x".repeat(rng.range(200, 300) as usize),
        5 => "nul\0inside".into(),
        6 => "é∂ƒ😀".into(),
        _ => format!("n{}", rng.range(0, 50)),
    }
}

fn handle(rng: &mut Rng, real: &[Handle]) -> Handle {
    match rng.range(0, 5) {
        0 => 0,
        1 => u64::MAX,
        2 => rng.next_u64(),
        _ if real.is_empty() => (rng.range(1, 5) << 40) | rng.range(0, 1 << 20),
        _ => pick(rng, real),
    }
}

fn num(rng: &mut Rng) -> u64 {
    match rng.range(0, 5) {
        0 => 0,
        1 => u64::MAX,
        2 => rng.next_u64(),
        3 => rng.range(0, 1 << 20),
        _ => rng.range(0, 100),
    }
}

fn regions(rng: &mut Rng) -> Regions {
    match rng.range(0, 3) {
        0 => Regions::contig(num(rng), rng.range(0, 1 << 16)),
        1 => Regions::Strided {
            offset: num(rng),
            block: rng.range(0, 100),
            stride: rng.range(0, 200),
            start: num(rng),
            len: rng.range(0, 1 << 16),
        },
        _ => Regions::List(
            (0..rng.range(0, 20))
                .map(|_| Extent {
                    offset: num(rng),
                    len: rng.range(0, 5000),
                })
                .collect(),
        ),
    }
}

fn stripe(rng: &mut Rng) -> Stripe {
    Stripe {
        size: pick(rng, &[0, 1, 512, 4096, 65536, 1 << 31, u64::MAX]),
        count: pick(rng, &[0, 1, 4, 5, 4097, u64::MAX]),
    }
}

/// No capability, or one that no server sealed (random rights, uid, seal).
fn cap(rng: &mut Rng, h: Handle) -> Option<pvfs_proto::Capability> {
    if rng.chance(0.5) {
        return None;
    }
    let handle = if rng.chance(0.8) { h } else { rng.next_u64() };
    let mac_len = pick(rng, &[0usize, 16, 32]);
    Some(pvfs_proto::Capability {
        handle,
        rights: rng.next_u64() as u32,
        uid: pick(rng, &[0, 1000]),
        expires: rng.next_u64(),
        mac: rng.bytes(mac_len),
    })
}

/// A lock request on `h` by one of a few owners, with any range, type and flags (a
/// waiting one rarely: each may wait a third of the request timeout).
fn lock_request(rng: &mut Rng, h: Handle) -> Request {
    use pvfs_proto::locks::{LockKey, LockOwner, LockType, LOCK_WAIT};
    let owner = LockOwner {
        client: rng.range(0, 3),
        owner: rng.range(0, 3),
    };
    let typ = pick(rng, &[LockType::Read, LockType::Write]);
    let (start, end) = (num(rng), num(rng));
    match rng.range(0, 6) {
        0 => Request::Lock(req::Lock {
            handle: h,
            owner,
            typ,
            start,
            end,
            pid: rng.next_u64() as u32,
            flags: if rng.chance(0.05) {
                rng.next_u64() as u32
            } else {
                rng.next_u64() as u32 & !LOCK_WAIT
            },
            proof: cap(rng, h),
        }),
        1 => Request::Unlock(req::Unlock {
            handle: h,
            owner,
            start,
            end,
            flags: rng.next_u64() as u32 & 15,
        }),
        2 => Request::TestLock(req::TestLock {
            handle: h,
            owner,
            typ,
            start,
            end,
            proof: cap(rng, h),
        }),
        3 => Request::CancelLock(req::CancelLock {
            handle: h,
            owner,
            typ,
            start,
            end,
        }),
        4 => Request::RenewLease(req::RenewLease {
            client: owner.client,
            release: rng.chance(0.5),
        }),
        _ => Request::WaitFor(req::WaitFor {
            waiter: LockKey::new(rng.range(0, 2), owner),
            blockers: (0..rng.range(0, 4))
                .map(|_| LockKey::new(rng.range(0, 2), owner))
                .collect(),
            server: rng.range(0, 4) as u32,
            handle: h,
        }),
    }
}

/// The number of distinct request kinds [`request`] makes (every `Request` but
/// `ScanDatafiles` and `ScanSeals`): one per arm of its match (Write and Read take
/// two slots each), six from [`lock_request`]. The test checks that each was sent.
const KINDS: usize = 46;

/// One random request of any kind [`KINDS`] counts.
fn request(rng: &mut Rng, real: &[Handle]) -> Request {
    let h = handle(rng, real);
    let dir = handle(rng, real);
    let spec = LayoutSpec {
        stripe_size: rng.chance(0.5).then(|| num(rng)),
        stripe_count: rng.chance(0.5).then(|| rng.range(0, 8) as u32),
        base: rng.chance(0.5).then(|| rng.range(0, 8) as u32),
        replicas: None,
    };
    let kind = pick(rng, &[ObjKind::Dir, ObjKind::File, ObjKind::Symlink]);
    // KINDS (above) counts the distinct kinds this match makes.
    match rng.range(0, 49) {
        0 => Request::Ping(req::Ping {}),
        1 => Request::StatFs(req::StatFs {}),
        2 => Request::Lookup(req::Lookup {
            dir,
            name: name(rng),
            want: rng.next_u64() as u32,
        }),
        3 => Request::GetAttr(req::GetAttr {
            handle: h,
            want: rng.next_u64() as u32 & 0x3f,
            proof: cap(rng, h),
        }),
        4 => Request::ListAttr(req::ListAttr {
            handles: (0..rng.range(0, 100)).map(|_| handle(rng, real)).collect(),
        }),
        5 => Request::SetAttr(req::SetAttr {
            handle: h,
            set: SetAttr {
                mode: rng.chance(0.5).then(|| rng.next_u64() as u32),
                uid: rng.chance(0.3).then(|| rng.next_u64() as u32),
                gid: None,
                atime: rng.chance(0.3).then(|| Timespec {
                    secs: rng.next_u64() as i64,
                    nsecs: rng.next_u64() as u32,
                }),
                mtime: None,
                now: rng.chance(0.3),
            },
        }),
        6 => Request::Create(req::Create {
            hold: 0,
            parent: dir,
            name: name(rng),
            mode: rng.next_u64() as u32,
            umask: 0,
            uid: 0,
            gid: 0,
            what: match rng.range(0, 4) {
                0 => CreateWhat::File { spec },
                1 => CreateWhat::Dir {
                    shards: pick(rng, &[0, 1, 4, 1025, u32::MAX]),
                    default_layout: rng.chance(0.5).then_some(spec),
                },
                2 => CreateWhat::Node {
                    kind: pick(
                        rng,
                        &[
                            pvfs_proto::NodeKind::Fifo,
                            pvfs_proto::NodeKind::CharDev,
                            pvfs_proto::NodeKind::BlockDev,
                            pvfs_proto::NodeKind::Socket,
                        ],
                    ),
                    rdev: rng.next_u64(),
                },
                _ => CreateWhat::Symlink {
                    target: pick(rng, &[String::new(), "t".into(), "y".repeat(5000)]),
                },
            },
        }),
        7 => Request::Unlink(req::Unlink {
            dir,
            name: name(rng),
            expect: rng.chance(0.5).then(|| handle(rng, real)),
            want: pick(rng, &[UnlinkWant::Any, UnlinkWant::Dir, UnlinkWant::NotDir]),
            fate: fate(rng),
        }),
        8 => Request::LinkEntry(req::LinkEntry {
            dir,
            name: name(rng),
            handle: h,
            kind,
            replace: rng.chance(0.3).then(|| handle(rng, real)),
            fate: fate(rng),
            counted: false,
            ticket: cap(rng, h),
        }),
        9 => Request::Rename(req::Rename {
            src_dir: dir,
            src_name: name(rng),
            dst_dir: handle(rng, real),
            dst_name: name(rng),
            expect_src: h,
            replace: rng.chance(0.3).then(|| handle(rng, real)),
            fate: fate(rng),
        }),
        10 => Request::ReadDir(req::ReadDir {
            dir,
            shard: rng.next_u64() as u32,
            after: rng.chance(0.5).then(|| name(rng)),
            max: pick(rng, &[0, 1, 100, u32::MAX]),
        }),
        11 => Request::SealDir(req::SealDir {
            dir,
            seal: rng.chance(0.2),
            ticket: cap(rng, dir),
        }),
        12 => Request::SetParent(req::SetParent {
            dir,
            parent: h,
            ticket: cap(rng, dir),
        }),
        13 => Request::SetDirLayout(req::SetDirLayout {
            dir,
            layout: rng.chance(0.5).then_some(spec),
        }),
        14 => Request::RemoveObject(req::RemoveObject {
            handle: h,
            ticket: cap(rng, h),
        }),
        15 => Request::Precreate(req::Precreate {
            count: pick(rng, &[0, 1, 1 << 21, u32::MAX]),
        }),
        16 | 17 => Request::Write(req::Write {
            copies: Default::default(),
            handle: h,
            stripe: stripe(rng),
            index: rng.range(0, 6) as u32,
            regions: regions(rng),
            sync: rng.chance(0.1),
            cap: cap(rng, h),
        }),
        18 | 19 => Request::Read(req::Read {
            copies: Default::default(),
            handle: h,
            stripe: stripe(rng),
            index: rng.range(0, 6) as u32,
            regions: regions(rng),
            cap: cap(rng, h),
        }),
        20 => Request::GetSizes(req::GetSizes {
            map: None,
            handles: (0..rng.range(0, 50)).map(|_| handle(rng, real)).collect(),
        }),
        21 => Request::Truncate(req::Truncate {
            copies: Default::default(),
            handle: h,
            stripe: stripe(rng),
            index: rng.range(0, 6) as u32,
            size: num(rng),
            cap: cap(rng, h),
        }),
        22 => {
            let handles: Vec<Handle> = (0..rng.range(0, 5)).map(|_| handle(rng, &[])).collect();
            let tickets = handles.iter().filter_map(|&d| cap(rng, d)).collect();
            Request::RemoveDatafiles(req::RemoveDatafiles { handles, tickets })
        }
        23 => Request::Fsync(req::Fsync {
            handles: (0..rng.range(0, 5)).map(|_| handle(rng, real)).collect(),
            verifier: num(rng),
        }),
        24 => Request::GetXattr(req::GetXattr {
            handle: h,
            name: name(rng),
        }),
        25 => Request::SetXattr(req::SetXattr {
            handle: h,
            name: name(rng),
            value: vec![7; rng.range(0, 70_000) as usize],
            flags: rng.range(0, 5) as u32,
        }),
        26 => Request::ListXattr(req::ListXattr { handle: h }),
        27 => Request::RemoveXattr(req::RemoveXattr {
            handle: h,
            name: name(rng),
        }),
        28 => Request::ScanObjects(req::ScanObjects {
            after: rng.chance(0.5).then(|| handle(rng, real)),
            max: rng.next_u64() as u32,
        }),
        29 => Request::ScanEntries(req::ScanEntries {
            after: rng.chance(0.5).then(|| (handle(rng, real), name(rng))),
            max: rng.next_u64() as u32,
        }),
        30 => Request::Forget(req::Forget {
            handles: (0..rng.range(0, 5)).map(|_| handle(rng, real)).collect(),
        }),
        31 => Request::Link(req::Link {
            dir,
            name: name(rng),
            handle: h,
            proof: cap(rng, h),
        }),
        32 => Request::AddLink(req::AddLink {
            handle: h,
            moving: rng.chance(0.5),
        }),
        33 => Request::DropLink(req::DropLink {
            handle: h,
            keep: rng.chance(0.5),
        }),
        34 => Request::SetLinks(req::SetLinks {
            handle: h,
            links: pick(rng, &[0, 1, 2, u32::MAX]),
            expect: pick(rng, &[0, 1, 2]),
        }),
        35 => Request::DirStats(req::DirStats {
            dirs: (0..rng.range(0, 100)).map(|_| handle(rng, real)).collect(),
        }),
        36 => Request::ScanLost(req::ScanLost {
            after: rng.chance(0.5).then(|| handle(rng, real)),
            max: rng.next_u64() as u32,
        }),
        37 => Request::Fallocate(req::Fallocate {
            copies: Default::default(),
            handle: h,
            stripe: stripe(rng),
            index: rng.range(0, 6) as u32,
            offset: num(rng),
            len: pick(rng, &[0, 1, 4096, 1 << 20, u64::MAX]),
            mode: pick(rng, &[0, 1, 2, 3, 0x10, 0x11, 0x12, 0x08, 0x20, u32::MAX]),
            cap: cap(rng, h),
        }),
        38..=44 => lock_request(rng, h),
        46 => Request::Changes(req::Changes {
            epoch: if rng.chance(0.5) { 0 } else { rng.next_u64() },
            since: rng.range(0, 100),
            wait_ms: rng.range(0, 50) as u32,
        }),
        45 => Request::Sync(req::Sync {
            data: rng.chance(0.5),
        }),
        47 => Request::Widen(req::Widen {
            handle: h,
            width: pick(rng, &[0, 1, 2, 4, 5, u32::MAX]),
            cap: cap(rng, h),
        }),
        _ => Request::CreateDatafiles(req::CreateDatafiles {
            handles: (0..rng.range(0, 3)).map(|_| handle(rng, &[])).collect(),
        }),
    }
}

#[test]
fn random_requests_of_every_kind_never_hurt_a_server() {
    let seed = common::knob("PVFS_FUZZ_SEED", 0x5eed_f022u64, |_| true);
    let count = common::knob("PVFS_FUZZ_REQUESTS", 3000u64, |&n| {
        (1000..=100_000_000).contains(&n)
    });
    let cluster = Cluster::builder()
        .request_timeout(&format!(
            "{}ms",
            common::scaled(Duration::from_secs(2)).as_millis()
        ))
        .start();
    let config = cluster.config().clone();
    let tc = cluster.client();
    // A real namespace, so that many requests name real objects.
    let real: Vec<Handle> = tc.run(Duration::from_secs(60), async |c| {
        let mut v = vec![c.root()];
        c.mkdir("/d", 0o755).await.unwrap();
        v.push(c.stat("/d").await.unwrap().handle);
        for i in 0..6 {
            let f = c
                .create(&format!("/d/f{i}"), 0o644, LayoutSpec::default(), true)
                .await
                .unwrap();
            f.write_at(0, &[i as u8; 100_000]).await.unwrap();
            v.push(f.handle());
            v.extend(f.layout().datafiles.iter().map(|d| d.handle));
        }
        v
    });
    let mut rng = Rng::new(seed);
    let start = Instant::now();
    let mut errors = 0u64;
    // Per operation: (answered without error, answered with an error, connection
    // closed before an answer).
    let mut tally: std::collections::BTreeMap<&'static str, (u64, u64, u64)> = Default::default();
    tc.run(Duration::from_secs(600), async |_c| {
        let mut conns = Vec::new();
        for s in 0..config.servers.len() {
            conns.push(common::raw_mux(&config, s).await);
        }
        for i in 0..count {
            let server = rng.range(0, conns.len() as u64) as usize;
            let req = request(&mut rng, &real);
            let op = req.op_name();
            let body = encode(&RequestBody {
                creds: Creds {
                    uid: pick(&mut rng, &[0, 1000]),
                    gid: 0,
                    groups: vec![],
                },
                request: req,
                retry: rng.chance(0.3).then(|| RetryKey {
                    client: rng.next_u64(),
                    seq: i,
                }),
                origin: 0,
            });
            // A write sends some data, which may or may not match its regions.
            let data = vec![0x5a; rng.range(0, 3) as usize * 1000];
            if conns[server].closed().is_some() {
                conns[server] = common::raw_mux(&config, server).await;
            }
            let t = tally.entry(op).or_default();
            let mut call = match conns[server].call(&body, &[&data], true).await {
                Ok(c) => c,
                Err(_) => {
                    // The server closed this connection: fine, the next one reconnects.
                    t.2 += 1;
                    continue;
                }
            };
            // Read the whole answer (reads stream several frames).
            let mut answered = false;
            loop {
                match call.recv().await {
                    Ok(frame) => {
                        if frame.header.kind == FrameKind::Response && !answered {
                            answered = true;
                            let r: Response = decode(&frame.body).unwrap_or_else(|e| {
                                panic!("request {i} ({op}): undecodable answer: {e}")
                            });
                            if matches!(r, Response::Error { .. }) {
                                errors += 1;
                                t.1 += 1;
                            } else {
                                t.0 += 1;
                            }
                        }
                        if frame.header.is_end() {
                            break;
                        }
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        assert!(!msg.contains("timed out"), "request {i} ({op}) hung: {msg}");
                        break;
                    }
                }
            }
            if !answered {
                t.2 += 1;
            }
        }
    });
    let took = start.elapsed();
    eprintln!(
        "fuzzed {count} requests (seed {seed}, {seed:#x}) in {:.1}s, {errors} answered with errors",
        took.as_secs_f64()
    );
    for (op, (ok, err, closed)) in &tally {
        eprintln!("  {op:>16}: {ok} ok, {err} errors, {closed} closed");
    }
    // Every request got a decodable answer (the connection was never closed on one),
    // every kind was sent, the junk drew errors and the harmless requests none.
    let (ok, err, closed) = tally
        .values()
        .fold((0, 0, 0), |a, t| (a.0 + t.0, a.1 + t.1, a.2 + t.2));
    let closers: Vec<_> = tally.iter().filter(|(_, t)| t.2 > 0).collect();
    assert_eq!(
        closed, 0,
        "requests left unanswered (closed connection): {closers:?}"
    );
    assert_eq!(ok + err, count, "answers counted");
    assert_eq!(err, errors);
    assert_eq!(tally.len(), KINDS, "request kinds sent: {:?}", tally.keys());
    assert!(
        errors > 0 && errors < count,
        "{errors} of {count} requests answered with an error: junk must draw errors, \
         pings must not"
    );
    for op in ["Ping", "StatFs"] {
        assert_eq!(
            tally[op].1, 0,
            "{op} answered with an error: {:?}",
            tally[op]
        );
    }
    cluster.assert_all_running();
    // Valid but hostile requests may have damaged the namespace (sealed shards, stray
    // entries): fsck copes with whatever they left, and afterwards a normal client works.
    let fresh = cluster.client();
    fresh.run(Duration::from_secs(120), async |c| {
        let report = c.fsck(true, Duration::ZERO).await.unwrap();
        eprintln!(
            "fsck after fuzzing: {} problems, {} not repaired",
            report.problems.len(),
            report.unrepaired()
        );
        let left: Vec<_> = report.problems.iter().filter(|p| !p.repaired).collect();
        assert!(left.is_empty(), "fsck --repair left findings: {left:?}");
        let again = c.fsck(false, Duration::ZERO).await.unwrap();
        assert!(
            again.problems.is_empty(),
            "fsck after the repair still finds: {:?}",
            again.problems
        );
        c.mkdir("/after", 0o755).await.unwrap();
        let f = c
            .create("/after/f", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        f.write_at(0, b"still fine").await.unwrap();
        let mut b = [0u8; 10];
        f.read_at(0, &mut b).await.unwrap();
        assert_eq!(&b, b"still fine");
    });
}
