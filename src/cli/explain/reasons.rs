//! Why: the model's reasons for the outcome a tracer found, and for the masquerade.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use super::source::Source;
use super::{Frontend, Origin, Outcome, Request, Verdict};
use crate::cluster::topology::TopologyMode;
use crate::cluster::{IpFamily, ServicePortState, Snapshot, TrafficPolicy};
use crate::dataplane::node::NodePolicy;

/// Why a packet to a Service frontend ends as it does, from the model.
pub(super) fn reasons(
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
pub(super) fn not_a_frontend(
    snapshot: &Snapshot,
    request: &Request,
    family: IpFamily,
    outcome: &Outcome,
) -> Vec<String> {
    let ip = request.to.ip();
    let owner = snapshot.ports.values().find(|s| {
        s.family(family)
            .is_some_and(|v| v.cluster_ip == ip || v.external_ips.contains(&ip))
    });
    if let Some(s) = owner {
        return vec![format!(
            "{ip} belongs to {}, which has no {} port {}",
            s.port.name.service,
            request.protocol.as_str(),
            request.to.port()
        )];
    }
    let mut out = vec![format!(
        "{} is no frontend of any Service port on this node",
        request.to
    )];
    if let Some(range) = snapshot.service_cidrs.iter().find(|n| n.contains(&ip)) {
        out.push(match outcome.verdict {
            Verdict::Dropped => format!(
                "{ip} is in the Service CIDR {range} but no Service here holds it (unallocated,                  or its Service is another proxy's): dropped, as upstream's nftables mode does"
            ),
            _ => format!(
                "{ip} is in the Service CIDR {range} but no Service here holds it: this mode                  leaves it to the node's routes, as upstream's iptables and ipvs modes do"
            ),
        });
    }
    out
}

/// Why the packet is (not) masqueraded.
pub(super) fn masquerade_reasons(
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

/// The reason a ClientIP affinity entry (or none) of the client gives, in any mode.
pub fn affinity_reason(client: IpAddr, remembered: &[SocketAddr], timeout_seconds: u32) -> String {
    match remembered {
        [] => format!(
            "ClientIP affinity: the kernel has no entry for {client}: its next connection \
             picks an endpoint, and the ones within {timeout_seconds} s follow it"
        ),
        eps => format!(
            "ClientIP affinity: the kernel remembers {client} for {}: its new connections go \
             there until {timeout_seconds} s pass without one",
            eps.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_affinity_reason_names_the_remembered_endpoints() {
        let client: IpAddr = "10.244.1.7".parse().unwrap();
        assert!(affinity_reason(client, &[], 600).contains("no entry for 10.244.1.7"));
        let r = affinity_reason(client, &["10.244.2.2:8080".parse().unwrap()], 600);
        assert!(
            r.contains("remembers 10.244.1.7 for 10.244.2.2:8080"),
            "{r}"
        );
    }
}
