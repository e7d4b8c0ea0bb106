//! `pvfs._pvfs.File`: an open regular file with positional I/O. Each read or write is
//! one client call with the whole buffer, which the client cuts into stripe units and
//! sends to every data server involved at once; the GIL is let go meanwhile and the
//! bytes go straight between the caller's buffer and the connections (no copy for
//! `readinto_at` and `write_at`). Positions, buffering and modes are Python's
//! (`pvfs.RawFile` over this, then `io.Buffered*`).

use pvfs_client::blocking::BlockingClient;
use pvfs_client::File;
use pvfs_proto::Errno;
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::error::{os_error, to_py};
use crate::stat::{layout_dict, PyStat};

/// An open pvfs file (from `Client.open_file`). Offsets are explicit; it has no
/// position of its own, so threads may share it.
#[pyclass(name = "File", module = "pvfs._pvfs", frozen)]
pub struct PyFile {
    bc: BlockingClient,
    file: File,
    path: String,
}

impl PyFile {
    /// Wraps a file opened by `bc`'s client.
    pub fn new(bc: BlockingClient, file: File, path: String) -> PyFile {
        PyFile { bc, file, path }
    }

    /// Runs one operation on the file without the GIL; errors name the path.
    fn run<T, F>(&self, py: Python<'_>, f: F) -> PyResult<T>
    where
        F: std::future::Future<Output = pvfs_client::Result<T>> + Send,
        T: Send,
    {
        py.detach(|| self.bc.block_on(f))
            .map_err(|e| to_py(e.for_path(&self.path)))
    }
}

/// A contiguous byte view of a Python buffer (bytes, bytearray, memoryview, array),
/// refused when it is not contiguous.
fn contiguous(buf: &PyBuffer<u8>) -> PyResult<()> {
    if buf.is_c_contiguous() {
        Ok(())
    } else {
        Err(os_error(Errno::EINVAL, "the buffer is not contiguous"))
    }
}

#[pymethods]
impl PyFile {
    /// The path it was opened by.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// The file's handle (its inode number).
    #[getter]
    fn handle(&self) -> u64 {
        self.file.handle()
    }

    /// Reads up to `size` bytes at `offset` (fewer only at the end of the file),
    /// straight into the new `bytes` object.
    fn read_at<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        size: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut got = 0;
        let bytes = PyBytes::new_with(py, size, |buf| {
            got = self.run(py, self.file.read_at(offset, buf))?;
            Ok(())
        })?;
        if got == size {
            Ok(bytes)
        } else {
            // Short at the end of the file: the bytes read, in a `bytes` of their size.
            Ok(PyBytes::new(py, &bytes.as_bytes()[..got.min(size)]))
        }
    }

    /// Reads into the writable buffer `buf` from `offset`; returns the bytes read
    /// (fewer than its length only at the end of the file).
    fn readinto_at(&self, py: Python<'_>, buf: PyBuffer<u8>, offset: u64) -> PyResult<usize> {
        contiguous(&buf)?;
        if buf.readonly() {
            return Err(os_error(Errno::EINVAL, "the buffer is read-only"));
        }
        let len = buf.len_bytes();
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: the buffer is contiguous, writable and `len` bytes long, and stays
        // exported (so neither freed nor resized) until `buf` drops, after the call.
        // Python code writing it from another thread meanwhile races, as with any
        // I/O into a shared buffer (`os.readv`).
        let slice = unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr().cast::<u8>(), len) };
        self.run(py, self.file.read_at(offset, slice))
    }

    /// Writes all of the buffer `data` (bytes-like) at `offset`; returns its length.
    fn write_at(&self, py: Python<'_>, data: PyBuffer<u8>, offset: u64) -> PyResult<usize> {
        contiguous(&data)?;
        let len = data.len_bytes();
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: contiguous and `len` bytes long, exported until `data` drops.
        let slice = unsafe { std::slice::from_raw_parts(data.buf_ptr().cast::<u8>(), len) };
        self.run(py, self.file.write_at(offset, slice))
    }

    /// Writes all of `data` at the end of the file, atomically with respect to
    /// every other append (any client's); returns the offset it landed at.
    fn append(&self, py: Python<'_>, data: PyBuffer<u8>) -> PyResult<u64> {
        contiguous(&data)?;
        let len = data.len_bytes();
        if len == 0 {
            return self.run(py, self.file.size());
        }
        // SAFETY: as in `write_at`.
        let slice = unsafe { std::slice::from_raw_parts(data.buf_ptr().cast::<u8>(), len) };
        let (at, _) = self.run(py, self.file.append(slice))?;
        Ok(at)
    }

    /// The file's size now (from its data servers).
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        self.run(py, self.file.size())
    }

    /// Its attributes now.
    fn stat(&self, py: Python<'_>) -> PyResult<PyStat> {
        let a = self.run(py, self.file.stat())?;
        Ok(PyStat::from(&a))
    }

    /// Sets the size (cuts, or extends with a hole).
    fn truncate(&self, py: Python<'_>, size: u64) -> PyResult<()> {
        self.run(py, self.file.truncate(size))
    }

    /// Makes everything written so far durable on the data servers.
    fn fsync(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, self.file.fsync())
    }

    /// The file's layout as of open: `stripe_size`, `stripe_count`, `replicas`,
    /// `width` and `datafiles` (each with `server` and `handle`).
    fn layout<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        layout_dict(py, self.bc.client().config(), self.file.layout())
    }

    fn __repr__(&self) -> String {
        format!("pvfs._pvfs.File({:?})", self.path)
    }
}
