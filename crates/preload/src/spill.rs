//! What a program writes to a pvfs descriptor through the kernel, moved to pvfs.
//!
//! glibc's stdio writes with internal system calls that no hook sees, so `echo one >
//! /pvfs/out` in a shell (the builtin `echo` writes to descriptor 1 through stdio) or
//! a program exec'd with its standard output on a pvfs file writes to the placeholder
//! itself. A placeholder open for writing is therefore a write-only `O_APPEND`
//! descriptor of its memfd (`desc.rs`): those bytes collect there, in order, and the
//! library moves them to pvfs — at the description's offset, or at the end with
//! `O_APPEND`, as one write — before any hooked call on the description does its own
//! work (so the order of the program's writes is kept), when its descriptor is closed
//! or replaced, before `exec` and at exit (after a `fflush(NULL)` for streams still
//! buffered). It reads them through the description's keeper, the library's own
//! descriptor of the memfd, which also keeps them when the program's last descriptor
//! goes by a call no hook sees (glibc's `fclose(stdout)`).
//!
//! The memfd's first 8 bytes hold the description's offset once it is shared
//! (`Desc::pos`): before `fork` and `exec` every regular file's description is
//! (`handoff::share_all`), so a parent and its children, exec'd or not, move one offset, as
//! POSIX says (`{ echo a; cmd; echo c; } > /pvfs/out` keeps all three in order).

use std::sync::Arc;

use crate::desc::{Desc, Kind, OFFSET_BYTES};
use crate::globals::{self, FDS, LISTINGS};
use crate::hook::{Busy, R};
use crate::real;

/// Largest piece read from a memfd at once.
const PIECE: usize = 1 << 20;

/// Moves what was written to `d`'s placeholder through the kernel to pvfs. Nothing to
/// do (one `fstat`) when nothing was.
pub(crate) fn drain(d: &Desc) -> R<()> {
    let Some(k) = d.keeper() else {
        return Ok(());
    };
    if !FDS.owned() {
        // A vfork child: the parent moves the bytes when it next touches them.
        return Ok(());
    }
    // SAFETY: an all-zero stat is a valid value; fstat writes into it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a live stat; k is the description's own descriptor.
    if unsafe { real::fstat(k, &mut st) } != 0 || st.st_size as u64 <= OFFSET_BYTES {
        return Ok(());
    }
    if d.kind != Kind::File {
        return Ok(());
    }
    let _busy = Busy::enter();
    let pr = globals::proc()?;
    let f = d.file(pr)?;
    LISTINGS.changed();
    let size = st.st_size as u64 - OFFSET_BYTES;
    let mut pos = d.pos();
    let mut done = 0u64;
    let mut buf = vec![0u8; PIECE.min(size as usize)];
    while done < size {
        let want = buf.len().min((size - done) as usize);
        // SAFETY: buf is writable for `want` bytes.
        let n = unsafe {
            real::pread64(
                k,
                buf.as_mut_ptr().cast(),
                want,
                (OFFSET_BYTES + done) as i64,
            )
        };
        if n <= 0 {
            break;
        }
        let piece = &buf[..n as usize];
        let (at, w) = if d.status() & libc::O_APPEND != 0 {
            pr.call(f.append(piece))?
        } else {
            (*pos, pr.call(f.write_at(*pos, piece))?)
        };
        *pos = at + w as u64;
        done += n as u64;
    }
    // SAFETY: k is the description's own read-write descriptor.
    unsafe { real::ftruncate64(k, OFFSET_BYTES as i64) };
    Ok(())
}

/// [`drain`] for every description of the process (before `exec`).
pub(crate) fn drain_all() {
    if !FDS.owned() {
        return;
    }
    let mut seen: Vec<Arc<Desc>> = Vec::new();
    for (_, d) in FDS.entries() {
        if d.keeper().is_some() && !seen.iter().any(|s| Arc::ptr_eq(s, &d)) {
            let _ = drain(&d);
            seen.push(d);
        }
    }
}

/// The end of a description: what is left in its memfd goes to pvfs, and its keeper
/// is closed.
pub(crate) fn finish(d: &Desc) {
    if d.keeper().is_some() {
        let _ = drain(d);
    }
    if let Some(k) = d.take_keeper() {
        // SAFETY: the description's own descriptor, not used again.
        unsafe { real::close(k) };
    }
}

/// At exit: flushes every stdio stream (the program's last buffered output to a pvfs
/// standard stream goes through the kernel into its memfd; a stream of the library's
/// own writes to pvfs), then drains every description, on a thread of its own (exit
/// has destroyed this thread's thread-locals, a tokio runtime's among them).
pub(crate) extern "C" fn drain_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if FDS.entries().is_empty() {
            return;
        }
        let t = std::thread::Builder::new()
            .name("pvfs-exit".into())
            .spawn(|| {
                // SAFETY: fflush(NULL) flushes every stream, as exit itself will.
                unsafe { libc::fflush(std::ptr::null_mut()) };
                let _busy = Busy::enter();
                drain_all();
            });
        if let Ok(t) = t {
            let _ = t.join();
        }
    });
}

/// Whether description `d`, handed over across `exec`, gets a keeper in the new
/// image (its offset is in the memfd, and kernel writes collect there): a regular
/// file open for I/O.
pub(crate) fn wants_keeper(d: &Desc) -> bool {
    d.kind == Kind::File && !d.path_only()
}
