//! The listeners userspace mode wants: one per service port, family and endpoint list, with
//! the endpoints the model selected for that list.
//!
//! Pure: (Snapshot) → [`Listeners`], no I/O, never fails. A listener relays to one of the
//! model's endpoint lists, the cluster-wide one or this node's, and every frontend whose
//! traffic takes that list leads to it (the redirect rules decide which, per frontend and
//! source): the ClusterIP follows `internalTrafficPolicy`; NodePorts, externalIPs and
//! LoadBalancer IPs follow `externalTrafficPolicy` for traffic from outside, and take the
//! cluster-wide list for traffic from this node and its pods whatever either policy says (as
//! upstream's short-circuit does, even where a local endpoint exists). So a port has a
//! `Cluster` listener when its internal policy is `Cluster` or it is externally accessible,
//! and a `Local` listener when either policy in force is `Local`. The client's address does
//! not reach the endpoint in this mode (the relay dials from the node), so external `Local`
//! keeps its endpoint choice but not its source-preserving purpose.
//!
//! SCTP ports get no listener: the relay carries TCP and UDP.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use crate::cluster::TrafficPolicy;
use crate::cluster::{Endpoint, FamilyView, IpFamily, Protocol, ServicePortName, Snapshot};

/// Every wanted listener, in snapshot order.
pub type Listeners = BTreeMap<Key, Spec>;

/// Which endpoints of which service port one listener relays to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub port: ServicePortName,
    pub family: IpFamily,
    pub list: List,
}

/// The endpoint list a listener relays to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum List {
    /// The cluster-wide endpoints: for the ClusterIP under internal `Cluster`, the external
    /// frontends from outside under external `Cluster`, and the external frontends from this
    /// node and its pods whatever the policies.
    Cluster,
    /// This node's endpoints: for the ClusterIP under internal `Local`, the external
    /// frontends from outside under external `Local`.
    Local,
    /// A NodePort on the loopback address (`--nodeport-localhost`), listened on at the
    /// NodePort itself: the node's own traffic, so the cluster-wide endpoints.
    Loopback,
}

impl List {
    /// The list a traffic policy selects.
    pub fn of(policy: TrafficPolicy) -> List {
        match policy {
            TrafficPolicy::Cluster => List::Cluster,
            TrafficPolicy::Local => List::Local,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            List::Cluster => "cluster",
            List::Local => "local",
            List::Loopback => "loopback",
        }
    }

    /// The policy whose endpoints the list holds.
    fn policy(self) -> TrafficPolicy {
        match self {
            List::Cluster | List::Loopback => TrafficPolicy::Cluster,
            List::Local => TrafficPolicy::Local,
        }
    }
}

/// The transport a listener accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    Tcp,
    Udp,
}

/// What one listener relays to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub transport: Transport,
    /// In the model's endpoint order (address, then port): round-robin visits them so.
    pub endpoints: Vec<SocketAddr>,
    /// Every endpoint the slices still list for this port (terminating, not ready, in
    /// another zone or on another node too): connections already relayed to one of them go
    /// on, as a kernel mode's established flows do; only a connection whose endpoint left
    /// the slices is closed. So a terminating endpoint drains gracefully.
    pub listed: Vec<SocketAddr>,
    /// ClientIP affinity timeout; `None` without affinity.
    pub affinity: Option<Duration>,
    /// The port it must listen on (a NodePort on loopback); `None`: one from `portRange`.
    pub port: Option<u16>,
}

/// The listeners `snapshot` asks for.
pub fn plan(snapshot: &Snapshot) -> Listeners {
    let mut out = Listeners::new();
    for state in snapshot.ports.values() {
        let port = &state.port;
        let Some(transport) = transport(port.name.protocol) else {
            continue;
        };
        let affinity = affinity(port.affinity_timeout_seconds);
        for view in &state.families {
            let mut lists = BTreeSet::from([List::of(port.internal_policy)]);
            if view.externally_accessible(port) {
                lists.extend([List::Cluster, List::of(port.external_policy)]);
            }
            for list in lists {
                let key = Key {
                    port: port.name.clone(),
                    family: view.family,
                    list,
                };
                let spec = Spec {
                    transport,
                    endpoints: selected(view, list.policy()),
                    listed: listed(view),
                    affinity,
                    port: None,
                };
                out.insert(key, spec);
            }
        }
    }
    out
}

/// The listeners that serve NodePorts on the loopback address of each family (127.0.0.1 and
/// ::1, at the NodePort itself), for `--nodeport-localhost`: one per TCP or UDP port with a
/// NodePort, over the endpoints of the `Cluster` policy, as traffic from the node itself gets
/// in every mode.
pub fn loopback_node_ports(snapshot: &Snapshot) -> Listeners {
    let mut out = Listeners::new();
    for state in snapshot.ports.values() {
        let port = &state.port;
        let (Some(node_port), Some(transport)) = (port.node_port, transport(port.name.protocol))
        else {
            continue;
        };
        for view in &state.families {
            let key = Key {
                port: port.name.clone(),
                family: view.family,
                list: List::Loopback,
            };
            let spec = Spec {
                transport,
                endpoints: selected(view, TrafficPolicy::Cluster),
                listed: listed(view),
                affinity: affinity(port.affinity_timeout_seconds),
                port: Some(node_port),
            };
            out.insert(key, spec);
        }
    }
    out
}

fn transport(protocol: Protocol) -> Option<Transport> {
    match protocol {
        Protocol::Tcp => Some(Transport::Tcp),
        Protocol::Udp => Some(Transport::Udp),
        Protocol::Sctp => None,
    }
}

fn affinity(seconds: Option<u32>) -> Option<Duration> {
    seconds.map(|s| Duration::from_secs(u64::from(s)))
}

/// Every endpoint the slices list in `view`, whatever its state.
fn listed(view: &FamilyView) -> Vec<SocketAddr> {
    view.endpoints
        .iter()
        .map(|e| SocketAddr::new(e.ip, e.port))
        .collect()
}

/// The endpoints `policy` selects in `view`; none when no traffic uses that policy.
fn selected(view: &FamilyView, policy: TrafficPolicy) -> Vec<SocketAddr> {
    let endpoints: Option<Vec<&Endpoint>> = match policy {
        TrafficPolicy::Cluster => view.cluster_endpoints().map(Iterator::collect),
        TrafficPolicy::Local => view.local_endpoints().map(Iterator::collect),
    };
    endpoints
        .unwrap_or_default()
        .into_iter()
        .map(|e| SocketAddr::new(e.ip, e.port))
        .collect()
}

/// How logs name a listener: `default/web:http IPv4 cluster`.
pub fn name(key: &Key) -> String {
    format!("{} {} {}", key.port, key.family, key.list.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::snapshots::{self, addr, node, snapshot, svc, web_with_unready};

    fn only(listeners: &Listeners, list: List) -> &Spec {
        let mut of_kind = listeners.iter().filter(|(k, _)| k.list == list);
        let (_, spec) = of_kind.next().expect("a listener of that kind");
        assert!(of_kind.next().is_none(), "one listener of that kind");
        spec
    }

    #[test]
    fn cluster_ip_port_gets_one_internal_listener_over_ready_endpoints() {
        let snap = web_with_unready();
        let listeners = plan(&snap);
        assert_eq!(listeners.len(), 1);
        let spec = only(&listeners, List::Cluster);
        assert_eq!(spec.transport, Transport::Tcp);
        assert_eq!(
            spec.endpoints,
            [addr("10.244.1.5:8080"), addr("10.244.2.5:8080")]
        );
        assert_eq!(spec.affinity, None);
    }

    #[test]
    fn node_port_with_local_policy_gets_a_listener_of_local_endpoints_beside_the_clusters() {
        let snap = snapshot(
            node(),
            vec![
                svc("default/web", "10.96.0.10", 80)
                    .node_port(30080)
                    .external_local()
                    .affinity(600)
                    .ep("10.244.2.5", 8080, "node-b")
                    .ep("10.244.1.5", 8080, "node-a"),
            ],
        );
        let listeners = plan(&snap);
        assert_eq!(listeners.len(), 2);
        assert_eq!(only(&listeners, List::Cluster).endpoints.len(), 2);
        let local = only(&listeners, List::Local);
        assert_eq!(local.endpoints, [addr("10.244.1.5:8080")]);
        assert_eq!(local.affinity, Some(Duration::from_secs(600)));
    }

    #[test]
    fn a_cluster_policy_port_has_one_listener_for_every_frontend() {
        let snap = snapshot(
            node(),
            vec![
                svc("default/web", "10.96.0.10", 80)
                    .node_port(30080)
                    .external("203.0.113.7")
                    .ep("10.244.2.5", 8080, "node-b"),
            ],
        );
        let lists: Vec<List> = plan(&snap).keys().map(|k| k.list).collect();
        assert_eq!(lists, [List::Cluster]);
    }

    /// Both policies `Local`: the ClusterIP and the external frontends from outside take this
    /// node's endpoints, and the external frontends from this node and its pods every
    /// endpoint, through a listener of their own.
    #[test]
    fn both_policies_local_and_externally_accessible_keep_a_listener_over_every_endpoint() {
        let snap = snapshot(
            node(),
            vec![
                svc("default/web", "10.96.0.10", 80)
                    .external("192.0.2.70")
                    .internal_local()
                    .external_local()
                    .ep("10.244.2.9", 8080, "node-b")
                    .ep("10.244.1.9", 8080, "node-a"),
                svc("default/inside", "10.96.0.11", 80).internal_local().ep(
                    "10.244.2.8",
                    8080,
                    "node-b",
                ),
            ],
        );
        let listeners = plan(&snap);
        let of = |service: &str, list| {
            listeners
                .iter()
                .find(|(k, _)| &*k.port.service.name == service && k.list == list)
                .map(|(_, spec)| spec.endpoints.clone())
        };
        assert_eq!(
            of("web", List::Cluster),
            Some(vec![addr("10.244.1.9:8080"), addr("10.244.2.9:8080")])
        );
        assert_eq!(of("web", List::Local), Some(vec![addr("10.244.1.9:8080")]));
        assert_eq!(
            of("inside", List::Cluster),
            None,
            "no frontend takes that list"
        );
        assert_eq!(of("inside", List::Local), Some(vec![]));
    }

    #[test]
    fn internal_local_policy_without_local_endpoints_has_none_to_relay_to() {
        let snap = snapshot(
            node(),
            vec![svc("default/web", "10.96.0.10", 80).internal_local().ep(
                "10.244.2.5",
                8080,
                "node-b",
            )],
        );
        assert!(only(&plan(&snap), List::Local).endpoints.is_empty());
    }

    #[test]
    fn udp_is_relayed_and_sctp_is_not() {
        let snap = snapshot(
            node(),
            vec![
                svc("default/dns", "10.96.0.10", 53)
                    .proto(Protocol::Udp)
                    .ep("10.244.2.5", 53, "node-b"),
                svc("default/sig", "10.96.0.11", 3868)
                    .proto(Protocol::Sctp)
                    .ep("10.244.2.6", 3868, "node-b"),
            ],
        );
        let listeners = plan(&snap);
        assert_eq!(listeners.len(), 1);
        let (key, spec) = listeners.iter().next().unwrap();
        assert_eq!(&*key.port.service.name, "dns");
        assert_eq!(spec.transport, Transport::Udp);
    }

    #[test]
    fn loopback_node_ports_listen_at_the_node_port_over_the_cluster_endpoints() {
        let snap = snapshot(
            node(),
            vec![
                snapshots::local_node_port(),
                svc("default/internal", "10.96.0.11", 80).ep("10.244.2.6", 8080, "node-b"),
            ],
        );
        let listeners = loopback_node_ports(&snap);
        assert_eq!(listeners.len(), 1, "only the port with a NodePort");
        let spec = only(&listeners, List::Loopback);
        assert_eq!(spec.port, Some(30080));
        assert_eq!(
            spec.endpoints,
            [addr("10.244.1.5:8080"), addr("10.244.2.5:8080")],
            "the node's own traffic is not held to the external Local policy"
        );
    }

    #[test]
    fn each_family_gets_its_own_listener() {
        let snap = snapshot(node(), snapshots::web_in_each_family());
        let families: Vec<IpFamily> = plan(&snap).keys().map(|k| k.family).collect();
        assert_eq!(families, [IpFamily::V4, IpFamily::V6]);
    }
}
