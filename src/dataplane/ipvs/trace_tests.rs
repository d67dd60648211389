//! Packet-flow tests of the IPVS plan: plan a small snapshot, trace packets through the
//! virtual services and helper rules, and state where they end up; and the same packets
//! against the nftables mode's plan of the same snapshot, which must agree. The nftables mode
//! is asked through the mode registry, as `explain` asks a mode, so these tests know no part
//! of its folder.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use proptest::prelude::*;

use super::*;
use crate::cluster::{Features, IpFamily, Protocol, Snapshot, Tracker};
use crate::config::{Config, DetectLocalMode, NodePortAddresses, ProxyMode};
use crate::dataplane::inspect::{self, Outcome, from_branches};
use crate::dataplane::ipvs::desired::{Masquerade, VirtualService};
use crate::dataplane::ipvs::mode_config::ModeConfig;
use crate::dataplane::ipvs::plan::{HostAddresses, plan};
use crate::dataplane::ipvs::rules_all;
use crate::dataplane::modes;
use crate::dataplane::node::{DetectLocal, NodePolicy};
use crate::nft::trace::Trace;
use crate::testing::changes::{events, step};
use crate::testing::snapshots::{Svc, ip, node, snapshot, svc};
use crate::testing::{applied_node, node as node_object};

const POD: &str = "10.244.1.5";
const CLIENT: &str = "203.0.113.9";
const NODE_IP: &str = "10.0.0.11";

fn node_policy() -> NodePolicy {
    NodePolicy {
        detect_local: DetectLocal::ClusterCidrs(vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:244::/32".parse().unwrap(),
        ]),
        ..ModeConfig::default().node
    }
}

/// The configuration the mode registry plans the nftables mode with: the IPVS mode's
/// defaults, pods told apart by the cluster CIDRs, so that it resolves to [`node_policy`].
fn config() -> Config {
    Config {
        mode: ProxyMode::Ipvs,
        detect_local_mode: DetectLocalMode::ClusterCidr,
        cluster_cidrs: vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:244::/32".parse().unwrap(),
        ],
        node_port_addresses: NodePortAddresses::default_for(ProxyMode::Ipvs),
        ..Config::default()
    }
}

fn cfg() -> ModeConfig {
    ModeConfig {
        node: node_policy(),
        ..ModeConfig::default()
    }
}

/// One family's plan of a snapshot, with its helper table.
struct Lab {
    desired: Desired,
    rules: Ruleset,
    local: Vec<IpAddr>,
}

impl Lab {
    fn of(snap: &Snapshot, cfg: &ModeConfig, family: IpFamily) -> Lab {
        let host = HostAddresses::default();
        let both = IpFamily::ALL.map(|f| plan(snap, cfg, f, &host));
        let bound = crate::dataplane::ipvs::bound_addresses(&both, &Default::default());
        let tables = rules_all(&both, cfg, &snap.node, &bound);
        let i = IpFamily::ALL.iter().position(|f| *f == family).unwrap();
        Lab {
            desired: both[i].clone(),
            rules: tables[i].clone(),
            local: snap.node.local_addresses(),
        }
    }

    fn new(services: Vec<Svc>) -> Lab {
        Lab::of(&snapshot(node(), services), &cfg(), IpFamily::V4)
    }

    fn send(&self, proto: Protocol, src: &str, dst: &str, port: u16) -> Trace {
        let p = packet(proto, ip(src), ip(dst), port, &self.local);
        trace(&self.desired, &self.rules, &p, &self.local)
    }

    fn tcp(&self, src: &str, dst: &str, port: u16) -> Trace {
        self.send(Protocol::Tcp, src, dst, port)
    }
}

/// A packet from `src`: a local pod's through its veth, the node's own from a socket, any
/// other through the uplink.
fn packet(protocol: Protocol, src: IpAddr, dst: IpAddr, dport: u16, local: &[IpAddr]) -> Packet {
    let origin =
        if src.to_string().starts_with("10.244.1.") || src.to_string().starts_with("fd00:244:1:") {
            Origin::Interface("veth1".into())
        } else if local.contains(&src) {
            Origin::Host
        } else {
            Origin::Interface("eth0".into())
        };
    Packet {
        protocol,
        src,
        dst,
        dport,
        origin,
    }
}

fn eps(list: &[(&str, u16)]) -> BTreeSet<(IpAddr, u16)> {
    list.iter().map(|(a, p)| (ip(a), *p)).collect()
}

fn web() -> Svc {
    svc("default/web", "10.96.0.10", 80)
        .ep("10.244.1.2", 8080, "node-a")
        .ep("10.244.2.2", 8080, "node-b")
}

#[test]
fn a_cluster_ip_from_a_local_pod_reaches_every_endpoint_with_its_source() {
    let t = Lab::new(vec![web()]).tcp(POD, "10.96.0.10", 80);
    assert_eq!(
        t.endpoints(),
        eps(&[("10.244.1.2", 8080), ("10.244.2.2", 8080)])
    );
    assert_eq!(t.fate(), Some(Fate::Accept));
    assert_eq!(t.masquerade(), Some(false));
}

#[test]
fn a_cluster_ip_from_outside_the_cluster_or_from_the_node_is_masqueraded() {
    let lab = Lab::new(vec![web()]);
    for src in [CLIENT, NODE_IP] {
        let t = lab.tcp(src, "10.96.0.10", 80);
        assert_eq!(t.endpoints().len(), 2, "{src}");
        assert_eq!(t.masquerade(), Some(true), "{src}");
    }
}

#[test]
fn a_pod_reaching_itself_through_its_service_is_masqueraded() {
    let lab = Lab::new(vec![
        svc("default/self", "10.96.0.11", 80).ep(POD, 8080, "node-a"),
    ]);
    let t = lab.tcp(POD, "10.96.0.11", 80);
    assert_eq!(t.endpoints(), eps(&[(POD, 8080)]));
    assert_eq!(t.masquerade(), Some(true));
}

#[test]
fn a_service_without_endpoints_is_refused_before_ipvs_answers() {
    let lab = Lab::new(vec![svc("default/empty", "10.96.0.12", 80)]);
    for proto in [Protocol::Tcp, Protocol::Udp] {
        let t = lab.send(proto, POD, "10.96.0.12", 80);
        assert_eq!(t.fate(), Some(Fate::Reject), "{proto:?}");
        assert!(t.endpoints().is_empty());
    }
}

#[test]
fn a_port_no_service_has_on_a_service_address_is_refused() {
    let t = Lab::new(vec![web()]).tcp(POD, "10.96.0.10", 81);
    assert_eq!(t.fate(), Some(Fate::Reject));
}

#[test]
fn a_node_port_from_outside_is_masqueraded_unless_the_policy_is_local() {
    let cluster = Lab::new(vec![web().node_port(30080)]);
    let t = cluster.tcp(CLIENT, NODE_IP, 30080);
    assert_eq!(t.endpoints().len(), 2);
    assert_eq!(t.masquerade(), Some(true));

    let local = Lab::new(vec![web().node_port(30080).external_local()]);
    let t = local.tcp(CLIENT, NODE_IP, 30080);
    assert_eq!(t.endpoints(), eps(&[("10.244.1.2", 8080)]));
    assert_eq!(t.masquerade(), Some(false));
}

#[test]
fn local_policy_without_a_local_endpoint_drops_outside_traffic_but_serves_pods() {
    let remote = svc("default/remote", "10.96.0.13", 80)
        .ep("10.244.2.2", 8080, "node-b")
        .lb("192.0.2.10")
        .node_port(30081)
        .external_local();
    let lab = Lab::new(vec![remote]);
    assert_eq!(lab.tcp(CLIENT, "192.0.2.10", 80).fate(), Some(Fate::Drop));
    assert_eq!(lab.tcp(CLIENT, NODE_IP, 30081).fate(), Some(Fate::Drop));
    let t = lab.tcp(POD, "192.0.2.10", 80);
    assert_eq!(t.endpoints(), eps(&[("10.244.2.2", 8080)]));
}

#[test]
fn source_ranges_drop_other_clients_of_a_load_balancer_ip() {
    let lab = Lab::new(vec![web().lb("192.0.2.10").range("198.51.100.0/24")]);
    assert_eq!(lab.tcp(CLIENT, "192.0.2.10", 80).fate(), Some(Fate::Drop));
    let t = lab.tcp("198.51.100.7", "192.0.2.10", 80);
    assert_eq!(t.endpoints().len(), 2);
}

#[test]
fn a_local_address_no_service_has_is_the_nodes() {
    let t = Lab::new(vec![web()]).tcp(CLIENT, NODE_IP, 22);
    assert_eq!(t.fate(), Some(Fate::Accept));
    assert!(t.endpoints().is_empty());
}

/// Every frontend of `lab`'s plan (address and port, with the protocol) that one service port
/// alone plans. Two Services on one frontend (which the API server's allocators prevent for
/// ClusterIPs and NodePorts, not for external addresses) are a misconfiguration each mode
/// settles its own way: IPVS gives the frontend to the first port, the nftables mode's
/// treatment and guard maps can end up with different ports' entries. So is one port whose
/// externalIP is its own ClusterIP: one virtual service takes the internal policy, the
/// nftables mode's external entry the external one.
fn frontends<'a>(
    lab: &'a Lab,
    snap: &Snapshot,
) -> Vec<(Protocol, IpAddr, u16, &'a VirtualService)> {
    let host = crate::dataplane::ipvs::plan::node_port_addresses(
        snap,
        &cfg(),
        lab.desired.family,
        &HostAddresses::default(),
    );
    let mut claims: std::collections::BTreeMap<ServiceKey, usize> = Default::default();
    for state in snap.ports.values() {
        let mut one = Desired::new(lab.desired.family);
        crate::dataplane::ipvs::plan::contribute(&mut one, state, &cfg(), &snap.node, &host);
        for key in one.services.keys() {
            *claims.entry(*key).or_default() += 1;
        }
    }
    lab.desired
        .services
        .iter()
        .filter(|(key, _)| claims.get(key) == Some(&1))
        .filter_map(|(key, vs)| match key {
            ServiceKey::Address { address, .. } => {
                let a = &lab.desired.addresses;
                let ip = address.ip();
                let both = a.cluster_ips.contains(&ip) && a.external.contains(&ip);
                (!both).then_some((vs.owner.protocol, ip, address.port(), vs))
            }
            ServiceKey::Fwmark { .. } => None,
        })
        .collect()
}

/// The known differences, each harmless to the client (docs/operations.md, IPVS mode):
/// - the node connecting to its own NodePort of a Service without endpoints, or whose Local
///   policies (both) leave it no local endpoint: the nftables mode (as upstream's) checks
///   NodePorts without (local) endpoints on input only, so its trace delivers the packet to
///   the node, whose stack refuses it (nothing listens there); the IPVS mode's guard refuses
///   or drops it before IPVS;
/// - a pod or the node reaching an external frontend with `externalTrafficPolicy: Local`
///   that has local endpoints: a virtual service has one list of destinations for every
///   source, so they reach the local selection (terminating local ones included, when no
///   local one is ready), where the nftables mode sends them to the cluster's (upstream's
///   IPVS mode does the same as ours).
fn known_difference(p: &Packet, vs: &VirtualService, ours: &Outcome, theirs: &Outcome) -> bool {
    use inspect::Verdict::{Dropped, Forwarded, Rejected, Untouched};
    let refused_here_delivered_there = p.origin == Origin::Host
        && matches!(ours.verdict, Rejected | Dropped)
        && theirs.verdict == Untouched;
    let from_inside = p.origin == Origin::Host || p.origin == Origin::Interface("veth1".into());
    let local_endpoints_for_everyone = from_inside
        && vs.masquerade == Masquerade::FromNode
        && ours.verdict == Forwarded
        && matches!(theirs.verdict, Forwarded | Untouched)
        && ours.masquerade == theirs.masquerade;
    refused_here_delivered_there || local_endpoints_for_everyone
}

/// `p` as the mode registry's inspection walks it.
fn walked(p: &Packet, local: &[IpAddr]) -> inspect::Packet {
    let (origin, interface) = match &p.origin {
        Origin::Host => (inspect::Origin::Node, None),
        Origin::Interface(i) if i == "veth1" => (inspect::Origin::Pod, Some(i.clone())),
        Origin::Interface(i) => (inspect::Origin::Outside, Some(i.clone())),
    };
    inspect::Packet {
        protocol: p.protocol,
        to: SocketAddr::new(p.dst, p.dport),
        source: p.src,
        origin,
        interface,
        local: local.to_vec(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// The IPVS mode follows the nftables mode's behaviour (see the planner's module doc), so
    /// for every frontend and every kind of client both plans of one snapshot must send the
    /// first packet the same way: the same verdict, the same endpoints, the same masquerade,
    /// as `explain` would tell them.
    #[test]
    fn ipvs_and_nftables_plans_send_packets_alike(
        batches in proptest::collection::vec(proptest::collection::vec(step(), 1..4), 1..6),
    ) {
        let mut tracker = Tracker::new("node-a", Features::default());
        tracker.apply(&applied_node(node_object("node-a", NODE_IP, None)));
        for batch in &batches {
            for s in batch {
                for e in events(s) {
                    tracker.apply(&e);
                }
            }
        }
        let (snap, _) = tracker.snapshot();
        let (nftables, policy) = modes::of(ProxyMode::Nftables)
            .inspect()
            .plan(&config(), &snap, true)
            .expect("the nftables mode plans offline");
        prop_assert_eq!(&policy, &node_policy(), "both modes planned with one node policy");
        for family in IpFamily::ALL {
            let lab = Lab::of(&snap, &cfg(), family);
            let clients: &[&str] = match family {
                IpFamily::V4 => &[POD, CLIENT, NODE_IP],
                IpFamily::V6 => &["fd00:244:1::5", "2001:db8:9::9"],
            };
            for (proto, dst, port, vs) in frontends(&lab, &snap) {
                for src in clients {
                    let p = packet(proto, ip(src), dst, port, &lab.local);
                    let ours = from_branches(&trace(&lab.desired, &lab.rules, &p, &lab.local));
                    let theirs = nftables.rules(family).walk(&walked(&p, &lab.local));
                    if known_difference(&p, vs, &ours, &theirs) {
                        continue;
                    }
                    prop_assert_eq!(ours, theirs, "{:?} {} → {}:{}", proto, src, dst, port);
                }
            }
        }
    }
}
