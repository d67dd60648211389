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
//! taken as empty, unless the caller put the client's entries into the rules: on a live node
//! [`live`] reads them ([`affinity`], [`recent`], [`persistence`]).

pub mod affinity;
pub mod command;
pub mod kernel;
pub mod live;
mod others;
mod outcome;
pub mod persistence;
mod pinned;
mod planned;
mod reasons;
pub mod recent;
pub mod remote;
pub mod render;
pub mod request;
pub mod saved;
pub mod scoped;
mod socket_lb;
pub mod sockets;
mod source;
mod tc_lb;

use std::net::{IpAddr, SocketAddr};

use serde::Serialize;

use super::plan::{FamilyReport, family_report};
use crate::cluster::{IpFamily, ServicePortState, Snapshot, TrafficPolicy};
use crate::dataplane::node::NodePolicy;
use crate::dataplane::{ebpf, iptables, ipvs, userspace};
use crate::nft;
use outcome::walk;
use reasons::{masquerade_reasons, not_a_frontend, reasons, relay_reasons};
use source::{Origin, Source};

pub use planned::Planned;
pub use request::{From, Request};

/// One family's rules of the mode the packet is explained in.
#[derive(Clone, Copy, Debug)]
pub enum Rules<'a> {
    Nftables(&'a nft::Ruleset),
    Iptables(&'a iptables::Ruleset),
    /// The virtual services and the helper table of our nftables table.
    Ipvs {
        desired: &'a ipvs::desired::Desired,
        tables: &'a nft::Ruleset,
    },
    /// The redirect rules of our nftables table, and the listeners they lead to.
    Userspace {
        tables: &'a nft::Ruleset,
        relay: &'a userspace::trace::RelayPorts,
    },
    /// The eBPF mode's maps (both families share them), planned or read from the pins, and
    /// the `kp_aff` entry the tc programs keep for the packet's client from outside, when one
    /// was read (the socket programs' entries are a namespace's, listed beside the trace).
    Ebpf {
        maps: &'a ebpf::diff::Maps,
        remembered: Option<&'a ebpf::trace::Remembered>,
    },
}

impl Rules<'_> {
    /// The mode's name, as `--proxy-mode` spells it.
    pub fn mode(&self) -> &'static str {
        match self {
            Rules::Nftables(_) => "nftables",
            Rules::Iptables(_) => "iptables",
            Rules::Ipvs { .. } => "ipvs",
            Rules::Userspace { .. } => "userspace",
            Rules::Ebpf { .. } => ebpf::apply::MODE,
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
    /// eBPF mode: the cgroup programs that run for the call (`connect4`, `sendmsg4`, ...),
    /// where the Service is translated once per socket, or `tc ingress` for a packet from
    /// outside the node; empty in the other modes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<&'static str>,
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
    /// The running proxy (`/debug/explain`) had changes not yet programmed when it answered:
    /// the plan is its newest model, the kernel the last sync's, so a difference may be the
    /// pending sync's work rather than drift. Says since when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_sync: Option<String>,
    /// Other tables' base chains on the packet's path, which see it too and are not traced
    /// (filled by the caller that read the kernel).
    pub other_chains: Vec<String>,
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
        None => (
            None,
            None,
            None,
            not_a_frontend(snapshot, request, family, &outcome),
        ),
    };
    let mut hooks = Vec::new();
    if let Rules::Ebpf { maps, remembered } = rules {
        let t = socket_lb::trace(maps, remembered, request, &source);
        hooks = t.hooks.iter().map(|h| h.as_str()).collect();
        let mine = if source.origin == Origin::Outside {
            let cluster_ip = found
                .as_ref()
                .is_some_and(|(_, f)| *f == Frontend::ClusterIp);
            tc_lb::reasons(&t, request, &source, cluster_ip)
        } else {
            socket_lb::reasons(&t, request, &found)
        };
        reasons.splice(0..0, mine);
    } else if matches!(rules, Rules::Userspace { .. }) {
        reasons.extend(relay_reasons(&outcome));
    } else {
        reasons.extend(masquerade_reasons(node, &found, &outcome, &source));
    }
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
        hooks,
        reasons,
        affinity,
        model,
        drift: Vec::new(),
        pending_sync: None,
        other_chains: Vec::new(),
    })
}

/// The outcome alone of `request` over `rules`, without the model's side or the search for
/// its Service port: what `status` compares, plan against kernel, for every frontend of every
/// port.
pub fn outcome_only(
    snapshot: &Snapshot,
    node: &NodePolicy,
    rules: Rules<'_>,
    request: &Request,
) -> Result<Outcome, Error> {
    let source = Source::resolve(snapshot, node, request, IpFamily::of(&request.to.ip()))?;
    Ok(walk(rules, request, &source))
}

/// Which kind of frontend the destination is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Frontend {
    ClusterIp,
    NodePort,
    ExternalIp,
    LoadBalancer,
}

impl Frontend {
    pub(super) fn as_str(self) -> &'static str {
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

#[cfg(test)]
mod tests;
