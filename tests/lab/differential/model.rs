//! The clusters the differential test generates: plain data, with every field of a Service and
//! an EndpointSlice that a proxy reads, in the lab's terms (pods by name, nodes by index), so a
//! cluster can be generated, shrunk and printed without an API server.
//!
//! Addresses the proxy is given (externalIPs, LoadBalancer ingress IPs, source ranges) are
//! literal; addresses the API server allocates (ClusterIPs, NodePorts) are not here: a trial
//! reads them back from the objects it applied (`frontends::Allocated`).

use std::net::IpAddr;

use crate::lab::Proto;
use crate::lab::cluster::Family;

/// A generated cluster: Services with their EndpointSlices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct World {
    pub services: Vec<Svc>,
}

/// How a Service is exposed (`spec.type`, plus headless as its own kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    ClusterIp,
    NodePort,
    /// `allocate_node_ports`: `spec.allocateLoadBalancerNodePorts`.
    LoadBalancer {
        allocate_node_ports: bool,
    },
    /// `clusterIP: None`: never proxied.
    Headless,
    /// `type: ExternalName`: never proxied.
    ExternalName,
}

impl Kind {
    /// Whether the API server allocates NodePorts for this kind.
    pub fn has_node_ports(self) -> bool {
        matches!(
            self,
            Kind::NodePort
                | Kind::LoadBalancer {
                    allocate_node_ports: true
                }
        )
    }

    /// Whether the API server gives the Service ClusterIPs.
    pub fn has_cluster_ip(self) -> bool {
        !matches!(self, Kind::Headless | Kind::ExternalName)
    }
}

/// `spec.ipFamilies` and `spec.ipFamilyPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Families {
    V4,
    V6,
    /// RequireDualStack, IPv4 first.
    Dual,
}

impl Families {
    pub fn list(self) -> Vec<Family> {
        match self {
            Families::V4 => vec![Family::V4],
            Families::V6 => vec![Family::V6],
            Families::Dual => vec![Family::V4, Family::V6],
        }
    }
}

/// A Service port's `targetPort`. Proxies never read it (the slices carry the numbers); the
/// generator still writes both forms, as a cluster would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Number(u16),
    Named(String),
}

/// One entry of `spec.ports`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// Empty only for the single port of a Service.
    pub name: String,
    pub port: u16,
    pub proto: Proto,
    pub target: Target,
}

impl Port {
    /// `name/TCP`, `-/UDP` for an unnamed port: how a report names it.
    pub fn label(&self) -> String {
        let name = if self.name.is_empty() {
            "-"
        } else {
            &self.name
        };
        format!("{name}/{}", self.proto.k8s())
    }
}

/// `ipMode` of a LoadBalancer ingress IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpMode {
    Vip,
    Proxy,
}

/// One `status.loadBalancer.ingress` entry: an IP with its mode, or a hostname only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ingress {
    Ip(IpAddr, IpMode),
    Hostname(String),
}

/// The labels a proxy's informers select objects by (upstream: Services without
/// `service-proxy-name`, EndpointSlices without `headless`), on a Service or a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyLabel {
    /// `service.kubernetes.io/service-proxy-name: other`: for another proxy.
    OtherProxyName,
    /// `service.kubernetes.io/headless` (empty value), which the EndpointSlice controller
    /// puts on a headless Service's slices.
    HeadlessLabel,
}

impl ProxyLabel {
    /// The label as a JSON object.
    pub fn json(self) -> serde_json::Value {
        match self {
            ProxyLabel::OtherProxyName => {
                serde_json::json!({ "service.kubernetes.io/service-proxy-name": "other" })
            }
            ProxyLabel::HeadlessLabel => {
                serde_json::json!({ "service.kubernetes.io/headless": "" })
            }
        }
    }
}

/// One Service and its slices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Svc {
    /// `s0`, `s1`, …: stable while a cluster is shrunk.
    pub name: String,
    pub kind: Kind,
    /// Unused for ExternalName (which has no families).
    pub families: Families,
    pub ports: Vec<Port>,
    pub external_ips: Vec<IpAddr>,
    /// Only for LoadBalancer (the API server refuses it on other kinds).
    pub ingress: Vec<Ingress>,
    /// Only for LoadBalancer.
    pub source_ranges: Vec<String>,
    /// `externalTrafficPolicy: Local`; only where the Service is externally accessible.
    pub etp_local: bool,
    /// `internalTrafficPolicy: Local`.
    pub itp_local: bool,
    /// ClientIP affinity with this `timeoutSeconds`.
    pub affinity: Option<u32>,
    /// `spec.trafficDistribution`; proxies read the hints, not this field.
    pub distribution: Option<&'static str>,
    pub label: Option<ProxyLabel>,
    pub slices: Vec<Slice>,
}

impl Svc {
    /// Whether `externalTrafficPolicy` may be set (the API server's "externally accessible").
    pub fn externally_accessible(&self) -> bool {
        match self.kind {
            Kind::NodePort | Kind::LoadBalancer { .. } => true,
            Kind::ClusterIp | Kind::Headless => !self.external_ips.is_empty(),
            Kind::ExternalName => false,
        }
    }

    /// Whether the API server keeps `externalTrafficPolicy: Local` (it needs the field set).
    pub fn etp_applies(&self) -> bool {
        self.etp_local && self.externally_accessible()
    }
}

/// The node an endpoint names (`nodeName`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpNode {
    /// The pod's own node.
    Own,
    /// No `nodeName`.
    Absent,
}

/// `hints` of an endpoint: zone names (`zone-a`, `zone-b`) and node indices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hints {
    pub zones: Vec<String>,
    pub nodes: Vec<usize>,
}

/// One endpoint: a lab pod, by name, with its conditions as written (`None`: the field is
/// absent, which proxies read as ready/serving and not terminating).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ep {
    pub pod: String,
    pub ready: Option<bool>,
    pub serving: Option<bool>,
    pub terminating: Option<bool>,
    pub node: EpNode,
    pub hints: Hints,
}

/// One entry of a slice's `ports`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlicePort {
    pub name: String,
    /// One of the pods' echo ports.
    pub port: u16,
    pub proto: Proto,
}

/// One EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// `<service>-<k>`
    pub name: String,
    pub label: Option<ProxyLabel>,
    pub family: Family,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<Ep>,
}

/// The lab pods a generated cluster may name: `n1-a` … `n3-b` (`lab::NODES` ×
/// `lab::PODS_PER_NODE`).
pub fn pod_names() -> Vec<String> {
    (1..=crate::lab::NODES)
        .flat_map(|n| {
            (0..crate::lab::PODS_PER_NODE)
                .map(move |k| format!("n{n}-{}", char::from(b'a' + k as u8)))
        })
        .collect()
}

/// The node index (0-based) of pod `name` (`n2-a` → 1).
pub fn node_of_pod(name: &str) -> usize {
    name.strip_prefix('n')
        .and_then(|s| s.split('-').next())
        .and_then(|n| n.parse::<usize>().ok())
        .map(|n| n - 1)
        .unwrap_or_else(|| panic!("not a lab pod name: {name}"))
}
