//! SCTP Services through our nftables rules, with real SCTP traffic.
//!
//! This host's kernel has no SCTP, so the test boots a qemu guest with Debian's kernel
//! (`support/guest.rs`) and re-runs this test binary inside it (`guest_sctp_helper_process`).
//! In the guest, which has no network card, the root namespace is the node and runs the real
//! `kube-proxy-rs` binary in nftables mode from a manifest directory; a `pod` namespace serves
//! SCTP behind a veth, and a `client` namespace outside the cluster reaches the node's address.
//! It checks:
//! - a ClusterIP SCTP port reaches the pod from the node;
//! - a NodePort SCTP port reaches the pod from the external client, masqueraded (the pod sees
//!   the node's address, as externalTrafficPolicy Cluster requires);
//! - an SCTP port of a Service without endpoints is rejected (an ICMP error), not dropped.

#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: boots a guest, runs ip and nft, re-executes itself"
)]

use support::guest;
use support::in_guest;
use support::manifest_yaml;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use guest::host::helper_process::RESULT;
use in_guest::{
    CLUSTER_IP, NO_ENDPOINTS_IP, NODE_IP, NODE_NAME, POD_GATEWAY, eventually,
    icmp_unreachables_sent, run,
};
use manifest_yaml::{CLUSTER_IP_V4, Port, documents, service, serving_on, slice};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

const POD_IP: &str = "10.244.0.2";
const PORT: u16 = 7777;
const NODE_PORT: u16 = 30777;
/// The Services' one port: `echo`, SCTP [`PORT`] on the Service and the pod.
const ECHO: Port = Port {
    name: "echo",
    protocol: "SCTP",
    port: PORT,
    target: PORT,
    node_port: None,
};

#[test]
fn sctp_services_carry_real_sctp_traffic_in_a_guest() {
    in_guest::run_node(
        &HELPER,
        &[
            format!("clusterip from {POD_GATEWAY}"),
            format!("nodeport from {POD_GATEWAY}"),
            "no-endpoints refused".to_owned(),
        ],
    );
}

support::guest_helper_entry!(guest_sctp_helper_process, node, serve, exchange);

/// The node: network, manifests, the proxy, the probes.
fn node() {
    let pod = [
        "ip netns add pod".to_owned(),
        "ip link add vpod type veth peer name eth0 netns pod".to_owned(),
        format!("ip addr add {POD_GATEWAY}/24 dev vpod"),
        "ip link set vpod up".to_owned(),
        "ip -n pod link set lo up".to_owned(),
        "ip -n pod link set eth0 up".to_owned(),
        format!("ip -n pod addr add {POD_IP}/24 dev eth0"),
        format!("ip -n pod route add default via {POD_GATEWAY}"),
        // The node's route to the service range (a real node has a default route instead).
        "ip route add 10.96.0.0/16 dev vpod".to_owned(),
        "modprobe sctp".to_owned(),
    ];
    for cmd in in_guest::client_network().iter().chain(&pod) {
        run(cmd);
    }
    for module in guest::NFT_MODULES {
        run(&format!("modprobe {module}"));
    }
    let mut server = HELPER
        .in_netns("pod", "server")
        .spawn()
        .expect("start the pod's SCTP server");

    let dir = PathBuf::from("/tmp/kprs-sctp-manifests");
    std::fs::create_dir_all(&dir).expect("manifest dir");
    std::fs::write(dir.join("cluster.yaml"), manifests()).expect("write manifests");
    let log = std::fs::File::create("/tmp/kprs-sctp-proxy.log").expect("proxy log");
    let mut proxy = in_guest::start_proxy(&dir, "nftables", &[], log);

    let outcome = std::panic::catch_unwind(|| {
        let cluster: SocketAddr = format!("{CLUSTER_IP}:{PORT}").parse().unwrap();
        let seen = eventually(|| exchange(cluster));
        println!("{RESULT}clusterip from {seen}");
        let node_port = format!("{NODE_IP}:{NODE_PORT}");
        let seen = eventually(|| in_guest::client_in(&HELPER, "client", &node_port));
        println!("{RESULT}nodeport from {seen}");
        let refused: SocketAddr = format!("{NO_ENDPOINTS_IP}:{PORT}").parse().unwrap();
        // The rules reject with an ICMP error (SCTP has no RST). Without IP_RECVERR the
        // socket only times out, so the node's own count of ICMP errors it sent is the proof.
        let before = icmp_unreachables_sent();
        match exchange(refused) {
            Err(e) => println!("no association, as it should be: {e}"),
            Ok(seen) => panic!("a Service without endpoints answered (from {seen})"),
        }
        let sent = icmp_unreachables_sent() - before;
        assert!(sent > 0, "no ICMP unreachable sent: dropped, not rejected");
        println!("{RESULT}no-endpoints refused");
    });
    let _ = proxy.kill();
    let _ = proxy.wait();
    let _ = server.kill();
    let _ = server.wait();
    if let Err(panic) = outcome {
        let log = std::fs::read_to_string("/tmp/kprs-sctp-proxy.log").unwrap_or_default();
        let ruleset = Command::new("nft")
            .args(["list", "ruleset"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        eprintln!("proxy log:\n{log}\nnft list ruleset:\n{ruleset}");
        std::panic::resume_unwind(panic);
    }
}

/// One SCTP association to `target`: sends a line, returns the source address the server saw.
fn exchange(target: SocketAddr) -> Result<String, String> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::from(132)))
        .map_err(|e| format!("sctp socket: {e}"))?;
    socket
        .connect_timeout(&SockAddr::from(target), Duration::from_secs(3))
        .map_err(|e| format!("connect {target}: {e}"))?;
    let mut stream = TcpStream::from(socket);
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"hello\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut buf = [0u8; 128];
    let n = stream.read(&mut buf).map_err(|e| format!("recv: {e}"))?;
    let reply = String::from_utf8_lossy(&buf[..n]).trim().to_owned();
    reply
        .strip_prefix("saw ")
        .map(str::to_owned)
        .ok_or_else(|| format!("unexpected reply {reply:?}"))
}

/// The pod's server: answers each association with the peer address it saw.
fn serve() {
    let socket =
        Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::from(132))).expect("sctp socket");
    let addr: SocketAddr = format!("0.0.0.0:{PORT}").parse().unwrap();
    socket.bind(&SockAddr::from(addr)).expect("bind");
    socket.listen(16).expect("listen");
    loop {
        let Ok((conn, peer)) = socket.accept() else {
            continue;
        };
        let peer = peer
            .as_socket()
            .map(|p| p.ip().to_string())
            .unwrap_or_default();
        let mut stream = TcpStream::from(conn);
        let mut buf = [0u8; 128];
        let _ = stream.read(&mut buf);
        let _ = stream.write_all(format!("saw {peer}\n").as_bytes());
    }
}

/// The cluster the guest's proxy reads: its Node, a ClusterIP + NodePort SCTP Service with the
/// pod as endpoint, and an SCTP Service without endpoints.
fn manifests() -> String {
    documents(&[
        manifest_yaml::node(NODE_NAME, NODE_IP, None),
        service(
            "sctp-echo",
            CLUSTER_IP,
            ECHO.on_node_port(NODE_PORT),
            "  type: NodePort\n  ipFamilies: [IPv4]\n",
        ),
        slice("sctp-echo", ECHO, &serving_on(POD_IP, NODE_NAME)),
        service("sctp-empty", NO_ENDPOINTS_IP, ECHO, CLUSTER_IP_V4),
    ])
}
