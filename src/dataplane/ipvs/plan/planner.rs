//! The incremental IPVS [`Planner`]: keeps the last plan of both families (virtual services,
//! service addresses, hairpin entries and the helper tables) and, for the service ports that
//! changed, re-plans only those.
//!
//! Pure: no I/O, no clock. After every [`update`](Planner::update) its states equal
//! [`plan`](super::plan) of the snapshot and its tables equal
//! [`rules_all`](crate::dataplane::ipvs::rules_all) of them; an incremental update's
//! transactions equal `diff` of the previous tables and the new ones (both property-tested).
//!
//! A one-endpoint change costs that service port's work, not the cluster's: its old and new
//! contributions are planned alone ([`contribute`]), and counts per virtual service, address
//! and hairpin entry say when the last port that plans one lets go of it. The touched virtual
//! services are what the applier diffs against the kernel ([`diff_only`]); the helper tables'
//! transaction is the diff of the touched elements alone, since every element of the table
//! belongs to one virtual service, hairpin entry or bound address.
//!
//! Everything is re-planned on the first call, when the node or the host's addresses changed
//! (they feed every NodePort and the bound addresses), and when a frontend two service ports
//! plan loses the port that held it (the full plan gives it to the first port in snapshot
//! order; finding the next one would need an index of every claimant, for a
//! misconfiguration).
//!
//! [`diff_only`]: crate::dataplane::ipvs::diff::diff_only

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::{HostAddresses, contribute, node_port_addresses};
use crate::cluster::{
    Changes, IpFamily, NodeContext, Protocol, ServicePortName, ServicePortState, Snapshot,
};
use crate::dataplane::ipvs::backend::link::{ServiceAddresses, addresses};
use crate::dataplane::ipvs::backend::netlink::ServiceKey;
use crate::dataplane::ipvs::desired::{Desired, VirtualService};
use crate::dataplane::ipvs::mode_config::ModeConfig;
use crate::dataplane::ipvs::rules;
use crate::nft::diff::{Transaction, diff};
use crate::nft::ruleset::{Family, Ruleset};

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The incremental IPVS planner. See the module doc.
#[derive(Debug)]
pub struct Planner {
    /// The current plan of both families, in [`IpFamily::ALL`] order.
    want: [Desired; 2],
    /// The helper tables of `want`, in the same order.
    tables: [Ruleset; 2],
    /// What `kube-ipvs0` holds under this plan (both families).
    bound: BTreeSet<IpAddr>,
    /// Per family, the virtual services and destinations of `want`, kept as they change:
    /// every sync reports them, and walking 10,000 virtual services for it cost more than
    /// planning a one-endpoint change.
    service_objects: [usize; 2],
    books: Option<Books>,
}

/// What one [`Planner::update`] changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// Everything was re-planned: any virtual service and address may have changed, so the
    /// caller compares the whole plan with the kernel (`touched`, `bind` and `unbind` are
    /// empty).
    pub full: bool,
    /// Per family: the virtual services that may differ from the previous plan.
    pub touched: [BTreeSet<ServiceKey>; 2],
    /// Per family: what turns the previous helper tables into the new ones (empty from
    /// [`Planner::replan`], whose caller adopts the tables from a read of the kernel).
    pub transactions: [Transaction; 2],
    /// What to bind on `kube-ipvs0` and unbind from it, from the previous plan to this one
    /// (both empty on a full update: the caller compares with the link it read).
    pub bind: BTreeSet<IpAddr>,
    pub unbind: BTreeSet<IpAddr>,
}

/// The bookkeeping behind the current plan.
#[derive(Debug)]
struct Books {
    node: Arc<NodeContext>,
    host: HostAddresses,
    /// The states planned, by name: a map of our own, not the snapshot's `Arc`, which the
    /// tracker would then have to copy whole on its next change.
    ports: Map<ServicePortName, Arc<ServicePortState>>,
    families: [FamilyBooks; 2],
}

/// How many service ports plan each thing of one family.
#[derive(Debug, Default)]
struct FamilyBooks {
    node_ports: Vec<IpAddr>,
    services: Map<ServiceKey, u32>,
    cluster_ips: Map<IpAddr, u32>,
    external: Map<IpAddr, u32>,
    hairpin: Map<(SocketAddr, Protocol), u32>,
}

/// What one family's incremental update touched, as it was before.
#[derive(Default)]
struct Touched {
    services: BTreeMap<ServiceKey, Option<VirtualService>>,
    hairpin: BTreeMap<(SocketAddr, Protocol), bool>,
    /// Addresses whose claims changed, and whether they were planned before.
    cluster_ips: BTreeMap<IpAddr, bool>,
    external: BTreeMap<IpAddr, bool>,
}

impl Planner {
    /// A planner with nothing planned; the first [`update`](Planner::update) plans everything.
    pub fn new() -> Planner {
        Planner {
            want: IpFamily::ALL.map(Desired::new),
            tables: IpFamily::ALL.map(|f| Ruleset::empty(Family::of(f))),
            bound: BTreeSet::new(),
            service_objects: [0; 2],
            books: None,
        }
    }

    /// Kernel objects of the current plan per family, IPv4 first: what
    /// [`Desired::objects`] counts, without walking every virtual service.
    pub fn objects(&self) -> [usize; 2] {
        [0, 1].map(|i| {
            let addresses = &self.want[i].addresses;
            self.service_objects[i] + addresses.cluster_ips.len() + addresses.external.len()
        })
    }

    /// The current plan, IPv4 first: [`plan`](super::plan) of the last snapshot.
    pub fn desired(&self) -> &[Desired; 2] {
        &self.want
    }

    /// The helper tables of the current plan, IPv4 first.
    pub fn tables(&self) -> &[Ruleset; 2] {
        &self.tables
    }

    /// The addresses `kube-ipvs0` holds under the current plan.
    pub fn bound(&self) -> &BTreeSet<IpAddr> {
        &self.bound
    }

    /// Every service address of the current plan, both families.
    pub fn addresses(&self) -> ServiceAddresses {
        let mut all = ServiceAddresses::default();
        for d in &self.want {
            all.cluster_ips.extend(&d.addresses.cluster_ips);
            all.external.extend(&d.addresses.external);
        }
        all
    }

    /// Plans `snapshot` over the host's addresses `host`, given what changed since the
    /// snapshot of the previous call (`changes` must name every service port that differs:
    /// the tracker's, merged when snapshots were skipped). `cfg` may only have gained
    /// [`unavailable_schedulers`](ModeConfig::unavailable_schedulers) named by changed ports.
    pub fn update(
        &mut self,
        snapshot: &Snapshot,
        changes: &Changes,
        cfg: &ModeConfig,
        host: &HostAddresses,
    ) -> Update {
        let incremental = self.books.as_ref().is_some_and(|b| {
            !changes.node_topology_changed
                && (Arc::ptr_eq(&b.node, &snapshot.node) || *b.node == *snapshot.node)
                && b.host == *host
        });
        if incremental && let Some(update) = self.incremental(snapshot, &changes.ports, cfg) {
            return update;
        }
        let previous = std::mem::replace(
            &mut self.tables,
            IpFamily::ALL.map(|f| Ruleset::empty(Family::of(f))),
        );
        let mut update = self.replan(snapshot, cfg, host);
        update.transactions = [0, 1].map(|i| diff(&previous[i], &self.tables[i]));
        update
    }

    /// Plans `snapshot` from scratch, for a full sync.
    pub fn replan(
        &mut self,
        snapshot: &Snapshot,
        cfg: &ModeConfig,
        host: &HostAddresses,
    ) -> Update {
        let mut families: [FamilyBooks; 2] = Default::default();
        for (i, family) in IpFamily::ALL.into_iter().enumerate() {
            let fb = &mut families[i];
            fb.node_ports = node_port_addresses(snapshot, cfg, family, host);
            let mut want = Desired::new(family);
            for state in snapshot.ports.values() {
                let mut one = Desired::new(family);
                contribute(&mut one, state, cfg, &snapshot.node, &fb.node_ports);
                count_in(fb, &one);
                for (key, vs) in one.services {
                    want.services.entry(key).or_insert(vs);
                }
                want.addresses.cluster_ips.extend(one.addresses.cluster_ips);
                want.addresses.external.extend(one.addresses.external);
                want.hairpin.extend(one.hairpin);
            }
            self.service_objects[i] = want.services.values().map(VirtualService::objects).sum();
            self.want[i] = want;
        }
        self.bound = addresses::wanted(&self.addresses(), &host.0);
        self.tables =
            crate::dataplane::ipvs::rules_all(&self.want, cfg, &snapshot.node, &self.bound)
                .try_into()
                .expect("one table per family");
        self.books = Some(Books {
            node: snapshot.node.clone(),
            host: host.clone(),
            ports: snapshot
                .ports
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            families,
        });
        Update {
            full: true,
            touched: Default::default(),
            transactions: IpFamily::ALL.map(|f| Transaction {
                family: Family::of(f),
                ops: Vec::new(),
            }),
            bind: BTreeSet::new(),
            unbind: BTreeSet::new(),
        }
    }

    /// Re-plans the `changed` ports; `None` (the plan half-changed: re-plan it all) when a
    /// contested frontend lost its winner.
    fn incremental(
        &mut self,
        snapshot: &Snapshot,
        changed: &BTreeSet<ServicePortName>,
        cfg: &ModeConfig,
    ) -> Option<Update> {
        let books = self.books.as_mut().expect("checked by update");
        let mut touched: [Touched; 2] = Default::default();
        for name in changed {
            let old = books.ports.get(name).cloned();
            let new = snapshot.ports.get(name);
            if let (Some(o), Some(n)) = (&old, new)
                && (Arc::ptr_eq(o, n) || o == n)
            {
                continue;
            }
            for (i, family) in IpFamily::ALL.into_iter().enumerate() {
                let fb = &mut books.families[i];
                let alone = |state: Option<&Arc<ServicePortState>>| {
                    let mut one = Desired::new(family);
                    if let Some(s) = state {
                        contribute(&mut one, s, cfg, &snapshot.node, &fb.node_ports);
                    }
                    one
                };
                let before = alone(old.as_ref());
                let after = alone(new);
                let want = &mut self.want[i];
                let t = &mut touched[i];
                if !let_go(fb, want, t, name, &before) {
                    return None;
                }
                take(fb, want, t, name, after);
            }
            match new {
                Some(n) => books.ports.insert(name.clone(), n.clone()),
                None => books.ports.remove(name),
            };
        }
        for (i, t) in touched.iter().enumerate() {
            let want = &self.want[i].services;
            for (key, before) in &t.services {
                let objects = |vs: Option<&VirtualService>| vs.map_or(0, VirtualService::objects);
                self.service_objects[i] =
                    self.service_objects[i] + objects(want.get(key)) - objects(before.as_ref());
            }
        }
        let (bind, unbind) = rebind(&mut self.bound, &self.want, &touched, &books.host);
        let transactions = [0, 1].map(|i| {
            let family = IpFamily::ALL[i];
            let t = &touched[i];
            let want = &self.want[i];
            let of_family = |ips: &BTreeSet<IpAddr>| {
                ips.iter()
                    .copied()
                    .filter(|ip| IpFamily::of(ip) == family)
                    .collect::<Vec<_>>()
            };
            let before = rules::elements_of(
                family,
                t.services
                    .iter()
                    .filter_map(|(k, vs)| vs.as_ref().map(|vs| (k, vs))),
                t.hairpin.iter().filter(|(_, was)| **was).map(|(h, _)| *h),
                of_family(&unbind),
            );
            let after = rules::elements_of(
                family,
                t.services
                    .keys()
                    .filter_map(|k| want.services.get(k).map(|vs| (k, vs))),
                t.hairpin
                    .keys()
                    .filter(|h| want.hairpin.contains(h))
                    .copied(),
                of_family(&bind),
            );
            let transaction = diff(&before, &after);
            patch(&mut self.tables[i], &before, after);
            transaction
        });
        Some(Update {
            full: false,
            touched: touched.map(|t| t.services.into_keys().collect()),
            transactions,
            bind,
            unbind,
        })
    }
}

impl Default for Planner {
    fn default() -> Planner {
        Planner::new()
    }
}

/// Counts one port's contribution into the books (a full re-plan).
fn count_in(fb: &mut FamilyBooks, one: &Desired) {
    for key in one.services.keys() {
        *fb.services.entry(*key).or_default() += 1;
    }
    for ip in &one.addresses.cluster_ips {
        *fb.cluster_ips.entry(*ip).or_default() += 1;
    }
    for ip in &one.addresses.external {
        *fb.external.entry(*ip).or_default() += 1;
    }
    for h in &one.hairpin {
        *fb.hairpin.entry(*h).or_default() += 1;
    }
}

/// Takes port `name`'s previous contribution `before` out of the plan. False when a virtual
/// service another port also plans was won by `name` (see the module doc).
fn let_go(
    fb: &mut FamilyBooks,
    want: &mut Desired,
    t: &mut Touched,
    name: &ServicePortName,
    before: &Desired,
) -> bool {
    for key in before.services.keys() {
        t.services
            .entry(*key)
            .or_insert_with(|| want.services.get(key).cloned());
        if release(&mut fb.services, key) {
            want.services.remove(key);
        } else if want.services.get(key).is_some_and(|vs| vs.owner == *name) {
            return false;
        }
    }
    for ip in &before.addresses.cluster_ips {
        t.cluster_ips.entry(*ip).or_insert(true);
        if release(&mut fb.cluster_ips, ip) {
            want.addresses.cluster_ips.remove(ip);
        }
    }
    for ip in &before.addresses.external {
        t.external.entry(*ip).or_insert(true);
        if release(&mut fb.external, ip) {
            want.addresses.external.remove(ip);
        }
    }
    for h in &before.hairpin {
        t.hairpin.entry(*h).or_insert(true);
        if release(&mut fb.hairpin, h) {
            want.hairpin.remove(h);
        }
    }
    true
}

/// Puts port `name`'s new contribution `after` into the plan; of a virtual service another
/// port plans too, the first in snapshot order keeps it, as in the full plan.
fn take(
    fb: &mut FamilyBooks,
    want: &mut Desired,
    t: &mut Touched,
    name: &ServicePortName,
    after: Desired,
) {
    for (key, vs) in after.services {
        t.services
            .entry(key)
            .or_insert_with(|| want.services.get(&key).cloned());
        *fb.services.entry(key).or_default() += 1;
        match want.services.get(&key) {
            Some(held) if held.owner < *name => {}
            _ => {
                want.services.insert(key, vs);
            }
        }
    }
    for ip in after.addresses.cluster_ips {
        t.cluster_ips
            .entry(ip)
            .or_insert_with(|| want.addresses.cluster_ips.contains(&ip));
        if claim(&mut fb.cluster_ips, ip) {
            want.addresses.cluster_ips.insert(ip);
        }
    }
    for ip in after.addresses.external {
        t.external
            .entry(ip)
            .or_insert_with(|| want.addresses.external.contains(&ip));
        if claim(&mut fb.external, ip) {
            want.addresses.external.insert(ip);
        }
    }
    for h in after.hairpin {
        t.hairpin
            .entry(h)
            .or_insert_with(|| want.hairpin.contains(&h));
        if claim(&mut fb.hairpin, h) {
            want.hairpin.insert(h);
        }
    }
}

/// Brings `bound` to the plan `want` for the addresses `touched` names, by upstream's bind
/// rule ([`addresses::wanted`]: every ClusterIP, an external address unless the host has it);
/// returns what to bind and what to unbind, in address order.
fn rebind(
    bound: &mut BTreeSet<IpAddr>,
    want: &[Desired; 2],
    touched: &[Touched; 2],
    host: &HostAddresses,
) -> (BTreeSet<IpAddr>, BTreeSet<IpAddr>) {
    let candidates: BTreeSet<IpAddr> = touched
        .iter()
        .flat_map(|t| t.cluster_ips.keys().chain(t.external.keys()))
        .copied()
        .collect();
    let (mut bind, mut unbind) = (BTreeSet::new(), BTreeSet::new());
    for ip in candidates {
        let d = &want[IpFamily::ALL
            .iter()
            .position(|f| *f == IpFamily::of(&ip))
            .expect("a family")];
        let wanted = d.addresses.cluster_ips.contains(&ip)
            || (d.addresses.external.contains(&ip) && !host.0.contains(&ip));
        match (wanted, bound.contains(&ip)) {
            (true, false) => {
                bound.insert(ip);
                bind.insert(ip);
            }
            (false, true) => {
                bound.remove(&ip);
                unbind.insert(ip);
            }
            _ => {}
        }
    }
    (bind, unbind)
}

/// One claim less on `key`; true when it was the last.
fn release<K: Hash + Eq>(counts: &mut Map<K, u32>, key: &K) -> bool {
    let Some(n) = counts.get_mut(key) else {
        debug_assert!(false, "released more often than claimed");
        return false;
    };
    *n -= 1;
    if *n == 0 {
        counts.remove(key);
        return true;
    }
    false
}

/// One claim more on `key`; true when it is the first.
fn claim<K: Hash + Eq>(counts: &mut Map<K, u32>, key: K) -> bool {
    let n = counts.entry(key).or_default();
    *n += 1;
    *n == 1
}

/// Makes `table` hold `after`'s elements instead of `before`'s (both hold only touched ones).
fn patch(table: &mut Ruleset, before: &Ruleset, after: Ruleset) {
    for (name, set) in &before.sets {
        if let Some(t) = table.sets.get_mut(name) {
            for key in set.elements.keys() {
                t.elements_mut().remove(key);
            }
        }
    }
    for (name, set) in after.sets {
        if let Some(t) = table.sets.get_mut(&name) {
            t.elements_mut().extend(Arc::unwrap_or_clone(set.elements));
        }
    }
}

#[cfg(test)]
#[path = "planner_props.rs"]
mod props;
