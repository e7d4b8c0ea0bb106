//! The group open of the POSIX extensions paper (Vilayannur et al., 2008): `pvfs_openg`
//! opens (or creates) a file once and returns a portable group handle; cooperating
//! processes turn it into a descriptor with `pvfs_openfh` without contacting any server
//! — a distributed `dup`.
//!
//! The handle's format is `pvfs_client`'s (crates/client/src/group.rs): little-endian,
//! with the fsid, the object handle, the open flags, the file's layout, the
//! capabilities `pvfs_openg`'s caller was granted, and a CRC32C, so it can be shipped
//! between hosts of any byte order. A damaged handle is refused (EBADMSG); the data
//! servers check the capabilities, so an altered or forged handle reads and writes
//! nothing, and one used by another user is refused at its first read or write.

use libc::{c_char, c_int, c_void, size_t};

use crate::file::{fd_for, open_target, Target};
use crate::state::{buf, fail, ffi, global, out, path, put};
use crate::types::PVFS_GROUP_HANDLE_MAX;

/// Flags a group handle carries into `pvfs_openfh`: the access mode and O_APPEND
/// (O_CREAT, O_EXCL and O_TRUNC were done by `pvfs_openg`).
const CARRIED: c_int = libc::O_ACCMODE | libc::O_APPEND;

/// `openg` of the POSIX extensions paper (Vilayannur et al., 2008): opens or creates
/// `path` like `pvfs_open(path, flags, mode)` (same requests, same errors) and stores a
/// group handle for the file in `handle`, setting `*handle_len` to its length. No
/// descriptor is made; pass the handle to `pvfs_openfh` (in this or any process of any
/// host using the same configuration). The handle carries the access mode and O_APPEND,
/// which `pvfs_openfh` enforces. A buffer of `PVFS_GROUP_HANDLE_MAX` bytes always
/// suffices; if `handle` is NULL or `*handle_len` is too small, the call fails with
/// ERANGE and sets `*handle_len` to the size needed (the file is opened or created all
/// the same, so call again without O_EXCL). Returns 0, or -1 with errno: as
/// `pvfs_open`, and ERANGE, EISDIR (a directory), EACCES (no permission for the access
/// mode).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `handle_len` is NULL or points to a
/// readable and writable `size_t`; `handle` is NULL or writable for `*handle_len`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn pvfs_openg(
    path: *const c_char,
    handle: *mut c_void,
    handle_len: *mut size_t,
    flags: c_int,
    mode: c_int,
) -> c_int {
    ffi(-1, || {
        // SAFETY: by contract.
        let p = unsafe { self::path(path) }?;
        let len_ptr = out(handle_len)?;
        // SAFETY: non-NULL; initialized by the caller's contract.
        let room = unsafe { *len_ptr };
        let g = global()?;
        let file = match open_target(&g, p, flags, mode as u32, Default::default())? {
            Target::File(f) => *f,
            Target::Dir(_) => return Err(fail(libc::EISDIR, "group handles name files")),
        };
        let token = g.run(g.client().group_handle(&file, (flags & CARRIED) as u32))?;
        // SAFETY: checked non-NULL; writable by contract.
        unsafe { put(len_ptr, token.len()) };
        if handle.is_null() || room < token.len() {
            return Err(fail(
                libc::ERANGE,
                &format!("group handle needs {} bytes", token.len()),
            ));
        }
        // SAFETY: `handle` is non-NULL and writable for `room >= token.len()` bytes by
        // contract; `token` is our own buffer.
        unsafe { std::ptr::copy_nonoverlapping(token.as_ptr(), handle.cast::<u8>(), token.len()) };
        Ok(0)
    })
}

/// `openfh` of the POSIX extensions paper (Vilayannur et al., 2008): a new descriptor
/// for the file a group handle from `pvfs_openg` names, opened with the handle's access
/// mode (a read-only handle gives a descriptor that cannot write: EBADF) and O_APPEND.
/// Checks the handle's length, checksum and fsid locally and sends no request at all,
/// whatever the number of processes doing it (the data servers check the capabilities
/// it carries at each read and write). Returns the descriptor, or -1 with errno:
/// EBADMSG (a damaged handle), EXDEV (another file system), EFAULT, EMFILE, ENXIO.
///
/// # Safety
/// `handle` is NULL or readable for `handle_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn pvfs_openfh(handle: *const c_void, handle_len: size_t) -> c_int {
    ffi(-1, || {
        if handle_len > PVFS_GROUP_HANDLE_MAX {
            return Err(fail(libc::EBADMSG, "invalid group handle: wrong length"));
        }
        // SAFETY: NULL or readable for `handle_len` bytes by contract.
        let bytes = unsafe { buf(handle, handle_len) }?;
        let g = global()?;
        let (file, flags) = g.client().open_group_handle(bytes)?;
        fd_for(
            &g,
            flags as c_int & CARRIED,
            Target::File(Box::new(file)),
            false,
        )
    })
}
