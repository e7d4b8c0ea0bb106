//! `pvfs._pvfs`: the native part of the `pvfs` Python package (PyO3). It wraps the
//! blocking face of `pvfs-client` and adds nothing of its own: paths, layouts and
//! striped I/O are the client's. The pure-Python part (`python/pvfs`) builds Python's
//! file objects and the fsspec file system on it. Every call into the client lets go
//! of the GIL, so Python threads run while the client waits for servers, and a read
//! or write of any size is one client call, which the client splits over the file's
//! data servers in parallel.

mod client;
mod error;
mod file;
mod stat;

use pyo3::prelude::*;

pub use client::PyClient;
pub use file::PyFile;
pub use stat::PyStat;

/// The module `pvfs._pvfs`.
#[pymodule]
fn _pvfs(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyClient>()?;
    m.add_class::<PyFile>()?;
    m.add_class::<PyStat>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
