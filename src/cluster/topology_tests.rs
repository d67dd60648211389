use std::sync::Arc;

use super::*;
use crate::cluster::model::{
    Endpoint, NodeContext, Placement, Protocol, ServiceKey, ServicePort, ServicePortName,
    ServiceType, TrafficPolicy,
};

const R: (bool, bool, bool) = (true, true, false); // ready
const T: (bool, bool, bool) = (false, true, true); // serving, terminating
const TN: (bool, bool, bool) = (false, false, true); // terminating, not serving
const NR: (bool, bool, bool) = (false, false, false); // not ready

/// Endpoint 10.0.0.<n>:80 on `node` with conditions, zone hints and node hints.
fn e(n: u8, node: &str, c: (bool, bool, bool), zones: &[&str], nodes: &[&str]) -> Endpoint {
    Endpoint {
        ip: format!("10.0.0.{n}").parse().unwrap(),
        port: 80,
        ready: c.0,
        serving: c.1,
        terminating: c.2,
        is_local: node == "here",
        placement: Arc::new(Placement {
            node_name: Some(node.into()),
            zone: None,
            zone_hints: zones.iter().map(|z| Arc::from(*z)).collect(),
            node_hints: nodes.iter().map(|z| Arc::from(*z)).collect(),
        }),
    }
}

fn port(internal: TrafficPolicy, external: TrafficPolicy) -> ServicePort {
    ServicePort {
        name: ServicePortName {
            service: ServiceKey::new("ns", "svc"),
            port: "".into(),
            protocol: Protocol::Tcp,
        },
        service_type: ServiceType::NodePort,
        port: 80,
        node_port: Some(30080),
        affinity_timeout_seconds: None,
        internal_policy: internal,
        external_policy: external,
        health_check_node_port: None,
        traffic_distribution: None,
        allocate_load_balancer_node_ports: true,
        ipvs_scheduler: None,
    }
}

fn node(zone: Option<&str>) -> NodeContext {
    NodeContext {
        zone: zone.map(Arc::from),
        known: true,
        ..NodeContext::named("here")
    }
}

use TrafficPolicy::{Cluster as C, Local as L};

struct Case {
    name: &'static str,
    endpoints: Vec<Endpoint>,
    internal: TrafficPolicy,
    external: TrafficPolicy,
    externally_accessible: bool,
    zone: Option<&'static str>,
    prefer_same_node: bool,
    /// Expected last octets of cluster endpoints (None: no cluster list).
    cluster: Option<Vec<u8>>,
    local: Option<Vec<u8>>,
    has_any: bool,
    topology: TopologyMode,
}

fn case(name: &'static str, endpoints: Vec<Endpoint>) -> Case {
    Case {
        name,
        endpoints,
        internal: C,
        external: C,
        externally_accessible: false,
        zone: Some("zone-a"),
        prefer_same_node: true,
        cluster: Some(vec![]),
        local: None,
        has_any: false,
        topology: TopologyMode::None,
    }
}

fn octets(ix: &Option<Vec<u32>>, eps: &[Endpoint]) -> Option<Vec<u8>> {
    ix.as_ref().map(|v| {
        v.iter()
            .map(|&i| match eps[i as usize].ip {
                std::net::IpAddr::V4(ip) => ip.octets()[3],
                std::net::IpAddr::V6(_) => unreachable!(),
            })
            .collect()
    })
}

#[test]
fn selection_follows_policies_fallbacks_and_topology() {
    let cases = vec![
        Case {
            cluster: Some(vec![1, 2]),
            has_any: true,
            ..case(
                "cluster policy uses every ready endpoint",
                vec![e(1, "a", R, &[], &[]), e(2, "here", R, &[], &[])],
            )
        },
        Case {
            cluster: Some(vec![1]),
            has_any: true,
            ..case(
                "not ready endpoints are left out",
                vec![e(1, "a", R, &[], &[]), e(2, "a", NR, &[], &[])],
            )
        },
        Case {
            cluster: Some(vec![2]),
            has_any: true,
            ..case(
                "without ready endpoints cluster traffic falls back to serving terminating ones",
                vec![
                    e(1, "a", NR, &[], &[]),
                    e(2, "a", T, &[], &[]),
                    e(3, "a", TN, &[], &[]),
                ],
            )
        },
        Case {
            cluster: Some(vec![1]),
            has_any: true,
            ..case(
                "terminating endpoints are unused while a ready one exists",
                vec![e(1, "a", R, &[], &[]), e(2, "a", T, &[], &[])],
            )
        },
        Case {
            cluster: Some(vec![]),
            has_any: false,
            ..case(
                "terminating endpoints that are not serving are never used",
                vec![e(1, "a", TN, &[], &[])],
            )
        },
        Case {
            cluster: Some(vec![]),
            has_any: false,
            ..case("a service without endpoints has none", vec![])
        },
        Case {
            internal: L,
            cluster: None,
            local: Some(vec![2]),
            has_any: true,
            ..case(
                "internal local policy uses only this node's ready endpoints",
                vec![e(1, "a", R, &[], &[]), e(2, "here", R, &[], &[])],
            )
        },
        Case {
            internal: L,
            cluster: None,
            local: Some(vec![2]),
            has_any: true,
            ..case(
                "local policy falls back to local serving terminating endpoints",
                vec![e(1, "a", R, &[], &[]), e(2, "here", T, &[], &[])],
            )
        },
        Case {
            internal: L,
            cluster: None,
            local: Some(vec![]),
            has_any: true,
            ..case(
                "local policy without local endpoints has none, but the service has endpoints",
                vec![e(1, "a", R, &[], &[])],
            )
        },
        Case {
            internal: L,
            cluster: None,
            local: Some(vec![]),
            has_any: true,
            ..case(
                "local fallback counts remote terminating endpoints as existing",
                vec![e(1, "a", T, &[], &[])],
            )
        },
        Case {
            external: L,
            externally_accessible: true,
            cluster: Some(vec![1, 2]),
            local: Some(vec![2]),
            has_any: true,
            ..case(
                "external local policy keeps cluster endpoints for internal traffic",
                vec![e(1, "a", R, &[], &[]), e(2, "here", R, &[], &[])],
            )
        },
        Case {
            external: L,
            externally_accessible: false,
            cluster: Some(vec![1, 2]),
            local: None,
            has_any: true,
            ..case(
                "external policy is irrelevant without an external frontend",
                vec![e(1, "a", R, &[], &[]), e(2, "here", R, &[], &[])],
            )
        },
        Case {
            internal: L,
            external: L,
            externally_accessible: true,
            cluster: Some(vec![1, 2]),
            local: Some(vec![2]),
            has_any: true,
            ..case(
                "both policies local keep the cluster list for the node's and its pods' short-circuit",
                vec![e(1, "a", R, &[], &[]), e(2, "here", R, &[], &[])],
            )
        },
        Case {
            internal: L,
            external: C,
            externally_accessible: true,
            cluster: Some(vec![1, 2]),
            local: Some(vec![2]),
            has_any: true,
            ..case(
                "internal local with external cluster needs both lists",
                vec![e(1, "a", R, &[], &[]), e(2, "here", R, &[], &[])],
            )
        },
        Case {
            cluster: Some(vec![1, 3]),
            has_any: true,
            topology: TopologyMode::SameZone,
            ..case(
                "complete zone hints with one for this zone narrow cluster traffic to it",
                vec![
                    e(1, "a", R, &["zone-a"], &[]),
                    e(2, "b", R, &["zone-b"], &[]),
                    e(3, "c", R, &["zone-a", "zone-c"], &[]),
                ],
            )
        },
        Case {
            cluster: Some(vec![1, 2]),
            has_any: true,
            ..case(
                "zone hints that name no endpoint for this zone are ignored",
                vec![
                    e(1, "a", R, &["zone-b"], &[]),
                    e(2, "b", R, &["zone-c"], &[]),
                ],
            )
        },
        Case {
            cluster: Some(vec![1, 2]),
            has_any: true,
            ..case(
                "incomplete zone hints are ignored",
                vec![e(1, "a", R, &["zone-a"], &[]), e(2, "b", R, &[], &[])],
            )
        },
        Case {
            zone: None,
            cluster: Some(vec![1, 2]),
            has_any: true,
            ..case(
                "a node without a zone label ignores zone hints",
                vec![
                    e(1, "a", R, &["zone-a"], &[]),
                    e(2, "b", R, &["zone-b"], &[]),
                ],
            )
        },
        Case {
            cluster: Some(vec![1]),
            has_any: true,
            topology: TopologyMode::SameZone,
            ..case(
                "hints of endpoints that are not ready do not count",
                vec![
                    e(1, "a", R, &["zone-a"], &[]),
                    e(2, "b", NR, &[], &[]),
                    e(3, "c", T, &[], &[]),
                ],
            )
        },
        Case {
            cluster: Some(vec![2]),
            has_any: true,
            topology: TopologyMode::SameNode,
            ..case(
                "complete node hints with one for this node narrow cluster traffic to this node",
                vec![
                    e(1, "a", R, &["zone-a"], &["a"]),
                    e(2, "here", R, &["zone-a"], &["here"]),
                ],
            )
        },
        Case {
            prefer_same_node: false,
            cluster: Some(vec![1, 2]),
            has_any: true,
            topology: TopologyMode::SameZone,
            ..case(
                "node hints are ignored when PreferSameTrafficDistribution is off",
                vec![
                    e(1, "a", R, &["zone-a"], &["a"]),
                    e(2, "here", R, &["zone-a"], &["here"]),
                ],
            )
        },
        Case {
            cluster: Some(vec![1]),
            has_any: true,
            topology: TopologyMode::SameZone,
            ..case(
                "node hints for other nodes fall back to zone hints",
                vec![
                    e(1, "a", R, &["zone-a"], &["a"]),
                    e(2, "b", R, &["zone-b"], &["b"]),
                ],
            )
        },
        Case {
            cluster: Some(vec![1, 2]),
            has_any: true,
            ..case(
                "node hints for other nodes without zone hints fall back to all endpoints",
                vec![e(1, "a", R, &[], &["a"]), e(2, "b", R, &[], &["b"])],
            )
        },
        Case {
            internal: L,
            cluster: None,
            local: Some(vec![2]),
            has_any: true,
            ..case(
                "topology does not narrow local policy traffic",
                vec![
                    e(1, "a", R, &["zone-a"], &[]),
                    e(2, "here", R, &["zone-b"], &[]),
                ],
            )
        },
        Case {
            cluster: Some(vec![1, 2]),
            has_any: true,
            ..case(
                "the terminating fallback ignores topology",
                vec![
                    e(1, "a", T, &["zone-b"], &[]),
                    e(2, "b", T, &["zone-a"], &[]),
                ],
            )
        },
    ];
    assert!(cases.len() >= 20);
    for c in cases {
        let p = port(c.internal, c.external);
        let n = node(c.zone);
        let features = Features {
            prefer_same_node: c.prefer_same_node,
        };
        let s = select(&c.endpoints, &p, c.externally_accessible, &n, features);
        assert_eq!(
            octets(&s.cluster, &c.endpoints),
            c.cluster,
            "{}: cluster",
            c.name
        );
        assert_eq!(octets(&s.local, &c.endpoints), c.local, "{}: local", c.name);
        assert_eq!(s.has_any_endpoints, c.has_any, "{}: has_any", c.name);
        assert_eq!(s.topology, c.topology, "{}: topology", c.name);
    }
}

#[test]
fn reachable_is_the_sorted_union_of_both_lists() {
    let s = Selection {
        cluster: Some(vec![0, 2, 5]),
        local: Some(vec![1, 2, 7]),
        ..Selection::default()
    };
    assert_eq!(s.reachable().collect::<Vec<_>>(), vec![0, 1, 2, 5, 7]);
    let only_local = Selection {
        local: Some(vec![3]),
        ..Selection::default()
    };
    assert_eq!(only_local.reachable().collect::<Vec<_>>(), vec![3]);
}

#[test]
fn fallback_flags_say_when_terminating_endpoints_are_in_use() {
    let eps = vec![e(1, "here", T, &[], &[])];
    let s = select(&eps, &port(C, L), true, &node(None), Features::default());
    assert!(s.cluster_uses_terminating);
    assert!(s.local_uses_terminating);
}

#[test]
fn exclusion_reasons_name_the_rule() {
    let n = node(Some("zone-a"));
    let cases = [
        (
            e(1, "a", NR, &[], &[]),
            false,
            TopologyMode::None,
            "not ready",
        ),
        (
            e(1, "a", TN, &[], &[]),
            false,
            TopologyMode::None,
            "terminating and not serving",
        ),
        (
            e(1, "a", T, &[], &[]),
            false,
            TopologyMode::None,
            "terminating; ready endpoints exist",
        ),
        (
            e(1, "a", R, &["zone-b"], &[]),
            false,
            TopologyMode::SameZone,
            "hinted for zones [zone-b], this node is in zone-a",
        ),
        (
            e(1, "a", R, &[], &[]),
            true,
            TopologyMode::None,
            "on node a, not this node",
        ),
    ];
    for (ep, local, mode, want) in cases {
        assert_eq!(why_excluded(&ep, true, local, mode, &n), want);
    }
}
