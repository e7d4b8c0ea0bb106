//! Region descriptions: which logical bytes of a file one I/O call touches.
//!
//! One request carries one description, whatever its size: a contiguous range, a
//! strided partition (offset/gsize/stride, as in the PVFS paper, Carns et al., 2000),
//! or an explicit list (readx and writex, list I/O). The data travels in "stream
//! order": extent by extent, each in increasing offset.

use crate::codec::{DecodeError, Reader, Wire};
use crate::wire_struct;
use crate::Errno;

/// Largest logical file size (offsets must fit an `off_t`): no region reaches past
/// it, and no file grows past it.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// A contiguous range of logical bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    /// First byte.
    pub offset: u64,
    /// Number of bytes.
    pub len: u64,
}
wire_struct!(Extent {
    offset: u64,
    len: u64
});

/// The logical bytes of one I/O call, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Regions {
    /// One contiguous range.
    Contig(Extent),
    /// Bytes `start .. start + len` of a partition (the PVFS paper's offset, gsize,
    /// stride; Carns et al., 2000): the partition is the file seen through blocks of
    /// `block` bytes, the first at `offset`, each `stride` after the previous. `start`
    /// and `len` need not be multiples of `block`.
    Strided {
        /// Offset of the partition's first block.
        offset: u64,
        /// Bytes per block (gsize).
        block: u64,
        /// Distance between block starts (>= block).
        stride: u64,
        /// First partition byte described.
        start: u64,
        /// Number of partition bytes described.
        len: u64,
    },
    /// An explicit list, in the order the data travels.
    List(Vec<Extent>),
}

impl Regions {
    /// One contiguous range.
    pub fn contig(offset: u64, len: u64) -> Regions {
        Regions::Contig(Extent { offset, len })
    }

    /// Iterates the extents in stream order.
    pub fn extents(&self) -> Extents<'_> {
        Extents {
            regions: self,
            next: 0,
        }
    }

    /// Total number of bytes described.
    pub fn total_len(&self) -> u64 {
        match self {
            Regions::Contig(e) => e.len,
            Regions::Strided { len, .. } => *len,
            Regions::List(v) => v.iter().map(|e| e.len).fold(0u64, u64::saturating_add),
        }
    }

    /// One past the highest byte described (0 when empty).
    pub fn end(&self) -> u64 {
        self.extents()
            .filter(|e| e.len > 0)
            .map(|e| e.offset + e.len)
            .max()
            .unwrap_or(0)
    }

    /// At least how many pieces (runs within one stripe unit) the regions cut into
    /// over stripe units of `unit` bytes, counted without walking them (a bound
    /// from above: what walking them costs at most).
    pub fn piece_bound(&self, unit: u64) -> u64 {
        let unit = unit.max(1);
        // A run of `len` bytes touches at most len / unit + 2 units.
        let run = |len: u64| len / unit + 2;
        match self {
            Regions::Contig(e) => run(e.len),
            Regions::Strided { block, len, .. } => {
                let blocks = len / (*block).max(1) + 2;
                blocks.saturating_mul(run(*block).min(run(*len)))
            }
            Regions::List(v) => v.iter().map(|e| run(e.len)).fold(0u64, u64::saturating_add),
        }
    }

    /// [`Regions::validate`], and that the regions cut into at most
    /// [`MAX_PIECES`] pieces over stripe units of `unit` bytes (E2BIG otherwise): what
    /// a server accepts, so that no request makes it walk more pieces than that.
    pub fn validate_for(&self, unit: u64) -> Result<(), Errno> {
        self.validate()?;
        if self.piece_bound(unit) > MAX_PIECES {
            return Err(Errno::E2BIG);
        }
        Ok(())
    }

    /// Checks that every byte is below [`MAX_FILE_SIZE`] and strides are sane.
    pub fn validate(&self) -> Result<(), Errno> {
        let in_range = |e: &Extent| {
            e.offset
                .checked_add(e.len)
                .is_some_and(|end| end <= MAX_FILE_SIZE)
        };
        match self {
            Regions::Contig(e) => {
                if !in_range(e) {
                    return Err(Errno::EFBIG);
                }
            }
            Regions::Strided {
                offset,
                block,
                stride,
                start,
                len,
            } => {
                if *block == 0 || *stride < *block {
                    return Err(Errno::EINVAL);
                }
                if *len > 0 {
                    let last = start.checked_add(len - 1).ok_or(Errno::EFBIG)?;
                    let at = (last / block)
                        .checked_mul(*stride)
                        .and_then(|d| d.checked_add(*offset))
                        .and_then(|d| d.checked_add(last % block))
                        .ok_or(Errno::EFBIG)?;
                    if at >= MAX_FILE_SIZE {
                        return Err(Errno::EFBIG);
                    }
                }
            }
            Regions::List(v) => {
                if !v.iter().all(in_range) {
                    return Err(Errno::EFBIG);
                }
            }
        }
        if self.total_len() > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        Ok(())
    }
}

/// Most pieces one request may cut into (16 Mi: walking them costs a server well
/// under a second; a 4 GiB request over the smallest stripe unit, 512 bytes, is 8 Mi).
pub const MAX_PIECES: u64 = 1 << 24;

/// Iterator over the extents of a [`Regions`].
pub struct Extents<'a> {
    regions: &'a Regions,
    /// Index of the next list entry, or partition bytes already produced.
    next: u64,
}

impl Iterator for Extents<'_> {
    type Item = Extent;

    fn next(&mut self) -> Option<Extent> {
        match self.regions {
            Regions::Contig(e) => {
                let first = self.next == 0;
                self.next = 1;
                first.then_some(*e)
            }
            Regions::Strided {
                offset,
                block,
                stride,
                start,
                len,
            } => {
                if self.next >= *len {
                    return None;
                }
                let p = start + self.next;
                let within = p % block;
                let n = (block - within).min(len - self.next);
                self.next += n;
                Some(Extent {
                    offset: offset + (p / block) * stride + within,
                    len: n,
                })
            }
            Regions::List(v) => {
                let e = v.get(self.next as usize).copied();
                self.next += 1;
                e
            }
        }
    }
}

impl Wire for Regions {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            Regions::Contig(e) => {
                out.push(1);
                e.put(out);
            }
            Regions::Strided {
                offset,
                block,
                stride,
                start,
                len,
            } => {
                out.push(2);
                offset.put(out);
                block.put(out);
                stride.put(out);
                start.put(out);
                len.put(out);
            }
            Regions::List(v) => {
                out.push(3);
                v.put(out);
            }
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let regions = match u8::get(r)? {
            1 => Regions::Contig(Extent::get(r)?),
            2 => Regions::Strided {
                offset: Wire::get(r)?,
                block: Wire::get(r)?,
                stride: Wire::get(r)?,
                start: Wire::get(r)?,
                len: Wire::get(r)?,
            },
            3 => Regions::List(Wire::get(r)?),
            t => {
                return Err(DecodeError::UnknownTag {
                    what: "regions",
                    tag: u32::from(t),
                })
            }
        };
        regions.validate().map_err(|e| DecodeError::Invalid {
            what: "regions",
            why: e.describe().to_string(),
        })?;
        Ok(regions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_extents_and_validation() {
        let r = Regions::Strided {
            offset: 10,
            block: 4,
            stride: 16,
            start: 0,
            len: 12,
        };
        let v: Vec<_> = r.extents().map(|e| (e.offset, e.len)).collect();
        assert_eq!(v, vec![(10, 4), (26, 4), (42, 4)]);
        assert_eq!(r.total_len(), 12);
        assert_eq!(r.end(), 46);
        assert!(r.validate().is_ok());
        // A window that starts and ends inside blocks.
        let w = Regions::Strided {
            offset: 10,
            block: 4,
            stride: 16,
            start: 3,
            len: 6,
        };
        let v: Vec<_> = w.extents().map(|e| (e.offset, e.len)).collect();
        assert_eq!(v, vec![(13, 1), (26, 4), (42, 1)]);
        let overflow = Regions::Strided {
            offset: 1,
            block: 8,
            stride: u64::MAX / 2,
            start: 0,
            len: 24,
        };
        assert_eq!(overflow.validate(), Err(Errno::EFBIG));
        let bad = Regions::Strided {
            offset: 0,
            block: 8,
            stride: 4,
            start: 0,
            len: 24,
        };
        assert_eq!(bad.validate(), Err(Errno::EINVAL));
        assert_eq!(Regions::contig(u64::MAX, 2).validate(), Err(Errno::EFBIG));
    }
}
