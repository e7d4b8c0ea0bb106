//! Striped I/O: one call becomes one request per involved data server, each carrying
//! the whole region description; data streams in bounded chunks in both directions.
//!
//! Writes gather each server's bytes straight from the caller's buffer into vectored
//! socket writes (no staging copy). Reads scatter each arriving chunk into the
//! caller's buffer at the positions the stripe arithmetic gives. Data servers cut a
//! read at their datafile's end; bytes past it are holes (zeros) unless the file ends
//! before them, which the client settles from the datafile sizes (design §4).

use futures::future::try_join_all;
use pvfs_proto::layout::{clip_pieces, Layout, Piece, PieceCursor};
use pvfs_proto::message::DatafileStat;
use pvfs_proto::{encode, Creds, Errno, Handle, Regions, Request, RequestBody, Response, Stripe};
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::pool::{unexpected, Pool, CHUNK};

/// Checks that a buffer matches its region description.
fn check(regions: &Regions, buf_len: usize) -> Result<()> {
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

/// Writes `buf` to the bytes `regions` describe (in stream order); returns bytes written.
pub(crate) async fn write(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    regions: &Regions,
    buf: &[u8],
    sync: bool,
) -> Result<u64> {
    check(regions, buf.len())?;
    let stripe = layout.stripe();
    let jobs = (0..stripe.count).filter_map(|idx| {
        let bytes = stripe.bytes_on(idx, regions);
        (bytes > 0).then(|| write_one(pool, creds, layout, stripe, idx, regions, buf, bytes, sync))
    });
    let written = try_join_all(jobs).await?;
    Ok(written.iter().sum())
}

#[allow(clippy::too_many_arguments)]
async fn write_one(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    stripe: Stripe,
    idx: u64,
    regions: &Regions,
    buf: &[u8],
    bytes: u64,
    sync: bool,
) -> Result<u64> {
    let df = layout.datafiles[idx as usize];
    let server = df.server as usize;
    let body = encode(&RequestBody {
        creds: creds.clone(),
        request: Request::Write {
            handle: df.handle,
            stripe,
            index: idx as u32,
            regions: regions.clone(),
            sync,
        },
    });
    let mut cursor = PieceCursor::new(stripe.pieces(idx, regions));
    let mut pieces = Vec::new();
    let mut remaining = bytes;
    let n = cursor.take((CHUNK as u64).min(remaining), &mut pieces);
    remaining -= n;
    let mut call = pool
        .start(server, "Write", &body, &slices(buf, &pieces), remaining == 0)
        .await?;
    while remaining > 0 {
        pieces.clear();
        let n = cursor.take((CHUNK as u64).min(remaining), &mut pieces);
        assert!(n > 0, "stream shorter than its byte count");
        remaining -= n;
        call.send_data(&slices(buf, &pieces), remaining == 0)
            .await
            .map_err(|e| Error::transport(pool.name(server), e))?;
    }
    let frame = pool.recv(server, &mut call).await?;
    match pool.response(server, &frame)? {
        Response::Written { bytes: done } if done == bytes => Ok(done),
        Response::Written { bytes: done } => Err(Error::new(
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

/// Reads the bytes `regions` describe into `buf` (stream order); holes read as
/// zeros. Returns the file's size when the read reached past the end of the data,
/// otherwise a lower bound of it that covers the whole request.
pub(crate) async fn read(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    regions: &Regions,
    buf: &mut [u8],
) -> Result<u64> {
    check(regions, buf.len())?;
    if buf.is_empty() {
        return Ok(0);
    }
    let stripe = layout.stripe();
    let involved: Vec<u64> = (0..stripe.count)
        .filter(|&idx| stripe.pieces(idx, regions).next().is_some())
        .collect();
    // Receivers only forward frames; the single consumer below owns `buf`.
    let (tx, mut rx) = mpsc::channel::<(usize, pvfs_transport::Frame)>(16);
    let receivers = try_join_all(involved.iter().enumerate().map(|(slot, &idx)| {
        let tx = tx.clone();
        async move {
            let df = layout.datafiles[idx as usize];
            let server = df.server as usize;
            let body = encode(&RequestBody {
                creds: creds.clone(),
                request: Request::Read {
                    handle: df.handle,
                    stripe,
                    index: idx as u32,
                    regions: regions.clone(),
                },
            });
            let mut call = pool.start(server, "Read", &body, &[], true).await?;
            loop {
                let frame = pool.recv(server, &mut call).await?;
                let end = frame.header.is_end();
                if tx.send((slot, frame)).await.is_err() {
                    return Ok(()); // the consumer failed and reported it
                }
                if end {
                    return Ok(());
                }
            }
        }
    }));
    drop(tx);
    let involved_ref = &involved;
    let consumer = async move {
        let involved = involved_ref;
        let mut local_sizes: Vec<Option<u64>> = vec![None; involved.len()];
        let mut cursors: Vec<Option<_>> = (0..involved.len()).map(|_| None).collect();
        let mut pieces = Vec::new();
        while let Some((slot, frame)) = rx.recv().await {
            let idx = involved[slot];
            let server = layout.datafiles[idx as usize].server as usize;
            if frame.header.kind == pvfs_proto::FrameKind::Response {
                match pool.response(server, &frame)? {
                    Response::ReadStart { local_size } if local_sizes[slot].is_none() => {
                        local_sizes[slot] = Some(local_size);
                        cursors[slot] = Some(PieceCursor::new(clip_pieces(
                            stripe.pieces(idx, regions),
                            local_size,
                        )));
                    }
                    other => return Err(unexpected("Read", &other)),
                }
            }
            let Some(cursor) = cursors[slot].as_mut() else {
                return Err(Error::new(Errno::EPROTO, "read data before its start"));
            };
            pieces.clear();
            let n = cursor.take(frame.data.len() as u64, &mut pieces);
            if n != frame.data.len() as u64 {
                return Err(Error::new(
                    Errno::EPROTO,
                    format!("server {} sent more than was asked", pool.name(server)),
                ));
            }
            let mut at = 0usize;
            for p in &pieces {
                let len = p.len as usize;
                let pos = p.pos as usize;
                buf[pos..pos + len].copy_from_slice(&frame.data[at..at + len]);
                at += len;
            }
            if frame.header.is_end() {
                let mut rest = Vec::new();
                if cursor.take(u64::MAX, &mut rest) != 0 {
                    return Err(Error::new(
                        Errno::EPROTO,
                        format!("server {} ended a read early", pool.name(server)),
                    ));
                }
            }
        }
        Ok::<_, Error>((local_sizes, buf))
    };
    let (received, consumed) = tokio::join!(receivers, consumer);
    received?;
    let (local_sizes, buf) = consumed?;
    let mut known = 0u64;
    for (slot, &idx) in involved.iter().enumerate() {
        let local = local_sizes[slot].ok_or_else(|| Error::new(Errno::EPROTO, "read answer missing"))?;
        known = known.max(stripe.logical_end(idx, local));
        zero_unfilled(stripe, idx, regions, local, buf);
    }
    if known >= regions.end() {
        return Ok(known);
    }
    // The request reaches past what the involved datafiles hold: the other datafiles
    // decide whether those bytes are holes or past the end of the file.
    let others: Vec<usize> = (0..stripe.count as usize)
        .filter(|i| !involved.contains(&(*i as u64)))
        .collect();
    let sizes = datafile_stats(pool, creds, layout, &others).await?;
    for (i, st) in others.iter().zip(sizes) {
        known = known.max(stripe.logical_end(*i as u64, st.size));
    }
    Ok(known)
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

/// Sizes and mtimes of the datafiles at positions `which` of a layout, one request
/// per data server (in parallel); answers in the order of `which`.
pub(crate) async fn datafile_stats(
    pool: &Pool,
    creds: &Creds,
    layout: &Layout,
    which: &[usize],
) -> Result<Vec<DatafileStat>> {
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
        match pool.rpc(*server, creds, Request::GetSizes { handles }).await? {
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

/// Sets every datafile of a layout to its share of a file of `size` bytes.
pub(crate) async fn truncate(pool: &Pool, creds: &Creds, layout: &Layout, size: u64) -> Result<()> {
    let stripe = layout.stripe();
    try_join_all(layout.datafiles.iter().enumerate().map(|(i, df)| async move {
        let req = Request::Truncate {
            handle: df.handle,
            stripe,
            index: i as u32,
            size,
        };
        match pool.rpc(df.server as usize, creds, req).await? {
            Response::Done {} => Ok(()),
            other => Err(unexpected("Truncate", &other)),
        }
    }))
    .await?;
    Ok(())
}

/// Makes every datafile of a layout durable.
pub(crate) async fn fsync(pool: &Pool, creds: &Creds, layout: &Layout) -> Result<()> {
    try_join_all(layout.datafiles.iter().map(|df| async move {
        let req = Request::Fsync {
            handles: vec![df.handle],
        };
        match pool.rpc(df.server as usize, creds, req).await? {
            Response::Done {} => Ok(()),
            other => Err(unexpected("Fsync", &other)),
        }
    }))
    .await?;
    Ok(())
}

/// Deletes the datafiles of a removed file, one request per data server. Failures
/// leave orphans for fsck; the removal itself already happened.
pub(crate) async fn remove_datafiles(pool: &Pool, creds: &Creds, layout: &Layout) {
    let mut by_server: Vec<(usize, Vec<Handle>)> = Vec::new();
    for df in &layout.datafiles {
        match by_server.iter_mut().find(|(s, _)| *s == df.server as usize) {
            Some((_, v)) => v.push(df.handle),
            None => by_server.push((df.server as usize, vec![df.handle])),
        }
    }
    let results = futures::future::join_all(by_server.into_iter().map(|(server, handles)| async move {
        (server, pool.rpc(server, creds, Request::RemoveDatafiles { handles }).await)
    }))
    .await;
    for (server, r) in results {
        if let Err(e) = r {
            tracing::warn!(server = pool.name(server), "datafiles left behind (fsck removes them): {e}");
        }
    }
}
