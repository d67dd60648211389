//! The world of `tests/ebpf_tc.rs`: the three namespaces and their links, the cluster the
//! node runs, the pods, the client's probes, and the proxy's steps on the node (open, sync,
//! explain), so the test file reads as the scenario it walks.

use std::io::{BufRead as _, BufReader, ErrorKind};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::Duration;

use kube_proxy_rs::cli::explain::Explanation;
use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::{Changes, Features, Snapshot};
use kube_proxy_rs::dataplane::Dataplane as _;
use kube_proxy_rs::dataplane::ebpf::backend::{Kernel, Settings};
use kube_proxy_rs::dataplane::ebpf::{EbpfDataplane, tc};
use kube_proxy_rs::netlink::netns::run_in;

use crate::relay_pods::host::NetNs;

/// How long a probe waits for an answer: a dropped packet shows as a timeout. Above the first
/// SYN retransmission (1 s): an ICMP error that arrives while `connect()` still holds the
/// socket is only a soft error, and the retransmission's answers the call.
pub const WAIT: Duration = Duration::from_secs(3);

/// Builds the three namespaces and their links.
pub fn wire(node: &NetNs, client: &NetNs, pods: &NetNs) {
    node.veth_to("ext0", client);
    node.veth_to("pods0", pods);
    for (ns, dev, addrs) in [
        (node, "ext0", &["192.168.60.1/24", "fd00:60::1/64"][..]),
        (node, "lo", &["10.244.1.1/32", "fd00:244::1/128"][..]),
        (node, "pods0", &["fe80::1/64"][..]),
        (
            client,
            "eth0",
            &["192.168.60.2/24", "192.168.60.3/24", "fd00:60::2/64"][..],
        ),
        (
            pods,
            "eth0",
            &["10.244.1.2/24", "10.244.1.3/24", "fd00:244::2/128"][..],
        ),
    ] {
        for a in addrs {
            ns.output("ip", &["addr", "add", a, "dev", dev, "nodad"]);
        }
        ns.output("ip", &["link", "set", dev, "up"]);
    }
    client.output("ip", &["route", "add", "default", "via", "192.168.60.1"]);
    client.output(
        "ip",
        &["-6", "route", "add", "default", "via", "fd00:60::1"],
    );
    // The node reaches the pods over pods0 from its `lo` addresses; the pods reach the node
    // by its `lo` address (IPv4: answered on any interface) or pods0's link-local one.
    for route in [
        "10.244.1.0/24 dev pods0 src 10.244.1.1",
        "fd00:244::/64 dev pods0 src fd00:244::1",
    ] {
        let args: Vec<&str> = ["route", "add"]
            .into_iter()
            .chain(route.split(' '))
            .collect();
        node.output("ip", &args);
    }
    pods.output("ip", &["route", "add", "default", "via", "10.244.1.1"]);
    pods.output(
        "ip",
        &[
            "-6", "route", "add", "default", "via", "fe80::1", "dev", "eth0",
        ],
    );
    node.output("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    node.output("sysctl", &["-qw", "net.ipv6.conf.all.forwarding=1"]);
}

/// The cluster: node-a at 192.168.60.1. NodePorts (TCP unless named): 30080 Cluster over
/// a and b; 30081 Local over a; 30082 Local with its endpoint on node-b; 30083 no endpoints;
/// UDP 30053 Cluster over `dns`:5353 (a or b); UDP 30084 no endpoints. LoadBalancer 203.0.113.10:80 over
/// a and b, sources 192.168.60.2/32 only. IPv6: NodePort 30086 Cluster over a6
/// ([fd00:244::2]:8080) on node-a's fd00:60::1; 30087 without endpoints. NodePort 30088
/// Cluster over a and b with ClientIP affinity.
pub fn manifests(dns: &str) -> String {
    let ep = |ip: &str, node: &str| {
        format!(
            "  - addresses: [\"{ip}\"]\n    conditions: {{ready: true}}\n    nodeName: {node}\n"
        )
    };
    let service = |name: &str, n: u8, proto: &str, port: u16, node_port: u16, spec: &str| {
        format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\n\
             spec:\n  type: NodePort\n  clusterIP: \"10.96.0.{n}\"\n  clusterIPs: [\"10.96.0.{n}\"]\n{spec}  \
             ports: [{{name: p, protocol: {proto}, port: {port}, targetPort: {port}, nodePort: {node_port}}}]\n"
        )
    };
    let slice = |name: &str, proto: &str, port: u16, eps: &str| {
        format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-1\n  \
             namespace: default\n  labels: {{kubernetes.io/service-name: {name}}}\n\
             addressType: IPv4\nports: [{{name: p, protocol: {proto}, port: {port}}}]\n\
             endpoints:\n{eps}"
        )
    };
    let both = [ep("10.244.1.2", "node-a"), ep("10.244.1.3", "node-a")].concat();
    let local = "  externalTrafficPolicy: Local\n";
    [
        "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n\
         status: {addresses: [{type: InternalIP, address: 192.168.60.1}, \
         {type: InternalIP, address: \"fd00:60::1\"}]}\n"
            .to_string(),
        service("web6", 17, "TCP", 8080, 30086, "").replace("\"10.96.0.17\"", "\"fd00:96::17\""),
        slice("web6", "TCP", 8080, &ep("fd00:244::2", "node-a")).replace("IPv4", "IPv6"),
        service("empty6", 18, "TCP", 8080, 30087, "").replace("\"10.96.0.18\"", "\"fd00:96::18\""),
        service("cluster", 10, "TCP", 8080, 30080, ""),
        slice("cluster", "TCP", 8080, &both),
        service("local", 11, "TCP", 8080, 30081, local),
        slice("local", "TCP", 8080, &ep("10.244.1.2", "node-a")),
        service("elsewhere", 12, "TCP", 8080, 30082, local),
        slice("elsewhere", "TCP", 8080, &ep("10.244.1.2", "node-b")),
        service("empty", 13, "TCP", 8080, 30083, ""),
        service("dns", 14, "UDP", 5353, 30053, ""),
        slice("dns", "UDP", 5353, &ep(dns, "node-a")),
        service("empty-udp", 15, "UDP", 5353, 30084, ""),
        service(
            "lb",
            16,
            "TCP",
            8080,
            30085,
            "  loadBalancerSourceRanges: [192.168.60.2/32]\n",
        )
        .replace("type: NodePort", "type: LoadBalancer")
        .replace("port: 8080, targetPort", "port: 80, targetPort")
            + "status: {loadBalancer: {ingress: [{ip: 203.0.113.10}]}}\n",
        slice("lb", "TCP", 8080, &both),
        service("sticky", 19, "TCP", 8080, 30088, "").replace(
            "spec:\n",
            "spec:\n  sessionAffinity: ClientIP\n  \
                 sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}\n",
        ),
        slice("sticky", "TCP", 8080, &both),
    ]
    .concat()
}

/// The cluster with the UDP Service's endpoint at `dns`.
pub fn snapshot(dir: &Path, dns: &str) -> Snapshot {
    std::fs::write(dir.join("cluster.yaml"), manifests(dns)).expect("write manifests");
    let loaded = load_manifests(dir, "node-a", Features::default()).expect("manifests load");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    loaded.snapshot
}

/// The pods' servers, on a runtime on a thread inside the pods' namespace; stopped (sockets
/// closed) on drop.
pub struct Pods {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pods {
    pub fn start(ns: &NetNs) -> Pods {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, is_ready) = std::sync::mpsc::channel();
        let name = ns.name.clone();
        let thread = std::thread::spawn(move || {
            run_in(Some(&name), || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(async move {
                    tcp_pod("10.244.1.2:8080", "a").await;
                    tcp_pod("10.244.1.3:8080", "b").await;
                    tcp_pod("[fd00:244::2]:8080", "a6").await;
                    udp_pod("10.244.1.2:5353", "dns-a").await;
                    udp_pod("10.244.1.3:5353", "dns-b").await;
                    ready.send(()).expect("test waits");
                    let _ = stopped.await;
                });
                Ok(())
            })
            .expect("pods");
        });
        is_ready.recv().expect("pods listening");
        Pods {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Pods {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Greets each connection with "`name` from `peer address`", then echoes lines.
pub async fn tcp_pod(at: &str, name: &'static str) {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind(at).await.expect("bind pod");
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                write
                    .write_all(format!("{name} from {}\n", peer.ip()).as_bytes())
                    .await?;
                let mut lines = tokio::io::BufReader::new(read).lines();
                while let Some(line) = lines.next_line().await? {
                    write.write_all(format!("{line}\n").as_bytes()).await?;
                }
                Ok::<_, std::io::Error>(())
            });
        }
    });
}

/// Answers each datagram with "`name` from `peer address`".
pub async fn udp_pod(at: &str, name: &'static str) {
    let socket = tokio::net::UdpSocket::bind(at).await.expect("bind udp pod");
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((_, from)) = socket.recv_from(&mut buf).await {
            let reply = format!("{name} from {}", from.ip());
            let _ = socket.send_to(reply.as_bytes(), from).await;
        }
    });
}

pub fn addr(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

/// A TCP connection from the client namespace, from `from` when given.
pub fn connect(from: Option<&str>, to: SocketAddr) -> std::io::Result<TcpStream> {
    let domain = if to.is_ipv6() {
        socket2::Domain::IPV6
    } else {
        socket2::Domain::IPV4
    };
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
    if let Some(from) = from {
        socket.bind(&SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0).into())?;
    }
    socket.connect_timeout(&to.into(), WAIT)?;
    let stream = TcpStream::from(socket);
    stream.set_read_timeout(Some(WAIT))?;
    Ok(stream)
}

/// One TCP probe: the greeting, or what went wrong.
pub fn tcp(from: Option<&str>, to: &str) -> String {
    match connect(from, addr(to)) {
        Ok(stream) => {
            let mut line = String::new();
            match BufReader::new(stream).read_line(&mut line) {
                Ok(_) => line.trim().to_owned(),
                Err(e) => format!("read error {e}"),
            }
        }
        Err(e) => outcome(&e),
    }
}

/// One UDP probe from a new socket: the answer, or what went wrong.
pub fn udp(to: &str) -> String {
    let s = UdpSocket::bind("0.0.0.0:0").expect("bind");
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.connect(addr(to)).expect("connect");
    s.send(b"ping").expect("send");
    let mut buf = [0u8; 512];
    match s.recv(&mut buf) {
        Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        Err(e) => outcome(&e),
    }
}

pub fn outcome(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::ConnectionRefused => "refused".to_owned(),
        ErrorKind::TimedOut | ErrorKind::WouldBlock => "timed out".to_owned(),
        _ => format!("error {e}"),
    }
}

/// Runs the probes of `f` in the client's namespace.
pub fn from_client<T: Send>(client: &NetNs, f: impl FnOnce() -> T + Send) -> T {
    run_in(Some(&client.name), || Ok(f())).expect("client namespace")
}

/// Loads and attaches (again) in the node's namespace, where the interfaces are.
pub fn open_on_node(node: &NetNs, settings: &Settings) -> (Kernel, Vec<String>) {
    run_in(Some(&node.name), || {
        let mut kernel = Kernel::open(settings).expect("load and attach");
        let ifaces = tc::node_interfaces().expect("interfaces");
        let names: Vec<String> = ifaces.iter().map(|i| i.name.clone()).collect();
        assert_eq!(
            names,
            ["ext0", "pods0"],
            "the interfaces with node addresses"
        );
        let pins = kernel.attach_external(&ifaces).expect("attach tc");
        assert_eq!(pins.len(), 4, "{pins:?}");
        Ok((kernel, pins))
    })
    .expect("node namespace")
}

/// The endpoints an explanation reaches.
pub fn reached(e: &Explanation) -> Vec<String> {
    e.outcome
        .endpoints
        .iter()
        .map(|s| s.endpoint.to_string())
        .collect()
}

/// A full sync, in the node's namespace as the proxy runs (each sync also attaches the tc
/// programs to interfaces that gained an address).
pub fn sync_on_node(node: &NetNs, dp: &mut EbpfDataplane<Kernel>, snap: &Snapshot) {
    run_in(Some(&node.name), || {
        dp.sync(snap, &Changes::default(), true).expect("sync");
        Ok(())
    })
    .expect("node namespace");
}
