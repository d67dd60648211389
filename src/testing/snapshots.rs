//! Snapshots for planner, trace and diff tests, built directly from the model (the tracker has
//! its own tests): service ports under construction ([`Svc`]), the node the tests run on, and the
//! snapshot of both, with endpoint selection done by the real `topology::select` (through
//! [`synthetic::state`], the same as the benches' clusters).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::synthetic;
use crate::cluster::model::{
    Endpoint, FamilyView, IpFamily, NodeAddress, NodeContext, Placement, Protocol, ServiceKey,
    ServicePort, ServicePortName, ServiceType, Snapshot, TrafficPolicy,
};

/// The node the tests run on: `node-a`, 10.0.0.11 / fd00::11, pods in 10.244.1.0/24.
pub fn node() -> NodeContext {
    let mut n = NodeContext::named("node-a");
    n.known = true;
    for ip in ["10.0.0.11", "fd00::11"] {
        n.addresses.push(NodeAddress {
            kind: "InternalIP".into(),
            ip: ip.parse().unwrap(),
        });
    }
    n.pod_cidrs = vec![
        "10.244.1.0/24".parse().unwrap(),
        "fd00:244:1::/64".parse().unwrap(),
    ];
    n
}

/// The configuration beside [`node`]: the nftables mode's defaults, pods told apart by the
/// cluster's pod CIDRs (both families). It resolves to [`node_policy`].
pub fn config() -> crate::config::Config {
    use crate::config::{Config, DetectLocalMode, NodePortAddresses, ProxyMode};
    Config {
        mode: ProxyMode::Nftables,
        node_port_addresses: NodePortAddresses::default_for(ProxyMode::Nftables),
        detect_local_mode: DetectLocalMode::ClusterCidr,
        cluster_cidrs: vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:244::/32".parse().unwrap(),
        ],
        ..Config::default()
    }
}

/// The node policy beside [`node`]: detect-local by the cluster's pod CIDRs (both families),
/// the nftables mode's defaults otherwise.
pub fn node_policy() -> crate::dataplane::node::NodePolicy {
    use crate::dataplane::node::{NodePolicy, detect_local::DetectLocal};
    NodePolicy {
        detect_local: DetectLocal::ClusterCidrs(vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:244::/32".parse().unwrap(),
        ]),
        ..NodePolicy::defaults_for(crate::config::ProxyMode::Nftables)
    }
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A service port under construction.
#[derive(Clone, Debug)]
pub struct Svc {
    pub port: ServicePort,
    pub cluster_ip: IpAddr,
    pub external_ips: Vec<IpAddr>,
    pub lb_ips: Vec<IpAddr>,
    pub ranges: Vec<ipnet::IpNet>,
    pub endpoints: Vec<Endpoint>,
}

/// `ns/name` port `port` (TCP, unnamed) on `cluster_ip`.
pub fn svc(ns_name: &str, cluster_ip: &str, port: u16) -> Svc {
    let (ns, name) = ns_name.split_once('/').unwrap();
    let name = ServicePortName {
        service: ServiceKey::new(ns, name),
        port: "".into(),
        protocol: Protocol::Tcp,
    };
    Svc {
        port: synthetic::cluster_ip_port(name, port),
        cluster_ip: ip(cluster_ip),
        external_ips: vec![],
        lb_ips: vec![],
        ranges: vec![],
        endpoints: vec![],
    }
}

impl Svc {
    /// The port's name (a second port of one Service is a second `svc` with another name).
    pub fn named(mut self, port_name: &str) -> Svc {
        self.port.name.port = port_name.into();
        self
    }
    pub fn proto(mut self, p: Protocol) -> Svc {
        self.port.name.protocol = p;
        self
    }
    pub fn node_port(mut self, p: u16) -> Svc {
        self.port.node_port = Some(p);
        self.port.service_type = ServiceType::NodePort;
        self
    }
    pub fn external(mut self, a: &str) -> Svc {
        self.external_ips.push(ip(a));
        self
    }
    pub fn lb(mut self, a: &str) -> Svc {
        self.lb_ips.push(ip(a));
        self.port.service_type = ServiceType::LoadBalancer;
        self
    }
    pub fn range(mut self, r: &str) -> Svc {
        self.ranges.push(r.parse().unwrap());
        self
    }
    pub fn affinity(mut self, seconds: u32) -> Svc {
        self.port.affinity_timeout_seconds = Some(seconds);
        self
    }
    pub fn internal_local(mut self) -> Svc {
        self.port.internal_policy = TrafficPolicy::Local;
        self
    }
    pub fn external_local(mut self) -> Svc {
        self.port.external_policy = TrafficPolicy::Local;
        self
    }
    /// A `healthCheckNodePort` (with `external_local`, a LoadBalancer's check).
    pub fn health_check(mut self, port: u16) -> Svc {
        self.port.health_check_node_port = Some(port);
        self
    }
    /// A ready endpoint `ip:port` on `node`.
    pub fn ep(self, addr: &str, port: u16, node: &str) -> Svc {
        self.ep_state(addr, port, node, true, false)
    }
    pub fn ep_state(
        mut self,
        addr: &str,
        port: u16,
        node: &str,
        ready: bool,
        terminating: bool,
    ) -> Svc {
        self.endpoints.push(Endpoint {
            ip: ip(addr),
            port,
            ready,
            serving: ready || terminating,
            terminating,
            is_local: false,
            placement: Arc::new(Placement {
                node_name: Some(node.into()),
                ..Placement::default()
            }),
        });
        self
    }
}

/// The services the `explain` and `status` tests start from, beside [`node`], all port 80
/// with endpoints on 8080: `default/web` on 10.96.0.10 (an endpoint on this node and one on
/// `node-b`), `default/empty` on 10.96.0.20 (none) and `default/np` on 10.96.0.30 (node port
/// 30080, its one endpoint on `node-b`).
pub fn web_empty_node_port() -> Vec<Svc> {
    vec![
        svc("default/web", "10.96.0.10", 80)
            .ep("10.244.1.2", 8080, "node-a")
            .ep("10.244.2.2", 8080, "node-b"),
        svc("default/empty", "10.96.0.20", 80),
        svc("default/np", "10.96.0.30", 80)
            .node_port(30080)
            .ep("10.244.2.3", 8080, "node-b"),
    ]
}

/// `default/web` (10.96.0.10) and `default/web6` (fd00:96::10), port 80, each with one
/// endpoint on `node-b` at 8080 (10.244.2.5, fd00:244:2::5): a Service of each family.
pub fn web_in_each_family() -> Vec<Svc> {
    vec![
        svc("default/web", "10.96.0.10", 80).ep("10.244.2.5", 8080, "node-b"),
        svc("default/web6", "fd00:96::10", 80).ep("fd00:244:2::5", 8080, "node-b"),
    ]
}

/// `default/web` port 80 on 10.96.0.10 with NodePort 30080 and the external Local policy, an
/// endpoint on this node (10.244.1.5) and one on `node-b` (10.244.2.5), both on 8080: where
/// traffic from outside is held to this node's endpoint and the node's own is not.
pub fn local_node_port() -> Svc {
    svc("default/web", "10.96.0.10", 80)
        .node_port(30080)
        .external_local()
        .ep("10.244.1.5", 8080, "node-a")
        .ep("10.244.2.5", 8080, "node-b")
}

/// `default/web` port 80 on 10.96.0.10, beside [`node`]: two ready endpoints (listed out of
/// address order, 10.244.2.5 before 10.244.1.5) and one that is not ready (10.244.3.5), all on
/// port 8080. A planner balances over the ready two, in address order, and leaves the third out.
pub fn web_with_unready() -> Snapshot {
    snapshot(
        node(),
        vec![
            svc("default/web", "10.96.0.10", 80)
                .ep("10.244.2.5", 8080, "node-b")
                .ep("10.244.1.5", 8080, "node-a")
                .ep_state("10.244.3.5", 8080, "node-c", false, false),
        ],
    )
}

/// A snapshot for `node` holding `services`, each in the family of its ClusterIP.
pub fn snapshot(node: NodeContext, services: Vec<Svc>) -> Snapshot {
    let mut ports = std::collections::BTreeMap::new();
    for s in services {
        let family = IpFamily::of(&s.cluster_ip);
        let endpoints: Vec<Endpoint> = s
            .endpoints
            .into_iter()
            .filter(|e| IpFamily::of(&e.ip) == family)
            .map(|mut e| {
                e.is_local = e.placement.node_name.as_deref() == Some(&*node.name);
                e
            })
            .collect();
        let view = FamilyView {
            family,
            cluster_ip: s.cluster_ip,
            external_ips: s.external_ips,
            load_balancer_ips: s.lb_ips,
            load_balancer_source_ranges: s.ranges,
            endpoints,
            selection: Default::default(),
        };
        ports.insert(s.port.name.clone(), synthetic::state(s.port, view, &node));
    }
    Snapshot::new(Arc::new(node), Arc::new(ports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_resolves_to_the_node_policy_the_tests_explain_with() {
        let resolved = crate::dataplane::node::NodePolicy::new(&config()).unwrap();
        assert_eq!(resolved, node_policy());
    }
}
