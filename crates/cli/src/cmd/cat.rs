//! `pvfs cat`: files to standard output, as cat(1) prints them.
//!
//! Each file is read in chunks of whole stripe rows (every data server gets its share
//! of a chunk in one request), the next chunk on the wire while the last one is
//! written out.

use std::process::ExitCode;

use clap::Args;
use futures::{stream, StreamExt, TryStreamExt};
use pvfs_client::File;
use tokio::io::AsyncWriteExt;

use crate::cmd::{fs_path, with_client};
use crate::ConfigArg;

/// Options of `pvfs cat`.
#[derive(Args)]
pub struct CatArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Files to print, one after the other (`/f`, or `pvfs:/f` as `pvfs cp` writes it).
    #[arg(required = true, value_parser = fs_path)]
    paths: Vec<String>,
}

/// Bytes a chunk holds at most (rounded down to whole stripe rows).
const CHUNK: u64 = 8 << 20;

/// Prints every file. A reader that goes away (`pvfs cat f | head`) ends it quietly.
pub fn run(a: CatArgs) -> anyhow::Result<ExitCode> {
    let config_path = a.config.config.clone();
    with_client(&config_path, |client| async move {
        let mut out = tokio::io::stdout();
        for p in &a.paths {
            let file = client.open(p).await?;
            match print(&file, &mut out).await {
                Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
                r => r?,
            }
        }
        match out.flush().await {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            r => r?,
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Writes `file` to `out`: the size it has when opened, then whatever was appended
/// meanwhile, until a read finds nothing more.
async fn print(file: &File, out: &mut tokio::io::Stdout) -> anyhow::Result<()> {
    let row = {
        let l = file.layout();
        (l.stripe_size * l.datafiles.len() as u64).max(1)
    };
    let chunk = (CHUNK / row * row).max(row);
    let size = file.size().await?;
    let read = |off: u64| async move {
        let mut buf = vec![0; (size - off).min(chunk) as usize];
        let n = file.read_at(off, &mut buf).await?;
        buf.truncate(n);
        Ok::<_, anyhow::Error>(buf)
    };
    let mut chunks = stream::iter((0..size).step_by(chunk as usize))
        .map(read)
        .buffered(2);
    let mut off = 0;
    while let Some(buf) = chunks.try_next().await? {
        let whole = buf.len() as u64 == (size - off).min(chunk);
        off += buf.len() as u64;
        out.write_all(&buf).await?;
        if !whole {
            break; // Cut short meanwhile: go on from where it ended.
        }
    }
    drop(chunks);
    let mut buf = vec![0; chunk as usize];
    loop {
        let n = file.read_at(off, &mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        out.write_all(&buf[..n]).await?;
        off += n as u64;
    }
}
