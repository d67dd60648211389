//! The IPVS planner: a [`Snapshot`] and the node's addresses → one family's [`Desired`] state.
//!
//! Pure. Upstream's layout, so `ipvsadm -Ln` reads the same under either proxy: one NAT virtual
//! service per frontend address and port (ClusterIP, each externalIP, each LoadBalancer IP with
//! ipMode VIP, and each node address × NodePort), every destination with weight 1, ClientIP
//! affinity as persistence with the Service's timeout, and every ClusterIP, externalIP and
//! LoadBalancer IP as an address for `kube-ipvs0` (upstream's bind rule, which leaves out
//! external addresses already on another interface, is the link's
//! [`address_changes`](super::backend::link::address_changes)).
//!
//! Where upstream's IPVS mode differs from its iptables and nftables modes, we follow the
//! latter and say so in the virtual service's [`Guard`], which the helper rules carry out:
//! - no endpoint anywhere: refused at once (IPVS alone answers TCP with a rate-limited ICMP);
//! - `internalTrafficPolicy: Local` without a local endpoint: dropped (upstream's IPVS mode
//!   falls back to every endpoint);
//! - `externalTrafficPolicy: Local` without a local endpoint: traffic from outside the node is
//!   dropped, while pods and the node reach the cluster's endpoints (upstream's IPVS mode sends
//!   outside traffic to them too, and their replies carry a pod's address).
//!
//! The endpoint lists are the model's selection (policy, terminating fallback, topology), never
//! recomputed here.

mod planner;
#[cfg(test)]
mod tests;

pub use planner::{Planner, Update};

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use super::backend::netlink::value::single_address_netmask;
use super::backend::netlink::{Destination, Flags, Service, ServiceKey as VsKey};
use super::desired::{Desired, Frontend, Guard, Masquerade, VirtualService};
use super::mode_config::ModeConfig;
use crate::cluster::model::{Endpoint, FamilyView, ServicePort, TrafficPolicy};
use crate::cluster::{IpFamily, NodeContext, ServicePortState, Snapshot};
use crate::dataplane::node::{NodePortMatch, node_ports, source_ranges};

/// The node's addresses on every interface except `kube-ipvs0`, as the shell read them for
/// this sync: where NodePorts listen. Empty when unknown (`plan` from manifests): the Node
/// object's addresses stand in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostAddresses(pub BTreeSet<IpAddr>);

/// One family's desired IPVS state.
pub fn plan(
    snapshot: &Snapshot,
    cfg: &ModeConfig,
    family: IpFamily,
    host: &HostAddresses,
) -> Desired {
    let mut out = Desired::new(family);
    let node_ports = node_port_addresses(snapshot, cfg, family, host);
    for state in snapshot.ports.values() {
        contribute(&mut out, state, cfg, &snapshot.node, &node_ports);
    }
    out
}

/// Adds one service port's virtual services, addresses and hairpin entries to `out` (of the
/// port's family or not: a port without that family adds nothing). A key `out` already has
/// stays, so in [`plan`] the first port in snapshot order keeps a frontend two Services
/// claim (as in the nftables mode), and within one port the ClusterIP comes first, then
/// externalIPs, LoadBalancer IPs and NodePorts. The [`Planner`] plans one port alone with it.
pub fn contribute(
    out: &mut Desired,
    state: &ServicePortState,
    cfg: &ModeConfig,
    node: &NodeContext,
    node_ports: &[IpAddr],
) {
    let family = out.family;
    let Some(view) = state.family(family) else {
        return;
    };
    let port = &state.port;
    let outside = match port.external_policy {
        TrafficPolicy::Cluster => Masquerade::Always,
        TrafficPolicy::Local => Masquerade::FromNode,
    };
    let firewall = (!view.load_balancer_source_ranges.is_empty())
        .then(|| source_ranges::allowed_disjoint(view, node));
    let mut add = |ip: IpAddr, port_number: u16, frontend: Frontend, (dests, guard)| {
        let key = VsKey::Address {
            protocol: port.name.protocol.into(),
            address: SocketAddr::new(ip, port_number),
        };
        let vs = VirtualService {
            service: service(cfg, port, key),
            destinations: dests,
            owner: port.name.clone(),
            frontend,
            guard,
            masquerade: match frontend {
                Frontend::ClusterIp => Masquerade::ClusterIp,
                _ => outside,
            },
            allowed_sources: match frontend {
                Frontend::LoadBalancer => firewall.clone(),
                _ => None,
            },
        };
        out.services.entry(key).or_insert(vs);
    };
    add(
        view.cluster_ip,
        port.port,
        Frontend::ClusterIp,
        internal(port, view),
    );
    for &ip in &view.external_ips {
        add(ip, port.port, Frontend::ExternalIp, external(port, view));
    }
    for &ip in &view.load_balancer_ips {
        add(ip, port.port, Frontend::LoadBalancer, external(port, view));
    }
    if let Some(np) = port.node_port {
        for &ip in node_ports {
            add(ip, np, Frontend::NodePort, external(port, view));
        }
    }
    out.addresses.cluster_ips.insert(view.cluster_ip);
    out.addresses
        .external
        .extend(view.external_ips.iter().chain(&view.load_balancer_ips));
    for ep in view.reachable_endpoints().filter(|e| e.is_local) {
        out.hairpin
            .insert((SocketAddr::new(ep.ip, ep.port), port.name.protocol));
    }
}

/// The virtual service itself: the Service's scheduler (its annotation's, or the node's), and
/// persistence for ClientIP affinity.
fn service(cfg: &ModeConfig, port: &ServicePort, key: VsKey) -> Service {
    let (scheduler, flags) = cfg.scheduler_of(port);
    let mut s = Service::new(key, scheduler);
    s.flags = flags;
    if let Some(seconds) = port.affinity_timeout_seconds {
        s.flags = s.flags | Flags::PERSISTENT;
        s.timeout = seconds;
        s.netmask = single_address_netmask(key.family());
    }
    s
}

type Plan = (Vec<Destination>, Guard);

/// The ClusterIP's destinations: the list its internal policy selects.
fn internal(port: &ServicePort, view: &FamilyView) -> Plan {
    let list = selected(view, port.internal_policy);
    let guard = empty_guard(&list, view);
    (list, guard)
}

/// The external frontends' destinations: the list the external policy selects; under `Local`
/// with none on this node, the cluster's, for pods and the node (see the module doc).
fn external(port: &ServicePort, view: &FamilyView) -> Plan {
    let list = selected(view, port.external_policy);
    if list.is_empty()
        && port.external_policy == TrafficPolicy::Local
        && view.selection.has_any_endpoints
    {
        let cluster = destinations(view.cluster_endpoints());
        if !cluster.is_empty() {
            return (cluster, Guard::DropFromOutside);
        }
    }
    let guard = empty_guard(&list, view);
    (list, guard)
}

fn selected(view: &FamilyView, policy: TrafficPolicy) -> Vec<Destination> {
    match policy {
        TrafficPolicy::Cluster => destinations(view.cluster_endpoints()),
        TrafficPolicy::Local => destinations(view.local_endpoints()),
    }
}

/// No destination: rejected when the Service has no endpoint anywhere, dropped otherwise.
fn empty_guard(list: &[Destination], view: &FamilyView) -> Guard {
    match (list.is_empty(), view.selection.has_any_endpoints) {
        (false, _) => Guard::None,
        (true, true) => Guard::Drop,
        (true, false) => Guard::Reject,
    }
}

fn destinations<'a>(endpoints: Option<impl Iterator<Item = &'a Endpoint>>) -> Vec<Destination> {
    let mut out: Vec<Destination> = endpoints
        .into_iter()
        .flatten()
        .map(|e| Destination::masquerade(SocketAddr::new(e.ip, e.port), 1))
        .collect();
    out.sort();
    out.dedup_by_key(|d| d.address);
    out
}

/// The node addresses NodePorts listen on in `family`: `nodePortAddresses` resolved over the
/// host's addresses outside `kube-ipvs0` (or the Node object's when those are unknown), without
/// loopback and IPv6 link-local, which upstream's IPVS mode leaves out too.
pub fn node_port_addresses(
    snapshot: &Snapshot,
    cfg: &ModeConfig,
    family: IpFamily,
    host: &HostAddresses,
) -> Vec<IpAddr> {
    let known: BTreeSet<IpAddr> = if host.0.is_empty() {
        snapshot.node.local_addresses().into_iter().collect()
    } else {
        host.0.clone()
    };
    let usable = |ip: &IpAddr| {
        IpFamily::of(ip) == family
            && !ip.is_loopback()
            && !matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local())
    };
    match node_ports::resolve(&cfg.node.node_ports, &snapshot.node, family, false) {
        NodePortMatch::All { .. } => known.into_iter().filter(usable).collect(),
        NodePortMatch::Addresses { addrs, .. } => addrs
            .into_iter()
            .filter(|ip| usable(ip) && (host.0.is_empty() || known.contains(ip)))
            .collect(),
    }
}
