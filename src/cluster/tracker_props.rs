//! Property tests: random and malformed objects never panic the tracker, every snapshot keeps the
//! model's invariants, and the order of events does not change the result.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddress, NodeStatus, Service, ServicePort,
    ServiceSpec, ServiceStatus,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice, ForZone,
};
use k8s_openapi::api::networking::v1::{ServiceCIDR, ServiceCIDRSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;

use super::model::{IpFamily, Snapshot};
use super::source::{Event, Kind, Object};
use super::{Features, Tracker};
use crate::testing::applied_node;
use crate::testing::changes::{events, step};

/// Mostly plausible strings, sometimes hostile ones.
fn text(plausible: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(plausible).prop_map(str::to_string),
        1 => ".{0,40}",
        1 => "[a-z0-9.:/\"; -]{0,300}",
    ]
}

fn ip() -> impl Strategy<Value = String> {
    text(&[
        "10.96.0.1",
        "10.96.0.2",
        "10.244.1.5",
        "10.244.2.5",
        "fd00::1",
        "fd00::2",
        "None",
        "",
        "1.2.3.4.5",
        "::",
    ])
}

fn name() -> impl Strategy<Value = String> {
    text(&["web", "api", "db", "web-1", "web-2", "x"])
}

fn protocol() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(text(&["TCP", "UDP", "SCTP"]))
}

fn port_number() -> impl Strategy<Value = i32> {
    prop_oneof![4 => 0..70000i32, 1 => any::<i32>()]
}

fn meta(ns: String, name: String, labels: Vec<(String, String)>) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(ns),
        name: Some(name),
        labels: Some(labels.into_iter().collect::<BTreeMap<_, _>>()),
        ..ObjectMeta::default()
    }
}

prop_compose! {
    fn service()(
        ns in text(&["default", "kube-system"]), name in name(),
        ips in proptest::collection::vec(ip(), 0..3),
        type_ in proptest::option::of(text(&["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"])),
        ports in proptest::collection::vec((proptest::option::of(name()), port_number(), proptest::option::of(port_number()), protocol()), 0..4),
        external in proptest::collection::vec(ip(), 0..3),
        ingress in proptest::collection::vec((ip(), proptest::option::of(text(&["VIP", "Proxy"]))), 0..3),
        ranges in proptest::collection::vec(text(&["10.0.0.0/8", "fd00::/8", "bad"]), 0..3),
        etp in proptest::option::of(text(&["Local", "Cluster"])),
        itp in proptest::option::of(text(&["Local", "Cluster"])),
        affinity in proptest::option::of(text(&["ClientIP", "None"])),
        hc in proptest::option::of(port_number()),
        label in proptest::option::of(Just(("service.kubernetes.io/service-proxy-name".to_string(), "x".to_string()))),
    ) -> Service {
        Service {
            metadata: meta(ns, name, label.into_iter().collect()),
            spec: Some(ServiceSpec {
                cluster_ip: ips.first().cloned(),
                cluster_ips: Some(ips),
                type_,
                ports: Some(ports.into_iter().map(|(name, port, node_port, protocol)| ServicePort {
                    name, port, node_port, protocol, ..ServicePort::default()
                }).collect()),
                external_ips: Some(external),
                load_balancer_source_ranges: Some(ranges),
                external_traffic_policy: etp,
                internal_traffic_policy: itp,
                session_affinity: affinity,
                health_check_node_port: hc,
                ..ServiceSpec::default()
            }),
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(ingress.into_iter().map(|(ip, ip_mode)| LoadBalancerIngress {
                        ip: Some(ip), ip_mode, ..LoadBalancerIngress::default()
                    }).collect()),
                }),
                ..ServiceStatus::default()
            }),
        }
    }
}

prop_compose! {
    fn slice()(
        ns in text(&["default", "kube-system"]), name in name(), service in name(),
        address_type in text(&["IPv4", "IPv6", "FQDN"]),
        ports in proptest::collection::vec((proptest::option::of(name()), proptest::option::of(port_number()), protocol()), 0..3),
        endpoints in proptest::collection::vec((
            proptest::collection::vec(ip(), 0..2),
            proptest::option::of(text(&["node-a", "node-b"])),
            (proptest::option::of(any::<bool>()), proptest::option::of(any::<bool>()), proptest::option::of(any::<bool>())),
            proptest::collection::vec(text(&["zone-a", "zone-b"]), 0..2),
        ), 0..5),
    ) -> EndpointSlice {
        EndpointSlice {
            metadata: meta(ns, name, vec![("kubernetes.io/service-name".to_string(), service)]),
            address_type,
            ports: Some(ports.into_iter().map(|(name, port, protocol)| EndpointPort {
                name, port, protocol, ..EndpointPort::default()
            }).collect()),
            endpoints: endpoints.into_iter().map(|(addresses, node_name, (ready, serving, terminating), zones)| Endpoint {
                addresses,
                node_name,
                conditions: Some(EndpointConditions { ready, serving, terminating }),
                hints: Some(EndpointHints {
                    for_zones: Some(zones.into_iter().map(|name| ForZone { name }).collect()),
                    for_nodes: None,
                }),
                ..Endpoint::default()
            }).collect(),
        }
    }
}

prop_compose! {
    fn node()(zone in text(&["zone-a", "zone-b"]), addr in ip(), name in text(&["node-a", "node-b"])) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some([("topology.kubernetes.io/zone".to_string(), zone)].into()),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress { address: addr, type_: "InternalIP".to_string() }]),
                ..NodeStatus::default()
            }),
        }
    }
}

/// Whether the counts the tracker kept as ports changed equal a fresh count of the snapshot.
fn counts_are_kept(snap: &Snapshot) -> bool {
    let counted = Snapshot::new(snap.node.clone(), snap.ports.clone());
    IpFamily::ALL
        .into_iter()
        .all(|f| snap.no_local_endpoints(f) == counted.no_local_endpoints(f))
}

fn service_cidr() -> impl Strategy<Value = ServiceCIDR> {
    (
        text(&["kubernetes", "extra"]),
        proptest::collection::vec(
            text(&[
                "10.96.0.0/16",
                "10.96.0.0/12",
                "fd00:96::/112",
                "10.96.0.1/16",
            ]),
            0..3,
        ),
    )
        .prop_map(|(name, cidrs)| ServiceCIDR {
            metadata: ObjectMeta {
                name: Some(name),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceCIDRSpec { cidrs: Some(cidrs) }),
            status: None,
        })
}

fn object() -> impl Strategy<Value = Object> {
    prop_oneof![
        3 => service().prop_map(Object::from),
        3 => slice().prop_map(Object::from),
        1 => node().prop_map(|n| Object::Node(Box::new(n))),
        1 => service_cidr().prop_map(Object::from),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => object().prop_map(Event::Applied),
        2 => object().prop_map(Event::Deleted),
        1 => (proptest::sample::select(&Kind::ALL[..]), proptest::collection::vec(object(), 0..4))
            .prop_map(|(k, objects)| Event::Listed(k, objects)),
        1 => proptest::sample::select(&Kind::ALL[..]).prop_map(Event::ListStarted),
        2 => object().prop_map(Event::ListItem),
        1 => proptest::sample::select(&Kind::ALL[..]).prop_map(Event::ListEnded),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_events_never_panic_and_keep_invariants(events in proptest::collection::vec(event(), 0..30)) {
        let mut t = Tracker::new("node-a", Features::default());
        for (i, e) in events.into_iter().enumerate() {
            t.apply(&e);
            if i % 7 == 0 {
                let (snap, _) = t.snapshot();
                prop_assert!(counts_are_kept(&snap));
            }
        }
        let (snap, _) = t.snapshot();
        prop_assert!(counts_are_kept(&snap));
        for (name, state) in snap.ports.iter() {
            prop_assert_eq!(name, &state.port.name);
            prop_assert!(state.port.port != 0);
            prop_assert!(!state.families.is_empty() && state.families.len() <= 2);
            for view in &state.families {
                prop_assert_eq!(IpFamily::of(&view.cluster_ip), view.family);
                prop_assert!(view.endpoints.iter().all(|e| IpFamily::of(&e.ip) == view.family && e.port != 0));
                prop_assert!(view.endpoints.windows(2).all(|w| (w[0].ip, w[0].port) < (w[1].ip, w[1].port)));
                prop_assert!(view.selection.reachable().all(|i| (i as usize) < view.endpoints.len()));
                prop_assert!(view.external_ips.iter().chain(&view.load_balancer_ips).all(|ip| IpFamily::of(ip) == view.family));
            }
        }
        prop_assert!(snap.service_cidrs.windows(2).all(|w| w[0] < w[1]));
        prop_assert!(snap.service_cidrs.iter().all(|n| *n == n.trunc()));
    }

    /// The runner asks for no sync after an event that left the generation as it was: such an
    /// event must change nothing a sync reads.
    #[test]
    fn an_event_that_leaves_the_generation_changes_nothing_a_sync_reads(events in proptest::collection::vec(event(), 1..30)) {
        let mut t = Tracker::new("node-a", Features::default());
        for e in &events {
            let (before, _) = t.snapshot();
            let generation = t.generation();
            t.apply(e);
            let (after, changes) = t.snapshot();
            if t.generation() == generation {
                prop_assert!(changes.ports.is_empty() && !changes.node_topology_changed, "{e:?}");
                prop_assert_eq!(&*before.ports, &*after.ports);
                prop_assert_eq!(&*before.node, &*after.node);
                prop_assert_eq!(&*before.service_cidrs, &*after.service_cidrs);
            }
        }
    }

    #[test]
    fn no_local_endpoint_counts_follow_changes(steps in proptest::collection::vec(step(), 1..40)) {
        let mut t = Tracker::new("node-a", Features::default());
        t.apply(&applied_node(crate::testing::node("node-a", "10.0.0.11", None)));
        for s in &steps {
            for e in events(s) {
                t.apply(&e);
            }
            let (snap, _) = t.snapshot();
            prop_assert!(counts_are_kept(&snap));
        }
    }

    #[test]
    fn the_order_of_applied_objects_does_not_matter(objects in proptest::collection::vec(object(), 0..12), seed in any::<u64>()) {
        // Only the first object of each identity counts, so both orders hold the same set.
        let mut seen = std::collections::HashSet::new();
        let unique: Vec<Object> = objects.into_iter().filter(|o| {
            let m = match o {
                Object::Service(s) => &s.metadata,
                Object::EndpointSlice(s) => &s.metadata,
                Object::Node(n) => &n.metadata,
                Object::ServiceCidr(c) => &c.metadata,
            };
            seen.insert((o.kind(), m.namespace.clone(), m.name.clone()))
        }).collect();
        let mut shuffled = unique.clone();
        let n = shuffled.len();
        for i in (1..n).rev() {
            let j = (seed.wrapping_mul(6364136223846793005).wrapping_add(i as u64) % (i as u64 + 1)) as usize;
            shuffled.swap(i, j);
        }
        let run = |objects: Vec<Object>| {
            let mut t = Tracker::new("node-a", Features::default());
            for o in objects {
                t.apply(&Event::Applied(o));
            }
            t.snapshot().0
        };
        let (a, b) = (run(unique), run(shuffled));
        prop_assert_eq!(&*a.ports, &*b.ports);
        prop_assert_eq!(&*a.node, &*b.node);
        prop_assert_eq!(&*a.service_cidrs, &*b.service_cidrs);
    }

    #[test]
    fn a_streamed_list_ends_where_the_same_list_in_one_event_does(
        before in proptest::collection::vec(event(), 0..20),
        kind in proptest::sample::select(&Kind::ALL[..]),
        abandoned in proptest::collection::vec(object(), 0..4),
        listed in proptest::collection::vec(object(), 0..6),
    ) {
        let of_kind = |objects: Vec<Object>| -> Vec<Object> {
            objects.into_iter().filter(|o| o.kind() == kind).collect()
        };
        let (abandoned, listed) = (of_kind(abandoned), of_kind(listed));
        let prefix = |t: &mut Tracker| {
            for e in &before {
                t.apply(e);
            }
        };
        let mut whole = Tracker::new("node-a", Features::default());
        prefix(&mut whole);
        whole.apply(&Event::Listed(kind, listed.clone()));
        // The same list streamed, after a first attempt cut short (a list restarted after an
        // error): the abandoned items were applied, and the restarted list's end removes them.
        let mut streamed = Tracker::new("node-a", Features::default());
        prefix(&mut streamed);
        streamed.apply(&Event::ListStarted(kind));
        for o in abandoned {
            streamed.apply(&Event::ListItem(o));
        }
        streamed.apply(&Event::ListStarted(kind));
        for o in listed {
            streamed.apply(&Event::ListItem(o));
        }
        streamed.apply(&Event::ListEnded(kind));
        let (a, b) = (whole.snapshot().0, streamed.snapshot().0);
        prop_assert_eq!(&*a.ports, &*b.ports);
        prop_assert_eq!(&*a.node, &*b.node);
        prop_assert_eq!(&*a.service_cidrs, &*b.service_cidrs);
        prop_assert_eq!(whole.ignored_services(), streamed.ignored_services());
        prop_assert!(whole.synced() == streamed.synced());
    }
}
