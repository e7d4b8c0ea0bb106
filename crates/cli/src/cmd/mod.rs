//! One module per subcommand (related ones share a module).

pub mod admin;
pub mod bench;
pub mod bench_mixed;
pub mod cp;
pub mod demo;
pub mod fsck;
pub mod genconfig;
pub mod layout;
pub mod namespace;
pub mod server;

use std::path::Path;

use anyhow::Context;
use pvfs_client::Client;
use pvfs_config::Config;

/// Loads the configuration file.
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    Config::load(path).map_err(anyhow::Error::from)
}

/// A tokio runtime for a client command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs `f` with a client of the configured file system.
pub fn with_client<T, F, Fut>(config: &Path, f: F) -> anyhow::Result<T>
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let config = load_config(config)?;
    let rt = runtime()?;
    rt.block_on(async move { f(Client::new(config)).await })
}
