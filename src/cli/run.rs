//! The long-running proxy as far as it exists today: it follows the cluster model from a manifest
//! directory and logs what changes. No dataplane mode programs rules yet (the nftables and
//! iptables issues add them), and it says so at start-up rather than pretending.

use std::path::Path;

use futures::StreamExt;

use crate::cluster::source::manifests;
use crate::cluster::{Features, Tracker};

/// Follows `dir` for node `node_name` until the watch ends or the process is stopped.
pub async fn follow_manifests(
    dir: &Path,
    node_name: &str,
    features: Features,
) -> Result<(), manifests::Error> {
    let mut watch = manifests::watch(dir.to_path_buf())?;
    let mut tracker = Tracker::new(node_name, features);
    tracing::warn!(
        "no dataplane mode is implemented yet: the cluster model is followed and logged, no rules are programmed"
    );
    while let Some(event) = watch.next().await {
        for w in tracker.apply(&event) {
            tracing::warn!(object = %w.object, "{}", w.message);
        }
        if !tracker.synced() {
            continue;
        }
        let (snapshot, changes) = tracker.snapshot();
        if !changes.ports.is_empty() || changes.node_topology_changed {
            tracing::info!(
                service_ports = snapshot.ports.len(),
                changed = changes.ports.len(),
                node_known = snapshot.node.known,
                "cluster model updated"
            );
            for name in &changes.ports {
                tracing::debug!(service_port = %name, present = snapshot.ports.contains_key(name), "service port changed");
            }
        }
    }
    Ok(())
}
