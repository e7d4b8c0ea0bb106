//! `scrub`: has every data server check every block of the datafiles it holds
//! against its checksum, mending a damaged one from another copy
//! (`docs/storage-format.md`, "Checksums").
//!
//! The datafiles come from the layouts of every file, read a page at a time from
//! every metadata group (as fsck reads them), so each server learns which servers
//! hold the other copies of each. The servers pace their reads (`[replication]
//! scrub_bandwidth`) and answer within a third of their request timeout, saying how
//! far they got; the scrub goes on from there, on every server at once. A pass that
//! reached a server whole makes its sums sure again when a reboot had left them
//! unsure.

use std::collections::BTreeMap;

use pvfs_proto::message::scrub;
use pvfs_proto::{req, Handle, ObjDetail, Request, Response};

use crate::error::Result;
use crate::pool::unexpected;
use crate::Client;

/// Datafiles named per `Scrub`.
const BATCH: usize = 64;

/// What a scrub found, over every data server.
#[derive(Clone, Debug, Default)]
pub struct ScrubReport {
    /// Copies of datafiles checked.
    pub datafiles: u64,
    /// Bytes checked.
    pub bytes: u64,
    /// Blocks found not matching their checksum.
    pub damaged: u64,
    /// Of them, those copied again from another copy.
    pub mended: u64,
    /// Of them, those summed again from their bytes (sums unsure since a reboot,
    /// no other copy).
    pub resummed: u64,
    /// Blocks left damaged: (server name, datafile, offset).
    pub unmended: Vec<(String, Handle, u64)>,
    /// Servers whose sums are still unsure since a reboot.
    pub unsure: Vec<String>,
}

impl Client {
    /// Scrubs every datafile of every layout on every data server.
    pub async fn scrub(&self) -> Result<ScrubReport> {
        // Server -> (datafile, its copies' servers; empty for one copy). Servers
        // gone for good hold nothing: their heirs hold their copies.
        let map = self.cluster_map().await?;
        let gone = |i: usize| {
            map.as_ref()
                .and_then(|m| m.state(i as u32))
                .is_some_and(|s| s.gone())
        };
        let mut by_server: BTreeMap<usize, Vec<(Handle, Vec<u32>)>> = BTreeMap::new();
        for (i, sc) in self.config().servers.iter().enumerate() {
            if sc.roles.contains(pvfs_proto::Roles::DATA) && !gone(i) {
                by_server.insert(i, Vec::new());
            }
        }
        for i in 0..self.config().servers.len() {
            if !self.config().servers[i]
                .roles
                .contains(pvfs_proto::Roles::META)
            {
                continue;
            }
            for attr in self.scan_objects(i).await? {
                let ObjDetail::File { layout } = &attr.detail else {
                    continue;
                };
                for df in &layout.datafiles {
                    let copies: Vec<u32> = df.replicas().collect();
                    let listed = if copies.len() > 1 {
                        copies.clone()
                    } else {
                        Vec::new()
                    };
                    for s in pvfs_proto::map::holders_of(map.as_ref(), layout.replicas, df) {
                        if let Some(v) = by_server.get_mut(&(s as usize)) {
                            v.push((df.handle, listed.clone()));
                        }
                    }
                }
            }
        }
        let pass = pvfs_proto::clock::random_u64();
        // Every server at once: each paces its own reads.
        let each = futures::future::join_all(
            by_server
                .into_iter()
                .map(|(server, datafiles)| self.scrub_server(server, datafiles, pass)),
        )
        .await;
        let mut report = ScrubReport::default();
        for one in each {
            let one = one?;
            report.datafiles += one.datafiles;
            report.bytes += one.bytes;
            report.damaged += one.damaged;
            report.mended += one.mended;
            report.resummed += one.resummed;
            report.unmended.extend(one.unmended);
            report.unsure.extend(one.unsure);
        }
        Ok(report)
    }

    /// Scrubs `datafiles` (with their copies' servers) on `server`, one pass.
    async fn scrub_server(
        &self,
        server: usize,
        mut datafiles: Vec<(Handle, Vec<u32>)>,
        pass: u64,
    ) -> Result<ScrubReport> {
        datafiles.sort_unstable();
        datafiles.dedup();
        let name = self.server_name(server).to_string();
        let mut report = ScrubReport {
            datafiles: datafiles.len() as u64,
            ..ScrubReport::default()
        };
        let batches: Vec<&[(Handle, Vec<u32>)]> = if datafiles.is_empty() {
            vec![&[]]
        } else {
            datafiles.chunks(BATCH).collect()
        };
        let last = batches.len() - 1;
        let mut unsure = false;
        for (b, batch) in batches.into_iter().enumerate() {
            let (mut start, mut from) = (0usize, 0u64);
            loop {
                let rest = &batch[start..];
                let mut flags = 0;
                if b == 0 && start == 0 && from == 0 {
                    flags |= scrub::FIRST;
                }
                if b == last {
                    flags |= scrub::LAST;
                }
                let request = Request::Scrub(req::Scrub {
                    handles: rest.iter().map(|(h, _)| *h).collect(),
                    copies: rest.iter().map(|(_, c)| c.clone()).collect(),
                    from,
                    pass,
                    flags,
                });
                match self.rpc(server, request).await? {
                    Response::Scrubbed {
                        done,
                        at,
                        bytes,
                        damaged,
                        mended,
                        resummed,
                        unmended,
                        unsure: still,
                    } if done as usize <= rest.len() => {
                        report.bytes += bytes;
                        report.damaged += damaged;
                        report.mended += mended;
                        report.resummed += resummed;
                        report
                            .unmended
                            .extend(unmended.into_iter().map(|(h, o)| (name.clone(), h, o)));
                        unsure = still;
                        start += done as usize;
                        from = at;
                        if start == batch.len() {
                            break;
                        }
                    }
                    other => return Err(unexpected("Scrub", &other)),
                }
            }
        }
        if unsure {
            report.unsure.push(name);
        }
        Ok(report)
    }
}
