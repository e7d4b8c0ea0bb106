//! An open regular file: striped reads and writes at any offset and size, strided
//! partitions (the PVFS paper, Carns et al., 2000), region lists (readx/writex), size,
//! fsync, truncate.

use pvfs_proto::req;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use pvfs_proto::layout::Layout;
use pvfs_proto::{rights, Attr, Errno, Extent, Handle, Regions, Request, Response};

use crate::caps::Granted;
use crate::error::{Error, Result};
use crate::io::{self, WrittenStats};
use crate::Client;

/// Most extents one request carries; longer lists are sent in several rounds.
const MAX_EXTENTS: usize = 65536;

/// A partition of a file (the PVFS paper, Carns et al., 2000): the file seen through
/// blocks of `gsize` bytes, the first at `offset`, one every `stride` bytes. Position 0
/// of the partition is byte `offset` of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// File offset of the first block.
    pub offset: u64,
    /// Bytes per block.
    pub gsize: u64,
    /// Distance between block starts (>= gsize).
    pub stride: u64,
}

impl Partition {
    /// The file regions behind partition bytes `pos .. pos + len`.
    pub fn regions(&self, pos: u64, len: u64) -> Regions {
        Regions::Strided {
            offset: self.offset,
            block: self.gsize,
            stride: self.stride,
            start: pos,
            len,
        }
    }
}

/// An open regular file. Holds the layout, so I/O goes straight to the data servers.
#[derive(Clone)]
pub struct File {
    client: Client,
    /// Boxed: interfaces keep files in enums next to small variants.
    attr: Box<Attr>,
    layout: Layout,
    /// The layout's width as far as this file (and its clones) knows: a lower bound
    /// of the metadata server's. Bytes are written past it only after a `Widen`.
    /// Reads never use it: another client may have widened the file since.
    width: Arc<AtomicU32>,
}

impl File {
    pub(crate) fn new(client: Client, attr: Attr) -> File {
        let layout = attr
            .layout()
            .cloned()
            .expect("File::new is only called with a regular file's attributes");
        File {
            client,
            attr: Box::new(attr),
            width: Arc::new(AtomicU32::new(layout.width)),
            layout,
        }
    }

    /// The client this file was opened through.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The file's handle.
    pub fn handle(&self) -> Handle {
        self.attr.handle
    }

    /// Attributes as of open (size not filled in; see [`File::stat`]).
    pub fn attr(&self) -> &Attr {
        &self.attr
    }

    /// Stripe size and datafiles, and the width as of open.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The layout's width as the file's metadata server says now (None when it does
    /// not answer: then every datafile is asked).
    async fn fresh_width(&self) -> Option<u32> {
        let attr = self.client.getattr(self.attr.handle).await.ok()?;
        let width = attr
            .layout()
            .filter(|l| l.datafiles == self.layout.datafiles)?
            .width;
        self.width.fetch_max(width, Ordering::AcqRel);
        Some(width)
    }

    /// Makes sure the file's datafiles may hold bytes up to `end` (exclusive): widens
    /// it at its metadata server first when they reach past the width known here.
    /// `caps` hold WRITE on the file (the server checks it).
    async fn widen_for(&self, end: u64, caps: &Granted) -> Result<()> {
        let need = self.layout.width_for(end);
        if need <= self.width.load(Ordering::Acquire) {
            return Ok(());
        }
        let c = &self.client;
        let handle = self.attr.handle;
        let req = Request::Widen(req::Widen {
            handle,
            width: need,
            cap: caps.object().cloned(),
        });
        let width = match c.rpc(c.owner(handle)?, req).await? {
            Response::Attr { attr, .. } => attr.layout().map_or(need, |l| l.width),
            other => return Err(crate::pool::unexpected("Widen", &other)),
        };
        self.width.fetch_max(width.max(need), Ordering::AcqRel);
        Ok(())
    }

    /// Writes `buf` at `offset`; returns `buf.len()`.
    pub async fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.write_regions(&Regions::contig(offset, buf.len() as u64), buf)
            .await
            .map(|n| n as usize)
    }

    /// Reads into `buf` from `offset`; returns the bytes read (short only at the end
    /// of the file). Holes read as zeros.
    pub async fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let size = self
            .read_regions_raw(&Regions::contig(offset, buf.len() as u64), buf)
            .await?;
        Ok(size.saturating_sub(offset).min(buf.len() as u64) as usize)
    }

    /// Capabilities for `need` on this file (see `crate::caps`).
    async fn caps(&self, need: u32) -> Result<Granted> {
        self.client.caps_for(self.attr.handle, need).await
    }

    /// Whether an error says a capability expired (a data server's clock ahead of
    /// ours): the operation is retried once with renewed ones.
    fn expired(&self, e: &Error) -> bool {
        if e.errno == Errno::EKEYEXPIRED {
            self.client.forget_caps(self.attr.handle);
            true
        } else {
            false
        }
    }

    /// Writes `buf` to `regions` (list I/O, writex): the buffer holds the regions'
    /// bytes one after the other. One request per involved data server.
    pub async fn write_regions(&self, regions: &Regions, buf: &[u8]) -> Result<u64> {
        self.write_regions_stats(regions, buf).await.map(|(n, _)| n)
    }

    /// [`File::write_at`], also returning what the data servers said of the
    /// datafiles written (index in the layout, stats after the write): with the
    /// stats of the others, the file's size and times without asking.
    pub async fn write_at_stats(&self, offset: u64, buf: &[u8]) -> Result<(usize, WrittenStats)> {
        if buf.is_empty() {
            return Ok((0, Vec::new()));
        }
        let (n, stats) = self
            .write_regions_stats(&Regions::contig(offset, buf.len() as u64), buf)
            .await?;
        Ok((n as usize, stats))
    }

    async fn write_regions_stats(
        &self,
        regions: &Regions,
        buf: &[u8],
    ) -> Result<(u64, WrittenStats)> {
        let c = &self.client;
        let mut done = 0;
        let mut stats = WrittenStats::new();
        for (part, range) in split(regions, buf.len())? {
            let mut caps = self.caps(rights::WRITE).await?;
            let n = loop {
                let w = async {
                    self.widen_for(part.end(), &caps).await?;
                    io::write(
                        &c.inner.pool,
                        &c.creds,
                        &self.layout,
                        &caps,
                        &part,
                        &buf[range.clone()],
                        false,
                    )
                    .await
                }
                .await;
                match w {
                    Err(e) if self.expired(&e) => caps = self.caps(rights::WRITE).await?,
                    other => break other?,
                }
            };
            done += n.0;
            stats.extend(n.1);
        }
        Ok((done, stats))
    }

    /// Reads `regions` into `buf` (list I/O, readx); returns how many of the bytes
    /// lie before the end of the file (the others read as zeros).
    pub async fn read_regions(&self, regions: &Regions, buf: &mut [u8]) -> Result<u64> {
        let size = self.read_regions_raw(regions, buf).await?;
        Ok(regions
            .extents()
            .map(|e| size.saturating_sub(e.offset).min(e.len))
            .sum())
    }

    /// Reads and returns the file size (or a lower bound past the request's end).
    async fn read_regions_raw(&self, regions: &Regions, buf: &mut [u8]) -> Result<u64> {
        let c = &self.client;
        let mut size = 0;
        for (part, range) in split(regions, buf.len())? {
            let mut caps = self.caps(rights::READ).await?;
            let (mut s, involved) = loop {
                let r = io::read(
                    &c.inner.pool,
                    &c.creds,
                    &self.layout,
                    &caps,
                    &part,
                    &mut buf[range.clone()],
                )
                .await;
                match r {
                    Err(e) if self.expired(&e) => caps = self.caps(rights::READ).await?,
                    other => break other?,
                }
            };
            if s < part.end() {
                // The data ended before the request: holes, or the end of the file?
                // The datafiles within the width say; the width this file holds may
                // be behind another client's writes, so it is asked afresh.
                let width = self.fresh_width().await;
                let past = io::size_past(&c.inner.pool, &c.creds, &self.layout, &involved, width);
                s = s.max(past.await?);
            }
            size = size.max(s);
        }
        Ok(size)
    }

    /// Writes `buf` at position `pos` of partition `p`.
    pub async fn write_partition(&self, p: &Partition, pos: u64, buf: &[u8]) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.write_regions(&p.regions(pos, buf.len() as u64), buf)
            .await
            .map(|n| n as usize)
    }

    /// Reads from position `pos` of partition `p`; returns the bytes read (the
    /// partition bytes before the end of the file).
    pub async fn read_partition(&self, p: &Partition, pos: u64, buf: &mut [u8]) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let regions = p.regions(pos, buf.len() as u64);
        let n = self.read_regions(&regions, buf).await?;
        Ok(n as usize)
    }

    /// The file's current size, from its datafiles.
    pub async fn size(&self) -> Result<u64> {
        Ok(self.stat().await?.size)
    }

    /// Current attributes with size and modification time from the datafiles.
    pub async fn stat(&self) -> Result<Attr> {
        let mut attr = self.client.getattr(self.attr.handle).await?;
        self.client.fill_size(&mut attr).await?;
        Ok(attr)
    }

    /// Makes everything written so far durable: the file's data on its data servers,
    /// and every metadata change acknowledged so far on every metadata server (its
    /// name, its attributes), as a local file system's journal commit does.
    pub async fn fsync(&self) -> Result<()> {
        let c = &self.client;
        io::fsync(&c.inner.pool, &c.creds, &self.layout).await
    }

    /// fallocate(2): with `mode` 0 allocates the bytes `offset .. offset + len` on the
    /// data servers (extending the file when they reach past its end), with
    /// `KEEP_SIZE` allocates without changing the size, with `PUNCH_HOLE |
    /// KEEP_SIZE` deallocates them (they read as zeros), with `ZERO_RANGE` (plus
    /// `KEEP_SIZE` or not) zeroes them allocated (`pvfs_proto::message::falloc`).
    /// One request per data server holding part of the range, in parallel. EINVAL
    /// for an empty range, EOPNOTSUPP for other modes or one the data servers' file
    /// systems lack, EFBIG past the largest file, ENOSPC when they are full.
    pub async fn fallocate(&self, mode: u32, offset: u64, len: u64) -> Result<()> {
        pvfs_proto::message::falloc::check(mode, offset, len)
            .map_err(|(e, why)| Error::new(e, why))?;
        let c = &self.client;
        let mut caps = self.caps(rights::WRITE).await?;
        // Every mode but punching holes may allocate, and bytes (or blocks) past the
        // width need it widened first; a hole is punched in whatever is there.
        let grows = mode & pvfs_proto::message::falloc::PUNCH_HOLE == 0;
        loop {
            let r = async {
                if grows {
                    self.widen_for(offset.saturating_add(len), &caps).await?;
                }
                io::fallocate(
                    &c.inner.pool,
                    &c.creds,
                    &self.layout,
                    &caps,
                    mode,
                    offset,
                    len,
                )
                .await
            }
            .await;
            match r {
                Err(e) if self.expired(&e) => caps = self.caps(rights::WRITE).await?,
                other => break other,
            }
        }
    }

    /// Sets the file's size (cuts or extends with a hole).
    pub async fn truncate(&self, size: u64) -> Result<()> {
        if size > pvfs_proto::layout::MAX_FILE_SIZE {
            return Err(Error::new(Errno::EFBIG, format!("size {size} too large")));
        }
        let c = &self.client;
        let mut caps = self.caps(rights::WRITE).await?;
        loop {
            // Extending puts the new end on the datafile that holds it: widen first.
            // (Cutting goes to every datafile: this file's width may be behind.)
            let r = async {
                self.widen_for(size, &caps).await?;
                io::truncate(&c.inner.pool, &c.creds, &self.layout, &caps, size).await
            }
            .await;
            match r {
                Err(e) if self.expired(&e) => caps = self.caps(rights::WRITE).await?,
                other => break other?,
            }
        }
        let now = pvfs_proto::Timespec::now();
        // The answer is not needed: no data server is asked for the size.
        c.setattr_lite(
            self.attr.handle,
            pvfs_proto::SetAttr {
                mtime: Some(now),
                // The truncate's own time: a writer may set it, owner or not.
                now: true,
                ..Default::default()
            },
        )
        .await?;
        Ok(())
    }
}

/// Splits a region list with more than [`MAX_EXTENTS`] extents into rounds, each with
/// the matching part of the buffer.
fn split(regions: &Regions, buf_len: usize) -> Result<Vec<(Regions, std::ops::Range<usize>)>> {
    io::check(regions, buf_len)?;
    match regions {
        Regions::List(v) if v.len() > MAX_EXTENTS => {
            let mut out = Vec::new();
            let mut at = 0usize;
            for chunk in v.chunks(MAX_EXTENTS) {
                let len: u64 = chunk.iter().map(|e: &Extent| e.len).sum();
                out.push((Regions::List(chunk.to_vec()), at..at + len as usize));
                at += len as usize;
            }
            Ok(out)
        }
        _ => Ok(vec![(regions.clone(), 0..buf_len)]),
    }
}
