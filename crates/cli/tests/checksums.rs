//! Checksums of datafile bytes (`docs/storage-format.md`, "Checksums") on real
//! server processes. A byte changed on disk behind a server's back (what a failing
//! disk does) is never served: with two copies, the read takes the block from the
//! other copy and mends this one (also past a read's first frame, which waits for
//! it), and `pvfs scrub` mends the copies no read met; a block damaged in every
//! copy fails the read with EIO and is reported by the scrub;
//! with one copy, the read fails with EIO naming the block, and the scrub reports
//! it and exits non-zero. After a reboot (the record of the boot in which the sums
//! last held names another), such a block is taken as it is and summed again, until
//! a whole scrub makes the sums sure again. A paced scrub (`scrub_bandwidth`) takes
//! several requests per server, each going on where the last one stopped.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use common::{assert_bytes_eq, Cluster, Rng, TestClient};
use pvfs_client::LayoutSpec;

/// Bytes per checksum.
const BLOCK: u64 = 4096;

/// Changes byte `at` of the file at `path` (a datafile copy on a server's disk).
fn damage(path: &Path, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x20], at).unwrap();
}

/// One datafile: stripe count 1.
fn one_datafile() -> LayoutSpec {
    LayoutSpec {
        stripe_count: Some(1),
        ..LayoutSpec::default()
    }
}

/// Writes `data` to new file `path`, synced; its datafile and the servers of its
/// copies.
fn write_file(tc: &TestClient, path: &str, data: &[u8]) -> (u64, Vec<u32>) {
    tc.run(Duration::from_secs(60), async |c| {
        let f = c.create(path, 0o644, one_datafile(), true).await.unwrap();
        f.write_at(0, data).await.unwrap();
        f.fsync().await.unwrap();
        let d = &f.layout().datafiles[0];
        (d.handle, d.replicas().collect())
    })
}

/// Reads file `path` whole (`len` bytes), or its error.
fn read_file(tc: &TestClient, path: &str, len: usize) -> Result<Vec<u8>, pvfs_client::Error> {
    tc.run(Duration::from_secs(60), async |c| {
        let f = c.open(path).await?;
        let mut buf = vec![0u8; len];
        let n = f.read_at(0, &mut buf).await?;
        buf.truncate(n);
        Ok(buf)
    })
}

fn scrub(cluster: &Cluster) -> (bool, serde_json::Value) {
    let out = cluster.run_cli(&["scrub", "--json"]);
    (out.status.success(), out.json_any())
}

#[test]
fn a_damaged_copy_is_read_from_the_other_and_a_scrub_mends_the_rest() {
    let cluster = common::with_copies(4, 2);
    let tc = TestClient::new(cluster.config().clone());
    let data = Rng::new(11).bytes(256 << 10);
    let (handle, copies) = write_file(&tc, "/f", &data);
    assert_eq!(copies.len(), 2, "{copies:?}");
    let path = |s: u32| cluster.datafile_path(s as usize, handle);
    for &s in &copies {
        assert_eq!(std::fs::read(path(s)).unwrap(), data, "copy on server {s}");
    }
    // A clean file system: the scrub reads every byte of both copies, finds nothing.
    let (ok, clean) = scrub(&cluster);
    assert!(ok, "{clean}");
    assert_eq!(clean["damaged"], 0, "{clean}");
    assert!(
        clean["bytes"].as_u64().unwrap() >= 2 * data.len() as u64,
        "{clean}"
    );
    // Each copy damaged in a block of its own: whichever copy serves a read takes
    // that block from the other.
    damage(&path(copies[0]), 2 * BLOCK + 5);
    damage(&path(copies[1]), 6 * BLOCK + 5);
    for s in &copies {
        assert_ne!(std::fs::read(path(*s)).unwrap(), data, "damaged on disk");
    }
    for _ in 0..3 {
        let got = read_file(&tc, "/f", data.len()).unwrap();
        assert_bytes_eq(
            &got,
            &data,
            "the file read with a damaged block in each copy",
        );
    }
    let (ok, found) = scrub(&cluster);
    assert!(ok, "{found}");
    assert_eq!(found["unmended"], serde_json::json!([]), "{found}");
    assert_eq!(found["mended"], found["damaged"], "{found}");
    for &s in &copies {
        assert_eq!(
            std::fs::read(path(s)).unwrap(),
            data,
            "copy on server {s} mended"
        );
    }
    // A block no read meets is found by the scrub alone, and mended.
    damage(&path(copies[1]), 40 * BLOCK + 1);
    let (ok, found) = scrub(&cluster);
    assert!(ok, "{found}");
    assert_eq!(
        (found["damaged"].as_u64(), found["mended"].as_u64()),
        (Some(1), Some(1)),
        "{found}"
    );
    assert_eq!(std::fs::read(path(copies[1])).unwrap(), data);
    // Past the first frame of a read (4 MiB), in both copies: the stream waits for
    // the block to be mended before it sends the frame that holds it.
    let big = Rng::new(13).bytes(9 << 20);
    let (handle, copies) = write_file(&tc, "/big", &big);
    let path = |s: u32| cluster.datafile_path(s as usize, handle);
    for &s in &copies {
        damage(&path(s), (6 << 20) + 3);
    }
    // Whichever copy serves finds the other's block damaged too: the read fails
    // (after its first frame), and nothing damaged is served; a scrub can mend
    // neither.
    let e = read_file(&tc, "/big", big.len()).unwrap_err();
    assert_eq!(e.errno, pvfs_proto::Errno::EIO, "{e}");
    let (ok, found) = scrub(&cluster);
    assert!(!ok, "{found}");
    assert_eq!(
        found["unmended"].as_array().map(Vec::len),
        Some(2),
        "{found}"
    );
    // One copy put right by hand: the read goes on past the block (mending the
    // other copy if that is the one serving), and a scrub mends whatever is left.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path(copies[0]))
        .unwrap();
    f.write_all_at(&big[6 << 20..(6 << 20) + BLOCK as usize], 6 << 20)
        .unwrap();
    let got = read_file(&tc, "/big", big.len()).unwrap();
    assert_bytes_eq(&got, &big, "the big file, one copy put right");
    let (ok, found) = scrub(&cluster);
    assert!(ok, "{found}");
    assert_eq!(found["unmended"], serde_json::json!([]), "{found}");
    for &s in &copies {
        assert!(std::fs::read(path(s)).unwrap() == big, "copy on server {s}");
    }
    let fsck = cluster.run_cli(&["fsck", "--json"]);
    assert_eq!(fsck.json_any()["problems"], serde_json::json!([]));
    cluster.assert_all_running();
}

#[test]
fn a_damaged_block_of_a_single_copy_fails_its_read_until_a_reboot_leaves_it_unsure() {
    let cluster = Cluster::builder().servers(2).start();
    let tc = TestClient::new(cluster.config().clone());
    let data = Rng::new(12).bytes(64 << 10);
    let (handle, copies) = write_file(&tc, "/one", &data);
    assert_eq!(copies.len(), 1);
    let server = cluster.config().servers[copies[0] as usize].name.clone();
    let path = cluster.datafile_path(copies[0] as usize, handle);
    damage(&path, 3 * BLOCK + 7);
    let e = read_file(&tc, "/one", data.len()).unwrap_err();
    assert_eq!(e.errno, pvfs_proto::Errno::EIO, "{e}");
    assert!(e.to_string().contains("checksum"), "{e}");
    // The other blocks still read.
    let head = tc.run(Duration::from_secs(60), async |c| {
        let f = c.open("/one").await.unwrap();
        let mut buf = vec![0u8; 3 * BLOCK as usize];
        f.read_at(0, &mut buf).await.unwrap();
        buf
    });
    assert_bytes_eq(&head, &data[..3 * BLOCK as usize], "the blocks before it");
    let out = cluster.run_cli(&["scrub", "--json"]);
    assert!(
        !out.status.success(),
        "a block left damaged fails the scrub"
    );
    let found = out.json_any();
    assert_eq!(found["damaged"], 1, "{found}");
    assert_eq!(found["unmended"][0]["offset"], 3 * BLOCK, "{found}");
    assert!(
        cluster
            .log(&server)
            .contains("no other copy to take it from"),
        "the server logs the damage"
    );
    // Another boot since the sums last held: the block is taken as it is.
    cluster.stop_clean(&server);
    let record = cluster.storage(&server).join("data/sums");
    let mut b = std::fs::read(&record).unwrap();
    b[24] ^= 0xff;
    std::fs::write(&record, &b).unwrap();
    cluster.restart(&server);
    let unsure = |cluster: &Cluster| {
        let status = cluster.run_cli(&["status", "--json"]).json_any();
        status["servers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["checksums_unsure"] == true)
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        unsure(&cluster),
        vec![server.clone()],
        "pvfs status says so"
    );
    let got = read_file(&tc, "/one", data.len()).unwrap();
    assert_eq!(got, std::fs::read(&path).unwrap(), "its bytes as they are");
    let (ok, after) = scrub(&cluster);
    assert!(ok, "{after}");
    assert_eq!(
        after["unsure"],
        serde_json::json!([]),
        "a whole scrub: sure again"
    );
    assert!(unsure(&cluster).is_empty());
    // Sure again, across a restart: the next damage fails its read.
    cluster.stop_clean(&server);
    cluster.restart(&server);
    damage(&path, 7 * BLOCK);
    let e = read_file(&tc, "/one", data.len()).unwrap_err();
    assert_eq!(e.errno, pvfs_proto::Errno::EIO, "{e}");
    cluster.assert_all_running();
}

#[test]
fn a_paced_scrub_goes_on_from_where_each_answer_stopped() {
    // 1 MiB/s, and each answer within a third of a 3 s request timeout: a 4 MiB
    // datafile takes several requests, each going on from where the last stopped.
    let cluster = Cluster::builder()
        .servers(2)
        .request_timeout("3s")
        .set("scrub_bandwidth", r#""1M""#)
        .start();
    let tc = TestClient::new(cluster.config().clone());
    let data = Rng::new(14).bytes(4 << 20);
    let (handle, copies) = write_file(&tc, "/paced", &data);
    let path = cluster.datafile_path(copies[0] as usize, handle);
    let far = (7 << 19) + 11;
    damage(&path, far);
    let started = std::time::Instant::now();
    let out = cluster.run_cli(&["scrub", "--json"]);
    let took = started.elapsed();
    let found = out.json_any();
    assert!(!out.status.success(), "{found}");
    assert_eq!(found["damaged"], 1, "{found}");
    assert_eq!(
        found["unmended"][0]["offset"],
        far - far % BLOCK,
        "the block near the end was reached: {found}"
    );
    assert!(
        found["bytes"].as_u64().unwrap() >= data.len() as u64 - BLOCK,
        "{found}"
    );
    assert!(
        took >= Duration::from_secs(3),
        "4 MiB at 1 MiB/s took {took:?}"
    );
}
