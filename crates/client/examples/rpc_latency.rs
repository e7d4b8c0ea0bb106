//! What one request to a server costs through the client library: times `OPS`
//! sequential `GetAttr`s of the root directory (one metadata server, no disk) three
//! ways: awaited by the runtime's own thread in `block_on`, by a thread outside the
//! runtime waiting in `Handle::block_on` (as the FUSE mount's threads wait), and by a
//! task of the runtime. Against a running file system:
//!
//!     cargo run --release -p pvfs-client --example rpc_latency -- CONFIG [OPS]

use std::error::Error;
use std::time::Instant;

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let config = args.next().ok_or("usage: rpc_latency CONFIG [OPS]")?;
    let ops: u32 = args.next().map_or(Ok(5000), |s| s.parse())?;
    let config = pvfs_config::Config::load(std::path::Path::new(&config))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = {
        let _ctx = rt.enter();
        pvfs_client::Client::new(config)
    };
    let root = rt.block_on(client.stat("/"))?.handle;
    let per_call = move |start: Instant| start.elapsed().as_secs_f64() * 1e6 / f64::from(ops);
    for round in 1..=3 {
        let start = Instant::now();
        rt.block_on(async {
            for _ in 0..ops {
                client.getattr(root).await?;
            }
            Ok::<_, pvfs_client::Error>(())
        })?;
        let block_on = per_call(start);

        let (handle, c) = (rt.handle().clone(), client.clone());
        let outside = std::thread::spawn(move || {
            let start = Instant::now();
            for _ in 0..ops {
                handle.block_on(c.getattr(root))?;
            }
            Ok::<_, pvfs_client::Error>(per_call(start))
        })
        .join()
        .map_err(|_| "the waiting thread panicked")??;

        let c = client.clone();
        let start = Instant::now();
        rt.block_on(rt.spawn(async move {
            for _ in 0..ops {
                c.getattr(root).await?;
            }
            Ok::<_, pvfs_client::Error>(())
        }))??;
        let task = per_call(start);
        println!(
            "round {round}: block_on {block_on:.1} us, a thread in Handle::block_on {outside:.1} us, a task {task:.1} us"
        );
    }
    Ok(())
}
