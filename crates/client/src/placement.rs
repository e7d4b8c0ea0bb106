//! Where things live, computed from the configuration alone (no lookup service):
//! the owner of a handle from the handle ranges, the server of a directory shard from
//! the directory's owner and the shard number (docs/namespace.md).

use pvfs_config::Config;
use pvfs_proto::{name_shard, Handle};

/// Placement rules of one file system.
pub(crate) struct Placement {
    /// Indices of the metadata servers, in configuration order.
    metas: Vec<usize>,
}

impl Placement {
    pub fn new(config: &Config) -> Placement {
        Placement {
            metas: config.meta_servers(),
        }
    }

    /// The server holding shard `shard` of directory `dir`: shard k lives on the k-th
    /// metadata server after the directory's owner (shard 0 with the directory).
    pub fn shard_server(&self, config: &Config, dir: Handle, shard: u32) -> usize {
        config.shard_server_in(&self.metas, dir, shard)
    }

    /// The server holding entry `name` of directory `dir` with `shards` shards; a new
    /// object named `name` is created there too.
    pub fn entry_server(&self, config: &Config, dir: Handle, shards: u32, name: &str) -> usize {
        self.shard_server(config, dir, name_shard(name, shards))
    }

    /// The distinct servers holding shards of `dir`, in shard order (with more shards
    /// than metadata servers a server holds several shards, and answers for all of them
    /// at once).
    pub fn shard_servers(&self, config: &Config, dir: Handle, shards: u32) -> Vec<usize> {
        let mut out = Vec::new();
        for k in 0..shards.min(self.metas.len() as u32) {
            let s = self.shard_server(config, dir, k);
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }
}
