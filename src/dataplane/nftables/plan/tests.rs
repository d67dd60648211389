//! Packet-flow tests of the planner: plan a small snapshot, then trace packets through the typed
//! ruleset and state where they end up.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::*;
use crate::cluster::Protocol;
use crate::config::NodePortAddresses;
use crate::dataplane::node::{DetectLocal, IfName, NodePolicy};
use crate::nft::trace::{self, Fate, Origin, Packet, Trace};
use crate::testing::snapshots::{Svc, ip, node, snapshot, svc};

const POD: &str = "10.244.1.5";
const REMOTE_POD: &str = "10.244.2.5";
const CLIENT: &str = "203.0.113.9";

fn cluster_cidr() -> ModeConfig {
    ModeConfig {
        node: NodePolicy {
            detect_local: DetectLocal::ClusterCidrs(vec!["10.244.0.0/16".parse().unwrap()]),
            ..ModeConfig::default().node
        },
    }
}

fn web() -> Svc {
    svc("default/web", "10.96.0.10", 80)
        .ep("10.244.1.2", 8080, "node-a")
        .ep("10.244.2.2", 8080, "node-b")
}

struct Lab {
    rules: Ruleset,
    local: Vec<IpAddr>,
}

impl Lab {
    fn new(cfg: &ModeConfig, services: Vec<Svc>) -> Lab {
        let snap = snapshot(node(), services);
        Lab {
            rules: plan(&snap, cfg, IpFamily::V4),
            local: node().addresses.iter().map(|a| a.ip).collect(),
        }
    }

    fn send(&self, proto: Protocol, src: &str, dst: &str, port: u16, origin: Origin) -> Trace {
        let p = Packet {
            protocol: proto,
            src: ip(src),
            dst: ip(dst),
            dport: port,
            origin,
        };
        trace::trace(&self.rules, &p, &self.local)
    }

    fn tcp(&self, src: &str, dst: &str, port: u16) -> Trace {
        let origin = if src.starts_with("10.244.1.") {
            Origin::Interface("veth1".into())
        } else if self.local.contains(&ip(src)) {
            Origin::Host
        } else {
            Origin::Interface("eth0".into())
        };
        self.send(Protocol::Tcp, src, dst, port, origin)
    }
}

fn eps(list: &[(&str, u16)]) -> BTreeSet<(IpAddr, u16)> {
    list.iter().map(|(a, p)| (ip(a), *p)).collect()
}

#[test]
fn cluster_ip_from_a_local_pod_reaches_every_endpoint_without_masquerade() {
    let lab = Lab::new(&cluster_cidr(), vec![web()]);
    let t = lab.tcp(POD, "10.96.0.10", 80);
    assert_eq!(
        t.endpoints(),
        eps(&[("10.244.1.2", 8080), ("10.244.2.2", 8080)])
    );
    assert_eq!(t.fate(), Some(Fate::Accept));
    assert_eq!(t.masquerade(), Some(false));
}

#[test]
fn cluster_ip_from_outside_the_cluster_cidr_is_masqueraded() {
    let lab = Lab::new(&cluster_cidr(), vec![web()]);
    let t = lab.tcp(CLIENT, "10.96.0.10", 80);
    assert_eq!(t.endpoints().len(), 2);
    assert_eq!(t.masquerade(), Some(true));
}

#[test]
fn masquerade_all_masquerades_pod_traffic_too() {
    let cfg = ModeConfig {
        node: NodePolicy {
            masquerade_all: true,
            ..cluster_cidr().node
        },
    };
    let t = Lab::new(&cfg, vec![web()]).tcp(POD, "10.96.0.10", 80);
    assert_eq!(t.masquerade(), Some(true));
}

#[test]
fn without_local_detection_cluster_ip_traffic_keeps_its_source() {
    let t = Lab::new(&ModeConfig::default(), vec![web()]).tcp(CLIENT, "10.96.0.10", 80);
    assert_eq!(t.masquerade(), Some(false));
}

#[test]
fn bridge_and_prefix_detection_match_the_input_interface() {
    for (name, prefix, iif, local) in [
        ("cbr0", false, "cbr0", true),
        ("cbr0", false, "eth0", false),
        ("veth", true, "veth1234", true),
        ("veth", true, "eth0", false),
    ] {
        let cfg = ModeConfig {
            node: NodePolicy {
                detect_local: DetectLocal::Interface(IfName::new(name, prefix).unwrap()),
                ..ModeConfig::default().node
            },
        };
        let lab = Lab::new(&cfg, vec![web()]);
        let t = lab.send(
            Protocol::Tcp,
            POD,
            "10.96.0.10",
            80,
            Origin::Interface(iif.into()),
        );
        assert_eq!(t.masquerade(), Some(!local), "{name} {iif}");
    }
}

#[test]
fn node_cidr_detection_uses_the_nodes_pod_cidr() {
    let cfg = ModeConfig {
        node: NodePolicy {
            detect_local: DetectLocal::NodeCidr,
            ..ModeConfig::default().node
        },
    };
    let lab = Lab::new(&cfg, vec![web()]);
    assert_eq!(lab.tcp(POD, "10.96.0.10", 80).masquerade(), Some(false));
    assert_eq!(
        lab.tcp(REMOTE_POD, "10.96.0.10", 80).masquerade(),
        Some(true)
    );
}

#[test]
fn a_service_without_endpoints_rejects_on_every_frontend() {
    let s = svc("default/empty", "10.96.0.20", 80)
        .node_port(30020)
        .external("192.0.2.20");
    let lab = Lab::new(&cluster_cidr(), vec![s]);
    assert_eq!(lab.tcp(POD, "10.96.0.20", 80).fate(), Some(Fate::Reject));
    assert_eq!(lab.tcp(CLIENT, "192.0.2.20", 80).fate(), Some(Fate::Reject));
    assert_eq!(
        lab.tcp(CLIENT, "10.0.0.11", 30020).fate(),
        Some(Fate::Reject)
    );
}

#[test]
fn a_cluster_ip_port_no_service_defines_is_rejected() {
    let lab = Lab::new(&cluster_cidr(), vec![web()]);
    assert_eq!(lab.tcp(POD, "10.96.0.10", 81).fate(), Some(Fate::Reject));
    assert_eq!(lab.tcp(POD, "10.96.9.9", 80).fate(), Some(Fate::Accept));
}

#[test]
fn an_address_of_a_service_cidr_that_no_service_holds_is_dropped() {
    let cidrs: Vec<ipnet::IpNet> = ["10.96.0.0/16", "10.96.128.0/17", "fd00:96::/112"]
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    let snap = snapshot(node(), vec![web()]).with_service_cidrs(cidrs);
    let [v4, v6] = crate::dataplane::nftables::plan_all(&snap, &cluster_cidr());
    let lab = Lab {
        rules: v4,
        local: node().addresses.iter().map(|a| a.ip).collect(),
    };
    // Held ClusterIP: served at its port, refused at another; a free address of the range is
    // dropped, from a pod and from the node; an address outside the ranges is left alone.
    assert_eq!(lab.tcp(POD, "10.96.0.10", 80).fate(), Some(Fate::Accept));
    assert_eq!(lab.tcp(POD, "10.96.0.10", 81).fate(), Some(Fate::Reject));
    assert_eq!(lab.tcp(POD, "10.96.9.9", 80).fate(), Some(Fate::Drop));
    assert_eq!(
        lab.tcp("10.0.0.11", "10.96.9.9", 80).fate(),
        Some(Fate::Drop)
    );
    assert_eq!(lab.tcp(POD, "10.97.0.1", 80).fate(), Some(Fate::Accept));
    // One rule per range of the family, the contained one merged into its container.
    assert_eq!(unallocated_drops(&lab.rules), 1);
    assert_eq!(unallocated_drops(&v6), 1);
    let p = Packet {
        protocol: Protocol::Udp,
        src: ip("fd00:244:1::5"),
        dst: ip("fd00:96::77"),
        dport: 53,
        origin: Origin::Interface("veth1".into()),
    };
    assert_eq!(trace::trace(&v6, &p, &[]).fate(), Some(Fate::Drop));
}

#[test]
fn without_service_cidrs_nothing_is_dropped_for_being_unallocated() {
    let lab = Lab::new(&cluster_cidr(), vec![web()]);
    assert_eq!(unallocated_drops(&lab.rules), 0);
}

#[test]
fn a_change_of_service_cidrs_alone_replans_the_skeleton() {
    let mut planner = Planner::new(cluster_cidr());
    let before = snapshot(node(), vec![web()]);
    planner.update(&before, &crate::cluster::Changes::default());
    let cidr: ipnet::IpNet = "10.96.0.0/16".parse().unwrap();
    let after = snapshot(node(), vec![web()]).with_service_cidrs(vec![cidr]);
    let update = planner.update(&after, &crate::cluster::Changes::default());
    assert!(update.full);
    assert_eq!(unallocated_drops(&planner.rulesets()[0]), 1);
    let again = planner.update(&after, &crate::cluster::Changes::default());
    assert!(!again.full, "the same ranges again: nothing to replan");
}

/// The rules of `cluster-ips-check` that drop.
fn unallocated_drops(rules: &Ruleset) -> usize {
    let drop = Statement::Verdict(crate::nft::ruleset::Verdict::Drop);
    rules.chains[&Name::fixed(names::CLUSTER_IPS_CHECK)]
        .rules
        .iter()
        .filter(|r| r.statements == [drop.clone()])
        .count()
}

#[test]
fn internal_policy_local_without_local_endpoints_drops() {
    let s = svc("default/l", "10.96.0.30", 80)
        .internal_local()
        .ep("10.244.2.3", 80, "node-b");
    let lab = Lab::new(&cluster_cidr(), vec![s]);
    assert_eq!(lab.tcp(POD, "10.96.0.30", 80).fate(), Some(Fate::Drop));
}

#[test]
fn internal_policy_local_reaches_only_local_endpoints() {
    let s = svc("default/l", "10.96.0.30", 80)
        .internal_local()
        .ep("10.244.1.3", 80, "node-a")
        .ep("10.244.2.3", 80, "node-b");
    let t = Lab::new(&cluster_cidr(), vec![s]).tcp(POD, "10.96.0.30", 80);
    assert_eq!(t.endpoints(), eps(&[("10.244.1.3", 80)]));
}

fn lb_local() -> Svc {
    svc("default/lb", "10.96.0.40", 443)
        .node_port(30443)
        .lb("192.0.2.40")
        .external_local()
        .ep("10.244.1.4", 8443, "node-a")
        .ep("10.244.2.4", 8443, "node-b")
}

#[test]
fn external_policy_local_keeps_the_client_address_and_uses_local_endpoints() {
    let lab = Lab::new(&cluster_cidr(), vec![lb_local()]);
    for (dst, port) in [("192.0.2.40", 443), ("10.0.0.11", 30443)] {
        let t = lab.tcp(CLIENT, dst, port);
        assert_eq!(t.endpoints(), eps(&[("10.244.1.4", 8443)]), "{dst}");
        assert_eq!(t.masquerade(), Some(false), "{dst}");
    }
}

#[test]
fn external_policy_local_short_circuits_pods_and_the_host_to_all_endpoints() {
    let lab = Lab::new(&cluster_cidr(), vec![lb_local()]);
    let all = eps(&[("10.244.1.4", 8443), ("10.244.2.4", 8443)]);
    let pod = lab.tcp(POD, "192.0.2.40", 443);
    assert_eq!(
        (pod.endpoints(), pod.masquerade()),
        (all.clone(), Some(false))
    );
    let host = lab.tcp("10.0.0.11", "10.0.0.11", 30443);
    assert_eq!((host.endpoints(), host.masquerade()), (all, Some(true)));
}

#[test]
fn external_policy_local_without_local_endpoints_drops_external_traffic() {
    let s = svc("default/lb", "10.96.0.40", 443)
        .node_port(30443)
        .lb("192.0.2.40")
        .external_local()
        .ep("10.244.2.4", 8443, "node-b");
    let lab = Lab::new(&cluster_cidr(), vec![s]);
    assert_eq!(lab.tcp(CLIENT, "192.0.2.40", 443).fate(), Some(Fate::Drop));
    assert_eq!(lab.tcp(CLIENT, "10.0.0.11", 30443).fate(), Some(Fate::Drop));
    assert_eq!(
        lab.tcp(POD, "192.0.2.40", 443).endpoints(),
        eps(&[("10.244.2.4", 8443)])
    );
}

#[test]
fn external_policy_cluster_masquerades_external_traffic() {
    let s = web().node_port(30080).external("192.0.2.10");
    let lab = Lab::new(&cluster_cidr(), vec![s]);
    for (dst, port) in [("192.0.2.10", 80), ("10.0.0.11", 30080)] {
        let t = lab.tcp(CLIENT, dst, port);
        assert_eq!(t.endpoints().len(), 2, "{dst}");
        assert_eq!(t.masquerade(), Some(true), "{dst}");
    }
}

#[test]
fn node_ports_answer_only_on_the_configured_addresses() {
    let s = web().node_port(30080);
    let primary = Lab::new(&cluster_cidr(), vec![s.clone()]);
    assert_eq!(primary.tcp(CLIENT, "10.0.0.11", 30080).endpoints().len(), 2);
    let other = primary.send(
        Protocol::Tcp,
        CLIENT,
        "127.0.0.1",
        30080,
        Origin::Interface("eth0".into()),
    );
    assert_eq!(other.endpoints().len(), 0);
    let cfg = ModeConfig {
        node: NodePolicy {
            node_ports: NodePortAddresses {
                all: true,
                ..NodePortAddresses::default()
            },
            ..cluster_cidr().node
        },
    };
    let mut all = Lab::new(&cfg, vec![s]);
    all.local.push(ip("192.168.5.5"));
    assert_eq!(all.tcp(CLIENT, "192.168.5.5", 30080).endpoints().len(), 2);
    let lo = all.send(
        Protocol::Tcp,
        CLIENT,
        "127.0.0.1",
        30080,
        Origin::Interface("eth0".into()),
    );
    assert_eq!(lo.endpoints().len(), 0);
}

#[test]
fn source_ranges_limit_load_balancer_ips_but_not_node_ports() {
    let s = web()
        .node_port(30080)
        .lb("192.0.2.50")
        .range("198.51.100.0/24");
    let lab = Lab::new(&cluster_cidr(), vec![s]);
    assert_eq!(
        lab.tcp("198.51.100.7", "192.0.2.50", 80).endpoints().len(),
        2
    );
    assert_eq!(lab.tcp(CLIENT, "192.0.2.50", 80).fate(), Some(Fate::Drop));
    assert_eq!(lab.tcp(CLIENT, "10.0.0.11", 30080).endpoints().len(), 2);
}

#[test]
fn a_node_inside_a_source_range_may_reach_its_load_balancer_from_the_vip() {
    let s = web()
        .lb("192.0.2.50")
        .range("10.0.0.0/24")
        .range("10.0.0.0/8");
    let lab = Lab::new(&cluster_cidr(), vec![s]);
    let from_vip = lab.send(
        Protocol::Tcp,
        "192.0.2.50",
        "192.0.2.50",
        80,
        Origin::Interface("lo".into()),
    );
    assert_eq!(from_vip.fate(), Some(Fate::Accept));
    let allow = &lab.rules.sets[&Name::fixed(names::FIREWALL_ALLOW)];
    assert_eq!(allow.elements.len(), 2, "nested ranges collapse: {allow:?}");
}

#[test]
fn a_pod_reaching_itself_through_its_service_is_masqueraded() {
    let lab = Lab::new(&cluster_cidr(), vec![web()]);
    let t = lab.tcp("10.244.1.2", "10.96.0.10", 80);
    let hairpin: BTreeSet<_> = t
        .branches
        .iter()
        .map(|b| (b.dnat.unwrap().0 == ip("10.244.1.2"), b.masquerade))
        .collect();
    assert_eq!(hairpin, BTreeSet::from([(true, true), (false, false)]));
}

#[test]
fn affinity_services_reach_every_endpoint_through_their_own_chain() {
    let lab = Lab::new(&cluster_cidr(), vec![web().affinity(60)]);
    let t = lab.tcp(POD, "10.96.0.10", 80);
    assert_eq!(
        t.endpoints(),
        eps(&[("10.244.1.2", 8080), ("10.244.2.2", 8080)])
    );
    let affinity: Vec<_> = lab
        .rules
        .sets
        .iter()
        .filter(|(_, s)| s.decl.dynamic_timeout == Some(60))
        .collect();
    assert_eq!(affinity.len(), 2, "one client set per endpoint");
}

#[test]
fn udp_and_sctp_ports_are_separate_frontends() {
    let udp = svc("kube-system/dns", "10.96.0.53", 53)
        .proto(Protocol::Udp)
        .ep("10.244.1.9", 53, "node-a");
    let sctp =
        svc("default/s", "10.96.0.54", 9)
            .proto(Protocol::Sctp)
            .ep("10.244.2.9", 9, "node-b");
    let lab = Lab::new(&cluster_cidr(), vec![udp, sctp]);
    let o = || Origin::Interface("veth1".into());
    assert_eq!(
        lab.send(Protocol::Udp, POD, "10.96.0.53", 53, o())
            .endpoints(),
        eps(&[("10.244.1.9", 53)])
    );
    assert_eq!(
        lab.send(Protocol::Tcp, POD, "10.96.0.53", 53, o()).fate(),
        Some(Fate::Reject)
    );
    assert_eq!(
        lab.send(Protocol::Sctp, POD, "10.96.0.54", 9, o())
            .endpoints(),
        eps(&[("10.244.2.9", 9)])
    );
}

#[test]
fn ipv6_services_are_planned_into_the_ip6_table_only() {
    let s = svc("default/v6", "fd00:96::10", 80).ep("fd00:244:1::2", 8080, "node-a");
    let snap = snapshot(node(), vec![s]);
    let [v4, v6] = crate::dataplane::nftables::plan_all(&snap, &ModeConfig::default());
    assert!(
        v4.sets[&Name::fixed(names::SERVICE_IPS)]
            .elements
            .is_empty()
    );
    let p = Packet {
        protocol: Protocol::Tcp,
        src: ip("fd00:244:1::5"),
        dst: ip("fd00:96::10"),
        dport: 80,
        origin: Origin::Interface("veth1".into()),
    };
    let t = trace::trace(&v6, &p, &[ip("fd00::11")]);
    assert_eq!(t.endpoints(), eps(&[("fd00:244:1::2", 8080)]));
}

#[test]
fn services_share_pick_chains_by_endpoint_count() {
    let many: Vec<Svc> = (0..50)
        .map(|i| {
            svc(&format!("ns/s{i}"), &format!("10.96.1.{i}"), 80).ep("10.244.2.2", 80, "node-b")
        })
        .collect();
    let lab = Lab::new(&ModeConfig::default(), many);
    let picks = lab
        .rules
        .chains
        .keys()
        .filter(|n| n.as_str().starts_with("pick-"))
        .count();
    assert_eq!(picks, 1);
}

#[test]
fn terminating_endpoints_are_used_only_when_no_endpoint_is_ready() {
    let s = svc("edge/draining", "10.96.0.60", 80)
        .ep_state("10.244.1.6", 80, "node-a", false, true)
        .ep_state("10.244.2.6", 80, "node-b", false, false);
    let t = Lab::new(&cluster_cidr(), vec![s]).tcp(POD, "10.96.0.60", 80);
    assert_eq!(t.endpoints(), eps(&[("10.244.1.6", 80)]));
}
