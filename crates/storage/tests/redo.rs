//! Crash tests of the redo log under the metadata database (`redo.rs`): redb runs on
//! simulated disks that forget, at a "crash", any part of what was not synced (whole
//! writes, or 512-byte sectors of them, in any combination); the database is then
//! opened again from what the disks kept and must hold exactly the acknowledged
//! commits. With the log synced later than each commit (`SyncPolicy::OnFlush`,
//! `Every`), a crash keeps every commit up to the last completed sync, and a prefix of
//! the later ones, whole; a killed process (the disks keep everything written) keeps
//! every commit. Seeded and replayable: a failure prints its seed; `PVFS_FUZZ_CASES` sets
//! the number of cases (longer runs), `PVFS_FUZZ_SEED` the first seed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};

use pvfs_storage::redo::{Disk, LogFlusher, LoggedFile, SyncPolicy, HEADER_LEN};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

const TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
const SECTOR: usize = 512;

/// A tiny deterministic generator (xorshift64*), so a seed replays a case exactly.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A change not yet synced.
#[derive(Debug, Clone)]
enum Unsynced {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Debug, Default)]
struct SimState {
    /// What reads see.
    view: Vec<u8>,
    /// What survived the last sync.
    durable: Vec<u8>,
    /// Changes since the last sync, in order.
    unsynced: Vec<Unsynced>,
    /// Operations left before every operation fails (None: never).
    fail_after: Option<u64>,
}

/// A simulated disk; clones share it.
#[derive(Debug, Clone, Default)]
struct SimDisk(Arc<Mutex<SimState>>);

fn write_into(buf: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[offset as usize..end].copy_from_slice(data);
}

impl SimDisk {
    fn with(bytes: Vec<u8>) -> SimDisk {
        SimDisk(Arc::new(Mutex::new(SimState {
            view: bytes.clone(),
            durable: bytes,
            ..SimState::default()
        })))
    }

    /// What a crash now leaves: the synced bytes plus any subset of the unsynced
    /// changes (writes whole or by sectors), applied in order.
    fn crash_image(&self, rng: &mut Rng) -> Vec<u8> {
        let st = self.0.lock().unwrap();
        let mut img = st.durable.clone();
        let mode = rng.below(3); // 0: nothing lands, 1: everything, 2: a random part
        for u in &st.unsynced {
            match u {
                Unsynced::Write(off, data) => match mode {
                    0 => {}
                    1 => write_into(&mut img, *off, data),
                    _ => {
                        for (k, sector) in data.chunks(SECTOR).enumerate() {
                            if rng.chance(50) {
                                write_into(&mut img, off + (k * SECTOR) as u64, sector);
                            }
                        }
                    }
                },
                Unsynced::SetLen(len) => {
                    if mode == 1 || (mode == 2 && rng.chance(50)) {
                        img.resize(*len as usize, 0);
                    }
                }
            }
        }
        img
    }

    /// Makes every operation fail after `n` more.
    fn fail_after(&self, n: u64) {
        self.0.lock().unwrap().fail_after = Some(n);
    }

    fn step(st: &mut SimState) -> io::Result<()> {
        match &mut st.fail_after {
            Some(0) => Err(io::Error::other("simulated I/O failure")),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

impl Disk for SimDisk {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.lock().unwrap().view.len() as u64)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let st = self.0.lock().unwrap();
        let end = offset as usize + buf.len();
        if end > st.view.len() {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        buf.copy_from_slice(&st.view[offset as usize..end]);
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut st = self.0.lock().unwrap();
        SimDisk::step(&mut st)?;
        write_into(&mut st.view, offset, data);
        st.unsynced.push(Unsynced::Write(offset, data.to_vec()));
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.0.lock().unwrap();
        SimDisk::step(&mut st)?;
        st.view.resize(len as usize, 0);
        st.unsynced.push(Unsynced::SetLen(len));
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        let mut st = self.0.lock().unwrap();
        SimDisk::step(&mut st)?;
        st.durable = st.view.clone();
        st.unsynced.clear();
        Ok(())
    }
}

type Model = BTreeMap<u64, Vec<u8>>;

fn open(db: &SimDisk, log: &SimDisk, capacity: u64) -> Database {
    open_with(db, log, capacity, SyncPolicy::EveryCommit).0
}

fn open_with(
    db: &SimDisk,
    log: &SimDisk,
    capacity: u64,
    policy: SyncPolicy,
) -> (Database, LogFlusher) {
    let (file, _) = LoggedFile::open_with(db.clone(), log.clone(), capacity, policy).expect("redo");
    let flusher = file.flusher();
    let db = Database::builder()
        .create_with_backend(file)
        .expect("redb opens what the log recovered");
    // As `MetaStore` does: what opening wrote is made stable before any commit (redb
    // creates a database in two syncs, and a file holding only the first is not one).
    flusher.flush().expect("flush after open");
    (db, flusher)
}

impl SimDisk {
    /// What a killed process leaves: everything written, synced or not.
    fn kill_image(&self) -> Vec<u8> {
        self.0.lock().unwrap().view.clone()
    }

    /// Whether everything written is synced.
    fn all_synced(&self) -> bool {
        self.0.lock().unwrap().unsynced.is_empty()
    }
}

fn contents(db: &Database) -> Model {
    let tx = db.begin_read().unwrap();
    let t = match tx.open_table(TABLE) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Model::new(),
        Err(e) => panic!("{e}"),
    };
    t.iter()
        .unwrap()
        .map(|r| {
            let (k, v) = r.unwrap();
            (k.value(), v.value().to_vec())
        })
        .collect()
}

/// One commit of random inserts and removes; what the model becomes if it commits.
fn commit(db: &Database, model: &Model, rng: &mut Rng) -> (Result<(), redb::Error>, Model) {
    let mut next = model.clone();
    let mut run = || -> Result<(), redb::Error> {
        let tx = db.begin_write()?;
        {
            let mut t = tx.open_table(TABLE)?;
            for _ in 0..1 + rng.below(24) {
                let key = rng.below(300);
                if rng.chance(25) {
                    t.remove(key)?;
                    next.remove(&key);
                } else {
                    let max = if rng.chance(10) { 20_000 } else { 600 };
                    let len = 1 + rng.below(max) as usize;
                    let byte = rng.next() as u8;
                    let value = vec![byte; len];
                    t.insert(key, value.as_slice())?;
                    next.insert(key, value);
                }
            }
        }
        tx.commit()?;
        Ok(())
    };
    let r = run();
    (r, next)
}

/// A database on simulated disks, with a model of what it must hold.
struct Store {
    db_disk: SimDisk,
    log_disk: SimDisk,
    capacity: u64,
    /// None only while it is being opened again.
    db: Option<Database>,
    model: Model,
}

impl Store {
    fn new(capacity: u64) -> Store {
        let (db_disk, log_disk) = (SimDisk::default(), SimDisk::default());
        let db = Some(open(&db_disk, &log_disk, capacity));
        Store {
            db_disk,
            log_disk,
            capacity,
            db,
            model: Model::new(),
        }
    }

    fn db(&self) -> &Database {
        self.db.as_ref().expect("open")
    }

    /// Closes the database (if open) and opens it again on the disks.
    fn reopen(&mut self) {
        self.db = None;
        self.db = Some(open(&self.db_disk, &self.log_disk, self.capacity));
    }

    /// A commit that must succeed.
    fn commit(&mut self, rng: &mut Rng, what: &str) {
        let (r, next) = commit(self.db(), &self.model, rng);
        r.unwrap_or_else(|e| panic!("{what}: commit: {e}"));
        self.model = next;
    }

    /// Power lost: the database opens again from what the disks kept.
    fn crash(&mut self, rng: &mut Rng) {
        let d = self.db_disk.crash_image(rng);
        let l = self.log_disk.crash_image(rng);
        // The old database closes on the old disks, which nothing reads any more.
        (self.db_disk, self.log_disk) = (SimDisk::with(d), SimDisk::with(l));
        self.reopen();
    }

    /// Power lost in the middle of a commit, the disks failing from their `n`th
    /// operation on: it may survive if it failed, must if it was acknowledged, and
    /// nothing else may appear.
    fn crash_inside_commit(&mut self, rng: &mut Rng, n: u64, what: &str) {
        self.db_disk.fail_after(n);
        self.log_disk.fail_after(n);
        let (r, next) = commit(self.db(), &self.model, rng);
        self.crash(rng);
        let found = contents(self.db());
        if r.is_ok() {
            assert_eq!(found, next, "{what}: an acknowledged commit");
        } else {
            assert!(
                found == self.model || found == next,
                "{what}: a failed commit left something else"
            );
        }
        self.model = found;
    }
}

fn run_case(seed: u64) {
    let mut rng = Rng::new(seed);
    // Small logs checkpoint often; some commits do not fit at all.
    let capacity = [HEADER_LEN + (16 << 10), 256 << 10, 4 << 20][rng.below(3) as usize];
    let mut s = Store::new(capacity);
    for step in 0..40 {
        let what = format!("seed {seed} step {step}");
        match rng.below(100) {
            0..70 => s.commit(&mut rng, &what),
            70..85 => {
                // Power lost between commits: every acknowledged commit survives.
                s.crash(&mut rng);
                assert_eq!(contents(s.db()), s.model, "{what}: after a crash");
            }
            85..93 => {
                let n = rng.below(30);
                s.crash_inside_commit(&mut rng, n, &what);
            }
            _ => {
                // A clean close and open.
                s.reopen();
                assert_eq!(contents(s.db()), s.model, "{what}: after a close");
            }
        }
    }
}

/// The value of test knob `name` (decimal, or hex with 0x), or `default` when unset.
/// A value that does not parse or is below `min` fails the test: a typo must not
/// silently make it check less (0 cases would check nothing).
fn knob(name: &str, default: u64, min: u64) -> u64 {
    let Ok(text) = std::env::var(name) else {
        return default;
    };
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => t.parse::<u64>().ok(),
    };
    match parsed {
        Some(v) if v >= min => v,
        Some(v) => panic!("{name}={text}: {v} is out of range (at least {min})"),
        None => panic!("{name}={text} does not parse (decimal, or hex with 0x)"),
    }
}

/// Runs `case` for the seeds the knobs choose; a failure names its seed.
fn run_seeds(case: fn(u64)) {
    let cases = knob("PVFS_FUZZ_CASES", 100, 1);
    let first = knob("PVFS_FUZZ_SEED", 1, 0);
    assert!(
        first.checked_add(cases).is_some(),
        "PVFS_FUZZ_SEED + PVFS_FUZZ_CASES overflows"
    );
    for seed in first..first + cases {
        if std::panic::catch_unwind(|| case(seed)).is_err() {
            panic!("case failed: replay it with PVFS_FUZZ_SEED={seed} PVFS_FUZZ_CASES=1");
        }
    }
}

#[test]
fn acknowledged_commits_survive_crashes_at_any_point() {
    run_seeds(run_case);
}

#[test]
fn a_crash_while_the_log_starts_over_loses_nothing() {
    // A log so small that every commit fills it: each one checkpoints (the database
    // file is synced, then the log header rewritten). Crashes at every point of that,
    // with any part of the header write landing, must keep every acknowledged commit.
    for seed in 0..40u64 {
        let mut rng = Rng::new(seed + 1000);
        let mut s = Store::new(HEADER_LEN + 64);
        for step in 0..12 {
            let what = format!("seed {seed} step {step}");
            s.commit(&mut rng, &what);
            // Fail a few operations into the next commit: inside its checkpoint.
            let n = rng.below(6);
            s.crash_inside_commit(&mut rng, n, &what);
        }
    }
}

#[test]
fn a_log_started_over_after_a_lost_header_never_redoes_old_records() {
    use redb::StorageBackend;
    let byte = |f: &LoggedFile<SimDisk>| {
        let mut b = [0u8; 1];
        f.read(0, &mut b).unwrap();
        b[0]
    };
    let (db, log) = (SimDisk::default(), SimDisk::default());
    let (f, _) = LoggedFile::open(db.clone(), log.clone(), 1 << 20).unwrap();
    for v in 1..=3u8 {
        f.write(0, &[v; 100]).unwrap();
        f.sync_data().unwrap();
    }
    // Records 1, 2 and 3 of equal size are in the log. Its header is then lost.
    let mut l = log.0.lock().unwrap().durable.clone();
    l[..SECTOR].fill(0);
    let (db, log) = (
        SimDisk::with(db.0.lock().unwrap().durable.clone()),
        SimDisk::with(l),
    );
    let (f, r) = LoggedFile::open(db.clone(), log.clone(), 1 << 20).unwrap();
    assert_eq!(r.replayed, 0);
    // A new first record, the size of the old one: the old second one must not
    // count as its successor.
    f.write(0, &[9; 100]).unwrap();
    f.sync_data().unwrap();
    assert_eq!(byte(&f), 9);
    let (db, log) = (
        SimDisk::with(db.0.lock().unwrap().durable.clone()),
        SimDisk::with(log.0.lock().unwrap().durable.clone()),
    );
    let (f, r) = LoggedFile::open(db, log, 1 << 20).unwrap();
    assert_eq!(r.replayed, 1, "only the new record");
    assert_eq!(byte(&f), 9);
}

/// A database whose log is synced later than its commits, with the models it may
/// hold after a crash: the one as of the last completed sync, then one per commit
/// acknowledged since.
struct Deferred {
    db_disk: SimDisk,
    log_disk: SimDisk,
    capacity: u64,
    policy: SyncPolicy,
    db: Option<(Database, LogFlusher)>,
    /// `since_sync[0]` was synced; the others were acknowledged after it, in order.
    since_sync: Vec<Model>,
}

impl Deferred {
    fn new(capacity: u64, policy: SyncPolicy) -> Deferred {
        let (db_disk, log_disk) = (SimDisk::default(), SimDisk::default());
        let db = Some(open_with(&db_disk, &log_disk, capacity, policy));
        Deferred {
            db_disk,
            log_disk,
            capacity,
            policy,
            db,
            since_sync: vec![Model::new()],
        }
    }

    fn db(&self) -> &Database {
        &self.db.as_ref().expect("open").0
    }

    fn model(&self) -> &Model {
        self.since_sync.last().expect("never empty")
    }

    fn commit(&mut self, rng: &mut Rng, what: &str) {
        let (r, next) = commit(self.db(), self.model(), rng);
        r.unwrap_or_else(|e| panic!("{what}: commit: {e}"));
        self.since_sync.push(next);
    }

    /// An explicit sync (a client's fsync): everything acknowledged is stable.
    fn flush(&mut self) {
        self.db.as_ref().expect("open").1.flush().expect("flush");
        let last = self.model().clone();
        self.since_sync = vec![last];
    }

    /// Opens the database again on disks holding `db` and `log`.
    fn restart(&mut self, db: Vec<u8>, log: Vec<u8>) {
        self.db = None;
        (self.db_disk, self.log_disk) = (SimDisk::with(db), SimDisk::with(log));
        self.db = Some(open_with(
            &self.db_disk,
            &self.log_disk,
            self.capacity,
            self.policy,
        ));
    }

    /// Power lost: the synced state survives, and whole later commits in order, if
    /// any; nothing else.
    fn crash(&mut self, rng: &mut Rng, what: &str) {
        let (d, l) = (
            self.db_disk.crash_image(rng),
            self.log_disk.crash_image(rng),
        );
        self.restart(d, l);
        let found = contents(self.db());
        let Some(k) = self.since_sync.iter().position(|m| *m == found) else {
            panic!(
                "{what}: after a power loss the database holds neither the synced state nor \
                 a later acknowledged commit ({} acknowledged since the sync)",
                self.since_sync.len() - 1
            );
        };
        // The one found is now the synced state (recovery synced it).
        self.since_sync = vec![self.since_sync.swap_remove(k)];
    }

    /// The process killed: the kernel keeps what was written, so every acknowledged
    /// commit survives.
    fn kill(&mut self, what: &str) {
        let (d, l) = (self.db_disk.kill_image(), self.log_disk.kill_image());
        self.restart(d, l);
        assert_eq!(
            contents(self.db()),
            *self.model(),
            "{what}: a killed process lost an acknowledged commit"
        );
        self.flush();
    }
}

fn run_deferred_case(seed: u64) {
    let mut rng = Rng::new(seed);
    let capacity = [HEADER_LEN + (16 << 10), 256 << 10, 4 << 20][rng.below(3) as usize];
    let mut s = Deferred::new(capacity, SyncPolicy::OnFlush);
    for step in 0..40 {
        let what = format!("seed {seed} step {step}");
        match rng.below(100) {
            0..60 => s.commit(&mut rng, &what),
            60..72 => s.flush(),
            72..84 => s.crash(&mut rng, &what),
            84..94 => s.kill(&what),
            _ => {
                // A clean close checkpoints: everything acknowledged is kept.
                let last = s.model().clone();
                s.db = None;
                s.db = Some(open_with(&s.db_disk, &s.log_disk, s.capacity, s.policy));
                assert_eq!(contents(s.db()), last, "{what}: after a close");
                s.since_sync = vec![last];
            }
        }
    }
}

#[test]
fn deferred_sync_a_crash_keeps_every_synced_commit_and_only_whole_commits() {
    run_seeds(run_deferred_case);
}

#[test]
fn deferred_sync_writes_each_commit_to_the_log_before_answering_and_syncs_it_later() {
    use redb::StorageBackend;
    let (db, log) = (SimDisk::default(), SimDisk::default());
    let (f, _) =
        LoggedFile::open_with(db.clone(), log.clone(), 1 << 20, SyncPolicy::OnFlush).unwrap();
    let flusher = f.flusher();
    f.write(0, &[7; 100]).unwrap();
    f.sync_data().unwrap();
    // Written to the log, not synced; the database file has not got it.
    assert!(!log.all_synced(), "the record is written before the answer");
    assert!(
        db.kill_image().len() < 100,
        "the database file gets a record's changes only once it is synced"
    );
    let mut b = [0u8; 1];
    f.read(50, &mut b).unwrap();
    assert_eq!(b[0], 7, "reads see the commit at once");
    flusher.flush().unwrap();
    assert!(log.all_synced());
    assert_eq!(db.kill_image()[..100], [7; 100]);
    // A flush with nothing to sync does nothing.
    flusher.flush().unwrap();
}

#[test]
fn deferred_sync_the_background_syncer_makes_commits_stable() {
    // Whatever the machine's speed: wait (with a generous deadline) until the syncer
    // has synced the log, then lose power: every commit acknowledged before survives.
    let mut rng = Rng::new(77);
    let mut s = Deferred::new(
        4 << 20,
        SyncPolicy::Every(std::time::Duration::from_millis(5)),
    );
    for step in 0..20 {
        let what = format!("step {step}");
        s.commit(&mut rng, &what);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !s.log_disk.all_synced() {
        assert!(
            std::time::Instant::now() < deadline,
            "the background syncer never synced the log"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let acked = s.model().clone();
    s.since_sync = vec![acked.clone()];
    s.crash(&mut rng, "after the background sync");
    assert_eq!(contents(s.db()), acked);
}
