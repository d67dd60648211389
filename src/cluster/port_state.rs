//! A Service and its EndpointSlices → the state of each of its ports on this node: per family,
//! the frontends of that family, the merged endpoints and which of them each kind of traffic
//! uses.
//!
//! Pure: no I/O, never fails. The tracker calls it for each Service that changed since the last
//! snapshot; the cost is proportional to that Service's ports and endpoints.

use std::net::IpAddr;

use super::endpoints::{self, ParsedSlice};
use super::model::{FamilyView, IpFamily, NodeContext, ServicePortState};
use super::service::ParsedService;
use super::slice_set::SliceSet;
use super::topology::{self, Features};

/// Builds the state of every port of one Service.
pub(super) fn build(
    svc: &ParsedService,
    slices: Option<&SliceSet>,
    node: &NodeContext,
    features: Features,
) -> Vec<ServicePortState> {
    let slices: Vec<&ParsedSlice> = slices.map(|set| set.values().collect()).unwrap_or_default();
    svc.ports
        .iter()
        .map(|port| {
            let families = svc
                .cluster_ips
                .iter()
                .map(|cluster_ip| {
                    let family = IpFamily::of(cluster_ip);
                    let of_family = |ip: &&IpAddr| IpFamily::of(ip) == family;
                    let external_ips: Vec<_> =
                        svc.external_ips.iter().filter(of_family).copied().collect();
                    let load_balancer_ips: Vec<_> = svc
                        .load_balancer_ips
                        .iter()
                        .filter(of_family)
                        .copied()
                        .collect();
                    let load_balancer_source_ranges = svc
                        .source_ranges
                        .iter()
                        .filter(|n| IpFamily::of_net(n) == family)
                        .copied()
                        .collect();
                    let endpoints = endpoints::merge(
                        slices.iter().copied(),
                        &port.name.port,
                        port.name.protocol,
                        family,
                        &node.name,
                    );
                    let externally_accessible = port.node_port.is_some()
                        || !external_ips.is_empty()
                        || !load_balancer_ips.is_empty();
                    let selection =
                        topology::select(&endpoints, port, externally_accessible, node, features);
                    FamilyView {
                        family,
                        cluster_ip: *cluster_ip,
                        external_ips,
                        load_balancer_ips,
                        load_balancer_source_ranges,
                        endpoints,
                        selection,
                    }
                })
                .collect();
            ServicePortState {
                port: port.clone(),
                families,
            }
        })
        .collect()
}
