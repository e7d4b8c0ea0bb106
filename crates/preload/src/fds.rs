//! Routing: whether a hook's path or descriptor is pvfs (then the hook's pvfs side
//! runs, inside [`pvfs_call`]) or not (the real libc function), for every hook, and
//! what the end of an open file description does.
//!
//! A path is pvfs by the prefix (`settings.rs`) after lexical normalization; a
//! relative one by its directory: a pvfs directory descriptor or the pvfs working
//! directory, or a local one it climbs out of into the prefix. A descriptor is pvfs
//! when the descriptor table (`globals::FDS`) has it.

use std::ffi::{CStr, CString};
use std::sync::Arc;

use libc::{c_char, c_int};

use crate::desc::{Desc, Kind};
use crate::globals::{self, FDS};
use crate::hook::{guarded, pvfs_call, set_errno, Busy, Failure, R};
use crate::locks;
use crate::real;
use crate::settings::{self, Abs};

// ----- routing ---------------------------------------------------------------------

/// Where a path argument leads.
pub(crate) enum Target {
    /// Not pvfs: call the real function with the arguments as given.
    Local,
    /// Not pvfs, but only as this absolute local path (a relative path that climbed
    /// out of pvfs from a pvfs directory or working directory).
    LocalPath(CString),
    /// This pvfs path.
    Pvfs(String),
    /// The object pvfs descriptor `dirfd` is open on: an empty path with
    /// `AT_EMPTY_PATH` (`fstatat(fd, "", buf, AT_EMPTY_PATH)`).
    Fd(Arc<Desc>),
}

/// What a pvfs `*at` call acts on: a pvfs path, or the object of a pvfs descriptor.
pub(crate) enum Obj {
    /// A pvfs path (a final symlink followed or not, as the call says).
    Path(String),
    /// The object a descriptor is open on (never followed: it is that object).
    Fd(Arc<Desc>),
}

impl Obj {
    /// The path, for calls that act on names only (an empty path naming a
    /// descriptor's object is ENOENT there, as for the kernel).
    pub(crate) fn into_path(self) -> R<String> {
        match self {
            Obj::Path(p) => Ok(p),
            Obj::Fd(_) => Err(libc::ENOENT),
        }
    }
}

/// Where `path`, relative to `dirfd` as in the `*at` calls, leads: absolute paths by
/// the prefix; relative ones by their directory descriptor (opened with or without
/// `O_PATH`), or with `AT_FDCWD` by the working directory (pvfs after a chdir into
/// pvfs, see `cwd.rs`). An empty (or null) path is ENOENT, or with
/// `AT_EMPTY_PATH` in `flags` the descriptor's object (or the working directory). A
/// thread inside pvfs work, and an inert library, always get `Local`.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub(crate) unsafe fn resolve(dirfd: c_int, path: *const c_char, flags: c_int) -> R<Target> {
    if Busy::active() {
        return Ok(Target::Local);
    }
    if path.is_null() {
        // A null path with AT_EMPTY_PATH names the descriptor (statx since Linux 6.11).
        return Ok(match FDS.get(dirfd) {
            Some(d) if flags & libc::AT_EMPTY_PATH != 0 => Target::Fd(d),
            _ => Target::Local,
        });
    }
    let s = globals::settings();
    if !s.active() {
        return Ok(Target::Local);
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if bytes.first() == Some(&b'/') {
        return Ok(match s.route_abs(bytes)? {
            Abs::Local => Target::Local,
            Abs::Pvfs(p) => Target::Pvfs(p),
            Abs::Through(l) => Target::LocalPath(CString::new(l).map_err(|_| libc::EINVAL)?),
        });
    }
    let empty_ok = flags & libc::AT_EMPTY_PATH != 0;
    let base = if dirfd == libc::AT_FDCWD {
        match globals::cwd() {
            Some(c) => c,
            None => return from_local_dir(s, dirfd, bytes),
        }
    } else {
        let Some(d) = FDS.get(dirfd) else {
            return from_local_dir(s, dirfd, bytes);
        };
        if bytes.is_empty() && empty_ok {
            return Ok(Target::Fd(d));
        }
        if d.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        d.path.clone()
    };
    if bytes.is_empty() {
        return if empty_ok {
            Ok(Target::Pvfs(base))
        } else {
            Err(libc::ENOENT)
        };
    }
    let mut full = s.local_path(&base).into_bytes();
    full.push(b'/');
    full.extend_from_slice(bytes);
    Ok(match s.route_abs(&full)? {
        Abs::Pvfs(p) => Target::Pvfs(p),
        Abs::Through(l) => Target::LocalPath(CString::new(l).map_err(|_| libc::EINVAL)?),
        Abs::Local => Target::Local,
    })
}

/// Where relative path `rel` leads from a local directory (`dirfd`, or the real
/// working directory for `AT_FDCWD`): local, unless it climbs into the prefix, as
/// `openat(fd_of_root, "pvfs", O_PATH|O_DIRECTORY)` does when a program (rsync) walks
/// a destination one component at a time from `/`. The directory's path is asked of
/// the kernel only when `rel` names the prefix's last component, so other relative
/// calls cost nothing more.
fn from_local_dir(s: &settings::Settings, dirfd: c_int, rel: &[u8]) -> R<Target> {
    if rel.is_empty() || !s.may_reach(rel) {
        return Ok(Target::Local);
    }
    let Some(mut full) = local_dir_path(dirfd) else {
        return Ok(Target::Local);
    };
    full.push(b'/');
    full.extend_from_slice(rel);
    Ok(match s.route_abs(&full)? {
        Abs::Pvfs(p) => Target::Pvfs(p),
        Abs::Through(l) => Target::LocalPath(CString::new(l).map_err(|_| libc::EINVAL)?),
        Abs::Local => Target::Local,
    })
}

/// The absolute path of local directory descriptor `dirfd` (the real working
/// directory for `AT_FDCWD`), if the kernel can tell it.
fn local_dir_path(dirfd: c_int) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    let len = if dirfd == libc::AT_FDCWD {
        // SAFETY: buf is writable for its length; getcwd writes a NUL-terminated path.
        let p = unsafe { real::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
        if p.is_null() {
            return None;
        }
        buf.iter().position(|&b| b == 0)?
    } else {
        let link = CString::new(format!("/proc/self/fd/{dirfd}")).ok()?;
        // SAFETY: link is NUL-terminated; buf is writable for its length.
        let n = unsafe { real::readlink(link.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        usize::try_from(n).ok().filter(|&n| n < buf.len())?
    };
    buf.truncate(len);
    // A removed directory ("/a/b (deleted)"), or no path at all, leads nowhere known.
    (buf.first() == Some(&b'/') && !buf.ends_with(b" (deleted)")).then_some(buf)
}

/// Routes a `*at` hook with `AT_*` `flags`: `local` (the real function, given the
/// directory descriptor and path to use) for a local path, `pvfs` (inside
/// [`pvfs_call`]) with the pvfs path or descriptor object otherwise; a routing
/// error sets errno. Every `*at` hook, and every path hook (as `*at` with `AT_FDCWD`),
/// goes through here.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub(crate) unsafe fn route_at<T: Failure>(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    local: impl FnOnce(c_int, *const c_char) -> T,
    pvfs: impl FnOnce(Obj) -> R<T>,
) -> T {
    guarded(|| {
        // SAFETY: the caller's contract.
        match unsafe { resolve(dirfd, path, flags) } {
            Ok(Target::Local) => local(dirfd, path),
            Ok(Target::LocalPath(abs)) => local(libc::AT_FDCWD, abs.as_ptr()),
            Ok(Target::Pvfs(p)) => pvfs_call(|| pvfs(Obj::Path(p))),
            Ok(Target::Fd(d)) => pvfs_call(|| pvfs(Obj::Fd(d))),
            Err(e) => {
                set_errno(e);
                T::failure()
            }
        }
    })
}

/// Routes a hook whose pvfs side needs a path (no `AT_EMPTY_PATH`): as [`route_at`]
/// with no flags.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub(crate) unsafe fn route<T: Failure>(
    dirfd: c_int,
    path: *const c_char,
    local: impl FnOnce(c_int, *const c_char) -> T,
    pvfs: impl FnOnce(String) -> R<T>,
) -> T {
    // SAFETY: the caller's contract.
    unsafe { route_at(dirfd, path, 0, local, |o| pvfs(o.into_path()?)) }
}

/// Routes a descriptor hook that accepts any descriptor, `O_PATH` ones included
/// (`fstat`, `fchdir`, `fstatfs`, `fcntl`, …): `local` for a descriptor that is not
/// pvfs, `pvfs` (inside [`pvfs_call`]) with the description otherwise.
pub(crate) fn on_fd<T: Failure>(
    fd: c_int,
    local: impl FnOnce() -> T,
    pvfs: impl FnOnce(Arc<Desc>) -> R<T>,
) -> T {
    if Busy::active() {
        return local();
    }
    guarded(|| match FDS.get(fd) {
        None => local(),
        Some(d) => pvfs_call(|| {
            // What the program wrote to it through the kernel comes first.
            crate::spill::drain(&d)?;
            pvfs(d)
        }),
    })
}

/// Routes a descriptor hook that needs a descriptor opened for I/O (`read`, `write`,
/// `lseek`, `fchmod`, `getdents64`, …): as [`on_fd`], but an `O_PATH` pvfs descriptor
/// fails with EBADF, as the kernel's own check for such descriptors does.
pub(crate) fn on_open_fd<T: Failure>(
    fd: c_int,
    local: impl FnOnce() -> T,
    pvfs: impl FnOnce(Arc<Desc>) -> R<T>,
) -> T {
    on_fd(fd, local, |d| {
        if d.path_only() {
            return Err(libc::EBADF);
        }
        pvfs(d)
    })
}

// ----- the end of a description ----------------------------------------------------

impl Drop for Desc {
    fn drop(&mut self) {
        // What the program wrote to it through the kernel goes to pvfs first.
        crate::spill::finish(self);
        // The description's last descriptor is gone: its OFD locks and flocks end.
        locks::description_gone(self.handle, self.id);
        if self.kind == Kind::File {
            released(self.handle, self.held_in(globals::generation()));
        }
    }
}

/// Called when a description on `handle` is gone: lets go of the file if the
/// description `held` it (its server deletes it at the last hold if its last name
/// went meanwhile), and otherwise, at the last description, removes a file this
/// process unlinked while open.
fn released(handle: pvfs_proto::Handle, held: bool) {
    if held {
        let _busy = Busy::enter();
        if let Ok(pr) = globals::proc() {
            pr.run(pr.client().unhold(handle));
        }
    }
    let pending = globals::take_unlinked(handle);
    if pending && !held && !FDS.handle_open(handle) {
        let _busy = Busy::enter();
        if let Ok(pr) = globals::proc() {
            let _ = pr.run(pr.client().remove_object(handle));
        }
    }
}
