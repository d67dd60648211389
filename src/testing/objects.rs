//! Builders for Services, EndpointSlices and Nodes in unit tests, and the source events that
//! carry them: short to write, complete enough to pass the tracker's checks, and changeable with
//! plain field access afterwards.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddress, NodeSpec,
    NodeStatus, ServicePort, SessionAffinityConfig,
};
use k8s_openapi::api::discovery::v1::{
    EndpointConditions, EndpointHints, EndpointPort, ForNode, ForZone,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::source::lean::{Endpoint, EndpointSlice, Service, ServiceSpec, ServiceStatus};
use crate::cluster::source::{Event, Kind, Object};

fn meta(namespace: Option<&str>, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        namespace: namespace.map(str::to_string),
        name: Some(name.to_string()),
        labels: (!labels.is_empty()).then(|| {
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        }),
        ..ObjectMeta::default()
    }
}

/// A ClusterIP Service `ns/name` on `cluster_ip` with one port per `(name, port, protocol)`.
pub fn service(ns: &str, name: &str, cluster_ip: &str, ports: &[(&str, i32, &str)]) -> Service {
    Service {
        metadata: meta(Some(ns), name, &[]),
        spec: Some(ServiceSpec {
            cluster_ip: Some(cluster_ip.to_string()),
            cluster_ips: Some(cluster_ip.split(',').map(str::to_string).collect()),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p, proto)| ServicePort {
                        name: (!n.is_empty()).then(|| n.to_string()),
                        port: *p,
                        protocol: (!proto.is_empty()).then(|| proto.to_string()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            type_: Some("ClusterIP".to_string()),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The Service's spec, for tweaking.
pub fn spec(svc: &mut Service) -> &mut ServiceSpec {
    svc.spec.as_mut().expect("builder sets a spec")
}

/// Makes a Service a NodePort Service with the given node ports (one per port, in order).
pub fn node_port(mut svc: Service, node_ports: &[i32]) -> Service {
    let s = spec(&mut svc);
    s.type_ = Some("NodePort".to_string());
    for (p, n) in s.ports.as_mut().unwrap().iter_mut().zip(node_ports) {
        p.node_port = Some(*n);
    }
    svc
}

/// Makes a Service a LoadBalancer with ingress `(ip, ipMode)` entries.
pub fn load_balancer(
    svc: Service,
    node_ports: &[i32],
    ingress: &[(&str, Option<&str>)],
) -> Service {
    let mut svc = node_port(svc, node_ports);
    spec(&mut svc).type_ = Some("LoadBalancer".to_string());
    svc.status = Some(ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: Some(
                ingress
                    .iter()
                    .map(|(ip, mode)| LoadBalancerIngress {
                        ip: Some(ip.to_string()),
                        ip_mode: mode.map(str::to_string),
                        ..LoadBalancerIngress::default()
                    })
                    .collect(),
            ),
        }),
    });
    svc
}

/// Turns on ClientIP affinity, with an explicit timeout when given.
pub fn affinity(mut svc: Service, timeout: Option<i32>) -> Service {
    let s = spec(&mut svc);
    s.session_affinity = Some("ClientIP".to_string());
    s.session_affinity_config = timeout.map(|t| SessionAffinityConfig {
        client_ip: Some(ClientIPConfig {
            timeout_seconds: Some(t),
        }),
    });
    svc
}

/// One endpoint of a slice: address, node, and conditions `(ready, serving, terminating)`.
pub struct Ep<'a> {
    pub ip: &'a str,
    pub node: Option<&'a str>,
    pub conditions: (Option<bool>, Option<bool>, Option<bool>),
    pub zone: Option<&'a str>,
    pub zone_hints: &'a [&'a str],
    pub node_hints: &'a [&'a str],
}

/// A ready endpoint on `node`.
pub fn ep<'a>(ip: &'a str, node: &'a str) -> Ep<'a> {
    Ep {
        ip,
        node: Some(node),
        conditions: (Some(true), Some(true), Some(false)),
        zone: None,
        zone_hints: &[],
        node_hints: &[],
    }
}

impl<'a> Ep<'a> {
    /// Not ready, still serving, terminating: a Pod shutting down gracefully.
    pub fn terminating(mut self) -> Self {
        self.conditions = (Some(false), Some(true), Some(true));
        self
    }
    pub fn not_ready(mut self) -> Self {
        self.conditions = (Some(false), Some(false), Some(false));
        self
    }
    pub fn conditions(mut self, c: (Option<bool>, Option<bool>, Option<bool>)) -> Self {
        self.conditions = c;
        self
    }
    pub fn zone(mut self, zone: &'a str) -> Self {
        self.zone = Some(zone);
        self
    }
    pub fn zone_hints(mut self, hints: &'a [&'a str]) -> Self {
        self.zone_hints = hints;
        self
    }
    pub fn node_hints(mut self, hints: &'a [&'a str]) -> Self {
        self.node_hints = hints;
        self
    }
}

/// An EndpointSlice `name` of Service `ns/service` with ports `(name, port, protocol)`.
pub fn slice(
    ns: &str,
    service: &str,
    name: &str,
    ports: &[(&str, i32, &str)],
    eps: &[Ep],
) -> EndpointSlice {
    let family = if eps.iter().any(|e| e.ip.contains(':')) {
        "IPv6"
    } else {
        "IPv4"
    };
    EndpointSlice {
        metadata: meta(Some(ns), name, &[("kubernetes.io/service-name", service)]),
        address_type: family.to_string(),
        ports: Some(
            ports
                .iter()
                .map(|(n, p, proto)| EndpointPort {
                    name: Some(n.to_string()),
                    port: Some(*p),
                    protocol: Some(proto.to_string()),
                    ..EndpointPort::default()
                })
                .collect(),
        ),
        endpoints: eps
            .iter()
            .map(|e| Endpoint {
                addresses: vec![e.ip.to_string()],
                node_name: e.node.map(str::to_string),
                zone: e.zone.map(str::to_string),
                conditions: Some(EndpointConditions {
                    ready: e.conditions.0,
                    serving: e.conditions.1,
                    terminating: e.conditions.2,
                }),
                hints: (!e.zone_hints.is_empty() || !e.node_hints.is_empty()).then(|| {
                    EndpointHints {
                        for_zones: (!e.zone_hints.is_empty()).then(|| {
                            e.zone_hints
                                .iter()
                                .map(|z| ForZone {
                                    name: z.to_string(),
                                })
                                .collect()
                        }),
                        for_nodes: (!e.node_hints.is_empty()).then(|| {
                            e.node_hints
                                .iter()
                                .map(|n| ForNode {
                                    name: n.to_string(),
                                })
                                .collect()
                        }),
                    }
                }),
            })
            .collect(),
    }
}

/// A Node with an InternalIP and an optional zone label.
pub fn node(name: &str, ip: &str, zone: Option<&str>) -> Node {
    let labels: Vec<(&str, &str)> = zone
        .map(|z| ("topology.kubernetes.io/zone", z))
        .into_iter()
        .collect();
    Node {
        metadata: meta(None, name, &labels),
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                address: ip.to_string(),
                type_: "InternalIP".to_string(),
            }]),
            ..NodeStatus::default()
        }),
    }
}

pub fn applied_service(s: Service) -> Event {
    Event::Applied(Object::Service(Box::new(s)))
}
pub fn applied_slice(s: EndpointSlice) -> Event {
    Event::Applied(Object::EndpointSlice(Box::new(s)))
}
pub fn applied_node(n: Node) -> Event {
    Event::Applied(Object::Node(Box::new(n)))
}
pub fn deleted_slice(s: EndpointSlice) -> Event {
    Event::Deleted(Object::EndpointSlice(Box::new(s)))
}
pub fn deleted_service(s: Service) -> Event {
    Event::Deleted(Object::Service(Box::new(s)))
}
pub fn listed(kind: Kind, objects: Vec<Object>) -> Event {
    Event::Listed(kind, objects)
}
