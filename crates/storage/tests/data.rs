//! Tests of the data store and the fault-injecting wrapper.
#![allow(clippy::unwrap_used)]

use pvfs_proto::Errno;
use pvfs_storage::fault::FaultyData;
use pvfs_storage::{DataBackend, FileData, FD_CACHE_SIZE};

#[test]
fn write_read_stat_truncate_remove() {
    let d = tempfile::tempdir().unwrap();
    let fd = FileData::open(d.path()).unwrap();
    let h = 0x1234_5678_9abc_def0;
    fd.write_at(h, 10, b"hello").unwrap();
    assert!(d.path().join("data/f0/123456789abcdef0").exists());
    let mut buf = [0xffu8; 32];
    assert_eq!(fd.read_at(h, 0, &mut buf).unwrap(), 15);
    assert_eq!(&buf[..15], b"\0\0\0\0\0\0\0\0\0\0hello");
    assert_eq!(fd.read_at(h, 12, &mut buf[..2]).unwrap(), 2);
    assert_eq!(&buf[..2], b"ll");
    assert_eq!(fd.read_at(h, 100, &mut buf).unwrap(), 0);
    let st = fd.stat(h).unwrap();
    assert_eq!(st.size, 15);
    assert!(st.mtime.secs > 0);
    fd.truncate(h, 12).unwrap();
    assert_eq!(fd.stat(h).unwrap().size, 12);
    fd.truncate(h, 1 << 20).unwrap();
    assert_eq!(fd.stat(h).unwrap().size, 1 << 20);
    fd.sync(h).unwrap();
    assert_eq!((fd.count().unwrap(), fd.list().unwrap()), (1, vec![h]));
    fd.remove(h).unwrap();
    assert_eq!(fd.count().unwrap(), 0);
    assert_eq!(fd.read_at(h, 0, &mut buf).unwrap(), 0);
}

#[test]
fn inline_calls_only_on_open_datafiles_and_cached_bytes() {
    let d = tempfile::tempdir().unwrap();
    let fd = FileData::open(d.path()).unwrap();
    let h = 0x42;
    // Nothing open: nothing written, created or read.
    assert!(fd.write_runs_if_open(h, &[(0, 3)], b"abc").is_none());
    assert!(fd.stat_if_open(h).is_none());
    assert!(fd
        .read_runs_if_cached(h, &[(0, 3)], &mut [0u8; 3])
        .is_none());
    assert_eq!(fd.count().unwrap(), 0);
    // Once a blocking write opened it, runs go where they say and the stat follows.
    fd.write_at(h, 0, b"0123456789").unwrap();
    let st = fd
        .write_runs_if_open(h, &[(2, 2), (8, 3)], b"ABxyz")
        .unwrap()
        .unwrap();
    assert_eq!(st.size, 11);
    assert_eq!(fd.stat_if_open(h).unwrap().unwrap(), fd.stat(h).unwrap());
    let mut buf = [0u8; 11];
    fd.read_runs_if_cached(h, &[(0, 11)], &mut buf)
        .unwrap()
        .unwrap();
    assert_eq!(&buf, b"01AB4567xyz");
    // Runs that do not fit the data fail, writing nothing past it.
    assert!(fd
        .write_runs_if_open(h, &[(0, 9)], b"short")
        .unwrap()
        .is_err());
    // Fewer bytes than asked (past the end): not answered inline.
    assert!(fd
        .read_runs_if_cached(h, &[(8, 8)], &mut [0u8; 8])
        .is_none());
    // The fault-injecting wrapper offers no inline path: its faults always apply.
    let faulty = FaultyData::new(FileData::open(d.path()).unwrap());
    assert!(faulty.stat_if_open(h).is_none());
}

#[test]
fn missing_files() {
    let d = tempfile::tempdir().unwrap();
    let fd = FileData::open(d.path()).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(fd.read_at(7, 0, &mut buf).unwrap(), 0);
    assert_eq!(fd.stat(7).unwrap(), Default::default());
    fd.remove(7).unwrap();
    fd.sync(7).unwrap();
    fd.truncate(7, 0).unwrap();
    assert_eq!(fd.count().unwrap(), 0, "truncate to 0 creates nothing");
    fd.truncate(7, 3).unwrap();
    assert_eq!(fd.stat(7).unwrap().size, 3);
    // Files that are not datafiles are not counted.
    std::fs::write(d.path().join("data/07/junk"), b"x").unwrap();
    assert_eq!(fd.list().unwrap(), [7]);
    assert!(fd.statfs().unwrap().total_bytes > 0);
}

/// Open descriptors of this process that point into `dir`.
fn open_fds_under(dir: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(dir))
        .count()
}

#[test]
fn fd_cache_evicts_beyond_its_size() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().canonicalize().unwrap();
    let fd = FileData::open(&dir).unwrap();
    let n = FD_CACHE_SIZE as u64 + 200;
    for h in 1..=n {
        fd.write_at(h, 0, &h.to_le_bytes()).unwrap();
    }
    // The caches of datafiles and of their sums, and the born log.
    assert_eq!(open_fds_under(&dir), 2 * FD_CACHE_SIZE + 1);
    for h in (1..=n).rev() {
        let mut b = [0u8; 8];
        assert_eq!(fd.read_at(h, 0, &mut b).unwrap(), 8);
        assert_eq!(u64::from_le_bytes(b), h);
    }
    assert_eq!(fd.count().unwrap(), n);
    for h in 1..=n {
        fd.remove(h).unwrap();
    }
    assert_eq!(open_fds_under(&dir), 1);
    assert_eq!(fd.count().unwrap(), 0);
}

#[test]
fn write_vectored_gathers_many_buffers() {
    let d = tempfile::tempdir().unwrap();
    let fd = FileData::open(d.path()).unwrap();
    let parts: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| vec![i as u8; (i % 7) as usize])
        .collect();
    let bufs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
    let want: Vec<u8> = parts.concat();
    fd.write_vectored_at(9, 100, &bufs).unwrap();
    let mut got = vec![0u8; want.len() + 10];
    assert_eq!(fd.read_at(9, 100, &mut got).unwrap(), want.len());
    assert_eq!(&got[..want.len()], &want[..]);
    // The trait's default version (used by wrappers) writes the same bytes.
    let faulty = FaultyData::new(FileData::open(d.path()).unwrap());
    faulty.write_vectored_at(10, 100, &bufs).unwrap();
    assert_eq!(faulty.read_at(10, 100, &mut got).unwrap(), want.len());
    assert_eq!(&got[..want.len()], &want[..]);
}

#[test]
fn faults_keep_their_errno() {
    let d = tempfile::tempdir().unwrap();
    let fd = FaultyData::new(FileData::open(d.path()).unwrap());
    fd.fail_writes_after(10, Errno::ENOSPC);
    fd.write_at(1, 0, &[1; 8]).unwrap();
    let e = fd.write_at(1, 8, &[2; 8]).unwrap_err();
    assert_eq!(e.errno(), Errno::ENOSPC);
    assert_eq!(
        fd.stat(1).unwrap().size,
        10,
        "the crossing write lands partially"
    );
    assert_eq!(fd.write_at(1, 10, &[3]).unwrap_err().errno(), Errno::ENOSPC);
    fd.fail_all(true);
    let mut b = [0u8; 4];
    assert_eq!(fd.read_at(1, 0, &mut b).unwrap_err().errno(), Errno::EIO);
    fd.heal();
    fd.write_at(1, 10, &[3]).unwrap();
    assert_eq!(fd.inner().stat(1).unwrap().size, 11);
}

/// Bytes the local file system allocates for `path`.
fn allocated(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn stat_reports_the_space_a_datafile_takes() {
    let d = tempfile::tempdir().unwrap();
    let fd = FileData::open(d.path()).unwrap();
    assert_eq!(fd.stat(3).unwrap().allocated, 0, "missing: nothing");
    // Sparse: one byte at 1 MiB takes one block, not a megabyte.
    fd.write_at(3, 1 << 20, b"x").unwrap();
    let st = fd.stat(3).unwrap();
    assert_eq!(st.size, (1 << 20) + 1);
    assert!(
        st.allocated > 0 && st.allocated < 256 << 10,
        "{} bytes allocated for one byte",
        st.allocated
    );
    assert_eq!(
        st.allocated,
        allocated(&d.path().join("data/03/0000000000000003"))
    );
    // Dense: at least every byte.
    fd.write_at(4, 0, &vec![7u8; 300_000]).unwrap();
    let st = fd.stat(4).unwrap();
    assert!(st.allocated >= 300_000, "{st:?}");
}

#[test]
fn fallocate_allocates_punches_and_zeroes() {
    use pvfs_proto::message::falloc::{KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE};
    let d = tempfile::tempdir().unwrap();
    let fd = FileData::open(d.path()).unwrap();
    // Punching or zeroing (keeping the size) a datafile that does not exist creates
    // nothing: its bytes read as zeros already.
    fd.fallocate(5, PUNCH_HOLE | KEEP_SIZE, 0, 4096).unwrap();
    fd.fallocate(5, ZERO_RANGE | KEEP_SIZE, 0, 4096).unwrap();
    assert_eq!(fd.count().unwrap(), 0);
    // Allocation creates it, sized to the end of the range.
    fd.fallocate(5, 0, 4096, 1 << 20).unwrap();
    let st = fd.stat(5).unwrap();
    assert_eq!(st.size, 4096 + (1 << 20));
    assert!(st.allocated >= 1 << 20, "{st:?}");
    // Beyond the end without changing the size.
    fd.fallocate(5, KEEP_SIZE, 2 << 20, 1 << 20).unwrap();
    let st2 = fd.stat(5).unwrap();
    assert_eq!(st2.size, st.size);
    assert!(st2.allocated >= st.allocated + (1 << 20), "{st2:?}");
    // A punched range reads as zeros and gives its space back.
    fd.write_at(5, 0, &vec![0xaa; 1 << 20]).unwrap();
    let before = fd.stat(5).unwrap().allocated;
    fd.fallocate(5, PUNCH_HOLE | KEEP_SIZE, 65536, 131072)
        .unwrap();
    let mut buf = vec![1u8; 1 << 20];
    assert_eq!(fd.read_at(5, 0, &mut buf).unwrap(), 1 << 20);
    assert!(buf[..65536].iter().all(|&b| b == 0xaa));
    assert!(buf[65536..196608].iter().all(|&b| b == 0), "punched bytes");
    assert!(buf[196608..].iter().all(|&b| b == 0xaa));
    assert!(fd.stat(5).unwrap().allocated <= before - 131072);
    // Zeroing, where the file system has it (ext4, xfs; not tmpfs).
    match fd.fallocate(5, ZERO_RANGE, 0, 4096) {
        Ok(()) => {
            assert_eq!(fd.read_at(5, 0, &mut buf[..4096]).unwrap(), 4096);
            assert!(buf[..4096].iter().all(|&b| b == 0), "zeroed bytes");
        }
        Err(e) => assert_eq!(e.errno(), Errno::EOPNOTSUPP, "{e}"),
    }
    // Modes pvfs does not offer never reach the disk; nor an empty range.
    for mode in [0x08, 0x20, PUNCH_HOLE, PUNCH_HOLE | ZERO_RANGE | KEEP_SIZE] {
        let e = fd.fallocate(5, mode, 0, 4096).unwrap_err();
        assert_eq!(e.errno(), Errno::EOPNOTSUPP, "mode {mode:#x}");
    }
    assert_eq!(fd.fallocate(5, 0, 0, 0).unwrap_err().errno(), Errno::EINVAL);
    assert_eq!(fd.stat(5).unwrap().size, 4096 + (1 << 20), "unchanged");
}

/// The path of datafile `h` under storage directory `dir`.
fn datafile(dir: &std::path::Path, h: u64) -> std::path::PathBuf {
    dir.join(format!("data/{:02x}/{h:016x}", h & 0xff))
}

#[test]
fn the_born_log_tells_lost_datafiles_from_holes() {
    use pvfs_proto::message::falloc::KEEP_SIZE;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let fd = FileData::open(dir).unwrap();
    // Every way a datafile comes to exist is recorded: a write, a truncate up, a
    // fallocate, fsck's repair.
    fd.write_at(1, 0, b"written").unwrap();
    fd.truncate(2, 10).unwrap();
    fd.fallocate(3, KEEP_SIZE, 0, 4096).unwrap();
    fd.create_all(&[4]).unwrap();
    fd.write_at(6, 0, b"removed later").unwrap();
    fd.remove(6).unwrap();
    fd.truncate(7, 0).unwrap(); // creates nothing
    fd.sync(1).unwrap();
    assert_eq!(fd.lost().unwrap(), Vec::<u64>::new(), "nothing lost yet");
    // Lost behind the store's back: 1 and 4. Never created (5, 7) or removed (6):
    // not lost.
    for h in [1, 4] {
        std::fs::remove_file(datafile(dir, h)).unwrap();
    }
    assert_eq!(fd.lost().unwrap(), vec![1, 4]);
    // The log outlives the process.
    drop(fd);
    let fd = FileData::open(dir).unwrap();
    assert_eq!(fd.lost().unwrap(), vec![1, 4]);
    // fsck's repair recreates one: no longer lost.
    fd.create_all(&[4]).unwrap();
    assert_eq!(fd.lost().unwrap(), vec![1]);
    // A datafile on disk that the log lacks (a crash kept its name, not its record;
    // a store older than the log) is recorded at open.
    std::fs::write(datafile(dir, 9), b"adopted").unwrap();
    drop(fd);
    let fd = FileData::open(dir).unwrap();
    std::fs::remove_file(datafile(dir, 9)).unwrap();
    assert_eq!(fd.lost().unwrap(), vec![1, 9]);
}

#[test]
fn the_born_log_survives_a_torn_tail_and_damage_and_is_compacted() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let log = dir.join("data").join(pvfs_storage::BORN_FILE);
    let fd = FileData::open(dir).unwrap();
    fd.write_at(1, 0, b"a").unwrap();
    fd.write_at(2, 0, b"b").unwrap();
    drop(fd);
    let good = std::fs::read(&log).unwrap();
    assert_eq!(good.len(), 32 + 2 * 16, "header and two records");
    // A torn append: half a record at the end. Cut at open; later records follow
    // the valid ones.
    let mut torn = good.clone();
    torn.extend_from_slice(&[1, 0, 0, 0, 3, 0, 0]);
    std::fs::write(&log, &torn).unwrap();
    let fd = FileData::open(dir).unwrap();
    assert_eq!(std::fs::metadata(&log).unwrap().len(), good.len() as u64);
    fd.write_at(3, 0, b"c").unwrap();
    std::fs::remove_file(datafile(dir, 3)).unwrap();
    assert_eq!(fd.lost().unwrap(), vec![3]);
    drop(fd);
    // A damaged record (a flipped bit) in the middle: skipped, the log rewritten
    // with what checks plus what is on disk.
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[32 + 5] ^= 1;
    std::fs::write(&log, &bytes).unwrap();
    let fd = FileData::open(dir).unwrap();
    assert_eq!(
        fd.lost().unwrap(),
        vec![3],
        "record 3 kept, 1 taken from the disk"
    );
    drop(fd);
    // Mostly dead records (created, then removed) are dropped at open.
    let fd = FileData::open(dir).unwrap();
    for h in 100..5100u64 {
        fd.write_at(h, 0, b"x").unwrap();
        fd.remove(h).unwrap();
    }
    assert!(std::fs::metadata(&log).unwrap().len() > 10_000 * 16);
    drop(fd);
    let fd = FileData::open(dir).unwrap();
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        32 + 3 * 16,
        "compacted to the three live datafiles"
    );
    assert_eq!(fd.lost().unwrap(), vec![3]);
    drop(fd);
    // A newer log format is refused, not misread.
    let mut newer = std::fs::read(&log).unwrap();
    newer[8] = 2;
    std::fs::write(&log, &newer).unwrap();
    let e = FileData::open(dir).err().expect("a newer born log opened");
    assert!(e.to_string().contains("born log version 2"), "{e}");
}

/// Inode number of the file at `path`.
fn inode(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

/// The datafile count a `statfs` reports is what a listing of the directories finds.
fn counted_as_listed(fd: &FileData) {
    assert_eq!(fd.count().unwrap(), fd.list().unwrap().len() as u64);
}

#[test]
fn removed_datafiles_are_emptied_and_reused_for_new_ones() {
    use pvfs_storage::SPARE_DIR;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let fd = FileData::open(dir).unwrap();
    let secret = vec![0x5au8; 100_000];
    fd.write_at(1, 0, &secret).unwrap();
    let ino = inode(&datafile(dir, 1));
    fd.remove(1).unwrap();
    assert!(!datafile(dir, 1).exists());
    assert_eq!(fd.spare_count(), 1);
    counted_as_listed(&fd);
    // A new datafile is the spare, with nothing of what it held.
    fd.write_at(2, 10, b"new").unwrap();
    assert_eq!(inode(&datafile(dir, 2)), ino, "the spare was reused");
    assert_eq!(fd.spare_count(), 0);
    counted_as_listed(&fd);
    let mut buf = vec![0xffu8; 200_000];
    assert_eq!(fd.read_at(2, 0, &mut buf).unwrap(), 13);
    assert_eq!(&buf[..13], b"\0\0\0\0\0\0\0\0\0\0new");
    let st = fd.stat(2).unwrap();
    assert_eq!(st.size, 13);
    assert!(
        st.allocated <= 4096,
        "the old blocks were freed: {}",
        st.allocated
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((now - st.mtime.secs).abs() < 60);
    // A datafile whose descriptor was handed out (here: for sending) and may still
    // be in use is unlinked, never reused: I/O through that descriptor must not reach
    // another file.
    fd.write_at(3, 0, b"held").unwrap();
    let held = fd.file_for_send(3).unwrap().unwrap();
    fd.remove(3).unwrap();
    assert_eq!(fd.spare_count(), 0);
    counted_as_listed(&fd);
    drop(held);
    // Also when the descriptor left the cache while still held.
    fd.write_at(4, 0, b"evicted").unwrap();
    let held = fd.file_for_send(4).unwrap().unwrap();
    for h in 1000..1000 + FD_CACHE_SIZE as u64 + 1 {
        fd.write_at(h, 0, b"x").unwrap();
    }
    fd.remove(4).unwrap();
    assert_eq!(fd.spare_count(), 0);
    drop(held);
    // Not held any more: kept. Creating over a name that exists never takes a spare.
    fd.remove(1000).unwrap();
    assert_eq!(fd.spare_count(), 1);
    fd.write_at(1001, 1, b"y").unwrap();
    assert_eq!(fd.spare_count(), 1);
    counted_as_listed(&fd);
    let before = fd.count().unwrap();
    // Spares outlive the process; one a crash left with contents (renamed, not yet
    // emptied) is emptied at open, and stray names are removed.
    drop(fd);
    let spare_dir = dir.join("data").join(SPARE_DIR);
    let names: Vec<_> = std::fs::read_dir(&spare_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1);
    std::fs::write(spare_dir.join(&names[0]), b"left by a crash").unwrap();
    std::fs::write(spare_dir.join("stray"), b"?").unwrap();
    let fd = FileData::open(dir).unwrap();
    assert_eq!(fd.spare_count(), 1);
    assert_eq!(fd.count().unwrap(), before, "counted again at open");
    assert!(!spare_dir.join("stray").exists());
    assert_eq!(
        std::fs::metadata(spare_dir.join(&names[0])).unwrap().len(),
        0
    );
    fd.write_at(5, 0, b"z").unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(fd.read_at(5, 0, &mut buf).unwrap(), 1);
    // Spares are not datafiles: not listed, never lost.
    assert!(!fd.list().unwrap().contains(&1000));
    assert_eq!(fd.lost().unwrap(), Vec::<u64>::new());
    counted_as_listed(&fd);
    // Created in a batch, one of them there already; removed twice.
    fd.create_all(&[7, 8, 2]).unwrap();
    counted_as_listed(&fd);
    fd.remove(8).unwrap();
    fd.remove(8).unwrap();
    counted_as_listed(&fd);
}

#[test]
fn a_spare_that_a_crash_left_with_a_datafile_name_too_is_not_emptied() {
    use pvfs_storage::SPARE_DIR;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let fd = FileData::open(dir).unwrap();
    fd.write_at(1, 0, b"old").unwrap();
    fd.remove(1).unwrap();
    assert_eq!(fd.spare_count(), 1);
    drop(fd);
    // A rename from the spare directory to a datafile's name that the crash left in
    // both directories (as ext4 without a journal may): the datafile's bytes stay.
    let spare_dir = dir.join("data").join(SPARE_DIR);
    let spare = std::fs::read_dir(&spare_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::hard_link(&spare, datafile(dir, 2)).unwrap();
    std::fs::write(datafile(dir, 2), b"synced bytes").unwrap();
    let fd = FileData::open(dir).unwrap();
    assert_eq!(fd.spare_count(), 0);
    assert!(!spare.exists());
    let mut buf = [0u8; 64];
    assert_eq!(fd.read_at(2, 0, &mut buf).unwrap(), 12);
    assert_eq!(&buf[..12], b"synced bytes");
    // A datafile made from a spare syncs (its directory, and first the spare
    // directory the spare left).
    fd.write_at(3, 0, b"x").unwrap();
    fd.remove(3).unwrap();
    fd.write_at(4, 0, b"y").unwrap();
    assert_eq!(fd.spare_count(), 0);
    fd.sync(4).unwrap();
}
