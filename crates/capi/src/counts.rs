//! The request counts of the process's client at one moment (`pvfs_client::Stats`),
//! and the difference between two: `pvfs_init` and `pvfs_stats_reset` keep one as the
//! baseline that the counting functions (`crate::stats`) subtract.

use std::collections::BTreeMap;

use pvfs_client::Client;

/// Request counts: the client's at one moment, or the difference between two.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Requests to any server.
    pub total: u64,
    /// Requests per server, in the configuration's order.
    pub per_server: Vec<u64>,
    /// Requests per operation name.
    pub per_op: BTreeMap<&'static str, u64>,
}

impl Counts {
    /// All zero, for `servers` servers.
    pub fn zero(servers: usize) -> Counts {
        Counts {
            total: 0,
            per_server: vec![0; servers],
            per_op: BTreeMap::new(),
        }
    }

    /// The client's counts now.
    pub fn now(client: &Client) -> Counts {
        let s = client.stats();
        Counts {
            total: s.total(),
            per_server: s.per_server(),
            per_op: s.per_op(),
        }
    }

    /// `self - base`, field by field.
    pub fn since(&self, base: &Counts) -> Counts {
        Counts {
            total: self.total.saturating_sub(base.total),
            per_server: self
                .per_server
                .iter()
                .enumerate()
                .map(|(i, n)| n.saturating_sub(base.per_server.get(i).copied().unwrap_or(0)))
                .collect(),
            per_op: self
                .per_op
                .iter()
                .map(|(op, n)| {
                    (
                        *op,
                        n.saturating_sub(base.per_op.get(op).copied().unwrap_or(0)),
                    )
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_subtracts_field_by_field() {
        let counts = |total, per_server: &[u64], per_op: &[(&'static str, u64)]| Counts {
            total,
            per_server: per_server.to_vec(),
            per_op: per_op.iter().copied().collect(),
        };
        let base = counts(5, &[3, 2], &[("Lookup", 4), ("Read", 1)]);
        let now = counts(12, &[3, 6, 3], &[("Lookup", 6), ("Read", 1), ("Write", 4)]);
        assert_eq!(
            now.since(&base),
            counts(7, &[0, 4, 3], &[("Lookup", 2), ("Read", 0), ("Write", 4)])
        );
        assert_eq!(now.since(&Counts::zero(3)), now);
        // A baseline above the counts (never made, but harmless) gives zeros.
        assert_eq!(Counts::zero(2).since(&base), counts(0, &[0, 0], &[]));
    }
}
