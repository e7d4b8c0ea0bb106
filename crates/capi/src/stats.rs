//! Request counts: the client counts every request it sends, per
//! server and per operation (`pvfs_client::Stats`); these functions report them as
//! differences from a baseline that `pvfs_init` and `pvfs_stats_reset` set, so a
//! program can assert the message complexity of a call.

use libc::{c_char, c_int};

use crate::counts::Counts;
use crate::state::{cstr, ffi, global, lock, out, put, CResult, Global};
use crate::types::{pvfs_stats, PVFS_STATS_MAX_SERVERS};

/// Operations the data role serves; every other operation is a metadata (or
/// administrative) request.
pub(crate) const DATA_OPS: &[&str] = &[
    "Read",
    "Write",
    "GetSizes",
    "Truncate",
    "Fsync",
    "RemoveDatafiles",
];

/// Counts since the baseline.
fn current(g: &Global) -> Counts {
    let base = lock(&g.baseline).clone();
    Counts::now(g.client()).since(&base)
}

/// Requests this process has sent to any server since `pvfs_init` or the last
/// `pvfs_stats_reset`; 0 if the library is not initialized.
#[no_mangle]
pub extern "C" fn pvfs_requests_sent() -> u64 {
    ffi(0, || Ok(current(&*global()?).total))
}

/// Requests of operation `op` sent since `pvfs_init` or the last `pvfs_stats_reset`.
/// `op` is a protocol operation name: "Lookup", "GetAttr", "ListAttr", "SetAttr",
/// "Create", "Unlink", "LinkEntry", "Rename", "ReadDir", "SealDir", "SetParent",
/// "SetDirLayout", "RemoveObject", "Read", "Write", "GetSizes", "Truncate",
/// "RemoveDatafiles", "Fsync", "Sync", "StatFs", "Ping", "GetXattr", "SetXattr",
/// "ListXattr", "RemoveXattr"; "data" sums the data-role operations and "meta" the
/// others. Returns 0 for an unknown name, a NULL `op`, or an uninitialized library.
///
/// # Safety
/// `op` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pvfs_requests_for(op: *const c_char) -> u64 {
    ffi(0, || {
        // SAFETY: NULL or a C string by contract.
        let op = unsafe { cstr(op) }?;
        let c = current(&*global()?);
        let data: u64 = DATA_OPS
            .iter()
            .map(|o| c.per_op.get(o).copied().unwrap_or(0))
            .sum();
        Ok(match op {
            "data" => data,
            "meta" => c.total.saturating_sub(data),
            _ => c.per_op.get(op).copied().unwrap_or(0),
        })
    })
}

/// Fills `st` with the request counts since `pvfs_init` or the last
/// `pvfs_stats_reset`. Returns 0, or -1 with errno EFAULT (NULL) or ENXIO (not
/// initialized).
///
/// # Safety
/// `st` is NULL or points to a writable `struct pvfs_stats`.
#[no_mangle]
pub unsafe extern "C" fn pvfs_stats(st: *mut pvfs_stats) -> c_int {
    ffi(-1, || {
        let st = out(st)?;
        let c = current(&*global()?);
        let data: u64 = DATA_OPS
            .iter()
            .map(|o| c.per_op.get(o).copied().unwrap_or(0))
            .sum();
        let mut per_server = [0u64; PVFS_STATS_MAX_SERVERS];
        for (slot, n) in per_server.iter_mut().zip(&c.per_server) {
            *slot = *n;
        }
        let v = pvfs_stats {
            total: c.total,
            meta_requests: c.total.saturating_sub(data),
            data_requests: data,
            nservers: c.per_server.len() as u32,
            per_server,
        };
        // SAFETY: checked non-NULL; writable by contract.
        unsafe { put(st, v) };
        Ok(0)
    })
}

/// Sets every count `pvfs_requests_sent`, `pvfs_requests_for` and `pvfs_stats`
/// report back to 0. Returns 0, or -1 with errno ENXIO (not initialized).
#[no_mangle]
pub extern "C" fn pvfs_stats_reset() -> c_int {
    ffi(-1, || {
        let g = global()?;
        let now = Counts::now(g.client());
        *lock(&g.baseline) = now;
        CResult::Ok(0)
    })
}
