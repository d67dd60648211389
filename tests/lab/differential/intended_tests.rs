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

#[test]
fn ipvs_local_policies_without_local_endpoints_cover_only_ours_dropping() {
    let mut world = generate(1);
    let svc = &mut world.services[0];
    let dropped = Outcome([Obs::Dropped].into());
    let up = Outcome([served("n2-a", Seen::Node(0)), served("n2-b", Seen::Node(0))].into());
    let found = |mode, svc: &Svc, k: &Key, up: &Outcome, ours: &Outcome| {
        find(mode, Some(svc), k, up, ours).map(|i| i.name)
    };

    let internal = "IPVS: internalTrafficPolicy Local without a local endpoint drops";
    svc.itp_local = true;
    // Seed 1's first Service is a plain ClusterIP: upstream has no destination for it, and
    // IPVS refuses.
    assert!(!svc.externally_accessible());
    let refused = Outcome([Obs::Refused].into());
    assert_eq!(
        found(Mode::Ipvs, svc, &key(), &refused, &dropped),
        Some(internal)
    );
    assert_eq!(found(Mode::Ipvs, svc, &key(), &up, &dropped), None);
    // The node's own UDP send fails with EPERM where ours drops; not its TCP, nor a pod's UDP.
    let eperm = Outcome([Obs::Other("Operation not permitted (os error 1)".into())].into());
    let node_udp = Key {
        source: Source::Node(2),
        proto: Proto::Udp,
        port: "u0/UDP".into(),
        ..key()
    };
    assert_eq!(
        found(Mode::Ipvs, svc, &node_udp, &refused, &eperm),
        Some(internal)
    );
    let node_tcp = Key {
        source: Source::Node(2),
        ..key()
    };
    assert_eq!(found(Mode::Ipvs, svc, &node_tcp, &refused, &eperm), None);
    let pod_udp = Key {
        source: Source::Pod { node: 0 },
        ..node_udp.clone()
    };
    assert_eq!(found(Mode::Ipvs, svc, &pod_udp, &refused, &eperm), None);
    // Externally accessible, upstream keeps the cluster's endpoints and serves them; a refusal
    // is then no longer what upstream's IPVS mode does.
    svc.external_ips = vec!["203.0.113.9".parse().expect("an address")];
    assert_eq!(
        found(Mode::Ipvs, svc, &key(), &up, &dropped),
        Some(internal)
    );
    assert_eq!(found(Mode::Ipvs, svc, &key(), &refused, &dropped), None);
    // Upstream's attempts that reached the source pod itself, one of the endpoints but with no
    // nodeName (no hairpin masquerade upstream), get no answer: covered for that pod alone.
    let up_and_itself = Outcome(
        [
            served("n2-a", Seen::Client),
            served("n2-b", Seen::Client),
            Obs::Dropped,
        ]
        .into(),
    );
    assert_eq!(
        found(Mode::Ipvs, svc, &key(), &up_and_itself, &dropped),
        None
    );
    let mut hairpin = svc.clone();
    let slice = hairpin.slices.first_mut().expect("seed 1's s0 has a slice");
    slice.family = Family::V4;
    slice.endpoints.push(crate::differential::model::Ep {
        pod: Source::pod_name(0),
        ready: Some(true),
        serving: Some(true),
        terminating: Some(false),
        node: crate::differential::model::EpNode::Absent,
        hints: Default::default(),
    });
    assert_eq!(
        found(Mode::Ipvs, &hairpin, &key(), &up_and_itself, &dropped),
        Some(internal)
    );
    assert_eq!(
        found(Mode::Ipvs, &hairpin, &key(), &dropped, &dropped),
        None
    );
    // Not in another mode, nor where ours served or upstream did not, nor under Cluster.
    assert_eq!(found(Mode::Nftables, svc, &key(), &up, &dropped), None);
    assert_eq!(found(Mode::Ipvs, svc, &key(), &up, &up), None);
    assert_eq!(found(Mode::Ipvs, svc, &key(), &dropped, &dropped), None);
    assert_eq!(found(Mode::Ipvs, svc, &key(), &up, &refused), None);
    svc.itp_local = false;
    assert_eq!(found(Mode::Ipvs, svc, &key(), &up, &dropped), None);

    let external =
        "IPVS: externalTrafficPolicy Local without a local endpoint drops outside traffic";
    svc.etp_local = true;
    let node_port = Key {
        via: Via::NodePort { node: 0 },
        source: Source::Client,
        ..key()
    };
    let up_client = Outcome([served("n2-a", Seen::Client)].into());
    assert_eq!(
        found(Mode::Ipvs, svc, &node_port, &up_client, &dropped),
        Some(external)
    );
    // Not from a pod or a node, nor at the ClusterIP, nor where ours served.
    let from_pod = Key {
        source: Source::Pod { node: 0 },
        ..node_port.clone()
    };
    assert_eq!(
        found(Mode::Ipvs, svc, &from_pod, &up_client, &dropped),
        None
    );
    let cluster_ip = Key {
        via: Via::ClusterIp,
        ..node_port.clone()
    };
    assert_eq!(
        found(Mode::Ipvs, svc, &cluster_ip, &up_client, &dropped),
        None
    );
    assert_eq!(
        found(Mode::Ipvs, svc, &node_port, &up_client, &up_client),
        None
    );
    svc.etp_local = false;
    assert_eq!(
        found(Mode::Ipvs, svc, &node_port, &up_client, &dropped),
        None
    );
}

#[test]
fn ipvs_short_circuit_covers_only_upstreams_failure_inside_the_node() {
    let world = generate(1);
    let mut svc = world
        .services
        .iter()
        .find(|s| s.externally_accessible())
        .expect("seed 1 has an externally accessible Service")
        .clone();
    svc.etp_local = true;
    let ip: std::net::IpAddr = "fd00:e::7".parse().expect("an address");
    let from_node = Key {
        via: Via::ExternalIp(ip),
        source: Source::Node(2),
        family: Family::V6,
        ..key()
    };
    let dropped = Outcome([Obs::Dropped].into());
    let refused = Outcome([Obs::Refused].into());
    let ours = Outcome([served("(sticky)", Seen::Client)].into());
    let name = "IPVS: the node and its pods reach a Local external frontend without a local \
                endpoint";
    let found = |mode, svc: &Svc, k: &Key, up: &Outcome, ours: &Outcome| {
        find(mode, Some(svc), k, up, ours).map(|i| i.name)
    };
    assert_eq!(
        found(Mode::Ipvs, &svc, &from_node, &dropped, &ours),
        Some(name)
    );
    assert_eq!(
        found(Mode::Ipvs, &svc, &from_node, &refused, &ours),
        Some(name)
    );
    let from_pod = Key {
        source: Source::Pod { node: 2 },
        ..from_node.clone()
    };
    assert_eq!(
        found(Mode::Ipvs, &svc, &from_pod, &dropped, &ours),
        Some(name)
    );
    let lb = Key {
        via: Via::LoadBalancer(ip),
        ..from_node.clone()
    };
    assert_eq!(found(Mode::Ipvs, &svc, &lb, &dropped, &ours), Some(name));
    // Not in another mode, nor from outside, nor at a NodePort or the ClusterIP, nor where
    // upstream served or ours failed too, nor under the Cluster policy.
    assert_eq!(
        found(Mode::Nftables, &svc, &from_node, &dropped, &ours),
        None
    );
    let from_outside = Key {
        source: Source::Client,
        ..from_node.clone()
    };
    assert_eq!(
        found(Mode::Ipvs, &svc, &from_outside, &dropped, &ours),
        None
    );
    for via in [Via::NodePort { node: 2 }, Via::ClusterIp] {
        let other = Key {
            via,
            ..from_node.clone()
        };
        assert_eq!(found(Mode::Ipvs, &svc, &other, &dropped, &ours), None);
    }
    let up_served = Outcome([served("n1-a", Seen::Client)].into());
    assert_ne!(
        found(Mode::Ipvs, &svc, &from_node, &up_served, &ours),
        Some(name)
    );
    let ours_partly = Outcome([served("n1-a", Seen::Client), Obs::Dropped].into());
    assert_eq!(
        found(Mode::Ipvs, &svc, &from_node, &dropped, &ours_partly),
        None
    );
    svc.etp_local = false;
    assert_eq!(found(Mode::Ipvs, &svc, &from_node, &dropped, &ours), None);
}

#[test]
fn ipvs_masquerading_the_nodes_own_connections_covers_only_the_frontend_as_source() {
    let world = generate(1);
    let mut svc = world
        .services
        .iter()
        .find(|s| s.externally_accessible())
        .expect("seed 1 has an externally accessible Service")
        .clone();
    svc.etp_local = true;
    let ip: std::net::IpAddr = "fd00:e::7".parse().expect("an address");
    let from_node = Key {
        via: Via::ExternalIp(ip),
        source: Source::Node(2),
        family: Family::V6,
        ..key()
    };
    let up = Outcome([served("n3-a", Seen::Other(ip))].into());
    let ours = Outcome([served("n3-a", Seen::Client)].into());
    let name = "IPVS: the node's own connections to a Local externalIP or LoadBalancer IP are \
                masqueraded";
    let found = |mode, svc: &Svc, k: &Key, up: &Outcome, ours: &Outcome| {
        find(mode, Some(svc), k, up, ours).map(|i| i.name)
    };
    assert_eq!(found(Mode::Ipvs, &svc, &from_node, &up, &ours), Some(name));
    let lb = Key {
        via: Via::LoadBalancer(ip),
        ..from_node.clone()
    };
    let up_lb = Outcome([served("n3-a", Seen::Other(ip))].into());
    assert_eq!(found(Mode::Ipvs, &svc, &lb, &up_lb, &ours), Some(name));
    // Not in another mode, nor from a pod, nor at a NodePort, nor under the Cluster policy.
    assert_eq!(found(Mode::Nftables, &svc, &from_node, &up, &ours), None);
    let from_pod = Key {
        source: Source::Pod { node: 2 },
        ..from_node.clone()
    };
    assert_eq!(found(Mode::Ipvs, &svc, &from_pod, &up, &ours), None);
    let node_port = Key {
        via: Via::NodePort { node: 2 },
        ..from_node.clone()
    };
    assert_eq!(found(Mode::Ipvs, &svc, &node_port, &up, &ours), None);
    // Not when upstream's endpoint saw another address than the frontend's, nor when ours saw
    // something else than the node, nor when the endpoints differ.
    let other: std::net::IpAddr = "fd00:e::8".parse().expect("an address");
    let up_other = Outcome([served("n3-a", Seen::Other(other))].into());
    assert_eq!(found(Mode::Ipvs, &svc, &from_node, &up_other, &ours), None);
    let ours_node = Outcome([served("n3-a", Seen::Node(0))].into());
    assert_eq!(found(Mode::Ipvs, &svc, &from_node, &up, &ours_node), None);
    let ours_elsewhere = Outcome([served("n3-b", Seen::Client)].into());
    assert_eq!(
        found(Mode::Ipvs, &svc, &from_node, &up, &ours_elsewhere),
        None
    );
    svc.etp_local = false;
    assert_eq!(found(Mode::Ipvs, &svc, &from_node, &up, &ours), None);
}

#[test]
fn ipvs_source_ranges_for_the_nodes_own_connections_cover_only_upstreams_refusal() {
    let world = generate(1);
    let mut svc = world.services[0].clone();
    svc.source_ranges = vec!["10.244.2.0/24".into()];
    let ip: std::net::IpAddr = "198.51.100.16".parse().expect("an address");
    let from_node = Key {
        via: Via::LoadBalancer(ip),
        source: Source::Node(2),
        ..key()
    };
    let refused = Outcome([Obs::Refused].into());
    let dropped = Outcome([Obs::Dropped].into());
    let name = "IPVS: the node's own connection to a LoadBalancer IP outside its source ranges \
                drops";
    let found = |mode, svc: &Svc, k: &Key, up: &Outcome, ours: &Outcome| {
        find(mode, Some(svc), k, up, ours).map(|i| i.name)
    };
    assert_eq!(
        found(Mode::Ipvs, &svc, &from_node, &refused, &dropped),
        Some(name)
    );
    let eperm = Outcome([Obs::Other("Operation not permitted (os error 1)".into())].into());
    let udp = Key {
        proto: Proto::Udp,
        port: "u0/UDP".into(),
        ..from_node.clone()
    };
    assert_eq!(found(Mode::Ipvs, &svc, &udp, &refused, &eperm), Some(name));
    // Not in another mode, nor from a pod, nor at another frontend, nor where upstream served
    // or ours refused, nor when the node is inside the ranges or there are none.
    assert_eq!(
        found(Mode::Nftables, &svc, &from_node, &refused, &dropped),
        None
    );
    let from_pod = Key {
        source: Source::Pod { node: 2 },
        ..from_node.clone()
    };
    assert_eq!(found(Mode::Ipvs, &svc, &from_pod, &refused, &dropped), None);
    let cluster_ip = Key {
        via: Via::ClusterIp,
        ..from_node.clone()
    };
    assert_eq!(
        found(Mode::Ipvs, &svc, &cluster_ip, &refused, &dropped),
        None
    );
    let up = Outcome([served("n3-a", Seen::Node(2))].into());
    assert_eq!(found(Mode::Ipvs, &svc, &from_node, &up, &dropped), None);
    assert_eq!(
        found(Mode::Ipvs, &svc, &from_node, &refused, &refused),
        None
    );
    let mut inside = svc.clone();
    inside.source_ranges = vec![format!("{}/32", crate::lab::topology::node_ip(2))];
    assert_eq!(
        found(Mode::Ipvs, &inside, &from_node, &refused, &dropped),
        None
    );
    let mut open = svc.clone();
    open.source_ranges.clear();
    assert_eq!(
        found(Mode::Ipvs, &open, &from_node, &refused, &dropped),
        None
    );
}
