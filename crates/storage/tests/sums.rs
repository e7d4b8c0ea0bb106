//! Tests of the checksums kept with datafile bytes (`pvfs_storage::sums`).
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use pvfs_proto::message::falloc;
use pvfs_storage::sums::SUM_BLOCK;
use pvfs_storage::{DataBackend, FileData, StorageError};

const B: u64 = SUM_BLOCK;

fn datafile(dir: &Path, h: u64) -> PathBuf {
    dir.join(format!("data/{:02x}/{h:016x}", h & 0xff))
}

fn sidecar(dir: &Path, h: u64) -> PathBuf {
    datafile(dir, h).with_extension("sum")
}

/// Changes byte `at` of datafile `h` behind the store's back (what a failing disk
/// or a stray write does).
fn damage(dir: &Path, h: u64, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(datafile(dir, h))
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x40], at).unwrap();
}

/// The offset of the block a read found damaged, or panics.
fn bad_at(r: Result<usize, StorageError>) -> u64 {
    match r {
        Err(StorageError::BadSum { offset, .. }) => offset,
        other => panic!("expected a block not matching its sum, got {other:?}"),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

#[test]
fn a_damaged_block_is_refused_and_the_others_are_read() {
    let d = tempfile::tempdir().unwrap();
    let fd = FileData::open(d.path()).unwrap();
    let h = 0x51;
    let data = pattern(3 * B as usize + 100, 7);
    fd.write_at(h, 0, &data).unwrap();
    assert!(sidecar(d.path(), h).exists());
    let mut buf = vec![0u8; data.len()];
    assert_eq!(fd.read_at(h, 0, &mut buf).unwrap(), data.len());
    assert_eq!(buf, data);
    damage(d.path(), h, B + 17);
    // Any read touching the block fails, naming it; the others still read.
    assert_eq!(bad_at(fd.read_at(h, 0, &mut buf)), B);
    assert_eq!(bad_at(fd.read_at(h, B + 17, &mut buf[..1])), B);
    assert_eq!(bad_at(fd.read_at(h, 2 * B - 1, &mut buf[..2])), B);
    assert_eq!(
        fd.read_at(h, 0, &mut buf[..B as usize]).unwrap(),
        B as usize
    );
    assert_eq!(fd.read_at(h, 2 * B, &mut buf).unwrap(), B as usize + 100);
    assert_eq!(&buf[..B as usize + 100], &data[2 * B as usize..]);
    // The last, partial block is checked too, and so is a hole.
    damage(d.path(), h, 3 * B + 99);
    assert_eq!(bad_at(fd.read_at(h, 3 * B, &mut buf)), 3 * B);
    fd.write_at(h, 10 * B, b"far").unwrap();
    assert_eq!(
        fd.read_at(h, 5 * B, &mut buf[..B as usize]).unwrap(),
        B as usize
    );
    damage(d.path(), h, 5 * B + 1);
    assert_eq!(bad_at(fd.read_at(h, 5 * B, &mut buf[..1])), 5 * B);
    // Rewriting a damaged block whole mends it.
    fd.write_at(h, B, &data[B as usize..2 * B as usize])
        .unwrap();
    assert_eq!(
        fd.read_at(h, B, &mut buf[..B as usize]).unwrap(),
        B as usize
    );
    // So does the check of bytes about to be sent from the file.
    assert_eq!(
        match fd.check_runs(h, &[(5 * B - 10, 20)]) {
            Err(StorageError::BadSum { offset, .. }) => offset,
            other => panic!("{other:?}"),
        },
        5 * B
    );
    fd.check_runs(h, &[(0, B), (2 * B, B), (10 * B, 100)])
        .unwrap();
    // Reads from the page cache only find it too (and leave it to a blocking read).
    let mut small = [0u8; 8];
    assert!(fd
        .read_runs_if_cached(h, &[(5 * B, 8)], &mut small)
        .is_none());
    assert!(fd.read_runs_if_cached(h, &[(B, 8)], &mut small).is_some());
}

#[test]
fn a_datafile_without_sums_is_read_unchecked() {
    // The negative control: what the sums catch passes without them.
    let d = tempfile::tempdir().unwrap();
    let h = 0x52;
    {
        let fd = FileData::open(d.path()).unwrap();
        fd.write_at(h, 0, &pattern(2 * B as usize, 3)).unwrap();
    }
    std::fs::remove_file(sidecar(d.path(), h)).unwrap();
    let fd = FileData::open(d.path()).unwrap();
    damage(d.path(), h, 5);
    let mut buf = vec![0u8; 2 * B as usize];
    assert_eq!(fd.read_at(h, 0, &mut buf).unwrap(), buf.len());
    assert_ne!(buf, pattern(2 * B as usize, 3));
    // Written again, it stays without sums (and readable).
    fd.write_at(h, 3, b"abc").unwrap();
    assert!(!sidecar(d.path(), h).exists());
    assert!(fd.file_for_send(h).unwrap().is_some());
}

#[test]
fn a_change_cut_short_between_sums_and_bytes_still_reads() {
    let d = tempfile::tempdir().unwrap();
    let fd = FileData::open(d.path()).unwrap();
    let h = 0x53;
    fd.write_at(h, 0, &pattern(2 * B as usize, 1)).unwrap();
    // The sums of a write reached the sidecar, its bytes did not (the process was
    // killed in between): the old bytes hold (`prev`).
    let before = std::fs::read(datafile(d.path(), h)).unwrap();
    fd.write_at(h, 100, &pattern(B as usize, 9)).unwrap();
    std::fs::write(datafile(d.path(), h), &before).unwrap();
    let mut buf = vec![0u8; 2 * B as usize];
    assert_eq!(fd.read_at(h, 0, &mut buf).unwrap(), buf.len());
    assert_eq!(buf, before);
    // A block first written then: it was a hole, and zeros hold.
    fd.write_at(h, 4 * B, &pattern(10, 2)).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(datafile(d.path(), h))
        .unwrap();
    f.write_all_at(&[0u8; 10], 4 * B).unwrap();
    assert_eq!(fd.read_at(h, 4 * B, &mut buf).unwrap(), 10);
    // But other bytes do not.
    f.write_all_at(&[1u8; 10], 4 * B).unwrap();
    assert_eq!(bad_at(fd.read_at(h, 4 * B, &mut buf)), 4 * B);
}

#[test]
fn a_shortening_cut_short_before_its_sums_leaves_nothing_to_refuse() {
    let d = tempfile::tempdir().unwrap();
    let h = 0x54;
    let data = pattern(3 * B as usize, 4);
    {
        let fd = FileData::open(d.path()).unwrap();
        fd.write_at(h, 0, &data).unwrap();
        let sums = std::fs::read(sidecar(d.path(), h)).unwrap();
        fd.truncate(h, B / 2).unwrap();
        // Killed after the bytes were cut, before the entries past the end were.
        let mut kept = std::fs::read(sidecar(d.path(), h)).unwrap();
        kept.extend_from_slice(&sums[kept.len()..]);
        std::fs::write(sidecar(d.path(), h), &kept).unwrap();
    }
    let fd = FileData::open(d.path()).unwrap();
    fd.truncate(h, 3 * B).unwrap();
    let mut buf = vec![0xffu8; 3 * B as usize];
    assert_eq!(fd.read_at(h, 0, &mut buf).unwrap(), buf.len());
    assert_eq!(&buf[..B as usize / 2], &data[..B as usize / 2]);
    assert!(buf[B as usize / 2..].iter().all(|&b| b == 0));
}

#[test]
fn sums_follow_truncates_punches_and_zeroed_ranges() {
    let d = tempfile::tempdir().unwrap();
    let fd = FileData::open(d.path()).unwrap();
    let h = 0x55;
    let mut model = pattern(6 * B as usize, 5);
    fd.write_at(h, 0, &model).unwrap();
    let check = |model: &[u8]| {
        let mut buf = vec![0u8; model.len() + 10];
        let n = fd.read_at(h, 0, &mut buf).unwrap();
        assert_eq!(&buf[..n], model);
    };
    fd.fallocate(h, falloc::PUNCH_HOLE | falloc::KEEP_SIZE, 100, 2 * B)
        .unwrap();
    model[100..100 + 2 * B as usize].fill(0);
    check(&model);
    fd.fallocate(h, falloc::ZERO_RANGE | falloc::KEEP_SIZE, 4 * B - 7, 14)
        .unwrap();
    model[4 * B as usize - 7..4 * B as usize + 7].fill(0);
    check(&model);
    fd.fallocate(h, falloc::ZERO_RANGE, 6 * B - 1, B).unwrap();
    model[6 * B as usize - 1] = 0;
    model.resize(7 * B as usize - 1, 0);
    check(&model);
    fd.truncate(h, 2 * B + 3).unwrap();
    model.truncate(2 * B as usize + 3);
    check(&model);
    fd.truncate(h, 5 * B).unwrap();
    model.resize(5 * B as usize, 0);
    check(&model);
    // A punched block that is not zeros any more is refused.
    damage(d.path(), h, B + 1);
    assert_eq!(bad_at(fd.read_at(h, B, &mut [0u8; 4])), B);
}

#[test]
fn a_punch_across_a_huge_sparse_datafile_takes_bounded_memory_and_space() {
    use std::os::unix::fs::MetadataExt;
    let d = tempfile::tempdir().unwrap();
    let fd = FileData::open(d.path()).unwrap();
    let h = 0x5a;
    fd.write_at(h, 0, b"head").unwrap();
    fd.write_at(h, 8 << 30, b"tail").unwrap();
    fd.fallocate(h, falloc::PUNCH_HOLE | falloc::KEEP_SIZE, 0, (8 << 30) + 2)
        .unwrap();
    let mut buf = [0xffu8; 6];
    assert_eq!(fd.read_at(h, 8 << 30, &mut buf).unwrap(), 4);
    assert_eq!(&buf[..4], b"\0\0il");
    assert_eq!(fd.read_at(h, 0, &mut buf).unwrap(), 6);
    assert_eq!(buf, [0u8; 6]);
    // Only the two blocks' entries were written: the sidecar stays sparse.
    let sidecar = std::fs::metadata(sidecar(d.path(), h)).unwrap();
    assert!(
        sidecar.blocks() * 512 <= 64 << 10,
        "{} bytes",
        sidecar.blocks() * 512
    );
}

#[test]
fn concurrent_writers_of_one_block_leave_sums_that_match() {
    let d = tempfile::tempdir().unwrap();
    let fd = std::sync::Arc::new(FileData::open(d.path()).unwrap());
    let h = 0x56;
    fd.write_at(h, 0, &[0u8; 2 * B as usize]).unwrap();
    let writers: Vec<_> = (0..4u8)
        .map(|t| {
            let fd = fd.clone();
            std::thread::spawn(move || {
                for i in 0..300u64 {
                    // Byte runs of each thread, interleaved within the same blocks.
                    let at = (i * 37 + u64::from(t) * 1000) % (2 * B - 64);
                    fd.write_at(h, at, &[t + 1; 7]).unwrap();
                }
            })
        })
        .collect();
    let reader = {
        let fd = fd.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 2 * B as usize];
            for _ in 0..300 {
                fd.read_at(h, 0, &mut buf).unwrap();
                fd.read_at(h, 5, &mut buf[..100]).unwrap();
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    reader.join().unwrap();
    let mut buf = vec![0u8; 2 * B as usize];
    assert_eq!(fd.read_at(h, 0, &mut buf).unwrap(), buf.len());
}

#[test]
fn after_a_reboot_a_block_that_does_not_match_is_unsure_until_a_scrub() {
    let d = tempfile::tempdir().unwrap();
    let h = 0x57;
    {
        let fd = FileData::open(d.path()).unwrap();
        assert!(!fd.sums_unsure());
        fd.write_at(h, 0, &pattern(B as usize, 6)).unwrap();
    }
    // Another boot: the record names a verifier that is not this boot's.
    let record = d.path().join("data/sums");
    let mut b = std::fs::read(&record).unwrap();
    b[24] ^= 0xff;
    std::fs::write(&record, &b).unwrap();
    let fd = FileData::open(d.path()).unwrap();
    assert!(fd.sums_unsure());
    damage(d.path(), h, 9);
    let mut buf = vec![0u8; B as usize];
    match fd.read_at(h, 0, &mut buf) {
        Err(StorageError::BadSum {
            offset: 0, unsure, ..
        }) => assert!(unsure),
        other => panic!("expected an unsure block, got {other:?}"),
    }
    // Summed again from its bytes, it reads.
    fd.resum(h, 9).unwrap();
    assert_eq!(fd.read_at(h, 0, &mut buf).unwrap(), buf.len());
    fd.trust_sums().unwrap();
    assert!(!fd.sums_unsure());
    drop(fd);
    let fd = FileData::open(d.path()).unwrap();
    assert!(!fd.sums_unsure());
    damage(d.path(), h, 10);
    match fd.read_at(h, 0, &mut buf) {
        Err(StorageError::BadSum { unsure, .. }) => assert!(!unsure),
        other => panic!("expected a damaged block, got {other:?}"),
    }
    // A record of another format is refused.
    drop(fd);
    std::fs::write(&record, b"something else").unwrap();
    assert!(FileData::open(d.path()).is_err());
}

#[test]
fn a_removed_datafile_takes_its_sums_and_a_new_one_starts_afresh() {
    let d = tempfile::tempdir().unwrap();
    let fd = FileData::open(d.path()).unwrap();
    let h = 0x58;
    fd.write_at(h, 0, &pattern(3 * B as usize, 8)).unwrap();
    fd.remove(h).unwrap();
    assert!(!sidecar(d.path(), h).exists());
    // A sidecar a crash left behind is not taken for the new datafile's.
    std::fs::write(sidecar(d.path(), h), [0xabu8; 64]).unwrap();
    fd.write_at(h, B, b"again").unwrap();
    let mut buf = vec![0u8; 2 * B as usize];
    assert_eq!(fd.read_at(h, 0, &mut buf).unwrap(), B as usize + 5);
    fd.create_all(&[0x59]).unwrap();
    assert!(sidecar(d.path(), 0x59).exists());
    fd.write_at(0x59, 0, b"x").unwrap();
    assert_eq!(fd.read_at(0x59, 0, &mut buf).unwrap(), 1);
}

/// One change of a datafile, for the model test.
#[derive(Clone, Debug)]
enum Change {
    Write(u64, u16, u8),
    Truncate(u64),
    Punch(u64, u64),
    Zero(u64, u64, bool),
}

fn change() -> impl Strategy<Value = Change> {
    let off = 0..6 * B;
    prop_oneof![
        4 => (off.clone(), 1..3 * B as u16, any::<u8>()).prop_map(|(o, l, s)| Change::Write(o, l, s)),
        1 => off.clone().prop_map(Change::Truncate),
        1 => (off.clone(), 1..3 * B).prop_map(|(o, l)| Change::Punch(o, l)),
        1 => (off, 1..3 * B, any::<bool>()).prop_map(|(o, l, k)| Change::Zero(o, l, k)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any sequence of changes leaves bytes that read back as a plain model says,
    /// with every block matching its sums.
    #[test]
    fn every_change_keeps_the_sums_matching(changes in proptest::collection::vec(change(), 1..24)) {
        let d = tempfile::tempdir().unwrap();
        let fd = FileData::open(d.path()).unwrap();
        let h = 0x60;
        let mut model: Vec<u8> = Vec::new();
        for c in changes {
            match c {
                Change::Write(off, len, seed) => {
                    let data = pattern(len as usize, seed);
                    fd.write_at(h, off, &data).unwrap();
                    let end = off as usize + data.len();
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[off as usize..end].copy_from_slice(&data);
                }
                Change::Truncate(size) => {
                    fd.truncate(h, size).unwrap();
                    model.resize(size as usize, 0);
                }
                Change::Punch(off, len) => {
                    fd.fallocate(h, falloc::PUNCH_HOLE | falloc::KEEP_SIZE, off, len).unwrap();
                    let end = ((off + len) as usize).min(model.len());
                    if (off as usize) < end {
                        model[off as usize..end].fill(0);
                    }
                }
                Change::Zero(off, len, keep) => {
                    let mode = falloc::ZERO_RANGE | if keep { falloc::KEEP_SIZE } else { 0 };
                    fd.fallocate(h, mode, off, len).unwrap();
                    let end = (off + len) as usize;
                    if !keep && model.len() < end {
                        model.resize(end, 0);
                    }
                    let end = end.min(model.len());
                    if (off as usize) < end {
                        model[off as usize..end].fill(0);
                    }
                }
            }
            let mut buf = vec![0u8; model.len() + B as usize];
            let n = fd.read_at(h, 0, &mut buf).unwrap();
            prop_assert_eq!(&buf[..n], &model[..]);
        }
    }
}
