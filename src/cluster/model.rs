//! The proxy's own model of the cluster: plain data that every dataplane mode plans from.
//!
//! Pure values with no I/O. Everything here has already been validated by the tracker: names are
//! DNS labels or subdomains, addresses parse, ports are in range, and each family's view only holds
//! addresses of that family. Planners may rely on that and never re-check.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use serde::Serialize;

use super::topology::Selection;

/// A layer-4 protocol a Service port can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Protocol {
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
    #[serde(rename = "SCTP")]
    Sctp,
}

impl Protocol {
    /// Parses the API's spelling (`TCP`, `UDP`, `SCTP`); an absent protocol means TCP.
    pub fn parse(value: Option<&str>) -> Option<Protocol> {
        match value {
            None | Some("TCP") => Some(Protocol::Tcp),
            Some("UDP") => Some(Protocol::Udp),
            Some("SCTP") => Some(Protocol::Sctp),
            Some(_) => None,
        }
    }

    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An IP family. Dual-stack Services get one independent view per family, as upstream runs one
/// proxier per family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum IpFamily {
    #[serde(rename = "IPv4")]
    V4,
    #[serde(rename = "IPv6")]
    V6,
}

impl IpFamily {
    pub const ALL: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

    pub fn of(ip: &IpAddr) -> IpFamily {
        match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    pub fn of_net(net: &IpNet) -> IpFamily {
        IpFamily::of(&net.addr())
    }

    /// The spelling used by the API (`IPv4`, `IPv6`) and by upstream's `ip_family` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        }
    }

    pub fn index(self) -> usize {
        match self {
            IpFamily::V4 => 0,
            IpFamily::V6 => 1,
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Service's namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ServiceKey {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl ServiceKey {
    pub fn new(namespace: &str, name: &str) -> ServiceKey {
        ServiceKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One port of one Service: the unit every dataplane programs. Ordered by namespace, name, port
/// name, then protocol, so every map keyed by it iterates deterministically.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ServicePortName {
    pub service: ServiceKey,
    /// The port's name; empty for a Service's single unnamed port.
    pub port: Arc<str>,
    pub protocol: Protocol,
}

impl fmt::Display for ServicePortName {
    /// `namespace/name:port` as upstream spells it in rule comments and logs, without `:` for an
    /// unnamed port. The protocol is not part of it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port.is_empty() {
            write!(f, "{}", self.service)
        } else {
            write!(f, "{}:{}", self.service, self.port)
        }
    }
}

/// `Cluster` or `Local`, for internal and for external traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum TrafficPolicy {
    #[default]
    Cluster,
    Local,
}

/// The Service's type, kept for the planners' and `plan`'s benefit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

/// The Service's `spec.trafficDistribution`. Recorded for `plan` and metrics; endpoint selection
/// follows the hints the EndpointSlice controller derived from it, as upstream does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum TrafficDistribution {
    PreferClose,
    PreferSameZone,
    PreferSameNode,
    /// A value this version does not know; ignored, as upstream ignores it.
    Other(String),
}

/// Everything about a Service port that does not depend on the IP family or on endpoints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServicePort {
    pub name: ServicePortName,
    pub service_type: ServiceType,
    /// The port the Service exposes on its ClusterIPs, externalIPs and LoadBalancer IPs.
    pub port: u16,
    pub node_port: Option<u16>,
    /// ClientIP affinity timeout in seconds; `None` when affinity is off.
    pub affinity_timeout_seconds: Option<u32>,
    pub internal_policy: TrafficPolicy,
    /// `Local` only for NodePort and LoadBalancer Services (upstream ignores the field elsewhere).
    pub external_policy: TrafficPolicy,
    /// Set only where upstream serves it: LoadBalancer Services with external policy `Local`.
    pub health_check_node_port: Option<u16>,
    pub traffic_distribution: Option<TrafficDistribution>,
    pub allocate_load_balancer_node_ports: bool,
    /// The Service's own IPVS scheduler (our annotation); `None`: the node's. IPVS mode only.
    pub ipvs_scheduler: Option<super::scheduler_annotation::SchedulerChoice>,
}

/// One endpoint of a service port, merged from the Service's EndpointSlices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    pub ip: IpAddr,
    /// The target port, resolved by the slice's port of the same name and protocol.
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// Whether the endpoint runs on this node (its `nodeName` is this node's name).
    pub is_local: bool,
    /// Its node, zone and hints, shared with every endpoint placed alike.
    #[serde(flatten)]
    pub placement: Arc<Placement>,
}

/// Where an endpoint runs and which topology hints it carries: what endpoint selection reads
/// besides its conditions.
///
/// Shared, not owned per endpoint: a cluster has a few hundred distinct placements (one per
/// node, times its hints) for hundreds of thousands of endpoints, and the four fields take 80
/// bytes, more than the rest of an endpoint. One `Arc` per distinct value (the tracker's
/// [`Interner`](super::interner::Interner)) keeps an endpoint at 32 bytes, in the tracker's
/// slices and in every snapshot alike.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Placement {
    pub node_name: Option<Arc<str>>,
    pub zone: Option<Arc<str>>,
    /// `hints.forZones`; empty when the slice carries no zone hints.
    pub zone_hints: Vec<Arc<str>>,
    /// `hints.forNodes`; empty when the slice carries no node hints.
    pub node_hints: Vec<Arc<str>>,
}

impl Endpoint {
    /// Usable as a fallback when no ready endpoint exists (KEP-1669).
    pub fn serving_terminating(&self) -> bool {
        self.serving && self.terminating
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            IpAddr::V4(ip) => write!(f, "{ip}:{}", self.port),
            IpAddr::V6(ip) => write!(f, "[{ip}]:{}", self.port),
        }
    }
}

/// One IP family's view of a service port: its frontends of that family, its endpoints of that
/// family, and which of those each kind of traffic on this node may use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FamilyView {
    pub family: IpFamily,
    pub cluster_ip: IpAddr,
    pub external_ips: Vec<IpAddr>,
    /// LoadBalancer ingress IPs with ipMode `VIP` (or unset); `Proxy` ones are not programmed.
    pub load_balancer_ips: Vec<IpAddr>,
    pub load_balancer_source_ranges: Vec<IpNet>,
    /// Sorted by address, then port; one entry per address and port.
    pub endpoints: Vec<Endpoint>,
    pub selection: Selection,
}

impl FamilyView {
    /// Endpoints for traffic that follows the `Cluster` policy, and for traffic from this node
    /// and its pods to an external frontend whatever the policies (the short-circuit), or
    /// `None` if no traffic does.
    pub fn cluster_endpoints(&self) -> Option<impl Iterator<Item = &Endpoint>> {
        self.selection
            .cluster
            .as_ref()
            .map(|ix| ix.iter().map(|&i| &self.endpoints[i as usize]))
    }

    /// Endpoints for traffic that follows the `Local` policy, or `None` if no traffic does.
    pub fn local_endpoints(&self) -> Option<impl Iterator<Item = &Endpoint>> {
        self.selection
            .local
            .as_ref()
            .map(|ix| ix.iter().map(|&i| &self.endpoints[i as usize]))
    }

    /// Every endpoint some traffic on this node may reach (the union of cluster and local).
    pub fn reachable_endpoints(&self) -> impl Iterator<Item = &Endpoint> {
        self.selection
            .reachable()
            .map(move |i| &self.endpoints[i as usize])
    }

    /// Whether the service exposes anything beyond its ClusterIP in this family.
    pub fn externally_accessible(&self, port: &ServicePort) -> bool {
        port.node_port.is_some()
            || !self.external_ips.is_empty()
            || !self.load_balancer_ips.is_empty()
    }
}

/// A service port with its per-family views. A family is present only when the Service has a
/// ClusterIP of that family, as upstream's per-family proxiers skip it otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServicePortState {
    pub port: ServicePort,
    pub families: Vec<FamilyView>,
}

impl ServicePortState {
    pub fn family(&self, family: IpFamily) -> Option<&FamilyView> {
        self.families.iter().find(|v| v.family == family)
    }

    /// What this port adds to upstream's `sync_proxy_rules_no_local_endpoints_total` in
    /// `family`: 1 internal where its internal policy is Local and no local endpoint is
    /// selected, 1 external where the same holds for its external policy and the port has an
    /// external frontend.
    pub fn no_local_endpoints(&self, family: IpFamily) -> NoLocalEndpoints {
        let Some(view) = self.family(family) else {
            return NoLocalEndpoints::default();
        };
        let no_local = view
            .local_endpoints()
            .is_none_or(|mut endpoints| endpoints.next().is_none());
        NoLocalEndpoints {
            internal: usize::from(no_local && self.port.internal_policy == TrafficPolicy::Local),
            external: usize::from(
                no_local
                    && self.port.external_policy == TrafficPolicy::Local
                    && view.externally_accessible(&self.port),
            ),
        }
    }
}

/// Service ports with a Local policy and no local endpoint, by policy, in one family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoLocalEndpoints {
    pub internal: usize,
    pub external: usize,
}

impl NoLocalEndpoints {
    /// The counts of every port in `family`, by walking them all.
    fn count<'a>(ports: impl Iterator<Item = &'a ServicePortState>, family: IpFamily) -> Self {
        ports.fold(NoLocalEndpoints::default(), |sum, state| {
            sum.plus(state.no_local_endpoints(family))
        })
    }

    pub(super) fn plus(self, other: NoLocalEndpoints) -> NoLocalEndpoints {
        NoLocalEndpoints {
            internal: self.internal + other.internal,
            external: self.external + other.external,
        }
    }

    pub(super) fn minus(self, other: NoLocalEndpoints) -> NoLocalEndpoints {
        NoLocalEndpoints {
            internal: self.internal - other.internal,
            external: self.external - other.external,
        }
    }
}

/// A node address as the Node object reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeAddress {
    /// `InternalIP`, `ExternalIP`, ...
    pub kind: String,
    pub ip: IpAddr,
}

/// What the proxy knows about the node it runs on. Every decision that depends on "this node"
/// reads it from here, never from the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NodeContext {
    /// The node name (`--hostname-override`, else the host name).
    pub name: Arc<str>,
    /// Whether the Node object has been seen. Before that, zone and addresses are unknown.
    pub known: bool,
    /// The `topology.kubernetes.io/zone` label.
    pub zone: Option<Arc<str>>,
    pub addresses: Vec<NodeAddress>,
    /// The addresses on this host's interfaces, read from the kernel rather than the Node
    /// object; `nodePortAddresses` CIDRs select among them. `None` until read (and always in
    /// `plan`), when the Node's addresses stand in.
    pub host_addresses: Option<Arc<[IpAddr]>>,
    pub pod_cidrs: Vec<IpNet>,
    /// The Node has a deletionTimestamp: `/healthz` reports unhealthy so load balancers drain it.
    pub deleting: bool,
    /// The Node carries the cluster autoscaler's `ToBeDeletedByClusterAutoscaler` taint.
    pub to_be_deleted: bool,
}

impl NodeContext {
    pub fn named(name: &str) -> NodeContext {
        NodeContext {
            name: name.into(),
            ..NodeContext::default()
        }
    }

    /// The addresses `nodePortAddresses` CIDRs choose from: the host's interface addresses once
    /// read, else the Node object's.
    pub fn local_addresses(&self) -> Vec<IpAddr> {
        match &self.host_addresses {
            Some(host) => host.to_vec(),
            None => self.addresses.iter().map(|a| a.ip).collect(),
        }
    }

    /// The primary address of a family: the first `InternalIP` of it, else the first address.
    pub fn primary_ip(&self, family: IpFamily) -> Option<IpAddr> {
        let of_family = || {
            self.addresses
                .iter()
                .filter(|a| IpFamily::of(&a.ip) == family)
        };
        of_family()
            .find(|a| a.kind == "InternalIP")
            .or_else(|| of_family().next())
            .map(|a| a.ip)
    }
}

/// The immutable state one sync plans from: every service port on this node, and the node.
///
/// Cloning is cheap (two `Arc`s). The tracker keeps building on the same map; a snapshot that is
/// still held while the tracker changes forces one copy of the map (copy on write), so a sync
/// should drop its snapshot when it is done.
///
/// It also carries the per-family counts every sync reports for upstream's no-local-endpoints
/// gauges, which the tracker keeps as ports change: walking every port on every sync for them
/// cost more than planning a one-endpoint change at 10,000 Services. Build one with
/// [`Snapshot::new`]; replacing `ports` by hand leaves those counts stale.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub node: Arc<NodeContext>,
    pub ports: Arc<BTreeMap<ServicePortName, Arc<ServicePortState>>>,
    /// Indexed by [`IpFamily::index`].
    pub(super) no_local: [NoLocalEndpoints; 2],
    /// The ranges of every ServiceCIDR object, both families, sorted, without duplicates
    /// ([`service_cidrs`](super::service_cidrs)); empty until they are listed, or where the API
    /// server serves none.
    pub service_cidrs: Arc<[IpNet]>,
}

impl Snapshot {
    /// A snapshot of `ports`, counting what the tracker keeps counted (one walk of the map).
    pub fn new(
        node: Arc<NodeContext>,
        ports: Arc<BTreeMap<ServicePortName, Arc<ServicePortState>>>,
    ) -> Snapshot {
        let no_local = IpFamily::ALL
            .map(|family| NoLocalEndpoints::count(ports.values().map(Arc::as_ref), family));
        Snapshot {
            node,
            ports,
            no_local,
            service_cidrs: Arc::default(),
        }
    }

    /// The same snapshot with these Service CIDRs.
    pub fn with_service_cidrs(self, cidrs: impl Into<Arc<[IpNet]>>) -> Snapshot {
        Snapshot {
            service_cidrs: cidrs.into(),
            ..self
        }
    }

    pub fn get(&self, name: &ServicePortName) -> Option<&ServicePortState> {
        self.ports.get(name).map(Arc::as_ref)
    }

    /// Service ports of `family` with a Local internal (external) policy and no local endpoint,
    /// as upstream's `sync_proxy_rules_no_local_endpoints_total` counts them; external only
    /// where the port has an external frontend.
    pub fn no_local_endpoints(&self, family: IpFamily) -> NoLocalEndpoints {
        self.no_local[family.index()]
    }
}
