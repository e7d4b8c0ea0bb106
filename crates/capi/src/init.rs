//! `pvfs_init` / `pvfs_finalize`: one client per process, shared by every thread.
//!
//! Calls are counted: the state lives until the last `pvfs_finalize`, so libraries
//! layered on libpvfs may each initialize it. A forked child does not inherit a usable
//! client (the runtime's threads are not copied by fork): it calls `pvfs_init` again,
//! which starts afresh.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use libc::{c_char, c_int};
use pvfs_client::blocking::{self, BlockingClient};
use pvfs_config::{Config, ConfigError};

use crate::counts::Counts;
use crate::state::{
    close_all, cstr, fail, ffi, forget_inherited, last_message, pid, CResult, Global, Initialized,
    STATE,
};

fn config_path(arg: Option<&str>) -> CResult<PathBuf> {
    blocking::config_path(arg).ok_or_else(|| fail(libc::EINVAL, blocking::NO_CONFIG))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

fn load(path: &Path) -> CResult<Config> {
    Config::load(path).map_err(|e| {
        let errno = match &e {
            ConfigError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            _ => libc::EINVAL,
        };
        fail(errno, &e.to_string())
    })
}

/// Initializes the library with the file system described by the configuration file
/// `config_path` (NULL or "": the file named by `$PVFS_CONFIG`). No server is
/// contacted yet: connections are made on first use. Later calls only count (each
/// needs its own `pvfs_finalize`); one naming another configuration file fails with
/// EBUSY (NULL is accepted).
/// In a forked child, call it again before using pvfs (descriptors opened by the
/// parent are not usable in the child).
/// Returns 0, or -1 with errno: ENOENT/EACCES (file), EINVAL (no path, or an invalid
/// configuration; `pvfs_last_error` says where), EBUSY.
///
/// # Safety
/// `config_path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pvfs_init(config_path: *const c_char) -> c_int {
    ffi(-1, || {
        let arg = if config_path.is_null() {
            None
        } else {
            // SAFETY: non-NULL C string by contract.
            Some(unsafe { cstr(config_path) }?)
        };
        let mut state = STATE.write().unwrap_or_else(|p| p.into_inner());
        if let Some(init) = state.as_mut() {
            if init.global.pid == pid() {
                let other = arg
                    .filter(|a| !a.is_empty())
                    .is_some_and(|a| !same_file(&init.global.config_path, Path::new(a)));
                if other {
                    return Err(fail(
                        libc::EBUSY,
                        &format!(
                            "already initialized with {}",
                            init.global.config_path.display()
                        ),
                    ));
                }
                init.refs += 1;
                return Ok(0);
            }
            // Inherited from the parent across fork: unusable here; leak it.
            if let Some(old) = state.take() {
                std::mem::forget(old);
            }
            forget_inherited();
        }
        let path = self::config_path(arg)?;
        let config = load(&path)?;
        let bc = BlockingClient::new(config, blocking::default_threads())
            .map_err(|e| fail(e.raw_os_error().unwrap_or(libc::EIO), &e.to_string()))?;
        let baseline = Counts::zero(bc.client().config().servers.len());
        *state = Some(Initialized {
            global: Arc::new(Global {
                bc,
                umask: blocking::process_umask(),
                config_path: path,
                pid: pid(),
                baseline: Mutex::new(baseline),
            }),
            refs: 1,
        });
        Ok(0)
    })
}

/// Undoes one `pvfs_init`. The last one closes every pvfs descriptor still open
/// (without the mtime update of `pvfs_close`), releases every lock still held, drops
/// the connections and stops the client's threads. Returns 0, or -1 with errno ENXIO if the library is not
/// initialized.
#[no_mangle]
pub extern "C" fn pvfs_finalize() -> c_int {
    ffi(-1, || {
        let global = {
            let mut state = STATE.write().unwrap_or_else(|p| p.into_inner());
            match state.as_mut() {
                Some(init) if init.global.pid == pid() => {
                    init.refs -= 1;
                    if init.refs > 0 {
                        return Ok(0);
                    }
                    state.take().map(|i| i.global)
                }
                _ => {
                    return Err(fail(libc::ENXIO, "libpvfs is not initialized"));
                }
            }
        };
        drop(close_all());
        if let Some(g) = &global {
            // Locks still held go now rather than at the end of the lease.
            g.run(g.client().release_all_locks());
        }
        // The runtime stops when the last reference (maybe held by a call still
        // running in another thread) goes away.
        drop(global);
        Ok(0)
    })
}

/// A human-readable description of the calling thread's last failed pvfs call (for
/// messages; errno is what programs should act on). Never NULL; valid until the
/// thread's next failing call.
#[no_mangle]
pub extern "C" fn pvfs_last_error() -> *const c_char {
    last_message()
}
