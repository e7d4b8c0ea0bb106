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
    assert_eq!(open_fds_under(&dir), FD_CACHE_SIZE);
    for h in (1..=n).rev() {
        let mut b = [0u8; 8];
        assert_eq!(fd.read_at(h, 0, &mut b).unwrap(), 8);
        assert_eq!(u64::from_le_bytes(b), h);
    }
    assert_eq!(fd.count().unwrap(), n);
    for h in 1..=n {
        fd.remove(h).unwrap();
    }
    assert_eq!(open_fds_under(&dir), 0);
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
