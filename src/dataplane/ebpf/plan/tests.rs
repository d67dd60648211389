use super::*;
use crate::testing::snapshots::{addr, node, snapshot, svc, web_with_unready};

fn frontend(ip: &str, port: u16, transport: Transport) -> Frontend {
    Frontend {
        ip: ip.parse().unwrap(),
        port,
        transport,
        scope: Scope::Socket,
    }
}

fn external(ip: &str, port: u16, transport: Transport) -> Frontend {
    Frontend {
        scope: Scope::External,
        ..frontend(ip, port, transport)
    }
}

#[test]
fn cluster_ip_is_balanced_over_ready_endpoints() {
    let snap = web_with_unready();
    let plan = plan(&snap, &NodePorts::default());
    let set = &plan.frontends[&frontend("10.96.0.10", 80, Transport::Tcp)];
    assert_eq!(set.list, List::Cluster);
    assert_eq!(
        plan.sets[set],
        [addr("10.244.1.5:8080"), addr("10.244.2.5:8080")]
    );
    assert!(plan.not_programmed.is_empty());
}

#[test]
fn service_without_endpoints_gets_an_empty_set() {
    let snap = snapshot(node(), vec![svc("default/none", "10.96.0.11", 80)]);
    let plan = plan(&snap, &NodePorts::default());
    let set = &plan.frontends[&frontend("10.96.0.11", 80, Transport::Tcp)];
    assert_eq!(plan.sets[set], Vec::<SocketAddr>::new());
    assert!(!plan.drop.contains(set), "refused, not dropped");
}

#[test]
fn cluster_ip_ports_the_service_does_not_define_are_refused() {
    let snap = snapshot(node(), crate::testing::snapshots::web_in_each_family());
    let plan = plan(&snap, &NodePorts::default());
    for ip in ["10.96.0.10", "fd00:96::10"] {
        for transport in [Transport::Tcp, Transport::Udp] {
            for f in [
                frontend(ip, UNDEFINED_PORT, transport),
                external(ip, UNDEFINED_PORT, transport),
            ] {
                let set = &plan.frontends[&f];
                assert_eq!(set.list, List::Undefined, "{f:?}");
                assert!(plan.sets[set].is_empty(), "{f:?}: refused");
                assert!(!plan.drop.contains(set), "{f:?}: refused, not dropped");
                assert!(!plan.snat.contains(&f));
            }
        }
    }
    // The maps say the same: the port the Service defines is balanced, any other refused.
    let maps = super::super::trace::planned_maps(&plan);
    let to = |port: u16| super::super::trace::Packet {
        protocol: Protocol::Tcp,
        to: addr(&format!("10.96.0.10:{port}")),
        outside: false,
        source: "10.244.1.5".parse().unwrap(),
    };
    let defined = super::super::trace::trace(&maps, &to(80), None);
    assert!(matches!(
        defined.fate,
        super::super::trace::Fate::Translated { .. }
    ));
    let undefined = super::super::trace::trace(&maps, &to(81), None);
    assert_eq!(undefined.fate, super::super::trace::Fate::Refused);
}

#[test]
fn multi_port_services_hold_their_undefined_ports_once() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/web", "10.96.0.10", 80).ep("10.244.2.5", 8080, "node-b"),
            svc("default/web", "10.96.0.10", 443)
                .named("https")
                .ep("10.244.2.5", 8443, "node-b"),
        ],
    );
    let plan = plan(&snap, &NodePorts::default());
    let holder = &plan.frontends[&frontend("10.96.0.10", UNDEFINED_PORT, Transport::Tcp)];
    // The other port is noted, so an incremental sync of the holder revisits it.
    assert!(
        plan.lost
            .iter()
            .any(|(f, p)| f.port == UNDEFINED_PORT && *p != holder.port),
        "{:?}",
        plan.lost
    );
}

#[test]
fn cluster_ip_from_outside_uses_the_internal_list_with_source_nat() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/web", "10.96.0.10", 80)
                .ep("10.244.2.5", 8080, "node-b")
                .ep("10.244.1.5", 8080, "node-a"),
            svc("default/local", "10.96.0.11", 80)
                .internal_local()
                .ep("10.244.2.6", 8080, "node-b")
                .ep("10.244.1.6", 8080, "node-a"),
        ],
    );
    let plan = plan(&snap, &NodePorts::default());
    let web = external("10.96.0.10", 80, Transport::Tcp);
    assert_eq!(plan.sets[&plan.frontends[&web]].len(), 2);
    assert!(plan.snat.contains(&web));
    let local = external("10.96.0.11", 80, Transport::Tcp);
    assert_eq!(
        plan.sets[&plan.frontends[&local]],
        [addr("10.244.1.6:8080")]
    );
    assert!(
        plan.snat.contains(&local),
        "masqueraded whatever the policy"
    );
}

#[test]
fn both_policies_local_give_this_node_and_its_pods_every_endpoint() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/web", "10.96.0.10", 80)
                .internal_local()
                .external_local()
                .external("192.0.2.10")
                .ep("10.244.2.5", 8080, "node-b")
                .ep("10.244.1.5", 8080, "node-a"),
        ],
    );
    let plan = plan(&snap, &NodePorts::default());
    let inside = &plan.frontends[&frontend("192.0.2.10", 80, Transport::Tcp)];
    assert_eq!(
        plan.sets[inside].len(),
        2,
        "the short-circuit: every endpoint"
    );
    let outside = &plan.frontends[&external("192.0.2.10", 80, Transport::Tcp)];
    assert_eq!(plan.sets[outside], [addr("10.244.1.5:8080")]);
    assert!(
        !plan
            .snat
            .contains(&external("192.0.2.10", 80, Transport::Tcp))
    );
}

#[test]
fn external_ips_share_the_cluster_set_and_local_cluster_ip_gets_its_own() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/web", "10.96.0.10", 80)
                .internal_local()
                .external("192.0.2.10")
                .lb("198.51.100.7")
                .ep("10.244.2.5", 8080, "node-b")
                .ep("10.244.1.5", 8080, "node-a"),
        ],
    );
    let plan = plan(&snap, &NodePorts::default());
    let cip = &plan.frontends[&frontend("10.96.0.10", 80, Transport::Tcp)];
    let eip = &plan.frontends[&frontend("192.0.2.10", 80, Transport::Tcp)];
    let lb = &plan.frontends[&frontend("198.51.100.7", 80, Transport::Tcp)];
    assert_eq!(plan.sets[cip], [addr("10.244.1.5:8080")]);
    assert_eq!(eip, lb);
    assert_eq!(plan.sets[eip].len(), 2);
    // From outside: a set of their own, the external policy's (Cluster: source NAT).
    let outside = &plan.frontends[&external("192.0.2.10", 80, Transport::Tcp)];
    assert_eq!(
        outside,
        &plan.frontends[&external("198.51.100.7", 80, Transport::Tcp)]
    );
    assert_eq!(outside.scope, Scope::External);
    assert_eq!(plan.sets[outside].len(), 2);
    let outside_eip = external("192.0.2.10", 80, Transport::Tcp);
    assert!(plan.snat.contains(&outside_eip));
    assert!(
        !plan
            .snat
            .contains(&frontend("192.0.2.10", 80, Transport::Tcp))
    );
    // The ClusterIP's, the short-circuit's, from outside: the external policy's, and the
    // ClusterIP's from outside (internal Local); the undefined ports' of each scope.
    assert_eq!(plan.sets.len(), 6);
    assert!(plan.not_programmed.is_empty());
}

#[test]
fn what_phase_one_cannot_do_is_named_per_port() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/np", "10.96.0.10", 80)
                .node_port(30080)
                .affinity(60)
                .ep("10.244.1.5", 8080, "node-a"),
            svc("default/sig", "10.96.0.12", 3868)
                .proto(Protocol::Sctp)
                .ep("10.244.2.6", 3868, "node-b"),
        ],
    );
    let plan = plan(&snap, &NodePorts::default());
    let gaps: Vec<(&str, Gap)> = plan
        .not_programmed
        .iter()
        .map(|(p, g)| (&*p.service.name, *g))
        .collect();
    assert_eq!(gaps, [("sig", Gap::Sctp)]);
    // From this node and from outside.
    assert_eq!(plan.affinity.values().collect::<Vec<_>>(), [&60, &60]);
    // The ClusterIP of the NodePort Service is still balanced; the SCTP port gets no
    // frontend (its ClusterIP refuses TCP and UDP, at any port).
    assert!(
        plan.frontends
            .contains_key(&frontend("10.96.0.10", 80, Transport::Tcp))
    );
    let sctp = plan
        .frontends
        .keys()
        .filter(|f| f.ip.to_string() == "10.96.0.12")
        .collect::<Vec<_>>();
    assert!(sctp.iter().all(|f| f.port == UNDEFINED_PORT), "{sctp:?}");
}

#[test]
fn node_ports_are_translated_on_the_node_port_addresses_over_the_cluster_list() {
    let snap = snapshot(node(), vec![crate::testing::snapshots::local_node_port()]);
    let all = node_ports(
        &NodePortAddresses::default_for(crate::config::ProxyMode::Ebpf),
        &snap.node,
    );
    let v4: Vec<String> = all[&IpFamily::V4].iter().map(ToString::to_string).collect();
    assert!(
        v4.contains(&"127.0.0.1".to_string()),
        "all: loopback too: {v4:?}"
    );
    let plan = plan(&snap, &all);
    for ip in &all[&IpFamily::V4] {
        let set = &plan.frontends[&frontend(&ip.to_string(), 30080, Transport::Tcp)];
        assert_eq!(set.list, List::Cluster, "local origin: every endpoint");
        assert_eq!(plan.sets[set].len(), 2);
        // From outside: this node's endpoint only, the client's address kept; never on
        // loopback (packets from outside do not arrive there).
        let outside = plan
            .frontends
            .get(&external(&ip.to_string(), 30080, Transport::Tcp));
        if ip.is_loopback() {
            assert_eq!(outside, None);
        } else {
            let outside = outside.expect("a frontend from outside");
            assert_eq!(outside.list, List::Local);
            assert_eq!(plan.sets[outside], [addr("10.244.1.5:8080")]);
            assert!(
                !plan
                    .snat
                    .contains(&external(&ip.to_string(), 30080, Transport::Tcp))
            );
        }
    }
    assert_eq!(
        plan.node_port_numbers.keys().collect::<Vec<_>>(),
        [&(30080, Transport::Tcp)],
        "bind() to it is refused in the node's namespace"
    );
    let primary = NodePortAddresses {
        primary: true,
        ..NodePortAddresses::default()
    };
    let only = node_ports(&primary, &snap.node);
    assert!(only[&IpFamily::V4].iter().all(|ip| !ip.is_loopback()));
}

#[test]
fn local_policy_without_a_local_endpoint_drops_and_no_endpoints_refuses() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/local", "10.96.0.10", 80).internal_local().ep(
                "10.244.2.5",
                8080,
                "node-b",
            ),
            svc("default/none", "10.96.0.11", 80).internal_local(),
        ],
    );
    let plan = plan(&snap, &NodePorts::default());
    let local = &plan.frontends[&frontend("10.96.0.10", 80, Transport::Tcp)];
    let none = &plan.frontends[&frontend("10.96.0.11", 80, Transport::Tcp)];
    assert!(plan.sets[local].is_empty() && plan.sets[none].is_empty());
    assert!(plan.drop.contains(local));
    assert!(!plan.drop.contains(none));
}

#[test]
fn udp_and_ipv6_frontends_are_kept_apart() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/dns", "10.96.0.10", 53)
                .proto(Protocol::Udp)
                .ep("10.244.2.5", 53, "node-b"),
            svc("default/web6", "fd00:96::10", 80).ep("fd00:244:2::5", 8080, "node-b"),
        ],
    );
    let plan = plan(&snap, &NodePorts::default());
    let keys: Vec<Frontend> = plan
        .frontends
        .keys()
        .filter(|f| f.scope == Scope::Socket && f.port != UNDEFINED_PORT)
        .copied()
        .collect();
    assert_eq!(
        keys,
        [
            frontend("10.96.0.10", 53, Transport::Udp),
            frontend("fd00:96::10", 80, Transport::Tcp)
        ]
    );
}

#[test]
fn from_outside_local_without_local_endpoint_drops_and_source_ranges_guard_lb_ips_only() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/lb", "10.96.0.10", 80)
                .node_port(30080)
                .lb("198.51.100.7")
                .range("203.0.113.0/24")
                .range("203.0.113.128/25")
                .external_local()
                .ep("10.244.2.5", 8080, "node-b"),
        ],
    );
    let primary = NodePortAddresses {
        primary: true,
        ..NodePortAddresses::default()
    };
    let plan = plan(&snap, &node_ports(&primary, &snap.node));
    let lb = external("198.51.100.7", 80, Transport::Tcp);
    let set = &plan.frontends[&lb];
    assert!(plan.sets[set].is_empty() && plan.drop.contains(set));
    // Folded to the outer range; NodePorts are not guarded.
    let ranges: Vec<(Frontend, Vec<String>)> = plan
        .source_ranges
        .iter()
        .map(|(f, r)| (*f, r.iter().map(ToString::to_string).collect()))
        .collect();
    assert_eq!(ranges, [(lb, vec!["203.0.113.0/24".to_string()])]);
}

#[test]
fn ipv6_node_ports_are_translated_from_outside_too() {
    let snap = snapshot(
        node(),
        vec![svc("default/web6", "fd00:96::10", 80).node_port(30080).ep(
            "fd00:244:2::5",
            8080,
            "node-b",
        )],
    );
    let primary = NodePortAddresses {
        primary: true,
        ..NodePortAddresses::default()
    };
    let plan = plan(&snap, &node_ports(&primary, &snap.node));
    let set = &plan.frontends[&external("fd00::11", 30080, Transport::Tcp)];
    assert_eq!(plan.sets[set], [addr("[fd00:244:2::5]:8080")]);
    assert!(
        plan.snat
            .contains(&external("fd00::11", 30080, Transport::Tcp))
    );
    assert!(plan.not_programmed.is_empty());
}
