//! Striped I/O: one call becomes one request per involved data server, each carrying
//! the whole region description; data streams in bounded chunks in both directions.
//!
//! Writes gather each server's bytes straight from the caller's buffer into vectored
//! socket writes (no staging copy). Reads scatter each arriving chunk into the
//! caller's buffer at the positions the stripe arithmetic gives. Data servers cut a
//! read at their datafile's end; bytes past it are holes (zeros) unless the file ends
//! before them, which the client settles from the datafile sizes.

use futures::future::try_join_all;
use pvfs_proto::layout::{clip_pieces, Layout, Piece, PieceCursor};
use pvfs_proto::message::DatafileStat;
use pvfs_proto::req;
use pvfs_proto::{
    encode, Capability, Creds, Errno, Handle, Regions, Request, RequestBody, Response, Stripe,
};
use pvfs_transport::Incoming;

use pvfs_proto::map::Copies;

use crate::caps::Granted;
use crate::copies::{self, Pick, Route};
use crate::error::{Error, Result};
use crate::pool::{unexpected, Pool, WRITE_CHUNK};

/// Checks that a buffer matches its region description.
pub(crate) fn check(regions: &Regions, buf_len: usize) -> Result<()> {
    regions
        .validate()
        .map_err(|e| Error::new(e, "region list out of range"))?;
    if regions.total_len() != buf_len as u64 {
        return Err(Error::new(
            Errno::EINVAL,
            format!(
                "buffer of {buf_len} bytes for regions of {} bytes",
                regions.total_len()
            ),
        ));
    }
    Ok(())
}

/// What data servers said of the datafiles a write changed: (index in the layout,
/// size, modification time and allocation after the write).
pub type WrittenStats = Vec<(usize, DatafileStat)>;

/// Writes `buf` to the bytes `regions` describe (in stream order); returns bytes
/// written and the written datafiles' stats after it.
pub(crate) async fn write(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    caps: &Granted,
    regions: &Regions,
    buf: &[u8],
    sync: bool,
) -> Result<(u64, WrittenStats)> {
    check(regions, buf.len())?;
    let stripe = layout.stripe();
    let jobs = (0..stripe.count).filter_map(|idx| {
        let bytes = stripe.bytes_on(idx, regions);
        let cap = caps.datafile(idx as usize).cloned();
        (bytes > 0).then(|| {
            write_one(
                pool, creds, layout, cap, stripe, idx, regions, buf, bytes, sync,
            )
        })
    });
    let written = try_join_all(jobs).await?;
    let bytes = written.iter().map(|(_, n, _)| n).sum();
    pool.metrics.bytes_written.inc_by(bytes);
    Ok((
        bytes,
        written.into_iter().map(|(idx, _, st)| (idx, st)).collect(),
    ))
}

#[allow(clippy::too_many_arguments)]
async fn write_one(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    cap: Option<Capability>,
    stripe: Stripe,
    idx: u64,
    regions: &Regions,
    buf: &[u8],
    bytes: u64,
    sync: bool,
) -> Result<(usize, u64, DatafileStat)> {
    let df = layout.datafiles[idx as usize];
    let mut route = Route::new(pool, creds, &df, layout.replicas, Pick::Head).await?;
    let (done, stat) = loop {
        let written = match route.target() {
            Ok((server, copies)) => {
                let request = Request::Write(req::Write {
                    handle: df.handle,
                    stripe,
                    index: idx as u32,
                    regions: regions.clone(),
                    sync,
                    cap: cap.clone(),
                    copies,
                });
                let to = (server, df.handle);
                let sent = write_to(pool, creds, to, request, stripe, idx, regions, buf, bytes);
                route.watch(server, sent).await
            }
            Err(e) => Err(e),
        };
        match written {
            Err(e) if route.again(&e).await => {}
            other => break other?,
        }
    };
    Ok((idx as usize, done, stat))
}

/// Sends `request` (a `Write` of datafile `idx`, whose handle is `handle`) to
/// `server` with the bytes of `buf` it carries; returns the bytes written and the
/// datafile's stat after it.
#[allow(clippy::too_many_arguments)]
async fn write_to(
    pool: &Pool,
    creds: &Creds,
    (server, handle): (usize, Handle),
    request: Request,
    stripe: Stripe,
    idx: u64,
    regions: &Regions,
    buf: &[u8],
    bytes: u64,
) -> Result<(u64, DatafileStat)> {
    let body = encode(&RequestBody {
        creds: creds.clone(),
        request,
        retry: None,
        origin: 0,
    });
    let mut cursor = PieceCursor::new(stripe.pieces(idx, regions));
    let mut pieces = Vec::new();
    let mut remaining = bytes;
    let n = cursor.take((WRITE_CHUNK as u64).min(remaining), &mut pieces);
    remaining -= n;
    let mut call = pool
        .start_in(
            pvfs_proto::Scope::Server,
            server,
            "Write",
            &body,
            &slices(buf, &pieces),
            remaining == 0,
        )
        .await?;
    while remaining > 0 {
        pieces.clear();
        let n = cursor.take((WRITE_CHUNK as u64).min(remaining), &mut pieces);
        assert!(n > 0, "stream shorter than its byte count");
        remaining -= n;
        call.send_data(&slices(buf, &pieces), remaining == 0)
            .await
            .map_err(|e| Error::transport(pool.name(server), e))?;
    }
    let frame = pool.recv(server, &mut call).await?;
    match pool.response(server, &frame)? {
        Response::Written {
            bytes: done,
            stat,
            verifier,
        } if done == bytes => {
            pool.unsynced.note(handle, verifier);
            Ok((done, stat))
        }
        Response::Written { bytes: done, .. } => Err(Error::new(
            Errno::EIO,
            format!("server {} wrote {done} of {bytes} bytes", pool.name(server)),
        )),
        other => Err(unexpected("Write", &other)),
    }
}

fn slices<'a>(buf: &'a [u8], pieces: &[Piece]) -> Vec<&'a [u8]> {
    pieces
        .iter()
        .map(|p| &buf[p.pos as usize..(p.pos + p.len) as usize])
        .collect()
}

/// The caller's buffer while the per-server receivers of one read fill it.
struct Scatter {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a Scatter is only used by the receivers of one `read` call, which write
// disjoint byte ranges (see `Scatter::slice`) and all finish before `read` returns or
// is dropped (they are joined, never spawned).
unsafe impl Send for Scatter {}
// SAFETY: as above.
unsafe impl Sync for Scatter {}

impl Scatter {
    /// The bytes `pos .. pos + len` of the buffer.
    ///
    /// # Safety
    /// No two live slices may overlap. Receivers only ask for the stream positions of
    /// their own datafile's pieces: every byte of a request's stream lies on exactly one
    /// datafile, so the pieces of different datafiles never overlap, and one receiver
    /// holds one slice at a time.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, pos: u64, len: u64) -> &mut [u8] {
        let (pos, len) = (pos as usize, len as usize);
        assert!(
            pos.checked_add(len).is_some_and(|end| end <= self.len),
            "piece outside the buffer"
        );
        // SAFETY: in bounds (checked above), non-overlapping (the caller's contract).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(pos), len) }
    }
}

/// Reads the bytes `regions` describe into `buf` (stream order); holes read as
/// zeros. Returns how far the data the involved datafiles hold reaches (the file's
/// size is at least that) and which datafiles were involved: when that ends before
/// the request does, [`size_past`] settles whether the rest is holes or past the end.
pub(crate) async fn read(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    caps: &Granted,
    regions: &Regions,
    buf: &mut [u8],
) -> Result<(u64, Vec<u64>)> {
    check(regions, buf.len())?;
    if buf.is_empty() {
        return Ok((0, Vec::new()));
    }
    let stripe = layout.stripe();
    let involved: Vec<u64> = (0..stripe.count)
        .filter(|&idx| stripe.pieces(idx, regions).next().is_some())
        .collect();
    let out = Scatter {
        ptr: buf.as_mut_ptr(),
        len: buf.len(),
    };
    let local_sizes = try_join_all(involved.iter().map(|&idx| {
        let cap = caps.datafile(idx as usize).cloned();
        receive(pool, creds, layout, cap, idx, regions, &out)
    }))
    .await?;
    let mut known = 0u64;
    for (&idx, &local) in involved.iter().zip(&local_sizes) {
        known = known.max(stripe.logical_end(idx, local));
        zero_unfilled(stripe, idx, regions, local, buf);
    }
    // The bytes read up to the end the datafiles read know of.
    let read: u64 = regions
        .extents()
        .map(|e| e.len.min(known.saturating_sub(e.offset)))
        .sum();
    pool.metrics.bytes_read.inc_by(read);
    Ok((known, involved))
}

/// How far the datafiles a read did not involve reach (0 when none holds bytes):
/// whether the bytes past what the involved ones hold are holes or past the end of
/// the file. Asks the datafiles within `width` (the layout's width as its metadata
/// server answered it after the read's data came back: any datafile past it was
/// still empty then), or every datafile when it is not known.
pub(crate) async fn size_past(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    involved: &[u64],
    width: Option<u32>,
) -> Result<u64> {
    let stripe = layout.stripe();
    let upto = width.map_or(stripe.count, |w| u64::from(w).min(stripe.count));
    let others: Vec<usize> = (0..upto)
        .filter(|i| !involved.contains(i))
        .map(|i| i as usize)
        .collect();
    let sizes = datafile_stats(pool, creds, layout, &others).await?;
    Ok(others
        .iter()
        .zip(sizes)
        .map(|(i, st)| stripe.logical_end(*i as u64, st.size))
        .max()
        .unwrap_or(0))
}

/// Reads datafile `idx`'s part of a request into `out`; returns its local size.
async fn receive(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    cap: Option<Capability>,
    idx: u64,
    regions: &Regions,
    out: &Scatter,
) -> Result<u64> {
    let stripe = layout.stripe();
    let df = layout.datafiles[idx as usize];
    // One client's reads of a file spread over the copies by datafile.
    let spread = (pool.client_id() as usize).wrapping_add(idx as usize);
    let mut route = Route::new(pool, creds, &df, layout.replicas, Pick::Read { spread }).await?;
    loop {
        let got = match route.target() {
            Ok((server, copies)) => {
                let request = Request::Read(req::Read {
                    handle: df.handle,
                    stripe,
                    index: idx as u32,
                    regions: regions.clone(),
                    cap: cap.clone(),
                    copies,
                });
                let got = receive_from(pool, creds, server, request, stripe, idx, regions, out);
                route.watch(server, got).await
            }
            Err(e) => Err(e),
        };
        match got {
            Err(e) if route.again(&e).await => {}
            other => return other,
        }
    }
}

/// Sends `request` (a `Read` of datafile `idx`) to `server` and puts the bytes it
/// streams back into `out`; returns the datafile's local size.
#[allow(clippy::too_many_arguments)]
async fn receive_from(
    pool: &Pool,
    creds: &Creds,
    server: usize,
    request: Request,
    stripe: Stripe,
    idx: u64,
    regions: &Regions,
    out: &Scatter,
) -> Result<u64> {
    let body = encode(&RequestBody {
        creds: creds.clone(),
        request,
        retry: None,
        origin: 0,
    });
    let fail = |what: &str| {
        Error::new(
            Errno::EPROTO,
            format!("server {}: {what}", pool.name(server)),
        )
    };
    let mut call = pool.start_direct(server, "Read", &body).await?;
    let mut cursor = None;
    let mut local_size = 0;
    let mut pieces = Vec::new();
    loop {
        let incoming = call
            .recv_incoming()
            .await
            .map_err(|e| Error::transport(pool.name(server), e))?;
        let (header, body) = match &incoming {
            Incoming::Frame(f) => (f.header, f.body.as_slice()),
            Incoming::Direct(d) => (d.header, d.body.as_slice()),
        };
        if header.kind == pvfs_proto::FrameKind::Response {
            match pool.response_body(server, body)? {
                Response::ReadStart { local_size: size } if cursor.is_none() => {
                    local_size = size;
                    cursor = Some(PieceCursor::new(clip_pieces(
                        stripe.pieces(idx, regions),
                        size,
                    )));
                }
                other => return Err(unexpected("Read", &other)),
            }
        }
        let cursor = cursor
            .as_mut()
            .ok_or_else(|| fail("read data before its start"))?;
        let n = header.data_len as u64;
        pieces.clear();
        if cursor.take(n, &mut pieces) != n {
            return Err(fail("sent more than was asked"));
        }
        match incoming {
            Incoming::Frame(frame) => {
                let mut at = 0usize;
                for p in &pieces {
                    // SAFETY: this receiver's own pieces (see Scatter::slice).
                    let dst = unsafe { out.slice(p.pos, p.len) };
                    dst.copy_from_slice(&frame.data[at..at + p.len as usize]);
                    at += p.len as usize;
                }
            }
            Incoming::Direct(mut d) => {
                for p in &pieces {
                    // SAFETY: this receiver's own pieces (see Scatter::slice).
                    let dst = unsafe { out.slice(p.pos, p.len) };
                    d.read(dst)
                        .await
                        .map_err(|e| Error::transport(pool.name(server), e))?;
                }
                d.finish()
                    .map_err(|e| Error::transport(pool.name(server), e))?;
            }
        }
        if header.is_end() {
            let mut rest = Vec::new();
            if cursor.take(u64::MAX, &mut rest) != 0 {
                return Err(fail("ended a read early"));
            }
            return Ok(local_size);
        }
    }
}

/// Zeroes the parts of datafile `idx`'s pieces that lie past its local size.
fn zero_unfilled(stripe: Stripe, idx: u64, regions: &Regions, local_size: u64, buf: &mut [u8]) {
    for p in stripe.pieces(idx, regions) {
        let have = local_size.saturating_sub(p.local).min(p.len);
        if have < p.len {
            buf[(p.pos + have) as usize..(p.pos + p.len) as usize].fill(0);
        }
    }
}

/// Stats of every datafile of a layout for a file's size: asked of the datafiles
/// within its width (the others are empty, by the layout's invariant), which must
/// come from attributes fetched for this answer: a width held since an earlier one
/// may have grown since.
pub(crate) async fn sized_stats(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
) -> Result<Vec<DatafileStat>> {
    let which: Vec<usize> = layout.sized().collect();
    let mut stats = datafile_stats(pool, creds, layout, &which).await?;
    stats.resize(layout.datafiles.len(), DatafileStat::default());
    Ok(stats)
}

/// Sizes and mtimes of the datafiles at positions `which` of a layout, one request
/// per data server (in parallel); answers in the order of `which`.
pub(crate) async fn datafile_stats(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    which: &[usize],
) -> Result<Vec<DatafileStat>> {
    if layout.replicas > 1 {
        return copies_stats(pool, creds, layout, which).await;
    }
    let mut by_server: Vec<(usize, Vec<(usize, Handle)>)> = Vec::new();
    for (pos, &i) in which.iter().enumerate() {
        let df = layout.datafiles[i];
        let server = df.server as usize;
        match by_server.iter_mut().find(|(s, _)| *s == server) {
            Some((_, v)) => v.push((pos, df.handle)),
            None => by_server.push((server, vec![(pos, df.handle)])),
        }
    }
    let answers = try_join_all(by_server.iter().map(|(server, items)| async move {
        let handles = items.iter().map(|(_, h)| *h).collect();
        match pool
            .rpc(
                *server,
                creds,
                Request::GetSizes(req::GetSizes { map: None, handles }),
            )
            .await?
        {
            Response::Sizes { sizes } if sizes.len() == items.len() => Ok(sizes),
            other => Err(unexpected("GetSizes", &other)),
        }
    }))
    .await?;
    let mut out = vec![DatafileStat::default(); which.len()];
    for ((_, items), sizes) in by_server.iter().zip(answers) {
        for ((pos, _), st) in items.iter().zip(sizes) {
            out[*pos] = st;
        }
    }
    Ok(out)
}

/// [`datafile_stats`] of a layout with copies: each datafile's from a copy that is
/// up, under the map the request names (one request per datafile).
async fn copies_stats(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    which: &[usize],
) -> Result<Vec<DatafileStat>> {
    try_join_all(which.iter().map(|&i| async move {
        let df = layout.datafiles[i];
        let spread = (pool.client_id() as usize).wrapping_add(i);
        let mut route =
            Route::new(pool, creds, &df, layout.replicas, Pick::Read { spread }).await?;
        loop {
            let got = match route.target() {
                Ok((server, copies)) => {
                    let request = Request::GetSizes(req::GetSizes {
                        handles: vec![df.handle],
                        map: Some(copies.map),
                    });
                    match route.watch(server, pool.rpc(server, creds, request)).await {
                        Ok(Response::Sizes { sizes }) if sizes.len() == 1 => Ok(sizes[0]),
                        Ok(other) => Err(unexpected("GetSizes", &other)),
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            match got {
                Err(e) if route.again(&e).await => {}
                other => break other,
            }
        }
    }))
    .await
}

/// Where [`each_datafile`] sends a datafile's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendTo {
    /// To the head of its copies' chain, which passes it down (a change).
    Head,
    /// To every copy (an fsync: each makes its own copy durable).
    Every,
}

/// Sends `req(i, datafile, copies)` for each datafile `i` of `layout` it makes a
/// request for, all in parallel, where `to` says; every one must answer `Done`,
/// or `Written` (a change of the datafile's bytes, whose write verifier is noted for
/// its fsync).
async fn each_datafile(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    op: &str,
    to: SendTo,
    req: impl Fn(usize, &pvfs_proto::Datafile, Copies) -> Option<Request>,
) -> Result<()> {
    let send = async |server: usize, r: Request| {
        let handle = datafile_of(&r);
        match pool.rpc(server, creds, r).await? {
            Response::Done {} => Ok(()),
            Response::Written { verifier, .. } => {
                if let Some(h) = handle {
                    pool.unsynced.note(h, verifier);
                }
                Ok(())
            }
            other => Err(unexpected(op, &other)),
        }
    };
    let req = &req;
    let calls = layout
        .datafiles
        .iter()
        .enumerate()
        .filter(|(i, df)| req(*i, df, Copies::default()).is_some());
    try_join_all(calls.map(|(i, df)| async move {
        match to {
            SendTo::Head => {
                let mut route =
                    copies::Route::new(pool, creds, df, layout.replicas, Pick::Head).await?;
                loop {
                    let done = match route.target() {
                        Ok((server, copies)) => match req(i, df, copies) {
                            Some(r) => route.watch(server, send(server, r)).await,
                            None => Ok(()),
                        },
                        Err(e) => Err(e),
                    };
                    match done {
                        Err(e) if route.again(&e).await => {}
                        other => break other,
                    }
                }
            }
            SendTo::Every => {
                // Every copy in the chain: one that is down misses nothing it must
                // make durable (the others recorded what it missed).
                let mut route =
                    copies::Route::new(pool, creds, df, layout.replicas, Pick::Head).await?;
                loop {
                    let watched = &route;
                    let done =
                        try_join_all(watched.members().into_iter().map(|server| async move {
                            match req(i, df, Copies::default()) {
                                Some(r) => watched.watch(server, send(server, r)).await,
                                None => Ok(()),
                            }
                        }))
                        .await
                        .map(|_| ());
                    match done {
                        Err(e) if route.again(&e).await => {}
                        other => break other,
                    }
                }
            }
        }
    }))
    .await?;
    Ok(())
}

/// The datafile a request changes the bytes of, if it is one.
fn datafile_of(r: &Request) -> Option<Handle> {
    match r {
        Request::Truncate(t) => Some(t.handle),
        Request::Fallocate(f) => Some(f.handle),
        _ => None,
    }
}

/// Sets every datafile of a layout to its share of a file of `size` bytes.
pub(crate) async fn truncate(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    caps: &Granted,
    size: u64,
) -> Result<()> {
    let stripe = layout.stripe();
    each_datafile(
        pool,
        creds,
        layout,
        "Truncate",
        SendTo::Head,
        |i, df, copies| {
            Some(Request::Truncate(req::Truncate {
                handle: df.handle,
                stripe,
                index: i as u32,
                size,
                cap: caps.datafile(i).cloned(),
                copies,
            }))
        },
    )
    .await
}

/// fallocate(2) with `mode` on the file bytes `offset .. offset + len`: one request,
/// in parallel, to each data server whose datafile holds part of the range (each
/// holds one contiguous local run of it).
pub(crate) async fn fallocate(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    caps: &Granted,
    mode: u32,
    offset: u64,
    len: u64,
) -> Result<()> {
    let stripe = layout.stripe();
    let end = offset + len;
    each_datafile(
        pool,
        creds,
        layout,
        "Fallocate",
        SendTo::Head,
        |i, df, copies| {
            let idx = i as u64;
            (stripe.local_size(idx, end) > stripe.local_size(idx, offset)).then(|| {
                Request::Fallocate(req::Fallocate {
                    handle: df.handle,
                    stripe,
                    index: i as u32,
                    offset,
                    len,
                    mode,
                    cap: caps.datafile(i).cloned(),
                    copies,
                })
            })
        },
    )
    .await
}

/// Makes every datafile of a layout durable, and every metadata change acknowledged
/// so far (the file's name in its directory, its ancestors, its attributes: wherever
/// they are), as a local file system's journal does: one request per data server
/// holding a datafile and one `Sync` per metadata server, all in parallel.
pub(crate) async fn fsync(pool: &Pool, creds: &Creds, layout: &Layout) -> Result<()> {
    // The write verifier each datafile's server gave this client's first change of it
    // since its last fsync: the server refuses the fsync (EIO) if it lost power
    // since, as what was not synced may be lost.
    let seen: Vec<(Handle, u64)> = layout
        .datafiles
        .iter()
        .map(|df| (df.handle, pool.unsynced.get(df.handle)))
        .collect();
    let data = each_datafile(pool, creds, layout, "Fsync", SendTo::Every, |i, df, _| {
        Some(Request::Fsync(req::Fsync {
            handles: vec![df.handle],
            verifier: seen.get(i).map_or(0, |s| s.1),
        }))
    });
    let result = futures::future::try_join(data, sync_servers(pool, creds, false)).await;
    // Synced, or the loss reported (once, as Linux reports a writeback error once).
    if result.is_ok()
        || result
            .as_ref()
            .is_err_and(|e| e.kind == pvfs_proto::ErrorKind::Storage)
    {
        for (h, v) in seen {
            pool.unsynced.synced(h, v);
        }
    }
    result.map(|_| ())
}

/// `Sync`: makes what the servers acknowledged stable on disk; to every metadata
/// server (their redo logs), or with `data` to every server (datafiles too: syncfs).
/// Syncing a log that is synced already is a no-op, so this costs a round trip; none
/// at all when the file system syncs every metadata commit (`metadata_sync =
/// "commit"`), as the configuration every client shares says.
pub(crate) async fn sync_servers(pool: &Pool, creds: &Creds, data: bool) -> Result<()> {
    if !data && pool.config().defaults.metadata_sync == pvfs_config::MetadataSync::Commit {
        return Ok(());
    }
    // With `data`, every server itself (its datafiles and its own store). Each
    // metadata group's store too, unless those cover them: a `Sync` of metadata
    // alone goes where its group is served (with standbys, the primary the map
    // names, which may hold other groups than its own).
    let mut asks: Vec<(usize, bool)> = Vec::new();
    if data {
        asks.extend((0..pool.config().servers.len()).map(|s| (s, true)));
    }
    if !data || pool.groups_move {
        asks.extend(pool.config().meta_servers().into_iter().map(|g| (g, false)));
    }
    try_join_all(asks.into_iter().map(|(server, data)| async move {
        // A server the authority calls down has nothing new to sync.
        match pool
            .rpc_unless_down(server, creds, Request::Sync(req::Sync { data }))
            .await?
        {
            Some(Response::Done {}) | None => Ok(()),
            Some(other) => Err(unexpected("Sync", &other)),
        }
    }))
    .await?;
    Ok(())
}

/// Deletes the datafiles of a removed file, one request per data server, with the
/// REMOVE `tickets` the removal granted. Failures, and copies on servers that are
/// down, leave orphans for fsck; the removal itself already happened.
pub(crate) async fn remove_datafiles(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    tickets: &[Capability],
) {
    let mut by_server: Vec<(usize, Vec<Handle>)> = Vec::new();
    // Every copy of every datafile goes, an heir's too.
    let map = pool.cached_map();
    let copies = layout.datafiles.iter().flat_map(|df| {
        pvfs_proto::map::holders_of(map.as_deref(), layout.replicas, df)
            .into_iter()
            .map(move |s| (s as usize, df.handle))
    });
    for (server, handle) in copies {
        match by_server.iter_mut().find(|(s, _)| *s == server) {
            Some((_, v)) => v.push(handle),
            None => by_server.push((server, vec![handle])),
        }
    }
    let results =
        futures::future::join_all(by_server.into_iter().map(|(server, handles)| async move {
            (server, {
                let tickets = tickets
                    .iter()
                    .filter(|t| handles.contains(&t.handle))
                    .cloned()
                    .collect();
                // A copy on a server the map calls down is left (the map is
                // watched, so a server cut off holds the removal up no longer than
                // it takes the map to say so).
                pool.rpc_unless_down(
                    server,
                    creds,
                    Request::RemoveDatafiles(req::RemoveDatafiles { handles, tickets }),
                )
                .await
            })
        }))
        .await;
    for (server, r) in results {
        match r {
            Ok(Some(_)) => {}
            Ok(None) => tracing::warn!(
                server = pool.name(server),
                "datafiles left behind on a server that is down (fsck removes them)"
            ),
            Err(e) => tracing::warn!(
                server = pool.name(server),
                "datafiles left behind (fsck removes them): {e}"
            ),
        }
    }
}
