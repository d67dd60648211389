//! The tracker: folds object events into the current model and hands out immutable snapshots with
//! the service ports that changed since the last one.
//!
//! Pure: no I/O, no clock, never panics; warnings are returned, not logged. Events only record
//! the parsed objects and mark their Service dirty; the per-port model is rebuilt for dirty
//! Services when a snapshot is taken, so a burst of events costs one rebuild per Service, and a
//! change that is undone before the next snapshot is not reported at all. A change to one slice
//! costs work proportional to that Service, never to the cluster.

use std::collections::{BTreeMap, BTreeSet};

/// Hash maps keyed by names from the API: foldhash is faster than SipHash on these short keys
/// (`benches/tracker.rs`) and still randomly seeded per process, which is what keeps crafted
/// names from colliding on purpose.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::endpoints;
use super::interner::Interner;
use super::model::{
    IpFamily, NoLocalEndpoints, NodeContext, ServiceKey, ServicePortName, ServicePortState,
    Snapshot,
};
use super::node;
use super::port_state;
use super::service::{self, Ignored, ParsedService};
use super::service_cidrs::ServiceCidrs;
use super::slice_set::SliceSet;
use super::source::lean::{EndpointSlice, Service};
use super::source::{Event, Kind, Object, namespace_and_name};
use super::topology::Features;
use super::warning::Warning;

/// What changed between two snapshots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Service ports whose state differs from the previous snapshot (added, changed or removed).
    pub ports: BTreeSet<ServicePortName>,
    /// This node's zone (or existence) changed, so every selection was recomputed; upstream
    /// forces a full sync in that case.
    pub node_topology_changed: bool,
    /// `last-change-trigger-time` of every slice version applied since the previous snapshot,
    /// for the network programming latency metric.
    pub trigger_times: Vec<(ServiceKey, String)>,
    /// Services with Service changes, and with EndpointSlice changes, consumed by this snapshot.
    pub service_changes: usize,
    pub endpoint_changes: usize,
}

/// Counts for upstream's `sync_proxy_rules_{service,endpoint}_changes_{pending,total}` metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChangeCounts {
    /// Services with a Service change not yet taken by a snapshot.
    pub service_changes_pending: usize,
    /// Services with an EndpointSlice change not yet taken by a snapshot.
    pub endpoint_changes_pending: usize,
    pub service_changes_total: u64,
    pub endpoint_changes_total: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum ServiceEntry {
    Proxied(Arc<ParsedService>),
    Ignored(Ignored),
}

/// A list in progress (see [`Event::ListStarted`]).
#[derive(Debug)]
struct Listing {
    /// Whether the tracker held objects of the kind when the list began: if not, nothing can
    /// be gone at its end.
    held: bool,
    /// The ids (`namespace/name`, a Node's name) of the items seen so far.
    seen: HashSet<String>,
}

/// Identity of a slice: namespace and name.
type SliceId = (Arc<str>, Arc<str>);

/// The change tracker. See the module doc.
#[doc(alias = "ServiceChangeTracker")]
#[doc(alias = "EndpointsChangeTracker")]
#[derive(Debug)]
pub struct Tracker {
    features: Features,
    node: Arc<NodeContext>,
    services: HashMap<ServiceKey, ServiceEntry>,
    slices: HashMap<ServiceKey, SliceSet>,
    slice_owner: HashMap<SliceId, ServiceKey>,
    ports: Arc<BTreeMap<ServicePortName, Arc<ServicePortState>>>,
    service_cidrs: ServiceCidrs,
    /// The port names each Service currently contributes to `ports`.
    service_ports: HashMap<ServiceKey, Vec<ServicePortName>>,
    /// The no-local-endpoints counts of `ports` per family, kept as ports change
    /// ([`Snapshot::no_local_endpoints`]).
    no_local: [NoLocalEndpoints; 2],
    dirty: HashSet<ServiceKey>,
    pending_services: HashSet<ServiceKey>,
    pending_endpoints: HashSet<ServiceKey>,
    service_changes_total: u64,
    endpoint_changes_total: u64,
    node_topology_changed: bool,
    trigger_times: Vec<(ServiceKey, String)>,
    listed: BTreeSet<Kind>,
    /// The lists in progress.
    listing: HashMap<Kind, Listing>,
    /// The warnings last reported per object, so each object version warns once.
    warned: HashMap<(Kind, String), Vec<Warning>>,
    names: Interner,
    /// Counts the changes taken (a Service, a slice, the node, the Service CIDRs): equal
    /// before and after an event when the event changed nothing ([`Tracker::generation`]).
    generation: u64,
}

impl Tracker {
    /// A tracker for the node called `node_name`.
    pub fn new(node_name: &str, features: Features) -> Tracker {
        Tracker {
            features,
            node: Arc::new(NodeContext::named(node_name)),
            services: HashMap::default(),
            slices: HashMap::default(),
            slice_owner: HashMap::default(),
            ports: Arc::default(),
            service_cidrs: ServiceCidrs::default(),
            service_ports: HashMap::default(),
            no_local: Default::default(),
            dirty: HashSet::default(),
            pending_services: HashSet::default(),
            pending_endpoints: HashSet::default(),
            service_changes_total: 0,
            endpoint_changes_total: 0,
            node_topology_changed: false,
            trigger_times: Vec::new(),
            listed: BTreeSet::new(),
            listing: HashMap::default(),
            warned: HashMap::default(),
            names: Interner::default(),
            generation: 0,
        }
    }

    /// Applies one event. Returns the warnings for objects (or parts) that were refused, each
    /// reported once per distinct problem of an object, not again when the same version repeats.
    pub fn apply(&mut self, event: &Event) -> Vec<Warning> {
        let mut out = Vec::new();
        match event {
            Event::Applied(object) => self.apply_object(object, &mut out),
            Event::Deleted(object) => self.delete_object(object),
            Event::Listed(kind, objects) => {
                self.start_list(*kind);
                for object in objects.iter().filter(|o| o.kind() == *kind) {
                    self.apply_list_item(object, &mut out);
                }
                self.end_list(*kind);
            }
            Event::ListStarted(kind) => self.start_list(*kind),
            Event::ListItem(object) => self.apply_list_item(object, &mut out),
            Event::ListEnded(kind) => self.end_list(*kind),
            Event::HostAddresses(addresses) => {
                let mut context = (*self.node).clone();
                context.host_addresses = Some(addresses.as_slice().into());
                self.set_node(context);
            }
        }
        out
    }

    /// How many changes the tracker has taken. An event after which it is the same changed
    /// nothing a sync would program (an object re-sent as it was, a relist of what is held),
    /// so it needs no sync: upstream's change trackers drop such updates the same way.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether every [awaited](Kind::awaited) kind has been listed at least once: the first
    /// sync waits for this, as upstream waits for its informers, so it never programs a
    /// half-known cluster.
    pub fn synced(&self) -> bool {
        Kind::ALL
            .iter()
            .filter(|k| k.awaited())
            .all(|k| self.listed.contains(k))
    }

    pub fn change_counts(&self) -> ChangeCounts {
        ChangeCounts {
            service_changes_pending: self.pending_services.len(),
            endpoint_changes_pending: self.pending_endpoints.len(),
            service_changes_total: self.service_changes_total,
            endpoint_changes_total: self.endpoint_changes_total,
        }
    }

    /// Services deliberately not proxied, with the reason, sorted.
    pub fn ignored_services(&self) -> Vec<(ServiceKey, Ignored)> {
        let mut v: Vec<_> = self
            .services
            .iter()
            .filter_map(|(k, e)| match e {
                ServiceEntry::Ignored(why) => Some((k.clone(), *why)),
                ServiceEntry::Proxied(_) => None,
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Rebuilds what changed and returns the current snapshot with what changed since the last.
    pub fn snapshot(&mut self) -> (Snapshot, Changes) {
        let mut changed = Vec::new();
        let dirty = std::mem::take(&mut self.dirty);
        for key in dirty {
            self.rebuild(&key, &mut changed);
        }
        let changes = Changes {
            ports: changed.into_iter().collect(),
            node_topology_changed: std::mem::take(&mut self.node_topology_changed),
            trigger_times: std::mem::take(&mut self.trigger_times),
            service_changes: std::mem::take(&mut self.pending_services).len(),
            endpoint_changes: std::mem::take(&mut self.pending_endpoints).len(),
        };
        (self.peek(), changes)
    }

    /// The snapshot as last built, without rebuilding what changed since or taking the
    /// changes: for readers beside the sync (`/debug/services`), which must not steal the next
    /// sync's changes. Like any snapshot, it should be dropped soon.
    pub fn peek(&self) -> Snapshot {
        Snapshot {
            node: self.node.clone(),
            ports: self.ports.clone(),
            no_local: self.no_local,
            service_cidrs: self.service_cidrs.union(),
        }
    }

    fn apply_object(&mut self, object: &Object, out: &mut Vec<Warning>) {
        match object {
            Object::Service(svc) => self.apply_service(svc, out),
            Object::EndpointSlice(slice) => self.apply_slice(slice, out),
            Object::Node(n) => self.apply_node(n, out),
            Object::ServiceCidr(c) => {
                let mut warnings = Vec::new();
                self.change_service_cidrs(|cidrs| cidrs.apply(c, &mut warnings));
                let name = c.metadata.name.clone().unwrap_or_default();
                self.report(Kind::ServiceCidr, || name, warnings, out);
            }
        }
    }

    fn delete_object(&mut self, object: &Object) {
        match object {
            Object::Service(svc) => {
                let meta = &svc.metadata;
                let key = ServiceKey::new(
                    meta.namespace.as_deref().unwrap_or("default"),
                    meta.name.as_deref().unwrap_or(""),
                );
                self.forget_warnings(Kind::Service, &key.to_string());
                self.remove_service(&key);
            }
            Object::EndpointSlice(slice) => {
                let id = slice_id(slice);
                self.forget_warnings(Kind::EndpointSlice, &format!("{}/{}", id.0, id.1));
                self.remove_slice(&id);
            }
            Object::Node(n) => {
                if n.metadata.name.as_deref() == Some(&*self.node.name) {
                    let gone = NodeContext {
                        host_addresses: self.node.host_addresses.clone(),
                        ..NodeContext::named(&self.node.name)
                    };
                    self.set_node(gone);
                }
            }
            Object::ServiceCidr(c) => {
                let name = c.metadata.name.as_deref().unwrap_or_default();
                self.forget_warnings(Kind::ServiceCidr, name);
                self.change_service_cidrs(|cidrs| cidrs.remove(name));
            }
        }
    }

    /// Begins (or restarts) a list of `kind`: nothing of that kind has been seen in it yet.
    fn start_list(&mut self, kind: Kind) {
        let held = match kind {
            Kind::Service => !self.services.is_empty(),
            Kind::EndpointSlice => !self.slice_owner.is_empty(),
            Kind::Node => self.node.known,
            Kind::ServiceCidr => !self.service_cidrs.is_empty(),
        };
        self.listing.insert(
            kind,
            Listing {
                held,
                seen: HashSet::default(),
            },
        );
    }

    /// Applies one object of a list in progress and remembers it as present.
    fn apply_list_item(&mut self, object: &Object, out: &mut Vec<Warning>) {
        let kind = object.kind();
        // An item outside a list (a source's bug) is still a real version: applied, and the
        // next list's end settles what is gone.
        if let Some(listing) = self.listing.get_mut(&kind) {
            listing.seen.insert(object.id());
        }
        self.apply_object(object, out);
    }

    /// Ends the list of `kind` in progress: objects of that kind not seen in it are gone,
    /// and so are their remembered warnings. Marks `kind` synced.
    fn end_list(&mut self, kind: Kind) {
        let Listing { held, seen } = self.listing.remove(&kind).unwrap_or(Listing {
            held: true,
            seen: HashSet::default(),
        });
        let id = |ns: &str, name: &str| format!("{ns}/{name}");
        match kind {
            // Held nothing when the list began: all it holds now came from the list.
            _ if !held => {}
            Kind::Service => {
                let gone: Vec<ServiceKey> = self
                    .services
                    .keys()
                    .filter(|k| !seen.contains(&id(&k.namespace, &k.name)))
                    .cloned()
                    .collect();
                for key in gone {
                    self.remove_service(&key);
                }
            }
            Kind::EndpointSlice => {
                let gone: Vec<SliceId> = self
                    .slice_owner
                    .keys()
                    .filter(|(ns, name)| !seen.contains(&id(ns, name)))
                    .cloned()
                    .collect();
                for slice in gone {
                    self.remove_slice(&slice);
                }
            }
            Kind::Node => {
                if !seen.contains(&*self.node.name) && self.node.known {
                    // As a deleted Node: the host's own addresses are not the Node's.
                    let gone = NodeContext {
                        host_addresses: self.node.host_addresses.clone(),
                        ..NodeContext::named(&self.node.name)
                    };
                    self.set_node(gone);
                }
            }
            Kind::ServiceCidr => {
                self.change_service_cidrs(|cidrs| cidrs.retain(|name| seen.contains(name)));
            }
        }
        if !self.warned.is_empty() {
            self.warned
                .retain(|(k, id), _| *k != kind || seen.contains(id));
        }
        self.listed.insert(kind);
    }

    fn apply_service(&mut self, svc: &Service, out: &mut Vec<Warning>) {
        let mut warnings = Vec::new();
        let converted = service::convert(svc, &mut self.names, &mut warnings);
        let id = || {
            format!(
                "{}/{}",
                svc.metadata.namespace.as_deref().unwrap_or("default"),
                svc.metadata.name.as_deref().unwrap_or("")
            )
        };
        self.report(Kind::Service, id, warnings, out);
        let (key, entry) = match converted {
            service::Converted::Proxied(p) => {
                (p.key.clone(), Some(ServiceEntry::Proxied(Arc::new(p))))
            }
            service::Converted::Ignored(key, why) => (key, Some(ServiceEntry::Ignored(why))),
            service::Converted::Refused(Some(key)) => (key, None),
            service::Converted::Refused(None) => return,
        };
        match entry {
            Some(entry) if self.services.get(&key) == Some(&entry) => {}
            Some(entry) => {
                self.services.insert(key.clone(), entry);
                self.mark_service_changed(key);
            }
            None => self.remove_service(&key),
        }
    }

    fn remove_service(&mut self, key: &ServiceKey) {
        if self.services.remove(key).is_some() {
            self.mark_service_changed(key.clone());
        }
    }

    /// Applies `change` to the Service CIDRs, counting it when their union is rebuilt.
    fn change_service_cidrs(&mut self, change: impl FnOnce(&mut ServiceCidrs)) {
        let before = self.service_cidrs.union();
        change(&mut self.service_cidrs);
        if !Arc::ptr_eq(&before, &self.service_cidrs.union()) {
            self.generation += 1;
        }
    }

    fn mark_service_changed(&mut self, key: ServiceKey) {
        self.generation += 1;
        self.service_changes_total += 1;
        self.pending_services.insert(key.clone());
        self.dirty.insert(key);
    }

    fn apply_slice(&mut self, slice: &EndpointSlice, out: &mut Vec<Warning>) {
        let mut warnings = Vec::new();
        let converted = endpoints::convert(slice, &mut self.names, &mut warnings);
        let (ns, name) = namespace_and_name(&slice.metadata, "default");
        self.report(
            Kind::EndpointSlice,
            || format!("{ns}/{name}"),
            warnings,
            out,
        );
        let endpoints::Converted::Proxied(parsed) = converted else {
            self.remove_slice(&slice_id(slice));
            return;
        };
        // The slice lives in its Service's namespace; both strings are already shared.
        let id: SliceId = (parsed.service.namespace.clone(), parsed.name.clone());
        let owner = parsed.service.clone();
        if self.slice_owner.get(&id).is_some_and(|o| *o != owner) {
            self.remove_slice(&id);
        }
        let held = self.slices.entry(owner.clone()).or_default();
        if held.get(&id.1).is_some_and(|s| **s == parsed) {
            return;
        }
        if let Some(t) = &parsed.trigger_time {
            self.trigger_times.push((owner.clone(), t.clone()));
        }
        held.insert(id.1.clone(), Arc::new(parsed));
        self.slice_owner.insert(id, owner.clone());
        self.mark_endpoints_changed(owner);
    }

    fn remove_slice(&mut self, id: &SliceId) {
        let Some(owner) = self.slice_owner.remove(id) else {
            return;
        };
        if let Some(held) = self.slices.get_mut(&owner) {
            held.remove(&id.1);
            if held.is_empty() {
                self.slices.remove(&owner);
            }
        }
        self.mark_endpoints_changed(owner);
    }

    fn mark_endpoints_changed(&mut self, key: ServiceKey) {
        self.generation += 1;
        self.endpoint_changes_total += 1;
        self.pending_endpoints.insert(key.clone());
        self.dirty.insert(key);
    }

    fn apply_node(&mut self, n: &Node, out: &mut Vec<Warning>) {
        if n.metadata.name.as_deref() != Some(&*self.node.name) {
            return;
        }
        let mut warnings = Vec::new();
        let context = NodeContext {
            host_addresses: self.node.host_addresses.clone(),
            ..node::context(&self.node.name, n, &mut warnings)
        };
        let name = self.node.name.to_string();
        self.report(Kind::Node, || name, warnings, out);
        self.set_node(context);
    }

    fn set_node(&mut self, context: NodeContext) {
        if context == *self.node {
            return;
        }
        self.generation += 1;
        // Selection reads only the node's name (fixed) and zone; addresses and conditions do not
        // touch any service port.
        if context.zone != self.node.zone || context.known != self.node.known {
            self.node_topology_changed = true;
            self.dirty.extend(self.services.keys().cloned());
        }
        self.node = Arc::new(context);
    }

    /// Rebuilds one Service's ports and records which of them differ from before.
    fn rebuild(&mut self, key: &ServiceKey, changed: &mut Vec<ServicePortName>) {
        let states = match self.services.get(key) {
            Some(ServiceEntry::Proxied(svc)) => {
                port_state::build(svc, self.slices.get(key), &self.node, self.features)
            }
            _ => Vec::new(),
        };
        let old_names = self.service_ports.remove(key).unwrap_or_default();
        let new_names: Vec<ServicePortName> = states.iter().map(|s| s.port.name.clone()).collect();
        for state in states {
            // One search per port: the entry is compared and replaced in place.
            let name = state.port.name.clone();
            let added = Self::counted(&state);
            match Arc::make_mut(&mut self.ports).entry(name.clone()) {
                std::collections::btree_map::Entry::Occupied(o) if **o.get() == state => continue,
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    let removed = Self::counted(&o.insert(Arc::new(state)));
                    self.recount(removed, added);
                }
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(Arc::new(state));
                    self.recount(Default::default(), added);
                }
            }
            changed.push(name);
        }
        for name in old_names.into_iter().filter(|n| !new_names.contains(n)) {
            if let Some(old) = Arc::make_mut(&mut self.ports).remove(&name) {
                self.recount(Self::counted(&old), Default::default());
            }
            changed.push(name);
        }
        if !new_names.is_empty() {
            self.service_ports.insert(key.clone(), new_names);
        }
    }

    /// What one port adds to `no_local`, per family.
    fn counted(state: &ServicePortState) -> [NoLocalEndpoints; 2] {
        IpFamily::ALL.map(|family| state.no_local_endpoints(family))
    }

    /// Replaces one port's `removed` contribution to `no_local` by its `added` one.
    fn recount(&mut self, removed: [NoLocalEndpoints; 2], added: [NoLocalEndpoints; 2]) {
        for i in 0..2 {
            self.no_local[i] = self.no_local[i].minus(removed[i]).plus(added[i]);
        }
    }

    /// Keeps only warnings that differ from what was last reported for this object.
    fn report(
        &mut self,
        kind: Kind,
        id: impl FnOnce() -> String,
        warnings: Vec<Warning>,
        out: &mut Vec<Warning>,
    ) {
        if warnings.is_empty() {
            if !self.warned.is_empty() {
                self.warned.remove(&(kind, id()));
            }
            return;
        }
        let key = (kind, id());
        if self.warned.get(&key) != Some(&warnings) {
            out.extend(warnings.iter().cloned());
            self.warned.insert(key, warnings);
        }
    }

    fn forget_warnings(&mut self, kind: Kind, id: &str) {
        self.warned.remove(&(kind, id.to_string()));
    }
}

fn slice_id(slice: &EndpointSlice) -> SliceId {
    (
        slice
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default")
            .into(),
        slice.metadata.name.as_deref().unwrap_or("").into(),
    )
}

#[cfg(test)]
#[path = "tracker_tests.rs"]
mod tests;
