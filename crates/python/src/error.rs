//! Client errors as Python exceptions: `OSError(errno, message)`, which Python turns
//! into its subclass for the errno (`FileNotFoundError` for ENOENT, `IsADirectoryError`
//! for EISDIR, ...), so callers catch what they would catch from `os` and `open`.

use pvfs_proto::Errno;
use pyo3::exceptions::PyOSError;
use pyo3::PyErr;

/// A client error as the `OSError` (subclass) of its errno.
pub fn to_py(e: pvfs_client::Error) -> PyErr {
    os_error(e.errno, e.message)
}

/// An `OSError` with `errno` and `message`, for what this crate refuses itself.
pub fn os_error(errno: Errno, message: impl Into<String>) -> PyErr {
    PyOSError::new_err((errno.code(), message.into()))
}

/// A `std::io::Error` (the runtime, the configuration file) as an `OSError`.
pub fn io_to_py(e: std::io::Error) -> PyErr {
    PyOSError::new_err((Errno::from_io(&e).code(), e.to_string()))
}
