//! A standby's copy of a metadata store: a copy read while commits go on, then the
//! records written from its start replayed over it, opens as the primary's store.
#![allow(clippy::unwrap_used)]

use pvfs_proto::{Attr, Handle, ObjDetail, Timespec};
use pvfs_storage::{
    Identity, LogShipper, MetaStore, RecordTap, ReplicatedFuture, Replicator, StandbyError,
    StandbyStore, SyncPolicy,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const RANGE: (Handle, Handle) = (1 << 32, (2 << 32) - 1);

fn id() -> Identity {
    Identity {
        fsid: 7,
        server: "s0".into(),
    }
}

fn attr(h: Handle, size: u64) -> Attr {
    Attr {
        handle: h,
        mode: 0o100644,
        uid: 1,
        gid: 2,
        nlink: 1,
        size,
        atime: Timespec::default(),
        mtime: Timespec { secs: 5, nsecs: 6 },
        ctime: Timespec::default(),
        detail: ObjDetail::Symlink {
            target: "x".repeat(300),
        },
        blocks: 0,
        acl: None,
    }
}

/// Keeps what the primary's log writes, for the test to ship when it likes.
#[derive(Default)]
struct Tapped {
    log: Mutex<Option<(LogShipper, u64)>>,
    records: Mutex<Vec<(u64, Arc<[u8]>)>>,
}

impl RecordTap for Tapped {
    fn written(&self, seq: u64, record: Arc<[u8]>) {
        self.records.lock().unwrap().push((seq, record));
    }
}

impl Replicator for Tapped {
    fn attach(self: Arc<Self>, log: LogShipper) {
        let first = log.tap(Some(self.clone()));
        *self.log.lock().unwrap() = Some((log, first));
    }
    fn replicated(self: Arc<Self>, _seq: u64) -> ReplicatedFuture {
        Box::pin(async {})
    }
}

impl Tapped {
    /// The records tapped so far, back to back, left in place.
    fn peek(&self) -> Vec<u8> {
        let recs = self.records.lock().unwrap();
        recs.iter().flat_map(|(_, r)| r.iter().copied()).collect()
    }

    /// The records tapped so far, back to back, and how many.
    fn take(&self) -> (Vec<u8>, usize) {
        let recs = std::mem::take(&mut *self.records.lock().unwrap());
        let mut out = Vec::new();
        for (_, r) in &recs {
            out.extend_from_slice(r);
        }
        (out, recs.len())
    }
}

fn objects(store: &MetaStore) -> BTreeMap<Handle, u64> {
    let mut out = BTreeMap::new();
    let mut after = None;
    loop {
        let page = store.read().unwrap().objects_after(after, 100).unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.handle);
        out.extend(page.iter().map(|a| (a.handle, a.size)));
    }
    out
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
}

async fn put(store: &MetaStore, h: Handle, size: u64) {
    let a = attr(h, size);
    store
        .write(move |t| {
            t.put_object(&a);
            Ok(())
        })
        .await
        .unwrap();
}

#[test]
fn a_copy_taken_under_commits_plus_their_records_opens_as_the_primary() {
    let rt = rt();
    let d = tempfile::tempdir().unwrap();
    let primary = MetaStore::open(&d.path().join("primary"), &id(), RANGE).unwrap();
    let base = RANGE.0 + 1000;
    rt.block_on(async {
        for k in 0..200 {
            put(&primary, base + k, k).await;
        }
    });
    let tap = Arc::new(Tapped::default());
    primary.replicate_with(tap.clone());
    let (log, first) = tap.log.lock().unwrap().clone().unwrap();
    let standby = StandbyStore::open(&d.path().join("standby"), SyncPolicy::EveryCommit).unwrap();
    let epoch = 0x51;
    // The copy is read a page at a time while objects are added and rewritten:
    // every page comes from another commit.
    let len = log.committed_len();
    standby.begin(epoch, len).unwrap();
    let mut buf = vec![0u8; 4096];
    let mut at = 0;
    let mut k = 0u64;
    while at < len {
        let n = (len - at).min(buf.len() as u64) as usize;
        log.read_committed(at, &mut buf[..n]).unwrap();
        standby.chunk(epoch, at, &buf[..n]).unwrap();
        at += n as u64;
        rt.block_on(async {
            put(&primary, base + 200 + k, k).await;
            put(&primary, base + k % 200, 10_000 + k).await;
        });
        k += 1;
    }
    assert!(k > 2, "the copy took several reads: {k}");
    // Records are refused before the copy is whole.
    assert!(matches!(
        standby.records(epoch, &tap.peek()),
        Err(StandbyError::NeedCopy(_))
    ));
    standby.end(epoch, first).unwrap();
    let (records, n) = tap.take();
    assert!(
        n as u64 >= 2 * k,
        "{n} records for {k} rounds of two commits"
    );
    let held = standby.holds(epoch).unwrap();
    assert_eq!(held, first - 1);
    // Records of another generation, or past a missing one, are refused.
    assert!(matches!(
        standby.records(epoch + 1, &records),
        Err(StandbyError::NeedCopy(_))
    ));
    // A batch sent after one that has not arrived: ahead, applied once its turn
    // comes (the primary sends several before their answers).
    let (first_rec, _) = split_first(&records);
    assert!(matches!(
        standby.records(epoch, &records[first_rec..]),
        Err(StandbyError::Ahead { .. })
    ));
    // A gap inside a batch: the first record applies, then a new copy is needed.
    let (second_len, _) = split_first(&records[first_rec..]);
    let mut gap = records[..first_rec].to_vec();
    gap.extend_from_slice(&records[first_rec + second_len..]);
    assert!(matches!(
        standby.records(epoch, &gap),
        Err(StandbyError::NeedCopy(_))
    ));
    assert_eq!(standby.holds(epoch), Some(first));
    let last = standby.records(epoch, &records).unwrap();
    assert_eq!(last, first - 1 + n as u64);
    // Sent again (a resend after a lost answer): skipped.
    assert_eq!(standby.records(epoch, &records).unwrap(), last);
    // More commits, shipped as they come.
    rt.block_on(async {
        for j in 0..50 {
            put(&primary, base + 5000 + j, j).await;
        }
    });
    let (more, m) = tap.take();
    assert_eq!(standby.records(epoch, &more).unwrap(), last + m as u64);
    let want = objects(&primary);
    assert_eq!(want.len() as u64, 200 + k + 50);
    rt.block_on(primary.close());
    standby.close().unwrap();
    let copy = MetaStore::open(standby.dir(), &id(), RANGE).unwrap();
    assert_eq!(objects(&copy), want);
}

#[test]
fn a_copy_without_the_records_written_meanwhile_misses_commits() {
    // The negative control of the test above: the replay is what makes it whole.
    let rt = rt();
    let d = tempfile::tempdir().unwrap();
    let primary = MetaStore::open(&d.path().join("primary"), &id(), RANGE).unwrap();
    let tap = Arc::new(Tapped::default());
    primary.replicate_with(tap.clone());
    let (log, first) = tap.log.lock().unwrap().clone().unwrap();
    let standby = StandbyStore::open(&d.path().join("standby"), SyncPolicy::EveryCommit).unwrap();
    let len = log.committed_len();
    let mut buf = vec![0u8; len as usize];
    log.read_committed(0, &mut buf).unwrap();
    standby.begin(1, len).unwrap();
    standby.chunk(1, 0, &buf).unwrap();
    rt.block_on(async {
        for k in 0..20 {
            put(&primary, RANGE.0 + 1000 + k, k).await;
        }
    });
    standby.end(1, first).unwrap();
    standby.close().unwrap();
    let want = objects(&primary);
    assert_eq!(want.len(), 20);
    rt.block_on(primary.close());
    let copy = MetaStore::open(standby.dir(), &id(), RANGE).unwrap();
    assert!(objects(&copy).is_empty());
}

/// The length of the first record of `records`, back to back.
fn split_first(records: &[u8]) -> (usize, ()) {
    let body = u32::from_le_bytes(records[12..16].try_into().unwrap()) as usize;
    (20 + body, ())
}

/// A store dropped while it ships to standbys frees its shipping, and with it the
/// log and its open files: the shipping holds the log (to copy the store) and the
/// log hands each record to the shipping, which must not keep both alive.
#[test]
fn a_dropped_store_frees_its_shipping_and_its_log() {
    let rt = rt();
    let d = tempfile::tempdir().unwrap();
    let primary = MetaStore::open(&d.path().join("primary"), &id(), RANGE).unwrap();
    let tap = Arc::new(Tapped::default());
    primary.replicate_with(tap.clone());
    rt.block_on(put(&primary, RANGE.0 + 1, 1));
    assert!(tap.take().1 >= 1, "the shipping receives the commit");
    let shipping = Arc::downgrade(&tap);
    drop(tap);
    drop(primary);
    assert_eq!(
        shipping.strong_count(),
        0,
        "the dropped store's log still holds its shipping"
    );
}
