//! Checksums of datafile bytes (docs/storage-format.md, "Checksums"): every datafile
//! has a sidecar, `data/<hh>/<handle>.sum`, holding one [`Entry`] per
//! [`SUM_BLOCK`]-byte block of the datafile: the CRC32C of the block's bytes, padded
//! with zeros to the block's size, now (`cur`) and before its last change (`prev`).
//!
//! A block *holds* when its sum is `cur` or `prev`, or when it is all zeros and
//! `cur` is 0 (a hole: never written, punched, or past an end the datafile was cut
//! back to). Every change writes the sidecar first and the bytes after, under the
//! datafile's lock, so a process killed between the two leaves bytes that match
//! `prev`. A read checks every block it returns.
//!
//! Invariants, between any two changes of a datafile:
//! - every block below the datafile's end holds;
//! - the sidecar has no entry past the datafile's last block (a crash between a
//!   shortening and the sidecar's is mended when the sidecar is next opened,
//!   [`trim`]).
//!
//! A datafile without a sidecar was written by a store that kept no sums: it is
//! read unchecked.

use crc_fast::{CrcAlgorithm, Digest};
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

/// Bytes covered by one checksum.
pub const SUM_BLOCK: u64 = 4096;

/// Bytes of one sidecar entry.
const ENTRY: u64 = 8;

/// The name suffix of a sidecar next to its datafile.
pub const SUM_SUFFIX: &str = ".sum";

/// Zeros, to pad a block's last bytes.
static ZEROS: [u8; SUM_BLOCK as usize] = [0; SUM_BLOCK as usize];

/// One block's sums: now, and before its last change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// The sum of the block's bytes (0 with zero bytes: a hole).
    pub cur: u32,
    /// The sum before the last change (so a change cut short between sidecar and
    /// bytes still holds).
    pub prev: u32,
}

impl Entry {
    /// The entry after the block's bytes change to ones summing to `sum`.
    pub fn after(self, sum: u32) -> Entry {
        // The bytes before were a hole (zeros) when `cur` is 0.
        let prev = if self.cur == 0 { zero_sum() } else { self.cur };
        Entry { cur: sum, prev }
    }

    /// The entry after the block becomes a hole (punched, zeroed).
    pub fn hole(self) -> Entry {
        Entry {
            cur: 0,
            prev: self.cur,
        }
    }

    /// Whether `block` (the block's bytes up to the datafile's end) holds.
    pub fn holds(self, block: &[u8]) -> bool {
        let sum = block_sum(block);
        sum == self.cur || sum == self.prev || (self.cur == 0 && all_zero(block))
    }

    fn decode(b: &[u8]) -> Entry {
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Entry {
            cur: word(0),
            prev: word(4),
        }
    }

    fn encode(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.cur.to_le_bytes());
        out.extend_from_slice(&self.prev.to_le_bytes());
    }
}

/// The sum of a block of zeros.
fn zero_sum() -> u32 {
    block_sum(&[])
}

fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// CRC32C of `bytes` (at most a block) padded with zeros to [`SUM_BLOCK`]
/// (`crc-fast`: about twice as fast as the `crc32c` crate on 4 KiB blocks here).
pub fn block_sum(bytes: &[u8]) -> u32 {
    debug_assert!(bytes.len() as u64 <= SUM_BLOCK);
    let pad = (SUM_BLOCK as usize).saturating_sub(bytes.len());
    if pad == 0 {
        return crc(bytes);
    }
    let mut d = Digest::new(CrcAlgorithm::Crc32Iscsi);
    d.update(bytes);
    d.update(&ZEROS[..pad]);
    d.finalize() as u32
}

/// CRC32C of `bytes`.
fn crc(bytes: &[u8]) -> u32 {
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// The blocks `first ..= last` that bytes `off .. off + len` touch (`len > 0`).
pub fn blocks(off: u64, len: u64) -> (u64, u64) {
    debug_assert!(len > 0);
    (off / SUM_BLOCK, (off + len - 1) / SUM_BLOCK)
}

/// How many blocks a datafile of `size` bytes has.
pub fn block_count(size: u64) -> u64 {
    size.div_ceil(SUM_BLOCK)
}

/// `pread` of all of `buf` at `off` (short only at the end of the file), or with
/// `nowait` only from the page cache: None when some of it is not there.
pub fn pread_full(
    f: &File,
    buf: &mut [u8],
    off: u64,
    nowait: bool,
) -> std::io::Result<Option<usize>> {
    let mut n = 0;
    while n < buf.len() {
        let at = off + n as u64;
        let got = if nowait {
            let pos = libc::off_t::try_from(at)
                .map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
            let dst = &mut buf[n..];
            let iov = libc::iovec {
                iov_base: dst.as_mut_ptr().cast::<libc::c_void>(),
                iov_len: dst.len(),
            };
            // SAFETY: the iovec points into `buf` for its length, and the descriptor
            // stays open while `f` is borrowed.
            let r = unsafe { libc::preadv2(f.as_raw_fd(), &iov, 1, pos, libc::RWF_NOWAIT) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN | libc::EOPNOTSUPP | libc::EINVAL) => Ok(None),
                    Some(libc::EINTR) => continue,
                    _ => Err(e),
                };
            }
            r as usize
        } else {
            match f.read_at(&mut buf[n..], at) {
                Ok(k) => k,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        if got == 0 {
            // The end of the file (bytes not cached fail with EAGAIN instead).
            break;
        }
        n += got;
    }
    Ok(Some(n))
}

/// The entries of blocks `first .. first + n` (zero past the sidecar's end); None
/// when `nowait` and they are not all in the page cache.
pub fn read_entries(
    s: &File,
    first: u64,
    n: u64,
    nowait: bool,
) -> std::io::Result<Option<Vec<Entry>>> {
    let mut raw = vec![0u8; (n * ENTRY) as usize];
    let Some(got) = pread_full(s, &mut raw, first * ENTRY, nowait)? else {
        return Ok(None);
    };
    raw[got..].fill(0);
    Ok(Some(
        raw.chunks_exact(ENTRY as usize)
            .map(Entry::decode)
            .collect(),
    ))
}

/// Writes the entries of blocks `first ..`.
pub fn write_entries(s: &File, first: u64, entries: &[Entry]) -> std::io::Result<()> {
    let mut raw = Vec::with_capacity(entries.len() * ENTRY as usize);
    for e in entries {
        e.encode(&mut raw);
    }
    s.write_all_at(&raw, first * ENTRY)
}

/// Drops the entries past the last block of a datafile of `size` bytes (mends a
/// crash between a datafile's shortening and its sidecar's).
pub fn trim(s: &File, size: u64) -> std::io::Result<()> {
    let keep = block_count(size) * ENTRY;
    if s.metadata()?.len() > keep {
        s.set_len(keep)?;
    }
    Ok(())
}

/// Reads the whole blocks covering `off .. off + buf.len()` of datafile `f` and
/// checks each one that holds a byte of `buf` against sidecar `s`; copies the bytes
/// into `buf`. The bytes read (short at the end of the datafile), None when
/// `nowait` and not all of it is in the page cache, or the offset of the first block
/// that does not hold.
pub fn read_checked(
    f: &File,
    s: &File,
    off: u64,
    buf: &mut [u8],
    nowait: bool,
) -> std::io::Result<Option<Result<usize, u64>>> {
    if buf.is_empty() {
        return Ok(Some(Ok(0)));
    }
    let len = buf.len() as u64;
    let (first, last) = blocks(off, len);
    let start = first * SUM_BLOCK;
    let span = (last + 1 - first) * SUM_BLOCK;
    let aligned = off == start && len == span;
    let mut spare = Vec::new();
    if !aligned {
        spare = vec![0u8; span as usize];
    }
    let got = {
        let whole: &mut [u8] = if aligned { &mut *buf } else { &mut spare };
        let Some(n) = pread_full(f, whole, start, nowait)? else {
            return Ok(None);
        };
        let blocks_read = (n as u64).div_ceil(SUM_BLOCK);
        if blocks_read > 0 {
            let Some(entries) = read_entries(s, first, blocks_read, nowait)? else {
                return Ok(None);
            };
            for (i, e) in entries.iter().enumerate() {
                let lo = i * SUM_BLOCK as usize;
                let hi = (lo + SUM_BLOCK as usize).min(n);
                if !e.holds(&whole[lo..hi]) {
                    return Ok(Some(Err(start + lo as u64)));
                }
            }
        }
        n.saturating_sub((off - start) as usize).min(len as usize)
    };
    if !aligned {
        let skip = (off - start) as usize;
        buf[..got].copy_from_slice(&spare[skip..skip + got]);
    }
    Ok(Some(Ok(got)))
}

/// Checks the blocks holding bytes `off .. off + len` of datafile `f`, whose size
/// is `size`, against sidecar `s`, reading them where they lie in the page cache
/// (mapped, not copied); the offset of the first block that does not hold. The
/// caller holds the datafile's lock, so nothing cuts the file under the mapping.
pub fn check_mapped(
    f: &File,
    s: &File,
    off: u64,
    len: u64,
    size: u64,
) -> std::io::Result<Option<u64>> {
    let end = off.saturating_add(len).min(size);
    if len == 0 || off >= end {
        return Ok(None);
    }
    let (first, last) = blocks(off, end - off);
    let start = first * SUM_BLOCK;
    let span = usize::try_from(((last + 1) * SUM_BLOCK).min(size) - start)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
    let at =
        libc::off_t::try_from(start).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
    let entries = read_entries(s, first, last + 1 - first, false)?.unwrap_or_default();
    // SAFETY: a fresh read-only shared mapping of `span` bytes of an open file, all
    // below its size, which nobody can shorten while the caller holds the lock.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            f.as_raw_fd(),
            at,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the mapping is `span` readable bytes until the munmap below.
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), span) };
    let bad = entries.iter().enumerate().find_map(|(i, e)| {
        let lo = i * SUM_BLOCK as usize;
        let hi = (lo + SUM_BLOCK as usize).min(span);
        (!e.holds(&bytes[lo..hi])).then_some(start + lo as u64)
    });
    // SAFETY: the mapping made above, no longer borrowed.
    unsafe { libc::munmap(p, span) };
    Ok(bad)
}

/// The new entries of the blocks that writing `bufs` (concatenated) at `off` of
/// datafile `f` changes, from `first` on: whole blocks are summed from the new
/// bytes, the partial ones at either end from the datafile's bytes with the new ones
/// laid over them.
pub fn sums_of_write(
    f: &File,
    s: &File,
    off: u64,
    bufs: &[&[u8]],
) -> std::io::Result<(u64, Vec<Entry>)> {
    let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
    let (first, last) = blocks(off, len);
    let old = read_entries(s, first, last + 1 - first, false)?.unwrap_or_default();
    let mut out = Vec::with_capacity(old.len());
    let mut cursor = Gather::new(bufs);
    let end = off + len;
    let mut block = vec![0u8; SUM_BLOCK as usize];
    for (i, e) in old.iter().enumerate() {
        let b = first + i as u64;
        let (lo, hi) = (b * SUM_BLOCK, (b + 1) * SUM_BLOCK);
        let sum = if off <= lo && hi <= end {
            cursor.sum(SUM_BLOCK as usize)
        } else {
            // A block the write covers in part: its other bytes are the datafile's.
            let n = pread_full(f, &mut block, lo, false)?.unwrap_or(0);
            block[n..].fill(0);
            let from = off.max(lo);
            let to = end.min(hi);
            cursor.copy_to(&mut block[(from - lo) as usize..(to - lo) as usize]);
            block_sum(&block)
        };
        out.push(e.after(sum));
    }
    Ok((first, out))
}

/// Blocks whose entries [`zero_sums`] reads and writes at a time (512 KiB of
/// entries: a punch of a terabyte takes no more memory than that).
const ZEROING_STEP: u64 = 64 << 10;

/// Writes the entries the blocks holding bytes `off .. off + len` (clipped to the
/// datafile's `size`) of datafile `f` take once those bytes become zeros (punched
/// or zeroed), a bounded step of blocks at a time, before the bytes change.
pub fn zero_sums(f: &File, s: &File, off: u64, len: u64, size: u64) -> std::io::Result<()> {
    let end = off.saturating_add(len).min(size);
    if off >= end {
        return Ok(());
    }
    let (first, last) = blocks(off, end - off);
    let mut block = vec![0u8; SUM_BLOCK as usize];
    let mut at = first;
    while at <= last {
        let n = ZEROING_STEP.min(last + 1 - at);
        let old = read_entries(s, at, n, false)?.unwrap_or_default();
        let mut out = Vec::with_capacity(old.len());
        for (i, e) in old.iter().enumerate() {
            let b = at + i as u64;
            let (lo, hi) = (b * SUM_BLOCK, (b + 1) * SUM_BLOCK);
            if off <= lo && hi.min(size) <= end {
                out.push(e.hole());
                continue;
            }
            let got = pread_full(f, &mut block, lo, false)?.unwrap_or(0);
            block[got..].fill(0);
            let from = off.max(lo);
            let to = end.min(hi);
            block[(from - lo) as usize..(to - lo) as usize].fill(0);
            out.push(e.after(block_sum(&block)));
        }
        // Only the entries that change are written (holes that stay holes are not:
        // a sparse sidecar stays so).
        let changed = |i: &usize| out[*i] != old[*i];
        if let (Some(lo), Some(hi)) = ((0..out.len()).find(changed), (0..out.len()).rfind(changed))
        {
            write_entries(s, at + lo as u64, &out[lo..=hi])?;
        }
        at += n;
    }
    Ok(())
}

/// The entry of the block holding byte `size - 1` once datafile `f` is cut back
/// to `size` bytes (its bytes past `size` become the padding); None when `size`
/// ends a block (nothing to change but dropped entries).
pub fn sum_of_cut(f: &File, s: &File, size: u64) -> std::io::Result<Option<(u64, Entry)>> {
    let keep = (size % SUM_BLOCK) as usize;
    if keep == 0 {
        return Ok(None);
    }
    let b = size / SUM_BLOCK;
    let mut block = vec![0u8; keep];
    let n = pread_full(f, &mut block, b * SUM_BLOCK, false)?.unwrap_or(0);
    block[n..].fill(0);
    let old = read_entries(s, b, 1, false)?.unwrap_or_default();
    let e = old.first().copied().unwrap_or_default();
    Ok(Some((b, e.after(block_sum(&block)))))
}

/// The entry of block `b` summed again from datafile `f`'s bytes as they are.
pub fn sum_again(f: &File, s: &File, b: u64) -> std::io::Result<Entry> {
    let mut block = vec![0u8; SUM_BLOCK as usize];
    let n = pread_full(f, &mut block, b * SUM_BLOCK, false)?.unwrap_or(0);
    let old = read_entries(s, b, 1, false)?.unwrap_or_default();
    let e = old.first().copied().unwrap_or_default();
    Ok(e.after(block_sum(&block[..n])))
}

/// A cursor over the concatenation of several buffers.
struct Gather<'a> {
    bufs: &'a [&'a [u8]],
    idx: usize,
    at: usize,
}

impl<'a> Gather<'a> {
    fn new(bufs: &'a [&'a [u8]]) -> Gather<'a> {
        Gather {
            bufs,
            idx: 0,
            at: 0,
        }
    }

    /// The next `n` bytes, a piece at a time.
    fn take(&mut self, mut n: usize, mut each: impl FnMut(&[u8])) {
        while n > 0 && self.idx < self.bufs.len() {
            let b = &self.bufs[self.idx][self.at..];
            let k = b.len().min(n);
            each(&b[..k]);
            n -= k;
            self.at += k;
            if self.at == self.bufs[self.idx].len() {
                self.idx += 1;
                self.at = 0;
            }
        }
    }

    /// CRC32C of the next `n` bytes.
    fn sum(&mut self, n: usize) -> u32 {
        let mut d = Digest::new(CrcAlgorithm::Crc32Iscsi);
        self.take(n, |p| d.update(p));
        d.finalize() as u32
    }

    /// Copies the next `dst.len()` bytes into `dst`.
    fn copy_to(&mut self, dst: &mut [u8]) {
        let mut at = 0;
        self.take(dst.len(), |p| {
            dst[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sums are CRC32C (Castagnoli), as the format says: `crc-fast` agrees
    /// with the `crc32c` crate, whole, padded and gathered.
    #[test]
    fn block_sums_are_crc32c_of_the_padded_block() {
        let bytes: Vec<u8> = (0..SUM_BLOCK as usize)
            .map(|i| (i * 7 % 253) as u8)
            .collect();
        assert_eq!(block_sum(&bytes), crc32c::crc32c(&bytes));
        let mut padded = bytes[..1000].to_vec();
        padded.resize(SUM_BLOCK as usize, 0);
        assert_eq!(block_sum(&bytes[..1000]), crc32c::crc32c(&padded));
        assert_eq!(zero_sum(), crc32c::crc32c(&ZEROS));
        let parts: [&[u8]; 3] = [&bytes[..10], &bytes[10..3000], &bytes[3000..]];
        assert_eq!(
            Gather::new(&parts).sum(SUM_BLOCK as usize),
            crc32c::crc32c(&bytes)
        );
    }
}
