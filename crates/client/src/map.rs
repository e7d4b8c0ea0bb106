//! The cluster map: which servers the authority counts as alive
//! (`docs/replication.md`). Asked of the authority's members first, which know it
//! first, then of any other server.

use crate::error::{Error, Result};
use crate::pool::unexpected;
use crate::Client;
use pvfs_proto::map::ClusterMap;
use pvfs_proto::{req, Errno, Request, Response};

impl Client {
    /// The newest cluster map a server answers, or `None` when the file system has
    /// no authority (`[replication] authority` is empty). Fails only when no server
    /// answers.
    pub async fn cluster_map(&self) -> Result<Option<ClusterMap>> {
        if self.config().replication.authority.is_empty() {
            return Ok(None);
        }
        self.inner.pool.fetch_map(&self.creds).await.map(Some)
    }

    /// The newest cluster map of those every server tells, all asked at once (what
    /// `pvfs status` shows: a server that has just woken still tells the map it went
    /// to sleep with), or `None` without an authority. Fails only when no server
    /// answers.
    pub async fn newest_cluster_map(&self) -> Result<Option<ClusterMap>> {
        if self.config().replication.authority.is_empty() {
            return Ok(None);
        }
        self.inner.pool.newest_map(&self.creds).await.map(Some)
    }

    /// Starts draining server `name` (`pvfs server drain`): its heirs take copies
    /// of everything it holds while it serves on, and it is retired once they hold
    /// them (`docs/replication.md`, "Drain"). Asked of the other servers in turn,
    /// the authority's members first; the map after it.
    pub async fn drain(&self, name: &str) -> Result<ClusterMap> {
        let config = self.config();
        let Some(server) = config.server_index(name) else {
            return Err(Error::new(
                Errno::EINVAL,
                format!("no server {name:?} in the configuration"),
            ));
        };
        self.ask_for_map("Drain", || {
            Request::Drain(req::Drain {
                server: server as u32,
            })
        })
        .await
    }

    /// `pvfs rebalance`: hands each data server of `names` (none: every one added
    /// to the file system and handed nothing yet) a share of the other data
    /// servers' copies (`docs/replication.md`, "Rebalance"); the map after it.
    pub async fn rebalance(&self, names: &[String]) -> Result<ClusterMap> {
        let config = self.config();
        let mut to = Vec::with_capacity(names.len());
        for name in names {
            let Some(server) = config.server_index(name) else {
                return Err(Error::new(
                    Errno::EINVAL,
                    format!("no server {name:?} in the configuration"),
                ));
            };
            to.push(server as u32);
        }
        self.ask_for_map("Rebalance", || {
            Request::Rebalance(req::Rebalance { to: to.clone() })
        })
        .await
    }

    /// Asks the servers in turn, the authority's members first, until one answers
    /// `request()` with a map, or refuses it for what it is.
    async fn ask_for_map(&self, op: &str, request: impl Fn() -> Request) -> Result<ClusterMap> {
        let config = self.config();
        let members = config.replication.authority.iter().copied();
        let others =
            (0..config.servers.len()).filter(|i| !config.replication.authority.contains(i));
        let mut last = Error::new(Errno::EHOSTDOWN, "no server answered");
        for i in members.chain(others) {
            match self.rpc(i, request()).await {
                Ok(Response::Map { map }) => return Ok(map),
                Ok(other) => return Err(unexpected(op, &other)),
                // Refused for what it is (not up, no authority): no other server
                // answers otherwise.
                Err(e)
                    if !matches!(
                        e.errno,
                        Errno::EHOSTDOWN | Errno::ETIMEDOUT | Errno::ECONNREFUSED | Errno::EAGAIN
                    ) =>
                {
                    return Err(e)
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}
