//! The smallest cluster the process-level tests give the proxy through `--manifests`: the Node
//! `node-a` (InternalIP 10.0.0.11, pod CIDR 10.244.1.0/24), the Service `web` (ClusterIP
//! 10.96.1.10, TCP 80 → 8080) with one ready endpoint, the pod 10.244.1.10 on node-a, and
//! optionally `empty` (10.96.1.20, the same port) without endpoints.

pub use crate::manifest_yaml;

use std::path::Path;

use manifest_yaml::{CLUSTER_IP_V4, HTTP, documents, node, service, serving_on, slice};

/// The Node, `web` and its slice; with `empty`, `empty` too.
pub fn manifests(empty: bool) -> String {
    let mut docs = vec![
        node("node-a", "10.0.0.11", Some("10.244.1.0/24")),
        service("web", "10.96.1.10", HTTP, CLUSTER_IP_V4),
        slice("web", HTTP, &serving_on("10.244.1.10", "node-a")),
    ];
    if empty {
        docs.push(service("empty", "10.96.1.20", HTTP, CLUSTER_IP_V4));
    }
    documents(&docs)
}

/// Writes the cluster into `dir` as `cluster.yaml`; with `empty`, `empty` too.
pub fn write(dir: &Path, empty: bool) {
    #[allow(clippy::disallowed_methods, reason = "the test writes its manifests")]
    std::fs::write(dir.join("cluster.yaml"), manifests(empty)).expect("write manifests");
}
