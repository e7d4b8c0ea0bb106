//! Data integrity: many clients write one file at random offsets and sizes, other
//! clients read it back byte-exact, and every datafile on disk holds exactly its share
//! of the stripes.
//!
//! Every check compares with an in-memory model: a byte array with the written bytes
//! and zeros in the holes, and the list of written extents. The stripe arithmetic used
//! to check the files on disk is written here again, independently of the product:
//! logical byte x is in unit u = x / S, on datafile u % C, at local offset
//! (u / C) * S + x % S.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{assert_bytes_eq, Cluster, Rng};
use pvfs_client::{Client, LayoutSpec, Partition, Regions};
use pvfs_proto::Extent;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// Longest any one client call of these tests may take.
fn call() -> Duration {
    common::scaled(Duration::from_secs(120))
}

/// What the file must hold.
struct Model {
    data: Vec<u8>,
    /// Every extent written, as (offset, length).
    written: Vec<(u64, u64)>,
}

impl Model {
    fn new() -> Model {
        Model {
            data: Vec::new(),
            written: Vec::new(),
        }
    }

    fn len(&self) -> u64 {
        self.data.len() as u64
    }

    /// Records a write of `bytes` at `off`.
    fn write(&mut self, off: u64, bytes: &[u8]) {
        let end = (off + bytes.len() as u64) as usize;
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[off as usize..end].copy_from_slice(bytes);
        self.written.push((off, bytes.len() as u64));
    }

    /// Records a write of fresh random bytes at `off`.
    fn fill(&mut self, rng: &mut Rng, off: u64, len: u64) {
        let end = (off + len) as usize;
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        rng.fill(&mut self.data[off as usize..end]);
        self.written.push((off, len));
    }

    /// The model's bytes `off .. off + len`, zeros past the end.
    fn range(&self, off: u64, len: u64) -> Vec<u8> {
        let mut v = vec![0u8; len as usize];
        let size = self.len();
        if off < size {
            let n = (size - off).min(len) as usize;
            v[..n].copy_from_slice(&self.data[off as usize..off as usize + n]);
        }
        v
    }

    /// Bytes of `off .. off + len` before the end of the file.
    fn before_eof(&self, off: u64, len: u64) -> u64 {
        self.len().saturating_sub(off).min(len)
    }
}

/// One past the last local byte that extent `off .. off + len` puts on datafile `idx`
/// of a file with stripe size `s` over `c` datafiles (0 if it puts none there).
fn local_end(s: u64, c: u64, idx: u64, off: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let (u0, u1) = (off / s, (off + len - 1) / s);
    let back = (u1 % c + c - idx) % c;
    if u1 < u0 + back {
        return 0;
    }
    let u = u1 - back;
    let end_in_unit = (off + len).min((u + 1) * s) - u * s;
    (u / c) * s + end_in_unit
}

/// Runs `f` on a current-thread runtime of its own, with a client of its own: one
/// independent client per OS thread.
fn with_own_client<T>(cluster: &Cluster, f: impl AsyncFnOnce(Client) -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = cluster.config().clone();
    rt.block_on(async move {
        let client = Client::new(config);
        f(client).await
    })
}

async fn timed<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(call(), fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: did not return within {:?}", call()),
    }
}

/// Random extents for the concurrent phase: log-uniform sizes from 1 byte to
/// `max_len`, holes between some of them, and on purpose a `max_len` extent, one-byte
/// extents, a stripe-aligned unit and extents straddling a stripe boundary. Disjoint
/// and sorted; the file ends at the end of the last one.
fn plan_extents(rng: &mut Rng, stripe: u64, span: u64, max_len: u64) -> Vec<(u64, u64)> {
    #[derive(Clone, Copy)]
    enum Kind {
        Random,
        Len(u64),
        Aligned,
        Straddle,
    }
    let mut kinds = vec![
        Kind::Len(max_len),
        Kind::Len(1),
        Kind::Len(1),
        Kind::Len(1),
        Kind::Aligned,
    ];
    kinds.extend([Kind::Straddle; 4]);
    // Enough random extents to cover the span on average.
    let mut budget = span.saturating_sub(max_len);
    while budget > 0 {
        let len = rng.log_range(1, max_len);
        kinds.push(Kind::Random);
        budget = budget.saturating_sub(len);
    }
    rng.shuffle(&mut kinds);
    let mut at = 0u64;
    let mut out = Vec::new();
    for (i, k) in kinds.into_iter().enumerate() {
        if i == 0 || rng.chance(0.3) {
            at += rng.log_range(1, 2 * MIB); // a hole (also at the start of the file)
        }
        let len = match k {
            Kind::Random => rng.log_range(1, max_len),
            Kind::Len(n) => n,
            Kind::Aligned => {
                at = at.div_ceil(stripe) * stripe;
                stripe
            }
            Kind::Straddle => {
                at = (at / stripe + 1) * stripe - rng.range(1, stripe.min(100));
                rng.range(2, 3 * stripe)
            }
        };
        out.push((at, len));
        at += len;
    }
    out
}

/// Checks every datafile of `path` on disk against the model, and the sizes the
/// servers report for them.
fn check_datafiles(
    cluster: &Cluster,
    report: &pvfs_client::LayoutReport,
    path: &str,
    model: &Model,
) {
    let layout = report.attr.layout().unwrap();
    let s = layout.stripe_size;
    let c = layout.datafiles.len() as u64;
    assert_eq!(
        report.attr.size,
        model.len(),
        "{path}: size from the layout report"
    );
    let mut servers: Vec<u32> = layout.datafiles.iter().map(|d| d.server).collect();
    servers.sort_unstable();
    servers.dedup();
    assert_eq!(
        servers.len() as u64,
        c,
        "{path}: two datafiles on one server: {layout:?}"
    );
    let data_servers = cluster.config().data_servers();
    for (idx, df) in layout.datafiles.iter().enumerate() {
        assert!(
            data_servers.contains(&(df.server as usize)),
            "{path}: datafile on a non-data server"
        );
        let want_len = model
            .written
            .iter()
            .map(|&(o, l)| local_end(s, c, idx as u64, o, l))
            .max()
            .unwrap_or(0);
        let file = cluster.datafile_path(df.server as usize, df.handle);
        let disk = match std::fs::read(&file) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("cannot read {}: {e}", file.display()),
        };
        assert_eq!(
            disk.len() as u64,
            want_len,
            "{path}: datafile {idx} ({}) holds {} bytes, its share ends at {want_len}",
            file.display(),
            disk.len()
        );
        assert_eq!(
            report.datafiles[idx].2.size, want_len,
            "{path}: server reports {} bytes for datafile {idx}, its share ends at {want_len}",
            report.datafiles[idx].2.size
        );
        // Unit by unit: local round r of datafile idx is logical unit r * C + idx.
        let mut local = 0u64;
        while local < want_len {
            let n = s.min(want_len - local);
            let logical = ((local / s) * c + idx as u64) * s;
            assert_bytes_eq(
                &disk[local as usize..(local + n) as usize],
                &model.data[logical as usize..(logical + n) as usize],
                &format!(
                    "{path}: datafile {idx} local bytes {local}..{} (logical {logical})",
                    local + n
                ),
            );
            local += n;
        }
        // The datafile is nowhere else.
        for other in 0..cluster.config().servers.len() {
            if other != df.server as usize {
                let p = cluster.datafile_path(other, df.handle);
                assert!(
                    !p.exists(),
                    "{path}: datafile {idx} also found at {}",
                    p.display()
                );
            }
        }
    }
}

/// Reads the whole file with fresh clients: once in one call, then in random chunks
/// (some crossing the end of the file) spread over `readers` concurrent clients.
fn check_read_back(cluster: &Cluster, path: &str, model: &Model, rng: &mut Rng, readers: usize) {
    let size = model.len();
    // One call for the whole file (and a bit more: the count stops at the end).
    with_own_client(cluster, async |client| {
        let f = timed("open", client.open(path)).await.unwrap();
        assert_eq!(timed("size", f.size()).await.unwrap(), size, "{path}: size");
        let st = timed("stat", client.stat(path)).await.unwrap();
        assert_eq!(st.size, size, "{path}: stat size");
        let mut buf = vec![0xa5u8; (size + 3 * KIB) as usize];
        let n = timed("read", f.read_at(0, &mut buf)).await.unwrap();
        assert_eq!(
            n as u64, size,
            "{path}: read of the whole file returned {n}"
        );
        assert_bytes_eq(
            &buf[..size as usize],
            &model.data,
            &format!("{path}: whole-file read"),
        );
        // Reads at and past the end of the file return 0.
        let mut small = [0u8; 10];
        assert_eq!(timed("read", f.read_at(size, &mut small)).await.unwrap(), 0);
        assert_eq!(
            timed("read", f.read_at(size + 12345, &mut small))
                .await
                .unwrap(),
            0
        );
    });
    // Random chunks covering the file and a little past it, in random order.
    let mut chunks = Vec::new();
    let mut at = 0;
    while at < size + 100 * KIB {
        let len = rng.log_range(1, 8 * MIB);
        chunks.push((at, len));
        at += len;
    }
    rng.shuffle(&mut chunks);
    let per: Vec<Vec<(u64, u64)>> = (0..readers)
        .map(|r| chunks.iter().copied().skip(r).step_by(readers).collect())
        .collect();
    std::thread::scope(|sc| {
        for mine in per {
            sc.spawn(move || {
                with_own_client(cluster, async |client| {
                    let f = timed("open", client.open(path)).await.unwrap();
                    for (off, len) in mine {
                        let mut buf = vec![0u8; len as usize];
                        let n = timed("read", f.read_at(off, &mut buf)).await.unwrap();
                        let want = model.before_eof(off, len);
                        assert_eq!(
                            n as u64, want,
                            "{path}: read of {len} bytes at {off} returned {n}"
                        );
                        assert_bytes_eq(
                            &buf[..n],
                            &model.data[off as usize..off as usize + n],
                            &format!("{path}: read of {len} bytes at {off}"),
                        );
                    }
                })
            });
        }
    });
}

/// 8 concurrent clients write disjoint random extents of a file; returns the model.
fn concurrent_writes(
    cluster: &Cluster,
    path: &str,
    spec: LayoutSpec,
    extents: &[(u64, u64)],
    rng: &mut Rng,
) -> Model {
    const WRITERS: usize = 8;
    let mut model = Model::new();
    for &(o, l) in extents {
        model.fill(rng, o, l);
    }
    with_own_client(cluster, async |client| {
        let f = timed("create", client.create(path, 0o644, spec, true))
            .await
            .unwrap();
        let l = f.layout();
        assert_eq!(Some(l.stripe_size), spec.stripe_size, "{path}: stripe size");
        assert_eq!(
            Some(l.datafiles.len() as u32),
            spec.stripe_count,
            "{path}: stripe count"
        );
    });
    let mut per: Vec<Vec<(u64, u64)>> = vec![Vec::new(); WRITERS];
    for &e in extents {
        per[rng.range(0, WRITERS as u64) as usize].push(e);
    }
    for p in per.iter_mut() {
        rng.shuffle(p);
    }
    let data = &model.data;
    std::thread::scope(|sc| {
        for mine in per {
            sc.spawn(move || {
                with_own_client(cluster, async |client| {
                    let f = timed("open", client.open(path)).await.unwrap();
                    for (off, len) in mine {
                        let bytes = &data[off as usize..(off + len) as usize];
                        let n = timed("write", f.write_at(off, bytes)).await.unwrap();
                        assert_eq!(n as u64, len, "{path}: write of {len} bytes at {off}");
                    }
                })
            });
        }
    });
    model
}

fn layout_report(cluster: &Cluster, path: &str) -> pvfs_client::LayoutReport {
    with_own_client(cluster, async |client| {
        timed("layout", client.layout(path)).await.unwrap()
    })
}

#[test]
fn concurrent_random_writes_read_back_exactly_and_land_on_the_right_datafiles() {
    let cluster = Cluster::start();
    let mut rng = Rng::new(0x5eed_0001);

    // A file with 64 KiB stripes over all 4 servers: ~150 MiB, writes up to 16 MiB.
    let spec = LayoutSpec {
        stripe_size: Some(64 * KIB),
        stripe_count: Some(4),
        base: None,
        replicas: None,
    };
    let extents = plan_extents(&mut rng, 64 * KIB, 128 * MIB, 16 * MIB);
    assert!(extents.iter().any(|e| e.1 == 16 * MIB) && extents.iter().any(|e| e.1 == 1));
    let model = concurrent_writes(&cluster, "/striped-64k", spec, &extents, &mut rng);
    eprintln!(
        "striped-64k: {} extents, {} bytes written, size {}",
        extents.len(),
        extents.iter().map(|e| e.1).sum::<u64>(),
        model.len()
    );
    check_read_back(&cluster, "/striped-64k", &model, &mut rng, 4);
    check_datafiles(
        &cluster,
        &layout_report(&cluster, "/striped-64k"),
        "/striped-64k",
        &model,
    );
    drop(model);

    // An odd stripe size (4608 bytes, not a power of two) over 3 of the 4 servers.
    let spec = LayoutSpec {
        stripe_size: Some(4608),
        stripe_count: Some(3),
        base: Some(1),
        replicas: None,
    };
    let extents = plan_extents(&mut rng, 4608, 24 * MIB, 16 * MIB);
    let model = concurrent_writes(&cluster, "/odd-4608x3", spec, &extents, &mut rng);
    let report = layout_report(&cluster, "/odd-4608x3");
    check_read_back(&cluster, "/odd-4608x3", &model, &mut rng, 3);
    check_datafiles(&cluster, &report, "/odd-4608x3", &model);
    cluster.assert_all_running();
}

#[test]
fn strided_partitions_and_region_lists_match_the_model() {
    let cluster = Cluster::start();
    let mut rng = Rng::new(0x5eed_0002);

    // ----- strided partition I/O (the partitioned files of the PVFS paper, Carns et
    // al., 2000): 8 ranks interleave blocks of 12345 bytes; rank 5 never writes, so
    // its blocks are holes.
    let path = "/partitioned";
    let gsize = 12_345u64;
    let ranks = 8u64;
    let part = |r: u64| Partition {
        offset: 1000 + r * gsize,
        gsize,
        stride: ranks * gsize,
    };
    // File offset of partition byte `pos` of rank r.
    let file_off = |r: u64, pos: u64| {
        let p = part(r);
        p.offset + (pos / gsize) * p.stride + pos % gsize
    };
    let lens: Vec<u64> = (0..ranks).map(|r| gsize * 37 + r * 1111).collect();
    let bytes: Vec<Vec<u8>> = lens.iter().map(|&l| rng.bytes(l as usize)).collect();
    let mut model = Model::new();
    for r in (0..ranks).filter(|&r| r != 5) {
        let mut pos = 0;
        while pos < lens[r as usize] {
            let n = (gsize - pos % gsize).min(lens[r as usize] - pos);
            model.write(
                file_off(r, pos),
                &bytes[r as usize][pos as usize..(pos + n) as usize],
            );
            pos += n;
        }
    }
    with_own_client(&cluster, async |client| {
        let spec = LayoutSpec {
            stripe_size: Some(8 * KIB),
            stripe_count: Some(4),
            base: None,
            replicas: None,
        };
        timed("create", client.create(path, 0o644, spec, true))
            .await
            .unwrap();
    });
    // Each rank writes its partition in a few random pieces, in random order.
    let mut plans = Vec::new();
    for r in (0..ranks).filter(|&r| r != 5) {
        let len = lens[r as usize];
        let mut cuts: Vec<u64> = (0..rng.range(1, 6)).map(|_| rng.range(1, len)).collect();
        cuts.extend([0, len]);
        cuts.sort_unstable();
        cuts.dedup();
        let mut pieces: Vec<(u64, u64)> = cuts.windows(2).map(|w| (w[0], w[1] - w[0])).collect();
        rng.shuffle(&mut pieces);
        plans.push((r, pieces));
    }
    std::thread::scope(|sc| {
        for (r, pieces) in plans {
            let data = &bytes[r as usize];
            let cluster = &cluster;
            sc.spawn(move || {
                with_own_client(cluster, async |client| {
                    let f = timed("open", client.open(path)).await.unwrap();
                    for (pos, len) in pieces {
                        let buf = &data[pos as usize..(pos + len) as usize];
                        let n = timed("write_partition", f.write_partition(&part(r), pos, buf))
                            .await
                            .unwrap();
                        assert_eq!(n as u64, len, "rank {r}: write_partition at {pos}");
                    }
                })
            });
        }
    });
    check_read_back(&cluster, path, &model, &mut rng, 2);
    with_own_client(&cluster, async |client| {
        let f = timed("open", client.open(path)).await.unwrap();
        for r in 0..ranks {
            let len = lens[r as usize];
            // The whole partition and random windows of it, some running past its end.
            let mut windows = vec![(0, len), (len, 5 * gsize), (len - 1, 2)];
            for _ in 0..6 {
                let pos = rng.range(0, len);
                windows.push((pos, rng.log_range(1, 3 * gsize)));
            }
            for (pos, n) in windows {
                let mut buf = vec![0xeeu8; n as usize];
                let got = timed("read_partition", f.read_partition(&part(r), pos, &mut buf))
                    .await
                    .unwrap();
                let mut want = Vec::with_capacity(n as usize);
                let mut before_eof = 0u64;
                for i in pos..pos + n {
                    let fo = file_off(r, i);
                    if fo < model.len() {
                        before_eof += 1;
                        want.push(model.data[fo as usize]);
                    } else {
                        want.push(0);
                    }
                }
                assert_eq!(
                    got as u64, before_eof,
                    "rank {r}: read_partition({pos}, {n}) count"
                );
                assert_bytes_eq(
                    &buf[..got],
                    &want[..got],
                    &format!("rank {r}: read_partition({pos}, {n})"),
                );
                if r != 5 && pos + n <= len {
                    assert_bytes_eq(
                        &buf,
                        &bytes[r as usize][pos as usize..(pos + n) as usize],
                        &format!("rank {r}: read_partition({pos}, {n}) against what it wrote"),
                    );
                }
            }
        }
    });
    check_datafiles(&cluster, &layout_report(&cluster, path), path, &model);

    // ----- list I/O (writex/readx): unsorted disjoint extents written by three
    // clients at once, then a list of 70000 one-byte extents (more than one request
    // carries), then reads of overlapping, unsorted lists reaching past the end.
    let path = "/listed";
    with_own_client(&cluster, async |client| {
        let spec = LayoutSpec {
            stripe_size: Some(4608),
            stripe_count: Some(3),
            base: None,
            replicas: None,
        };
        timed("create", client.create(path, 0o644, spec, true))
            .await
            .unwrap();
    });
    let mut extents = Vec::new();
    let mut at = 0;
    while extents.len() < 300 {
        if rng.chance(0.5) {
            at += rng.log_range(1, 64 * KIB);
        }
        let len = rng.log_range(1, 64 * KIB);
        extents.push((at, len));
        at += len;
    }
    rng.shuffle(&mut extents);
    let mut model = Model::new();
    for &(o, l) in &extents {
        model.fill(&mut rng, o, l);
    }
    let lists: Vec<Vec<(u64, u64)>> = extents.chunks(100).map(|c| c.to_vec()).collect();
    std::thread::scope(|sc| {
        for list in lists {
            let data = &model.data;
            let cluster = &cluster;
            sc.spawn(move || {
                let regions = Regions::List(
                    list.iter()
                        .map(|&(offset, len)| Extent { offset, len })
                        .collect(),
                );
                let mut buf = Vec::new();
                for &(o, l) in &list {
                    buf.extend_from_slice(&data[o as usize..(o + l) as usize]);
                }
                with_own_client(cluster, async |client| {
                    let f = timed("open", client.open(path)).await.unwrap();
                    let n = timed("write_regions", f.write_regions(&regions, &buf))
                        .await
                        .unwrap();
                    assert_eq!(n, buf.len() as u64, "write_regions count");
                })
            });
        }
    });
    let base = model.len() + 10 * KIB;
    let tiny: Vec<Extent> = (0..70_000u64)
        .map(|i| Extent {
            offset: base + 3 * i,
            len: 1,
        })
        .collect();
    let tiny_bytes = rng.bytes(tiny.len());
    for (e, b) in tiny.iter().zip(&tiny_bytes) {
        model.write(e.offset, std::slice::from_ref(b));
    }
    with_own_client(&cluster, async |client| {
        let f = timed("open", client.open(path)).await.unwrap();
        let regions = Regions::List(tiny.clone());
        let n = timed("write_regions", f.write_regions(&regions, &tiny_bytes))
            .await
            .unwrap();
        assert_eq!(n, tiny.len() as u64);
        let mut back = vec![0u8; tiny.len()];
        let n = timed("read_regions", f.read_regions(&regions, &mut back))
            .await
            .unwrap();
        assert_eq!(n, tiny.len() as u64);
        assert_bytes_eq(&back, &tiny_bytes, "70000 one-byte extents");
        assert_eq!(timed("size", f.size()).await.unwrap(), model.len());
        // Random unsorted, overlapping lists, partly past the end of the file.
        for round in 0..4 {
            let list: Vec<Extent> = (0..200)
                .map(|_| Extent {
                    offset: rng.range(0, model.len() + 200 * KIB),
                    len: rng.log_range(1, 100 * KIB),
                })
                .collect();
            let total: u64 = list.iter().map(|e| e.len).sum();
            let mut buf = vec![0x77u8; total as usize];
            let n = timed(
                "read_regions",
                f.read_regions(&Regions::List(list.clone()), &mut buf),
            )
            .await
            .unwrap();
            let mut want = Vec::with_capacity(total as usize);
            let mut before = 0;
            for e in &list {
                want.extend(model.range(e.offset, e.len));
                before += model.before_eof(e.offset, e.len);
            }
            assert_eq!(n, before, "round {round}: read_regions count");
            assert_bytes_eq(&buf, &want, &format!("round {round}: read_regions"));
        }
    });
    check_read_back(&cluster, path, &model, &mut rng, 2);
    check_datafiles(&cluster, &layout_report(&cluster, path), path, &model);
    cluster.assert_all_running();
}

#[test]
fn local_end_model_agrees_with_byte_by_byte_placement() {
    // The checker's own arithmetic, against the definition byte by byte.
    let mut rng = Rng::new(7);
    for _ in 0..300 {
        let s = rng.range(1, 40);
        let c = rng.range(1, 5);
        let off = rng.range(0, 300);
        let len = rng.range(0, 200);
        for idx in 0..c {
            let mut want = 0;
            for x in off..off + len {
                let u = x / s;
                if u % c == idx {
                    want = (u / c) * s + x % s + 1;
                }
            }
            assert_eq!(
                local_end(s, c, idx, off, len),
                want,
                "s={s} c={c} idx={idx} off={off} len={len}"
            );
        }
    }
}

#[test]
fn truncate_cuts_and_extends_every_datafile_to_its_share() {
    let cluster = Cluster::start();
    let mut rng = Rng::new(0x5eed_000b);
    let path = "/truncated";
    let (s, c) = (64 * KIB, 4u64);
    // Bytes datafile idx holds of a file of `size` bytes without holes.
    let share = |idx: u64, size: u64| {
        (size / (s * c)) * s + (size % (s * c)).saturating_sub(idx * s).min(s)
    };
    let first = rng.bytes((MIB + 5) as usize);
    let layout = with_own_client(&cluster, async |client| {
        let spec = LayoutSpec {
            stripe_size: Some(s),
            stripe_count: Some(c as u32),
            base: None,
            replicas: None,
        };
        let f = timed("create", client.create(path, 0o644, spec, true))
            .await
            .unwrap();
        timed("write", f.write_at(0, &first)).await.unwrap();
        f.layout().clone()
    });
    let disk_sizes = || -> Vec<u64> {
        layout
            .datafiles
            .iter()
            .map(|d| {
                std::fs::metadata(cluster.datafile_path(d.server as usize, d.handle))
                    .map(|m| m.len())
                    .unwrap_or(0)
            })
            .collect()
    };
    let mut model = Model::new();
    model.write(0, &first);
    // Cut in the middle of a stripe unit of datafile 0, then extend past the old end,
    // then write beyond the new end.
    for (step, size) in [(0, 300_000u64), (1, 5 * MIB + 1)] {
        with_own_client(&cluster, async |client| {
            timed("truncate", client.truncate(path, size))
                .await
                .unwrap();
        });
        model.data.resize(size as usize, 0);
        let want: Vec<u64> = (0..c).map(|i| share(i, size)).collect();
        assert_eq!(
            disk_sizes(),
            want,
            "step {step}: datafile sizes on disk after truncate to {size}"
        );
        check_read_back(&cluster, path, &model, &mut rng, 2);
    }
    let tail = rng.bytes(100_000);
    with_own_client(&cluster, async |client| {
        let f = timed("open", client.open(path)).await.unwrap();
        timed("write", f.write_at(6 * MIB, &tail)).await.unwrap();
    });
    model.write(6 * MIB, &tail);
    check_read_back(&cluster, path, &model, &mut rng, 2);
}
