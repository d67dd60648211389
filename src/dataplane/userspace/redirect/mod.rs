//! The redirect rules: what sends a Service's traffic to the relay's listeners, as one
//! family's nftables table, planned from the snapshot and the ports the listeners hold.
//!
//! Pure: (Snapshot, listeners' ports, `nodePortAddresses`, `--bind-address`) → one
//! [`Ruleset`] per family, applied by the nf_tables library's applier as IPVS mode applies its
//! helper rules. The table is the one the nftables mode programs ([`crate::nft::TABLE`], `ip`
//! and `ip6`), with its shared names and base chains ([`crate::dataplane::nft_table`]), as for
//! IPVS mode: switching a node between modes replaces one set of rules by the other in one
//! transaction (a second table would leave the other mode's DNAT rules catching Service
//! traffic first), and `--cleanup` has one table to remove.
//!
//! Layout, with no chain per Service:
//! - `nat-prerouting` (from pods and outside) and `nat-output` (from the node), at `dstnat`:
//!   `dnat to ip daddr . meta l4proto . th dport map @service-listeners`. The map takes each
//!   frontend (ClusterIP, externalIP and LoadBalancer IP at the service port; NodePort on every
//!   address `nodePortAddresses` selects) to the address and port of the listener over the
//!   endpoint list its policy selects (`plan`). A DNAT rather
//!   than a `redirect`: the ruleset, its encoders and its parsers already carry DNAT maps, and
//!   a listener bound to `--bind-address` 0.0.0.0 (or `::`) accepts on any local address.
//!   The address is the bind address when it is a specific one; otherwise a NodePort keeps
//!   its own (local) address and every other frontend goes to the node's first non-loopback
//!   address of the family, which is local for both hooks. A family without such an address
//!   gets no DNAT for those frontends (only loopback would be left, which a packet from
//!   outside may not be sent to).
//! - `filter-input`, `filter-forward` and `filter-output`: new connections to a frontend
//!   whose listener has no endpoint to relay to (`no-endpoint-services`) are refused at once
//!   (TCP reset, ICMP for UDP: the shared `reject-chain`) when the port has no
//!   endpoint at all, or dropped when it has some but a `Local` policy selects none here, as
//!   the other modes drop it (so a load balancer's health check moves traffic elsewhere).
//!   Such a frontend has no DNAT, so its packets still carry the frontend address at those
//!   hooks. The relay could only reset an accepted connection, which a client sees as a
//!   connection that opened and broke. The node's own traffic to one of its addresses (a
//!   NodePort) leaves `filter-output` at once (`fib daddr type local return`) and is refused
//!   in `filter-input`, where it arrives: refused on its way out, a UDP send would fail with
//!   EPERM instead of finding the port unreachable, as upstream's clients do.
//! - A ClusterIP at a port its Service does not define (no DNAT, no `no-endpoint-services`
//!   element) is refused at once by `cluster-ips-check` over `cluster-ips` from `filter-forward`
//!   and `filter-output`, the chain and set the nftables mode has too, instead of being routed
//!   on.
//! - The other modes' short-circuit: traffic from this node's pods (as detect-local
//!   recognises them) and from the node itself to an external frontend takes every endpoint
//!   in the cluster, whatever the policies say and whether or not a local endpoint exists.
//!   Under `externalTrafficPolicy: Cluster` that is the frontend's own listener; under `Local`
//!   the `short-circuit-listeners` map, read before the main map in both nat chains, sends it
//!   to the port's `Cluster` listener, so only traffic from outside meets the `Local` one
//!   (and is dropped where there is no local endpoint).
//! - `loadBalancerSourceRanges`: new connections to a LoadBalancer IP from a source outside its
//!   ranges are dropped before the DNAT (`firewall-check` from `filter-prerouting-pre-dnat`
//!   and `filter-output-pre-dnat`, over the `firewall-ips` and `firewall-allow` sets: the
//!   names and shapes the nftables mode has too, as [`source_ranges`] allows).
//!
//! - Only redirected connections reach a listener: `filter-input` sends a new connection to
//!   an open listener's port (`relay-ports`) to `relay-check`, which lets it on only when its
//!   conntrack entry was destination-NATed and otherwise refuses it as if nothing listened
//!   (from outside, from a pod, from the node, loopback included; held to `--bind-address`
//!   when that is specific). No `route_localnet`: the listeners stay on routable addresses.
//!
//! No masquerade: the relay dials endpoints from the node's own address.

#[cfg(test)]
mod filter_tests;
mod skeleton;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::plan::{Key, List};
use crate::cluster::{FamilyView, IpFamily, NodeContext, Protocol, ServicePort, Snapshot};
use crate::config::NodePortAddresses;
use crate::dataplane::nft_table::names as n;
use crate::dataplane::node::{DetectLocal, Local, NodePortMatch, node_ports, source_ranges};
use crate::nft::Name;
use crate::nft::ruleset::{Comment, Data, Family, Field, Match, Ruleset, Tuple, Value, Verdict};

/// Frontend (address . protocol . port) → listener (address . port).
pub const SERVICE_LISTENERS: &str = "service-listeners";
/// External frontend under `externalTrafficPolicy: Local` → the listener over every endpoint,
/// for this node's pods and the node itself (read before [`SERVICE_LISTENERS`]).
pub const SHORT_CIRCUIT: &str = "short-circuit-listeners";

/// Every open listener's protocol . port: what only redirected connections may reach.
pub const RELAY_PORTS: &str = "relay-ports";
/// Refuses a new connection to a listener's port that was not redirected there.
pub const RELAY_CHECK: &str = "relay-check";

/// What the rules need to know of one open listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listening {
    /// The port it holds (its address is `--bind-address` or the family's unspecified one).
    pub port: u16,
    /// Whether it has an endpoint to relay to; without one its frontends are refused.
    pub serving: bool,
}

/// Where the rules send traffic and which node addresses take NodePorts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `--bind-address`: the listeners' address in its family when it is not unspecified.
    pub bind: IpAddr,
    /// `nodePortAddresses`.
    pub node_ports: NodePortAddresses,
    /// How this node's pods are recognised, for the short-circuit.
    pub detect_local: DetectLocal,
}

impl Settings {
    /// The settings of the configuration, beside its resolved node policy.
    pub fn of(config: &crate::config::Config, node: &crate::dataplane::node::NodePolicy) -> Self {
        Settings {
            bind: config.bind_address,
            node_ports: config.node_port_addresses.clone(),
            detect_local: node.detect_local.clone(),
        }
    }
}

/// The tables for `snapshot`, one per family in [`IpFamily::ALL`] order. `listening`: the
/// listeners open now, by what they carry; a frontend whose listener is not open gets no rule.
pub fn plan(
    snapshot: &Snapshot,
    listening: &BTreeMap<Key, Listening>,
    settings: &Settings,
) -> [Ruleset; 2] {
    IpFamily::ALL.map(|family| plan_family(snapshot, listening, settings, family))
}

/// One family's table of [`plan`].
pub fn plan_family(
    snapshot: &Snapshot,
    listening: &BTreeMap<Key, Listening>,
    settings: &Settings,
    family: IpFamily,
) -> Ruleset {
    let mut rules = Ruleset::empty(Family::of(family));
    let node = &snapshot.node;
    let from_local_pod = match settings.detect_local.resolve(family, &node.pod_cidrs) {
        Local::Interface(name) => Some(Match::Iifname {
            name,
            negate: false,
        }),
        Local::Cidr(net) => Some(Match::Net {
            field: Field::Saddr,
            net,
            negate: false,
        }),
        Local::None => None,
    };
    let bind = Some(settings.bind).filter(|ip| IpFamily::of(ip) == family && !ip.is_unspecified());
    skeleton::add(&mut rules, from_local_pod, bind);
    let target = Target {
        bind,
        node: first_address(node, family),
    };
    for (key, listener) in listening.iter().filter(|(k, _)| k.family == family) {
        let port = Tuple::new(&[Value::Proto(key.port.protocol), Value::Port(listener.port)]);
        rules.element(RELAY_PORTS, port, Data::None, Some(&relay_comment(key)));
    }
    let node_port_addresses = node_port_addresses(&settings.node_ports, node, family);
    for state in snapshot.ports.values() {
        let port = &state.port;
        let Some(view) = state.family(family) else {
            continue;
        };
        // Without a comment: one ClusterIP serves every port of its Service.
        rules.element(
            n::CLUSTER_IPS,
            Tuple::new(&[Value::Addr(view.cluster_ip)]),
            Data::None,
            None,
        );
        if port.name.protocol == Protocol::Sctp {
            continue;
        }
        let comment = Comment::sanitised(&port.name.to_string());
        let key = |list| Key {
            port: port.name.clone(),
            family,
            list,
        };
        let external = key(List::of(port.external_policy));
        if !view.load_balancer_source_ranges.is_empty() && listening.contains_key(&external) {
            firewall(&mut rules, port, view, node, &comment);
        }
        // As the nftables mode: refused when the port has no endpoint at all; dropped when it
        // has some but none for this traffic (a Local policy without a local one).
        let refusal = Data::Verdict(if view.selection.has_any_endpoints {
            Verdict::Drop
        } else {
            Verdict::Goto(Name::fixed(n::REJECT_CHAIN))
        });
        let internal = key(List::of(port.internal_policy));
        let cluster = listening.get(&key(List::Cluster)).filter(|l| l.serving);
        for (kind, to) in [
            (Frontend::ClusterIp, &internal),
            (Frontend::External, &external),
        ] {
            let Some(listener) = listening.get(to) else {
                continue;
            };
            // From this node and its pods an external frontend takes every endpoint (the
            // other modes' short-circuit); only a `Local` policy makes that another listener.
            let short_circuit =
                cluster.filter(|_| kind == Frontend::External && to.list == List::Local);
            for (address, at, node_port) in frontends(port, view, kind, &node_port_addresses) {
                let frontend = Tuple::new(&[
                    Value::Addr(address),
                    Value::Proto(port.name.protocol),
                    Value::Port(at),
                ]);
                let Some(target) = target.of(address, node_port) else {
                    if !listener.serving {
                        rules.element(
                            n::NO_ENDPOINT_SERVICES,
                            frontend,
                            refusal.clone(),
                            Some(&comment),
                        );
                    }
                    continue;
                };
                let to_listener = |l: &Listening| {
                    Data::Values(Tuple::new(&[Value::Addr(target), Value::Port(l.port)]))
                };
                if let Some(cluster) = short_circuit {
                    rules.element(
                        SHORT_CIRCUIT,
                        frontend,
                        to_listener(cluster),
                        Some(&comment),
                    );
                }
                if listener.serving {
                    rules.element(
                        SERVICE_LISTENERS,
                        frontend,
                        to_listener(listener),
                        Some(&comment),
                    );
                } else {
                    rules.element(
                        n::NO_ENDPOINT_SERVICES,
                        frontend,
                        refusal.clone(),
                        Some(&comment),
                    );
                }
            }
        }
    }
    rules
}

/// `port`'s LoadBalancer IPs accept new connections only from the allowed sources.
fn firewall(
    rules: &mut Ruleset,
    port: &ServicePort,
    view: &FamilyView,
    node: &NodeContext,
    comment: &Comment,
) {
    let proto = Value::Proto(port.name.protocol);
    let allowed = source_ranges::allowed_disjoint(view, node);
    for &lb in &view.load_balancer_ips {
        let frontend = Tuple::new(&[Value::Addr(lb), proto, Value::Port(port.port)]);
        rules.element(n::FIREWALL_IPS, frontend, Data::None, Some(comment));
        for &net in &allowed {
            let key = Tuple::new(&[
                Value::Addr(lb),
                proto,
                Value::Port(port.port),
                Value::Net(net),
            ]);
            rules.element(n::FIREWALL_ALLOW, key, Data::None, Some(comment));
        }
    }
}

/// Where a frontend's traffic is sent.
struct Target {
    /// `--bind-address`, when of this family and specific.
    bind: Option<IpAddr>,
    /// The node's first non-loopback address of this family.
    node: Option<IpAddr>,
}

impl Target {
    /// The listener's address for traffic to `frontend`; `node_port`: the frontend is a node
    /// address (already local).
    fn of(&self, frontend: IpAddr, node_port: bool) -> Option<IpAddr> {
        self.bind
            .or_else(|| node_port.then_some(frontend))
            .or(self.node)
    }
}

/// Which frontends of a service port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frontend {
    ClusterIp,
    /// NodePorts, externalIPs and LoadBalancer IPs.
    External,
}

/// The frontends of `kind` of one service port in one family: (address, port, whether it is a
/// NodePort on a node address).
fn frontends(
    port: &ServicePort,
    view: &FamilyView,
    kind: Frontend,
    node_port_addresses: &[IpAddr],
) -> Vec<(IpAddr, u16, bool)> {
    match kind {
        Frontend::ClusterIp => vec![(view.cluster_ip, port.port, false)],
        Frontend::External => {
            let mut out: Vec<(IpAddr, u16, bool)> = view
                .external_ips
                .iter()
                .chain(&view.load_balancer_ips)
                .map(|ip| (*ip, port.port, false))
                .collect();
            if let Some(node_port) = port.node_port {
                out.extend(node_port_addresses.iter().map(|ip| (*ip, node_port, true)));
            }
            out
        }
    }
}

/// The node's addresses of `family` that take NodePorts. A map keyed by address needs each
/// one named, so `all` is every non-loopback address the node has (this mode serves no
/// NodePort on loopback).
fn node_port_addresses(
    npa: &NodePortAddresses,
    node: &NodeContext,
    family: IpFamily,
) -> Vec<IpAddr> {
    match node_ports::resolve(npa, node, family, false) {
        NodePortMatch::Addresses { addrs, .. } => addrs,
        NodePortMatch::All { .. } => {
            let mut addrs: Vec<IpAddr> = node
                .local_addresses()
                .into_iter()
                .filter(|ip| IpFamily::of(ip) == family && !ip.is_loopback())
                .collect();
            addrs.sort();
            addrs.dedup();
            addrs
        }
    }
}

/// The node's primary address of `family` when it is local, else its first non-loopback
/// local one: where traffic to a non-local frontend is sent.
fn first_address(node: &NodeContext, family: IpFamily) -> Option<IpAddr> {
    let local: Vec<IpAddr> = node
        .local_addresses()
        .into_iter()
        .filter(|ip| IpFamily::of(ip) == family && !ip.is_loopback())
        .collect();
    node.primary_ip(family)
        .filter(|ip| local.contains(ip))
        .or_else(|| local.first().copied())
}

/// The comment of a listener's port in `relay-ports`: the listener's name, which pairs a
/// port read back from the kernel with its listener (see `trace`).
pub fn relay_comment(key: &Key) -> Comment {
    Comment::sanitised(&super::plan::name(key))
}
