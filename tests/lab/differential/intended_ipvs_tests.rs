//! Unit tests of the IPVS mode's intended differences.

use super::*;

/// The name of the entry that covers the difference, if any.
fn found(mode: Mode, svc: &Svc, key: &Key, up: &Outcome, ours: &Outcome) -> Option<&'static str> {
    find(mode, Some(svc), key, up, ours).map(|i| i.name)
}

/// Seed 1's first externally accessible Service, with `externalTrafficPolicy: Local`.
fn etp_local_service() -> Svc {
    let mut svc = generate(1)
        .services
        .into_iter()
        .find(Svc::externally_accessible)
        .expect("seed 1 has an externally accessible Service");
    svc.etp_local = true;
    svc
}

#[test]
fn ipvs_local_policies_without_local_endpoints_cover_only_ours_dropping() {
    let mut world = generate(1);
    let svc = &mut world.services[0];
    let dropped = Outcome([Obs::Dropped].into());
    let up = Outcome([served("n2-a", Seen::Node(0)), served("n2-b", Seen::Node(0))].into());

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
    let mut svc = etp_local_service();
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
    let mut svc = etp_local_service();
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
