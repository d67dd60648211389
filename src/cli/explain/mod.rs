//! `kube-proxy-rs explain`: why the first packet of a connection goes where it goes on this
//! node, told from both halves the proxy knows: the model (which Service port the destination
//! is, which endpoints were chosen and why the others were left out) and the rules of the
//! mode, planned or read from the kernel, walked by that mode's tracer. The mode's part is
//! asked through [`crate::dataplane::inspect`], the same for every mode; what is kept here is
//! the request, the source it resolves to, the model's reasons, and the rendering.
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
//! [`live`] has the mode read them ([`Read::remember`]).

pub mod command;
pub mod live;
mod others;
mod reasons;
pub mod remote;
pub mod render;
pub mod request;
mod source;

use std::net::{IpAddr, SocketAddr};

use serde::Serialize;

use super::plan::{FamilyReport, family_report};
use crate::cluster::{IpFamily, Snapshot, TrafficPolicy};
use crate::dataplane::node::NodePolicy;
use reasons::{masquerade_reasons, not_a_frontend, reasons};
use source::Source;

pub use crate::dataplane::inspect::{
    Frontend, Origin, Outcome, Packet, Plan, Read, Rules, Share, Verdict,
};
pub use reasons::affinity_reason;
pub use request::{From, Request};

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
    /// What the mode's state is called in a sentence ("rules", or "maps").
    #[serde(skip)]
    pub noun: &'static str,
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
    rules: &dyn Rules,
    rules_from: RulesFrom,
    request: &Request,
) -> Result<Explanation, Error> {
    let family = IpFamily::of(&request.to.ip());
    let source = Source::resolve(snapshot, node, request, family)?;
    let packet = source.packet(request);
    let found = find(snapshot, request);
    let outcome = rules.walk(&packet);
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
    match rules.told(&packet, found.as_ref().map(|(_, f)| *f), &outcome) {
        Some(told) => {
            hooks = told.hooks;
            reasons.splice(0..0, told.first);
            reasons.extend(told.last);
        }
        None => reasons.extend(masquerade_reasons(node, &found, &outcome, &source)),
    }
    Ok(Explanation {
        mode: rules.mode(),
        noun: rules.noun(),
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
    rules: &dyn Rules,
    request: &Request,
) -> Result<Outcome, Error> {
    Ok(rules.walk(&packet(snapshot, node, request)?))
}

/// The packet `request` is on the node of `snapshot`: its source resolved as `explain` resolves
/// it, what a mode walks and reads the client's state for.
pub fn packet(snapshot: &Snapshot, node: &NodePolicy, request: &Request) -> Result<Packet, Error> {
    let source = Source::resolve(snapshot, node, request, IpFamily::of(&request.to.ip()))?;
    Ok(source.packet(request))
}

/// The Service port whose frontend the destination is.
fn find<'a>(
    snapshot: &'a Snapshot,
    request: &Request,
) -> Option<(&'a crate::cluster::ServicePortState, Frontend)> {
    crate::dataplane::inspect::service_port(snapshot, request.protocol, request.to)
}

#[cfg(test)]
mod tests;
