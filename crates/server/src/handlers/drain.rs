//! `Drain`: starts draining a server (`pvfs server drain`, `docs/replication.md`,
//! "Drain"): the authority names its heirs, which take copies of everything it
//! holds while it serves on (`crate::rebuild`); it is retired once they hold them.

use pvfs_proto::{req, Changed, Errno, Response};

use crate::error::{OpError, OpResult};
use crate::op::{Access, Answer, Cx, Handler};

/// Proposes `Drain` with the data and metadata servers not gone as heirs; answers
/// the map after it. EINVAL for a server the configuration lacks or one gone
/// (lost, retired), EBUSY for one in a state a drain does not start from (down,
/// recovering).
impl Handler for req::Drain {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        let Some(name) = ctx
            .config
            .servers
            .get(self.server as usize)
            .map(|s| &s.name)
        else {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!("no server {} in the configuration", self.server),
            ));
        };
        let map = ctx.lease.propose_drain(self.server).await?;
        match map.state(self.server) {
            Some(pvfs_proto::map::ServerState::Draining) => Ok(Response::Map { map }.into()),
            Some(s) if s.gone() => Err(OpError::invalid(
                Errno::EINVAL,
                format!("{name} is {} already: it holds nothing", s.name()),
            )),
            state => Err(OpError::busy(
                Errno::EBUSY,
                format!(
                    "{name} is {} under cluster map version {}: only a server that is up \
                     starts draining",
                    state.map_or("unknown", |s| s.name()),
                    map.version
                ),
            )),
        }
    }
}
