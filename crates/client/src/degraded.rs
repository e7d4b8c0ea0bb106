//! Answers with what the live servers know (Cope et al., 2005, §7: `ls` must not hang
//! or give up because one server is down). A listing is the union of the shards whose
//! servers answered, with the errors of the others.

use futures::future::join_all;
use pvfs_proto::{Attr, DirEntry, Errno};

use crate::error::{Error, Result};
use crate::namespace::Dir;
use crate::Client;

/// A directory listing that may be missing the shards of unreachable servers.
pub struct PartialListing {
    /// Entries of the shards that answered, each with its attributes (or why not) and
    /// whether a file's size is known (it is not when one of its data servers is down;
    /// the other attributes are still right).
    pub entries: Vec<(DirEntry, Result<Attr>, bool)>,
    /// One error per server whose shard could not be read.
    pub missing: Vec<Error>,
}

impl Client {
    /// Lists directory `path` from every shard whose server answers; the others are
    /// reported in `missing`. With `attrs`, each entry comes with its attributes (file
    /// sizes too when `sizes`), else with ENODATA. Fails only if the directory itself
    /// cannot be reached.
    pub async fn readdir_partial(
        &self,
        path: &str,
        attrs: bool,
        sizes: bool,
    ) -> Result<PartialListing> {
        let attr = self.walk(path, true).await.map_err(|e| e.for_path(path))?;
        let dir = Dir::from_attr(attr).map_err(|_| Error::at(Errno::ENOTDIR, path))?;
        let servers = self
            .inner
            .place
            .shard_servers(self.config(), dir.handle, dir.shards);
        let parts = join_all(servers.iter().map(|&s| self.readdir_server(dir.handle, s))).await;
        let mut entries = Vec::new();
        let mut missing = Vec::new();
        for part in parts {
            match part {
                Ok(v) => entries.extend(v),
                // A server that cannot be reached leaves a gap; any other answer (no
                // permission to list, say) is the answer for the whole directory.
                Err(e) if unreachable(e.errno) => missing.push(e),
                Err(e) => return Err(e.for_path(path)),
            }
        }
        let entries = if attrs {
            let plain = self.list_attrs(&entries).await;
            let mut sized = plain.clone();
            if sizes {
                self.fill_sizes(&mut sized).await;
                self.fill_dirs(sized.iter_mut().filter_map(|a| a.as_mut().ok()).collect())
                    .await;
            }
            entries
                .into_iter()
                .zip(plain.into_iter().zip(sized))
                .map(|(e, pair)| match pair {
                    (_, Ok(a)) => (e, Ok(a), sizes),
                    (Ok(a), Err(_)) => (e, Ok(a), false),
                    (Err(err), _) => (e, Err(err), false),
                })
                .collect()
        } else {
            entries
                .into_iter()
                .map(|e| {
                    (
                        e,
                        Err(Error::new(Errno::ENODATA, "attributes not asked for")),
                        false,
                    )
                })
                .collect()
        };
        Ok(PartialListing { entries, missing })
    }
}

/// Whether an errno means the server could not be asked (down, hung, gone).
fn unreachable(e: Errno) -> bool {
    matches!(
        e,
        Errno::EHOSTDOWN | Errno::ETIMEDOUT | Errno::EIO | Errno::ECONNREFUSED | Errno::ECONNRESET
    )
}
