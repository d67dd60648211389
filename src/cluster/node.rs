//! This node's Node object → the [`NodeContext`] the tracker and planners read.
//!
//! Pure: no I/O, never panics. Only the Node named like this proxy's node matters; its zone label
//! drives topology, its addresses the NodePort addresses, its pod CIDRs the `NodeCIDR` local
//! traffic detection, and its deletion or autoscaler taint the `/healthz` answer (KEP-3836).

use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;

use super::limits::{self, shown};
use super::model::{NodeAddress, NodeContext};
use super::warning::Warning;

/// The well-known zone label.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// Taint the cluster autoscaler puts on a node it is about to remove.
pub const TAINT_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";

/// Builds the context for this node from its Node object. Bad addresses, CIDRs or a bad zone are
/// dropped with a warning; the rest of the object still counts.
pub fn context(name: &str, node: &Node, warnings: &mut Vec<Warning>) -> NodeContext {
    let object = format!("node {name}");
    let mut warn = |m: String| warnings.push(Warning::new(&object, m));
    let zone = match node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ZONE))
    {
        Some(z) if limits::is_label_value(z) && !z.is_empty() => Some(z.as_str().into()),
        Some(z) if z.is_empty() => None,
        Some(z) => {
            warn(format!(
                "label {LABEL_ZONE} {} is not a label value; ignored",
                shown(z)
            ));
            None
        }
        None => None,
    };
    let status = node.status.as_ref();
    let mut addresses = Vec::new();
    for a in status
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or(&[])
        .iter()
        .take(limits::MAX_SERVICE_ADDRESSES)
    {
        if !matches!(a.type_.as_str(), "InternalIP" | "ExternalIP") {
            continue;
        }
        match a.address.parse::<IpAddr>() {
            Ok(ip) => addresses.push(NodeAddress {
                kind: a.type_.clone(),
                ip,
            }),
            Err(_) => warn(format!(
                "status.addresses: {} is not an IP address; skipped",
                shown(&a.address)
            )),
        }
    }
    let spec = node.spec.as_ref();
    let mut pod_cidrs = Vec::new();
    let raw_cidrs: Vec<&String> = match spec.and_then(|s| s.pod_cidrs.as_ref()) {
        Some(c) if !c.is_empty() => c.iter().collect(),
        _ => spec.and_then(|s| s.pod_cidr.as_ref()).into_iter().collect(),
    };
    for c in raw_cidrs.into_iter().take(2) {
        match c.parse::<IpNet>() {
            Ok(net) => pod_cidrs.push(net),
            Err(_) => warn(format!(
                "spec.podCIDRs: {} is not a CIDR; skipped",
                shown(c)
            )),
        }
    }
    let to_be_deleted = spec
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TAINT_TO_BE_DELETED));
    NodeContext {
        name: name.into(),
        known: true,
        zone,
        addresses,
        // Not in the Node object: the tracker keeps what the host reported.
        host_addresses: None,
        pod_cidrs,
        deleting: node.metadata.deletion_timestamp.is_some(),
        to_be_deleted,
    }
}
