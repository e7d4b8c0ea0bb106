//! Space on the data servers: `fallocate` in every mode pvfs offers and the block
//! counts (`st_blocks`) that report what the data servers allocate, through the client
//! library, on data servers whose file system lacks a mode or is full, and through the
//! FUSE mount, where `tests/fuse/alloc.c` checks the same calls it checks on a local
//! file system and `du` must add up to the datafiles' space on the servers' disks.
//! Every expectation about space is checked against the datafiles on disk
//! (`st_blocks` of the local files), never against a number the code under test
//! computed.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Cluster, Rng};
use pvfs_client::falloc::{KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE};
use pvfs_client::{Client, Errno, LayoutSpec};
use pvfs_proto::Layout;

/// Longest a client call may take here (`TestClient::run` scales it).
fn call() -> Duration {
    Duration::from_secs(120)
}

/// The local size and allocated bytes of each datafile of `layout`, from the disks.
fn on_disk(cluster: &Cluster, layout: &Layout) -> Vec<(u64, u64)> {
    layout
        .datafiles
        .iter()
        .map(
            |df| match std::fs::metadata(cluster.datafile_path(df.server as usize, df.handle)) {
                Ok(m) => (m.len(), m.blocks() * 512),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (0, 0),
                Err(e) => panic!("datafile {:#x}: {e}", df.handle),
            },
        )
        .collect()
}

/// Fallocate requests the client has sent so far.
fn fallocates(c: &Client) -> u64 {
    c.stats().per_op().get("Fallocate").copied().unwrap_or(0)
}

/// Checks that `path`'s size and blocks are what its datafiles on disk say: the size
/// by the stripe arithmetic, the blocks their allocation added up.
async fn check_against_disk(c: &Client, cluster: &Cluster, path: &str) -> pvfs_client::Attr {
    let a = c.stat(path).await.unwrap();
    let layout = a.layout().unwrap().clone();
    let disk = on_disk(cluster, &layout);
    let sizes: Vec<u64> = disk.iter().map(|d| d.0).collect();
    assert_eq!(a.size, layout.stripe().file_size(&sizes), "{path}: size");
    let allocated: u64 = disk.iter().map(|d| d.1).sum();
    assert_eq!(
        a.blocks * 512,
        allocated,
        "{path}: blocks against the disks"
    );
    a
}

#[test]
fn fallocate_modes_and_block_counts_through_the_client_library() {
    let cluster = Cluster::start();
    let tc = cluster.client();
    let cl = &cluster;
    let mut rng = Rng::new(0x5eed_a110);
    let pattern = rng.bytes(1_000_100);
    tc.run(call(), async |c| {
        let spec = LayoutSpec {
            stripe_size: Some(65536),
            stripe_count: Some(4),
            base: None,
            replicas: None,
        };
        let f = c.create("/f", 0o644, spec, true).await.unwrap();
        let layout = f.layout().clone();
        let stripe = layout.stripe();
        let a = check_against_disk(&c, cl, "/f").await;
        assert_eq!((a.size, a.blocks), (0, 0), "a new file");

        // Allocation over all four datafiles: one request each, the file grows, every
        // datafile gets its share, the space is there and reads as zeros.
        let sent = fallocates(&c);
        f.fallocate(0, 0, 300_000).await.unwrap();
        assert_eq!(fallocates(&c) - sent, 4, "one request per datafile");
        let a = check_against_disk(&c, cl, "/f").await;
        assert_eq!(a.size, 300_000);
        assert!(a.blocks * 512 >= 300_000, "{} blocks", a.blocks);
        for (i, (local, _)) in on_disk(cl, &layout).into_iter().enumerate() {
            assert_eq!(local, stripe.local_size(i as u64, 300_000), "datafile {i}");
        }
        let mut got = vec![1u8; 300_000];
        assert_eq!(f.read_at(0, &mut got).await.unwrap(), 300_000);
        assert!(got.iter().all(|&b| b == 0), "allocated bytes read as zeros");

        // Past the end, within one stripe unit: only the datafile holding it is asked,
        // and it alone gives the file its new size.
        let sent = fallocates(&c);
        let before = on_disk(cl, &layout);
        f.fallocate(0, 1_000_000, 100).await.unwrap();
        assert_eq!(fallocates(&c) - sent, 1, "one datafile holds the range");
        let a = check_against_disk(&c, cl, "/f").await;
        assert_eq!(a.size, 1_000_100);
        let (idx, _) = stripe.locate(1_000_099);
        for (i, (local, _)) in on_disk(cl, &layout).into_iter().enumerate() {
            if i as u64 == idx {
                assert_eq!(local, stripe.local_size(idx, 1_000_100));
            } else {
                assert_eq!(local, before[i].0, "datafile {i} untouched");
            }
        }

        // KEEP_SIZE: space past the end, size unchanged.
        let before = check_against_disk(&c, cl, "/f").await;
        f.fallocate(KEEP_SIZE, 2 << 20, 1 << 20).await.unwrap();
        let a = check_against_disk(&c, cl, "/f").await;
        assert_eq!(a.size, 1_000_100);
        assert!(
            a.blocks >= before.blocks + (1 << 20) / 512,
            "{} -> {} blocks",
            before.blocks,
            a.blocks
        );

        // A hole punched across datafiles reads as zeros, the rest as written, and
        // its space is freed (all but partial blocks at each datafile's run ends).
        f.write_at(0, &pattern).await.unwrap();
        let before = check_against_disk(&c, cl, "/f").await;
        f.fallocate(PUNCH_HOLE | KEEP_SIZE, 100_000, 200_000)
            .await
            .unwrap();
        let a = check_against_disk(&c, cl, "/f").await;
        assert_eq!(a.size, 1_000_100, "punching keeps the size");
        let freed = (before.blocks - a.blocks) * 512;
        assert!(
            freed >= 200_000 - 8 * 4096,
            "{freed} bytes freed by a 200000-byte hole"
        );
        let mut got = vec![0u8; pattern.len()];
        assert_eq!(f.read_at(0, &mut got).await.unwrap(), pattern.len());
        let mut want = pattern.clone();
        want[100_000..300_000].fill(0);
        common::assert_bytes_eq(&got, &want, "after the punch");

        // ZERO_RANGE where the servers' file system has it (ext4, xfs); tmpfs has
        // not (the test below).
        match f.fallocate(ZERO_RANGE, 50_000, 10_000).await {
            Ok(()) => {
                want[50_000..60_000].fill(0);
                f.fallocate(ZERO_RANGE, 3_000_000, 1000).await.unwrap();
                let a = check_against_disk(&c, cl, "/f").await;
                assert_eq!(a.size, 3_001_000, "zeroing past the end grows the file");
                want.resize(3_001_000, 0);
            }
            Err(e) => assert_eq!(e.errno, Errno::EOPNOTSUPP, "{e}"),
        }
        let mut got = vec![1u8; want.len()];
        assert_eq!(f.read_at(0, &mut got).await.unwrap(), want.len());
        common::assert_bytes_eq(&got, &want, "after zeroing");

        // Bad arguments fail before any request; nothing changed.
        let sent = fallocates(&c);
        let cases = [
            (0, 0, 0, Errno::EINVAL),
            (0x08, 0, 65536, Errno::EOPNOTSUPP),
            (0x20, 0, 65536, Errno::EOPNOTSUPP),
            (PUNCH_HOLE, 0, 4096, Errno::EOPNOTSUPP),
            (
                PUNCH_HOLE | ZERO_RANGE | KEEP_SIZE,
                0,
                4096,
                Errno::EOPNOTSUPP,
            ),
            (0, i64::MAX as u64, 2, Errno::EFBIG),
            (0, u64::MAX, 2, Errno::EFBIG),
        ];
        for (mode, off, len, errno) in cases {
            let e = f.fallocate(mode, off, len).await.unwrap_err();
            assert_eq!(e.errno, errno, "mode {mode:#x} at {off} for {len}: {e}");
        }
        assert_eq!(fallocates(&c), sent, "refused without a request");
        let mut again = vec![1u8; want.len()];
        f.read_at(0, &mut again).await.unwrap();
        assert!(again == got, "a refused fallocate changed the file");

        // A sparse file takes the space of what was written, not of its size: 100
        // bytes at 300000 of a new file are on one datafile, in one block.
        let s = c
            .create("/sparse", 0o644, LayoutSpec::default(), true)
            .await
            .unwrap();
        s.write_at(300_000, &[7; 100]).await.unwrap();
        let a = check_against_disk(&c, cl, "/sparse").await;
        assert_eq!(a.size, 300_100);
        assert!(
            a.blocks > 0 && a.blocks * 512 <= 16384,
            "{} blocks for 100 bytes",
            a.blocks
        );
        // Listings carry the same counts, from the same requests.
        c.symlink("f", "/link").await.unwrap();
        c.mkdir("/d", 0o755).await.unwrap();
        for (entry, attr) in c.readdir_plus("/", true).await.unwrap() {
            let attr = attr.unwrap();
            let want = match entry.name.as_str() {
                "f" | "sparse" => c.stat(&format!("/{}", entry.name)).await.unwrap().blocks,
                "d" => 8,
                "link" => 0,
                other => panic!("unexpected entry {other}"),
            };
            assert_eq!(attr.blocks, want, "{} in a listing", entry.name);
        }
        assert_eq!(
            c.stat("/d").await.unwrap().blocks,
            8,
            "a directory: one block"
        );
        assert_eq!(c.lstat("/link").await.unwrap().blocks, 0, "a symlink: none");
    });
}

#[test]
fn fallocate_on_data_servers_that_lack_a_mode_or_space() {
    const TEST: &str = "fallocate_on_data_servers_that_lack_a_mode_or_space";
    // s3 holds data only, on a 40 MiB tmpfs: tmpfs punches holes but has no
    // ZERO_RANGE, and fills up.
    let cluster = Cluster::builder().meta_servers(3).configure();
    let Some(_tmpfs) = common::small_storage(&cluster, "s3", "40m", TEST) else {
        return;
    };
    cluster.start_all();
    let s3_index = cluster.index("s3") as u32;
    let tc = cluster.client();
    let cl = &cluster;
    tc.run(call(), async |c| {
        // One datafile, on s3.
        let only_s3 = LayoutSpec {
            stripe_size: Some(65536),
            stripe_count: Some(1),
            base: Some(s3_index),
            replicas: None,
        };
        let f = c.create("/t", 0o644, only_s3, true).await.unwrap();
        assert_eq!(f.layout().datafiles[0].server, s3_index);
        f.write_at(0, &[0xcc; 65536]).await.unwrap();
        // What tmpfs does: allocation and punching.
        f.fallocate(KEEP_SIZE, 65536, 1 << 20).await.unwrap();
        f.fallocate(PUNCH_HOLE | KEEP_SIZE, 4096, 4096)
            .await
            .unwrap();
        let mut got = vec![0u8; 65536];
        f.read_at(0, &mut got).await.unwrap();
        assert!(got[4096..8192].iter().all(|&b| b == 0));
        assert!(got[..4096].iter().chain(&got[8192..]).all(|&b| b == 0xcc));
        // What it does not: EOPNOTSUPP, cleanly, and the data is untouched.
        let e = f.fallocate(ZERO_RANGE, 0, 4096).await.unwrap_err();
        assert_eq!(e.errno, Errno::EOPNOTSUPP, "{e}");
        let mut again = vec![0u8; 65536];
        f.read_at(0, &mut again).await.unwrap();
        assert!(again == got, "a refused ZERO_RANGE changed the file");
        // More than the disk holds: ENOSPC from the server, passed through.
        let before = check_against_disk(&c, cl, "/t").await;
        let e = f.fallocate(0, 0, 100 << 20).await.unwrap_err();
        assert_eq!(e.errno, Errno::ENOSPC, "{e}");
        let a = check_against_disk(&c, cl, "/t").await;
        assert_eq!(
            a.size, before.size,
            "a failed allocation does not grow the file"
        );
        // The server is fine, the file still works, and space can still be had.
        f.fallocate(0, 65536, 1 << 20).await.unwrap();
        assert_eq!(c.stat("/t").await.unwrap().size, 65536 + (1 << 20));
    });
    drop(tc);
    cluster.stop_clean("s3");
}

/// Compiles `tests/fuse/alloc.c` into `dir`.
fn build_alloc(dir: &Path) -> PathBuf {
    let exe = dir.join("alloc");
    common::compile_c(
        "fuse/alloc.c",
        &exe,
        &["-O1", "-Wall", "-Wextra", "-Werror"],
    );
    exe
}

/// Runs the checker on `dir` (`pvfs` adds the checks only pvfs makes); fails the
/// test with its report unless every check held.
fn run_alloc(exe: &Path, dir: &Path, pvfs: bool, what: &str, log: &dyn Fn() -> String) {
    let mut cmd = Command::new(exe);
    cmd.arg(dir);
    if pvfs {
        cmd.arg("pvfs");
    }
    let out = mount::run_for(&mut cmd, Duration::from_secs(120));
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text.lines().last().unwrap_or("");
    assert!(
        out.status.success() && summary.starts_with("# ") && summary.ends_with(" 0 failed"),
        "alloc.c on {what} ({}):\n{text}\nstderr: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        log()
    );
    eprintln!("alloc.c on {what}: {summary}");
}

#[test]
fn fallocate_and_du_on_the_mount_agree_with_a_local_file_system_and_the_disks() {
    if !common::have_command("cc") {
        common::skip(
            "fallocate_and_du_on_the_mount_agree_with_a_local_file_system_and_the_disks",
            "`cc` is not installed (scripts/install-deps)",
        );
        return;
    }
    let cluster = Cluster::start();
    let m = mount::Mount::start(&cluster, &[]);
    let exe = build_alloc(m.scratch());
    // The same checks on a local file system first: they are POSIX's, not ours.
    let local = tempfile::tempdir().unwrap();
    run_alloc(
        &exe,
        local.path(),
        false,
        "a local file system",
        &String::new,
    );
    let dir = m.join("alloc");
    std::fs::create_dir(&dir).unwrap();
    run_alloc(&exe, &dir, true, "the mount", &|| m.log_text());

    // du of a sparse tree counts what the data servers allocate: the datafiles'
    // blocks on disk, plus one 4 KiB block per directory, nothing for symlinks.
    let tree = m.join("tree");
    std::fs::create_dir(&tree).unwrap();
    std::fs::create_dir(tree.join("sub")).unwrap();
    let mut rng = Rng::new(0x5eed_d00d);
    let write_at = |p: &Path, off: u64, len: usize, rng: &mut Rng| {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(p)
            .unwrap();
        f.write_all_at(&rng.bytes(len), off).unwrap();
    };
    write_at(&tree.join("a"), 300_000, 100, &mut rng);
    write_at(&tree.join("sub/b"), 10 << 20, 4096, &mut rng);
    write_at(&tree.join("sub/c"), 0, 200_000, &mut rng);
    let holes = std::fs::File::create(tree.join("sub/holes")).unwrap();
    holes.set_len(64 << 20).unwrap();
    drop(holes);
    std::os::unix::fs::symlink("a", tree.join("sub/link")).unwrap();
    let du = mount::sh(
        &format!("du -s -B1 {}", tree.display()),
        Duration::from_secs(60),
    );
    let du: u64 = du.split_whitespace().next().unwrap().parse().unwrap();
    let apparent = mount::sh(
        &format!("du -s -B1 --apparent-size {}", tree.display()),
        Duration::from_secs(60),
    );
    let apparent: u64 = apparent.split_whitespace().next().unwrap().parse().unwrap();
    let tc = cluster.client();
    let disk = tc.run(call(), async |c| {
        let mut sum = 0;
        for p in ["/tree/a", "/tree/sub/b", "/tree/sub/c", "/tree/sub/holes"] {
            let layout = c.stat(p).await.unwrap().layout().unwrap().clone();
            sum += on_disk(&cluster, &layout).iter().map(|d| d.1).sum::<u64>();
        }
        sum
    });
    assert_eq!(
        du,
        disk + 2 * 4096,
        "du against the datafiles on the servers' disks"
    );
    assert!(
        du < 1 << 20 && apparent > 74 << 20,
        "a sparse tree: {du} bytes used, {apparent} apparent"
    );
    let st = std::fs::metadata(tree.join("sub/holes")).unwrap();
    assert_eq!((st.len(), st.blocks()), (64 << 20, 0), "a file of one hole");
}
