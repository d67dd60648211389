//! The manifests the guest's proxy reads (see `guest_ipvs.rs`).

use super::in_guest::NODE_NAME;
use super::manifest_yaml::{
    CLUSTER_IP_V4, Port, documents, service, serving_on, slice, terminating_on, with_annotation,
};
use super::*;

/// The Services' one port: `http`, TCP [`PORT`] to [`TARGET_PORT`].
const HTTP: Port = Port {
    name: "http",
    protocol: "TCP",
    port: PORT,
    target: TARGET_PORT,
    node_port: None,
};

/// `pair` and `sticky` (annotated with `scheduler`), both with the two server pods as
/// endpoints, the second one terminating when `terminating`; written in place, which the
/// proxy's directory watch sees.
pub(super) fn write_pair(dir: &std::path::Path, scheduler: &str, terminating: bool) {
    let second = if terminating {
        terminating_on(SECOND_SERVER_POD, NODE_NAME)
    } else {
        serving_on(SECOND_SERVER_POD, NODE_NAME)
    };
    let endpoints = serving_on(SERVER_POD, NODE_NAME) + &second;
    let sticky = with_annotation(
        &service("sticky", STICKY_IP, HTTP, CLUSTER_IP_V4),
        "ipvs.kube-proxy-rs.io/scheduler",
        scheduler,
    );
    let yaml = documents(&[
        service("pair", PAIR_IP, HTTP, CLUSTER_IP_V4),
        slice("pair", HTTP, &endpoints),
        sticky,
        slice("sticky", HTTP, &endpoints),
    ]);
    std::fs::write(dir.join("pair.yaml"), yaml).expect("write pair.yaml");
}

/// The cluster the guest's proxy reads: its Node, a NodePort Service with the server pod as
/// endpoint, and a Service without endpoints.
pub(super) fn manifests() -> String {
    documents(&[
        super::manifest_yaml::node(NODE_NAME, NODE_IP, None),
        service(
            "web",
            CLUSTER_IP,
            HTTP.on_node_port(NODE_PORT),
            "  type: NodePort\n  ipFamilies: [IPv4]\n",
        ),
        slice("web", HTTP, &serving_on(SERVER_POD, NODE_NAME)),
        service("empty", NO_ENDPOINTS_IP, HTTP, CLUSTER_IP_V4),
    ])
}
