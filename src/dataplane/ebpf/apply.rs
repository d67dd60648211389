//! The eBPF mode's [`Dataplane`]: plans the maps' contents, diffs them against what the maps
//! hold and writes only the difference, in [`diff`]'s order.
//!
//! A full sync (the first, which adopts the maps a previous run pinned; a periodic resync; the
//! one after a failed write; a change of this node's topology) reads the maps back from the
//! kernel and diffs the whole plan. Any other sync plans and diffs only the service ports the
//! tracker says changed, against what the last sync left ([`diff::Held`]): its cost follows
//! what changed, not how many Services there are. A failed write stops the sync: the entries
//! written so far are consistent (see [`diff`]), and the next sync re-reads and finishes.

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::{Changes, IpFamily, ServicePortName, Snapshot};
use crate::dataplane::{Dataplane, FamilyReport, SyncError, SyncReport};

use super::backend::Backend;
use super::diff::{self, Held, Op};
use super::layout::{NpKey, SvcKey};
use super::plan::{self, NodePorts, Plan};
use super::stats::Stats;
use crate::config::NodePortAddresses;

/// The mode's name as `--proxy-mode` spells it.
pub const MODE: &str = "ebpf";

#[doc(alias = "proxier")]
pub struct EbpfDataplane<B> {
    backend: B,
    /// `nodePortAddresses`, resolved against the node at each sync.
    npa: NodePortAddresses,
    /// The NodePort addresses of the last successful sync: when they change, every NodePort
    /// frontend does, so the sync is a full one.
    node_ports: NodePorts,
    /// What the maps hold after the last successful sync; `None`: read them.
    held: Option<Held>,
    /// The frontends each service port asks for (held or lost to another), as of the last
    /// successful sync.
    wants: BTreeMap<ServicePortName, Vec<SvcKey>>,
    /// Which service ports ask for each frontend.
    claims: BTreeMap<SvcKey, BTreeSet<ServicePortName>>,
    /// Each service port's NodePort numbers, as of the last successful sync.
    np_wants: BTreeMap<ServicePortName, Vec<NpKey>>,
    /// Where the map fill levels go for the metrics.
    stats: Option<Stats>,
}

impl<B: Backend> EbpfDataplane<B> {
    pub fn new(backend: B, npa: NodePortAddresses) -> Self {
        EbpfDataplane {
            backend,
            npa,
            node_ports: NodePorts::new(),
            held: None,
            wants: BTreeMap::new(),
            claims: BTreeMap::new(),
            np_wants: BTreeMap::new(),
            stats: None,
        }
    }

    /// Records the map fill levels in `stats` after each sync.
    pub fn with_stats(mut self, stats: Stats) -> Self {
        self.stats = Some(stats);
        self
    }

    /// The service ports an incremental sync must plan: the changed ones, and every port that
    /// asks for a frontend one of those asks for (before or now), so a contested externalIP
    /// goes to the first claimant in snapshot order, as a full plan gives it. With the plan of
    /// exactly those ports.
    fn scope(&self, snapshot: &Snapshot, changes: &Changes) -> (BTreeSet<ServicePortName>, Plan) {
        let mut scope = changes.ports.clone();
        loop {
            let part = plan::plan_ports(snapshot, &self.node_ports, &scope);
            let now = part
                .frontends
                .keys()
                .chain(part.lost.iter().map(|(f, _)| f))
                .map(diff::svc_key);
            let before = scope
                .iter()
                .filter_map(|p| self.wants.get(p))
                .flatten()
                .copied();
            let keys: Vec<SvcKey> = now.chain(before).collect();
            let mut grown = false;
            for k in keys {
                for p in self.claims.get(&k).into_iter().flatten() {
                    grown |= scope.insert(p.clone());
                }
            }
            if !grown {
                return (scope, part);
            }
        }
    }

    fn forget(&mut self, port: &ServicePortName) {
        self.np_wants.remove(port);
        for k in self.wants.remove(port).unwrap_or_default() {
            if let Some(c) = self.claims.get_mut(&k) {
                c.remove(port);
                if c.is_empty() {
                    self.claims.remove(&k);
                }
            }
        }
    }

    /// Records what each service port of `plan` asks for.
    fn remember(&mut self, plan: &Plan) {
        let asked = plan
            .frontends
            .iter()
            .map(|(f, set)| (f, &set.port))
            .chain(plan.lost.iter().map(|(f, p)| (f, p)));
        for (f, port) in asked {
            let k = diff::svc_key(f);
            self.wants.entry(port.clone()).or_default().push(k);
            self.claims.entry(k).or_default().insert(port.clone());
        }
        for (&(number, transport), port) in &plan.node_port_numbers {
            self.np_wants
                .entry(port.clone())
                .or_default()
                .push(diff::np_key(number, transport));
        }
    }

    fn write(&mut self, ops: &[Op]) -> Result<(), SyncError> {
        for op in ops {
            self.backend
                .write(op)
                .map_err(|e| SyncError::refused(MODE, e))?;
        }
        Ok(())
    }
}

impl<B: Backend> Dataplane for EbpfDataplane<B> {
    fn mode(&self) -> &'static str {
        MODE
    }

    fn sync(
        &mut self,
        snapshot: &Snapshot,
        changes: &Changes,
        full: bool,
    ) -> Result<SyncReport, SyncError> {
        self.backend.refresh_external().map_err(io_error)?;
        // Taken: a failure below leaves `None`, so the next sync reads the maps again.
        let held = self.held.take();
        let node_ports = plan::node_ports(&self.npa, &snapshot.node);
        let same_node = node_ports == self.node_ports && !changes.node_topology_changed;
        let (held, ops, read) = match held {
            Some(mut held) if !full && same_node => {
                let (scope, part) = self.scope(snapshot, changes);
                let old: Vec<SvcKey> = scope
                    .iter()
                    .filter_map(|p| self.wants.get(p))
                    .flatten()
                    .copied()
                    .collect();
                let old_np: Vec<NpKey> = scope
                    .iter()
                    .filter_map(|p| self.np_wants.get(p))
                    .flatten()
                    .copied()
                    .collect();
                let (ops, _) = diff::diff_ports(&held, &part, &old, &old_np);
                self.write(&ops)?;
                held.apply(&ops);
                for p in &scope {
                    self.forget(p);
                }
                self.remember(&part);
                (held, ops, false)
            }
            _ => {
                let mut held = Held::new(self.backend.read().map_err(io_error)?);
                let want = plan::plan(snapshot, &node_ports);
                let ops = diff::diff(&held.maps, &want);
                self.write(&ops)?;
                held.apply(&ops);
                self.wants.clear();
                self.claims.clear();
                self.np_wants.clear();
                self.remember(&want);
                (held, ops, true)
            }
        };
        let objects = held.maps.svc.len() + held.maps.slots.len();
        if let Some(stats) = &self.stats {
            stats.record_entries(held.maps.svc.len(), held.maps.slots.len());
        }
        self.held = Some(held);
        self.node_ports = node_ports;
        let families = [IpFamily::V4, IpFamily::V6]
            .into_iter()
            .map(|f| {
                let missing = snapshot.no_local_endpoints(f);
                FamilyReport {
                    family: Some(f),
                    // Map entries are not per family: the IPv4 report carries the totals.
                    operations: if f == IpFamily::V4 { ops.len() } else { 0 },
                    objects: if f == IpFamily::V4 { objects } else { 0 },
                    no_local_endpoints_internal: missing.internal,
                    no_local_endpoints_external: missing.external,
                    iptables_rules: None,
                }
            })
            .collect();
        Ok(SyncReport {
            full: full || read,
            families,
            netlink_messages: 0,
        })
    }
}

fn io_error(e: super::backend::Error) -> SyncError {
    SyncError::io(MODE, e)
}

#[cfg(test)]
mod tests;
