//! POSIX error numbers as they travel on the wire (Linux numbering, explicit).

use std::fmt;

/// A POSIX errno carried in error replies; the numbering is Linux's on every host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Errno(pub u32);

macro_rules! errnos {
    ($($name:ident = $val:expr, $msg:expr;)*) => {
        impl Errno {
            $(#[doc = $msg] pub const $name: Errno = Errno($val);)*

            /// The symbolic name, e.g. `"ENOENT"`.
            pub fn name(self) -> &'static str {
                match self.0 { $($val => stringify!($name),)* _ => "EUNKNOWN" }
            }

            /// A short human description, e.g. `"no such file or directory"`.
            pub fn describe(self) -> &'static str {
                match self.0 { $($val => $msg,)* _ => "unknown error" }
            }
        }
    };
}

errnos! {
    EPERM = 1, "operation not permitted";
    ENOENT = 2, "no such file or directory";
    EINTR = 4, "interrupted system call";
    EIO = 5, "input/output error";
    ENXIO = 6, "no such device or address";
    E2BIG = 7, "argument list too long";
    EBADF = 9, "bad file descriptor";
    EAGAIN = 11, "resource temporarily unavailable";
    ENOMEM = 12, "out of memory";
    EACCES = 13, "permission denied";
    EBUSY = 16, "device or resource busy";
    EEXIST = 17, "file exists";
    EXDEV = 18, "invalid cross-device link";
    ENOTDIR = 20, "not a directory";
    EISDIR = 21, "is a directory";
    EINVAL = 22, "invalid argument";
    EFBIG = 27, "file too large";
    ENOSPC = 28, "no space left on device";
    EROFS = 30, "read-only file system";
    EMLINK = 31, "too many links";
    ERANGE = 34, "result out of range";
    EDEADLK = 35, "resource deadlock avoided";
    ENAMETOOLONG = 36, "file name too long";
    ENOLCK = 37, "no locks available";
    ENOSYS = 38, "function not supported";
    ENOTEMPTY = 39, "directory not empty";
    ELOOP = 40, "too many levels of symbolic links";
    ENODATA = 61, "no data available";
    EPROTO = 71, "protocol error";
    EBADMSG = 74, "bad message";
    EOVERFLOW = 75, "value too large for defined data type";
    EOPNOTSUPP = 95, "operation not supported";
    ECONNRESET = 104, "connection reset by peer";
    ETIMEDOUT = 110, "connection timed out";
    ECONNREFUSED = 111, "connection refused";
    EHOSTDOWN = 112, "host is down";
    ESTALE = 116, "stale file handle";
    ENOKEY = 126, "required key not available";
    EKEYEXPIRED = 127, "key has expired";
    EKEYREJECTED = 129, "key was rejected by service";
}

impl Errno {
    /// Maps a `std::io::Error` to the errno it carries (EIO when it carries none).
    pub fn from_io(err: &std::io::Error) -> Errno {
        match err.raw_os_error() {
            Some(code) if code > 0 => Errno(code as u32),
            _ => match err.kind() {
                std::io::ErrorKind::NotFound => Errno::ENOENT,
                std::io::ErrorKind::PermissionDenied => Errno::EACCES,
                std::io::ErrorKind::AlreadyExists => Errno::EEXIST,
                std::io::ErrorKind::TimedOut => Errno::ETIMEDOUT,
                std::io::ErrorKind::ConnectionRefused => Errno::ECONNREFUSED,
                std::io::ErrorKind::ConnectionReset => Errno::ECONNRESET,
                std::io::ErrorKind::InvalidInput => Errno::EINVAL,
                std::io::ErrorKind::OutOfMemory => Errno::ENOMEM,
                _ => Errno::EIO,
            },
        }
    }

    /// The raw number, for `errno` at C and FUSE edges.
    pub fn code(self) -> i32 {
        self.0 as i32
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.describe(), self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_io_mapping() {
        assert_eq!(Errno::ENOENT.name(), "ENOENT");
        assert_eq!(Errno(9999).name(), "EUNKNOWN");
        let e = std::io::Error::from_raw_os_error(28);
        assert_eq!(Errno::from_io(&e), Errno::ENOSPC);
        let e = std::io::Error::new(std::io::ErrorKind::NotFound, "x");
        assert_eq!(Errno::from_io(&e), Errno::ENOENT);
    }
}
