//! What a trial sends traffic to: every frontend of every Service (ClusterIP, NodePort on each
//! node, externalIP, LoadBalancer ingress IP, and a ClusterIP port no Service port defines),
//! each in both protocols a port has and in each family, from the places that see different
//! rules: a pod on node 1 (zone-a), a pod on node 2 (zone-b), node 3 itself, and the external
//! client (both its addresses where source ranges could tell them apart).
//!
//! Frontends are named symbolically ([`Key`]: Service, port, kind, family, node, source), never
//! by the addresses the API server allocated, so a frontend keeps its name from one trial to
//! the next while a failing cluster is shrunk.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use super::model::{Svc, World};
use crate::lab::Proto;
use crate::lab::cluster::Family;
use crate::lab::topology::{node_ip, node_ip6, pod_gateway, pod_gateway6};

/// Where a probe starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// Lab pod `n<node+1>-b` (the `-a` pods serve; a `-b` pod may serve too, which is then the
    /// hairpin case).
    Pod { node: usize },
    /// A node namespace itself.
    Node(usize),
    /// The external client's primary address.
    Client,
    /// The external client's second IPv4 address (for source ranges).
    OtherClient,
}

impl Source {
    /// The pod a [`Source::Pod`] names.
    pub fn pod_name(node: usize) -> String {
        format!("n{}-b", node + 1)
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Pod { node } => write!(f, "pod {}", Source::pod_name(*node)),
            Source::Node(i) => write!(f, "node {}", i + 1),
            Source::Client => write!(f, "outside"),
            Source::OtherClient => write!(f, "outside (other address)"),
        }
    }
}

/// Which address of a Service a frontend is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Via {
    ClusterIp,
    /// The NodePort on node `node`'s underlay address.
    NodePort {
        node: usize,
    },
    /// The NodePort on node `node`'s pod gateway (an address of the node that is not its
    /// InternalIP).
    NodePortGateway {
        node: usize,
    },
    ExternalIp(IpAddr),
    LoadBalancer(IpAddr),
    /// The ClusterIP on a port the Service does not define.
    UndefinedPort,
    /// The Service's `healthCheckNodePort` on node `node` (HTTP).
    HealthCheck {
        node: usize,
    },
    /// An address in the service CIDR no Service has ([`UNALLOCATED`]).
    Unallocated,
}

/// A frontend's name, stable across trials.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub service: String,
    /// The port's label (`t0/TCP`), or `UNDEFINED_PORT/<proto>`.
    pub port: String,
    pub proto: Proto,
    pub family: Family,
    pub via: Via,
    pub source: Source,
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fam = match self.family {
            Family::V4 => "v4",
            Family::V6 => "v6",
        };
        let via = match &self.via {
            Via::ClusterIp => "ClusterIP".to_owned(),
            Via::NodePort { node } => format!("NodePort on node {}", node + 1),
            Via::NodePortGateway { node } => format!("NodePort on node {}'s pod gateway", node + 1),
            Via::ExternalIp(ip) => format!("externalIP {ip}"),
            Via::LoadBalancer(ip) => format!("LoadBalancer IP {ip}"),
            Via::UndefinedPort => "ClusterIP, undefined port".to_owned(),
            Via::HealthCheck { node } => format!("health check on node {}", node + 1),
            Via::Unallocated => "unallocated service IP".to_owned(),
        };
        write!(
            f,
            "{} {} {fam} {via} from {}",
            self.service, self.port, self.source
        )
    }
}

/// The port an [`Via::UndefinedPort`] frontend uses: no generated Service defines it.
pub const UNDEFINED_PORT: u16 = 7;

/// What the API server allocated for one Service: ClusterIPs by family, the NodePort of each
/// port (by index) and the health check port, read back from the applied objects.
#[derive(Debug, Clone, Default)]
pub struct Allocated {
    pub cluster_ips: Vec<IpAddr>,
    pub node_ports: Vec<Option<u16>>,
    pub health_check_port: Option<u16>,
}

/// One frontend to probe.
#[derive(Debug, Clone)]
pub struct Frontend {
    pub key: Key,
    pub target: SocketAddr,
    /// How many distinct endpoints (address and port) could answer at most: probes send
    /// enough attempts to see each of them.
    pub candidates: usize,
    /// ClientIP affinity: every attempt from one source sticks to one endpoint.
    pub sticky: bool,
    /// An HTTP health check: the probe sends a request and reads the status.
    pub http: bool,
}

/// The name [`Via::Unallocated`] frontends have for a Service.
pub const NO_SERVICE: &str = "(none)";

/// Addresses in the service CIDRs (`10.96.0.0/12`, `fd00:10:96::/108`) that no Service gets:
/// the last but one of each range (the API server allocates from the start at random; a
/// world has a dozen Services).
pub const UNALLOCATED: [&str; 2] = ["10.111.255.254", "fd00:10:96::f:fffe"];

/// Every frontend of `world`, given what was allocated for each Service (by name), and the
/// unallocated service addresses.
pub fn enumerate(world: &World, allocated: &BTreeMap<String, Allocated>) -> Vec<Frontend> {
    let mut out = Vec::new();
    for svc in &world.services {
        let alloc = allocated.get(&svc.name).cloned().unwrap_or_default();
        service_frontends(svc, &alloc, &mut out);
    }
    for ip in UNALLOCATED {
        let ip: IpAddr = ip.parse().expect("an address");
        for proto in [Proto::Tcp, Proto::Udp] {
            for source in [Source::Pod { node: 0 }, Source::Node(2), Source::Client] {
                out.push(Frontend {
                    key: Key {
                        service: NO_SERVICE.to_owned(),
                        port: format!("80/{}", proto.k8s()),
                        proto,
                        family: Family::of(ip),
                        via: Via::Unallocated,
                        source,
                    },
                    target: SocketAddr::new(ip, 80),
                    candidates: 0,
                    sticky: false,
                    http: false,
                });
            }
        }
    }
    out
}

fn service_frontends(svc: &Svc, alloc: &Allocated, out: &mut Vec<Frontend>) {
    let sticky = svc.affinity.is_some();
    for (index, port) in svc.ports.iter().enumerate() {
        let mut push = |family: Family, via: Via, target: SocketAddr, sources: &[Source]| {
            for &source in sources {
                out.push(Frontend {
                    key: Key {
                        service: svc.name.clone(),
                        port: port.label(),
                        proto: port.proto,
                        family,
                        via: via.clone(),
                        source,
                    },
                    target,
                    candidates: candidates(svc, &port.name, port.proto, family),
                    sticky,
                    http: false,
                });
            }
        };
        let inside = [
            Source::Pod { node: 0 },
            Source::Pod { node: 1 },
            Source::Node(2),
        ];
        for &ip in &alloc.cluster_ips {
            let family = Family::of(ip);
            let mut sources = inside.to_vec();
            sources.push(Source::Client);
            push(
                family,
                Via::ClusterIp,
                SocketAddr::new(ip, port.port),
                &sources,
            );
        }
        if let Some(Some(np)) = alloc.node_ports.get(index) {
            for family in svc.families.list() {
                let addr = |node: usize| match family {
                    Family::V4 => IpAddr::V4(node_ip(node)),
                    Family::V6 => IpAddr::V6(node_ip6(node)),
                };
                for node in 0..crate::lab::NODES {
                    let via = Via::NodePort { node };
                    push(
                        family,
                        via,
                        SocketAddr::new(addr(node), *np),
                        &[Source::Client],
                    );
                }
                let via = Via::NodePort { node: 1 };
                let sources = [Source::Pod { node: 0 }, Source::Pod { node: 1 }];
                push(family, via, SocketAddr::new(addr(1), *np), &sources);
                let via = Via::NodePort { node: 2 };
                push(
                    family,
                    via,
                    SocketAddr::new(addr(2), *np),
                    &[Source::Node(2)],
                );
                let gateway = match family {
                    Family::V4 => IpAddr::V4(pod_gateway(0)),
                    Family::V6 => IpAddr::V6(pod_gateway6(0)),
                };
                let via = Via::NodePortGateway { node: 0 };
                let sources = [Source::Pod { node: 0 }];
                push(family, via, SocketAddr::new(gateway, *np), &sources);
            }
        }
        let outside = |family: Family, ranges: bool| {
            let mut s = vec![Source::Client, Source::Pod { node: 1 }, Source::Node(2)];
            if ranges && family == Family::V4 {
                s.push(Source::OtherClient);
            }
            s
        };
        for &ip in &svc.external_ips {
            let family = Family::of(ip);
            let via = Via::ExternalIp(ip);
            push(
                family,
                via,
                SocketAddr::new(ip, port.port),
                &outside(family, false),
            );
        }
        for ingress in &svc.ingress {
            if let super::model::Ingress::Ip(ip, _) = ingress {
                let family = Family::of(*ip);
                let ranges = !svc.source_ranges.is_empty();
                let via = Via::LoadBalancer(*ip);
                push(
                    family,
                    via,
                    SocketAddr::new(*ip, port.port),
                    &outside(family, ranges),
                );
            }
        }
    }
    // A port the Service does not define, over both protocols, from a pod and from outside.
    for &ip in &alloc.cluster_ips {
        for proto in [Proto::Tcp, Proto::Udp] {
            for source in [Source::Pod { node: 0 }, Source::Client] {
                out.push(Frontend {
                    key: Key {
                        service: svc.name.clone(),
                        port: format!("{UNDEFINED_PORT}/{}", proto.k8s()),
                        proto,
                        family: Family::of(ip),
                        via: Via::UndefinedPort,
                        source,
                    },
                    target: SocketAddr::new(ip, UNDEFINED_PORT),
                    candidates: 0,
                    sticky: false,
                    http: false,
                });
            }
        }
    }
    // The health check port on every node, in both families, from outside.
    if let Some(hc) = alloc.health_check_port {
        for node in 0..crate::lab::NODES {
            for ip in [IpAddr::V4(node_ip(node)), IpAddr::V6(node_ip6(node))] {
                out.push(Frontend {
                    key: Key {
                        service: svc.name.clone(),
                        port: "healthCheckNodePort".to_owned(),
                        proto: Proto::Tcp,
                        family: Family::of(ip),
                        via: Via::HealthCheck { node },
                        source: Source::Client,
                    },
                    target: SocketAddr::new(ip, hc),
                    candidates: 0,
                    sticky: false,
                    http: true,
                });
            }
        }
    }
}

/// The endpoints (pod and port) the slices of `family` give Service port `name`/`proto`: an
/// upper bound on how many can answer.
fn candidates(svc: &Svc, name: &str, proto: Proto, family: Family) -> usize {
    let mut seen = std::collections::BTreeSet::new();
    for slice in svc.slices.iter().filter(|s| s.family == family) {
        for p in slice
            .ports
            .iter()
            .filter(|p| p.name == name && p.proto == proto)
        {
            for e in &slice.endpoints {
                seen.insert((e.pod.clone(), p.port));
            }
        }
    }
    seen.len()
}

/// What the API server would allocate, in shape (one ClusterIP per family, a NodePort per port
/// where the kind has them, a health check port for Local LoadBalancers), for counting a
/// world's frontends before it is applied.
pub fn nominal(world: &World) -> BTreeMap<String, Allocated> {
    world
        .services
        .iter()
        .map(|s| {
            let cluster_ips = if s.kind.has_cluster_ip() {
                s.families
                    .list()
                    .iter()
                    .map(|f| match f {
                        Family::V4 => IpAddr::from([10, 96, 0, 10]),
                        Family::V6 => IpAddr::from([0xfd00, 0x10, 0x96, 0, 0, 0, 0, 0x10]),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let node_ports = s
                .ports
                .iter()
                .map(|_| s.kind.has_node_ports().then_some(30080))
                .collect();
            let local_lb =
                matches!(s.kind, super::model::Kind::LoadBalancer { .. }) && s.etp_applies();
            let allocated = Allocated {
                cluster_ips,
                node_ports,
                health_check_port: local_lb.then_some(30090),
            };
            (s.name.clone(), allocated)
        })
        .collect()
}
