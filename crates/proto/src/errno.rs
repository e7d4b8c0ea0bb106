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
    ENFILE = 23, "too many open files in system";
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

/// Why an operation failed, carried on the wire beside the errno: the errno is what a
/// program sees, the kind is what the client acts on (only [`ErrorKind::Changed`],
/// [`ErrorKind::Busy`] and [`ErrorKind::Unreachable`] are worth trying again).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The answer POSIX defines for the call (ENOENT, EEXIST, ENOTEMPTY, EISDIR, …):
    /// final.
    Posix,
    /// The caller may not do this: permissions, credentials, capabilities (EACCES,
    /// EPERM, EKEYEXPIRED).
    Denied,
    /// The request is malformed or out of range (EINVAL, ENAMETOOLONG, E2BIG,
    /// EBADMSG, EPROTO, EFBIG, EOPNOTSUPP).
    Invalid,
    /// Something a multi-step operation relied on changed under it (a name now
    /// leads elsewhere): the client redoes the operation from its start (ESTALE).
    Changed,
    /// The object, name or role asked for is another server's: the sender's
    /// placement is wrong, and asking again changes nothing (ESTALE, EINVAL).
    NotHere,
    /// The handle belongs to no server of this file system (ESTALE).
    NoServer,
    /// This server's storage failed or is full (EIO, ENOSPC, EROFS).
    Storage,
    /// Busy or out of a resource for now: worth asking again after a pause (EAGAIN).
    Busy,
    /// A server could not be reached, or did not answer in time (EHOSTDOWN,
    /// ETIMEDOUT, ECONNREFUSED, ECONNRESET).
    Unreachable,
    /// The sender's cluster map is not the server's, or the server holds no lease
    /// now (`docs/replication.md`): the sender fetches the map and sends again,
    /// maybe elsewhere (EAGAIN).
    Map,
}

impl ErrorKind {
    /// Every kind, in code order.
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::Posix,
        ErrorKind::Denied,
        ErrorKind::Invalid,
        ErrorKind::Changed,
        ErrorKind::NotHere,
        ErrorKind::NoServer,
        ErrorKind::Storage,
        ErrorKind::Busy,
        ErrorKind::Unreachable,
        ErrorKind::Map,
    ];

    /// Its code on the wire.
    pub fn code(self) -> u8 {
        match self {
            ErrorKind::Posix => 0,
            ErrorKind::Denied => 1,
            ErrorKind::Invalid => 2,
            ErrorKind::Changed => 3,
            ErrorKind::NotHere => 4,
            ErrorKind::NoServer => 5,
            ErrorKind::Storage => 6,
            ErrorKind::Busy => 7,
            ErrorKind::Unreachable => 8,
            ErrorKind::Map => 9,
        }
    }

    /// The kind of a wire code, if it is one. (Peers speak one protocol version, so
    /// an unknown code is a malformed answer, refused like any unknown tag: every
    /// answer decodes to exactly one value.)
    pub fn from_code(code: u8) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// The kind an errno stands for when nothing says more (an I/O error, a refused
    /// frame): the one mapping from errnos to kinds. ESTALE alone is final
    /// ([`ErrorKind::Posix`]): the kinds it may mean must be said by who knows.
    pub fn of(errno: Errno) -> ErrorKind {
        match errno {
            Errno::EACCES
            | Errno::EPERM
            | Errno::EKEYEXPIRED
            | Errno::EKEYREJECTED
            | Errno::ENOKEY => ErrorKind::Denied,
            Errno::EINVAL
            | Errno::E2BIG
            | Errno::ENAMETOOLONG
            | Errno::EBADMSG
            | Errno::EPROTO
            | Errno::EFBIG
            | Errno::ERANGE
            | Errno::EOVERFLOW
            | Errno::EOPNOTSUPP
            | Errno::ENOSYS => ErrorKind::Invalid,
            Errno::EIO | Errno::ENOSPC | Errno::EROFS | Errno::ENOMEM => ErrorKind::Storage,
            Errno::EAGAIN => ErrorKind::Busy,
            Errno::EHOSTDOWN | Errno::ETIMEDOUT | Errno::ECONNREFUSED | Errno::ECONNRESET => {
                ErrorKind::Unreachable
            }
            _ => ErrorKind::Posix,
        }
    }

    /// Whether an operation that failed so may succeed when tried again (at once for
    /// [`ErrorKind::Changed`], after a pause for the others).
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Changed | ErrorKind::Busy | ErrorKind::Unreachable | ErrorKind::Map
        )
    }

    /// A short name, for logs.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Posix => "posix",
            ErrorKind::Denied => "denied",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Changed => "changed",
            ErrorKind::NotHere => "not-here",
            ErrorKind::NoServer => "no-server",
            ErrorKind::Storage => "storage",
            ErrorKind::Busy => "busy",
            ErrorKind::Unreachable => "unreachable",
            ErrorKind::Map => "map",
        }
    }
}

impl crate::codec::Wire for ErrorKind {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(self.code());
    }
    fn get(r: &mut crate::codec::Reader<'_>) -> Result<Self, crate::codec::DecodeError> {
        let code = u8::get(r)?;
        ErrorKind::from_code(code).ok_or(crate::codec::DecodeError::UnknownTag {
            what: "error kind",
            tag: u32::from(code),
        })
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

    #[test]
    fn error_kinds_round_trip_and_unknown_codes_are_refused() {
        use crate::codec::{decode, encode};
        for k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_code(k.code()), Some(k));
            assert_eq!(decode::<ErrorKind>(&encode(&k)).unwrap(), k);
        }
        assert_eq!(ErrorKind::from_code(200), None);
        assert!(decode::<ErrorKind>(&[200]).is_err());
        assert!(!ErrorKind::Posix.retryable());
        assert!(ErrorKind::Changed.retryable());
        assert_eq!(ErrorKind::of(Errno::ESTALE), ErrorKind::Posix);
        assert_eq!(ErrorKind::of(Errno::EACCES), ErrorKind::Denied);
        assert_eq!(ErrorKind::of(Errno::ETIMEDOUT), ErrorKind::Unreachable);
    }
}
