//! Service port states built straight from the model, skipping the API objects and the tracker
//! (which have tests of their own), with endpoint selection done by the real
//! `topology::select`: one plain ClusterIP port at a time ([`cluster_ip_port`], [`state`]), or a
//! whole synthetic cluster of N ClusterIP Services (TCP 80 → 8080) × M ready endpoints spread
//! over 100 nodes, IPv4, as a snapshot ([`Synthetic`]), so a bench times the dataplane alone.
//! What times or measures the tracker, which reads API objects, lists the same endpoints and
//! node as the API server would ([`slice_endpoint`], [`node_object`]).
//!
//! Written against the public API only (`kube_proxy_rs::…`), because the test-support crate
//! (`tests/support/lib.rs`, its `synthetic`) compiles this very file for the benches, examples and
//! integration tests, and the crate's unit tests build their snapshots on it
//! (`testing::snapshots`): one copy, and none of it in the library.

#![allow(
    dead_code,
    reason = "the crate's unit tests use a part, the test-support crate's users the rest"
)]

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use kube_proxy_rs::cluster::model::{
    Endpoint, FamilyView, IpFamily, NodeAddress, NodeContext, Placement, Protocol, ServiceKey,
    ServicePort, ServicePortName, ServicePortState, ServiceType, Snapshot, TrafficPolicy,
};
use kube_proxy_rs::cluster::topology::{self, Features};

/// What the tracker makes of a plain `type: ClusterIP` port: every policy `Cluster`, no node
/// port, no affinity, no topology.
pub fn cluster_ip_port(name: ServicePortName, port: u16) -> ServicePort {
    ServicePort {
        name,
        service_type: ServiceType::ClusterIP,
        port,
        node_port: None,
        affinity_timeout_seconds: None,
        internal_policy: TrafficPolicy::Cluster,
        external_policy: TrafficPolicy::Cluster,
        health_check_node_port: None,
        traffic_distribution: None,
        allocate_load_balancer_node_ports: true,
        ipvs_scheduler: None,
    }
}

/// Chooses `view`'s endpoints for each kind of traffic again, as the tracker does after any
/// change to them (default features).
pub fn select(view: &mut FamilyView, port: &ServicePort, node: &NodeContext) {
    let accessible = view.externally_accessible(port);
    view.selection = topology::select(&view.endpoints, port, accessible, node, Features::default());
}

/// `port` with its one family `view`: endpoints in the tracker's order (by address and port),
/// then selected for `node`.
pub fn state(port: ServicePort, mut view: FamilyView, node: &NodeContext) -> Arc<ServicePortState> {
    view.endpoints.sort_by_key(|e| (e.ip, e.port));
    select(&mut view, &port, node);
    Arc::new(ServicePortState {
        port,
        families: vec![view],
    })
}

/// Nodes the endpoints are spread over; this node (`node-0`) holds every 100th.
const NODES: usize = 100;

/// One shared placement per node, as the tracker's interner makes them.
static PLACEMENTS: LazyLock<Vec<Arc<Placement>>> = LazyLock::new(|| {
    (0..NODES)
        .map(|n| {
            Arc::new(Placement {
                node_name: Some(format!("node-{n}").into()),
                ..Placement::default()
            })
        })
        .collect()
});

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
        Snapshot::new(Arc::new(node), Arc::new(ports))
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
        Snapshot::new(snap.node.clone(), Arc::new(ports))
    }

    /// Service `i`'s one port and its endpoints, in no particular order. ClusterIPs count up
    /// from 10.96.0.1, 250 to a /24, into 10.97.0.0/16 after 64,000 Services.
    fn port(self, i: usize) -> (ServicePort, FamilyView) {
        let name = ServicePortName {
            service: ServiceKey::new(&format!("ns-{}", i % 100), &format!("svc-{i}")),
            port: "http".into(),
            protocol: Protocol::Tcp,
        };
        let endpoints = (0..self.endpoints)
            .map(|e| {
                let n = i * self.endpoints + e;
                Endpoint {
                    ip: endpoint_address(n).parse().unwrap(),
                    port: 8080,
                    ready: true,
                    serving: true,
                    terminating: false,
                    is_local: n.is_multiple_of(NODES),
                    placement: PLACEMENTS[n % NODES].clone(),
                }
            })
            .collect();
        let view = FamilyView {
            family: IpFamily::V4,
            cluster_ip: format!("10.{}.{}.{}", 96 + i / 64_000, i / 250 % 256, i % 250 + 1)
                .parse()
                .unwrap(),
            external_ips: vec![],
            load_balancer_ips: vec![],
            load_balancer_source_ranges: vec![],
            endpoints,
            selection: Default::default(),
        };
        (cluster_ip_port(name, 80), view)
    }
}

/// Endpoint `n`'s address: the cluster's endpoints count up from 10.128.0.0, in 10.128.0.0/10.
pub fn endpoint_address(n: usize) -> String {
    format!("10.{}.{}.{}", 128 + n / 65_536 % 64, n / 256 % 256, n % 256)
}

/// Endpoint `n` as an EndpointSlice lists it, for what reads the API objects (the tracker):
/// ready and serving, on node `n % 100`, as in [`Synthetic::snapshot`].
pub fn slice_endpoint(n: usize) -> k8s_openapi::api::discovery::v1::Endpoint {
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
    Endpoint {
        addresses: vec![endpoint_address(n)],
        node_name: Some(format!("node-{}", n % NODES)),
        conditions: Some(EndpointConditions {
            ready: Some(true),
            serving: Some(true),
            terminating: Some(false),
        }),
        ..Endpoint::default()
    }
}

/// The one port every synthetic Service's EndpointSlice lists: `http`, TCP 8080.
pub fn slice_ports() -> Option<Vec<k8s_openapi::api::discovery::v1::EndpointPort>> {
    Some(vec![k8s_openapi::api::discovery::v1::EndpointPort {
        name: Some("http".into()),
        port: Some(8080),
        protocol: Some("TCP".into()),
        ..Default::default()
    }])
}

/// The endpoints of Service `service`'s slice, `per_service` of them ([`slice_endpoint`]
/// `service × per_service` onwards), the first moved `first_shift` addresses on (0: none), so
/// two versions of one slice can differ in one endpoint.
pub fn slice_endpoints(
    service: usize,
    per_service: usize,
    first_shift: usize,
) -> Vec<k8s_openapi::api::discovery::v1::Endpoint> {
    (0..per_service)
        .map(|e| {
            let shift = if e == 0 { first_shift } else { 0 };
            slice_endpoint(service * per_service + e + shift)
        })
        .collect()
}

/// This node, [`Synthetic::node`], as the API server lists it: `node-0`, InternalIP 10.0.0.1.
pub fn node_object() -> k8s_openapi::api::core::v1::Node {
    use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    Node {
        metadata: ObjectMeta {
            name: Some("node-0".into()),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                address: "10.0.0.1".into(),
                type_: "InternalIP".into(),
            }]),
            ..NodeStatus::default()
        }),
    }
}
