//! The cluster map: which servers the authority counts as alive
//! (`docs/replication.md`). Asked of the authority's members first, which know it
//! first, then of any other server.

use pvfs_proto::map::ClusterMap;
use pvfs_proto::{req, Errno, Request, Response};

use crate::error::{Error, Result};
use crate::pool::unexpected;
use crate::Client;

impl Client {
    /// The newest cluster map a server answers, or `None` when the file system has
    /// no authority (`[replication] authority` is empty). Fails only when no server
    /// answers.
    pub async fn cluster_map(&self) -> Result<Option<ClusterMap>> {
        let r = &self.config().replication;
        if r.authority.is_empty() {
            return Ok(None);
        }
        let others = (0..self.config().servers.len()).filter(|i| !r.authority.contains(i));
        let mut last = Error::new(Errno::EHOSTDOWN, "no server answered");
        for i in r.authority.iter().copied().chain(others) {
            match self.rpc(i, Request::GetMap(req::GetMap {})).await {
                Ok(Response::Map { map }) => return Ok(Some(map)),
                Ok(other) => last = unexpected("GetMap", &other),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}
