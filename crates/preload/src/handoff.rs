//! What a new program image inherits across `exec`: the pvfs working directory and
//! the pvfs descriptors, handed over in the environment.
//!
//! The exec hooks (`execve`, `execv`, `execvp`, `execvpe`, `execveat`, `fexecve`,
//! `posix_spawn`, `posix_spawnp`; `execl`, `execlp`, `execle` in `shim.c`) first move
//! what the program wrote through the kernel to pvfs (`spill.rs`), then pass on a
//! copy of the environment they were given, with one variable more,
//! [`VAR`]`=1|CWD|DESC;DESC;…`: the pvfs working directory (hex, or `-`) and each
//! open file description that some descriptor not marked close-on-exec stands for
//! (every one for `posix_spawn`, whose file actions may `dup2` any), as the identity
//! of its placeholder (device and inode of the memfd), its kind, handle, parent
//! handle, access mode, status flags, offset and path (hex). The caller's
//! environment is never changed; if the exec fails, the copy is freed and nothing
//! else happened.
//!
//! The placeholders themselves cross `exec` as any descriptor does: the kernel keeps
//! those not marked close-on-exec, at their numbers, and closes the others. The
//! library's constructor in the new image ([`restore`]) reads the variable, removes
//! it from the environment (a grandchild gets only what its own exec hands it), looks
//! at every open descriptor and takes over each whose identity the variable names,
//! as the description it describes: descriptors sharing a description before share
//! it after, also after `posix_spawn`'s `dup2` actions, and a close-on-exec one is
//! simply not there. The new image's client re-opens the files by handle on first
//! use. The working directory is taken over only while the real one is the deleted
//! directory `cwd.rs` leaves behind, as after a `chdir` into pvfs. A variable that
//! does not parse is ignored with one line on stderr.
//!
//! `PVFS_PRELOAD_EXEC=0` turns the handoff off (nothing of the library's state
//! survives `exec`, as before it existed).

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::fmt::Write as _;
use std::sync::Arc;

use libc::{c_char, c_int, c_void, pid_t};

use crate::desc::{identity, reopen_keeper, Desc, Kind};
use crate::globals::{self, FDS};
use crate::hook::Busy;
use crate::real;
use crate::settings::warn;
use crate::spill;

/// The environment variable that carries the state.
pub(crate) const VAR: &str = "PVFS_PRELOAD_STATE";

/// Most descriptions handed over (more are left behind, with a warning).
const MAX_DESCS: usize = 4096;
/// Longest variable handed over or accepted: below the kernel's limit on one
/// environment string (128 KiB).
const MAX_LEN: usize = 120 * 1024;

/// Whether the handoff is on (`PVFS_PRELOAD_EXEC` is not `0`).
fn enabled() -> bool {
    std::env::var_os("PVFS_PRELOAD_EXEC").is_none_or(|v| v != "0")
}

// ----- the format ------------------------------------------------------------------

/// One description as handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    ident: (u64, u64),
    kind: Kind,
    handle: u64,
    parent: u64,
    acc: c_int,
    status: c_int,
    pos: u64,
    path: String,
}

/// The state handed to a new image.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct State {
    cwd: Option<String>,
    items: Vec<Item>,
}

fn hex(s: &str) -> String {
    let mut o = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        let _ = write!(o, "{b:02x}");
    }
    o
}

fn unhex(s: &str) -> Option<String> {
    if s.len() & 1 == 1 || s.len() > 2 * 8192 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

fn kind_char(k: Kind) -> char {
    match k {
        Kind::File => 'f',
        Kind::Dir => 'd',
        Kind::Other => 'o',
    }
}

fn encode(st: &State) -> String {
    let mut s = String::from("1|");
    match &st.cwd {
        Some(c) => s.push_str(&hex(c)),
        None => s.push('-'),
    }
    s.push('|');
    for (i, it) in st.items.iter().enumerate() {
        if i > 0 {
            s.push(';');
        }
        let _ = write!(
            s,
            "{},{},{},{},{},{},{},{},{}",
            it.ident.0,
            it.ident.1,
            kind_char(it.kind),
            it.handle,
            it.parent,
            it.acc,
            it.status,
            it.pos,
            hex(&it.path)
        );
    }
    s
}

fn decode(s: &str) -> Option<State> {
    if s.len() > MAX_LEN {
        return None;
    }
    let mut parts = s.splitn(3, '|');
    if parts.next()? != "1" {
        return None;
    }
    let cwd = match parts.next()? {
        "-" => None,
        h => Some(unhex(h).filter(|p| p.starts_with('/'))?),
    };
    let rest = parts.next()?;
    let mut items = Vec::new();
    if !rest.is_empty() {
        for e in rest.split(';') {
            if items.len() >= MAX_DESCS {
                return None;
            }
            let f: Vec<&str> = e.split(',').collect();
            if f.len() != 9 {
                return None;
            }
            let kind = match f[2] {
                "f" => Kind::File,
                "d" => Kind::Dir,
                "o" => Kind::Other,
                _ => return None,
            };
            let acc: c_int = f[5].parse().ok()?;
            let status: c_int = f[6].parse().ok()?;
            if ![libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR].contains(&acc)
                || status & !crate::desc::STATUS_FLAGS != 0
            {
                return None;
            }
            let path = unhex(f[8]).filter(|p| p.starts_with('/'))?;
            items.push(Item {
                ident: (f[0].parse().ok()?, f[1].parse().ok()?),
                kind,
                handle: f[3].parse().ok()?,
                parent: f[4].parse().ok()?,
                acc,
                status,
                pos: f[7].parse().ok()?,
                path,
            });
        }
    }
    Some(State { cwd, items })
}

// ----- the parent's side -----------------------------------------------------------

/// Every description of the table once, by its placeholder's identity.
fn descriptions() -> BTreeMap<(u64, u64), Arc<Desc>> {
    FDS.entries()
        .into_iter()
        .map(|(_, d)| (d.ident, d))
        .collect()
}

/// The descriptors of this process that survive `exec` (not close-on-exec) and stand
/// for one of `descs`, with it. Asked of the kernel (`/proc/self/fd`), not of the
/// table: a child made by `vfork` (Python's `subprocess`) `dup2`s and closes in its
/// own descriptor table, which the table (the parent's) does not follow.
fn surviving(descs: &BTreeMap<(u64, u64), Arc<Desc>>) -> Vec<(c_int, Arc<Desc>)> {
    let mut out = Vec::new();
    if descs.is_empty() {
        return out;
    }
    for fd in open_fds() {
        let Some(d) = identity(fd).and_then(|i| descs.get(&i)) else {
            continue;
        };
        // SAFETY: F_GETFD on a descriptor number; no memory is touched.
        let fl = unsafe { real::fcntl(fd, libc::F_GETFD, 0) };
        if fl >= 0 && fl & libc::FD_CLOEXEC == 0 {
            out.push((fd, d.clone()));
        }
    }
    out
}

/// Shares the offset of every regular file's description with the processes about
/// to have it (before `fork` and `exec`; `Desc::share`), found by the descriptors
/// open now (in a `vfork` child, those of its own table).
pub(crate) fn share_all() {
    if FDS.entries().is_empty() {
        return;
    }
    let owned = FDS.owned();
    let descs = descriptions();
    for fd in open_fds() {
        if let Some(d) = identity(fd).and_then(|i| descs.get(&i)) {
            d.share(fd, owned);
        }
    }
}

/// The state to hand over: every description some descriptor of which survives
/// `exec` (`all`: every description, for `posix_spawn`, whose file actions may
/// `dup2` any).
fn current(all: bool) -> State {
    let descs = descriptions();
    let chosen: Vec<Arc<Desc>> = if all {
        descs.values().cloned().collect()
    } else {
        let mut v: Vec<Arc<Desc>> = Vec::new();
        for (_, d) in surviving(&descs) {
            if !v.iter().any(|s| Arc::ptr_eq(s, &d)) {
                v.push(d);
            }
        }
        v
    };
    if chosen.len() > MAX_DESCS {
        warn("too many pvfs descriptors to hand to the new program; some are left behind");
    }
    let items = chosen
        .iter()
        .take(MAX_DESCS)
        .map(|d| Item {
            ident: d.ident,
            kind: d.kind,
            handle: d.handle,
            parent: d.parent,
            acc: d.acc,
            status: d.status(),
            pos: *d.pos(),
            path: d.path.clone(),
        })
        .collect();
    State {
        cwd: globals::cwd(),
        items,
    }
}

/// A copy of an environment with the handoff variable set (or, with nothing to hand
/// over, without it), owning its strings.
struct Env {
    _var: Option<CString>,
    ptrs: Vec<*const c_char>,
}

impl Env {
    fn as_ptr(&self) -> *const *const c_char {
        self.ptrs.as_ptr()
    }
}

/// What an exec hook passes on, and undoes once the call returns.
struct Prepared {
    /// The environment to pass on instead of the caller's.
    env: Option<Env>,
    /// Placeholders made `O_PATH` for the call (descriptor, the library's copy of
    /// the writable one), put back when it returns.
    sealed: Vec<(c_int, c_int)>,
}

/// For a new program that will not take the descriptors over (no library in its
/// `LD_PRELOAD`, or the handoff off): makes every writable placeholder it would
/// inherit an `O_PATH` one of the same memfd, so that its writes fail with EBADF
/// instead of landing in memory no one reads. Returns what to put back.
fn seal_writable() -> Vec<(c_int, c_int)> {
    let mut sealed = Vec::new();
    let descs = descriptions();
    for (fd, d) in surviving(&descs) {
        if d.keeper().is_none() {
            continue;
        }
        // SAFETY: openat of a NUL-terminated path, fcntl and dup2 on descriptor
        // numbers; dup2 replaces fd with another descriptor of the same memfd (the
        // same identity, so the table still holds).
        unsafe {
            let Ok(p) = CString::new(format!("/proc/self/fd/{fd}")) else {
                continue;
            };
            let ofd = real::openat(
                libc::AT_FDCWD,
                p.as_ptr(),
                libc::O_PATH | libc::O_CLOEXEC,
                0,
            );
            if ofd < 0 {
                continue;
            }
            let saved = real::fcntl(fd, libc::F_DUPFD_CLOEXEC, 200);
            if saved >= 0 && real::dup2(ofd, fd) == fd {
                sealed.push((fd, saved));
            } else if saved >= 0 {
                real::close(saved);
            }
            real::close(ofd);
        }
    }
    sealed
}

/// Puts back what [`seal_writable`] changed (the exec failed, or `posix_spawn`
/// returned).
fn unseal(sealed: &[(c_int, c_int)]) {
    for &(fd, saved) in sealed {
        // SAFETY: our own descriptors; dup2 puts the writable one back at fd.
        unsafe {
            real::dup2(saved, fd);
            real::close(saved);
        }
    }
}

/// Whether environment entry `e` is the handoff variable.
fn is_var(e: &[u8]) -> bool {
    e.len() > VAR.len() && e.starts_with(VAR.as_bytes()) && e[VAR.len()] == b'='
}

/// The environment to pass on for `envp` (null: none), or `None` to pass `envp`
/// itself (nothing to hand over and nothing stale to remove).
///
/// # Safety
/// `envp` is null or a null-terminated array of NUL-terminated strings.
unsafe fn prepare(envp: *const *const c_char, all: bool) -> Option<Prepared> {
    let s = globals::settings();
    if !s.active() || Busy::active() {
        return None;
    }
    let _busy = Busy::enter();
    spill::drain_all();
    let mut entries: Vec<*const c_char> = Vec::new();
    let mut stale = false;
    let mut has_lib = false;
    if !envp.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: the caller's null-terminated array.
            let e = unsafe { *envp.add(i) };
            if e.is_null() {
                break;
            }
            // SAFETY: each entry is NUL-terminated.
            let b = unsafe { CStr::from_ptr(e) }.to_bytes();
            if is_var(b) {
                stale = true;
            } else {
                has_lib |=
                    b.starts_with(b"LD_PRELOAD=") && b.windows(13).any(|w| w == b"pvfs_preload.");
                entries.push(e);
            }
            i += 1;
        }
    }
    let takes_over = enabled() && has_lib;
    let sealed = if takes_over {
        Vec::new()
    } else {
        seal_writable()
    };
    if takes_over {
        share_all();
    }
    let state = if takes_over {
        current(all)
    } else {
        State::default()
    };
    let var = if state.cwd.is_some() || !state.items.is_empty() {
        let mut v = format!("{VAR}={}", encode(&state));
        if v.len() > MAX_LEN {
            warn("pvfs state too large to hand to the new program; it starts without it");
            v.clear();
        }
        (!v.is_empty()).then(|| CString::new(v).ok()).flatten()
    } else {
        None
    };
    if var.is_none() && !stale {
        return Some(Prepared { env: None, sealed });
    }
    if let Some(v) = &var {
        entries.push(v.as_ptr());
    }
    entries.push(std::ptr::null());
    Some(Prepared {
        env: Some(Env {
            _var: var,
            ptrs: entries,
        }),
        sealed,
    })
}

/// Runs an exec-like call with the environment to pass on for `envp`.
///
/// # Safety
/// As [`prepare`].
unsafe fn with_env<T>(
    envp: *const *const c_char,
    all: bool,
    f: impl FnOnce(*const *const c_char) -> T,
) -> T {
    // A panic while preparing passes `envp` on unchanged.
    let env = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        unsafe { prepare(envp, all) }
    }))
    .ok()
    .flatten();
    let rc = match env.as_ref().and_then(|p| p.env.as_ref()) {
        Some(e) => f(e.as_ptr()),
        None => f(envp),
    };
    if let Some(p) = &env {
        let e = crate::hook::errno();
        unseal(&p.sealed);
        crate::hook::set_errno(e);
    }
    rc
}

extern "C" {
    static environ: *const *const c_char;
}

/// The process's environment.
fn environment() -> *const *const c_char {
    // SAFETY: reading libc's `environ` pointer.
    unsafe { environ }
}

// ----- programs stored in pvfs -----------------------------------------------------

/// A program (or script) stored in pvfs, as a memfd the kernel can execute: the
/// file's bytes copied into it. `None`: `path` is not a pvfs path.
///
/// # Safety
/// `path` is null or NUL-terminated.
unsafe fn pvfs_image(path: *const c_char) -> Option<crate::hook::R<c_int>> {
    if Busy::active() || !globals::settings().active() {
        return None;
    }
    // SAFETY: the caller's contract.
    let p = match unsafe { crate::fds::resolve(libc::AT_FDCWD, path, 0) } {
        Ok(crate::fds::Target::Pvfs(p)) => p,
        _ => return None,
    };
    let _busy = Busy::enter();
    Some((|| {
        let pr = globals::proc()?;
        let attr = pr.call(pr.client().stat_lite(&p))?;
        if attr.kind() != pvfs_client::ObjKind::File {
            return Err(libc::EACCES);
        }
        if attr.mode & 0o111 == 0 || !pr.may(&attr, (libc::X_OK | libc::R_OK) as u32) {
            return Err(libc::EACCES);
        }
        let f = pr.call(pr.client().open_handle(attr.handle))?;
        let size = pr.call(f.size())?;
        let mut buf = vec![0u8; usize::try_from(size).map_err(|_| libc::ENOMEM)?];
        let mut got = 0;
        while got < buf.len() {
            let n = pr.call(f.read_at(got as u64, &mut buf[got..]))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        buf.truncate(got);
        // An ELF image is executed from the descriptor and may close with exec; a
        // script's interpreter opens it as /dev/fd/N, so that one stays open.
        let flags = if buf.starts_with(b"\x7fELF") {
            libc::MFD_CLOEXEC
        } else {
            0
        };
        let name = CString::new(format!("pvfs-exec:{}", p.replace('\0', "?")))
            .map_err(|_| libc::EINVAL)?;
        // SAFETY: name is NUL-terminated; memfd_create is not hooked.
        let mfd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
        if mfd < 0 {
            return Err(crate::hook::errno());
        }
        let mut done = 0;
        while done < buf.len() {
            // SAFETY: the rest of buf is readable.
            let n = unsafe { real::write(mfd, buf[done..].as_ptr().cast(), buf.len() - done) };
            if n <= 0 {
                let e = crate::hook::errno();
                // SAFETY: our own descriptor.
                unsafe { real::close(mfd) };
                return Err(e);
            }
            done += n as usize;
        }
        Ok(mfd)
    })())
}

/// execve of `path` with `argv` and `envp` (already the environment to pass on): a
/// program stored in pvfs runs from a memfd copy of it.
///
/// # Safety
/// As execve's.
unsafe fn exec_path(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { pvfs_image(path) } {
        None => unsafe { real::execve(path, argv, envp) },
        Some(Err(e)) => {
            crate::hook::set_errno(e);
            -1
        }
        Some(Ok(mfd)) => {
            // SAFETY: as above; mfd is our own descriptor.
            let rc = unsafe { real::fexecve(mfd, argv, envp) };
            let e = crate::hook::errno();
            // SAFETY: ours, and the exec failed.
            unsafe { real::close(mfd) };
            crate::hook::set_errno(e);
            rc
        }
    }
}

/// execvpe: a name with a slash is a path ([`exec_path`]); others are searched in
/// `PATH` by libc (local directories only).
///
/// # Safety
/// As execvpe's.
unsafe fn exec_search(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    let slash = !file.is_null() && unsafe { CStr::from_ptr(file) }.to_bytes().contains(&b'/');
    if slash {
        // SAFETY: as above.
        unsafe { exec_path(file, argv, envp) }
    } else {
        // SAFETY: as above.
        unsafe { real::execvpe(file, argv, envp) }
    }
}

#[no_mangle]
unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: execve's arguments, passed on.
    unsafe { with_env(envp, false, |e| exec_path(path, argv, e)) }
}

#[no_mangle]
unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as above, with the process's environment.
    unsafe { with_env(environment(), false, |e| exec_path(path, argv, e)) }
}

#[no_mangle]
unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as above.
    unsafe { with_env(environment(), false, |e| exec_search(file, argv, e)) }
}

#[no_mangle]
unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: as above.
    unsafe { with_env(envp, false, |e| exec_search(file, argv, e)) }
}

#[no_mangle]
unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: as above.
    unsafe { with_env(envp, false, |e| real::fexecve(fd, argv, e)) }
}

#[no_mangle]
unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: as above.
    unsafe { with_env(envp, false, |e| real::execveat(dirfd, path, argv, e, flags)) }
}

#[no_mangle]
unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: as above.
    unsafe {
        with_env(envp, true, |e| {
            real::posix_spawn(pid, path, actions, attr, argv, e)
        })
    }
}

#[no_mangle]
unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    actions: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: as above.
    unsafe {
        with_env(envp, true, |e| {
            real::posix_spawnp(pid, file, actions, attr, argv, e)
        })
    }
}

// ----- the new image's side --------------------------------------------------------

/// Whether the real working directory is a deleted one (as `cwd.rs` leaves it while
/// the pvfs working directory is in use).
fn real_cwd_deleted() -> bool {
    let mut buf = [0u8; 16];
    // SAFETY: buf is writable for its length.
    let p = unsafe { real::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
    p.is_null() && crate::hook::errno() == libc::ENOENT
}

/// The descriptors open now (from `/proc/self/fd`, else the first 1024 numbers).
fn open_fds() -> Vec<c_int> {
    match std::fs::read_dir("/proc/self/fd") {
        Ok(rd) => rd
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        Err(_) => (0..1024).collect(),
    }
}

/// A description handed over, and what this image made of it.
type Taken = (Item, Option<Arc<Desc>>);

/// The library constructor's part: takes over what the previous image handed over.
pub(crate) fn restore() {
    let Some(raw) = std::env::var_os(VAR) else {
        return;
    };
    // SAFETY: a NUL-terminated literal name; the constructor runs before the
    // program's threads.
    unsafe { libc::unsetenv(c"PVFS_PRELOAD_STATE".as_ptr()) };
    if !globals::settings().active() {
        return;
    }
    let _busy = Busy::enter();
    let Some(state) = raw.to_str().and_then(decode) else {
        warn(&format!("ignoring a malformed {VAR}"));
        return;
    };
    if let Some(c) = state.cwd {
        if real_cwd_deleted() {
            globals::set_cwd(Some(c));
        }
    }
    if state.items.is_empty() {
        return;
    }
    let mut by_ident: BTreeMap<(u64, u64), Taken> = state
        .items
        .into_iter()
        .map(|it| (it.ident, (it, None)))
        .collect();
    for fd in open_fds() {
        let Some(ident) = identity(fd) else {
            continue;
        };
        let Some((it, made)) = by_ident.get_mut(&ident) else {
            continue;
        };
        let d = match made {
            Some(d) => d.clone(),
            None => {
                let d = Desc::new(
                    it.kind,
                    it.path.clone(),
                    it.handle,
                    it.parent,
                    it.acc | it.status,
                    None,
                    ident,
                    globals::generation(),
                    globals::next_desc_id(),
                );
                if spill::wants_keeper(&d) {
                    d.set_keeper(reopen_keeper(fd));
                    d.mark_shared();
                }
                // Into the memfd too (the same value, unless a vfork child handed
                // over a description its parent had not shared).
                *d.pos() = it.pos;
                let d = Arc::new(d);
                *made = Some(d.clone());
                d
            }
        };
        drop(FDS.insert(fd, d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_garbage_is_refused() {
        let st = State {
            cwd: Some("/a b/ü".into()),
            items: vec![
                Item {
                    ident: (1, 2),
                    kind: Kind::File,
                    handle: 77,
                    parent: 0,
                    acc: libc::O_WRONLY,
                    status: libc::O_APPEND,
                    pos: 12345,
                    path: "/x;,|y".into(),
                },
                Item {
                    ident: (1, 3),
                    kind: Kind::Dir,
                    handle: 5,
                    parent: 1,
                    acc: libc::O_RDONLY,
                    status: libc::O_DIRECTORY,
                    pos: 2,
                    path: "/".into(),
                },
            ],
        };
        assert_eq!(decode(&encode(&st)), Some(st.clone()));
        let empty = State::default();
        assert_eq!(decode(&encode(&empty)), Some(empty));
        for bad in [
            "",
            "2|-|",
            "1|-",
            "1|zz|",
            "1|612|",
            "1|61|",
            "1|-|1,2,f,3,4,1,0,0",
            "1|-|1,2,q,3,4,1,0,0,2f",
            "1|-|1,2,f,3,4,3,0,0,2f",
            "1|-|1,2,f,3,4,1,-1,0,2f",
            "1|-|1,2,f,3,4,1,0,-5,2f",
            "1|-|1,2,f,3,4,1,0,0,78",
            "1|-|1,2,f,3,4,1,0,0,2f;",
        ] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
