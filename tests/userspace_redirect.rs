//! Userspace mode's redirect rules with real sockets (root): in a fresh network namespace whose
//! `lo` carries the "pod" addresses, the dataplane is synced and traffic to Service addresses,
//! from the node and from a client namespace behind a veth, reaches the listeners and through
//! them the pods; what must be refused is refused.

use support::relay_pods;
use support::userspace_dataplane;

use std::net::SocketAddr;
use std::time::Duration;

use kube_proxy_rs::cluster::Changes;
use kube_proxy_rs::config::NodePortAddresses;
use kube_proxy_rs::dataplane::Dataplane as _;
use kube_proxy_rs::dataplane::cleanup;
use kube_proxy_rs::dataplane::monitor::Drift;
use kube_proxy_rs::dataplane::nftables::cleanup::removed_table;
use kube_proxy_rs::dataplane::node::DetectLocal;
use kube_proxy_rs::dataplane::tool::Launcher;
use kube_proxy_rs::dataplane::userspace::UserspaceDataplane;
use kube_proxy_rs::dataplane::userspace::ports::PortRange;
use kube_proxy_rs::dataplane::userspace::redirect;
use kube_proxy_rs::dataplane::userspace::relay::Settings;
use relay_pods::{addr, in_netns, pod, udp_pod};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::timeout;
use userspace_dataplane::manifest_yaml::{
    DNS, HTTP, STICKY, documents, ready, ready_on, service, slice,
};
use userspace_dataplane::{STEP, greeting, manifests, operations, snapshot};

/// The manifests of [`manifests`] with `web` a NodePort Service (30080), one more TCP
/// Service, `empty` (10.96.0.12:80), that has no endpoints, `local`, a NodePort (30081)
/// under `externalTrafficPolicy: Local` whose one endpoint is on no node, `quiet`, a UDP
/// NodePort (30053) without endpoints, `both`, a NodePort (30082, ClusterIP 10.96.0.15)
/// under both traffic policies `Local` with endpoints on this node (10.244.1.2) and another
/// (10.244.1.3), and `sticky`, a NodePort (30083, ClusterIP 10.96.0.16) under
/// `externalTrafficPolicy: Local` with ClientIP affinity and both endpoints on this node.
fn with_node_port_and_empty(web: &[&str]) -> String {
    let mut base = manifests(web, true);
    if web.is_empty() {
        // The slice's list, empty rather than null.
        base.push_str("  []\n");
    }
    let nodeport = "  type: NodePort\n";
    let local = "  type: NodePort\n  externalTrafficPolicy: Local\n";
    let both = format!("{local}  internalTrafficPolicy: Local\n");
    let sticky = format!("{local}{STICKY}");
    let on_this_node = ready_on("10.244.1.2", "node-a");
    let extra = documents(&[
        String::new(),
        service("empty", "10.96.0.12", HTTP, ""),
        service("local", "10.96.0.13", HTTP.on_node_port(30081), local),
        slice("local", HTTP, &ready("10.244.1.2")),
        service("quiet", "10.96.0.14", DNS.on_node_port(30053), nodeport),
        service("both", "10.96.0.15", HTTP.on_node_port(30082), &both),
        slice(
            "both",
            HTTP,
            &(on_this_node.clone() + &ready_on("10.244.1.3", "node-b")),
        ),
        service("sticky", "10.96.0.16", HTTP.on_node_port(30083), &sticky),
        slice(
            "sticky",
            HTTP,
            &(on_this_node + &ready_on("10.244.1.3", "node-a")),
        ),
    ]);
    base.replace(
        "  clusterIP: 10.96.0.10\n",
        "  type: NodePort\n  clusterIP: 10.96.0.10\n",
    )
    .replace("targetPort: 8080}", "targetPort: 8080, nodePort: 30080}")
        + &extra
}

/// The pods that answer `count` connections from the node to `to`, each named once.
async fn answering(to: SocketAddr, count: usize) -> std::collections::BTreeSet<String> {
    let mut pods = std::collections::BTreeSet::new();
    for _ in 0..count {
        pods.insert(greeting(to).await.1);
    }
    pods
}

/// The first line a blocking client in namespace `ns` reads from `to`, or its connect error.
fn greeting_from(ns: &str, to: SocketAddr) -> std::io::Result<String> {
    kube_proxy_rs::netlink::netns::run_in(Some(ns), || {
        let stream = std::net::TcpStream::connect_timeout(&to, STEP)?;
        stream.set_read_timeout(Some(STEP))?;
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stream), &mut line)?;
        Ok(line.trim_end().to_owned())
    })
}

/// [`greeting_from`], from the client address `source`.
fn greeting_from_source(ns: &str, source: &str, to: SocketAddr) -> std::io::Result<String> {
    kube_proxy_rs::netlink::netns::run_in(Some(ns), || {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        socket.bind(&addr(&format!("{source}:0")).into())?;
        socket.connect_timeout(&to.into(), STEP)?;
        let stream = std::net::TcpStream::from(socket);
        stream.set_read_timeout(Some(STEP))?;
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stream), &mut line)?;
        Ok(line.trim_end().to_owned())
    })
}

/// The answer of a blocking UDP client in namespace `ns` that sends `hi` to `to`: the
/// reply, or the error (a refusal arrives as ICMP port unreachable: `ConnectionRefused`).
fn udp_from(ns: &str, to: SocketAddr) -> std::io::Result<String> {
    kube_proxy_rs::netlink::netns::run_in(Some(ns), || {
        let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
        socket.connect(to)?;
        socket.set_read_timeout(Some(STEP))?;
        socket.send(b"hi")?;
        let mut buf = [0u8; 64];
        let n = socket.recv(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    })
}

/// A TCP connect from the node to `to`: refused at once, as if nothing listened there.
async fn refused_from_the_node(to: SocketAddr) {
    let answer = timeout(STEP, TcpStream::connect(to))
        .await
        .unwrap_or_else(|_| panic!("{to}: an answer in time"));
    assert_eq!(
        answer.map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{to} from the node"
    );
}

/// The node: its address 192.168.50.1 is on one end of a veth pair, whose other end is in a
/// client namespace (192.168.50.2, routed through the node), so the client's packets pass
/// prerouting and the node's own pass output; the ClusterIPs (on no interface) are routed to
/// the veth; a pod listens on 10.244.1.2 (on `lo`); forwarding is on.
#[test]
fn redirect_rules_send_cluster_ip_and_node_port_traffic_to_the_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let client = relay_pods::host::NetNs::new("kprs-client");
    in_netns(
        |ns| {
            // The ClusterIPs are routed back out of the interface they came in on, for which
            // the node would send the client ICMP redirects; those share the client's ICMP
            // rate limit with the port unreachable errors the test expects.
            for conf in ["all", "default"] {
                ns.output(
                    "sysctl",
                    &["-qw", &format!("net.ipv4.conf.{conf}.send_redirects=0")],
                );
            }
            for args in [
                &["addr", "add", "10.244.1.2/32", "dev", "lo"][..],
                &["addr", "add", "10.244.1.3/32", "dev", "lo"],
                &[
                    "link",
                    "add",
                    "veth-n",
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "veth-c",
                    "netns",
                    &client.name,
                ],
                &["addr", "add", "192.168.50.1/24", "dev", "veth-n"],
                &["link", "set", "veth-n", "up"],
                &["route", "add", "10.96.0.0/16", "dev", "veth-n"],
            ] {
                ns.output("ip", args);
            }
            // As on every Kubernetes node: a ClusterIP that is not redirected (no endpoint) is
            // routed on, and refused in the forward hook.
            ns.output("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
            for args in [
                &["addr", "add", "192.168.50.2/24", "dev", "veth-c"][..],
                &["addr", "add", "192.168.50.3/24", "dev", "veth-c"],
                &["link", "set", "veth-c", "up"],
                &["route", "add", "default", "via", "192.168.50.1"],
            ] {
                client.output("ip", args);
            }
        },
        || async {
            pod("10.244.1.2:8080", "a").await;
            pod("10.244.1.3:8080", "b").await;
            udp_pod("10.244.1.2:5353", "a").await;
            let range = PortRange::parse("30100-30120").unwrap();
            let bind = "0.0.0.0".parse().unwrap();
            let backend = kube_proxy_rs::nft::backend::for_encoder(
                kube_proxy_rs::config::NftablesEncoder::Netlink,
                None,
            );
            let settings = redirect::Settings {
                bind,
                node_ports: NodePortAddresses {
                    all: true,
                    ..NodePortAddresses::default()
                },
                detect_local: DetectLocal::None,
            };
            let mut dp = UserspaceDataplane::new(Settings::default(), range, bind).with_redirect(
                backend,
                settings,
                Drift::new(),
            );
            let none = Changes::default();
            let snap = snapshot(dir.path(), &with_node_port_and_empty(&["10.244.1.2"]));
            dp.sync(&snap, &none, true).expect("first sync");
            let again = dp.sync(&snap, &none, true).expect("a full sync");
            assert_eq!(
                operations(&again),
                0,
                "the table read back from the kernel is the one planned"
            );

            // From the node itself (output).
            let (_, line) = greeting(addr("10.96.0.10:80")).await;
            assert_eq!(line, "a", "the ClusterIP reaches the pod through the relay");
            let (_, line) = greeting(addr("192.168.50.1:30080")).await;
            assert_eq!(line, "a", "the NodePort on the node's address too");
            let started = tokio::time::Instant::now();
            let refused = timeout(STEP, TcpStream::connect(addr("10.96.0.12:80")))
                .await
                .expect("an answer in time");
            assert_eq!(
                refused.map(|_| ()).unwrap_err().kind(),
                std::io::ErrorKind::ConnectionRefused
            );
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "refused at once"
            );
            // A port the Service does not define is refused at once, as one without endpoints.
            refused_from_the_node(addr("10.96.0.10:81")).await;
            // UDP to a NodePort without endpoints: the send goes out, and the port is found
            // unreachable (ICMP), as a socket sees a closed port; not EPERM at the send.
            let udp = UdpSocket::bind("0.0.0.0:0").await.unwrap();
            udp.connect(addr("192.168.50.1:30053")).await.unwrap();
            udp.send(b"hi").await.expect("the datagram is sent");
            let mut buf = [0u8; 64];
            let answer = timeout(STEP, udp.recv(&mut buf))
                .await
                .expect("an answer in time");
            assert_eq!(
                answer.map(|_| ()).unwrap_err().kind(),
                std::io::ErrorKind::ConnectionRefused,
                "UDP from the node to a NodePort without endpoints"
            );
            let (_, line) = greeting(addr("192.168.50.1:30081")).await;
            assert_eq!(
                line, "a",
                "external Local without a local endpoint: the node goes to the cluster's"
            );

            // Both policies Local: the ClusterIP keeps to this node's endpoint; the node's own
            // traffic to the NodePort reaches every endpoint (the short-circuit holds although
            // a local endpoint exists).
            let both = |port| SocketAddr::new("192.168.50.1".parse().unwrap(), port);
            assert_eq!(
                answering(addr("10.96.0.15:80"), 4).await,
                ["a".to_owned()].into()
            );
            assert_eq!(
                answering(both(30082), 4).await,
                ["a".to_owned(), "b".to_owned()].into(),
                "external Local from the node: every endpoint"
            );

            // From another namespace (prerouting).
            let name = client.name.clone();
            let outside = tokio::task::spawn_blocking(move || {
                (
                    greeting_from(&name, addr("10.96.0.10:80")),
                    greeting_from(&name, addr("192.168.50.1:30080")),
                    greeting_from(&name, addr("10.96.0.12:80")),
                    greeting_from(&name, addr("192.168.50.1:30081")),
                    greeting_from(&name, addr("10.96.0.10:81")),
                    udp_from(&name, addr("192.168.50.1:30053")),
                )
            });
            let (cluster_ip, node_port, empty, local, undefined, quiet) = outside.await.unwrap();

            // One affinity per service port, whatever the frontend: a client the ClusterIP's
            // listener sent to `a` goes to `a` through the NodePort too, whose listener (the
            // local endpoints') would send it to `b` in turn.
            let name = client.name.clone();
            let sticky = tokio::task::spawn_blocking(move || {
                let node_port = both(30083);
                [
                    greeting_from_source(&name, "192.168.50.3", node_port),
                    greeting_from_source(&name, "192.168.50.2", addr("10.96.0.16:80")),
                    greeting_from_source(&name, "192.168.50.2", node_port),
                ]
                .map(|r| r.expect("sticky answers"))
            });
            assert_eq!(
                sticky.await.unwrap(),
                ["a", "a", "a"],
                "the second client stays on its pod through either frontend"
            );
            let name = client.name.clone();
            let from_outside = tokio::task::spawn_blocking(move || {
                (0..4)
                    .map(|_| greeting_from(&name, both(30082)))
                    .collect::<std::io::Result<std::collections::BTreeSet<String>>>()
            });
            assert_eq!(
                from_outside
                    .await
                    .unwrap()
                    .expect("external Local from outside"),
                ["a".to_owned()].into(),
                "external Local from outside: this node's endpoint only"
            );
            assert_eq!(
                undefined.unwrap_err().kind(),
                std::io::ErrorKind::ConnectionRefused,
                "a ClusterIP port the Service does not define, from outside"
            );
            assert_eq!(
                quiet.unwrap_err().kind(),
                std::io::ErrorKind::ConnectionRefused,
                "UDP to a NodePort without endpoints, from outside"
            );
            assert_eq!(cluster_ip.expect("ClusterIP from outside"), "a");
            assert_eq!(node_port.expect("NodePort from outside"), "a");
            let name = client.name.clone();
            let dns = tokio::task::spawn_blocking(move || udp_from(&name, addr("10.96.0.11:53")));
            assert_eq!(
                dns.await.unwrap().expect("UDP ClusterIP from outside"),
                "a:hi"
            );
            assert_eq!(
                empty.unwrap_err().kind(),
                std::io::ErrorKind::ConnectionRefused
            );
            assert_eq!(
                local.unwrap_err().kind(),
                std::io::ErrorKind::TimedOut,
                "external Local without a local endpoint: dropped from outside"
            );

            // A listener's own port, dialled without a Service address, is refused from
            // outside and from the node (its address and loopback), TCP and UDP alike: only
            // the redirect leads to a listener.
            let listeners: Vec<(SocketAddr, bool)> = dp
                .listening()
                .map(|(k, at)| (at, k.port.protocol == kube_proxy_rs::cluster::Protocol::Udp))
                .collect();
            assert!(listeners.iter().any(|l| l.1) && listeners.iter().any(|l| !l.1));
            for &(at, udp) in &listeners {
                let node = SocketAddr::new("192.168.50.1".parse().unwrap(), at.port());
                let name = client.name.clone();
                let direct = tokio::task::spawn_blocking(move || {
                    if udp {
                        udp_from(&name, node)
                    } else {
                        greeting_from(&name, node)
                    }
                });
                assert_eq!(
                    direct.await.unwrap().map_err(|e| e.kind()),
                    Err(std::io::ErrorKind::ConnectionRefused),
                    "{node} (a listener's port) from outside"
                );
                if !udp {
                    refused_from_the_node(node).await;
                    refused_from_the_node(SocketAddr::new([127, 0, 0, 1].into(), at.port())).await;
                }
            }
            assert_eq!(greeting(addr("10.96.0.10:80")).await.1, "a", "still served");

            // The endpoint goes: the ClusterIP is refused by the rules, not left to hang.
            let gone = snapshot(dir.path(), &with_node_port_and_empty(&[]));
            dp.sync(&gone, &none, false).expect("endpoint removal sync");
            let refused = timeout(STEP, TcpStream::connect(addr("10.96.0.10:80")))
                .await
                .expect("an answer in time");
            assert!(refused.is_err(), "no endpoint left: refused");
            let tables = dp.redirect_tables().expect("applied");
            assert!(tables[0].objects() > 0);

            // `--cleanup` takes the rules away with our table: the ClusterIP, served again,
            // no longer reaches the listener.
            dp.sync(&snap, &none, false).expect("endpoint back");
            assert_eq!(greeting(addr("10.96.0.10:80")).await.1, "a");
            let report = cleanup::cleanup(&Launcher::here());
            assert!(
                report.count(&removed_table("ip kube-proxy-rs")) == 1,
                "{report:?}"
            );
            let unrouted = timeout(STEP, TcpStream::connect(addr("10.96.0.10:80"))).await;
            assert!(
                unrouted.is_err() || unrouted.is_ok_and(|c| c.is_err()),
                "nothing sends the ClusterIP to the listener any more"
            );
        },
    );
}
