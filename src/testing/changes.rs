//! Random cluster changes for the planners' property tests: a small universe of Services,
//! EndpointSlices and the node, drawn so that Services collide (shared ClusterIPs, NodePorts,
//! external and LoadBalancer IPs, pods behind several Services), which exercises how each
//! planner decides whose data a shared key carries.

use proptest::prelude::*;

use super::{
    affinity, applied_node, applied_service, applied_slice, deleted_service, deleted_slice, ep,
    load_balancer, node, node_port, service, slice, spec,
};
use crate::cluster::source::Event;

const SERVICES: [&str; 4] = ["a", "b", "c", "d"];
const CLUSTER_IPS: [&str; 4] = ["10.96.0.1", "10.96.0.2", "10.96.0.1,fd00::1", "fd00::2"];
const ENDPOINTS: [&str; 5] = [
    "10.244.1.2",
    "10.244.1.3",
    "10.244.2.2",
    "fd00::a",
    "fd00::b",
];

/// One Service with its shape drawn from a few choices.
#[derive(Clone, Debug)]
pub struct Shape {
    cluster_ip: usize,
    two_ports: bool,
    kind: u8,
    node_port: i32,
    lb_ip: usize,
    external_ip: Option<usize>,
    local: bool,
    internal_local: bool,
    affinity: Option<i32>,
    ranges: bool,
}

pub fn shape() -> impl Strategy<Value = Shape> {
    (
        0..CLUSTER_IPS.len(),
        any::<bool>(),
        0u8..3,
        30000..30003i32,
        0usize..2,
        proptest::option::of(0usize..2),
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(prop_oneof![Just(10), Just(20)]),
        any::<bool>(),
    )
        .prop_map(
            |(
                cluster_ip,
                two_ports,
                kind,
                node_port,
                lb_ip,
                external_ip,
                local,
                internal_local,
                affinity,
                ranges,
            )| Shape {
                cluster_ip,
                two_ports,
                kind,
                node_port,
                lb_ip,
                external_ip,
                local,
                internal_local,
                affinity,
                ranges,
            },
        )
}

fn make_service(name: &str, s: &Shape) -> crate::cluster::source::lean::Service {
    let mut ports = vec![("http", 80, "TCP")];
    if s.two_ports {
        ports.push(("dns", 53, "UDP"));
    }
    let mut svc = service("default", name, CLUSTER_IPS[s.cluster_ip], &ports);
    let node_ports = [s.node_port, s.node_port + 10];
    svc = match s.kind {
        0 => svc,
        1 => node_port(svc, &node_ports),
        _ => {
            let lb = ["192.0.2.1", "2001:db8::1"][s.lb_ip];
            load_balancer(svc, &node_ports, &[(lb, None)])
        }
    };
    if let Some(t) = s.affinity {
        svc = affinity(svc, Some(t));
    }
    let sp = spec(&mut svc);
    if let Some(e) = s.external_ip {
        sp.external_ips = Some(vec![["198.51.100.1", "10.96.0.2"][e].to_string()]);
    }
    if s.local && s.kind > 0 {
        sp.external_traffic_policy = Some("Local".to_string());
    }
    if s.internal_local {
        sp.internal_traffic_policy = Some("Local".to_string());
    }
    if s.ranges {
        sp.load_balancer_source_ranges = Some(vec!["10.0.0.0/8".into(), "fd00::/8".into()]);
    }
    svc
}

fn make_slice(
    service: &str,
    v6: bool,
    eps: &[(usize, bool, bool)],
) -> crate::cluster::source::lean::EndpointSlice {
    let list: Vec<_> = eps
        .iter()
        .filter(|(i, ..)| ENDPOINTS[*i].contains(':') == v6)
        .map(|&(i, local, ready)| {
            let e = ep(ENDPOINTS[i], if local { "node-a" } else { "node-b" });
            if ready { e } else { e.terminating() }
        })
        .collect();
    let name = format!("{service}-{}", if v6 { "v6" } else { "v4" });
    let ports = [("http", 8080, "TCP"), ("dns", 5353, "UDP")];
    slice("default", service, &name, &ports, &list)
}

/// One step: a few events, then a snapshot.
#[derive(Clone, Debug)]
pub enum Step {
    Service(usize, Shape),
    DeleteService(usize, Shape),
    Slice(usize, bool, Vec<(usize, bool, bool)>),
    DeleteSlice(usize, bool),
    Node(Option<&'static str>, &'static str),
}

pub fn step() -> impl Strategy<Value = Step> {
    let svc = 0..SERVICES.len();
    let eps = proptest::collection::vec((0..ENDPOINTS.len(), any::<bool>(), any::<bool>()), 0..4);
    prop_oneof![
        4 => (svc.clone(), shape()).prop_map(|(i, s)| Step::Service(i, s)),
        1 => (svc.clone(), shape()).prop_map(|(i, s)| Step::DeleteService(i, s)),
        5 => (svc.clone(), any::<bool>(), eps).prop_map(|(i, v6, e)| Step::Slice(i, v6, e)),
        1 => (svc, any::<bool>()).prop_map(|(i, v6)| Step::DeleteSlice(i, v6)),
        1 => (
            proptest::sample::select(vec![None, Some("zone-a")]),
            proptest::sample::select(vec!["10.0.0.11", "10.0.0.12"]),
        )
            .prop_map(|(z, ip)| Step::Node(z, ip)),
    ]
}

pub fn events(step: &Step) -> Vec<Event> {
    match step {
        Step::Service(i, s) => vec![applied_service(make_service(SERVICES[*i], s))],
        Step::DeleteService(i, s) => vec![deleted_service(make_service(SERVICES[*i], s))],
        Step::Slice(i, v6, e) => vec![applied_slice(make_slice(SERVICES[*i], *v6, e))],
        Step::DeleteSlice(i, v6) => vec![deleted_slice(make_slice(SERVICES[*i], *v6, &[]))],
        Step::Node(zone, ip) => vec![applied_node(node("node-a", ip, *zone))],
    }
}
