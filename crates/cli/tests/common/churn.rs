//! Files written and read back while servers come and go (the tests of new disks
//! and of rebuilds): each file's bytes follow from its name, so any reader can
//! check them, and a background writer keeps a client busy meanwhile.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pvfs_proto::LayoutSpec;

use super::{assert_bytes_eq, poll, scaled, state_of, Cluster, Rng, TestClient};

/// The bytes of file `{prefix}{i}`: 192 KiB, so it spans every server's datafile.
pub fn content(prefix: &str, i: u64) -> Vec<u8> {
    let seed = prefix
        .bytes()
        .fold(i, |a, b| a.wrapping_mul(31).wrapping_add(u64::from(b)));
    Rng::new(seed).bytes(192 << 10)
}

/// Creates, writes and fsyncs `{prefix}{i}` for i in `range`; the servers of the
/// copies of every datafile made, as the layouts list them.
pub async fn write_files(
    c: &pvfs_client::Client,
    prefix: &str,
    range: std::ops::Range<u64>,
) -> Vec<Vec<u32>> {
    let mut copies = Vec::new();
    for i in range {
        let path = format!("{prefix}{i}");
        let f = c
            .create(&path, 0o644, LayoutSpec::default(), true)
            .await
            .unwrap_or_else(|e| panic!("create {path}: {e}"));
        f.write_at(0, &content(prefix, i))
            .await
            .unwrap_or_else(|e| panic!("write {path}: {e}"));
        f.fsync()
            .await
            .unwrap_or_else(|e| panic!("fsync {path}: {e}"));
        copies.extend(f.layout().datafiles.iter().map(|d| d.replicas().collect()));
    }
    copies
}

/// Reads `{prefix}{i}` back for i in `range`, byte for byte.
pub async fn check_files(c: &pvfs_client::Client, prefix: &str, range: std::ops::Range<u64>) {
    for i in range {
        let path = format!("{prefix}{i}");
        let f = c
            .open(&path)
            .await
            .unwrap_or_else(|e| panic!("open {path}: {e}"));
        let want = content(prefix, i);
        let mut back = vec![0u8; want.len() + 1];
        let n = f
            .read_at(0, &mut back)
            .await
            .unwrap_or_else(|e| panic!("read {path}: {e}"));
        assert_bytes_eq(&back[..n], &want, &path);
    }
}

/// Waits (at most `within`, scaled) until the map calls server `name` `state`.
pub fn wait_state(cluster: &Cluster, name: &str, state: &str, within: Duration) {
    poll(&format!("{name} {state}"), scaled(within), || {
        (state_of(cluster, name).as_deref() == Some(state)).then_some(())
    });
}

/// A client in its own thread writing `/b{n}` for n = 0, 1, ... and reading back
/// `/a{n % 24}` (which must exist), at least 8 files, until [`Busy::finish`].
pub struct Busy {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, Vec<Vec<u32>>)>,
}

impl Busy {
    /// Starts the writer on the file system of `config`.
    pub fn start(config: &pvfs_config::Config) -> Busy {
        let stop = Arc::new(AtomicBool::new(false));
        let (config, flag) = (config.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let tc = TestClient::new(config);
            tc.run(Duration::from_secs(300), async |c| {
                let mut made = 0;
                let mut copies = Vec::new();
                while !flag.load(Ordering::Relaxed) || made < 8 {
                    copies.extend(write_files(&c, "/b", made..made + 1).await);
                    check_files(&c, "/a", made % 24..made % 24 + 1).await;
                    made += 1;
                }
                (made, copies)
            })
        });
        Busy { stop, thread }
    }

    /// Stops the writer; the files it wrote, and the servers of their datafiles'
    /// copies. Panics if it failed.
    pub fn finish(self) -> (u64, Vec<Vec<u32>>) {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.join() {
            Ok(done) => done,
            Err(e) => std::panic::resume_unwind(e),
        }
    }
}

/// Writes `/a0` .. `/a23`; the servers of their datafiles' copies, and how many
/// datafiles have a copy on `server` (at least one, or it panics).
pub fn write_first(tc: &TestClient, server: usize) -> (Vec<Vec<u32>>, u64) {
    let copies = tc.run(Duration::from_secs(120), async |c| {
        write_files(&c, "/a", 0..24).await
    });
    let on = copies
        .iter()
        .filter(|c| c.contains(&(server as u32)))
        .count() as u64;
    assert!(on > 0, "no datafile has a copy on server {server}");
    (copies, on)
}

/// Reads back `/a0` .. `/a23` and the `made` files of a [`Busy`].
pub fn check_all(tc: &TestClient, made: u64) {
    tc.run(Duration::from_secs(120), async |c| {
        check_files(&c, "/a", 0..24).await;
        check_files(&c, "/b", 0..made).await;
    });
}
