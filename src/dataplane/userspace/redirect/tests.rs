use super::*;
use crate::dataplane::nft_table::names as n;
use crate::dataplane::userspace::plan;
use crate::testing::snapshots::{ip, node, snapshot, svc};
use std::collections::BTreeMap;

/// Every listener `snap` asks for, open on ports from 30100 in plan order.
pub(super) fn open_all(snap: &Snapshot) -> BTreeMap<Key, Listening> {
    plan::plan(snap)
        .into_iter()
        .zip(30100..)
        .map(|((key, spec), port)| {
            let serving = !spec.endpoints.is_empty();
            (key, Listening { port, serving })
        })
        .collect()
}

pub(super) fn settings() -> Settings {
    Settings {
        bind: "0.0.0.0".parse().unwrap(),
        node_ports: NodePortAddresses {
            all: true,
            ..NodePortAddresses::default()
        },
        detect_local: DetectLocal::ClusterCidrs(vec!["10.244.0.0/16".parse().unwrap()]),
    }
}

pub(super) fn frontend(addr: &str, proto: Protocol, port: u16) -> Tuple {
    Tuple::new(&[
        Value::Addr(ip(addr)),
        Value::Proto(proto),
        Value::Port(port),
    ])
}

pub(super) fn elements(rules: &Ruleset, set: &str) -> BTreeMap<Tuple, Data> {
    rules
        .sets
        .iter()
        .find(|(name, _)| name.as_str() == set)
        .map(|(_, s)| {
            s.elements
                .iter()
                .map(|(k, e)| (*k, e.data.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn to(addr: &str, port: u16) -> Data {
    Data::Values(Tuple::new(&[Value::Addr(ip(addr)), Value::Port(port)]))
}

fn reject() -> Data {
    Data::Verdict(Verdict::Goto(Name::fixed(n::REJECT_CHAIN)))
}

#[test]
fn cluster_ip_goes_to_the_internal_listener_on_the_nodes_address() {
    let snap = snapshot(
        node(),
        vec![svc("default/web", "10.96.0.10", 80).ep("10.244.2.5", 8080, "node-b")],
    );
    let [v4, v6] = plan(&snap, &open_all(&snap), &settings());
    let listeners = elements(&v4, SERVICE_LISTENERS);
    assert_eq!(
        listeners,
        BTreeMap::from([(
            frontend("10.96.0.10", Protocol::Tcp, 80),
            to("10.0.0.11", 30100)
        )])
    );
    assert!(elements(&v4, n::NO_ENDPOINT_SERVICES).is_empty());
    assert!(
        elements(&v6, SERVICE_LISTENERS).is_empty(),
        "an IPv4 Service"
    );
    assert_eq!(v6.family, Family::Ip6);
}

#[test]
fn every_frontend_of_a_cluster_policy_port_goes_to_its_one_listener() {
    let mut node = node();
    node.host_addresses = Some(vec![ip("10.0.0.11"), ip("192.168.5.1"), ip("127.0.0.1")].into());
    let snap = snapshot(
        node,
        vec![
            svc("default/web", "10.96.0.10", 80)
                .node_port(30080)
                .external("203.0.113.7")
                .lb("198.51.100.9")
                .ep("10.244.2.5", 8080, "node-b"),
        ],
    );
    let open = open_all(&snap);
    assert_eq!(open.len(), 1, "both policies Cluster: one listener");
    let external = 30100;
    let [v4, _] = plan(&snap, &open, &settings());
    let listeners = elements(&v4, SERVICE_LISTENERS);
    let expected = BTreeMap::from([
        (
            frontend("10.96.0.10", Protocol::Tcp, 80),
            to("10.0.0.11", 30100),
        ),
        (
            frontend("203.0.113.7", Protocol::Tcp, 80),
            to("10.0.0.11", external),
        ),
        (
            frontend("198.51.100.9", Protocol::Tcp, 80),
            to("10.0.0.11", external),
        ),
        // A NodePort keeps its own address; loopback takes none.
        (
            frontend("10.0.0.11", Protocol::Tcp, 30080),
            to("10.0.0.11", external),
        ),
        (
            frontend("192.168.5.1", Protocol::Tcp, 30080),
            to("192.168.5.1", external),
        ),
    ]);
    assert_eq!(listeners, expected);
}

#[test]
fn node_port_addresses_limit_the_node_port_frontends() {
    let mut node = node();
    node.host_addresses = Some(vec![ip("10.0.0.11"), ip("192.168.5.1")].into());
    let snap = snapshot(
        node,
        vec![svc("default/web", "10.96.0.10", 80).node_port(30080).ep(
            "10.244.2.5",
            8080,
            "node-b",
        )],
    );
    let settings = Settings {
        node_ports: NodePortAddresses {
            cidrs: vec!["192.168.5.0/24".parse().unwrap()],
            ..NodePortAddresses::default()
        },
        ..settings()
    };
    let [v4, _] = plan(&snap, &open_all(&snap), &settings);
    let node_ports: Vec<Tuple> = elements(&v4, SERVICE_LISTENERS)
        .into_keys()
        .filter(|k| *k != frontend("10.96.0.10", Protocol::Tcp, 80))
        .collect();
    assert_eq!(node_ports, [frontend("192.168.5.1", Protocol::Tcp, 30080)]);
}

#[test]
fn a_specific_bind_address_is_where_every_frontend_goes() {
    let snap = snapshot(
        node(),
        vec![svc("default/web", "10.96.0.10", 80).node_port(30080).ep(
            "10.244.2.5",
            8080,
            "node-b",
        )],
    );
    let settings = Settings {
        bind: ip("10.0.0.99"),
        ..settings()
    };
    let [v4, _] = plan(&snap, &open_all(&snap), &settings);
    let targets: Vec<Data> = elements(&v4, SERVICE_LISTENERS).into_values().collect();
    assert_eq!(targets, [to("10.0.0.99", 30100), to("10.0.0.99", 30100)]);
}

#[test]
fn a_port_without_endpoints_is_refused_and_external_local_traffic_dropped() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/empty", "10.96.0.20", 53).proto(Protocol::Udp),
            svc("default/local", "10.96.0.30", 80)
                .node_port(30090)
                .external_local()
                .ep("10.244.2.5", 8080, "node-b"),
        ],
    );
    let [v4, _] = plan(&snap, &open_all(&snap), &settings());
    let refused = elements(&v4, n::NO_ENDPOINT_SERVICES);
    assert_eq!(
        refused,
        BTreeMap::from([
            (frontend("10.96.0.20", Protocol::Udp, 53), reject()),
            (
                frontend("10.0.0.11", Protocol::Tcp, 30090),
                Data::Verdict(Verdict::Drop)
            ),
        ])
    );
    // The ClusterIP of `local` still has a remote endpoint, which the node and its pods
    // reach through the NodePort too (the short-circuit, to the cluster-wide listener).
    let open = open_all(&snap);
    let internal = open
        .iter()
        .find(|(k, _)| &*k.port.service.name == "local" && k.list == List::Cluster)
        .map(|(_, l)| l.port)
        .unwrap();
    let listeners: Vec<Tuple> = elements(&v4, SERVICE_LISTENERS).into_keys().collect();
    assert_eq!(listeners, [frontend("10.96.0.30", Protocol::Tcp, 80)]);
    assert_eq!(
        elements(&v4, SHORT_CIRCUIT),
        BTreeMap::from([(
            frontend("10.0.0.11", Protocol::Tcp, 30090),
            to("10.0.0.11", internal)
        )])
    );
}

#[test]
fn no_short_circuit_without_a_cluster_endpoint_or_under_the_cluster_policy() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/nothing", "10.96.0.30", 80)
                .node_port(30090)
                .external_local(),
            svc("default/cluster", "10.96.0.31", 80).node_port(30091),
        ],
    );
    let [v4, _] = plan(&snap, &open_all(&snap), &settings());
    assert!(elements(&v4, SHORT_CIRCUIT).is_empty());
    assert_eq!(elements(&v4, n::NO_ENDPOINT_SERVICES).len(), 4);
}

#[test]
fn a_listener_that_is_not_open_gets_no_rule_and_sctp_none_at_all() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/web", "10.96.0.10", 80).ep("10.244.2.5", 8080, "node-b"),
            svc("default/sig", "10.96.0.11", 3868)
                .proto(Protocol::Sctp)
                .ep("10.244.2.6", 3868, "node-b"),
        ],
    );
    let [v4, _] = plan(&snap, &BTreeMap::new(), &settings());
    assert!(elements(&v4, SERVICE_LISTENERS).is_empty());
    assert!(elements(&v4, n::NO_ENDPOINT_SERVICES).is_empty());
    let [v4, _] = plan(&snap, &open_all(&snap), &settings());
    assert_eq!(elements(&v4, SERVICE_LISTENERS).len(), 1);
}

#[test]
fn ipv6_frontends_go_to_the_nodes_ipv6_address() {
    let snap = snapshot(
        node(),
        vec![svc("default/web6", "fd00:96::10", 80).ep("fd00:244:2::5", 8080, "node-b")],
    );
    let [v4, v6] = plan(&snap, &open_all(&snap), &settings());
    assert!(elements(&v4, SERVICE_LISTENERS).is_empty());
    assert_eq!(
        elements(&v6, SERVICE_LISTENERS),
        BTreeMap::from([(
            frontend("fd00:96::10", Protocol::Tcp, 80),
            to("fd00::11", 30100)
        )])
    );
}

#[test]
fn a_family_with_only_loopback_sends_no_frontend_anywhere() {
    let mut node = node();
    node.host_addresses = Some(vec![ip("127.0.0.1")].into());
    node.addresses.clear();
    let snap = snapshot(
        node,
        vec![svc("default/web", "10.96.0.10", 80).ep("10.244.2.5", 8080, "node-b")],
    );
    let [v4, _] = plan(&snap, &open_all(&snap), &settings());
    assert!(elements(&v4, SERVICE_LISTENERS).is_empty());
}

#[test]
fn prerouting_and_output_dnat_through_the_map_and_the_filters_refuse() {
    let snap = snapshot(node(), vec![]);
    let [v4, _] = plan(&snap, &BTreeMap::new(), &settings());
    let text = crate::nft::render(&crate::nft::diff(&Ruleset::empty(v4.family), &v4));
    for expected in [
        "dnat to ip daddr . meta l4proto . th dport map @service-listeners",
        "ct state new ip daddr . meta l4proto . th dport vmap @no-endpoint-services",
        "reject with tcp reset",
        "ip saddr 10.244.0.0/16 dnat to ip daddr . meta l4proto . th dport map @short-circuit-listeners",
        "ct state new meta l4proto . th dport @relay-ports jump relay-check",
        "ct status dnat return",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
    for (chain, rules) in [
        (n::NAT_PREROUTING, 2),
        (n::NAT_OUTPUT, 2),
        (n::FILTER_INPUT, 2),
        (n::FILTER_FORWARD, 2),
        (n::FILTER_OUTPUT, 3),
    ] {
        let c = v4.chains.get(&Name::fixed(chain)).expect("a base chain");
        assert!(c.base.is_some() && c.rules.len() == rules, "{chain}");
    }
    // Without detect-local only the node's own traffic is short-circuited.
    let settings = Settings {
        detect_local: DetectLocal::None,
        ..settings()
    };
    let [v4, _] = plan(&snap, &BTreeMap::new(), &settings);
    assert_eq!(v4.chains[&Name::fixed(n::NAT_PREROUTING)].rules.len(), 1);
}

/// `externalTrafficPolicy: Local` with a local endpoint: from outside, the NodePort and the
/// externalIP reach that endpoint only; from this node's pods and the node itself, every
/// endpoint in the cluster, through the `Cluster` listener (upstream's short-circuit holds
/// whether or not a local endpoint exists). With `internalTrafficPolicy: Local` too, the
/// ClusterIP keeps to the local endpoint from everywhere.
#[test]
fn external_frontends_from_inside_the_node_reach_every_endpoint_under_a_local_policy() {
    use crate::nft::trace::{Origin, Packet, trace};
    let snap = snapshot(
        node(),
        vec![
            svc("default/web", "10.96.0.10", 80)
                .node_port(30080)
                .external("203.0.113.7")
                .internal_local()
                .external_local()
                .ep("10.244.1.9", 8080, "node-a")
                .ep("10.244.2.9", 8080, "node-b"),
        ],
    );
    let open = open_all(&snap);
    let port_of = |list| {
        open.iter()
            .find(|(k, _)| k.list == list)
            .map(|(_, l)| l.port)
            .unwrap()
    };
    let (cluster, local) = (port_of(List::Cluster), port_of(List::Local));
    let [v4, _] = plan(&snap, &open, &settings());
    let node_port = frontend("10.0.0.11", Protocol::Tcp, 30080);
    let external_ip = frontend("203.0.113.7", Protocol::Tcp, 80);
    assert_eq!(
        elements(&v4, SHORT_CIRCUIT),
        BTreeMap::from([
            (node_port, to("10.0.0.11", cluster)),
            (external_ip, to("10.0.0.11", cluster)),
        ])
    );
    assert_eq!(
        elements(&v4, SERVICE_LISTENERS),
        BTreeMap::from([
            (
                frontend("10.96.0.10", Protocol::Tcp, 80),
                to("10.0.0.11", local)
            ),
            (node_port, to("10.0.0.11", local)),
            (external_ip, to("10.0.0.11", local)),
        ])
    );
    let local_addresses: Vec<IpAddr> = snap.node.local_addresses().into_iter().collect();
    let listener = |packet: &Packet| {
        let t = trace(&v4, packet, &local_addresses);
        let ports: Vec<u16> = t.endpoints().into_iter().map(|(_, p)| p).collect();
        ports
    };
    let from = |origin: Origin, src: &str, dst: &str, dport| Packet {
        protocol: Protocol::Tcp,
        src: ip(src),
        dst: ip(dst),
        dport,
        origin,
    };
    let pod = || Origin::Interface("cni0".into());
    let outside = || Origin::Interface("eth0".into());
    for (dst, dport) in [("10.0.0.11", 30080), ("203.0.113.7", 80)] {
        assert_eq!(listener(&from(pod(), "10.244.1.7", dst, dport)), [cluster]);
        assert_eq!(
            listener(&from(Origin::Host, "10.0.0.11", dst, dport)),
            [cluster]
        );
        assert_eq!(
            listener(&from(outside(), "192.168.9.9", dst, dport)),
            [local]
        );
    }
    for origin in [pod(), Origin::Host, outside()] {
        let src = if origin == Origin::Host {
            "10.0.0.11"
        } else {
            "10.244.1.7"
        };
        assert_eq!(listener(&from(origin, src, "10.96.0.10", 80)), [local]);
    }
}
