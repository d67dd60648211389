//! What the eBPF mode wants in its maps: every frontend the socket programs translate, and the
//! slot set of backends each one is balanced over.
//!
//! Pure: (Snapshot) → [`Plan`], no I/O, never fails. Frontends of one service port and family
//! that use the same endpoint list share one slot set, so a backend change is written once:
//! the ClusterIP uses the list its internal traffic policy selects; externalIPs and
//! LoadBalancer IPs, reached by a process on this node or in its pods (the only traffic the
//! socket programs see), use the Cluster list, as the other modes short-circuit such traffic.
//!
//! Traffic from outside the node (NodePorts on the node's addresses, externalIPs,
//! LoadBalancer IPs) gets frontends of its own ([`Scope::External`], read by the tc
//! programs), balanced over the list the external traffic policy selects: `Cluster` with
//! source NAT to the node's address, `Local` over this node's endpoints with the client's
//! address kept. Their loadBalancerSourceRanges go with the LoadBalancer IPs' frontends.
//! A ClusterIP reached from outside (the Service range routed to the node) uses the internal
//! policy's list with source NAT. A ClusterIP at a port its Service does not define is
//! refused, from this node and from outside ([`UNDEFINED_PORT`]).
//!
//! This mode leaves some of the model unprogrammed; [`Plan::not_programmed`] names it per
//! service port, so `plan` and the docs say the same.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use crate::cluster::{
    Endpoint, FamilyView, IpFamily, Protocol, ServicePortName, ServicePortState, Snapshot,
};
use crate::cluster::{NodeContext, TrafficPolicy};
use crate::config::NodePortAddresses;
use crate::dataplane::node::node_ports::{self, NodePortMatch};
use crate::dataplane::node::source_ranges;
use ipnet::IpNet;

/// The desired contents of the maps, as values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Every frontend and the slot set it uses.
    pub frontends: BTreeMap<Frontend, SetName>,
    /// Every slot set's backends, in the model's endpoint order; empty: refused.
    pub sets: BTreeMap<SetName, Vec<SocketAddr>>,
    /// The ClientIP affinity timeout (seconds) of the slot sets whose port has one.
    pub affinity: BTreeMap<SetName, u32>,
    /// Empty slot sets whose service port has endpoints elsewhere (a `Local` policy without a
    /// local endpoint): kube-proxy drops such traffic rather than refusing it.
    pub drop: BTreeSet<SetName>,
    /// What this mode does not program, per service port.
    pub not_programmed: Vec<(ServicePortName, Gap)>,
    /// Frontends a service port asks for that one earlier in the snapshot holds (two Services
    /// with one externalIP and port): an incremental sync must revisit both.
    pub lost: Vec<(Frontend, ServicePortName)>,
    /// NodePort numbers and transports: bind() to them fails in the node's namespace.
    pub node_port_numbers: BTreeMap<(u16, Transport), ServicePortName>,
    /// Frontends whose new flows from outside leave with the node's address as source
    /// (externalTrafficPolicy Cluster, and ClusterIPs).
    pub snat: BTreeSet<Frontend>,
    /// The sources allowed to reach each LoadBalancer IP frontend from outside that has
    /// loadBalancerSourceRanges (disjoint networks); others are dropped.
    pub source_ranges: BTreeMap<Frontend, Vec<IpNet>>,
}

/// The port of a ClusterIP's frontend that stands for every port its Service does not define.
pub const UNDEFINED_PORT: u16 = 0;

/// A Service address, port and transport the programs translate, and which programs do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frontend {
    pub ip: IpAddr,
    pub port: u16,
    pub transport: Transport,
    pub scope: Scope,
}

/// Which traffic a frontend or slot set is for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Sockets of this node's processes and pods (cgroup programs).
    #[default]
    Socket,
    /// Packets arriving from outside the node (tc programs).
    External,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Socket => "socket",
            Scope::External => "external",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    Tcp,
    Udp,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
    }
}

/// One slot set: a service port's endpoint list of one family.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetName {
    pub port: ServicePortName,
    pub family: IpFamily,
    pub list: List,
    pub scope: Scope,
}

/// Which of the model's endpoint lists a slot set holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum List {
    /// Endpoints for `Cluster` policy traffic.
    Cluster,
    /// Endpoints on this node, for `Local` policy traffic.
    Local,
    /// No endpoints: a ClusterIP at a port its Service does not define (refused).
    Undefined,
}

impl List {
    pub fn as_str(self) -> &'static str {
        match self {
            List::Cluster => "cluster",
            List::Local => "local",
            List::Undefined => "undefined-port",
        }
    }
}

/// Something of a service port this mode does not program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gap {
    /// SCTP is not balanced by the socket programs.
    Sctp,
}

impl Gap {
    pub fn as_str(self) -> &'static str {
        match self {
            Gap::Sctp => "SCTP not balanced in ebpf mode",
        }
    }
}

/// The node addresses, per family, on which NodePorts are translated: what `nodePortAddresses`
/// selects (every local address with `all`), and 127.0.0.1 where the entries select loopback
/// (a socket program sees the address the application asked for, so loopback needs no
/// `route_localnet`). IPv6 link-local addresses are left out.
pub type NodePorts = BTreeMap<IpFamily, Vec<IpAddr>>;

/// [`NodePorts`] for `node` under `npa`.
pub fn node_ports(npa: &NodePortAddresses, node: &NodeContext) -> NodePorts {
    let mut out = NodePorts::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        let usable = |ip: &IpAddr| {
            IpFamily::of(ip) == family
                && !ip.is_loopback()
                && !matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local())
        };
        let found = node_ports::resolve(npa, node, family, true);
        let mut addrs: Vec<IpAddr> = match &found {
            NodePortMatch::All { .. } => {
                node.local_addresses().into_iter().filter(usable).collect()
            }
            NodePortMatch::Addresses { addrs, .. } => {
                addrs.iter().copied().filter(usable).collect()
            }
        };
        if found.loopback() {
            addrs.push(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        }
        addrs.sort();
        addrs.dedup();
        out.insert(family, addrs);
    }
    out
}

/// The maps' desired contents for `snapshot`, NodePorts on `node_ports`.
pub fn plan(snapshot: &Snapshot, node_ports: &NodePorts) -> Plan {
    let mut out = Plan::default();
    for state in snapshot.ports.values() {
        plan_port(state, snapshot, node_ports, &mut out);
    }
    out
}

/// The part of the plan `ports` make (those still in `snapshot`), for an incremental sync.
pub fn plan_ports<'a>(
    snapshot: &Snapshot,
    node_ports: &NodePorts,
    ports: impl IntoIterator<Item = &'a ServicePortName>,
) -> Plan {
    let mut out = Plan::default();
    for name in ports {
        if let Some(state) = snapshot.ports.get(name) {
            plan_port(state, snapshot, node_ports, &mut out);
        }
    }
    out
}

fn plan_port(
    state: &ServicePortState,
    snapshot: &Snapshot,
    node_ports: &NodePorts,
    out: &mut Plan,
) {
    let port = &state.port;
    for view in &state.families {
        undefined_ports(state, view, out);
    }
    let transport = match port.name.protocol {
        Protocol::Tcp => Transport::Tcp,
        Protocol::Udp => Transport::Udp,
        Protocol::Sctp => {
            out.not_programmed.push((port.name.clone(), Gap::Sctp));
            return;
        }
    };
    for view in &state.families {
        let internal = match port.internal_policy {
            TrafficPolicy::Cluster => List::Cluster,
            TrafficPolicy::Local => List::Local,
        };
        let external = match port.external_policy {
            TrafficPolicy::Cluster => List::Cluster,
            TrafficPolicy::Local => List::Local,
        };
        // `snat`: new flows from outside to this frontend leave with the node's address.
        let mut add = |ip: IpAddr, frontend_port: u16, list: List, scope: Scope, snat: bool| {
            let set = SetName {
                port: port.name.clone(),
                family: view.family,
                list,
                scope,
            };
            out.sets
                .entry(set.clone())
                .or_insert_with(|| endpoints(view, list));
            if let Some(t) = port.affinity_timeout_seconds {
                out.affinity.insert(set.clone(), t);
            }
            if out.sets[&set].is_empty() && view.selection.has_any_endpoints {
                out.drop.insert(set.clone());
            }
            let frontend = Frontend {
                ip,
                port: frontend_port,
                transport,
                scope,
            };
            // Two Services claiming one externalIP and port: the first in snapshot order
            // keeps it, as the model's order is stable.
            claim(out, frontend, set, &port.name);
            if snat {
                out.snat.insert(frontend);
            }
        };
        add(view.cluster_ip, port.port, internal, Scope::Socket, false);
        // The ClusterIP reached from outside (a router sending the Service range to this
        // node): the internal policy's list, the source rewritten to the node's address so
        // that replies come back through this node.
        add(view.cluster_ip, port.port, internal, Scope::External, true);
        // From outside (tc): the list the external policy selects.
        let snat = port.external_policy == TrafficPolicy::Cluster;
        for &ip in view.external_ips.iter().chain(&view.load_balancer_ips) {
            add(ip, port.port, List::Cluster, Scope::Socket, false);
            add(ip, port.port, external, Scope::External, snat);
        }
        // NodePorts reached from this node or its pods: the Cluster list, as the other modes
        // short-circuit traffic of local origin whatever the external policy.
        if let Some(np) = port.node_port {
            for &ip in node_ports.get(&view.family).into_iter().flatten() {
                add(ip, np, List::Cluster, Scope::Socket, false);
                if !ip.is_loopback() {
                    add(ip, np, external, Scope::External, snat);
                }
            }
            out.node_port_numbers
                .insert((np, transport), port.name.clone());
        }
        if !view.load_balancer_source_ranges.is_empty() {
            let allowed = source_ranges::allowed_disjoint(view, &snapshot.node);
            for &ip in &view.load_balancer_ips {
                let f = Frontend {
                    ip,
                    port: port.port,
                    transport,
                    scope: Scope::External,
                };
                // Only where this port holds the frontend (not lost to an earlier claimant).
                if out
                    .frontends
                    .get(&f)
                    .is_some_and(|set| set.port == port.name)
                {
                    out.source_ranges.insert(f, allowed.clone());
                }
            }
        }
    }
}

/// Records that `port` wants `frontend` balanced over `set`. Two Services claiming one
/// externalIP and port (or ports of one Service claiming their ClusterIP's undefined ports):
/// the first in snapshot order keeps it, as the model's order is stable, and the others are
/// noted so an incremental sync revisits them.
fn claim(out: &mut Plan, frontend: Frontend, set: SetName, port: &ServicePortName) {
    match out.frontends.entry(frontend) {
        std::collections::btree_map::Entry::Vacant(v) => {
            v.insert(set);
        }
        std::collections::btree_map::Entry::Occupied(o) if o.get().port != *port => {
            out.lost.push((frontend, port.clone()));
        }
        std::collections::btree_map::Entry::Occupied(_) => {}
    }
}

/// The ClusterIP of `view` at every port its Service does not define, for TCP and UDP, from
/// this node and from outside: refused at once (ECONNREFUSED, ICMP port unreachable), as
/// kube-proxy rejects ClusterIP traffic no service port matches. The programs look these
/// frontends up under port 0 when the port itself has no entry.
fn undefined_ports(state: &ServicePortState, view: &FamilyView, out: &mut Plan) {
    for scope in [Scope::Socket, Scope::External] {
        let set = SetName {
            port: state.port.name.clone(),
            family: view.family,
            list: List::Undefined,
            scope,
        };
        out.sets.entry(set.clone()).or_default();
        for transport in [Transport::Tcp, Transport::Udp] {
            let frontend = Frontend {
                ip: view.cluster_ip,
                port: UNDEFINED_PORT,
                transport,
                scope,
            };
            claim(out, frontend, set.clone(), &state.port.name);
        }
    }
}

fn endpoints(view: &FamilyView, list: List) -> Vec<SocketAddr> {
    let chosen: Option<Vec<&Endpoint>> = match list {
        List::Cluster => view.cluster_endpoints().map(Iterator::collect),
        List::Local => view.local_endpoints().map(Iterator::collect),
        List::Undefined => None,
    };
    chosen
        .unwrap_or_default()
        .into_iter()
        .map(|e| SocketAddr::new(e.ip, e.port))
        .collect()
}

#[cfg(test)]
mod tests;
