//! `pvfs fsck` raises no false alarm on a healthy file system that was worked hard.
//! Through the FUSE mount of a 6-server file system:
//!
//! - `tests/fuse/fsx.c`, an fsx-style exerciser (seeded random writes, pwrites at
//!   random offsets, truncates up and down, fallocate in every mode including punched
//!   holes, reads and writes through a shared mapping, every read checked against an
//!   in-memory copy), on files with the default layout, with 4 KiB stripes over all 6
//!   servers and with 1 MiB stripes over all 6, in parallel;
//! - sparse files: 100 bytes at offset 300000 of a new file, bytes far apart in files
//!   striped wide, a file that is one large hole;
//! - an fsstress-style namespace storm over a small tree (create, mkdir, write,
//!   truncate, rename, unlink, rmdir, symlink, hard link, chmod; seeded), checked
//!   against a model of what the tree must be, hard links' counts and inode numbers
//!   included;
//! - `rm -rf` of part of it all.
//!
//! Then, unmounted, `pvfs fsck` must report the file system clean and exit 0. Datafiles
//! never written (most of the sparse files' and wide files') do not exist, and are not
//! lost. A datafile that held bytes and is then deleted from its server's disk must
//! still be found, alone: fsck is not clean because it stopped looking.
//!
//! `PVFS_FSCK_SEED` (decimal, or hex with 0x; printed both ways) replays a run; the
//! fsx runs and the storm derive their seeds from it. `PVFS_FSX_OPS` (operations per
//! fsx run, default 1500) and `PVFS_STRESS_OPS` (storm operations, default 1500) make
//! it longer.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Cluster, Rng};
use mount::Mount;

/// Longest one program or check may take (scaled by `PVFS_TEST_SLOWDOWN`).
fn deadline() -> Duration {
    Duration::from_secs(600)
}

/// Sets the layout new files of directory `dir` get (the mount's `user.pvfs.layout`).
fn set_layout(dir: &Path, layout: &str) {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    let name = c"user.pvfs.layout";
    // SAFETY: valid strings, and a value buffer of the length given.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            layout.as_ptr().cast(),
            layout.len(),
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "setting {layout:?} on {}: {}",
        dir.display(),
        std::io::Error::last_os_error()
    );
}

/// Writes `data` at `off` of `path` (created if missing), through the mount.
fn write_at(path: &Path, off: u64, data: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.write_all_at(data, off)
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// What one object of the storm's tree must be.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    Dir { mode: u32 },
    File { data: Vec<u8>, mode: u32 },
    Link { target: String },
}

/// The fsstress-style storm: random namespace operations under `root` (a directory
/// on the mount), applied to a model too; every operation must succeed.
struct Storm {
    root: PathBuf,
    model: BTreeMap<String, Node>,
    /// The file each file name names (hard links share one): a change through one
    /// name shows through all of them.
    files: BTreeMap<String, u64>,
    rng: Rng,
    next: u64,
    log: Vec<String>,
    seed: u64,
}

impl Storm {
    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn fresh(&mut self, dir: &str, prefix: &str) -> String {
        self.next += 1;
        let name = format!("{prefix}{}", self.next);
        if dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        }
    }

    fn pick<T: Clone>(&mut self, v: &[T]) -> Option<T> {
        (!v.is_empty()).then(|| v[self.rng.range(0, v.len() as u64) as usize].clone())
    }

    /// Every directory, the root ("") included.
    fn dirs(&self) -> Vec<String> {
        std::iter::once(String::new())
            .chain(
                self.model
                    .iter()
                    .filter(|(_, n)| matches!(n, Node::Dir { .. }))
                    .map(|(k, _)| k.clone()),
            )
            .collect()
    }

    fn of_kind(&self, f: impl Fn(&Node) -> bool) -> Vec<String> {
        self.model
            .iter()
            .filter(|(_, n)| f(n))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Every name of the file `p` names (`p` included).
    fn names_of(&self, p: &str) -> Vec<String> {
        let id = self.files[p];
        self.files
            .iter()
            .filter(|(_, &f)| f == id)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Records the file `p` names as `node`, under each of its names.
    fn set_file(&mut self, p: &str, node: Node) {
        for name in self.names_of(p) {
            self.model.insert(name, node.clone());
        }
    }

    fn is_empty_dir(&self, dir: &str) -> bool {
        let prefix = format!("{dir}/");
        !self.model.keys().any(|k| k.starts_with(&prefix))
    }

    /// Fails the test naming the seed and the last operations.
    fn fail(&self, what: String) -> ! {
        let from = self.log.len().saturating_sub(20);
        panic!(
            "namespace storm (seed {}, {:#x}; replay with PVFS_FSCK_SEED): {what}\nlast operations:\n  {}",
            self.seed,
            self.seed,
            self.log[from..].join("\n  ")
        );
    }

    fn ok<T>(&self, r: std::io::Result<T>, what: &str) -> T {
        r.unwrap_or_else(|e| self.fail(format!("{what}: {e}")))
    }

    fn step(&mut self) {
        match self.rng.range(0, 15) {
            0..=2 => {
                let dir = self.pick(&self.dirs()).unwrap();
                let p = self.fresh(&dir, "f");
                let off = if self.rng.chance(0.3) {
                    self.rng.range(0, 2 << 20)
                } else {
                    0
                };
                let len = if self.rng.chance(0.1) {
                    0
                } else {
                    self.rng.log_range(1, 256 << 10) as usize
                };
                let data = self.rng.bytes(len);
                self.log
                    .push(format!("create {p} at {off} +{}", data.len()));
                write_at(&self.path(&p), off, &data);
                // The mode set, whatever the test's umask.
                let r =
                    std::fs::set_permissions(self.path(&p), std::fs::Permissions::from_mode(0o644));
                self.ok(r, &format!("chmod {p}"));
                let mut content = vec![0u8; off as usize];
                content.extend_from_slice(&data);
                if data.is_empty() {
                    content.clear();
                }
                self.next += 1;
                self.files.insert(p.clone(), self.next);
                self.model.insert(
                    p,
                    Node::File {
                        data: content,
                        mode: 0o644,
                    },
                );
            }
            3 => {
                let dir = self.pick(&self.dirs()).unwrap();
                let p = self.fresh(&dir, "d");
                self.log.push(format!("mkdir {p}"));
                let r = std::fs::create_dir(self.path(&p)).and_then(|()| {
                    std::fs::set_permissions(self.path(&p), std::fs::Permissions::from_mode(0o755))
                });
                self.ok(r, &format!("mkdir {p}"));
                self.model.insert(p, Node::Dir { mode: 0o755 });
            }
            4 | 5 => {
                let files = self.of_kind(|n| matches!(n, Node::File { .. }));
                let Some(p) = self.pick(&files) else { return };
                let Some(Node::File { mut data, mode }) = self.model.get(&p).cloned() else {
                    unreachable!("a file")
                };
                let off = self.rng.range(0, data.len() as u64 + 65536) as usize;
                let len = self.rng.log_range(1, 128 << 10) as usize;
                let bytes = self.rng.bytes(len);
                self.log
                    .push(format!("write {p} at {off} +{}", bytes.len()));
                write_at(&self.path(&p), off as u64, &bytes);
                if data.len() < off + bytes.len() {
                    data.resize(off + bytes.len(), 0);
                }
                data[off..off + bytes.len()].copy_from_slice(&bytes);
                self.set_file(&p, Node::File { data, mode });
            }
            6 => {
                let files = self.of_kind(|n| matches!(n, Node::File { .. }));
                let Some(p) = self.pick(&files) else { return };
                let Some(Node::File { mut data, mode }) = self.model.get(&p).cloned() else {
                    unreachable!("a file")
                };
                let to = self.rng.range(0, data.len() as u64 * 2 + 4096) as usize;
                self.log.push(format!("truncate {p} to {to}"));
                let f = std::fs::OpenOptions::new().write(true).open(self.path(&p));
                let f = self.ok(f, &format!("open {p}"));
                self.ok(f.set_len(to as u64), &format!("truncate {p}"));
                data.resize(to, 0);
                self.set_file(&p, Node::File { data, mode });
            }
            7 => self.rename(),
            8 => {
                let gone = self.of_kind(|n| !matches!(n, Node::Dir { .. }));
                let Some(p) = self.pick(&gone) else { return };
                self.log.push(format!("unlink {p}"));
                let r = std::fs::remove_file(self.path(&p));
                self.ok(r, &format!("unlink {p}"));
                self.model.remove(&p);
                self.files.remove(&p);
            }
            9 => {
                let dirs = self.of_kind(|n| matches!(n, Node::Dir { .. }));
                let empty: Vec<String> =
                    dirs.into_iter().filter(|d| self.is_empty_dir(d)).collect();
                let Some(p) = self.pick(&empty) else { return };
                self.log.push(format!("rmdir {p}"));
                let r = std::fs::remove_dir(self.path(&p));
                self.ok(r, &format!("rmdir {p}"));
                self.model.remove(&p);
            }
            10 => {
                let dir = self.pick(&self.dirs()).unwrap();
                let p = self.fresh(&dir, "l");
                let keys: Vec<String> = self.model.keys().cloned().collect();
                let target = match self.pick(&keys) {
                    Some(k) if self.rng.chance(0.7) => k,
                    _ => "nowhere/at/all".to_string(),
                };
                self.log.push(format!("symlink {p} -> {target}"));
                let r = std::os::unix::fs::symlink(&target, self.path(&p));
                self.ok(r, &format!("symlink {p}"));
                self.model.insert(p, Node::Link { target });
            }
            14 => {
                let files = self.of_kind(|n| matches!(n, Node::File { .. }));
                let Some(p) = self.pick(&files) else { return };
                let dir = self.pick(&self.dirs()).unwrap();
                let q = self.fresh(&dir, "h");
                self.log.push(format!("link {p} {q}"));
                let r = std::fs::hard_link(self.path(&p), self.path(&q));
                self.ok(r, &format!("link {p} {q}"));
                self.files.insert(q.clone(), self.files[&p]);
                self.model.insert(q, self.model[&p].clone());
            }
            _ => {
                let some = self.of_kind(|n| !matches!(n, Node::Link { .. }));
                let Some(p) = self.pick(&some) else { return };
                let bits = self.rng.range(0, 0o1000) as u32;
                let node = self.model.get(&p).cloned().unwrap();
                let node = match node {
                    Node::Dir { .. } => Node::Dir { mode: bits | 0o700 },
                    Node::File { data, .. } => Node::File {
                        data,
                        mode: bits | 0o600,
                    },
                    Node::Link { .. } => unreachable!("not a symlink"),
                };
                let mode = match &node {
                    Node::Dir { mode } | Node::File { mode, .. } => *mode,
                    Node::Link { .. } => unreachable!("not a symlink"),
                };
                self.log.push(format!("chmod {p} {mode:o}"));
                let r =
                    std::fs::set_permissions(self.path(&p), std::fs::Permissions::from_mode(mode));
                self.ok(r, &format!("chmod {p}"));
                match node {
                    Node::File { .. } => self.set_file(&p, node),
                    _ => {
                        self.model.insert(p, node);
                    }
                }
            }
        }
    }

    /// Moves an object (a directory with everything under it) to a fresh name or,
    /// for a file, over another file (over another name of the same file it does
    /// nothing, as POSIX says).
    fn rename(&mut self) {
        let keys: Vec<String> = self.model.keys().cloned().collect();
        let Some(src) = self.pick(&keys) else { return };
        let is_dir = matches!(self.model[&src], Node::Dir { .. });
        let inside = format!("{src}/");
        let dirs: Vec<String> = self
            .dirs()
            .into_iter()
            .filter(|d| !is_dir || (d != &src && !d.starts_with(&inside)))
            .collect();
        let dir = self.pick(&dirs).unwrap();
        let victims: Vec<String> = self
            .model
            .iter()
            .filter(|(k, n)| {
                matches!(n, Node::File { .. })
                    && **k != src
                    && k.rsplit_once('/').map_or("", |(d, _)| d) == dir
            })
            .map(|(k, _)| k.clone())
            .collect();
        let over = if !is_dir && self.rng.chance(0.3) {
            self.pick(&victims)
        } else {
            None
        };
        let dst = over.unwrap_or_else(|| self.fresh(&dir, "r"));
        self.log.push(format!("rename {src} -> {dst}"));
        let r = std::fs::rename(self.path(&src), self.path(&dst));
        self.ok(r, &format!("rename {src} -> {dst}"));
        if self.files.contains_key(&dst) && self.files.get(&src) == self.files.get(&dst) {
            return;
        }
        let moved: Vec<(String, Node)> = self
            .model
            .iter()
            .filter(|(k, _)| **k == src || k.starts_with(&inside))
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        for (k, n) in moved {
            let to = format!("{dst}{}", &k[src.len()..]);
            self.model.remove(&k);
            self.model.insert(to.clone(), n);
            self.files.remove(&to);
            if let Some(id) = self.files.remove(&k) {
                self.files.insert(to, id);
            }
        }
    }

    /// Checks the tree on the mount is exactly the model, and that the names of one
    /// file are one inode counting exactly that many links.
    fn verify(&self, what: &str) {
        let mut seen = BTreeMap::new();
        walk(&self.root, "", &mut seen);
        let want: Vec<&String> = self.model.keys().collect();
        let got: Vec<&String> = seen.keys().collect();
        if want != got {
            self.fail(format!(
                "{what}: names differ:\nmodel: {want:?}\nmount: {got:?}"
            ));
        }
        for (k, n) in &seen {
            if self.model[k] != *n {
                let short = |n: &Node| match n {
                    Node::File { data, mode } => {
                        format!("file of {} bytes, mode {mode:o}", data.len())
                    }
                    other => format!("{other:?}"),
                };
                self.fail(format!(
                    "{what}: {k} is {}, must be {}",
                    short(n),
                    short(&self.model[k])
                ));
            }
        }
        for p in self.files.keys() {
            let names = self.names_of(p);
            let md = self.ok(std::fs::symlink_metadata(self.path(p)), p);
            let first = self.ok(std::fs::symlink_metadata(self.path(&names[0])), &names[0]);
            if md.nlink() != names.len() as u64 || md.ino() != first.ino() {
                self.fail(format!(
                    "{what}: {p} (inode {}) counts {} links, must be {} names of inode {}: {names:?}",
                    md.ino(),
                    md.nlink(),
                    names.len(),
                    first.ino()
                ));
            }
        }
    }
}

/// Reads the tree under `dir` (relative names from `rel`) into `out`.
fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, Node>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let r = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let md = std::fs::symlink_metadata(e.path()).unwrap();
        let mode = md.permissions().mode() & 0o7777;
        let node = if md.is_dir() {
            walk(&e.path(), &r, out);
            Node::Dir { mode }
        } else if md.file_type().is_symlink() {
            Node::Link {
                target: std::fs::read_link(e.path())
                    .unwrap()
                    .into_os_string()
                    .into_string()
                    .unwrap(),
            }
        } else {
            Node::File {
                data: std::fs::read(e.path()).unwrap(),
                mode,
            }
        };
        out.insert(r, node);
    }
}

/// `pvfs fsck --grace 0s --json`: (exit code, problems as (kind, what)).
fn fsck(cluster: &Cluster, repair: bool) -> (i32, Vec<(String, String)>) {
    let mut args = vec!["fsck", "--grace", "0s", "--json"];
    if repair {
        args.push("--repair");
    }
    let out = cluster.run_cli(&args);
    let v = out.json_any();
    let problems = v["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap().to_string(),
                p["what"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (out.status.code().expect("fsck died of a signal"), problems)
}

#[test]
fn fsck_is_clean_after_fsx_a_namespace_storm_sparse_files_and_rm_rf() {
    const TEST: &str = "fsck_is_clean_after_fsx_a_namespace_storm_sparse_files_and_rm_rf";
    if !common::have_command("cc") {
        common::skip(TEST, "`cc` is not installed (scripts/install-deps)");
        return;
    }
    let seed = common::knob("PVFS_FSCK_SEED", 0x5eed_c1ea_u64, |_| true);
    let fsx_ops = common::knob("PVFS_FSX_OPS", 1500u64, |&n| (1..=100_000_000).contains(&n));
    let stress_ops = common::knob("PVFS_STRESS_OPS", 1500u64, |&n| {
        (1..=100_000_000).contains(&n)
    });
    eprintln!(
        "fsck after a workout: seed {seed} ({seed:#x}), {fsx_ops} fsx operations per file, \
         {stress_ops} storm operations (replay with PVFS_FSCK_SEED={seed})"
    );
    let cluster = Cluster::builder().servers(6).start();
    let mut m = Mount::start(&cluster, &[]);
    let fsx = m.scratch().join("fsx");
    common::compile_c("fuse/fsx.c", &fsx, &["-O1", "-Wall", "-Wextra", "-Werror"]);

    // Three layouts: the default (64 KiB over all six), 4 KiB and 1 MiB stripes
    // over all six.
    let layouts = [
        ("default", None, 2 << 20),
        ("wide4k", Some("stripe_size=4096 stripe_count=6"), 1 << 20),
        ("wide1m", Some("stripe_size=1M stripe_count=6"), 8 << 20),
    ];
    for (dir, layout, _) in &layouts {
        let d = m.join(dir);
        std::fs::create_dir(&d).unwrap();
        if let Some(l) = layout {
            set_layout(&d, l);
        }
    }

    // fsx on one file of each layout, in parallel.
    let runs: Vec<_> = layouts
        .iter()
        .enumerate()
        .map(|(i, (dir, _, maxlen))| {
            let file = m.join(dir).join("fsx.file");
            let s = seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(i as u64 + 1);
            let exe = fsx.clone();
            let ops = fsx_ops.to_string();
            let maxlen = maxlen.to_string();
            std::thread::spawn(move || {
                let out = mount::run_for(
                    Command::new(&exe)
                        .arg(&file)
                        .arg(s.to_string())
                        .arg(&ops)
                        .arg(&maxlen),
                    deadline(),
                );
                (file, s, out)
            })
        })
        .collect();
    for run in runs {
        let (file, s, out) = run.join().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "fsx on {} (seed {s}; replay the whole test with PVFS_FSCK_SEED={seed}):\n{text}{}\nmount log:\n{}",
            file.display(),
            String::from_utf8_lossy(&out.stderr),
            m.log_text()
        );
        eprint!("{text}");
    }

    // Sparse files: most of their datafiles are never written, so never created.
    let sparse = m.join("sparse");
    std::fs::create_dir(&sparse).unwrap();
    let mut rng = Rng::new(seed ^ 0x5a5a);
    let hundred = rng.bytes(100);
    // (file, writes at offsets)
    type Writes = Vec<(u64, Vec<u8>)>;
    let cases: Vec<(PathBuf, Writes)> = vec![
        (sparse.join("one"), vec![(300_000, hundred.clone())]),
        (
            m.join("wide4k/far"),
            vec![(10 << 20, hundred.clone()), (7, rng.bytes(5000))],
        ),
        (m.join("wide1m/one"), vec![(300_000, hundred.clone())]),
        (
            m.join("wide1m/spread"),
            vec![
                (0, rng.bytes(10)),
                (5 << 20, rng.bytes(3000)),
                (40 << 20, rng.bytes(1)),
            ],
        ),
    ];
    for (path, writes) in &cases {
        let mut want = Vec::new();
        for (off, data) in writes {
            write_at(path, *off, data);
            let end = *off as usize + data.len();
            if want.len() < end {
                want.resize(end, 0);
            }
            want[*off as usize..end].copy_from_slice(data);
        }
        common::assert_bytes_eq(
            &std::fs::read(path).unwrap(),
            &want,
            &path.display().to_string(),
        );
    }
    let hole = std::fs::File::create(m.join("wide4k/hole")).unwrap();
    hole.set_len(1 << 30).unwrap();
    drop(hole);

    // The namespace storm.
    let tree = m.join("tree");
    std::fs::create_dir(&tree).unwrap();
    let storm_seed = seed ^ 0x57_0a_4d;
    let mut storm = Storm {
        root: tree.clone(),
        model: BTreeMap::new(),
        files: BTreeMap::new(),
        rng: Rng::new(storm_seed),
        next: 0,
        log: Vec::new(),
        seed,
    };
    for _ in 0..stress_ops {
        storm.step();
    }
    storm.verify("after the storm");
    let count = |f: fn(&Node) -> bool| storm.model.values().filter(|n| f(n)).count();
    eprintln!(
        "storm: {} operations, {} file names ({} bytes; {} of them more links to a file), \
         {} directories, {} symlinks left",
        storm.log.len(),
        count(|n| matches!(n, Node::File { .. })),
        storm
            .model
            .values()
            .map(|n| match n {
                Node::File { data, .. } => data.len(),
                _ => 0,
            })
            .sum::<usize>(),
        storm.files.len() - storm.files.values().collect::<BTreeSet<_>>().len(),
        count(|n| matches!(n, Node::Dir { .. })),
        count(|n| matches!(n, Node::Link { .. })),
    );

    // rm -rf of part of it: the default layout's directory, and the first
    // directory at the top of the storm's tree (if it made one).
    let mut gone = vec![m.join("default")];
    if let Some(top) = storm
        .model
        .iter()
        .find(|(k, n)| !k.contains('/') && matches!(n, Node::Dir { .. }))
        .map(|(k, _)| k.clone())
    {
        gone.push(tree.join(&top));
        let inside = format!("{top}/");
        storm
            .model
            .retain(|k, _| *k != top && !k.starts_with(&inside));
        storm.files.retain(|k, _| storm.model.contains_key(k));
    }
    for g in &gone {
        mount::sh(&format!("rm -rf '{}'", g.display()), deadline());
        assert!(!g.exists(), "{} still there after rm -rf", g.display());
    }
    storm.verify("after rm -rf");

    // Unmounted (the mount waits for the background deletions of what it removed),
    // the file system is clean: no hole is taken for a lost datafile.
    m.unmount();
    drop(m);
    let (code, problems) = fsck(&cluster, false);
    assert!(
        code == 0 && problems.is_empty(),
        "fsck of a healthy file system (seed {seed}): exit {code}, {problems:#?}"
    );
    let out = cluster.run_cli(&["fsck", "--grace", "0s"]);
    assert_eq!(
        (out.status.code(), out.stdout.lines().last()),
        (Some(0), Some("clean")),
        "{}",
        out.stdout
    );

    // A datafile that held bytes, lost from its server's disk, is found, alone
    // (not the five datafiles of the same file that never existed).
    let tc = cluster.client();
    let (df, others) = tc.run(Duration::from_secs(120), async |c| {
        let layout = c
            .stat("/sparse/one")
            .await
            .unwrap()
            .layout()
            .unwrap()
            .clone();
        let (idx, _) = layout.stripe().locate(300_000);
        let others: Vec<_> = layout
            .datafiles
            .iter()
            .enumerate()
            .filter(|(i, _)| *i as u64 != idx)
            .map(|(_, d)| *d)
            .collect();
        (layout.datafiles[idx as usize], others)
    });
    for d in &others {
        assert!(
            !cluster.datafile_path(d.server as usize, d.handle).exists(),
            "datafile {:#x} of /sparse/one exists, though nothing was written to it",
            d.handle
        );
    }
    std::fs::remove_file(cluster.datafile_path(df.server as usize, df.handle)).unwrap();
    let (code, problems) = fsck(&cluster, false);
    assert_eq!(code, 1, "{problems:#?}");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].0, "MissingDatafile", "{problems:#?}");
    assert!(
        problems[0].1.contains(&format!("{:#x}", df.handle)),
        "{problems:#?}"
    );
    let (code, _) = fsck(&cluster, true);
    assert_eq!(code, 0, "after --repair");
    let (code, problems) = fsck(&cluster, false);
    assert!(code == 0 && problems.is_empty(), "{problems:#?}");
}
