//! File layouts and the stripe arithmetic that maps logical file bytes to datafiles.
//!
//! A file with stripe size `S` over `C` datafiles stores logical byte `x` in stripe
//! unit `u = x / S`, on datafile `u % C`, at local offset `(u / C) * S + x % S`
//! (round-robin, PVFS's base/pcount/ssize). Both the client (to plan a request) and
//! the data server (to intersect a request with what it holds) use this module, so
//! they always agree on which byte goes where.

use crate::codec::{DecodeError, Reader, Wire};
use crate::regions::{Extent, Regions};
use crate::types::Handle;
use crate::wire_struct;
use crate::Errno;

/// Version of the stored and wire layout format (1: without `width`, read as every
/// datafile; 2: with it; 3: with the servers of every datafile's other copies, written
/// only for layouts with more than one copy, so one-copy layouts stay version 2).
pub const LAYOUT_VERSION: u8 = 3;
/// Smallest stripe size accepted for a file.
pub const MIN_STRIPE_SIZE: u64 = 512;
/// Largest stripe size accepted for a file.
pub const MAX_STRIPE_SIZE: u64 = 1 << 30;
/// Largest logical file size (defined with the region arithmetic, which checks it).
pub use crate::regions::MAX_FILE_SIZE;
/// Most datafiles one file may have.
pub const MAX_STRIPE_COUNT: u32 = 4096;
/// Most copies of a stripe unit (`Layout::replicas`).
pub const MAX_REPLICAS: u32 = 3;
/// An unused slot of [`Datafile::copies`].
pub const NO_SERVER: u32 = u32::MAX;

/// One datafile of a file: which data servers hold it and under which handle (the
/// same handle on every copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Datafile {
    /// Index of the server in the configuration's server list: the first copy.
    pub server: u32,
    /// The datafile's handle on that server (and on the other copies' servers).
    pub handle: Handle,
    /// The servers of the other copies, in chain order after `server`: the first
    /// `Layout::replicas - 1` slots; the rest are [`NO_SERVER`].
    pub copies: [u32; MAX_REPLICAS as usize - 1],
}

impl Datafile {
    /// A datafile with one copy.
    pub const fn single(server: u32, handle: Handle) -> Datafile {
        Datafile {
            server,
            handle,
            copies: [NO_SERVER; MAX_REPLICAS as usize - 1],
        }
    }

    /// The servers holding a copy, in chain order (`server` first).
    pub fn replicas(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.server)
            .chain(self.copies.iter().copied().take_while(|&s| s != NO_SERVER))
    }
}

/// The first two fields of a datafile, as every layout version writes them; the
/// copies follow all datafiles in version 3.
impl Wire for Datafile {
    const MIN_SIZE: usize = 4 + 8;
    fn put(&self, out: &mut Vec<u8>) {
        self.server.put(out);
        self.handle.put(out);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Datafile::single(Wire::get(r)?, Wire::get(r)?))
    }
}

/// Where a regular file's bytes live. The stripe geometry and the datafiles are
/// fixed when the file is created; `width` only grows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per stripe unit.
    pub stripe_size: u64,
    /// Copies of each stripe unit (1 ..= [`MAX_REPLICAS`]); each datafile lists the
    /// servers of the others.
    pub replicas: u32,
    /// The datafiles in round-robin order; stripe unit `u` is on `datafiles[u % len]`.
    pub datafiles: Vec<Datafile>,
    /// How many leading datafiles may hold bytes (1 ..= `datafiles.len()`); the
    /// others are empty. A file starts 1 wide and is widened at its metadata server
    /// before any byte lands past it, so a size asks only `width` data servers and a
    /// small file needs only its first. The stripe arithmetic ignores it: widening
    /// moves no byte. A width held since an earlier answer is a lower bound.
    pub width: u32,
}

impl Wire for Layout {
    const MIN_SIZE: usize = 1 + 8 + 4 + 4;
    fn put(&self, out: &mut Vec<u8>) {
        // One copy: version 2, which readers of every earlier build understand.
        let version = if self.replicas > 1 { LAYOUT_VERSION } else { 2 };
        version.put(out);
        self.stripe_size.put(out);
        self.replicas.put(out);
        self.datafiles.put(out);
        self.width.put(out);
        if version == 3 {
            let more = self.replicas.saturating_sub(1) as usize;
            let copies: Vec<u32> = self
                .datafiles
                .iter()
                .flat_map(|d| d.copies.iter().copied().take(more))
                .collect();
            copies.put(out);
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let version = u8::get(r)?;
        if !(1..=LAYOUT_VERSION).contains(&version) {
            return Err(DecodeError::UnknownTag {
                what: "layout version",
                tag: u32::from(version),
            });
        }
        let stripe_size = Wire::get(r)?;
        let replicas: u32 = Wire::get(r)?;
        let mut datafiles: Vec<Datafile> = Wire::get(r)?;
        // Version 1 had no width: every datafile may hold bytes.
        let width = if version == 1 {
            datafiles.len().min(MAX_STRIPE_COUNT as usize) as u32
        } else {
            Wire::get(r)?
        };
        let invalid = |why: &str| DecodeError::Invalid {
            what: "layout",
            why: why.to_string(),
        };
        if version == 3 {
            let copies: Vec<u32> = Wire::get(r)?;
            let more = replicas.saturating_sub(1) as usize;
            if !(1..MAX_REPLICAS as usize).contains(&more) || copies.len() != more * datafiles.len()
            {
                return Err(invalid("copies do not match the replica count"));
            }
            for (d, servers) in datafiles.iter_mut().zip(copies.chunks(more)) {
                d.copies[..more].copy_from_slice(servers);
            }
        } else if replicas != 1 {
            return Err(invalid("a version 1 or 2 layout has one copy"));
        }
        let layout = Layout {
            stripe_size,
            replicas,
            datafiles,
            width,
        };
        layout.validate().map_err(|e| DecodeError::Invalid {
            what: "layout",
            why: e.describe().to_string(),
        })?;
        Ok(layout)
    }
}

impl Layout {
    /// The stripe geometry of this layout.
    pub fn stripe(&self) -> Stripe {
        Stripe {
            size: self.stripe_size,
            count: self.datafiles.len() as u64,
        }
    }

    /// The datafiles that may hold bytes (the first `width`): the only ones a size
    /// must ask.
    pub fn sized(&self) -> std::ops::Range<usize> {
        0..(self.width as usize).min(self.datafiles.len())
    }

    /// The width a file needs for bytes up to `end` (exclusive): every datafile
    /// holding a stripe unit before it, at least 1.
    pub fn width_for(&self, end: u64) -> u32 {
        let units = end.div_ceil(self.stripe_size).max(1);
        units.min(self.datafiles.len() as u64) as u32
    }

    /// Checks the invariants every stored layout satisfies.
    pub fn validate(&self) -> Result<(), Errno> {
        check_stripe_size(self.stripe_size)?;
        if self.datafiles.is_empty() || self.datafiles.len() > MAX_STRIPE_COUNT as usize {
            return Err(Errno::EINVAL);
        }
        if self.width == 0 || self.width as usize > self.datafiles.len() {
            return Err(Errno::EINVAL);
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(Errno::EINVAL);
        }
        let more = self.replicas as usize - 1;
        for d in &self.datafiles {
            let (used, unused) = d.copies.split_at(more);
            // Every copy on a server of its own, the unused slots empty.
            let distinct = used
                .iter()
                .enumerate()
                .all(|(i, &s)| s != NO_SERVER && s != d.server && !used[..i].contains(&s));
            if !distinct || unused.iter().any(|&s| s != NO_SERVER) {
                return Err(Errno::EINVAL);
            }
        }
        Ok(())
    }
}

/// Checks a requested stripe size.
pub fn check_stripe_size(size: u64) -> Result<(), Errno> {
    if (MIN_STRIPE_SIZE..=MAX_STRIPE_SIZE).contains(&size) {
        Ok(())
    } else {
        Err(Errno::EINVAL)
    }
}

/// A layout request: what a user or a directory default asks for; unset fields fall
/// back to the next level (parent directory, then the file-system defaults).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayoutSpec {
    /// Bytes per stripe unit.
    pub stripe_size: Option<u64>,
    /// Number of datafiles (data servers) to stripe over.
    pub stripe_count: Option<u32>,
    /// Index (among the data servers) of the first datafile's server.
    pub base: Option<u32>,
    /// Copies of each stripe unit (1 ..= [`MAX_REPLICAS`]).
    pub replicas: Option<u32>,
}
wire_struct!(LayoutSpec {
    stripe_size: Option<u64>,
    stripe_count: Option<u32>,
    base: Option<u32>,
    replicas: Option<u32>,
});

impl LayoutSpec {
    /// Fields of `self` where set, else those of `fallback`.
    pub fn or(self, fallback: LayoutSpec) -> LayoutSpec {
        LayoutSpec {
            stripe_size: self.stripe_size.or(fallback.stripe_size),
            stripe_count: self.stripe_count.or(fallback.stripe_count),
            base: self.base.or(fallback.base),
            replicas: self.replicas.or(fallback.replicas),
        }
    }

    /// A spec as stores written before a spec could name copies hold it (three
    /// fields, no replica count).
    pub fn get_without_replicas(r: &mut Reader<'_>) -> Result<LayoutSpec, DecodeError> {
        Ok(LayoutSpec {
            stripe_size: Wire::get(r)?,
            stripe_count: Wire::get(r)?,
            base: Wire::get(r)?,
            replicas: None,
        })
    }
}

/// Stripe geometry: unit size and number of datafiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stripe {
    /// Bytes per stripe unit (> 0).
    pub size: u64,
    /// Number of datafiles (> 0).
    pub count: u64,
}
wire_struct!(Stripe {
    size: u64,
    count: u64
});

impl Stripe {
    /// Which datafile holds logical byte `off`, and at which local offset.
    pub fn locate(&self, off: u64) -> (u64, u64) {
        let unit = off / self.size;
        (
            unit % self.count,
            (unit / self.count) * self.size + off % self.size,
        )
    }

    /// The logical offset of local byte `local` of datafile `idx`.
    pub fn logical(&self, idx: u64, local: u64) -> u64 {
        let round = local / self.size;
        (round * self.count + idx) * self.size + local % self.size
    }

    /// How many bytes of a file of `file_size` bytes datafile `idx` holds.
    pub fn local_size(&self, idx: u64, file_size: u64) -> u64 {
        let full = self.size * self.count;
        let rounds = file_size / full;
        let rem = file_size % full;
        let mine = rem.saturating_sub(idx * self.size).min(self.size);
        rounds * self.size + mine
    }

    /// The file size implied by datafile `idx` holding `local_size` bytes.
    pub fn logical_end(&self, idx: u64, local_size: u64) -> u64 {
        if local_size == 0 {
            0
        } else {
            self.logical(idx, local_size - 1) + 1
        }
    }

    /// The logical file size given every datafile's local size (in datafile order).
    pub fn file_size(&self, local_sizes: &[u64]) -> u64 {
        local_sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| self.logical_end(i as u64, s))
            .max()
            .unwrap_or(0)
    }

    /// Iterates the pieces of `regions` held by datafile `idx`, in stream order.
    pub fn pieces<'a>(&self, idx: u64, regions: &'a Regions) -> Pieces<'a> {
        assert!(idx < self.count, "datafile index out of range");
        Pieces {
            stripe: *self,
            idx,
            extents: regions.extents(),
            cur: None,
            pos: 0,
        }
    }

    /// Total bytes of `regions` held by datafile `idx`.
    pub fn bytes_on(&self, idx: u64, regions: &Regions) -> u64 {
        self.pieces(idx, regions).map(|p| p.len).sum()
    }
}

/// One contiguous run of bytes of a request that lives on one datafile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Position in the request's byte stream (the caller's buffer offset).
    pub pos: u64,
    /// Offset in the logical file.
    pub logical: u64,
    /// Offset in the datafile.
    pub local: u64,
    /// Length in bytes (> 0).
    pub len: u64,
}

/// Iterator over the pieces of a region list on one datafile (see [`Stripe::pieces`]).
pub struct Pieces<'a> {
    stripe: Stripe,
    idx: u64,
    extents: crate::regions::Extents<'a>,
    /// The extent being cut: (next unit of this datafile to visit, extent start,
    /// extent end, stream position of the extent start).
    cur: Option<(u64, u64, u64, u64)>,
    /// Stream position of the next extent.
    pos: u64,
}

impl Iterator for Pieces<'_> {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        let s = self.stripe.size;
        let c = self.stripe.count;
        loop {
            if let Some((unit, start, end, base)) = self.cur {
                // `unit` is a unit of this datafile at or after `start`'s unit.
                let unit_start = unit.checked_mul(s)?;
                if unit_start >= end {
                    self.cur = None;
                    continue;
                }
                let lo = start.max(unit_start);
                let hi = end.min(unit_start.saturating_add(s));
                self.cur = Some((unit + c, start, end, base));
                return Some(Piece {
                    pos: base + (lo - start),
                    logical: lo,
                    local: (unit / c) * s + (lo - unit_start),
                    len: hi - lo,
                });
            }
            let Extent { offset, len } = self.extents.next()?;
            if len == 0 {
                continue;
            }
            let first = offset / s;
            let unit = first + (self.idx + c - first % c) % c;
            self.cur = Some((unit, offset, offset + len, self.pos));
            self.pos += len;
        }
    }
}

/// Walks a sequence of pieces by byte count: the stream of a request is cut into
/// chunks of bytes, and each chunk maps to the pieces (or parts of pieces) it covers.
pub struct PieceCursor<I: Iterator<Item = Piece>> {
    pieces: I,
    cur: Option<Piece>,
}

impl<I: Iterator<Item = Piece>> PieceCursor<I> {
    /// Starts at the first byte of the first piece.
    pub fn new(pieces: I) -> Self {
        PieceCursor { pieces, cur: None }
    }

    /// Appends to `out` the pieces covering the next `n` bytes of the stream (fewer
    /// when the stream ends first) and returns how many bytes they cover.
    pub fn take(&mut self, n: u64, out: &mut Vec<Piece>) -> u64 {
        let mut got = 0;
        while got < n {
            let p = match self.cur.take().or_else(|| self.pieces.next()) {
                Some(p) => p,
                None => break,
            };
            let want = n - got;
            if p.len <= want {
                out.push(p);
                got += p.len;
            } else {
                out.push(Piece { len: want, ..p });
                self.cur = Some(Piece {
                    pos: p.pos + want,
                    logical: p.logical + want,
                    local: p.local + want,
                    len: p.len - want,
                });
                got += want;
            }
        }
        got
    }
}

/// Cuts pieces at a datafile's local size: what a data server can actually send for
/// a read (bytes past its end are holes or past the end of the file, which the
/// client resolves).
pub fn clip_pieces(
    pieces: impl Iterator<Item = Piece>,
    local_size: u64,
) -> impl Iterator<Item = Piece> {
    pieces
        .filter(move |p| p.local < local_size)
        .map(move |p| Piece {
            len: p.len.min(local_size - p.local),
            ..p
        })
}

/// Merges pieces that are adjacent on the datafile into runs of (local offset, length),
/// the unit of one positioned read or write on a data server.
pub fn local_runs(pieces: &[Piece]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for p in pieces {
        match runs.last_mut() {
            Some((off, len)) if *off + *len == p.local => *len += p.len,
            _ => runs.push((p.local, p.len)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn piece_bounds_cover_the_walk_and_refuse_byte_strides() {
        // The bound is never below what walking the pieces finds.
        let stripe = Stripe {
            size: 4096,
            count: 3,
        };
        let cases = [
            Regions::contig(100, 50_000),
            Regions::Strided {
                offset: 7,
                block: 1000,
                stride: 5000,
                start: 3,
                len: 40_000,
            },
            Regions::List(vec![
                Extent {
                    offset: 0,
                    len: 9000,
                },
                Extent {
                    offset: 20_000,
                    len: 1,
                },
            ]),
        ];
        for r in &cases {
            let walked: u64 = (0..3).map(|i| stripe.pieces(i, r).count() as u64).sum();
            assert!(r.piece_bound(4096) >= walked, "{r:?}: {walked}");
            assert!(r.validate_for(4096).is_ok());
        }
        // A terabyte in 1-byte blocks (what a hostile client sent): refused at once.
        let hostile = Regions::Strided {
            offset: 0,
            block: 1,
            stride: 2,
            start: 0,
            len: 1 << 40,
        };
        assert!(
            hostile.validate().is_ok(),
            "within the file size: only the bound refuses it"
        );
        assert_eq!(hostile.validate_for(4096), Err(Errno::E2BIG));
        assert_eq!(
            Regions::contig(0, 1 << 40).validate_for(512),
            Err(Errno::E2BIG)
        );
        assert!(Regions::contig(0, 1 << 32).validate_for(512).is_ok());
    }

    /// The naive model: walk every byte of the request in order.
    fn model(stripe: Stripe, regions: &Regions) -> Vec<Vec<(u64, u64, u64)>> {
        let mut per = vec![Vec::new(); stripe.count as usize];
        let mut pos = 0;
        for e in regions.extents() {
            for x in e.offset..e.offset + e.len {
                let unit = x / stripe.size;
                let idx = (unit % stripe.count) as usize;
                let local = (unit / stripe.count) * stripe.size + x % stripe.size;
                per[idx].push((pos, x, local));
                pos += 1;
            }
        }
        per
    }

    fn flatten(pieces: impl Iterator<Item = Piece>) -> Vec<(u64, u64, u64)> {
        pieces
            .flat_map(|p| (0..p.len).map(move |i| (p.pos + i, p.logical + i, p.local + i)))
            .collect()
    }

    fn regions_strategy() -> impl Strategy<Value = Regions> {
        prop_oneof![
            (0u64..2000, 0u64..3000)
                .prop_map(|(offset, len)| Regions::Contig(Extent { offset, len })),
            (0u64..500, 1u64..50, 0u64..50, 0u64..100, 0u64..600).prop_map(
                |(offset, block, gap, start, len)| {
                    Regions::Strided {
                        offset,
                        block,
                        stride: block + gap,
                        start,
                        len,
                    }
                }
            ),
            proptest::collection::vec((0u64..3000, 0u64..300), 0..12).prop_map(|v| {
                Regions::List(
                    v.into_iter()
                        .map(|(offset, len)| Extent { offset, len })
                        .collect(),
                )
            }),
        ]
    }

    proptest! {
        #[test]
        fn pieces_match_byte_model(size in 1u64..70, count in 1u64..7, regions in regions_strategy()) {
            let stripe = Stripe { size, count };
            let want = model(stripe, &regions);
            for idx in 0..count {
                let got = flatten(stripe.pieces(idx, &regions));
                prop_assert_eq!(&got, &want[idx as usize]);
                prop_assert_eq!(stripe.bytes_on(idx, &regions), want[idx as usize].len() as u64);
                for p in stripe.pieces(idx, &regions) {
                    prop_assert!(p.len > 0);
                    // A piece never crosses a stripe unit.
                    prop_assert_eq!(p.logical / size, (p.logical + p.len - 1) / size);
                }
            }
        }

        #[test]
        fn sizes_match_byte_model(size in 1u64..70, count in 1u64..7, file_size in 0u64..5000) {
            let stripe = Stripe { size, count };
            let mut local = vec![0u64; count as usize];
            for x in 0..file_size {
                let (idx, off) = stripe.locate(x);
                local[idx as usize] = local[idx as usize].max(off + 1);
            }
            for idx in 0..count {
                prop_assert_eq!(stripe.local_size(idx, file_size), local[idx as usize]);
            }
            prop_assert_eq!(stripe.file_size(&local), file_size);
        }

        #[test]
        fn locate_and_logical_are_inverse(size in 1u64..100, count in 1u64..9, off in 0u64..1_000_000) {
            let stripe = Stripe { size, count };
            let (idx, local) = stripe.locate(off);
            prop_assert_eq!(stripe.logical(idx, local), off);
        }
    }

    proptest! {
        #[test]
        fn cursor_chunks_cover_the_stream(size in 1u64..70, count in 1u64..5, regions in regions_strategy(), chunk in 1u64..200, local_size in 0u64..2000) {
            let stripe = Stripe { size, count };
            for idx in 0..count {
                let whole: Vec<Piece> = clip_pieces(stripe.pieces(idx, &regions), local_size).collect();
                let mut cursor = PieceCursor::new(clip_pieces(stripe.pieces(idx, &regions), local_size));
                let mut chunks = Vec::new();
                loop {
                    let mut out = Vec::new();
                    let n = cursor.take(chunk, &mut out);
                    prop_assert_eq!(n, out.iter().map(|p| p.len).sum::<u64>());
                    if n == 0 { break; }
                    chunks.extend(out);
                }
                prop_assert_eq!(flatten(chunks.into_iter()), flatten(whole.iter().copied()));
                for p in &whole {
                    prop_assert!(p.local + p.len <= local_size);
                }
                let runs = local_runs(&whole);
                prop_assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), whole.iter().map(|p| p.len).sum::<u64>());
            }
        }
    }

    #[test]
    fn layout_round_trip_and_validation() {
        let l = Layout {
            stripe_size: 65536,
            replicas: 1,
            datafiles: vec![Datafile::single(1, 7), Datafile::single(2, 9)],
            width: 1,
        };
        let bytes = crate::codec::encode(&l);
        assert_eq!(crate::codec::decode::<Layout>(&bytes).unwrap(), l);
        for width in [0, 3] {
            let bad = Layout { width, ..l.clone() };
            assert!(crate::codec::decode::<Layout>(&crate::codec::encode(&bad)).is_err());
        }
        // Version 1 (no width) is still read: every datafile may hold bytes.
        let mut v1 = bytes[..bytes.len() - 4].to_vec();
        v1[0] = 1;
        let old = crate::codec::decode::<Layout>(&v1).unwrap();
        assert_eq!(
            old,
            Layout {
                width: 2,
                ..l.clone()
            }
        );
        let bad = Layout {
            stripe_size: 3,
            ..l.clone()
        };
        assert!(crate::codec::decode::<Layout>(&crate::codec::encode(&bad)).is_err());
        let mut wrong_version = bytes.clone();
        wrong_version[0] = 9;
        assert!(crate::codec::decode::<Layout>(&wrong_version).is_err());
    }

    #[test]
    fn replicated_layouts_round_trip_as_version_3_and_one_copy_stays_version_2() {
        let one = Layout {
            stripe_size: 4096,
            replicas: 1,
            datafiles: vec![Datafile::single(0, 5), Datafile::single(1, 6)],
            width: 2,
        };
        let bytes = crate::codec::encode(&one);
        assert_eq!(bytes[0], 2, "a one-copy layout is written as version 2");
        assert_eq!(crate::codec::decode::<Layout>(&bytes).unwrap(), one);

        let mut two = one.clone();
        two.replicas = 2;
        two.datafiles[0].copies[0] = 1;
        two.datafiles[1].copies[0] = 2;
        let bytes = crate::codec::encode(&two);
        assert_eq!(bytes[0], 3);
        let back = crate::codec::decode::<Layout>(&bytes).unwrap();
        assert_eq!(back, two);
        assert_eq!(back.datafiles[1].replicas().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(one.datafiles[1].replicas().collect::<Vec<_>>(), [1]);

        let mut three = two.clone();
        three.replicas = 3;
        three.datafiles[0].copies[1] = 2;
        three.datafiles[1].copies[1] = 0;
        assert_eq!(
            crate::codec::decode::<Layout>(&crate::codec::encode(&three)).unwrap(),
            three
        );

        // Copies on the first copy's server, twice on one server, missing, or past
        // the replica count are refused.
        for (i, copies) in [[0, NO_SERVER], [NO_SERVER, NO_SERVER], [1, 1], [1, 2]]
            .into_iter()
            .enumerate()
        {
            let mut bad = two.clone();
            if i == 2 {
                bad = three.clone();
            }
            bad.datafiles[0].copies = copies;
            assert_eq!(bad.validate(), Err(Errno::EINVAL), "{copies:?}");
            // (An unused slot is not encoded: that one decodes clean.)
            if i < 3 {
                assert!(crate::codec::decode::<Layout>(&crate::codec::encode(&bad)).is_err());
            }
        }
        // A version 2 layout claiming two copies is malformed.
        let mut v2 = crate::codec::encode(&one);
        v2[1 + 8] = 2;
        assert!(crate::codec::decode::<Layout>(&v2).is_err());
        // Version 3 with the wrong number of copies is malformed.
        let mut short = crate::codec::encode(&two);
        let n = short.len();
        short[n - 4 * 2 - 4] = 1; // the count of copies: 1 instead of 2
        short.truncate(n - 4);
        assert!(crate::codec::decode::<Layout>(&short).is_err());
    }

    #[test]
    fn width_for_counts_leading_datafiles() {
        let l = Layout {
            stripe_size: 1000,
            replicas: 1,
            datafiles: (0..4)
                .map(|i| Datafile::single(i, u64::from(i) + 1))
                .collect(),
            width: 1,
        };
        assert_eq!(l.width_for(0), 1);
        assert_eq!(l.width_for(1), 1);
        assert_eq!(l.width_for(1000), 1);
        assert_eq!(l.width_for(1001), 2);
        assert_eq!(l.width_for(3000), 3);
        assert_eq!(l.width_for(3001), 4);
        assert_eq!(l.width_for(u64::MAX), 4);
        assert_eq!(l.sized(), 0..1);
        assert_eq!(Layout { width: 4, ..l }.sized(), 0..4);
    }
}
