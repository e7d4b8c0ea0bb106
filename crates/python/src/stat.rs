//! What the package says of objects: `Stat` (an object's attributes, as `os.stat`
//! gives them) and layouts as dicts. Shared by the client and its files.

use pvfs_client::{Attr, ObjKind};
use pvfs_config::Config;
use pvfs_proto::layout::Layout;
use pvfs_proto::Timespec;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Seconds since the epoch as a float, as `os.stat` gives them.
fn secs(t: Timespec) -> f64 {
    t.secs as f64 + f64::from(t.nsecs) / 1e9
}

/// What `stat` says of an object.
#[pyclass(name = "Stat", module = "pvfs._pvfs", frozen, get_all)]
#[derive(Clone, Debug)]
pub struct PyStat {
    /// Bytes (a file's logical size, from its datafiles).
    pub size: u64,
    /// `st_mode`: type bits and permission bits.
    pub mode: u32,
    /// "file", "directory", "symlink" or "other".
    pub kind: &'static str,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Link count.
    pub nlink: u32,
    /// Last access, seconds since the epoch.
    pub atime: f64,
    /// Last data modification, seconds since the epoch.
    pub mtime: f64,
    /// Last attribute change, seconds since the epoch.
    pub ctime: f64,
    /// The object's handle (its inode number).
    pub handle: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
}

#[pymethods]
impl PyStat {
    /// Whether it is a directory.
    fn is_dir(&self) -> bool {
        self.kind == "directory"
    }

    /// Whether it is a regular file.
    fn is_file(&self) -> bool {
        self.kind == "file"
    }

    fn __repr__(&self) -> String {
        format!(
            "pvfs.Stat(kind={:?}, size={}, mode={:#o}, handle={:#x})",
            self.kind, self.size, self.mode, self.handle
        )
    }
}

impl From<&Attr> for PyStat {
    fn from(a: &Attr) -> PyStat {
        PyStat {
            size: a.size,
            mode: a.st_mode(),
            kind: match a.kind() {
                ObjKind::Dir => "directory",
                ObjKind::File => "file",
                ObjKind::Symlink => "symlink",
                ObjKind::Node(_) => "other",
            },
            uid: a.uid,
            gid: a.gid,
            nlink: a.nlink,
            atime: secs(a.atime),
            mtime: secs(a.mtime),
            ctime: secs(a.ctime),
            handle: a.handle,
            blocks: a.blocks,
        }
    }
}

/// A layout as a dict: stripe size, stripe count (datafiles), copies, width and each
/// datafile's server and handle.
pub fn layout_dict<'py>(
    py: Python<'py>,
    config: &Config,
    layout: &Layout,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("stripe_size", layout.stripe_size)?;
    d.set_item("stripe_count", layout.datafiles.len())?;
    d.set_item("replicas", layout.replicas)?;
    d.set_item("width", layout.width)?;
    let dfs = PyList::empty(py);
    for df in &layout.datafiles {
        let e = PyDict::new(py);
        let name = config
            .servers
            .get(df.server as usize)
            .map_or_else(|| format!("#{}", df.server), |s| s.name.clone());
        e.set_item("server", name)?;
        e.set_item("handle", df.handle)?;
        dfs.append(e)?;
    }
    d.set_item("datafiles", dfs)?;
    Ok(d)
}
