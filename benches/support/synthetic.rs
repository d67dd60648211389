//! A synthetic cluster for the planner benches and the kernel timing examples: N ClusterIP
//! Services (TCP 80 → 8080) × M ready endpoints spread over 100 nodes, IPv4, already turned
//! into a tracker [`Snapshot`], so a bench times the dataplane alone. Shared by
//! `benches/{nftables,iptables}.rs` and `examples/iptables_apply.rs` through `#[path]`.

#![allow(
    dead_code,
    reason = "each bench or example that includes it uses a part"
)]

use std::collections::BTreeMap;
use std::sync::Arc;

use kube_proxy_rs::cluster::model::{
    Endpoint, FamilyView, IpFamily, NodeAddress, NodeContext, Protocol, ServiceKey, ServicePort,
    ServicePortName, ServicePortState, ServiceType, Snapshot, TrafficPolicy,
};
use kube_proxy_rs::cluster::topology::{self, Features};

/// Nodes the endpoints are spread over; this node (`node-0`) holds every 100th.
const NODES: usize = 100;

/// The cluster's shape.
#[derive(Clone, Copy, Debug)]
pub struct Synthetic {
    pub services: usize,
    pub endpoints: usize,
}

impl Synthetic {
    /// This node: `node-0`, InternalIP 10.0.0.1.
    pub fn node() -> NodeContext {
        let mut n = NodeContext::named("node-0");
        n.known = true;
        n.addresses.push(NodeAddress {
            kind: "InternalIP".into(),
            ip: "10.0.0.1".parse().unwrap(),
        });
        n
    }

    pub fn snapshot(self) -> Snapshot {
        let node = Synthetic::node();
        let ports: BTreeMap<_, _> = (0..self.services)
            .map(|i| {
                let (p, v) = self.port(i);
                (p.name.clone(), state(p, v, &node))
            })
            .collect();
        Snapshot {
            node: Arc::new(node),
            ports: Arc::new(ports),
        }
    }

    /// The middle Service, whose endpoint `moved` replaces.
    pub fn moved_port(self) -> ServicePortName {
        self.port(self.services / 2).0.name
    }

    /// `snap` with the middle endpoint of the middle Service moved to `to`.
    pub fn moved(self, snap: &Snapshot, to: &str) -> Snapshot {
        let (p, mut v) = self.port(self.services / 2);
        v.endpoints[self.endpoints / 2].ip = to.parse().unwrap();
        let mut ports = (*snap.ports).clone();
        ports.insert(p.name.clone(), state(p, v, &snap.node));
        Snapshot {
            node: snap.node.clone(),
            ports: Arc::new(ports),
        }
    }

    fn port(self, i: usize) -> (ServicePort, FamilyView) {
        let port = ServicePort {
            name: ServicePortName {
                service: ServiceKey::new(&format!("ns-{}", i % 100), &format!("svc-{i}")),
                port: "http".into(),
                protocol: Protocol::Tcp,
            },
            service_type: ServiceType::ClusterIP,
            port: 80,
            node_port: None,
            affinity_timeout_seconds: None,
            internal_policy: TrafficPolicy::Cluster,
            external_policy: TrafficPolicy::Cluster,
            health_check_node_port: None,
            traffic_distribution: None,
            allocate_load_balancer_node_ports: true,
        };
        let endpoints = (0..self.endpoints)
            .map(|e| {
                let n = i * self.endpoints + e;
                Endpoint {
                    ip: format!("10.{}.{}.{}", 128 + n / 65_536 % 64, n / 256 % 256, n % 256)
                        .parse()
                        .unwrap(),
                    port: 8080,
                    ready: true,
                    serving: true,
                    terminating: false,
                    node_name: Some(format!("node-{}", n % NODES).into()),
                    zone: None,
                    zone_hints: vec![],
                    node_hints: vec![],
                    is_local: n.is_multiple_of(NODES),
                }
            })
            .collect();
        let view = FamilyView {
            family: IpFamily::V4,
            cluster_ip: format!("10.96.{}.{}", i / 250, i % 250 + 1)
                .parse()
                .unwrap(),
            external_ips: vec![],
            load_balancer_ips: vec![],
            load_balancer_source_ranges: vec![],
            endpoints,
            selection: Default::default(),
        };
        (port, view)
    }
}

fn state(port: ServicePort, mut view: FamilyView, node: &NodeContext) -> Arc<ServicePortState> {
    view.endpoints.sort_by_key(|e| (e.ip, e.port));
    view.selection = topology::select(&view.endpoints, &port, false, node, Features::default());
    Arc::new(ServicePortState {
        port,
        families: vec![view],
    })
}
