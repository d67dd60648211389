//! Which sources a LoadBalancer with `loadBalancerSourceRanges` accepts (upstream's
//! "Restricting source IPs" documentation, in our words).
//!
//! Pure. The ranges themselves, and the Service's own LoadBalancer IPs when one of this node's
//! addresses of the family lies inside a range: traffic the node sends to its own VIP leaves
//! with the VIP as source on some clouds' hairpin paths, and the operator who allowed the node
//! meant it to reach the Service.

use ipnet::IpNet;

use crate::cluster::{FamilyView, IpFamily, NodeContext};

/// The allowed sources of `view`'s LoadBalancer IPs on `node`, in the order of the ranges then
/// the VIPs (possibly overlapping; a mode that needs disjoint entries folds them).
pub fn allowed_sources(view: &FamilyView, node: &NodeContext) -> Vec<IpNet> {
    let ranges = &view.load_balancer_source_ranges;
    let node_inside = node
        .addresses
        .iter()
        .any(|a| IpFamily::of(&a.ip) == view.family && ranges.iter().any(|r| r.contains(&a.ip)));
    let mut allowed = ranges.clone();
    if node_inside {
        allowed.extend(view.load_balancer_ips.iter().map(|&ip| IpNet::from(ip)));
    }
    allowed
}

/// [`allowed_sources`] folded to the outermost networks, sorted: the same allowed space without
/// overlaps, which nftables interval sets refuse. CIDRs either nest or are disjoint, so keeping
/// only those no other one contains is enough.
pub fn allowed_disjoint(view: &FamilyView, node: &NodeContext) -> Vec<IpNet> {
    let mut allowed = allowed_sources(view, node);
    allowed.sort();
    allowed.dedup();
    allowed
        .iter()
        .filter(|n| !allowed.iter().any(|o| o != *n && o.contains(*n)))
        .copied()
        .collect()
}
