//! A working directory inside pvfs.
//!
//! The kernel cannot change into a pvfs directory, so `chdir`/`fchdir` into one keep it
//! in the library (`globals::cwd`), and relative paths with `AT_FDCWD` resolve against
//! it (`fds::resolve`); `getcwd` reports it under the prefix. `mkdir -p`, for one,
//! changes into each directory it makes.
//!
//! The process's real working directory is meanwhile moved into an empty directory
//! that is deleted at once. A program started with `exec` inherits the pvfs working
//! directory through the handoff (`handoff.rs`); one that runs without the library
//! stays in the dead directory, where its relative paths fail with ENOENT instead of
//! silently meaning files of the directory the process was in before.

use libc::{c_char, c_int, size_t};

use crate::desc::Kind;
use crate::fds::{self, route};
use crate::globals;
use crate::hook::{guarded, pvfs_call, R};
use crate::real;

/// Moves the real working directory into a fresh directory and deletes it.
fn kill_real_cwd() {
    let mut tmpl = *b"/tmp/pvfs-cwd-XXXXXX\0";
    // SAFETY: tmpl is a writable NUL-terminated template; mkdtemp is not hooked.
    let dir = unsafe { libc::mkdtemp(tmpl.as_mut_ptr().cast()) };
    if dir.is_null() {
        return;
    }
    // SAFETY: dir is the NUL-terminated path mkdtemp just made.
    unsafe {
        if real::chdir(dir) == 0 {
            real::rmdir(dir);
        }
    }
}

/// Changes into pvfs directory `p` (which must be a searchable directory).
fn enter(p: &str) -> R<c_int> {
    let pr = globals::proc()?;
    let attr = pr.call(pr.client().stat_lite(p))?;
    if attr.kind() != pvfs_client::ObjKind::Dir {
        return Err(libc::ENOTDIR);
    }
    if !pr.may(&attr, libc::X_OK as u32) {
        return Err(libc::EACCES);
    }
    if globals::cwd().is_none() {
        kill_real_cwd();
    }
    globals::set_cwd(Some(p.to_string()));
    Ok(0)
}

#[no_mangle]
unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    // SAFETY: chdir's argument, passed on.
    unsafe {
        route(
            libc::AT_FDCWD,
            path,
            |_, path| {
                let rc = real::chdir(path);
                if rc == 0 {
                    globals::set_cwd(None);
                }
                rc
            },
            |p| enter(&p),
        )
    }
}

#[no_mangle]
unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    fds::on_fd(
        fd,
        || {
            // SAFETY: no memory preconditions.
            let rc = unsafe { real::fchdir(fd) };
            if rc == 0 {
                globals::set_cwd(None);
            }
            rc
        },
        |d| {
            if d.kind != Kind::Dir {
                return Err(libc::ENOTDIR);
            }
            enter(&d.path)
        },
    )
}

/// Copies `s` and a NUL into the caller's `(buf, size)`, or a malloc'd buffer when
/// `buf` is null (glibc's extension: `size` bytes, or just enough when 0).
fn give_path(s: &str, buf: *mut c_char, size: size_t) -> R<*mut c_char> {
    let need = s.len() + 1;
    let out = if buf.is_null() {
        let n = if size == 0 { need } else { size };
        if n < need {
            return Err(libc::ERANGE);
        }
        // SAFETY: malloc of a positive size; the caller frees it.
        let p = unsafe { libc::malloc(n) }.cast::<c_char>();
        if p.is_null() {
            return Err(libc::ENOMEM);
        }
        p
    } else {
        if size == 0 {
            return Err(libc::EINVAL);
        }
        if size < need {
            return Err(libc::ERANGE);
        }
        buf
    };
    // SAFETY: out holds at least need bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), s.len());
        *out.add(s.len()) = 0;
    }
    Ok(out)
}

#[no_mangle]
unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    guarded(|| match globals::cwd() {
        // SAFETY: getcwd's arguments, passed on.
        None => unsafe { real::getcwd(buf, size) },
        Some(p) => pvfs_call(|| give_path(&globals::settings().local_path(&p), buf, size)),
    })
}

#[no_mangle]
unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    guarded(|| match globals::cwd() {
        // SAFETY: no arguments.
        None => unsafe { real::get_current_dir_name() },
        Some(p) => {
            pvfs_call(|| give_path(&globals::settings().local_path(&p), std::ptr::null_mut(), 0))
        }
    })
}
