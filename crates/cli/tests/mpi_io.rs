//! MPI-IO on the FUSE mount: `tests/mpi/stripes.c`, built here with
//! MPICH's `mpicc`, runs as 4 ranks under `mpiexec`. Each rank writes its blocks of one
//! shared file through a strided file view with `MPI_File_write_at_all`, reads them
//! back with `MPI_File_read_at_all` and verifies them (ROMIO's generic `ufs:` driver on
//! the mount). The test then reads the file through the client library and checks
//! every byte against the pattern, so a program that only agrees with itself cannot
//! pass. It runs with ROMIO's defaults (two-phase collective buffering) and with
//! collective buffering and data sieving off (every rank writes its own blocks).
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::Cluster;
use mount::{run_for, Mount};

/// Longest an MPI run may take (`run_for` and `TestClient::run` scale it by
/// `PVFS_TEST_SLOWDOWN`).
fn run_deadline() -> Duration {
    Duration::from_secs(180)
}
const RANKS: u64 = 4;

/// The byte rank `rank` writes at index `i` of its block number `b` (as stripes.c).
fn pattern(rank: u64, b: u64, i: u64) -> u8 {
    ((rank * 131 + b * 17 + i * 7) & 0xff) as u8
}

/// Runs stripes under mpiexec with `RANKS` ranks; returns its summary line.
fn run(exe: &Path, file: &Path, block: u64, blocks: u64, hints: Option<&Path>) -> String {
    let mut cmd = Command::new("mpiexec");
    cmd.args(["-n", &RANKS.to_string()])
        .arg(exe)
        .arg(format!("ufs:{}", file.display()))
        .arg(block.to_string())
        .arg(blocks.to_string());
    if let Some(h) = hints {
        cmd.env("ROMIO_HINTS", h);
    }
    let out = run_for(&mut cmd, run_deadline());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("verified=yes"),
        "MPI run failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn mpi_io_strided_collective_writes_and_reads_on_the_mount() {
    for tool in ["mpicc", "mpiexec"] {
        if !common::have_command(tool) {
            common::skip(
                "mpi_io_strided_collective_writes_and_reads_on_the_mount",
                &format!("{tool} is not installed (scripts/install-deps installs mpich)"),
            );
            return;
        }
    }
    let cluster = Cluster::start();
    let mut m = Mount::start(&cluster, &[]);
    let local = tempfile::tempdir().unwrap();
    let exe = common::mpicc(local.path(), "stripes");
    let hints = local.path().join("romio-hints");
    std::fs::write(
        &hints,
        "romio_cb_write disable\nromio_cb_read disable\nromio_ds_write disable\nromio_ds_read disable\n",
    )
    .unwrap();

    // Blocks smaller than a stripe and blocks of several stripes; default hints and
    // independent I/O.
    let cases: [(&str, u64, u64, Option<&Path>); 3] = [
        ("small.dat", 10_000, 40, None),
        ("big.dat", 1 << 20, 8, None),
        ("independent.dat", 200_000, 12, Some(&hints)),
    ];
    let tc = cluster.client();
    for (name, block, blocks, h) in cases {
        let line = run(&exe, &m.join(name), block, blocks, h);
        eprintln!("{name}: {}", line.trim());
        let want_len = RANKS * block * blocks;
        let got = tc.run(run_deadline(), async |c| {
            let f = c.open(&format!("/{name}")).await.unwrap();
            let mut buf = vec![0u8; want_len as usize + 1];
            let n = f.read_at(0, &mut buf).await.unwrap();
            buf.truncate(n);
            buf
        });
        assert_eq!(got.len() as u64, want_len, "{name}: file size");
        for (off, &byte) in got.iter().enumerate() {
            let off = off as u64;
            let g = off / block;
            let (rank, b, i) = (g % RANKS, g / RANKS, off % block);
            assert_eq!(
                byte,
                pattern(rank, b, i),
                "{name}: byte {off} (rank {rank}, block {b}, index {i})"
            );
        }
    }
    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());
}
