//! Blocking `sendfile` loops for [`crate::FrameWriter::send_file`], run on a blocking
//! thread: the socket is non-blocking (tokio owns it), so a full socket buffer is
//! waited out with `poll`, bounded by the caller's timeout.

use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use crate::TransportError;

fn wait_writable(sock: RawFd, timeout: Duration) -> Result<(), TransportError> {
    let mut pfd = libc::pollfd {
        fd: sock,
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    loop {
        // SAFETY: one valid pollfd, count 1.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc > 0 {
            return Ok(());
        }
        if rc == 0 {
            return Err(TransportError::Timeout {
                what: "sending file data (peer not reading)".into(),
            });
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(TransportError::Io(e));
        }
    }
}

/// Writes all of `buf` to the non-blocking socket (a frame's header and body, or
/// zeros); `more` tells the kernel data follows at once (`MSG_MORE`), so header and
/// data leave in the same packets.
pub(crate) fn write_all(
    sock: RawFd,
    mut buf: &[u8],
    more: bool,
    timeout: Duration,
) -> Result<(), TransportError> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    while !buf.is_empty() {
        // SAFETY: buf is a valid readable slice of the given length.
        let n = unsafe { libc::send(sock, buf.as_ptr().cast(), buf.len(), flags) };
        if n > 0 {
            buf = &buf[n as usize..];
            continue;
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::WouldBlock => wait_writable(sock, timeout)?,
            std::io::ErrorKind::Interrupted => {}
            _ => return Err(TransportError::Io(e)),
        }
    }
    Ok(())
}

/// Sends the byte ranges `runs` of `file` to `sock`; missing bytes go as zeros.
pub(crate) fn send_runs(
    sock: RawFd,
    file: &std::fs::File,
    runs: &[(u64, u64)],
    timeout: Duration,
) -> Result<(), TransportError> {
    let fd = file.as_raw_fd();
    for &(off, len) in runs {
        let mut pos = off as libc::off_t;
        let mut left = len;
        while left > 0 {
            let want = left.min(1 << 30) as usize;
            // SAFETY: both descriptors are open for the duration of the call (the file
            // by `file`, the socket by the caller's guard); pos is a valid off_t.
            let n = unsafe { libc::sendfile(sock, fd, &mut pos, want) };
            if n > 0 {
                left -= n as u64;
                continue;
            }
            if n == 0 {
                // The file ended early: keep the frame whole with zeros.
                let zeros = vec![0u8; left.min(1 << 20) as usize];
                while left > 0 {
                    let k = left.min(zeros.len() as u64) as usize;
                    write_all(sock, &zeros[..k], false, timeout)?;
                    left -= k as u64;
                }
                break;
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock => wait_writable(sock, timeout)?,
                std::io::ErrorKind::Interrupted => {}
                _ => return Err(TransportError::Io(e)),
            }
        }
    }
    Ok(())
}
