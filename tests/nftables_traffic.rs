//! A real-traffic smoke test of the nftables mode (root): a node namespace with our rules and a
//! pod namespace behind a veth; a TCP client on the node reaches the pod through a ClusterIP,
//! and a Service without endpoints is rejected. Only addresses created here, all inside the
//! two namespaces.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run ip and python, and write a manifest file"
)]

use support::veth_pod;
use support::web_cluster;

use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::{Changes, Features};
use kube_proxy_rs::config::NftablesEncoder;
use kube_proxy_rs::dataplane::Dataplane;
use kube_proxy_rs::dataplane::nftables::{Drift, ModeConfig, NftablesDataplane};
use kube_proxy_rs::nft::backend;
use veth_pod::{CLIENT, VethPod};

#[test]
fn a_cluster_ip_reaches_a_pod_and_a_service_without_endpoints_is_rejected() {
    let veth = VethPod::new("nfa-node", "nfa-pod", "pod-a saw {peer}");
    let node = &veth.node;

    let dir = tempfile::tempdir().expect("tempdir");
    web_cluster::write(dir.path(), true);
    let loaded = load_manifests(dir.path(), "node-a", Features::default()).expect("loads");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    NftablesDataplane::new(
        ModeConfig::default(),
        backend::for_encoder(NftablesEncoder::default(), Some(&node.name)),
        Drift::new(),
    )
    .sync(&loaded.snapshot, &Changes::default(), true)
    .expect("sync");

    let answer = node.output("python3", &["-c", CLIENT, "10.96.1.10", "80", "2", "retry"]);
    assert_eq!(answer.trim(), "pod-a saw 10.244.1.1", "through the DNAT");
    let answer = node.output("python3", &["-c", CLIENT, "10.96.1.20", "80", "2", "once"]);
    assert_eq!(answer.trim(), "refused", "no endpoints: rejected");
}
