//! Which endpoints each kind of traffic on this node may use: traffic policies, the terminating
//! fallback and topology hints.
//!
//! Pure: no I/O, never fails. The rules follow upstream's documented behaviour, stated here in our
//! own words:
//! - Traffic under the `Cluster` policy uses ready endpoints, narrowed by topology when the hints
//!   allow it; with no ready endpoint anywhere it falls back to endpoints that are serving and
//!   terminating (KEP-1669), ignoring topology.
//! - Traffic under the `Local` policy uses this node's ready endpoints, else this node's serving and
//!   terminating ones (KEP-2086 internal, externalTrafficPolicy for external).
//! - Topology (KEP-2433 hints, KEP-4444 / KEP-3015 trafficDistribution) is decided from the hints
//!   alone, which the EndpointSlice controller derives from the Service: same-node when every ready
//!   endpoint has a node hint and one names this node (and `PreferSameTrafficDistribution` is on);
//!   else same-zone when every ready endpoint has a zone hint and one names this node's zone;
//!   otherwise no topology. Incomplete hints never strand traffic.
//! - A Service "has endpoints" (so it is not rejected) when any endpoint anywhere is ready or
//!   serving and terminating.

use serde::Serialize;

use super::model::{Endpoint, NodeContext, ServicePort, TrafficPolicy};

/// Feature switches that change selection; passed in, never read from a global.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// `PreferSameTrafficDistribution` (GA in 1.35): honour node hints.
    pub prefer_same_node: bool,
}

impl Default for Features {
    fn default() -> Features {
        Features {
            prefer_same_node: true,
        }
    }
}

/// How topology narrowed the cluster endpoints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum TopologyMode {
    /// No topology: every ready endpoint in the cluster.
    #[default]
    None,
    /// Only endpoints hinted for this node's zone.
    SameZone,
    /// Only endpoints hinted for this node.
    SameNode,
}

/// The endpoints each kind of traffic may use, as indices into the family view's sorted endpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Selection {
    /// For traffic under the `Cluster` policy, and for traffic from this node and its pods to
    /// an external frontend (see [`uses_cluster_policy`]); `None` when no traffic of this port
    /// uses it.
    pub cluster: Option<Vec<u32>>,
    /// For traffic under the `Local` policy; `None` when no traffic of this port uses it.
    pub local: Option<Vec<u32>>,
    /// Some endpoint somewhere in the cluster is usable: traffic is dropped, not rejected, when
    /// the lists above are empty.
    pub has_any_endpoints: bool,
    pub topology: TopologyMode,
    /// The cluster list holds serving-terminating endpoints because none is ready.
    pub cluster_uses_terminating: bool,
    /// The local list holds serving-terminating endpoints because none on this node is ready.
    pub local_uses_terminating: bool,
}

impl Selection {
    /// Indices of every endpoint some traffic may reach, ascending, without duplicates.
    pub fn reachable(&self) -> impl Iterator<Item = u32> + '_ {
        let a = self.cluster.as_deref().unwrap_or(&[]);
        let b = self.local.as_deref().unwrap_or(&[]);
        MergeSorted { a, b }
    }
}

/// Merges two ascending index lists into one, dropping duplicates.
struct MergeSorted<'a> {
    a: &'a [u32],
    b: &'a [u32],
}

impl Iterator for MergeSorted<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        let next = match (self.a.first(), self.b.first()) {
            (None, None) => return None,
            (Some(&x), None) => x,
            (None, Some(&y)) => y,
            (Some(&x), Some(&y)) => x.min(y),
        };
        if self.a.first() == Some(&next) {
            self.a = &self.a[1..];
        }
        if self.b.first() == Some(&next) {
            self.b = &self.b[1..];
        }
        Some(next)
    }
}

/// Whether some traffic of this port uses the cluster-wide endpoints. ClusterIP traffic follows
/// the internal policy; NodePort, externalIP and LoadBalancer traffic from outside the node the
/// external one. Traffic from this node and its pods to those external frontends uses the
/// cluster-wide endpoints whatever either policy says (upstream's short-circuit: as if it had
/// left for an outside load balancer and come back through any node), so an externally
/// accessible port always has the cluster list.
pub fn uses_cluster_policy(port: &ServicePort, externally_accessible: bool) -> bool {
    port.internal_policy == TrafficPolicy::Cluster || externally_accessible
}

/// Whether some traffic of this port follows the `Local` policy.
pub fn uses_local_policy(port: &ServicePort, externally_accessible: bool) -> bool {
    port.internal_policy == TrafficPolicy::Local
        || (externally_accessible && port.external_policy == TrafficPolicy::Local)
}

/// Chooses the endpoints of one family view of a service port for this node.
pub fn select(
    endpoints: &[Endpoint],
    port: &ServicePort,
    externally_accessible: bool,
    node: &NodeContext,
    features: Features,
) -> Selection {
    let mut selection = Selection::default();
    let indexed = || endpoints.iter().enumerate().map(|(i, ep)| (i as u32, ep));

    if uses_cluster_policy(port, externally_accessible) {
        let mode = topology_mode(endpoints, node, features);
        selection.topology = mode;
        let mut cluster: Vec<u32> = indexed()
            .filter(|(_, ep)| ep.ready && fits_topology(ep, mode, node))
            .map(|(i, _)| i)
            .collect();
        if cluster.is_empty() {
            cluster = indexed()
                .filter(|(_, ep)| ep.serving_terminating())
                .map(|(i, _)| i)
                .collect();
            selection.cluster_uses_terminating = !cluster.is_empty();
        }
        selection.has_any_endpoints = !cluster.is_empty();
        selection.cluster = Some(cluster);
    }

    if uses_local_policy(port, externally_accessible) {
        selection.has_any_endpoints |= endpoints
            .iter()
            .any(|ep| ep.ready || ep.serving_terminating());
        let mut local: Vec<u32> = indexed()
            .filter(|(_, ep)| ep.is_local && ep.ready)
            .map(|(i, _)| i)
            .collect();
        if local.is_empty() {
            local = indexed()
                .filter(|(_, ep)| ep.is_local && ep.serving_terminating())
                .map(|(i, _)| i)
                .collect();
            selection.local_uses_terminating = !local.is_empty();
        }
        selection.local = Some(local);
    }
    selection
}

/// Decides the topology mode from the ready endpoints' hints.
fn topology_mode(endpoints: &[Endpoint], node: &NodeContext, features: Features) -> TopologyMode {
    let zone = node.zone.as_deref();
    let mut all_node_hints = true;
    let mut hint_for_node = false;
    let mut all_zone_hints = true;
    let mut hint_for_zone = false;
    for ep in endpoints.iter().filter(|ep| ep.ready) {
        if ep.placement.node_hints.is_empty() {
            all_node_hints = false;
        } else if ep.placement.node_hints.iter().any(|n| **n == *node.name) {
            hint_for_node = true;
        }
        if ep.placement.zone_hints.is_empty() {
            all_zone_hints = false;
        } else if zone.is_some_and(|z| ep.placement.zone_hints.iter().any(|h| **h == *z)) {
            hint_for_zone = true;
        }
    }
    // With no ready endpoint the loops above leave the "all" flags true and the "for" flags false,
    // so no topology applies, and the terminating fallback takes over.
    if features.prefer_same_node && all_node_hints && hint_for_node {
        TopologyMode::SameNode
    } else if all_zone_hints && hint_for_zone {
        TopologyMode::SameZone
    } else {
        TopologyMode::None
    }
}

fn fits_topology(ep: &Endpoint, mode: TopologyMode, node: &NodeContext) -> bool {
    match mode {
        TopologyMode::None => true,
        TopologyMode::SameNode => ep.placement.node_hints.iter().any(|n| **n == *node.name),
        TopologyMode::SameZone => node
            .zone
            .as_deref()
            .is_some_and(|z| ep.placement.zone_hints.iter().any(|h| **h == *z)),
    }
}

/// Why an endpoint is not in a selection list, for `plan` and troubleshooting.
pub fn why_excluded(
    ep: &Endpoint,
    list_has_ready: bool,
    local_list: bool,
    mode: TopologyMode,
    node: &NodeContext,
) -> String {
    if local_list && !ep.is_local {
        return match &ep.placement.node_name {
            Some(n) => format!("on node {n}, not this node"),
            None => "no nodeName, so not on this node".to_string(),
        };
    }
    if !ep.ready && !ep.serving_terminating() {
        return if ep.terminating {
            "terminating and not serving".to_string()
        } else {
            "not ready".to_string()
        };
    }
    if !ep.ready && list_has_ready {
        return "terminating; ready endpoints exist".to_string();
    }
    if !local_list && !fits_topology(ep, mode, node) {
        return match mode {
            TopologyMode::SameNode => format!(
                "hinted for nodes [{}], not {}",
                ep.placement.node_hints.join(","),
                node.name
            ),
            _ => format!(
                "hinted for zones [{}], this node is in {}",
                ep.placement.zone_hints.join(","),
                node.zone.as_deref().unwrap_or("no zone")
            ),
        };
    }
    "not selected".to_string()
}

#[cfg(test)]
#[path = "topology_tests.rs"]
mod tests;
