//! Unit tests of the intended differences: each entry covers what it names and nothing else.

use super::*;
use crate::differential::frontends::Via;
use crate::differential::generate::generate;
use crate::lab::Proto;
use crate::lab::cluster::Family;

fn served(pod: &str, seen: Seen) -> Obs {
    Obs::Served {
        pod: pod.into(),
        port: 8080,
        seen,
    }
}

fn key() -> Key {
    Key {
        service: "s0".into(),
        port: "t0/TCP".into(),
        proto: Proto::Tcp,
        family: Family::V4,
        via: Via::ClusterIp,
        source: Source::Pod { node: 0 },
    }
}

#[test]
fn every_entry_names_its_modes_and_reason_once() {
    let mut names: Vec<&str> = INTENDED.iter().map(|i| i.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), INTENDED.len(), "names are unique");
    for i in INTENDED {
        assert!(!i.modes.is_empty() && i.reason.len() > 40, "{}", i.name);
    }
}

#[test]
fn the_relay_covers_only_a_changed_source_address() {
    let world = generate(1);
    let svc = Some(&world.services[0]);
    let up = Outcome([served("n2-a", Seen::Client), served("n3-a", Seen::Client)].into());
    let relayed = Outcome([served("n2-a", Seen::Node(0)), served("n3-a", Seen::Node(0))].into());
    let k = key();
    assert!(find(Mode::Userspace, svc, &k, &up, &relayed).is_some());
    // Not in another mode.
    assert!(find(Mode::Nftables, svc, &k, &up, &relayed).is_none());
    // Not when an endpoint is missing.
    let fewer = Outcome([served("n2-a", Seen::Node(0))].into());
    assert!(find(Mode::Userspace, svc, &k, &up, &fewer).is_none());
    // Not when a pod's own address reached the endpoint.
    let kept = Outcome([served("n2-a", Seen::Client), served("n3-a", Seen::Client)].into());
    let relayed_one =
        Outcome([served("n2-a", Seen::Node(0)), served("n3-a", Seen::Node(1))].into());
    assert!(find(Mode::Userspace, svc, &k, &relayed_one, &kept).is_none());
    // Not when a failure differs.
    let refused = Outcome([Obs::Refused].into());
    let dropped = Outcome([Obs::Dropped].into());
    assert!(find(Mode::Userspace, svc, &k, &refused, &dropped).is_none());
}

#[test]
fn ebpf_without_nat_covers_only_inside_sources_that_kept_their_address() {
    let world = generate(1);
    let svc = Some(&world.services[0]);
    let up = Outcome([served("n1-b", Seen::Node(0)), served("n2-a", Seen::Client)].into());
    let ours = Outcome([served("n1-b", Seen::Client), served("n2-a", Seen::Client)].into());
    let k = key();
    let name = |m| find(m, svc, &k, &up, &ours).map(|i| i.name);
    assert_eq!(
        name(Mode::Ebpf),
        Some("eBPF balances the node's and pods' sockets without NAT")
    );
    assert_eq!(name(Mode::Nftables), None);
    // Not from outside, where the tc programs rewrite the source as a masquerade would.
    let outside = Key {
        source: Source::Client,
        ..key()
    };
    assert!(find(Mode::Ebpf, svc, &outside, &up, &ours).is_none());
    // Not when ours masqueraded where upstream did not.
    assert!(find(Mode::Ebpf, svc, &k, &ours, &up).is_none());
}

#[test]
fn node_ports_on_every_address_cover_only_the_pod_gateway_refused_upstream() {
    let world = generate(1);
    let svc = Some(&world.services[0]);
    let gateway = Key {
        via: Via::NodePortGateway { node: 0 },
        ..key()
    };
    let refused = Outcome([Obs::Refused].into());
    let ours = Outcome([served("n2-a", Seen::Client)].into());
    assert!(find(Mode::Ebpf, svc, &gateway, &refused, &ours).is_some());
    assert!(find(Mode::Userspace, svc, &gateway, &refused, &ours).is_some());
    assert!(find(Mode::Nftables, svc, &gateway, &refused, &ours).is_none());
    let on_node = Key {
        via: Via::NodePort { node: 0 },
        ..key()
    };
    assert!(find(Mode::Ebpf, svc, &on_node, &refused, &ours).is_none());
    let dropped = Outcome([Obs::Dropped].into());
    assert!(find(Mode::Ebpf, svc, &gateway, &dropped, &ours).is_none());
}

#[test]
fn ebpf_udp_refusal_covers_only_the_nodes_own_eperm() {
    let world = generate(1);
    let svc = Some(&world.services[0]);
    let node_udp = Key {
        source: Source::Node(2),
        proto: Proto::Udp,
        port: "u0/UDP".into(),
        ..key()
    };
    let eperm = Outcome([Obs::Other("Operation not permitted (os error 1)".into())].into());
    let refused = Outcome([Obs::Refused].into());
    assert!(find(Mode::Ebpf, svc, &node_udp, &eperm, &refused).is_some());
    let pod_udp = Key {
        source: Source::Pod { node: 0 },
        ..node_udp.clone()
    };
    assert!(find(Mode::Ebpf, svc, &pod_udp, &eperm, &refused).is_none());
    let dropped = Outcome([Obs::Dropped].into());
    assert_ne!(
        find(Mode::Ebpf, svc, &node_udp, &eperm, &dropped).map(|i| i.name),
        Some("eBPF refuses the node's UDP to a Service without endpoints at once")
    );
}

#[test]
fn closed_source_ranges_cover_only_a_load_balancer_ip_of_a_family_without_ranges() {
    let mut world = generate(1);
    let svc = &mut world.services[0];
    svc.source_ranges = vec!["fd00:200::/64".into()];
    let lb = Key {
        via: Via::LoadBalancer("198.51.100.15".parse().unwrap()),
        source: Source::Client,
        ..key()
    };
    let up = Outcome([served("n1-a", Seen::Node(0))].into());
    let unreachable = Outcome([Obs::Unreachable].into());
    let name = "source ranges of one family close the other family's LoadBalancer IPs";
    let found = |svc: &Svc, k: &Key, ours: &Outcome| {
        find(Mode::Nftables, Some(svc), k, &up, ours).map(|i| i.name)
    };
    assert_eq!(found(svc, &lb, &unreachable), Some(name));
    // Not where ours served, nor on another frontend.
    assert_eq!(found(svc, &lb, &up), None);
    let cluster_ip = Key {
        via: Via::ClusterIp,
        ..lb.clone()
    };
    assert_eq!(found(svc, &cluster_ip, &unreachable), None);
    // Not when a range of the family is there, nor without ranges.
    svc.source_ranges.push("192.168.200.100/32".into());
    assert_eq!(found(svc, &lb, &unreachable), None);
    svc.source_ranges.clear();
    assert_eq!(found(svc, &lb, &unreachable), None);
    // The IPv6 LoadBalancer IP of a Service with only IPv4 ranges.
    svc.source_ranges = vec!["10.244.0.0/16".into()];
    let lb6 = Key {
        via: Via::LoadBalancer("fd00:198::10".parse().unwrap()),
        family: Family::V6,
        ..lb.clone()
    };
    assert_eq!(found(svc, &lb6, &unreachable), Some(name));
}

#[test]
fn ebpf_udp_timeout_covers_only_the_nodes_own_eperm() {
    let world = generate(1);
    let svc = Some(&world.services[0]);
    let node_udp = Key {
        source: Source::Node(2),
        proto: Proto::Udp,
        port: "u0/UDP".into(),
        ..key()
    };
    let eperm = Outcome([Obs::Other("Operation not permitted (os error 1)".into())].into());
    let dropped = Outcome([Obs::Dropped].into());
    let name = |m, k: &Key, up: &Outcome, ours: &Outcome| find(m, svc, k, up, ours).map(|i| i.name);
    assert_eq!(
        name(Mode::Ebpf, &node_udp, &eperm, &dropped),
        Some("eBPF fails the node's UDP that upstream drops with ETIMEDOUT")
    );
    assert_eq!(name(Mode::Nftables, &node_udp, &eperm, &dropped), None);
    let pod_udp = Key {
        source: Source::Pod { node: 0 },
        ..node_udp.clone()
    };
    assert_eq!(name(Mode::Ebpf, &pod_udp, &eperm, &dropped), None);
    let node_tcp = Key {
        proto: Proto::Tcp,
        ..node_udp.clone()
    };
    assert_eq!(name(Mode::Ebpf, &node_tcp, &eperm, &dropped), None);
    let served = Outcome([served("n3-a", Seen::Client)].into());
    assert_eq!(name(Mode::Ebpf, &node_udp, &served, &dropped), None);
}

#[test]
fn ebpf_early_refusal_covers_only_inside_sources_outside_the_ranges() {
    let mut world = generate(1);
    let svc = &mut world.services[0];
    svc.source_ranges = vec!["10.244.2.0/24".into()];
    let lb = Key {
        via: Via::LoadBalancer("198.51.100.16".parse().unwrap()),
        source: Source::Node(2),
        ..key()
    };
    let dropped = Outcome([Obs::Dropped].into());
    let refused = Outcome([Obs::Refused].into());
    let name = "eBPF refuses a restricted LoadBalancer IP without endpoints before its ranges";
    let found = |svc: &Svc, k: &Key, up: &Outcome, ours: &Outcome| {
        find(Mode::Ebpf, Some(svc), k, up, ours).map(|i| i.name)
    };
    assert_eq!(found(svc, &lb, &dropped, &refused), Some(name));
    let pod_outside = Key {
        source: Source::Pod { node: 0 },
        ..lb.clone()
    };
    assert_eq!(found(svc, &pod_outside, &dropped, &refused), Some(name));
    // Not for a pod inside the ranges, nor from outside the node, nor without ranges.
    let pod_inside = Key {
        source: Source::Pod { node: 1 },
        ..lb.clone()
    };
    assert_eq!(found(svc, &pod_inside, &dropped, &refused), None);
    let outside = Key {
        source: Source::Client,
        ..lb.clone()
    };
    assert_eq!(found(svc, &outside, &dropped, &refused), None);
    // Not where upstream served, nor on another frontend.
    let served = Outcome([served("n3-a", Seen::Client)].into());
    assert_eq!(found(svc, &lb, &served, &refused), None);
    let cluster_ip = Key {
        via: Via::ClusterIp,
        ..lb.clone()
    };
    assert_eq!(found(svc, &cluster_ip, &dropped, &refused), None);
    assert_eq!(
        find(Mode::Nftables, Some(svc), &lb, &dropped, &refused).map(|i| i.name),
        None
    );
    svc.source_ranges.clear();
    assert_eq!(found(svc, &lb, &dropped, &refused), None);
}

#[test]
fn routed_unallocated_addresses_cover_only_addresses_no_served_service_has() {
    let mut world = generate(1);
    let dropped = Outcome([Obs::Dropped].into());
    let unreachable = Outcome([Obs::Unreachable].into());
    let name = "unallocated ClusterIPs are routed, as in upstream's iptables and ipvs modes";
    let unallocated = Key {
        service: super::super::frontends::NO_SERVICE.into(),
        via: Via::Unallocated,
        ..key()
    };
    let found = |m, svc: Option<&Svc>, k: &Key, up: &Outcome, ours: &Outcome| {
        find(m, svc, k, up, ours).map(|i| i.name)
    };
    assert_eq!(
        found(Mode::Ebpf, None, &unallocated, &dropped, &unreachable),
        Some(name)
    );
    assert_eq!(
        found(Mode::Userspace, None, &unallocated, &dropped, &unreachable),
        Some(name)
    );
    // Not in nftables mode, where upstream's drop is the reference for ours.
    assert_eq!(
        found(Mode::Nftables, None, &unallocated, &dropped, &unreachable),
        None
    );
    // Not where ours served or refused.
    let refused = Outcome([Obs::Refused].into());
    assert_eq!(
        found(Mode::Ebpf, None, &unallocated, &dropped, &refused),
        None
    );
    // The ClusterIP of a Service for another proxy, not of one ours serves.
    let svc = &mut world.services[0];
    svc.label = None;
    let k = key();
    assert_eq!(
        found(Mode::Ebpf, Some(svc), &k, &dropped, &unreachable),
        None
    );
    svc.label = Some(ProxyLabel::OtherProxyName);
    assert_eq!(
        found(Mode::Ebpf, Some(svc), &k, &dropped, &unreachable),
        Some(name)
    );
    // Not its NodePort.
    let node_port = Key {
        via: Via::NodePort { node: 0 },
        ..k.clone()
    };
    assert_eq!(
        found(Mode::Ebpf, Some(svc), &node_port, &dropped, &unreachable),
        None
    );
}

#[test]
fn another_nodes_pod_covers_only_the_answers_upstream_lost() {
    let mut world = generate(1);
    let svc = &mut world.services[0];
    svc.kind = crate::differential::model::Kind::NodePort;
    svc.etp_local = true;
    let k = Key {
        via: Via::NodePort { node: 1 },
        source: Source::Pod { node: 0 },
        ..key()
    };
    let name = "another node's pod at a Local NodePort gets no answer that upstream loses";
    let found = |m, svc: &Svc, k: &Key, up: &Outcome, ours: &Outcome| {
        find(m, Some(svc), k, up, ours).map(|i| i.name)
    };
    let dropped = Outcome([Obs::Dropped].into());
    // eBPF: this node's endpoints, where upstream also lost some answers.
    let local = Outcome([served("n2-a", Seen::Client), served("n2-b", Seen::Client)].into());
    let up = local.clone().union(&dropped);
    assert_eq!(found(Mode::Ebpf, svc, &k, &up, &local), Some(name));
    // Userspace: every endpoint, relayed; upstream served only node 2's.
    let relayed = Outcome([served("n2-a", Seen::Node(1)), served("n3-a", Seen::Node(1))].into());
    let up_local = Outcome([served("n2-a", Seen::Client), Obs::Dropped].into());
    assert_eq!(
        found(Mode::Userspace, svc, &k, &up_local, &relayed),
        Some(name)
    );
    assert_eq!(
        found(Mode::Userspace, svc, &k, &dropped, &relayed),
        Some(name)
    );
    // Not in nftables mode, nor when upstream lost nothing.
    assert_eq!(found(Mode::Nftables, svc, &k, &up, &local), None);
    assert_eq!(found(Mode::Userspace, svc, &k, &local, &relayed), None);
    // Not when upstream served an endpoint ours did not, or one on a third node.
    let other = up
        .clone()
        .union(&Outcome([served("n3-a", Seen::Client)].into()));
    assert_eq!(found(Mode::Ebpf, svc, &k, &other, &local), None);
    let third = Outcome([served("n3-a", Seen::Client), Obs::Dropped].into());
    assert_eq!(found(Mode::Userspace, svc, &k, &third, &relayed), None);
    // Not when ours failed too.
    let failing = local.clone().union(&Outcome([Obs::Refused].into()));
    assert_eq!(found(Mode::Ebpf, svc, &k, &up, &failing), None);
    // Not for the pod's own node, nor from outside, nor under the Cluster policy.
    let own = Key {
        via: Via::NodePort { node: 0 },
        ..k.clone()
    };
    assert_eq!(found(Mode::Ebpf, svc, &own, &up, &local), None);
    let outside = Key {
        source: Source::Client,
        ..k.clone()
    };
    assert_eq!(found(Mode::Ebpf, svc, &outside, &up, &local), None);
    svc.etp_local = false;
    assert_eq!(found(Mode::Ebpf, svc, &k, &up, &local), None);
}

#[path = "intended_ipvs_tests.rs"]
mod ipvs;
