//! A real-traffic smoke test of the nftables mode (root): a node namespace with our rules and a
//! pod namespace behind a veth; a TCP client on the node reaches the pod through a ClusterIP,
//! and a Service without endpoints is rejected. Only addresses created here, all inside the
//! two namespaces.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run ip and python, and write a manifest file"
)]

#[path = "support/host.rs"]
mod host;
#[path = "support/web_cluster.rs"]
mod web_cluster;

use std::process::Command;

use host::{ChildGuard, NetNs};
use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::{Changes, Features};
use kube_proxy_rs::config::NftablesEncoder;
use kube_proxy_rs::dataplane::Dataplane;
use kube_proxy_rs::dataplane::nftables::{Drift, ModeConfig, NftablesDataplane};
use kube_proxy_rs::nft::backend;

/// Answers every connection with one line naming the pod and the client address it saw.
const SERVER: &str = r#"
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(16)
while True:
    c, a = s.accept()
    c.sendall(("pod-a saw %s\n" % a[0]).encode())
    c.close()
"#;

/// Connects to argv[1]:argv[2] and prints the answer, or `refused`; retries while the server
/// starts unless argv[3] is `once`.
const CLIENT: &str = r#"
import socket, sys, time
for _ in range(50):
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
        print(c.recv(100).decode().strip())
        sys.exit(0)
    except ConnectionRefusedError:
        if sys.argv[3] == "once":
            print("refused")
            sys.exit(0)
        time.sleep(0.1)
print("no answer")
"#;

fn ip(ns: &NetNs, args: &str) {
    let words: Vec<&str> = args.split(' ').collect();
    ns.output("ip", &words);
}

#[test]
fn a_cluster_ip_reaches_a_pod_and_a_service_without_endpoints_is_rejected() {
    let node = NetNs::new("nfa-node");
    let pod = NetNs::new("nfa-pod");
    host::stdout_of(
        Command::new("ip")
            .args([
                "link", "add", "veth-pod", "netns", &node.name, "type", "veth",
            ])
            .args(["peer", "name", "eth0", "netns", &pod.name]),
    );
    ip(&node, "addr add 10.244.1.1/24 dev veth-pod");
    ip(&node, "link set veth-pod up");
    // A node reaches Service addresses through some route, usually its default route.
    ip(&node, "route add 10.96.0.0/12 dev veth-pod");
    ip(&pod, "addr add 10.244.1.10/24 dev eth0");
    ip(&pod, "link set eth0 up");
    ip(&pod, "route add default via 10.244.1.1");
    let _server = ChildGuard::spawn(
        &format!("{}-echo", pod.name),
        pod.command("python3").args(["-c", SERVER]),
    );

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

    let answer = node.output("python3", &["-c", CLIENT, "10.96.1.10", "80", "retry"]);
    assert_eq!(answer.trim(), "pod-a saw 10.244.1.1", "through the DNAT");
    let answer = node.output("python3", &["-c", CLIENT, "10.96.1.20", "80", "once"]);
    assert_eq!(answer.trim(), "refused", "no endpoints: rejected");
}
