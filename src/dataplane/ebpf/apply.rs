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
            self.backend.write(op).map_err(|e| SyncError::Refused {
                mode: MODE,
                message: crate::causes::one_line(&e),
            })?;
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
    SyncError::Io {
        mode: MODE,
        message: crate::causes::one_line(&e),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::ebpf::backend::Error;
    use crate::dataplane::ebpf::diff::{Maps, Op};
    use crate::testing::snapshots::{node, snapshot, svc};

    /// Maps in memory that refuse the write numbered `fail_at` once.
    #[derive(Default)]
    struct Fake {
        maps: Maps,
        reads: usize,
        writes: usize,
        fail_at: Option<usize>,
    }

    impl Backend for Fake {
        fn read(&mut self) -> Result<Maps, Error> {
            self.reads += 1;
            Ok(self.maps.clone())
        }
        fn write(&mut self, op: &Op) -> Result<(), Error> {
            self.writes += 1;
            if self.fail_at == Some(self.writes) {
                self.fail_at = None;
                return Err(Error::Missing("refused on purpose"));
            }
            self.maps = diff::applied(std::mem::take(&mut self.maps), std::slice::from_ref(op));
            Ok(())
        }
    }

    fn web(endpoints: &[&str]) -> Snapshot {
        let mut s = svc("default/web", "10.96.0.10", 80);
        for (i, e) in endpoints.iter().enumerate() {
            s = s.ep(e, 8080, if i % 2 == 0 { "node-a" } else { "node-b" });
        }
        snapshot(node(), vec![s])
    }

    /// The service ports that differ between two snapshots, as the tracker reports them.
    fn changes(old: &Snapshot, new: &Snapshot) -> Changes {
        let mut c = Changes::default();
        for name in old.ports.keys().chain(new.ports.keys()) {
            if old.ports.get(name) != new.ports.get(name) {
                c.ports.insert(name.clone());
            }
        }
        c
    }

    /// Each frontend with its backends as a socket program would see them; and whether any
    /// slot is left that no frontend reaches.
    fn resolved(maps: &Maps) -> (Vec<(SvcKey, Vec<std::net::SocketAddr>)>, usize) {
        let mut reached = 0;
        let mut ids = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for (k, v) in &maps.svc {
            let backends: Vec<_> = (0..v.count)
                .map(|slot| {
                    let key = crate::dataplane::ebpf::layout::SlotKey {
                        svc_id: v.svc_id,
                        slot,
                        generation: v.generation,
                        pad: 0,
                    };
                    maps.slots[&key].socket_addr()
                })
                .collect();
            if ids.insert((v.svc_id, v.generation)) {
                reached += backends.len();
            }
            out.push((*k, backends));
        }
        (out, maps.slots.len() - reached)
    }

    /// A small deterministic generator (xorshift), so the sequence is the same on every run.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Service `i` in `variant` (0: absent): few variants, so a Service often stays as it was
    /// while others change, and externalIPs are often contested.
    fn service(i: u64, variant: u64) -> Option<crate::testing::snapshots::Svc> {
        if variant == 0 {
            return None;
        }
        let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (i << 8) ^ variant);
        let mut s = svc(&format!("default/s{i}"), &format!("10.96.0.{}", 10 + i), 80);
        if rng.below(2) == 0 {
            s = s.external(&format!("192.0.2.{}", rng.below(2)));
        }
        if rng.below(4) == 0 {
            s = s.internal_local();
        }
        if rng.below(3) == 0 {
            s = s.node_port(30000 + u16::try_from(i).unwrap());
        }
        for e in 0..rng.below(4) {
            let node = if rng.below(2) == 0 {
                "node-a"
            } else {
                "node-b"
            };
            s = s.ep(&format!("10.244.{i}.{}", e + rng.below(3)), 8080, node);
        }
        Some(s)
    }

    fn random_cluster(rng: &mut Rng, variants: &mut [u64; 6]) -> Snapshot {
        for v in variants.iter_mut() {
            if rng.below(3) == 0 {
                *v = rng.below(6);
            }
        }
        let services = (0..6)
            .filter_map(|i| service(i, variants[i as usize]))
            .collect();
        snapshot(node(), services)
    }

    #[test]
    fn incremental_syncs_leave_the_maps_a_full_sync_would() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut incremental = EbpfDataplane::new(Fake::default(), NodePortAddresses::default());
        let mut full = EbpfDataplane::new(Fake::default(), NodePortAddresses::default());
        let mut last = snapshot(node(), vec![]);
        let mut variants = [0; 6];
        for step in 0..500 {
            let next = random_cluster(&mut rng, &mut variants);
            incremental
                .sync(&next, &changes(&last, &next), false)
                .unwrap();
            full.sync(&next, &Changes::default(), true).unwrap();
            let (a, stale_a) = resolved(&incremental.backend.maps);
            let (b, _) = resolved(&full.backend.maps);
            assert_eq!(a, b, "step {step}");
            assert_eq!(stale_a, 0, "step {step}: slots no frontend reaches");
            assert_eq!(
                incremental.backend.maps.node_ports, full.backend.maps.node_ports,
                "step {step}"
            );
            assert_eq!(
                incremental.held.as_ref().unwrap().maps,
                incremental.backend.maps
            );
            last = next;
        }
    }

    #[test]
    fn an_idle_sync_reads_nothing_and_writes_nothing() {
        let mut dp = EbpfDataplane::new(Fake::default(), NodePortAddresses::default());
        let snap = web(&["10.244.1.5"]);
        dp.sync(&snap, &Changes::default(), false).unwrap();
        let (reads, writes) = (dp.backend.reads, dp.backend.writes);
        let report = dp.sync(&snap, &Changes::default(), false).unwrap();
        assert_eq!((dp.backend.reads, dp.backend.writes), (reads, writes));
        assert_eq!(report.families[0].operations, 0);
        assert_eq!(report.families[0].objects, 2);
    }

    #[test]
    fn a_failed_write_is_finished_by_the_next_sync_after_a_fresh_read() {
        let mut dp = EbpfDataplane::new(
            Fake {
                fail_at: Some(2),
                ..Fake::default()
            },
            NodePortAddresses::default(),
        );
        let snap = web(&["10.244.1.5", "10.244.2.5"]);
        assert!(dp.sync(&snap, &Changes::default(), false).is_err());
        let report = dp.sync(&snap, &Changes::default(), false).unwrap();
        assert!(report.full, "re-read after the failure");
        let maps = &dp.backend.maps;
        assert_eq!(maps.svc.len(), 1);
        assert_eq!(maps.svc.values().next().unwrap().count, 2);
        assert_eq!(
            maps.slots.len(),
            2,
            "the half-written set left no slot behind"
        );
        assert_eq!(diff::diff(maps, &plan::plan(&snap, &dp.node_ports)), []);
    }
}
