//! The mount's own read-ahead, for files the kernel reads without its page cache
//! (direct I/O): while a process reads a file sequentially, the next chunks are
//! already being fetched from the data servers, so one reader keeps every server
//! busy and finds its data waiting in the mount.
//!
//! Why not the kernel's read-ahead: it needs the page cache, which costs fresh
//! cache pages and one more copy of every byte, and caps a FUSE mount on this kind of
//! machine below what the servers deliver (`docs/benchmarks.md`, `docs/fuse.md`).
//!
//! - A stream starts at the second read in a row that continues where the previous
//!   one ended; chunks are then fetched from the end of that read onwards, `window`
//!   of them ahead, each one request per data server (`File::read_at`). Reads that
//!   jump elsewhere drop the chunks and go to the servers directly.
//! - Memory is bounded twice: `window` chunks per open file, and a [`Budget`] of
//!   chunks for the whole mount, taken without waiting (no budget, no read-ahead).
//! - Consistency: a chunk is used only if no write or truncation went through this
//!   mount to the file since it was fetched (the file's write generation,
//!   `Tables::writes`). A change made by another client can be missed by data
//!   fetched at most `window` chunks ahead of the reader, as with the kernel's own
//!   read-ahead; every open starts empty (close-to-open, like the page cache).

use std::collections::VecDeque;
use std::ops::{Deref, Range};
use std::sync::{Arc, Mutex, MutexGuard};

use fuser::Errno;
use pvfs_client::File;
use pvfs_transport::{BufPool, PooledBuf};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// The read-ahead chunks the whole mount may hold at once (each up to the largest
/// request, 4 MiB by default): the bound on its memory.
#[derive(Clone)]
pub(crate) struct Budget(Arc<Semaphore>);

impl Budget {
    /// Room for `chunks` chunks.
    pub(crate) fn new(chunks: usize) -> Budget {
        Budget(Arc::new(Semaphore::new(chunks)))
    }

    fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        self.0.clone().try_acquire_owned().ok()
    }
}

/// Where read data starts in its buffer: 32 bytes past a cache line's start.
///
/// The kernel copies with `rep movsb`, which on some CPUs (the AMD EPYC of
/// `docs/benchmarks.md`) runs many times slower when the destination lies 1 to 31
/// bytes past the source modulo 64. Received data comes
/// from page-aligned page-cache pages of the servers, and FUSE copies it on into
/// the reader's buffer, usually page-aligned or 16 bytes past (glibc's `malloc` of
/// large blocks). At offset 32 all three distances (32 from the socket, 32 to a
/// page-aligned buffer, 48 to a `malloc`ed one) are fast ones.
pub(crate) const SKEW: usize = 32;

/// What a read answers with: bytes of its own buffer, or of a fetched chunk (no copy).
pub(crate) enum ReadData {
    Owned(PooledBuf, Range<usize>),
    Chunk(Arc<Fetched>, Range<usize>),
}

impl Deref for ReadData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ReadData::Owned(b, r) => &b[r.clone()],
            ReadData::Chunk(c, r) => &c.buf[r.clone()],
        }
    }
}

/// A fetched chunk: its bytes (`buf[SKEW..SKEW + len]`; fewer than asked at the end
/// of the file) and its share of the budget, given back when the last reader lets
/// go of it.
pub(crate) struct Fetched {
    buf: PooledBuf,
    len: usize,
    /// Bytes asked for: a chunk holding fewer ends at the end of the file.
    asked: usize,
    _permit: OwnedSemaphorePermit,
}

/// A chunk's outcome, once known.
type Outcome = Option<Result<Arc<Fetched>, Errno>>;

/// A chunk being fetched or fetched: file offset and where its outcome appears.
struct Chunk {
    offset: u64,
    outcome: watch::Receiver<Outcome>,
}

/// What one open file's reads look like so far.
struct Stream {
    /// Where the previous read ended.
    next: u64,
    /// Consecutive reads that continued the previous one (the first read counts).
    run: u32,
    /// Chunks in file order, back to back.
    chunks: VecDeque<Chunk>,
    /// Where the next chunk to fetch starts.
    ahead: u64,
    /// The file's write generation the chunks were fetched under.
    writes: u64,
}

/// Read-ahead state of one open file.
pub(crate) struct ReadAhead {
    stream: Mutex<Stream>,
    /// Bytes per chunk.
    chunk: u64,
    /// Chunks fetched ahead of the reader.
    window: usize,
    /// Nothing is fetched from here on (the file's size when it was opened; reads
    /// beyond go to the servers directly).
    limit: u64,
}

/// A read [`ReadAhead::begin`] began.
pub(crate) enum Begun {
    /// Answered from chunks fetched already.
    Ready(ReadData),
    /// Chunks still on their way, or a read for the servers: see
    /// [`ReadAhead::finish`].
    Wait(Wait),
}

/// What a begun read still needs.
pub(crate) struct Wait {
    plan: Plan,
    offset: u64,
    size: usize,
}

/// How a read is served.
enum Plan {
    /// From the servers, now.
    Direct,
    /// From these chunks, in order.
    Chunks(Vec<Chunk>),
}

fn lock(m: &Mutex<Stream>) -> MutexGuard<'_, Stream> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl ReadAhead {
    /// State for a file of `size` bytes opened now, under write generation `writes`.
    pub(crate) fn new(chunk: u32, window: usize, size: u64, writes: u64) -> ReadAhead {
        assert!(
            chunk > 0 && window > 0,
            "read-ahead needs a chunk and a window"
        );
        ReadAhead {
            stream: Mutex::new(Stream {
                next: 0,
                run: 0,
                chunks: VecDeque::new(),
                ahead: 0,
                writes,
            }),
            chunk: u64::from(chunk),
            window,
            limit: size,
        }
    }

    /// Begins a read of `size` bytes at `offset` of `file`, whose write generation
    /// is now `writes`: answers it if the chunks it needs are here, else says what
    /// to wait for. Never waits itself (FUSE threads call it); fetches start on
    /// `rt`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn begin(
        &self,
        file: &File,
        bufs: &BufPool,
        budget: &Budget,
        rt: &tokio::runtime::Handle,
        writes: u64,
        offset: u64,
        size: usize,
    ) -> Begun {
        let chunk = self.chunk;
        let mut start = |at: u64| {
            let permit = budget.try_take()?;
            Some(fetch(rt, file, bufs, at, chunk, permit))
        };
        let plan = self.plan(writes, offset, size, &mut start);
        if let Plan::Chunks(chunks) = &plan {
            let here: Option<Vec<_>> = chunks
                .iter()
                .map(|c| match &*c.outcome.borrow() {
                    Some(Ok(f)) => Some((c.offset, f.clone())),
                    _ => None,
                })
                .collect();
            if let Some(fetched) = here {
                return Begun::Ready(cut(&fetched, bufs, offset, size));
            }
        }
        Begun::Wait(Wait { plan, offset, size })
    }

    /// Finishes a read [`ReadAhead::begin`] could not answer.
    pub(crate) async fn finish(
        &self,
        wait: Wait,
        file: &File,
        bufs: &BufPool,
    ) -> Result<ReadData, Errno> {
        let Wait { plan, offset, size } = wait;
        if let Plan::Chunks(chunks) = plan {
            match assemble(chunks, bufs, offset, size).await {
                Some(data) => return Ok(data),
                // A chunk failed: forget the stream, and let the servers answer
                // this read (with the real error, if there still is one).
                None => self.forget(),
            }
        }
        direct(file, bufs, offset, size).await
    }

    /// Decides how to serve a read and keeps the window full; `start` starts
    /// fetching the chunk at an offset, or declines (no budget left).
    fn plan(
        &self,
        writes: u64,
        offset: u64,
        size: usize,
        start: &mut dyn FnMut(u64) -> Option<Chunk>,
    ) -> Plan {
        let end = offset.saturating_add(size as u64);
        let mut st = lock(&self.stream);
        if st.writes != writes {
            // Written through this mount since the chunks were fetched.
            st.chunks.clear();
            st.writes = writes;
        }
        st.run = if offset == st.next {
            st.run.saturating_add(1)
        } else {
            1
        };
        st.next = end;
        // Chunks wholly before the read are done with.
        while st
            .chunks
            .front()
            .is_some_and(|c| c.offset.saturating_add(self.chunk) <= offset)
        {
            st.chunks.pop_front();
        }
        let covered = st.chunks.front().is_some_and(|c| c.offset <= offset) && st.ahead >= end;
        let plan = if covered {
            let wanted = st
                .chunks
                .iter()
                .take_while(|c| c.offset < end)
                .map(|c| Chunk {
                    offset: c.offset,
                    outcome: c.outcome.clone(),
                })
                .collect();
            Plan::Chunks(wanted)
        } else {
            st.chunks.clear();
            st.ahead = end;
            Plan::Direct
        };
        if st.run >= 2 {
            while st.chunks.len() < self.window && st.ahead < self.limit {
                let at = st.ahead;
                let Some(chunk) = start(at) else {
                    break;
                };
                assert_eq!(chunk.offset, at, "a chunk starts where it was asked");
                if let Some(last) = st.chunks.back() {
                    assert_eq!(last.offset + self.chunk, at, "chunks lie back to back");
                }
                st.chunks.push_back(chunk);
                st.ahead = at.saturating_add(self.chunk);
            }
        }
        plan
    }

    /// Drops the stream's chunks (after a failed fetch).
    fn forget(&self) {
        let mut st = lock(&self.stream);
        st.chunks.clear();
        st.run = 0;
    }
}

/// Starts fetching `len` bytes at `offset` in the background, on `rt`.
fn fetch(
    rt: &tokio::runtime::Handle,
    file: &File,
    bufs: &BufPool,
    offset: u64,
    len: u64,
    permit: OwnedSemaphorePermit,
) -> Chunk {
    let (tx, rx) = watch::channel(None);
    let file = file.clone();
    let bufs = bufs.clone();
    rt.spawn(async move {
        let got = receive(&file, &bufs, offset, len as usize).await;
        let _ = tx.send(Some(got.map(|(buf, n)| {
            Arc::new(Fetched {
                buf,
                len: n,
                asked: len as usize,
                _permit: permit,
            })
        })));
    });
    Chunk {
        offset,
        outcome: rx,
    }
}

/// Reads `size` bytes at `offset` from the servers into a pooled buffer, at
/// [`SKEW`]; returns it and how many bytes were read.
async fn receive(
    file: &File,
    bufs: &BufPool,
    offset: u64,
    size: usize,
) -> Result<(PooledBuf, usize), Errno> {
    let mut buf = bufs.get(SKEW + size);
    let n = file
        .read_at(offset, &mut buf[SKEW..])
        .await
        .map_err(crate::errors::errno)?;
    Ok((buf, n))
}

/// A read answered by the servers at once.
pub(crate) async fn direct(
    file: &File,
    bufs: &BufPool,
    offset: u64,
    size: usize,
) -> Result<ReadData, Errno> {
    let (buf, n) = receive(file, bufs, offset, size).await?;
    Ok(ReadData::Owned(buf, SKEW..SKEW + n))
}

/// Waits for `chunks` and answers the read of `size` bytes at `offset` from them
/// ([`cut`]). None if a fetch failed.
async fn assemble(
    chunks: Vec<Chunk>,
    bufs: &BufPool,
    offset: u64,
    size: usize,
) -> Option<ReadData> {
    let mut fetched = Vec::with_capacity(chunks.len());
    for mut c in chunks {
        let got = c.outcome.wait_for(Option::is_some).await.ok()?.clone();
        fetched.push((c.offset, got?.ok()?));
    }
    Some(cut(&fetched, bufs, offset, size))
}

/// Answers the read of `size` bytes at `offset` from `fetched` chunks (offset and
/// bytes): one chunk lends its bytes, a read across chunks gets a copy.
fn cut(fetched: &[(u64, Arc<Fetched>)], bufs: &BufPool, offset: u64, size: usize) -> ReadData {
    // The part of chunk (at, f) that the read wants, as a range of its buffer.
    let part = |at: u64, f: &Fetched| {
        let len = f.len as u64;
        let from = offset.saturating_sub(at).min(len) as usize;
        let to = (offset + size as u64).saturating_sub(at).min(len) as usize;
        SKEW + from..SKEW + to
    };
    if let [(at, f)] = fetched {
        let r = part(*at, f);
        return ReadData::Chunk(f.clone(), r);
    }
    let mut out = bufs.get(SKEW + size);
    let mut n = SKEW;
    for (at, f) in fetched {
        let r = part(*at, f);
        let len = r.len();
        out[n..n + len].copy_from_slice(&f.buf[r]);
        n += len;
        if f.len < f.asked {
            // The file ended in this chunk (when it was fetched).
            break;
        }
    }
    ReadData::Owned(out, SKEW..n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Fetches started by the read-ahead under test, completed by hand.
    struct Fetches {
        asked: Vec<u64>,
        senders: Vec<watch::Sender<Outcome>>,
        budget: usize,
    }

    impl Fetches {
        fn new(budget: usize) -> Fetches {
            Fetches {
                asked: Vec::new(),
                senders: Vec::new(),
                budget,
            }
        }

        fn start(&mut self) -> impl FnMut(u64) -> Option<Chunk> + '_ {
            move |at| {
                if self.budget == 0 {
                    return None;
                }
                self.budget -= 1;
                let (tx, rx) = watch::channel(None);
                self.asked.push(at);
                self.senders.push(tx);
                Some(Chunk {
                    offset: at,
                    outcome: rx,
                })
            }
        }
    }

    /// The chunk offsets a read is served from; None when it goes to the servers.
    fn served(
        ra: &ReadAhead,
        f: &mut Fetches,
        writes: u64,
        offset: u64,
        size: u64,
    ) -> Option<Vec<u64>> {
        match ra.plan(writes, offset, size as usize, &mut f.start()) {
            Plan::Direct => None,
            Plan::Chunks(c) => Some(c.iter().map(|c| c.offset).collect()),
        }
    }

    #[test]
    fn a_stream_starts_at_the_second_read_in_a_row() {
        let ra = ReadAhead::new(4 << 20, 2, 64 * MIB, 0);
        let mut f = Fetches::new(100);
        assert_eq!(served(&ra, &mut f, 0, 0, MIB), None);
        assert!(f.asked.is_empty(), "one read is no stream");
        assert_eq!(served(&ra, &mut f, 0, MIB, MIB), None);
        assert_eq!(
            f.asked,
            [2 * MIB, 6 * MIB],
            "the window, from the end of the read"
        );
        for k in 2..6 {
            assert_eq!(served(&ra, &mut f, 0, k * MIB, MIB), Some(vec![2 * MIB]));
        }
        assert_eq!(f.asked.len(), 2, "the window is full");
        assert_eq!(served(&ra, &mut f, 0, 6 * MIB, MIB), Some(vec![6 * MIB]));
        assert_eq!(
            f.asked,
            [2 * MIB, 6 * MIB, 10 * MIB],
            "a used-up chunk is replaced"
        );
    }

    #[test]
    fn reads_across_chunks_get_both() {
        let ra = ReadAhead::new(4 << 20, 2, 64 * MIB, 0);
        let mut f = Fetches::new(100);
        served(&ra, &mut f, 0, 0, 3 * MIB);
        served(&ra, &mut f, 0, 3 * MIB, 3 * MIB);
        assert_eq!(f.asked, [6 * MIB, 10 * MIB]);
        assert_eq!(
            served(&ra, &mut f, 0, 6 * MIB, 3 * MIB),
            Some(vec![6 * MIB])
        );
        assert_eq!(
            served(&ra, &mut f, 0, 9 * MIB, 3 * MIB),
            Some(vec![6 * MIB, 10 * MIB])
        );
    }

    #[test]
    fn a_jump_drops_the_stream() {
        let ra = ReadAhead::new(4 << 20, 2, 64 * MIB, 0);
        let mut f = Fetches::new(100);
        served(&ra, &mut f, 0, 0, MIB);
        served(&ra, &mut f, 0, MIB, MIB);
        assert_eq!(served(&ra, &mut f, 0, 40 * MIB, MIB), None);
        assert_eq!(
            f.asked.len(),
            2,
            "no read-ahead after one read at the new place"
        );
        assert_eq!(
            served(&ra, &mut f, 0, 2 * MIB, MIB),
            None,
            "the old chunks are gone"
        );
        assert_eq!(served(&ra, &mut f, 0, 3 * MIB, MIB), None);
        assert_eq!(
            f.asked,
            [2 * MIB, 6 * MIB, 4 * MIB, 8 * MIB],
            "a new stream"
        );
    }

    #[test]
    fn a_write_through_the_mount_drops_fetched_chunks() {
        let ra = ReadAhead::new(4 << 20, 2, 64 * MIB, 7);
        let mut f = Fetches::new(100);
        served(&ra, &mut f, 7, 0, MIB);
        served(&ra, &mut f, 7, MIB, MIB);
        assert_eq!(served(&ra, &mut f, 7, 2 * MIB, MIB), Some(vec![2 * MIB]));
        // A write finished since: what was fetched may be stale.
        assert_eq!(served(&ra, &mut f, 8, 3 * MIB, MIB), None);
        assert_eq!(
            f.asked,
            [2 * MIB, 6 * MIB, 4 * MIB, 8 * MIB],
            "fetched again"
        );
        assert_eq!(served(&ra, &mut f, 8, 4 * MIB, MIB), Some(vec![4 * MIB]));
    }

    #[test]
    fn budget_and_file_size_bound_the_fetches() {
        let ra = ReadAhead::new(4 << 20, 4, 9 * MIB, 0);
        let mut f = Fetches::new(1);
        served(&ra, &mut f, 0, 0, MIB);
        served(&ra, &mut f, 0, MIB, MIB);
        assert_eq!(f.asked, [2 * MIB], "the budget allows one chunk");
        let mut f = Fetches::new(100);
        let ra = ReadAhead::new(4 << 20, 4, 9 * MIB, 0);
        served(&ra, &mut f, 0, 0, MIB);
        served(&ra, &mut f, 0, MIB, MIB);
        assert_eq!(
            f.asked,
            [2 * MIB, 6 * MIB],
            "nothing from the size at open on"
        );
    }

    /// A fetched chunk of `len` bytes (asked: `asked`) whose bytes are `fill`.
    fn fetched(bufs: &BufPool, budget: &Budget, len: usize, asked: usize, fill: u8) -> Outcome {
        let mut buf = bufs.get(SKEW + asked);
        buf[SKEW..SKEW + len].fill(fill);
        let permit = budget.try_take()?;
        Some(Ok(Arc::new(Fetched {
            buf,
            len,
            asked,
            _permit: permit,
        })))
    }

    #[tokio::test]
    async fn one_chunk_lends_its_bytes_several_are_copied_up_to_the_end() {
        let bufs = BufPool::new(8 << 20, 4);
        let budget = Budget::new(2);
        let chunk = 4 << 20;
        let (tx1, rx1) = watch::channel(None);
        let (tx2, rx2) = watch::channel(None);
        tx1.send_replace(fetched(&bufs, &budget, chunk, chunk, 1));
        // The file ends 1000 bytes into the second chunk.
        tx2.send_replace(fetched(&bufs, &budget, 1000, chunk, 2));
        let c1 = || Chunk {
            offset: 0,
            outcome: rx1.clone(),
        };
        let c2 = || Chunk {
            offset: chunk as u64,
            outcome: rx2.clone(),
        };
        let one = assemble(vec![c1()], &bufs, 100, 5000).await;
        assert!(matches!(&one, Some(ReadData::Chunk(..))), "no copy");
        assert_eq!(one.as_deref(), Some(&[1u8; 5000][..]));
        let both = assemble(vec![c1(), c2()], &bufs, chunk as u64 - 10, 5000)
            .await
            .expect("both fetched");
        assert_eq!(both.len(), 1010, "up to the end of the file");
        assert_eq!(&both[..10], &[1u8; 10]);
        assert_eq!(&both[10..], &[2u8; 1000][..]);
        assert_eq!(
            both.as_ptr() as usize % 64,
            SKEW,
            "answers start at the skew"
        );
        // A failed fetch gives no answer (the caller asks the servers).
        let (tx3, rx3) = watch::channel(None);
        tx3.send_replace(Some(Err(Errno::EIO)));
        let failed = Chunk {
            offset: 0,
            outcome: rx3,
        };
        assert!(assemble(vec![failed], &bufs, 0, 10).await.is_none());
        // No budget left while the two chunks are held: none can be fetched.
        assert!(budget.try_take().is_none());
        drop((one, both, tx1, tx2, rx1, rx2));
        assert!(budget.try_take().is_some(), "released with the last holder");
    }
}
