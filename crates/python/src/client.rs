//! `pvfs._pvfs.Client`: one blocking client (its own tokio runtime) per object, each
//! method one client call with the GIL let go.

use std::future::Future;
use std::path::{Path, PathBuf};

use pvfs_client::blocking::{self, BlockingClient};
use pvfs_client::{Client, LayoutSpec};
use pvfs_config::{Config, ConfigError};
use pvfs_proto::{Errno, ObjDetail};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::{io_to_py, os_error, to_py};
use crate::file::PyFile;
use crate::stat::{layout_dict, PyStat};

/// The configuration file: `config` if given, else `$PVFS_CONFIG` (the C library's
/// lookup).
fn config_path(config: Option<&str>) -> PyResult<PathBuf> {
    blocking::config_path(config).ok_or_else(|| os_error(Errno::EINVAL, blocking::NO_CONFIG))
}

/// Loads the configuration, its errors as `OSError`s (ENOENT, EACCES, or EINVAL with
/// the line and key at fault).
fn load(path: &Path) -> PyResult<Config> {
    Config::load(path).map_err(|e| {
        let errno = match &e {
            ConfigError::Io { source, .. } => Errno::from_io(source),
            _ => Errno::EINVAL,
        };
        os_error(errno, e.to_string())
    })
}

/// A layout request from optional fields (unset ones come from the parent
/// directory's default, then the file system's).
fn spec(stripe_size: Option<u64>, stripe_count: Option<u32>, replicas: Option<u32>) -> LayoutSpec {
    LayoutSpec {
        stripe_size,
        stripe_count,
        base: None,
        replicas,
    }
}

/// A spec as a dict (unset fields None).
fn spec_dict<'py>(py: Python<'py>, s: &LayoutSpec) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("stripe_size", s.stripe_size)?;
    d.set_item("stripe_count", s.stripe_count)?;
    d.set_item("replicas", s.replicas)?;
    Ok(d)
}

/// A connection to one pvfs file system (`Client(config=None)`: the configuration
/// file, else `$PVFS_CONFIG`). No server is contacted until the first call. Not
/// usable in a child after `fork` (make a new one there).
#[pyclass(name = "Client", module = "pvfs._pvfs", frozen)]
pub struct PyClient {
    bc: BlockingClient,
    /// The client creates go through: carries the process's umask.
    client: Client,
    config_path: PathBuf,
}

impl PyClient {
    /// Runs one client operation to completion without the GIL.
    pub(crate) fn run<T, F>(&self, py: Python<'_>, f: F) -> PyResult<T>
    where
        F: Future<Output = pvfs_client::Result<T>> + Send,
        T: Send,
    {
        py.detach(|| self.bc.block_on(f)).map_err(to_py)
    }
}

#[pymethods]
impl PyClient {
    #[new]
    #[pyo3(signature = (config=None))]
    fn new(py: Python<'_>, config: Option<&str>) -> PyResult<PyClient> {
        let path = config_path(config)?;
        let cfg = load(&path)?;
        let bc = py
            .detach(|| BlockingClient::new(cfg, blocking::default_threads()))
            .map_err(io_to_py)?;
        let client = bc.client().with_umask(blocking::process_umask());
        Ok(PyClient {
            bc,
            client,
            config_path: path,
        })
    }

    /// The configuration file this client was made from.
    #[getter]
    fn config_path(&self) -> String {
        self.config_path.display().to_string()
    }

    /// The servers' names, in configuration order.
    #[getter]
    fn servers(&self) -> Vec<String> {
        let c = self.bc.client().config();
        c.servers.iter().map(|s| s.name.clone()).collect()
    }

    /// `stat`: attributes of what `path` names (a final symlink followed).
    fn stat(&self, py: Python<'_>, path: &str) -> PyResult<PyStat> {
        let a = self.run(py, self.client.stat(path))?;
        Ok(PyStat::from(&a))
    }

    /// `lstat`: like `stat`, a final symlink described itself.
    fn lstat(&self, py: Python<'_>, path: &str) -> PyResult<PyStat> {
        let a = self.run(py, self.client.lstat(path))?;
        Ok(PyStat::from(&a))
    }

    /// The names in directory `path` (no "." or "..").
    fn listdir(&self, py: Python<'_>, path: &str) -> PyResult<Vec<String>> {
        let entries = self.run(py, self.client.readdir(path))?;
        Ok(entries.into_iter().map(|e| e.name).collect())
    }

    /// The entries of directory `path` with their attributes, sizes included: one
    /// batched request per server (readdirplus). Entries removed meanwhile are left
    /// out.
    fn scandir(&self, py: Python<'_>, path: &str) -> PyResult<Vec<(String, PyStat)>> {
        let all = self.run(py, self.client.readdir_plus(path, true))?;
        let mut out = Vec::with_capacity(all.len());
        for (entry, attr) in all {
            match attr {
                Ok(a) => out.push((entry.name, PyStat::from(&a))),
                Err(e) if e.errno == Errno::ENOENT => {}
                Err(e) => return Err(to_py(e)),
            }
        }
        Ok(out)
    }

    /// `mkdir`: a directory, inheriting its parent's default layout.
    #[pyo3(signature = (path, mode=0o777))]
    fn mkdir(&self, py: Python<'_>, path: &str, mode: u32) -> PyResult<()> {
        self.run(py, self.client.mkdir(path, mode & 0o7777))?;
        Ok(())
    }

    /// `mkdir -p`: `path` and its missing parents; with `exist_ok` false, a `path`
    /// that exists already is FileExistsError.
    #[pyo3(signature = (path, mode=0o777, exist_ok=false))]
    fn makedirs(&self, py: Python<'_>, path: &str, mode: u32, exist_ok: bool) -> PyResult<()> {
        if !exist_ok {
            let found = py.detach(|| self.bc.block_on(self.client.stat_lite(path)));
            match found {
                Ok(_) => {
                    return Err(os_error(
                        Errno::EEXIST,
                        format!("{path}: {}", Errno::EEXIST.describe()),
                    ))
                }
                Err(e) if e.errno == Errno::ENOENT => {}
                Err(e) => return Err(to_py(e)),
            }
        }
        self.run(py, self.client.mkdir_all(path, mode & 0o7777))
    }

    /// `rmdir`: removes the empty directory `path`.
    fn rmdir(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        self.run(py, self.client.rmdir(path))
    }

    /// `unlink`: removes the name `path` (not a directory).
    fn unlink(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        self.run(py, self.client.unlink(path))
    }

    /// `rename`: moves `src` to `dst`, replacing a `dst` that may be replaced.
    fn rename(&self, py: Python<'_>, src: &str, dst: &str) -> PyResult<()> {
        self.run(py, self.client.rename(src, dst))
    }

    /// `truncate`: sets the size of file `path`.
    fn truncate(&self, py: Python<'_>, path: &str, size: u64) -> PyResult<()> {
        self.run(py, self.client.truncate(path, size))
    }

    /// `symlink`: creates `path` pointing to `target`.
    fn symlink(&self, py: Python<'_>, target: &str, path: &str) -> PyResult<()> {
        self.run(py, self.client.symlink(target, path))?;
        Ok(())
    }

    /// `readlink`: the target of symlink `path`.
    fn readlink(&self, py: Python<'_>, path: &str) -> PyResult<String> {
        self.run(py, self.client.readlink(path))
    }

    /// Opens the regular file `path`: with `create`, makes it if missing (with
    /// `exclusive`, FileExistsError if it exists), with the layout fields given
    /// (unset ones from the directory's default, then the file system's); with
    /// `truncate`, empties it.
    #[pyo3(signature = (path, *, create=false, exclusive=false, truncate=false, mode=0o666,
                        stripe_size=None, stripe_count=None, replicas=None))]
    #[allow(clippy::too_many_arguments)]
    fn open_file(
        &self,
        py: Python<'_>,
        path: &str,
        create: bool,
        exclusive: bool,
        truncate: bool,
        mode: u32,
        stripe_size: Option<u64>,
        stripe_count: Option<u32>,
        replicas: Option<u32>,
    ) -> PyResult<PyFile> {
        let layout = spec(stripe_size, stripe_count, replicas);
        let c = &self.client;
        let file = self.run(py, async {
            let file = if create {
                c.create(path, mode & 0o7777, layout, exclusive).await?
            } else {
                c.open(path).await?
            };
            if truncate {
                file.truncate(0).await.map_err(|e| e.for_path(path))?;
            }
            Ok(file)
        })?;
        Ok(PyFile::new(self.bc.clone(), file, path.to_string()))
    }

    /// Where file `path`'s stripes live: a dict with `stripe_size`, `stripe_count`,
    /// `replicas`, `width` and `datafiles` (each with its `server`, `handle` and the
    /// bytes it holds, `size`).
    fn layout<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyDict>> {
        let report = self.run(py, self.client.layout(path))?;
        let layout = report
            .attr
            .layout()
            .ok_or_else(|| os_error(Errno::EINVAL, format!("{path}: not a regular file")))?;
        let d = layout_dict(py, self.bc.client().config(), layout)?;
        if let Some(dfs) = d.get_item("datafiles")? {
            for (entry, (_, _, st)) in dfs.try_iter()?.zip(&report.datafiles) {
                entry?.set_item("size", st.size)?;
            }
        }
        d.set_item("size", report.attr.size)?;
        Ok(d)
    }

    /// Sets the default layout of what is created in directory `path` from now on
    /// (unset fields from its parent's, then the file system's); `clear` removes it.
    #[pyo3(signature = (path, *, stripe_size=None, stripe_count=None, replicas=None, clear=false))]
    fn set_dir_layout(
        &self,
        py: Python<'_>,
        path: &str,
        stripe_size: Option<u64>,
        stripe_count: Option<u32>,
        replicas: Option<u32>,
        clear: bool,
    ) -> PyResult<()> {
        let layout = (!clear).then(|| spec(stripe_size, stripe_count, replicas));
        self.run(py, self.client.set_dir_layout(path, layout))?;
        Ok(())
    }

    /// The default layout of directory `path` as a dict (unset fields None), or
    /// None when it has none.
    fn dir_layout<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        let attr = self.run(py, self.client.stat_lite(path))?;
        match attr.detail {
            ObjDetail::Dir { default_layout, .. } => default_layout
                .as_ref()
                .map(|s| spec_dict(py, s))
                .transpose(),
            _ => Err(os_error(
                Errno::ENOTDIR,
                format!("{path}: {}", Errno::ENOTDIR.describe()),
            )),
        }
    }

    /// Space and objects over all servers: `total_bytes`, `free_bytes`,
    /// `avail_bytes`, `objects`, `datafiles`, and `servers_down` (those that did not
    /// answer).
    fn statfs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = py.detach(|| self.bc.block_on(self.client.statfs()));
        let d = PyDict::new(py);
        d.set_item("total_bytes", s.total_bytes)?;
        d.set_item("free_bytes", s.free_bytes)?;
        d.set_item("avail_bytes", s.avail_bytes)?;
        d.set_item("objects", s.objects)?;
        d.set_item("datafiles", s.datafiles)?;
        let down = s.servers.iter().filter(|x| x.stat.is_err()).count();
        d.set_item("servers_down", down)?;
        Ok(d)
    }

    /// `syncfs`: everything acknowledged so far made durable on every server.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, self.client.syncfs())
    }

    fn __repr__(&self) -> String {
        format!("pvfs.Client({:?})", self.config_path.display().to_string())
    }
}
