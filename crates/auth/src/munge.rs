//! MUNGE credentials, through the system's libmunge (loaded at run time, so a node
//! without MUNGE runs everything else and says what is missing only when a user's
//! process needs it).
//!
//! MUNGE (Dun, 2004–) is the credential service HPC sites run for Slurm: a local
//! daemon, `munged`, seals the calling process's uid and gid (and a payload) into a
//! credential that any node sharing the realm's key can check, once. An unprivileged
//! client proves its user with one; the server binds the connection to it.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The shared library looked for (Debian package `libmunge2`, installed with `munge`).
pub const LIBRARY: &str = "libmunge.so.2";

const MUNGE_OPT_TTL: c_int = 4;
const MUNGE_OPT_SOCKET: c_int = 8;
const MUNGE_OPT_UID_RESTRICTION: c_int = 9;
const EMUNGE_SUCCESS: c_int = 0;
const EMUNGE_SOCKET: c_int = 6;

type CtxCreate = unsafe extern "C" fn() -> *mut c_void;
type CtxDestroy = unsafe extern "C" fn(*mut c_void);
type CtxSet = unsafe extern "C" fn(*mut c_void, c_int, ...) -> c_int;
type Encode = unsafe extern "C" fn(*mut *mut c_char, *mut c_void, *const c_void, c_int) -> c_int;
type Decode = unsafe extern "C" fn(
    *const c_char,
    *mut c_void,
    *mut *mut c_void,
    *mut c_int,
    *mut libc::uid_t,
    *mut libc::gid_t,
) -> c_int;
type StrError = unsafe extern "C" fn(c_int) -> *const c_char;
type CtxStrError = unsafe extern "C" fn(*mut c_void) -> *const c_char;

/// Why a MUNGE credential could not be made or checked.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum MungeError {
    /// libmunge is not installed on this node.
    #[error("MUNGE is not installed ({LIBRARY}: {0}; Debian package munge)")]
    NotInstalled(String),
    /// munged does not answer on the socket.
    #[error("munged is not running ({0})")]
    NoDaemon(String),
    /// The credential was refused (expired, replayed, another realm, malformed ...).
    #[error("MUNGE credential refused: {0}")]
    Refused(String),
    /// Anything else libmunge reported.
    #[error("MUNGE: {0}")]
    Other(String),
}

/// What a checked credential says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The uid of the process that made it.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// The payload sealed in it.
    pub payload: Vec<u8>,
}

struct Library {
    _handle: *mut c_void,
    ctx_create: CtxCreate,
    ctx_destroy: CtxDestroy,
    ctx_set: CtxSet,
    encode: Encode,
    decode: Decode,
    strerror: StrError,
    ctx_strerror: CtxStrError,
}

// SAFETY: the handle is only used to keep the library loaded; the functions are
// thread-safe as long as each call uses its own context, which `Munge` guarantees.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

/// A connection to the local MUNGE daemon (through libmunge).
pub struct Munge {
    lib: Library,
    socket: Option<CString>,
}

impl std::fmt::Debug for Munge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Munge(socket {:?})", self.socket)
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local string or null.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null dlerror strings are NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Looks `name` up in `handle` as a function pointer of type `T`.
///
/// # Safety
/// `T` must be the function's true signature.
unsafe fn symbol<T: Copy>(handle: *mut c_void, name: &CStr) -> Result<T, MungeError> {
    // SAFETY: handle is a live dlopen handle and name is NUL-terminated.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if p.is_null() {
        return Err(MungeError::NotInstalled(format!(
            "no symbol {}",
            name.to_string_lossy()
        )));
    }
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: the caller names the symbol's type; both are pointer-sized.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

impl Munge {
    /// Loads libmunge; `socket` is munged's socket (None: libmunge's default,
    /// `/run/munge/munge.socket.2`). Nothing is asked of the daemon yet.
    pub fn open(socket: Option<&Path>) -> Result<Arc<Munge>, MungeError> {
        let name = CString::new(LIBRARY).expect("no NUL in the library name");
        // SAFETY: dlopen with a NUL-terminated name; libmunge has no constructors
        // that could misbehave.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(MungeError::NotInstalled(dl_error()));
        }
        // SAFETY: the types below are libmunge's prototypes (munge.h).
        let lib = unsafe {
            Library {
                _handle: handle,
                ctx_create: symbol(handle, c"munge_ctx_create")?,
                ctx_destroy: symbol(handle, c"munge_ctx_destroy")?,
                ctx_set: symbol(handle, c"munge_ctx_set")?,
                encode: symbol(handle, c"munge_encode")?,
                decode: symbol(handle, c"munge_decode")?,
                strerror: symbol(handle, c"munge_strerror")?,
                ctx_strerror: symbol(handle, c"munge_ctx_strerror")?,
            }
        };
        let socket = match socket {
            None => None,
            Some(p) => Some(
                CString::new(p.as_os_str().as_encoded_bytes())
                    .map_err(|_| MungeError::Other("socket path holds a NUL byte".into()))?,
            ),
        };
        Ok(Arc::new(Munge { lib, socket }))
    }

    /// A fresh context pointed at our socket.
    fn context(&self) -> Result<Ctx<'_>, MungeError> {
        // SAFETY: munge_ctx_create has no preconditions.
        let ctx = unsafe { (self.lib.ctx_create)() };
        if ctx.is_null() {
            return Err(MungeError::Other("cannot create a context".into()));
        }
        let ctx = Ctx { munge: self, ctx };
        if let Some(s) = &self.socket {
            // SAFETY: MUNGE_OPT_SOCKET takes a NUL-terminated string, copied by libmunge.
            let e = unsafe { (self.lib.ctx_set)(ctx.ctx, MUNGE_OPT_SOCKET, s.as_ptr()) };
            if e != EMUNGE_SUCCESS {
                return Err(self.error(e, &ctx));
            }
        }
        Ok(ctx)
    }

    fn error(&self, e: c_int, ctx: &Ctx<'_>) -> MungeError {
        // SAFETY: both return static or context-owned NUL-terminated strings (or null).
        let detail = unsafe {
            let p = (self.lib.ctx_strerror)(ctx.ctx);
            let p = if p.is_null() {
                (self.lib.strerror)(e)
            } else {
                p
            };
            if p.is_null() {
                format!("error {e}")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        match e {
            EMUNGE_SOCKET => MungeError::NoDaemon(detail),
            8..=18 => MungeError::Refused(detail),
            _ => MungeError::Other(detail),
        }
    }

    /// A credential for this process's user carrying `payload`, decodable only by
    /// processes of `decoder_uid` when given, and valid for `ttl_secs`.
    pub fn encode(
        &self,
        payload: &[u8],
        decoder_uid: Option<u32>,
        ttl_secs: u32,
    ) -> Result<String, MungeError> {
        let ctx = self.context()?;
        if let Some(uid) = decoder_uid {
            // SAFETY: MUNGE_OPT_UID_RESTRICTION takes a uid_t.
            let e = unsafe {
                (self.lib.ctx_set)(ctx.ctx, MUNGE_OPT_UID_RESTRICTION, uid as libc::uid_t)
            };
            if e != EMUNGE_SUCCESS {
                return Err(self.error(e, &ctx));
            }
        }
        // SAFETY: MUNGE_OPT_TTL takes an int.
        let e = unsafe {
            (self.lib.ctx_set)(
                ctx.ctx,
                MUNGE_OPT_TTL,
                ttl_secs.min(i32::MAX as u32) as c_int,
            )
        };
        if e != EMUNGE_SUCCESS {
            return Err(self.error(e, &ctx));
        }
        let len = c_int::try_from(payload.len())
            .map_err(|_| MungeError::Other("payload too large".into()))?;
        let mut cred: *mut c_char = std::ptr::null_mut();
        // SAFETY: payload is valid for len bytes; cred receives a malloc'ed string.
        let e = unsafe { (self.lib.encode)(&mut cred, ctx.ctx, payload.as_ptr().cast(), len) };
        if e != EMUNGE_SUCCESS || cred.is_null() {
            return Err(self.error(e, &ctx));
        }
        // SAFETY: cred is a NUL-terminated string libmunge allocated with malloc.
        let out = unsafe { CStr::from_ptr(cred) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above; freed once.
        unsafe { libc::free(cred.cast()) };
        Ok(out)
    }

    /// Checks a credential (once: munged refuses a replay) and returns what it says.
    /// Blocking: it asks the daemon.
    pub fn decode(&self, credential: &str) -> Result<Decoded, MungeError> {
        let cred = CString::new(credential)
            .map_err(|_| MungeError::Refused("credential holds a NUL byte".into()))?;
        let ctx = self.context()?;
        let mut buf: *mut c_void = std::ptr::null_mut();
        let mut len: c_int = 0;
        let mut uid: libc::uid_t = 0;
        let mut gid: libc::gid_t = 0;
        // SAFETY: every out-pointer is valid; buf receives malloc'ed memory or null.
        let e = unsafe {
            (self.lib.decode)(
                cred.as_ptr(),
                ctx.ctx,
                &mut buf,
                &mut len,
                &mut uid,
                &mut gid,
            )
        };
        let payload = if buf.is_null() || len <= 0 {
            Vec::new()
        } else {
            // SAFETY: libmunge allocated len bytes at buf.
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len as usize) }.to_vec()
        };
        if !buf.is_null() {
            // SAFETY: malloc'ed by libmunge, freed once.
            unsafe { libc::free(buf) };
        }
        if e != EMUNGE_SUCCESS {
            return Err(self.error(e, &ctx));
        }
        Ok(Decoded { uid, gid, payload })
    }
}

struct Ctx<'a> {
    munge: &'a Munge,
    ctx: *mut c_void,
}

impl Drop for Ctx<'_> {
    fn drop(&mut self) {
        // SAFETY: ctx came from munge_ctx_create and is destroyed once.
        unsafe { (self.munge.lib.ctx_destroy)(self.ctx) };
    }
}

/// The socket path libmunge uses unless told otherwise.
pub fn default_socket() -> PathBuf {
    PathBuf::from("/run/munge/munge.socket.2")
}
