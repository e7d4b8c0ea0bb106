//! Mounting, serving and unmounting.
//!
//! [`serve`] refuses a mount point where a file system is mounted already (a second
//! mount would hide it), checks the file system answers, mounts (fuser: mount(2) as root,
//! `fusermount3` otherwise), raises the mount's read-ahead window, tells the caller
//! the mount is live, and serves until the mount goes away. SIGTERM, SIGINT and
//! SIGHUP detach the mount (lazily, so a busy mount goes too) and end the process
//! cleanly; files still open on a detached mount keep being served for a grace
//! period. Objects of files unlinked while open are deleted on the way out.
//!
//! [`unmount`] reads `/proc/self/mountinfo` instead of touching the mount point, so
//! it works when the daemon is hung or gone (a stat of a dead FUSE mount would fail
//! or hang): a plain unmount first, a lazy detach if that finds the mount busy.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fuser::{MountOption, SessionACL};
use pvfs_client::Client;
use pvfs_config::Config;

use crate::fs::PvfsFs;
use crate::inner::Inner;
use crate::options::MountOptions;

/// How long files still open on a detached mount are served after a signal.
const GRACE: Duration = Duration::from_secs(5);

/// A failed mount or unmount.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The runtime or a thread could not be started.
    #[error("cannot start: {0}")]
    Start(std::io::Error),
    /// The file system's root could not be reached.
    #[error("cannot reach the file system: {0}")]
    Unreachable(String),
    /// The mount point is unusable.
    #[error("{path}: {why}")]
    MountPoint {
        /// The mount point.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// mount(2) or fusermount3 failed.
    #[error("{path}: cannot mount: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// No FUSE file system is mounted there.
    #[error("{0}: not a FUSE mount point")]
    NotMounted(PathBuf),
    /// umount2 or fusermount3 failed.
    #[error("{path}: cannot unmount: {why}")]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// The cause.
        why: String,
    },
}

/// How an [`unmount`] went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// Unmounted; nothing was using it.
    Clean,
    /// Detached: gone from the namespace, freed when its last user lets go.
    Detached,
}

/// Mounts the file system `config` describes on `mountpoint` and serves it until
/// it is unmounted or the process gets SIGTERM, SIGINT or SIGHUP. `ready` is called
/// once the mount is live (a background `pvfs mount` returns then).
pub fn serve(
    config: Config,
    mountpoint: &Path,
    opts: &MountOptions,
    ready: impl FnOnce(),
) -> Result<(), Error> {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("pvfs-fuse")
        .enable_all()
        .build()
        .map_err(Error::Start)?;
    // From here on the stop signals unmount instead of killing the process.
    let mut signals = rt
        .block_on(async { Signals::new() })
        .map_err(Error::Start)?;
    let mountpoint = std::path::absolute(mountpoint).map_err(|e| Error::MountPoint {
        path: mountpoint.to_path_buf(),
        why: e.to_string(),
    })?;
    // A second mount would hide the first one (and its files) without a word.
    if let Some(m) = mounted_on(&mountpoint) {
        let how = if m.is_fuse() {
            format!("pvfs umount {}", m.mount_point.display())
        } else {
            format!("umount {}", m.mount_point.display())
        };
        return Err(Error::MountPoint {
            path: mountpoint,
            why: format!(
                "already a mount point ({} file system {}): unmount it first with `{how}`",
                m.fstype, m.source
            ),
        });
    }
    match std::fs::metadata(&mountpoint) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(Error::MountPoint {
                path: mountpoint,
                why: "not a directory".into(),
            })
        }
        Err(e) => {
            return Err(Error::MountPoint {
                path: mountpoint,
                why: e.to_string(),
            })
        }
    }
    // A user who cannot open /dev/fuse cannot mount: say so before anything else.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 && !can_open_dev_fuse() {
        return Err(Error::Mount {
            path: mountpoint,
            source: dev_fuse_denied(),
        });
    }
    let name = config.name.clone();
    let client = {
        let _guard = rt.enter();
        Client::new(config)
    };
    let timeouts = client.config().timeouts;
    let check = rt.block_on(async {
        tokio::time::timeout(
            timeouts.connect + timeouts.request * 2,
            client.getattr(client.root()),
        )
        .await
    });
    match check {
        Ok(Ok(_)) => {
            if let Some(addr) = &opts.metrics {
                let _guard = rt.enter();
                // Runs until the runtime goes, with the mount.
                drop(client.serve_metrics(addr.clone()));
            }
        }
        Ok(Err(e)) => return Err(Error::Unreachable(e.to_string())),
        Err(_) => {
            return Err(Error::Unreachable(
                "no answer from the root's server".into(),
            ))
        }
    }
    let opts = opts.in_bounds();
    allow_requests_of(opts.max_request);
    let inner = Arc::new(Inner::new(client, opts.clone()));
    let watchdog = timeouts.request * 4 + Duration::from_secs(10);
    let fs = PvfsFs::new(
        inner.clone(),
        rt.handle().clone(),
        watchdog,
        opts.threads.max(1),
    );

    let mut fcfg = fuser::Config::default();
    fcfg.mount_options = vec![
        MountOption::FSName(format!("pvfs:{name}")),
        MountOption::Subtype("pvfs".into()),
        MountOption::DefaultPermissions,
        MountOption::RW,
        MountOption::NoAtime,
    ];
    fcfg.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    fcfg.n_threads = Some(opts.threads.max(1));
    // Cloning needs to open /dev/fuse, which only root may do on some systems;
    // without it the threads share one descriptor.
    fcfg.clone_fd = opts.threads > 1 && can_open_dev_fuse();
    let mount_err = |e| Error::Mount {
        path: mountpoint.clone(),
        source: e,
    };
    // SAFETY: geteuid has no preconditions.
    let session = if unsafe { libc::geteuid() } == 0 {
        fuser::Session::new(fs, &mountpoint, &fcfg).map_err(mount_err)?
    } else {
        let fd = fusermount(&mountpoint, &fcfg).map_err(mount_err)?;
        fuser::Session::from_fd(fs, fd, fcfg.acl, fcfg.clone()).map_err(mount_err)?
    };
    let _ = inner.notifier.set(session.notifier());
    if opts.cache_timeout > Duration::ZERO {
        crate::feed::start(&inner, rt.handle()).map_err(Error::Start)?;
    }
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("fuse-session".into())
        .spawn(move || {
            let result = session.run();
            let _ = done_tx.send(result);
        })
        .map_err(Error::Start)?;
    if opts.read_ahead > 0 {
        set_read_ahead(&mountpoint, opts.read_ahead);
    }
    tracing::info!("mounted {} on {}", name, mountpoint.display());
    ready();

    let signal = rt.block_on(async {
        tokio::select! {
            ended = &mut done_rx => {
                if let Ok(Err(e)) = ended {
                    tracing::warn!("FUSE session ended: {e}");
                }
                None
            }
            sig = signals.recv() => Some(sig),
        }
    });
    if let Some(sig) = signal {
        tracing::info!("{sig}: unmounting {}", mountpoint.display());
        if let Err(e) = unmount(&mountpoint, true) {
            tracing::warn!("{e}");
        }
        let ended = rt.block_on(async { tokio::time::timeout(GRACE, &mut done_rx).await });
        if ended.is_err() {
            tracing::warn!("files still open on the detached mount; exiting anyway");
        }
    }
    rt.block_on(inner.finish(watchdog));
    let stats = inner.client.stats();
    tracing::info!(
        "unmounted; requests sent: {} ({:?})",
        stats.total(),
        stats.per_op()
    );
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// The kernel's cap on FUSE request sizes, in pages (a sysctl since Linux 6.12).
const MAX_PAGES_LIMIT: &str = "/proc/sys/fs/fuse/max_pages_limit";

/// Raises `fs.fuse.max_pages_limit` so the kernel accepts requests of `bytes`
/// (root only; the limit is never lowered). Otherwise requests stay at what the
/// kernel allows.
fn allow_requests_of(bytes: u32) {
    let pages = bytes.div_ceil(4096);
    let Ok(text) = std::fs::read_to_string(MAX_PAGES_LIMIT) else {
        return;
    };
    let Ok(limit) = text.trim().parse::<u32>() else {
        return;
    };
    if limit >= pages {
        return;
    }
    match std::fs::write(MAX_PAGES_LIMIT, format!("{pages}\n")) {
        Ok(()) => tracing::info!("raised fs.fuse.max_pages_limit from {limit} to {pages}"),
        Err(e) => tracing::info!(
            "requests stay at {} KiB: cannot raise fs.fuse.max_pages_limit: {e}",
            limit * 4
        ),
    }
}

/// Why a user other than root cannot mount: `/dev/fuse` is closed to them, and what
/// opens it.
fn dev_fuse_denied() -> std::io::Error {
    use std::os::unix::fs::MetadataExt;
    let mode = std::fs::metadata("/dev/fuse").map_or_else(
        |e| format!("cannot be opened: {e}"),
        |m| format!("is mode {:04o} (owner uid {})", m.mode() & 0o7777, m.uid()),
    );
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!(
            "/dev/fuse {mode}, and a user other than root needs to open it: as root, \
             `chmod 0666 /dev/fuse` (the mode udev's rule for it sets) lets users mount, \
             or mount as root (--allow-other lets other users in)"
        ),
    )
}

/// Whether this process may open `/dev/fuse` itself.
fn can_open_dev_fuse() -> bool {
    // SAFETY: the path is a valid NUL-terminated string.
    unsafe { libc::access(c"/dev/fuse".as_ptr(), libc::R_OK | libc::W_OK) == 0 }
}

/// Mounts through the set-user-ID `fusermount3` (for users other than root, and
/// whatever the mode of `/dev/fuse`): it mounts and passes back the open FUSE
/// device over a socket.
fn fusermount(mountpoint: &Path, cfg: &fuser::Config) -> std::io::Result<OwnedFd> {
    use std::io::Error as IoError;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::os::unix::process::CommandExt;

    let mut opts: Vec<String> = Vec::new();
    for o in &cfg.mount_options {
        match o {
            MountOption::FSName(n) => opts.push(format!("fsname={n}")),
            MountOption::Subtype(t) => opts.push(format!("subtype={t}")),
            MountOption::DefaultPermissions => opts.push("default_permissions".into()),
            MountOption::RW => opts.push("rw".into()),
            MountOption::NoAtime => opts.push("noatime".into()),
            _ => {}
        }
    }
    if cfg.acl != SessionACL::Owner {
        opts.push("allow_other".into());
    }
    let (ours, theirs) = UnixStream::pair()?;
    let fd = theirs.as_raw_fd();
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-o")
        .arg(opts.join(","))
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", fd.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: fcntl is async-signal-safe; the closure allocates nothing. It lets
    // fusermount3 inherit its end of the socket.
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| IoError::new(e.kind(), format!("cannot run fusermount3: {e}")))?;
    drop(theirs);
    let received = receive_fd(&ours);
    let out = child.wait_with_output()?;
    match received {
        Ok(fd) if out.status.success() => Ok(fd),
        _ => {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            let why = why
                .strip_prefix("fusermount3: ")
                .unwrap_or(&why)
                .to_string();
            Err(IoError::other(if why.is_empty() {
                format!("fusermount3 failed ({})", out.status)
            } else {
                why
            }))
        }
    }
}

/// Receives one file descriptor sent with SCM_RIGHTS over `sock`.
fn receive_fd(sock: &std::os::unix::net::UnixStream) -> std::io::Result<OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one control message with one descriptor, aligned for cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: an all-zero msghdr is a valid empty message header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    loop {
        // SAFETY: msg points at live buffers of the sizes it states.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n > 0 {
            break;
        }
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    // SAFETY: msg was filled by recvmsg; the CMSG macros walk its control buffer.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(std::io::Error::other("fusermount3 sent no descriptor"));
        }
        let fd: libc::c_int = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
        if fd < 0 {
            return Err(std::io::Error::other("fusermount3 sent a bad descriptor"));
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// The stop signals, caught.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
            _ = self.hup.recv() => "SIGHUP",
        }
    }
}

/// One line of `/proc/self/mountinfo`.
struct MountEntry {
    /// "major:minor" of the mounted file system.
    dev: String,
    mount_point: PathBuf,
    fstype: String,
    /// What is mounted, e.g. "pvfs:demo" or "tmpfs".
    source: String,
}

impl MountEntry {
    fn is_fuse(&self) -> bool {
        self.fstype == "fuse" || self.fstype.starts_with("fuse.")
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let digits = &b[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// The mounts of this process's namespace.
fn mounts() -> Vec<MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let mut r = right.split(' ');
            let fstype = r.next()?;
            let source =
                String::from_utf8_lossy(&unescape(r.next().unwrap_or("none"))).into_owned();
            Some(MountEntry {
                dev: f.get(2)?.to_string(),
                mount_point: PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(f.get(4)?))),
                fstype: fstype.to_string(),
                source,
            })
        })
        .collect()
}

/// The last mount on `path` (the one a path lookup reaches).
fn mount_at(path: &Path) -> Option<MountEntry> {
    mounts().into_iter().rfind(|m| m.mount_point == path)
}

/// The last mount on the absolute path `path`, also when `path` leads there through
/// symlinks (its parent is resolved, never `path` itself: a dead FUSE mount there
/// would fail or hang a lookup).
fn mounted_on(path: &Path) -> Option<MountEntry> {
    mount_at(path).or_else(|| {
        let parent = path.parent()?.canonicalize().ok()?;
        mount_at(&parent.join(path.file_name()?))
    })
}

/// Sets the read-ahead window of the mount on `mountpoint` (root only; the
/// kernel's default for FUSE is 128 KiB).
fn set_read_ahead(mountpoint: &Path, bytes: u64) {
    let Some(m) = mount_at(mountpoint) else {
        return;
    };
    let file = format!("/sys/class/bdi/{}/read_ahead_kb", m.dev);
    if let Err(e) = std::fs::write(&file, format!("{}\n", bytes / 1024)) {
        tracing::debug!("cannot set {file}: {e}");
    }
}

/// Unmounts the FUSE file system on `mountpoint`; with `lazy`, or when a plain
/// unmount finds it busy, detaches it instead. Never touches the mount itself, so a
/// dead or hung daemon does not get in the way.
pub fn unmount(mountpoint: &Path, lazy: bool) -> Result<Unmounted, Error> {
    let not_mounted = || Error::NotMounted(mountpoint.to_path_buf());
    let abs = std::path::absolute(mountpoint).map_err(|_| not_mounted())?;
    let entry = mounted_on(&abs).ok_or_else(not_mounted)?;
    if !entry.is_fuse() {
        return Err(not_mounted());
    }
    let path = entry.mount_point;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        umount_root(&path, lazy)
    } else {
        umount_user(&path, lazy)
    }
}

fn umount_root(path: &Path, lazy: bool) -> Result<Unmounted, Error> {
    let c =
        CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::NotMounted(path.into()))?;
    let call = |flags: libc::c_int| {
        // SAFETY: c is a valid NUL-terminated path.
        let rc = unsafe { libc::umount2(c.as_ptr(), flags) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    if !lazy {
        match call(0) {
            Ok(()) => return Ok(Unmounted::Clean),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => {
                return Err(Error::Unmount {
                    path: path.into(),
                    why: e.to_string(),
                })
            }
        }
    }
    call(libc::MNT_DETACH).map_err(|e| Error::Unmount {
        path: path.into(),
        why: e.to_string(),
    })?;
    Ok(Unmounted::Detached)
}

fn umount_user(path: &Path, lazy: bool) -> Result<Unmounted, Error> {
    let run = |lazy: bool| {
        let mut cmd = std::process::Command::new("fusermount3");
        cmd.arg("-u").arg("-q");
        if lazy {
            cmd.arg("-z");
        }
        cmd.arg("--").arg(path);
        cmd.stdin(std::process::Stdio::null());
        match cmd.output() {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            Err(e) => Err(format!("cannot run fusermount3: {e}")),
        }
    };
    if !lazy {
        match run(false) {
            Ok(()) => return Ok(Unmounted::Clean),
            Err(why) if why.contains("busy") => {}
            Err(why) => {
                return Err(Error::Unmount {
                    path: path.into(),
                    why,
                })
            }
        }
    }
    run(true).map_err(|why| Error::Unmount {
        path: path.into(),
        why,
    })?;
    Ok(Unmounted::Detached)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape("/tmp/a\\040b"), b"/tmp/a b");
        assert_eq!(unescape("/x\\134y"), b"/x\\y");
        assert_eq!(unescape("/plain"), b"/plain");
        assert_eq!(unescape("/end\\04"), b"/end\\04");
    }

    #[test]
    fn root_is_mounted() {
        let m = mount_at(Path::new("/"));
        assert!(m.is_some(), "/ appears in mountinfo");
    }
}
