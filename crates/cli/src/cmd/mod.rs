//! One module per subcommand (related ones share a module).

pub mod admin;
pub mod bench;
pub mod bench_mixed;
pub mod cat;
pub mod cp;
pub mod demo;
pub mod fsck;
pub mod genconfig;
pub mod keygen;
pub mod layout;
pub mod mount;
pub mod namespace;
pub mod scrub;
pub mod server;
pub mod top;

use std::path::Path;

use anyhow::Context;
use pvfs_client::Client;
use pvfs_config::Config;

/// A command called the wrong way, found after its arguments parsed (e.g. `pvfs cp`
/// with no pvfs path): the CLI exits with status 2, as for a parse error.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The path in the file system that a command-line argument names: `/dir/f` as it
/// is, or with the prefix that `pvfs cp` needs to tell pvfs paths from local ones
/// (`pvfs:/dir/f`, or the URL form `pvfs:///dir/f`), so a path copied from one
/// command works in every other.
pub fn fs_path(arg: &str) -> Result<String, String> {
    Ok(strip_prefix(arg).unwrap_or(arg).to_string())
}

/// The pvfs path of an argument written with the `pvfs:` prefix (`pvfs:/x`,
/// `pvfs:///x`); None for one without it (a local path, for `pvfs cp`).
pub fn strip_prefix(arg: &str) -> Option<&str> {
    let rest = arg.strip_prefix("pvfs:")?;
    Some(match rest.strip_prefix("//") {
        Some(path) if path.starts_with('/') => path,
        _ => rest,
    })
}

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

/// Runs `f` with a client of the configured file system. With `PVFS_STATS=1` in the
/// environment, the requests the client sent are printed on stderr at the end (see
/// [`print_stats`]).
pub fn with_client<T, F, Fut>(config: &Path, f: F) -> anyhow::Result<T>
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let config = load_config(config)?;
    let rt = runtime()?;
    let (result, client) = rt.block_on(async move {
        let client = Client::new(config);
        (f(client.clone()).await, client)
    });
    if std::env::var_os("PVFS_STATS").is_some_and(|v| v == "1") {
        print_stats(&client);
    }
    result
}

/// Prints one line with the requests `client` sent, in total, per server and per
/// operation, e.g. `pvfs: requests: 9 total; per server: s0=3 s1=2 ...; per
/// operation: Lookup=1 ReadDir=4 ...`, so the number of messages an operation costs
/// is observable.
pub fn print_stats(client: &Client) {
    let stats = client.stats();
    let servers: Vec<String> = client
        .config()
        .servers
        .iter()
        .zip(stats.per_server())
        .map(|(s, n)| format!("{}={n}", s.name))
        .collect();
    let ops: Vec<String> = stats
        .per_op()
        .iter()
        .map(|(op, n)| format!("{op}={n}"))
        .collect();
    eprintln!(
        "pvfs: requests: {} total; per server: {}; per operation: {}",
        stats.total(),
        servers.join(" "),
        ops.join(" ")
    );
}
