//! Real programs on the FUSE mount: each test starts real servers,
//! mounts them in a temporary directory and runs unmodified tools there, comparing
//! what they produce with the same work done on the local disk:
//!
//! - `cp -a`, `diff -r`, `tar c`/`tar x` (to a file and through a pipe), `find`,
//!   `du`, `ls -lR`, `rm -rf` on this repository's own source tree;
//! - `git init`, `add`, `commit`, `log`, `status`, `fsck` in a repository on the mount;
//! - a C project built with `make` on the mount and its binary run, rebuilt only
//!   where a source changed;
//! - a SQLite database (python3 `sqlite3`) in rollback-journal and WAL modes;
//! - Python importing a module another process just wrote, on the same mount and
//!   through another mount (its import cache trusts a directory's mtime);
//! - `fio` sequential 1 MiB writes with checksums, verified again after a remount
//!   (so the data comes from the servers, not the kernel's page cache).
//!
//! The tools come from `scripts/install-deps`; a missing one fails the test and says so.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "fuse/mount.rs"]
mod mount;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::Cluster;
use mount::{run_for, sh, Mount};

/// Longest any program on the mount may take in these tests (`sh`, `run_for` and
/// `TestClient::run` scale it by `PVFS_TEST_SLOWDOWN`).
fn cmd_deadline() -> Duration {
    Duration::from_secs(180)
}

/// Whether every tool of `tools` is installed; if not, test `test` is skipped with
/// the reason (under `CI=true` that fails it) and the caller returns.
fn have_tools(test: &str, tools: &[&str]) -> bool {
    match tools.iter().find(|t| !common::have_command(t)) {
        None => true,
        Some(t) => {
            common::skip(
                test,
                &format!("`{t}` is not installed (scripts/install-deps installs it)"),
            );
            false
        }
    }
}

/// This repository's source tree (the crates), a real tree of sources to copy.
fn source_tree() -> PathBuf {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::canonicalize(crates).unwrap()
}

/// `sh -c SCRIPT` in directory `dir`, asserting success; returns stdout.
#[track_caller]
fn sh_in(dir: &Path, script: &str) -> String {
    sh(
        &format!("cd '{}' && {script}", dir.display()),
        cmd_deadline(),
    )
}

#[test]
fn a_source_tree_survives_cp_tar_find_du_and_rm() {
    if !have_tools(
        "a_source_tree_survives_cp_tar_find_du_and_rm",
        &["cp", "diff", "tar", "find", "du", "ls", "rm"],
    ) {
        return;
    }
    let cluster = Cluster::start();
    let mut m = Mount::start(&cluster, &[]);
    let local = tempfile::tempdir().unwrap();
    let l = local.path();
    // A snapshot on the local disk is the reference (the repository may change while
    // the test runs).
    sh(
        &format!("cp -a {} {}/src", source_tree().display(), l.display()),
        cmd_deadline(),
    );
    let src = l.join("src");
    let mp = m.path().to_path_buf();

    // Copy in with cp -a; the copy is identical, file by file.
    sh(
        &format!(
            "cp -a {s} {m}/src && diff -r {s} {m}/src",
            s = src.display(),
            m = mp.display()
        ),
        cmd_deadline(),
    );
    let files_local = sh_in(&src, "find . -type f | wc -l");
    let files_mount = sh_in(&mp.join("src"), "find . -type f | wc -l");
    assert_eq!(files_local, files_mount);
    assert!(files_local.trim().parse::<u64>().unwrap() > 50);

    // tar: archive the tree from the mount into a local file, unpack it into the
    // mount elsewhere, and stream a second copy through a pipe; all identical.
    sh(
        &format!(
            "tar -C {m} -cf {l}/src.tar src && mkdir {m}/x && tar -C {m}/x -xf {l}/src.tar \
             && diff -r {s} {m}/x/src \
             && mkdir {m}/y && tar -C {m} -cf - src | tar -C {m}/y -xf - && diff -r {m}/src {m}/y/src \
             && mkdir {l}/out && tar -C {l}/out -xf {l}/src.tar && diff -r {s} {l}/out/src",
            s = src.display(),
            m = mp.display(),
            l = l.display()
        ),
        cmd_deadline(),
    );
    // The archive of the mount's tree lists the same members as one of the local tree.
    let members = |dir: &Path| {
        let mut v: Vec<String> = sh_in(dir, "tar -cf - src | tar -tf -")
            .lines()
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    assert_eq!(members(&mp), members(l));

    // find, du and ls -lR see what the local tree has.
    let names = |dir: &Path| {
        let mut v: Vec<String> = sh_in(dir, "find . -printf '%y %s %m %p\\n' | grep -v '^d'")
            .lines()
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&src), names(&mp.join("src")));
    let apparent = |dir: &Path| -> u64 {
        sh_in(dir, "du -s --apparent-size -B1 .")
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    // Directory sizes differ between file systems; regular files and links must not.
    let file_bytes = |dir: &Path| -> u64 {
        sh_in(dir, "find . ! -type d -printf '%s\\n'")
            .lines()
            .map(|s| s.parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(file_bytes(&src), file_bytes(&mp.join("src")));
    assert!(apparent(&mp.join("src")) >= file_bytes(&src));
    let lsr = sh_in(&mp, "ls -lR src");
    assert!(lsr.contains("Cargo.toml"), "{lsr}");
    assert_eq!(
        lsr.lines().filter(|l| l.starts_with('-')).count(),
        files_local.trim().parse::<usize>().unwrap()
    );

    // rm -rf takes everything away.
    sh_in(&mp, "rm -rf src x y");
    assert_eq!(std::fs::read_dir(&mp).unwrap().count(), 0);
    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());
    // Nothing is left behind: the datafiles unlinks leave for the background are
    // gone once the mount has ended (fsck finds no orphans).
    let out = common::run_pvfs(&["fsck", "-c", cluster.config_str()], &[], &[]);
    assert!(
        out.status.success(),
        "fsck after rm -rf: {}{}",
        out.stdout,
        out.stderr
    );
}

#[test]
fn git_works_inside_the_mount() {
    if !have_tools("git_works_inside_the_mount", &["git"]) {
        return;
    }
    let cluster = Cluster::start();
    let mut m = Mount::start(&cluster, &[]);
    let repo = m.join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &str| {
        sh_in(
            &repo,
            &format!(
                "git -c user.name=pvfs -c user.email=pvfs@localhost \
                 -c init.defaultBranch=main -c core.autocrlf=false {args}"
            ),
        )
    };
    git("init -q .");
    sh(
        &format!(
            "cp -a {}/proto {}/",
            source_tree().display(),
            repo.display()
        ),
        cmd_deadline(),
    );
    git("add -A");
    git("commit -q -m 'first: the protocol crate'");
    std::fs::write(repo.join("NOTES"), "written on pvfs\n").unwrap();
    sh_in(&repo, "echo '// changed' >> proto/src/lib.rs");
    git("add -A");
    git("commit -q -m 'second: notes'");
    git("mv NOTES NOTES.txt");
    git("commit -q -m 'third: rename'");

    let log = git("log --format=%s");
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            "third: rename",
            "second: notes",
            "first: the protocol crate"
        ]
    );
    assert_eq!(git("status --porcelain"), "", "work tree clean");
    git("fsck --full --strict");
    let diff = git("diff --stat HEAD~2 HEAD");
    assert!(
        diff.contains("NOTES.txt") && diff.contains("lib.rs"),
        "{diff}"
    );
    // A clone out of the mount has the same history and files.
    let local = tempfile::tempdir().unwrap();
    sh(
        &format!(
            "git clone -q {} {}/clone && diff -r --exclude=.git {} {}/clone",
            repo.display(),
            local.path().display(),
            repo.display(),
            local.path().display()
        ),
        cmd_deadline(),
    );
    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());
}

#[test]
fn make_builds_a_c_project_and_its_binary_runs() {
    if !have_tools(
        "make_builds_a_c_project_and_its_binary_runs",
        &["make", "cc"],
    ) {
        return;
    }
    let cluster = Cluster::start();
    let mut m = Mount::start(&cluster, &[]);
    let proj = m.join("proj");
    std::fs::create_dir(&proj).unwrap();
    std::fs::write(
        proj.join("Makefile"),
        "CC ?= cc\nOBJS = main.o util.o table.o\n\
         app: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n\
         %.o: %.c util.h\n\t$(CC) -O1 -Wall -c -o $@ $<\n\
         clean:\n\trm -f app $(OBJS)\n",
    )
    .unwrap();
    std::fs::write(
        proj.join("util.h"),
        "long sum_to(long n);\nlong table(int i);\n",
    )
    .unwrap();
    std::fs::write(
        proj.join("util.c"),
        "#include \"util.h\"\nlong sum_to(long n) { long s = 0; for (long i = 1; i <= n; i++) s += i; return s; }\n",
    )
    .unwrap();
    std::fs::write(
        proj.join("table.c"),
        "#include \"util.h\"\nstatic const long t[] = {2, 3, 5, 7, 11};\nlong table(int i) { return t[i % 5]; }\n",
    )
    .unwrap();
    std::fs::write(
        proj.join("main.c"),
        "#include <stdio.h>\n#include \"util.h\"\n\
         int main(void) { printf(\"sum=%ld prime=%ld\\n\", sum_to(1000), table(3)); return 0; }\n",
    )
    .unwrap();

    let out = sh_in(&proj, "make -j2 2>&1 && ./app");
    assert!(out.contains("sum=500500 prime=7"), "{out}");
    // Timestamps are right: nothing to do right after a build...
    let again = sh_in(&proj, "make 2>&1");
    assert!(again.contains("up to date"), "{again}");
    // ...and after a source changes, only its object and the binary are rebuilt (make
    // compares modification times: table.c is touched until it is newer than table.o).
    sh_in(&proj, "sed -i 's/11}/13}/; s/7, /17, /' table.c");
    let mtime = |f: &str| std::fs::metadata(proj.join(f)).unwrap().modified().unwrap();
    common::poll(
        "table.c to be newer than table.o",
        common::scaled(Duration::from_secs(10)),
        || {
            sh_in(&proj, "touch table.c");
            (mtime("table.c") > mtime("table.o")).then_some(())
        },
    );
    let rebuilt = sh_in(&proj, "make 2>&1");
    assert!(rebuilt.contains("table.o"), "{rebuilt}");
    assert!(
        !rebuilt.contains("main.c") && !rebuilt.contains("util.c"),
        "{rebuilt}"
    );
    let out = sh_in(&proj, "./app");
    assert_eq!(out.trim(), "sum=500500 prime=17");
    sh_in(&proj, "make clean >/dev/null");
    let mut left: Vec<String> = std::fs::read_dir(&proj)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["Makefile", "main.c", "table.c", "util.c", "util.h"]);
    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());
}

/// The SQLite workload: a table filled in 20 transactions, an index, queries, an
/// integrity check after reopening, a delete and a VACUUM.
const SQLITE_SCRIPT: &str = r#"
import sqlite3, sys
path, mode = sys.argv[1], sys.argv[2]
db = sqlite3.connect(path)
got = db.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
assert got == mode, (got, mode)
db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v REAL)")
for b in range(20):
    with db:
        db.executemany("INSERT INTO t (name, v) VALUES (?, ?)",
                       [(f"n{b}-{i}", i * 0.5) for i in range(1000)])
db.execute("CREATE INDEX tn ON t(name)")
db.commit()
db.close()
db = sqlite3.connect(path)
assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
assert db.execute("SELECT count(*), sum(v) FROM t").fetchone() == (20000, 4995000.0)
assert db.execute("SELECT id FROM t WHERE name = 'n7-123'").fetchone() == (7124,)
with db:
    db.execute("DELETE FROM t WHERE id % 2 = 0")
db.execute("VACUUM")
assert db.execute("SELECT count(*) FROM t").fetchone() == (10000,)
assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
db.close()
print("ok")
"#;

#[test]
fn sqlite_databases_work_in_journal_and_wal_modes() {
    if !have_tools(
        "sqlite_databases_work_in_journal_and_wal_modes",
        &["python3"],
    ) {
        return;
    }
    let cluster = Cluster::start();
    let mut m = Mount::start(&cluster, &[]);
    let local = tempfile::tempdir().unwrap();
    let script = local.path().join("db.py");
    std::fs::write(&script, SQLITE_SCRIPT).unwrap();
    let sqlite = |db: &Path, mode: &str, what: &str| {
        let out = run_for(
            Command::new("python3").arg(&script).arg(db).arg(mode),
            cmd_deadline(),
        );
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
            "sqlite in {mode} mode{what}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for mode in ["delete", "wal"] {
        sqlite(&m.join(&format!("{mode}.db")), mode, "");
    }
    // Another client sees the database files with their full size.
    let tc = cluster.client();
    let on_mount = std::fs::metadata(m.join("delete.db")).unwrap().len();
    let st = tc.run(cmd_deadline(), async |c| {
        c.stat("/delete.db").await.unwrap()
    });
    assert_eq!(st.size, on_mount);
    assert!(on_mount > 100_000);
    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());

    // The same on a mount that writes behind: SQLite's fsyncs order its writes.
    let mut m = Mount::start(&cluster, &["--write-behind"]);
    sqlite(&m.join("behind.db"), "wal", " with --write-behind");
    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());
}

/// Imports from directory argv[1] a module that another process writes into argv[2]
/// (the same directory, through the same or another mount) after this process listed
/// the directory: Python keeps each directory's listing until the directory's mtime
/// changes, so the import finds the module only if the write moved it.
const IMPORT_SCRIPT: &str = r#"
import os, subprocess, sys
src, dst = sys.argv[1], sys.argv[2]
sys.path.insert(0, src)
import early_mod
assert early_mod.VALUE == 1
try:
    import late_mod
    sys.exit("late_mod exists already")
except ImportError:
    pass
code = "open(%r, 'w').write('VALUE = 42\\n')" % os.path.join(dst, "late_mod.py")
subprocess.run([sys.executable, "-c", code], check=True)
import late_mod  # no importlib.invalidate_caches()
assert late_mod.VALUE == 42
print("ok")
"#;

#[test]
fn python_imports_a_module_another_process_just_wrote() {
    if !have_tools(
        "python_imports_a_module_another_process_just_wrote",
        &["python3"],
    ) {
        return;
    }
    let cluster = Cluster::start();
    let mut m = Mount::start(&cluster, &[]);
    // A second mount (another client, as on another node), whose caches only the
    // servers' change feeds keep current.
    let mut other = Mount::start(
        &cluster,
        &["--attr-timeout", "600s", "--entry-timeout", "600s"],
    );
    let local = tempfile::tempdir().unwrap();
    let script = local.path().join("import.py");
    std::fs::write(&script, IMPORT_SCRIPT).unwrap();
    for (dir, reader, writer) in [("same", &m, &m), ("other", &other, &m)] {
        std::fs::create_dir(m.join(dir)).unwrap();
        std::fs::write(m.join(&format!("{dir}/early_mod.py")), "VALUE = 1\n").unwrap();
        let out = run_for(
            Command::new("python3")
                .arg(&script)
                .arg(reader.join(dir))
                .arg(writer.join(dir))
                .env("PYTHONDONTWRITEBYTECODE", "1"),
            cmd_deadline(),
        );
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
            "python import through the {dir} mount: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for mnt in [&mut other, &mut m] {
        let st = mnt.unmount();
        assert!(st.success(), "mount process: {st}\n{}", mnt.log_text());
    }
}

#[test]
fn fio_sequential_io_verifies_before_and_after_a_remount() {
    if !have_tools(
        "fio_sequential_io_verifies_before_and_after_a_remount",
        &["fio"],
    ) {
        return;
    }
    let cluster = Cluster::start();
    let fio = |dir: &Path, rw: &str, jobs: u32, extra: &str| {
        sh(
            &format!(
                "fio --name=seq --directory={} --rw={rw} --bs=1M --size=48M --numjobs={jobs} \
                 --verify=crc32c --verify_state_save=0 --group_reporting --output-format=terse {extra}",
                dir.display()
            ),
            cmd_deadline(),
        )
    };
    let mut m = Mount::start(&cluster, &[]);
    let one = m.join("one");
    let four = m.join("four");
    std::fs::create_dir(&one).unwrap();
    std::fs::create_dir(&four).unwrap();
    // Written and verified while the writer's mount is up.
    fio(&one, "write", 1, "--do_verify=1");
    fio(&four, "write", 4, "--do_verify=1");
    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());
    // And by a mount that writes behind (reads of its own writes wait for them).
    let mut m = Mount::start(&cluster, &["--write-behind"]);
    let behind = m.join("behind");
    std::fs::create_dir(&behind).unwrap();
    fio(&behind, "write", 1, "--do_verify=1");
    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());

    // A new mount has an empty page cache: the data comes from the servers.
    let mut m = Mount::start(&cluster, &[]);
    fio(&m.join("one"), "read", 1, "--verify_only=1");
    fio(&m.join("four"), "read", 4, "--verify_only=1");
    fio(&m.join("behind"), "read", 1, "--verify_only=1");
    // dd reads the same bytes as the other client does.
    let tc = cluster.client();
    let whole = tc.run(cmd_deadline(), async |c| {
        let f = c.open("/four/seq.2.0").await.unwrap();
        let mut buf = vec![0u8; 48 << 20];
        let n = f.read_at(0, &mut buf).await.unwrap();
        buf.truncate(n);
        buf
    });
    let via_mount = std::fs::read(m.join("four/seq.2.0")).unwrap();
    assert_eq!(whole.len(), 48 << 20);
    assert!(
        whole == via_mount,
        "the mount and the client library disagree"
    );

    // A flipped byte on the file system is caught by fio's verification: the
    // verification above could fail.
    let f = m.join("one/seq.0.0");
    sh(
        &format!(
            "printf 'X' | dd of={} bs=1 seek=5000000 conv=notrunc status=none",
            f.display()
        ),
        cmd_deadline(),
    );
    let out = run_for(
        Command::new("sh").arg("-c").arg(format!(
            "fio --name=seq --directory={} --rw=read --bs=1M --size=48M --numjobs=1 \
             --verify=crc32c --verify_state_save=0 --verify_only=1 --output-format=terse",
            m.join("one").display()
        )),
        cmd_deadline(),
    );
    assert!(!out.status.success(), "fio missed a corrupted block");
    let st = m.unmount();
    assert!(st.success(), "mount process: {st}\n{}", m.log_text());
}
