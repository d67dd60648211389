//! `kube-proxy-rs explain`: why the first packet of a connection goes where it goes on this
//! node, told from both halves the proxy knows: the model (which Service port the destination
//! is, which endpoints were chosen and why the others were left out) and the rules of the
//! mode, planned or read from the kernel, walked by that mode's tracer.
//!
//! Pure: [`explain`] takes a snapshot, the node policy and one family's rules, and returns an
//! [`Explanation`], a plain value that renders as text for people ([`render::text`], within
//! 100 columns) or as JSON for scripts ([`render::json`]). Reading the rules (planning them
//! from manifests, or dumping them from the kernel) is the caller's business.
//!
//! The tracers enumerate rather than draw: every endpoint a random pick or a scheduler can
//! reach is one path, each of equal share (numgen, `statistic` chains and IPVS round robin
//! all spread new connections evenly over equal weights). Affinity is the client's first
//! connection: dynamic state (affinity sets, `recent` lists, IPVS persistence templates) is
//! taken as empty.

pub mod kernel;
pub mod live;
mod planned;
pub mod render;
pub mod request;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;
use serde::Serialize;

use super::plan::{FamilyReport, family_report};
use crate::cluster::topology::TopologyMode;
use crate::cluster::{IpFamily, ServicePortState, Snapshot, TrafficPolicy};
use crate::dataplane::node::NodePolicy;
use crate::dataplane::node::detect_local::Local;
use crate::dataplane::{iptables, ipvs, nftables};
pub use planned::Planned;
pub use request::{From, Request};

/// One family's rules of the mode the packet is explained in.
#[derive(Clone, Copy, Debug)]
pub enum Rules<'a> {
    Nftables(&'a nftables::Ruleset),
    Iptables(&'a iptables::Ruleset),
    /// The virtual services and the helper table of our nftables table.
    Ipvs {
        desired: &'a ipvs::desired::Desired,
        tables: &'a nftables::Ruleset,
    },
}

impl Rules<'_> {
    fn mode(&self) -> &'static str {
        match self {
            Rules::Nftables(_) => "nftables",
            Rules::Iptables(_) => "iptables",
            Rules::Ipvs { .. } => "ipvs",
        }
    }
}

/// Where the rules came from, for the reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RulesFrom {
    /// Planned from the objects given, as this node would program them (offline).
    Planned,
    /// Read from this node's kernel.
    Kernel,
}

/// The whole answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub mode: &'static str,
    pub rules_from: RulesFrom,
    pub packet: PacketReport,
    /// The Service port whose frontend the destination is; `None` when it is none.
    pub service_port: Option<ServicePortMatch>,
    pub outcome: Outcome,
    /// Why it ends that way, and why it is (not) masqueraded, in order.
    pub reasons: Vec<String>,
    /// ClientIP affinity of the Service port, when it has one.
    pub affinity: Option<Affinity>,
    /// What the model chose for this Service port in the packet's family (endpoints per
    /// policy, and why each other endpoint was left out).
    pub model: Option<FamilyReport>,
    /// Where the rules differ from what the proxy would program now (filled by the caller
    /// that read the kernel).
    pub drift: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PacketReport {
    pub protocol: &'static str,
    pub source: IpAddr,
    /// `pod`, `node` or `outside`: which path through the node it takes.
    pub origin: &'static str,
    pub in_interface: Option<String>,
    pub destination: SocketAddr,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePortMatch {
    /// `namespace/name:port`.
    pub name: String,
    /// `ClusterIP`, `NodePort`, `externalIP` or `LoadBalancer`.
    pub frontend: &'static str,
    /// The traffic policy that applies to this frontend.
    pub policy: TrafficPolicy,
}

/// What happens to the packet.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub verdict: Verdict,
    /// The endpoints a new connection may reach, each with its share of new connections.
    pub endpoints: Vec<Share>,
    /// Whether the source is rewritten to the node's address; `None` when paths differ.
    pub masquerade: Option<bool>,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// Sent on to one of the endpoints.
    Forwarded,
    /// No rule of ours changed it: delivered to the node (or routed on) as it is.
    Untouched,
    /// Refused at once (ICMP error or TCP reset).
    Rejected,
    /// Dropped silently: the client times out.
    Dropped,
    /// Some paths end one way, some another.
    Mixed,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Share {
    pub endpoint: SocketAddr,
    /// Of new connections, 0 to 1.
    pub share: f64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Affinity {
    pub timeout_seconds: u32,
    /// Whether an affinity entry for this client was looked for (only on a live node).
    pub entry: Option<bool>,
}

/// Why a request cannot be explained on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(
        "--from pod: this node has no {0} pod network known (no podCIDR on the Node and no cluster CIDR); give --from ADDRESS"
    )]
    NoPodNetwork(IpFamily),
    #[error("--from {0}: an {1} source cannot reach an {2} destination")]
    Family(IpAddr, IpFamily, IpFamily),
}

/// Explains `request` on the node of `snapshot`, whose mode's rules of the destination's
/// family are `rules`.
pub fn explain(
    snapshot: &Snapshot,
    node: &NodePolicy,
    rules: Rules<'_>,
    rules_from: RulesFrom,
    request: &Request,
) -> Result<Explanation, Error> {
    let family = IpFamily::of(&request.to.ip());
    let source = Source::resolve(snapshot, node, request, family)?;
    let found = find(snapshot, request, family);
    let outcome = walk(rules, request, &source);
    let (service_port, model, affinity, mut reasons) = match &found {
        Some((state, frontend)) => {
            let view = state.family(family).expect("found in this family");
            let policy = match frontend {
                Frontend::ClusterIp => state.port.internal_policy,
                _ => state.port.external_policy,
            };
            let reasons = reasons(state, *frontend, policy, &outcome, &source, family);
            (
                Some(ServicePortMatch {
                    name: state.port.name.to_string(),
                    frontend: frontend.as_str(),
                    policy,
                }),
                Some(family_report(state, view, &snapshot.node)),
                state.port.affinity_timeout_seconds.map(|t| Affinity {
                    timeout_seconds: t,
                    entry: None,
                }),
                reasons,
            )
        }
        None => (None, None, None, not_a_frontend(snapshot, request, family)),
    };
    reasons.extend(masquerade_reasons(node, &found, &outcome, &source));
    Ok(Explanation {
        mode: rules.mode(),
        rules_from,
        packet: PacketReport {
            protocol: request.protocol.as_str(),
            source: source.address,
            origin: source.origin.as_str(),
            in_interface: source.interface.clone(),
            destination: request.to,
        },
        service_port,
        outcome,
        reasons,
        affinity,
        model,
        drift: Vec::new(),
    })
}

/// Which path through the node the packet takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Pod,
    Node,
    Outside,
}

impl Origin {
    fn as_str(self) -> &'static str {
        match self {
            Origin::Pod => "pod",
            Origin::Node => "node",
            Origin::Outside => "outside",
        }
    }
}

/// The packet's source as the tracers take it.
#[derive(Debug)]
struct Source {
    address: IpAddr,
    origin: Origin,
    interface: Option<String>,
    /// This node's own addresses (what `fib daddr type local` and `--dst-type LOCAL` see).
    local: Vec<IpAddr>,
    /// detect-local recognises no pod traffic in this family.
    detect_off: bool,
}

impl Source {
    fn resolve(
        snapshot: &Snapshot,
        node: &NodePolicy,
        request: &Request,
        family: IpFamily,
    ) -> Result<Source, Error> {
        let ctx = &snapshot.node;
        let local = ctx.local_addresses();
        let detect = node.detect_local.resolve(family, &ctx.pod_cidrs);
        let pod_net: Option<IpNet> = ctx
            .pod_cidrs
            .iter()
            .copied()
            .find(|n| IpFamily::of_net(n) == family)
            .or(match &detect {
                Local::Cidr(net) => Some(*net),
                _ => None,
            });
        // The interface a pod's packet arrives on: the user's, else one detect-local counts
        // as a pod's (a bridge, or a name with the configured prefix), else a veth.
        let pod_interface = || {
            request.in_interface.as_ref().map_or_else(
                || match &detect {
                    Local::Interface(i) if i.is_prefix() => format!("{}0", i.as_str()),
                    Local::Interface(i) => i.as_str().to_string(),
                    _ => "veth0".to_string(),
                },
                |i| i.as_str().to_string(),
            )
        };
        let outside_interface = || {
            request
                .in_interface
                .as_ref()
                .map_or_else(|| "eth0".to_string(), |i| i.as_str().to_string())
        };
        let (address, origin) = match &request.from {
            From::Node => (
                ctx.primary_ip(family)
                    .or_else(|| local.iter().copied().find(|a| IpFamily::of(a) == family))
                    .unwrap_or(match family {
                        IpFamily::V4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
                        IpFamily::V6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
                    }),
                Origin::Node,
            ),
            From::Pod => {
                let net = pod_net.ok_or(Error::NoPodNetwork(family))?;
                (pod_address(net, snapshot), Origin::Pod)
            }
            // Documentation addresses (RFC 5737, RFC 3849): only ever a value in a trace.
            From::Outside => (
                match family {
                    IpFamily::V4 => IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10)),
                    IpFamily::V6 => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 10)),
                },
                Origin::Outside,
            ),
            From::Address(a) => {
                if IpFamily::of(a) != family {
                    return Err(Error::Family(*a, IpFamily::of(a), family));
                }
                let origin = if local.contains(a) || a.is_loopback() {
                    Origin::Node
                } else if pod_net.is_some_and(|n| n.contains(a)) {
                    Origin::Pod
                } else {
                    Origin::Outside
                };
                (*a, origin)
            }
        };
        let interface = match origin {
            Origin::Node => None,
            Origin::Pod => Some(pod_interface()),
            Origin::Outside => Some(outside_interface()),
        };
        Ok(Source {
            address,
            origin,
            interface,
            local,
            detect_off: matches!(detect, Local::None),
        })
    }
}

/// A pod's address inside `net` that no endpoint has (so the answer is not a hairpin): the
/// last host of the network, or the one below it, and so on.
fn pod_address(net: IpNet, snapshot: &Snapshot) -> IpAddr {
    let taken: BTreeSet<IpAddr> = snapshot
        .ports
        .values()
        .flat_map(|s| &s.families)
        .flat_map(|v| v.endpoints.iter().map(|e| e.ip))
        .filter(|ip| net.contains(ip))
        .collect();
    let last = match net.broadcast() {
        IpAddr::V4(b) => u128::from(u32::from(b)) - 1,
        IpAddr::V6(b) => u128::from(b) - 1,
    };
    let at = |n: u128| match net {
        IpNet::V4(_) => IpAddr::V4(Ipv4Addr::from(n as u32)),
        IpNet::V6(_) => IpAddr::V6(Ipv6Addr::from(n)),
    };
    (0..=taken.len() as u128)
        .map(|k| at(last.saturating_sub(k)))
        .find(|ip| net.contains(ip) && !taken.contains(ip))
        .unwrap_or(net.addr())
}

/// Which kind of frontend the destination is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frontend {
    ClusterIp,
    NodePort,
    ExternalIp,
    LoadBalancer,
}

impl Frontend {
    fn as_str(self) -> &'static str {
        match self {
            Frontend::ClusterIp => "ClusterIP",
            Frontend::NodePort => "NodePort",
            Frontend::ExternalIp => "externalIP",
            Frontend::LoadBalancer => "LoadBalancer",
        }
    }
}

/// The Service port whose frontend the destination is, first in snapshot order (as the
/// planners give a contested frontend to the first port).
fn find<'a>(
    snapshot: &'a Snapshot,
    request: &Request,
    family: IpFamily,
) -> Option<(&'a ServicePortState, Frontend)> {
    let (ip, port) = (request.to.ip(), request.to.port());
    let local = snapshot.node.local_addresses();
    snapshot.ports.values().find_map(|state| {
        if state.port.name.protocol != request.protocol {
            return None;
        }
        let view = state.family(family)?;
        let frontend = if view.cluster_ip == ip && state.port.port == port {
            Frontend::ClusterIp
        } else if view.external_ips.contains(&ip) && state.port.port == port {
            Frontend::ExternalIp
        } else if view.load_balancer_ips.contains(&ip) && state.port.port == port {
            Frontend::LoadBalancer
        } else if state.port.node_port == Some(port) && (local.contains(&ip) || ip.is_loopback()) {
            Frontend::NodePort
        } else {
            return None;
        };
        Some((state.as_ref(), frontend))
    })
}

/// Walks the packet through the rules with the mode's tracer.
fn walk(rules: Rules<'_>, request: &Request, source: &Source) -> Outcome {
    let nft_packet = || nftables::trace::Packet {
        protocol: request.protocol,
        src: source.address,
        dst: request.to.ip(),
        dport: request.to.port(),
        origin: match &source.interface {
            None => nftables::trace::Origin::Host,
            Some(i) => nftables::trace::Origin::Interface(i.clone()),
        },
    };
    match rules {
        Rules::Nftables(r) => {
            from_branches(&nftables::trace::trace(r, &nft_packet(), &source.local))
        }
        Rules::Ipvs { desired, tables } => from_branches(&ipvs::trace::trace(
            desired,
            tables,
            &nft_packet(),
            &source.local,
        )),
        Rules::Iptables(r) => {
            let p = iptables::trace::Packet {
                protocol: request.protocol,
                source: source.address,
                destination: request.to.ip(),
                port: request.to.port(),
                from_node: source.interface.is_none(),
                in_interface: source.interface.clone(),
            };
            let t = iptables::trace::trace(r, &p, &source.local);
            let (verdict, endpoints) = match t.outcome {
                iptables::trace::Outcome::Endpoints(set) => {
                    let eps: BTreeSet<SocketAddr> =
                        set.iter().filter_map(|e| e.parse().ok()).collect();
                    (Verdict::Forwarded, eps)
                }
                iptables::trace::Outcome::Reject => (Verdict::Rejected, BTreeSet::new()),
                iptables::trace::Outcome::Drop => (Verdict::Dropped, BTreeSet::new()),
                iptables::trace::Outcome::Untouched => (Verdict::Untouched, BTreeSet::new()),
            };
            Outcome {
                verdict,
                endpoints: shares(endpoints),
                masquerade: Some(t.masquerade),
            }
        }
    }
}

fn from_branches(t: &nftables::trace::Trace) -> Outcome {
    use nftables::trace::Fate;
    let endpoints: BTreeSet<SocketAddr> = t
        .endpoints()
        .into_iter()
        .map(|(ip, port)| SocketAddr::new(ip, port))
        .collect();
    let verdict = match t.fate() {
        Some(Fate::Accept) if endpoints.is_empty() => Verdict::Untouched,
        Some(Fate::Accept) if t.branches.iter().all(|b| b.dnat.is_some()) => Verdict::Forwarded,
        Some(Fate::Reject) => Verdict::Rejected,
        Some(Fate::Drop) => Verdict::Dropped,
        _ => Verdict::Mixed,
    };
    Outcome {
        verdict,
        endpoints: shares(endpoints),
        masquerade: t.masquerade(),
    }
}

fn shares(endpoints: BTreeSet<SocketAddr>) -> Vec<Share> {
    let n = endpoints.len() as f64;
    endpoints
        .into_iter()
        .map(|endpoint| Share {
            endpoint,
            share: 1.0 / n,
        })
        .collect()
}

/// Why a packet to a Service frontend ends as it does, from the model.
fn reasons(
    state: &ServicePortState,
    frontend: Frontend,
    policy: TrafficPolicy,
    outcome: &Outcome,
    source: &Source,
    family: IpFamily,
) -> Vec<String> {
    let name = &state.port.name;
    let view = state.family(family).expect("found in this family");
    let kind = if frontend == Frontend::ClusterIp {
        "internalTrafficPolicy"
    } else {
        "externalTrafficPolicy"
    };
    let mut out = Vec::new();
    let local_empty = view
        .local_endpoints()
        .is_none_or(|mut e| e.next().is_none());
    match outcome.verdict {
        Verdict::Forwarded => {
            let reached: BTreeSet<SocketAddr> =
                outcome.endpoints.iter().map(|s| s.endpoint).collect();
            let list = |eps: Option<Vec<SocketAddr>>| eps.map(|v| v.into_iter().collect());
            let local: Option<BTreeSet<SocketAddr>> = list(
                view.local_endpoints()
                    .map(|e| e.map(|e| SocketAddr::new(e.ip, e.port)).collect()),
            );
            let cluster: Option<BTreeSet<SocketAddr>> = list(
                view.cluster_endpoints()
                    .map(|e| e.map(|e| SocketAddr::new(e.ip, e.port)).collect()),
            );
            if policy == TrafficPolicy::Local && local.as_ref() == Some(&reached) {
                out.push(format!(
                    "{kind} Local: only the endpoints on this node ({})",
                    reached.len()
                ));
            } else if cluster.as_ref() == Some(&reached) {
                if policy == TrafficPolicy::Local {
                    out.push(format!(
                        "{kind} Local, but the {} is inside the cluster: it uses every endpoint \
                         of the cluster, as upstream does",
                        source.origin.as_str()
                    ));
                } else {
                    out.push(format!(
                        "{kind} Cluster: every usable endpoint ({})",
                        reached.len()
                    ));
                }
            }
            let terminating = match policy {
                TrafficPolicy::Local if local.as_ref() == Some(&reached) => {
                    view.selection.local_uses_terminating
                }
                _ => view.selection.cluster_uses_terminating,
            };
            if terminating {
                out.push(
                    "no endpoint is ready: serving endpoints that are terminating take the \
                     traffic (terminating fallback)"
                        .into(),
                );
            }
            match view.selection.topology {
                TopologyMode::None => {}
                TopologyMode::SameZone => out.push(
                    "topology: only endpoints hinted for this node's zone (topology-aware \
                     routing)"
                        .into(),
                ),
                TopologyMode::SameNode => out.push(
                    "topology: only endpoints hinted for this node (trafficDistribution)".into(),
                ),
            }
        }
        Verdict::Rejected if !view.selection.has_any_endpoints => out.push(format!(
            "{name} has no usable endpoint (none ready or serving): new connections are refused"
        )),
        Verdict::Dropped | Verdict::Rejected
            if policy == TrafficPolicy::Local
                && local_empty
                && view.selection.has_any_endpoints =>
        {
            out.push(format!(
                "{kind} Local and no endpoint of {name} runs on this node: the packet is dropped"
            ))
        }
        Verdict::Dropped
            if frontend == Frontend::LoadBalancer
                && !view.load_balancer_source_ranges.is_empty()
                && !view
                    .load_balancer_source_ranges
                    .iter()
                    .any(|n| n.contains(&source.address)) =>
        {
            out.push(format!(
                "{} is outside the loadBalancerSourceRanges of {name}: dropped",
                source.address
            ))
        }
        Verdict::Untouched => out.push(format!(
            "no rule of ours rewrote it: it reaches the node's own stack (nothing of {name} \
             serves it here)"
        )),
        _ => {}
    }
    out
}

/// Why a destination that no frontend names goes as it does.
fn not_a_frontend(snapshot: &Snapshot, request: &Request, family: IpFamily) -> Vec<String> {
    let ip = request.to.ip();
    let owner = snapshot.ports.values().find(|s| {
        s.family(family)
            .is_some_and(|v| v.cluster_ip == ip || v.external_ips.contains(&ip))
    });
    match owner {
        Some(s) => vec![format!(
            "{ip} belongs to {}, which has no {} port {}",
            s.port.name.service,
            request.protocol.as_str(),
            request.to.port()
        )],
        None => vec![format!(
            "{} is no frontend of any Service port on this node",
            request.to
        )],
    }
}

/// Why the packet is (not) masqueraded.
fn masquerade_reasons(
    node: &NodePolicy,
    found: &Option<(&ServicePortState, Frontend)>,
    outcome: &Outcome,
    source: &Source,
) -> Vec<String> {
    let Some((state, frontend)) = found else {
        return Vec::new();
    };
    if outcome.verdict != Verdict::Forwarded {
        return Vec::new();
    }
    let hairpin = outcome
        .endpoints
        .iter()
        .any(|s| s.endpoint.ip() == source.address);
    let reason = match outcome.masquerade {
        Some(true) if node.masquerade_all => {
            "masqueradeAll is on: every Service packet is masqueraded"
        }
        Some(true) if hairpin => {
            "the client is one of the endpoints: masqueraded so a pod reaching itself gets its \
             replies (hairpin)"
        }
        Some(true)
            if *frontend != Frontend::ClusterIp
                && state.port.external_policy == TrafficPolicy::Cluster =>
        {
            "externalTrafficPolicy Cluster: the source is rewritten to the node's so replies \
             return through this node"
        }
        Some(true) if source.origin != Origin::Pod => {
            "the source is not a pod of this node (detectLocalMode): masqueraded so replies \
             return through this node"
        }
        Some(true) => "masqueraded",
        Some(false)
            if *frontend != Frontend::ClusterIp
                && state.port.external_policy == TrafficPolicy::Local =>
        {
            "externalTrafficPolicy Local: the client's address is kept"
        }
        Some(false)
            if *frontend == Frontend::ClusterIp
                && source.origin != Origin::Pod
                && source.detect_off =>
        {
            "not masqueraded: no detectLocalMode source is set (no cluster CIDR), so ClusterIP \
             traffic keeps its source wherever it comes from"
        }
        Some(false) => "not masqueraded: the endpoint sees the client's address",
        None => "masqueraded on some paths only",
    };
    vec![reason.to_string()]
}

#[cfg(test)]
mod tests;
