//! The cluster map: which servers the authority counts as alive
//! (`docs/replication.md`). Asked of the authority's members first, which know it
//! first, then of any other server.

use crate::error::Result;
use crate::Client;
use pvfs_proto::map::ClusterMap;

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
}
