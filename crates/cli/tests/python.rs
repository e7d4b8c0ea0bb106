//! The Python package (`crates/python`: `pvfs`, its fsspec file system) against a
//! real cluster: `python3 -m pytest` on `crates/python/tests` with `PVFS_CONFIG`
//! naming the cluster's configuration. The tests are fsspec's own abstract suite
//! (copy, get, put, open, pipe), pandas and pyarrow over `pvfs://` URLs (parquet
//! round trips, a `pyarrow.dataset` over a directory of parquet files), xarray
//! opening a netCDF file and dask a directory of parquet files, a 64 MiB
//! write and read compared byte for byte with each data server's share, layouts asked
//! and read back, and errors as the `OSError` of their errno.
//!
//! The package is the wheel `scripts/build-python` built and installed (tests never
//! build; `scripts/test` builds it first). Without it, without a Python package the
//! tests use (`scripts/install-deps` installs them), or with an installed `pvfs`
//! whose Python files are not this tree's, the test is skipped with the reason, which
//! fails under `CI=true`.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{scaled, skip, wait_output, Cluster};

/// Longest the whole pytest run may take (about 4 minutes on a busy 2-core
/// machine with debug servers), before scaling by the suite's slowdown factor.
const DEADLINE: Duration = Duration::from_secs(900);

/// Each test file and the fewest tests it must pass (fsspec's suite grows with its
/// versions: at least what 2026.9 has).
const FILES: &[(&str, usize)] = &[
    ("test_fsspec_abstract.py", 137),
    ("test_dataframes.py", 4),
    ("test_client.py", 4),
    ("test_xarray_dask.py", 2),
];

fn python_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../python")
}

/// Why the package cannot be tested here, if it cannot: a module missing, or an
/// installed `pvfs` whose Python files differ from this tree's.
fn unusable() -> Option<String> {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import pvfs, pvfs.fsspec, fsspec, pytest, pandas, pyarrow, xarray, \
             dask.dataframe, h5netcdf, h5py, os; print(os.path.dirname(pvfs.__file__))",
        ])
        .stderr(Stdio::piped())
        .output();
    let out = match probe {
        Ok(o) => o,
        Err(e) => return Some(format!("python3 cannot run: {e}")),
    };
    if !out.status.success() {
        return Some(format!(
            "python3 lacks a module ({}); scripts/install-deps installs pytest, fsspec, \
             pandas, pyarrow, xarray, dask, h5netcdf and h5py, scripts/build-python the \
             pvfs package",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    let installed = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    for name in ["__init__.py", "fsspec.py"] {
        let ours = std::fs::read(python_dir().join("python/pvfs").join(name)).unwrap();
        if std::fs::read(installed.join(name)).ok().as_deref() != Some(&ours[..]) {
            return Some(format!(
                "the installed pvfs package ({}) is not this tree's ({name} differs); \
                 scripts/build-python builds and installs it",
                installed.display()
            ));
        }
    }
    None
}

/// Runs pytest on the package's tests against the cluster of `config`; returns its
/// exit status and output.
fn pytest(config: &Path, work: &Path) -> (bool, String) {
    let tests = python_dir().join("tests");
    let child = Command::new("python3")
        .args(["-m", "pytest", "-rA", "-p", "no:cacheprovider"])
        .arg(format!("--rootdir={}", tests.display()))
        .arg(&tests)
        .current_dir(work)
        .env("PVFS_CONFIG", config)
        // No bytecode or caches written into the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PVFS_METRICS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python3 -m pytest");
    let out = wait_output(child, scaled(DEADLINE), "python3 -m pytest");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_python_package_passes_fsspecs_suite_and_pandas_and_pyarrow_on_a_real_cluster() {
    let test = "the_python_package_passes_fsspecs_suite_and_pandas_and_pyarrow_on_a_real_cluster";
    if let Some(why) = unusable() {
        skip(test, &why);
        return;
    }
    let cluster = Cluster::start();
    let (ok, out) = pytest(cluster.config_path(), cluster.dir());
    assert!(ok, "pytest failed:\n{out}");
    // `-rA` lists every test with its outcome: all passed, none skipped.
    let outcome = |word: &str| {
        out.lines()
            .filter(|l| l.starts_with(&format!("{word} ")))
            .count()
    };
    for word in ["FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"] {
        assert_eq!(outcome(word), 0, "{word} tests:\n{out}");
    }
    for (file, least) in FILES {
        let passed = out
            .lines()
            .filter(|l| l.starts_with("PASSED ") && l.contains(&format!("{file}::")))
            .count();
        assert!(
            passed >= *least,
            "{file}: {passed} tests passed, expected at least {least}:\n{out}"
        );
    }
    let total: usize = outcome("PASSED");
    let summary = format!("{total} passed");
    assert!(
        out.lines().any(|l| l.contains(&summary)),
        "pytest's summary does not say {summary}:\n{out}"
    );
    cluster.assert_no_panics();
}
