//! `Rebalance`: `pvfs rebalance` (`docs/replication.md`, "Rebalance"): each data
//! server added to the file system is handed a share of every other data server's
//! places of replicated datafiles; it copies them as an heir does
//! (`crate::rebuild`), and once it rebuilt them the servers that handed them shed
//! their copies.

use pvfs_proto::map::{ClusterMap, ServerState};
use pvfs_proto::{req, Changed, Errno, Response, Roles};

use crate::ctx::Ctx;
use crate::error::{OpError, OpResult};
use crate::op::{Access, Answer, Cx, Handler};

/// Proposes `Rebalance` for each server handed a share: every data server not gone
/// nor leaving hands `1/n` of its places to each (`n`: how many such data servers
/// there are, the new ones among them). EINVAL when there is nothing to rebalance
/// or a server named is not a data server that stays; EBUSY while a data server is
/// not up.
impl Handler for req::Rebalance {
    fn access(&self) -> Access<'_> {
        Access::Admin
    }

    fn changes(&self) -> Vec<Changed> {
        Vec::new()
    }

    async fn run(self, cx: Cx<'_>) -> OpResult<Answer> {
        let ctx = cx.ctx;
        let map = ctx.lease.map()?;
        let plan = plan(ctx, &map, &self.to)?;
        for &to in &plan.to {
            if !ctx
                .lease
                .propose_rebalance(to, plan.handing_to(to), plan.share)
                .await?
            {
                return Err(OpError::busy(
                    Errno::EAGAIN,
                    format!(
                        "the authority did not record the rebalance to {}",
                        name(ctx, to)
                    ),
                ));
            }
        }
        let map = ctx.lease.map()?;
        Ok(Response::Map { map }.into())
    }
}

/// What a rebalance hands: to each of `to`, `1/share` of the places of each
/// server of `staying` but itself.
struct Plan {
    to: Vec<u32>,
    staying: Vec<u32>,
    share: u32,
}

impl Plan {
    fn handing_to(&self, to: u32) -> Vec<u32> {
        self.staying
            .iter()
            .copied()
            .filter(|&s| s != to && !self.to.contains(&s))
            .collect()
    }
}

fn name(ctx: &Ctx, s: u32) -> String {
    ctx.config
        .servers
        .get(s as usize)
        .map_or_else(|| format!("server {s}"), |c| c.name.clone())
}

/// The servers handed a share (`to`, or every data server added and handed
/// nothing yet), checked.
fn plan(ctx: &Ctx, map: &ClusterMap, to: &[u32]) -> OpResult<Plan> {
    let data: Vec<u32> = (0..ctx.config.servers.len() as u32)
        .filter(|&s| ctx.config.servers[s as usize].roles.contains(Roles::DATA))
        .collect();
    let stays = |s: u32| {
        map.servers
            .get(s as usize)
            .is_some_and(|e| !e.state.gone() && !e.leaving)
    };
    let staying: Vec<u32> = data.iter().copied().filter(|&s| stays(s)).collect();
    let targets: Vec<u32> = if to.is_empty() {
        staying
            .iter()
            .copied()
            .filter(|&s| {
                map.servers
                    .get(s as usize)
                    .is_some_and(|e| e.grown && e.hands.is_empty())
            })
            .collect()
    } else {
        let mut t = to.to_vec();
        t.sort_unstable();
        t.dedup();
        t
    };
    if targets.is_empty() {
        return Err(OpError::invalid(
            Errno::EINVAL,
            "nothing to rebalance: no data server was added (pvfs server add) that has not \
             been handed its share already",
        ));
    }
    for &t in &targets {
        if !data.contains(&t) {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!("{} is not a data server of the configuration", name(ctx, t)),
            ));
        }
        if !stays(t) {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!("{} is retired, lost or being drained", name(ctx, t)),
            ));
        }
        if map
            .servers
            .get(t as usize)
            .is_some_and(|e| !e.hands.is_empty())
        {
            return Err(OpError::invalid(
                Errno::EINVAL,
                format!(
                    "nothing to rebalance: {} was handed its share already",
                    name(ctx, t)
                ),
            ));
        }
    }
    let down: Vec<String> = staying
        .iter()
        .copied()
        .filter(|&s| map.state(s) != Some(ServerState::Up))
        .map(|s| {
            format!(
                "{} is {}",
                name(ctx, s),
                map.state(s).map_or("unknown", |st| st.name())
            )
        })
        .collect();
    if !down.is_empty() {
        return Err(OpError::busy(
            Errno::EBUSY,
            format!(
                "servers down: {}; a rebalance starts only while every data server is up",
                down.join(", ")
            ),
        ));
    }
    if staying.len() == targets.len() {
        return Err(OpError::invalid(
            Errno::EINVAL,
            "nothing to rebalance: no other data server holds copies",
        ));
    }
    Ok(Plan {
        to: targets,
        share: staying.len() as u32,
        staying,
    })
}
